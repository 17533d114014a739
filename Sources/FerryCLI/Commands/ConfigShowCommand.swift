import FerryCore
import FerryRuntime

/// `ferry config show`: the config in force, every key with its value, defaults filled in.
struct ConfigShowCommand: Command {
    static let words = ["config", "show"]
    static let summary = "Print the effective config: every key with the value in force, defaults filled in, secrets redacted."
    static let usage = "config show [--config F] [--session ID]"
    static let details = """
        The output is itself a config (ferry reads it back to the same settings): [agent], then each
        session (or the one --session names) with every key it takes. Keys that are not set are
        shown commented out, with what that means; keys a session does not take (push keys in a pull
        session, s3-* without an s3:// remote) are left out. Relative paths are shown resolved. For
        an S3 session without s3-credentials, the s3-credentials line names the source the AWS
        chain takes its credentials from (found without the network: a source that hands out
        temporary credentials is named, not asked), and s3-region the region in force. Secrets
        never appear: credentials live in the files the *-file and s3-credentials keys name, or
        in the AWS sources, which are named, never printed.
        """
    static let options = [CommonOptions.config, CommonOptions.session, CommonOptions.help]

    let configPath: String?
    let session: String?

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
        session = arguments.value("--session")
    }

    func run() throws(FerryError) -> ExitCode {
        let config = try ConfigLoader.load(path: ConfigLoader.resolvePath(configPath))
        for w in config.warnings { Console.warning(w) }
        let sessions = try selectSessions(config, names: session.map { [$0] } ?? [])
        var text = "# ferry \(FerryVersion.string): the effective config of \(config.path)\n"
        // What unset backend keys mean here (where S3 credentials come from), found without the network.
        var resolved: [String: [String: String]] = [:]
        for s in sessions { resolved[s.name] = Backends.describe(s) }
        var notes: [String: [String: String]] = [:]
        for s in sessions { if let note = ConfigShowCommand.keySetInForce(s, state: config.agent.state) { notes[s.name] = ["trusted-keys": note] } }
        text += ConfigText.render(config, sessions: sessions, resolved: resolved, notes: notes)
        Console.out(String(text.dropLast()))
        return .inSync
    }

    /// For a pull whose state moved on from the config's `trusted-keys` by an in-band rotation:
    /// the key set in force, as its state keeps it (nil: the config's set is the one in force).
    static func keySetInForce(_ s: SessionConfig, state: String) -> String? {
        guard s.direction == .pull, !s.trustedKeys.isEmpty else { return nil }
        let set = KeyChain.trusted(by: s, state: state)
        guard set.version > 1 else { return nil }
        return "in force: key set \(set.version) (rotated in band from these), trust-threshold \(set.threshold) of "
               + set.keys.map(\.description).joined(separator: " ")
    }
}

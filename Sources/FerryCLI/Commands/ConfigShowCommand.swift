import Glibc
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
        session, s3-* without an s3:// remote) are left out. Relative paths are shown resolved.
        Secrets never appear: credentials live in the files the *-file and s3-credentials keys
        name, which are not printed, and of AWS_* credentials from the environment only the access
        key's first and last four characters are shown.
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
        if sessions.contains(where: { $0.remote.scheme == .s3 && $0.s3.credentials == nil }) {
            text += "# S3 sessions without s3-credentials sign with \(Self.environmentCredentials())\n"
        }
        text += ConfigText.render(config, sessions: sessions)
        Console.out(String(text.dropLast()))
        return .inSync
    }

    /// What the environment holds for S3, redacted: the access key shortened, the secret never shown.
    static func environmentCredentials() -> String {
        guard let id = getenv("AWS_ACCESS_KEY_ID").map({ String(cString: $0) }), !id.isEmpty else {
            return "AWS_ACCESS_KEY_ID from the environment (not set here)"
        }
        let shown = id.count > 12 ? "\(id.prefix(4))…\(id.suffix(4))" : "…"
        let secret = getenv("AWS_SECRET_ACCESS_KEY") != nil ? "AWS_SECRET_ACCESS_KEY set (redacted)" : "AWS_SECRET_ACCESS_KEY not set"
        return "AWS_ACCESS_KEY_ID \(shown) from the environment, \(secret)"
    }
}

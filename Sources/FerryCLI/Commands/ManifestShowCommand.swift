import Glibc
import FerryCore
import FerryRuntime

/// `ferry manifest show`: what a published manifest says, for a publisher checking what it put out
/// and an operator checking what a machine is offered.
struct ManifestShowCommand: Command {
    static let words = ["manifest", "show"]
    static let summary = "Show what a published manifest says: version, expiry, signers, key set, rollout, counts."
    static let usage = "manifest show DIR|FILE|URL [--trusted-key K]... [--json] | manifest show [--config F] --session ID [--json]"
    static let details = """
        Reads a manifest as a pull would (a format-2 tree's objects fetched and each checked against
        its name) and prints its version, format and layout, when it was generated and when it
        expires, every signature with whether it verified and whether it is trusted, the key set it is
        signed under, a phased rollout's share and the release the other machines stay on, and its
        files, bytes and indexed files. An expired or untrusted manifest is shown, not refused.
        Nothing is written. Give a directory (its manifest.json), a manifest file, an http(s):// or
        file:// URL with --trusted-key for each key to judge the signatures by, or a session of the
        config with --session (its remote, credentials and trusted-keys: the way to read an s3:// or
        sftp:// remote). Exit 0 when shown, 4 when the manifest cannot be read or is malformed.
        """
    static let options = [CommonOptions.config, OptionSpec("--session", value: "ID", "read this session's remote manifest"),
                          OptionSpec("--trusted-key", value: "K", repeatable: true, "judge signatures by this key (ed25519:BASE64; repeat for more)"),
                          CommonOptions.json, CommonOptions.help]

    let source: String?
    let configPath: String?
    let session: String?
    let keys: [PublicKey]
    let json: Bool
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...1, command: Self.name, what: "DIR, FILE or URL")
        source = arguments.positionals.first
        configPath = arguments.value("--config")
        session = arguments.value("--session")
        json = arguments.has("--json")
        var keys: [PublicKey] = []
        for text in arguments.all("--trusted-key") {
            guard let key = PublicKey(text: text) else {
                throw .usage("ferry manifest show: --trusted-key '\(Printable.name(text))' is not a public key",
                             hint: "give it as ed25519:BASE64, as ferry key public prints it")
            }
            keys.append(key)
        }
        self.keys = keys
        guard (source == nil) != (session == nil) else {
            throw .usage("ferry manifest show: give a DIR, FILE or URL, or --session ID, one of them", hint: "see: ferry help manifest show")
        }
        if session != nil && !keys.isEmpty {
            throw .usage("ferry manifest show: --trusted-key is for a DIR, FILE or URL; a session judges by its trusted-keys")
        }
    }

    func run() throws(FerryError) -> ExitCode {
        let shown: ManifestInspection
        if let session {
            let config = try CommandConfig.load(configPath)
            guard let s = try selectSessions(config, names: [session]).first else { return .usage }
            shown = try ManifestInspection.read(session: s, agent: config.agent, clock: clock)
        } else {
            // A state under /dev/null can never be made: nothing is written (the objects are read
            // into memory only).
            let config = try ConfigParser.parse(try adHocConfig(state: "/dev/null/ferry-manifest-show"), path: "(manifest show)")
            shown = try ManifestInspection.read(session: config.sessions[0], agent: config.agent, clock: clock)
        }
        if json { Console.json(ManifestShowCommand.json(shown)) } else { for line in ManifestShowCommand.lines(shown) { Console.out(line) } }
        return .inSync
    }

    /// A pull session in memory for `source`: its directory or URL as the remote, its file name
    /// as the manifest.
    private func adHocConfig(state: String) throws(FerryError) -> String {
        guard var text = source else { throw .usage("ferry manifest show: nothing to show") }
        if !text.contains("://") {
            var path = text
            if !path.hasPrefix("/") {
                var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                guard getcwd(&buffer, buffer.count) != nil else { throw .localIO("cannot tell the current directory: \(FileSystem.errorText())") }
                path = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) + "/" + path
            }
            var st = stat()
            if stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR { path += "/manifest.json" }
            text = "file://" + path
        }
        guard let slash = text.lastIndex(of: "/"), text.index(after: slash) < text.endIndex,
              text[..<slash].contains("://") else {
            throw .usage("ferry manifest show: '\(Printable.name(text))' does not name a manifest file",
                         hint: "give a directory, a manifest file, or a URL ending in the manifest's name")
        }
        let (remote, manifest) = (String(text[...slash]), String(text[text.index(after: slash)...]))
        let trusted = keys.isEmpty ? "" : "trusted-keys = " + keys.map(\.description).joined(separator: ", ") + "\nrequire-expiry = no\n"
        return "[agent]\nstate = \(state)\n\n[session show]\nremote = \(remote)\nmanifest = \(manifest)\nlocal = \(state)/local\n" + trusted
    }
}

extension ManifestShowCommand {
    /// The text form: a line per fact.
    static func lines(_ m: ManifestInspection) -> [String] {
        let manifest = m.manifest
        var out = ["manifest   \(Printable.name(m.url))"]
        var version = manifest.version.map { "version    \($0)" } ?? "version    none (SHA256SUMS)"
        version += ", \(manifest.format.rawValue), layout \(manifest.layout.rawValue)"
        out.append(version)
        if let generated = manifest.generated { out.append("generated  \(LocalTime.text(generated))") }
        out.append("expires    " + (manifest.expires.map { LocalTime.text($0) + (m.expired ? " (expired)" : "") } ?? "never"))
        let signers = m.signers.map { s in
            s.key.description + (!s.valid ? " (signature does not verify)" : m.trusted.isEmpty ? "" : s.trusted ? " (trusted)" : " (not trusted here)")
        }
        out.append("signed by  " + (signers.isEmpty ? "nobody (unsigned)" : signers.joined(separator: ", ")))
        if !signers.isEmpty && m.trusted.isEmpty { out.append("           (no trusted keys given: the signatures vouch for nothing here)") }
        out.append("key set    " + (manifest.keySet.map { "set \($0)" } ?? "set 1 (the keys a session lists in trusted-keys)"))
        if let rollout = manifest.rollout {
            out.append("rollout    version \(manifest.version ?? 0) goes to \(rollout.percent)% of machines; the others stay on "
                       + "version \(rollout.previous.version)")
        }
        out.append("files      \(Units.formatCount(manifest.entries.count)) \(Plural.noun(manifest.entries.count, "file")), "
                   + Units.formatBytes(m.bytes) + (m.indexed > 0 ? ", \(Units.formatCount(m.indexed)) indexed for deltas" : ""))
        return out
    }

    /// The JSON form: one object.
    static func json(_ m: ManifestInspection) -> String {
        let manifest = m.manifest
        var f: [String] = ["\"url\":\(JSONText.quote(m.url))", "\"version\":\(manifest.version.map(String.init) ?? "null")",
                           "\"format\":\(JSONText.quote(manifest.format.rawValue))", "\"layout\":\(JSONText.quote(manifest.layout.rawValue))",
                           "\"generated\":\(manifest.generated.map { JSONText.quote($0.rfc3339) } ?? "null")",
                           "\"expires\":\(manifest.expires.map { JSONText.quote($0.rfc3339) } ?? "null")", "\"expired\":\(m.expired)"]
        f.append("\"signers\":[" + m.signers.map { s in
            "{\"key\":\(JSONText.quote(s.key.description)),\"valid\":\(s.valid),\"trusted\":\(s.trusted)}"
        }.joined(separator: ",") + "]")
        f.append("\"key_set\":\(manifest.keySet ?? 1)")
        f.append("\"rollout\":" + (manifest.rollout.map { "{\"percent\":\($0.percent),\"previous_version\":\($0.previous.version)}" } ?? "null"))
        f.append("\"files\":\(manifest.entries.count)")
        f.append("\"bytes\":\(m.bytes)")
        f.append("\"indexed_files\":\(m.indexed)")
        return "{" + f.joined(separator: ",") + "}"
    }
}


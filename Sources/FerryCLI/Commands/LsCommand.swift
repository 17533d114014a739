import FerryCore
import FerryRuntime

/// `ferry ls`: what a session's remote manifest lists, without syncing.
struct LsCommand: Command {
    static let words = ["ls"]
    static let summary = "List what the remote's manifest lists (path, size, mtime, mode, hash), without syncing."
    static let usage = "ls [--config F] [--session ID] [PATH] [--json]"
    static let details = """
        The manifest is read as a sync reads it (format 2 objects fetched, signatures checked against
        trusted-keys, expiry), and nothing is changed: no state is written, nothing is downloaded. PATH
        lists one file, or the files under one directory. Each line: mode, size in bytes, mtime (UTC),
        the first 12 hex digits of the SHA-256, path; a path the session's exclude or include leaves
        out ends with "(excluded)". A SHA256SUMS manifest has no size, mtime or mode: "-" stands for
        them. --json prints one object per file: session, path, size, mtime, mode (octal), sha256,
        version, excluded.

        exit codes: 0 listed · 1 the manifest lists nothing at PATH · 2 usage or config error ·
                    4 the remote cannot be reached, or its manifest is refused (unsigned, expired, malformed)
        """
    static let options = [CommonOptions.config, CommonOptions.session, CommonOptions.json, CommonOptions.help]

    let configPath: String?
    let session: String?
    let path: RelativePath?
    let json: Bool
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...1, command: Self.name, what: "")
        configPath = arguments.value("--config")
        session = arguments.value("--session")
        json = arguments.has("--json")
        if let text = arguments.positionals.first {
            var trimmed = Substring(text)
            while trimmed.hasSuffix("/") && trimmed.count > 1 { trimmed = trimmed.dropLast() }
            while trimmed.hasPrefix("./") { trimmed = trimmed.dropFirst(2) }
            if trimmed.isEmpty || trimmed == "." || trimmed == "/" {
                path = nil
            } else {
                do { path = try RelativePath(validating: String(trimmed)) } catch {
                    throw .usage("ferry ls: '\(Printable.name(text))' is not a path a manifest can list: \(error)", hint: "give it relative to the session's root, like css/ or css/site.css")
                }
            }
        } else {
            path = nil
        }
    }

    func run() throws(FerryError) -> ExitCode {
        let config = try CommandConfig.load(configPath)
        for w in config.warnings where !json { Console.warning(w) }
        let sessions = try selectSessions(config, names: session.map { [$0] } ?? [])
        var codes: [ExitCode] = []
        for (n, s) in sessions.enumerated() {
            let listing: RemoteListing
            do { listing = try RemoteListing.read(session: s, agent: config.agent, under: path, clock: clock) } catch {
                Console.error(FerryError(error.category, "session '\(s.name)': \(error.message)", hint: error.hint))
                codes.append(error.exitCode)
                continue
            }
            if json {
                for e in listing.entries { Console.json(jsonLine(e, listing, excluded: !s.filter.admits(e.path))) }
            } else {
                if sessions.count > 1 && n > 0 { Console.out("") }
                var head = "session \(s.name): \(listing.url)"
                if let v = listing.version { head += ", version \(v)" }
                head += ", \(Plural.count(listing.listed, "file"))"
                if let key = listing.signer { head += ", signed by \(key)" }
                if let path { head += "; \(Plural.count(listing.entries.count, "file")) at \(path)" }
                Console.out(head)
                let width = listing.entries.map { $0.size.map { String($0).count } ?? 1 }.max() ?? 1
                for e in listing.entries {
                    let size = e.size.map(String.init) ?? "-"
                    var line = (e.mode.map(Self.modeText) ?? "-").padding(to: 10) + "  "
                    line += String(repeating: " ", count: max(0, width - size.count)) + size + "  "
                    line += (e.mtime.map(Self.timeText) ?? "-").padding(to: 20) + "  "
                    line += String(e.sha256.hex.prefix(12)) + "  " + e.path.string
                    if !s.filter.admits(e.path) { line += "  (excluded)" }
                    Console.out(line)
                }
            }
            if path != nil && listing.entries.isEmpty {
                Console.err("ferry: session '\(s.name)': the manifest lists nothing at \(Printable.name(path!.string))")
                codes.append(.someFilesFailed)
            } else {
                codes.append(.inSync)
            }
        }
        return ExitCode.worst(codes)
    }

    private func jsonLine(_ e: ManifestEntry, _ listing: RemoteListing, excluded: Bool) -> String {
        var out = "{\"session\":\(JSONText.quote(listing.session)),\"path\":\(JSONText.quote(e.path.string))"
        if let size = e.size { out += ",\"size\":\(size)" }
        if let mtime = e.mtime { out += ",\"mtime\":\(JSONText.quote(mtime.rfc3339))" }
        if let mode = e.mode { out += ",\"mode\":\"0\(String(mode, radix: 8))\"" }
        out += ",\"sha256\":\"\(e.sha256.hex)\""
        if let v = listing.version { out += ",\"version\":\(v)" }
        out += ",\"excluded\":\(excluded)}"
        return out
    }

    /// `-rw-r--r--`.
    static func modeText(_ mode: UInt32) -> String {
        var out = "-"
        for shift in stride(from: 6, through: 0, by: -3) {
            let bits = (mode >> UInt32(shift)) & 7
            out += (bits & 4 != 0 ? "r" : "-") + (bits & 2 != 0 ? "w" : "-") + (bits & 1 != 0 ? "x" : "-")
        }
        return out
    }

    /// `2026-11-20T08:00:00Z`: to the second, in UTC.
    static func timeText(_ t: Timestamp) -> String { Timestamp(seconds: t.seconds).rfc3339 }
}

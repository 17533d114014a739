/// Parses the INI config (docs/design.md, data-safety rule 15). Pure: it gets the text and the
/// file's path, and returns a `Config` or throws a `FerryError(.usage)` naming the file, the line
/// and the key.
///
/// Syntax: `[agent]`, `[session NAME]`, `key = value`, comments from `#` or `;` at the start of a
/// line or from ` #` after a value. Relative paths are resolved against the config file's directory.
public enum ConfigParser {
    /// The keys of `[agent]` and the keys every session takes, whatever its remote; each backend
    /// declares its own (`BackendDescription.keys`). `config/ferry.conf` documents them all.
    public static let agentKeys = ["state", "transfers", "stop-timeout", "metrics", "metrics-listen", "bwlimit", "network-metered", "log-level", "machine-id", "budget"]
    public static let sessionKeys = [
        "remote", "manifest", "local", "direction", "poll", "delete", "max-delete", "allow-rollback", "allow-empty",
        "max-manifest-size", "mode-mask",
        "ca-file", "basic-auth-file", "bearer-token-file", "connect-timeout", "min-speed", "stall-timeout", "max-duration",
        "retries", "retry-delay", "resource-timeout", "earliest-begin", "session-transfers",
        "on-file-done", "on-session-done", "on-switch-check", "hook-timeout", "verify-interval",
        "discretionary", "window", "require-ac-power", "require-unmetered", "max-load", "min-free-space", "bwlimit", "priority", "budget",
        "conflict", "verify-uploads", "upload-part-size",
        "trusted-keys", "trust-threshold", "require-expiry", "sign-key", "keys-dir", "rollout", "expires", "object-grace", "metadata-grace", "remote-layout", "keep-versions",
        "layout", "keep-generations", "exclude", "include", "delta", "delta-min-size", "seed", "mirrors",
        "report", "report-interval",
    ]
    /// Keys about what a push publishes.
    static let pushKeys = ["verify-uploads", "sign-key", "keys-dir", "rollout", "expires", "object-grace", "metadata-grace", "remote-layout", "keep-versions", "delta-min-size"]
    /// Keys about how a pull keeps its mirror.
    static let pullKeys = ["layout", "keep-generations", "on-switch-check", "require-expiry", "trust-threshold", "delta", "seed", "mirrors"]
    /// Keys whose value is a command line, split into words by `HookCommand` (quotes and all).
    static let hookKeys: Set<String> = ["on-file-done", "on-session-done", "on-switch-check"]
    /// The conditions of a discretionary session: set only with `discretionary = yes`.
    static let discretionKeys = ["window", "require-ac-power", "require-unmetered", "max-load", "min-free-space"]

    /// One `key = value` line of a section.
    struct Line {
        let number: Int
        let key: String
        let value: String
    }

    /// A section as read: its header and its lines, each key once.
    struct Section {
        let number: Int
        let header: String
        let sessionName: String?
        var lines: [Line] = []

        func find(_ key: String) -> Line? { lines.first { $0.key == key } }
    }

    /// `backends`: the kinds of remote there are (each declares its schemes and keys).
    /// `allowingNoSession`: a config without a `[session NAME]` is taken (an agent started before
    /// its sessions are written waits for a reload); other readers need a session and say so.
    public static func parse(_ text: String, path: String, backends: [BackendDescription], allowingNoSession: Bool = false) throws(FerryError) -> Config {
        let backendKeys = backends.flatMap { $0.keys.map(\.name) }.reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
        let sections = try readSections(text, path: path, sessionKeys: sessionKeys + backendKeys)
        var agent = AgentConfig()
        var sessions: [SessionConfig] = []
        for section in sections {
            let reader = Reader(path: path, section: section, baseDirectory: directoryName(of: path))
            if section.sessionName == nil {
                for line in section.lines { try reader.readAgent(line, into: &agent) }
            } else {
                sessions.append(try reader.session(backends: backends))
            }
        }
        if sessions.isEmpty && !allowingNoSession {
            throw .usage("\(path): no [session NAME] section: there is nothing to sync",
                         hint: "add a session with remote = and local = (man ferry.conf; the file's commented example session shows each key)")
        }
        for (i, a) in sessions.enumerated() {
            for b in sessions[(i + 1)...] where overlaps(a.local, b.local) {
                throw .usage("\(path): sessions '\(a.name)' and '\(b.name)' share the local directory \(a.local) (or one holds the other)",
                             hint: "give each session its own local directory")
            }
        }
        return Config(path: path, agent: agent, sessions: sessions, warnings: warnings(agent: agent, sessions: sessions))
    }

    /// The text split into sections of lines: the syntax, the known keys, each key once, no empty
    /// value, no `~` in a path.
    private static func readSections(_ text: String, path: String, sessionKeys: [String]) throws(FerryError) -> [Section] {
        var sections: [Section] = []
        var lineNumber = 0
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            lineNumber += 1
            let line = String(rawLine).trimmingSpaces()
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            func fail(_ message: String, hint: String? = nil) -> FerryError {
                .usage("\(path):\(lineNumber): \(message)", hint: hint)
            }
            if line.hasPrefix("[") {
                sections.append(try sectionHeader(line, number: lineNumber, after: sections, fail))
                continue
            }
            guard let eq = line.firstIndex(of: "=") else {
                throw fail("expected 'key = value', a [section] or a comment, got '\(line)'")
            }
            let key = String(line[..<eq]).trimmingSpaces().lowercased()
            var value = stripInlineComment(String(line[line.index(after: eq)...])).trimmingSpaces()
            // A value in quotes, as a shell or systemd would write it, means what is inside (a
            // hook's command line keeps its quotes: they split its words).
            if !hookKeys.contains(key), value.count >= 2, let q = value.first, q == "\"" || q == "'", value.last == q {
                value = String(value.dropFirst().dropLast())
            }
            guard !key.isEmpty else { throw fail("a line starts with '=' and has no key") }
            guard let section = sections.last else { throw fail("key '\(key)' is outside any section", hint: "put it under [agent] or [session NAME]") }
            let known = section.sessionName == nil ? agentKeys : sessionKeys
            guard known.contains(key) else {
                var hint = "known keys in [\(section.header)]: " + known.joined(separator: ", ")
                if let near = closest(to: key, in: known) { hint = "did you mean '\(near)'?" }
                throw fail("[\(section.header)] unknown key '\(key)'", hint: hint)
            }
            if section.find(key) != nil { throw fail("[\(section.header)] key '\(key)' is set twice") }
            guard !value.isEmpty else { throw fail("[\(section.header)] key '\(key)' has no value") }
            sections[sections.count - 1].lines.append(Line(number: lineNumber, key: key, value: value))
        }
        return sections
    }

    /// `[agent]` or `[session NAME]`, each once.
    private static func sectionHeader(_ text: String, number: Int, after sections: [Section],
                                      _ fail: (String, String?) -> FerryError) throws(FerryError) -> Section {
        let line = stripInlineComment(text).trimmingSpaces()
        guard line.hasSuffix("]") else { throw fail("section header is missing its closing ']'", nil) }
        let inner = String(line.dropFirst().dropLast()).trimmingSpaces()
        let words = inner.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        if words == ["agent"] {
            if sections.contains(where: { $0.header == "agent" }) { throw fail("[agent] appears twice", nil) }
            return Section(number: number, header: "agent", sessionName: nil)
        }
        if words.count == 2 && words[0] == "session" {
            let name = words[1]
            guard isValidSessionName(name) else {
                throw fail("session name '\(name)' is not valid", "use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
            }
            if sections.contains(where: { $0.sessionName == name }) { throw fail("[session \(name)] appears twice", nil) }
            return Section(number: number, header: "session \(name)", sessionName: name)
        }
        if words.first == "session" { throw fail("section [\(inner)] needs exactly one session name, like [session assets]", nil) }
        throw fail("unknown section [\(inner)]", "sections are [agent] and [session NAME]")
    }

    /// What is worth saying about settings that are each valid: a limit shared by many transfers
    /// can leave each below min-speed, where they would be abandoned as stalled. Said once per
    /// session, at the lowest rate the schedules reach.
    private static func warnings(agent: AgentConfig, sessions: [SessionConfig]) -> [String] {
        var warnings: [String] = []
        for session in sessions {
            guard let lowest = [agent.bwlimit?.lowest, session.bwlimit?.lowest].compactMap({ $0 }).min() else { continue }
            let share = lowest / Int64(min(session.transfers ?? agent.transfers, agent.transfers))
            if share < session.minSpeed {
                warnings.append("session '\(session.name)': at bwlimit \(Units.formatBytes(lowest))/s each of its transfers may get \(Units.formatBytes(share))/s, "
                    + "below min-speed \(Units.formatBytes(session.minSpeed))/s, and be abandoned as stalled; lower min-speed or session-transfers")
            }
        }
        return warnings
    }

    static func isValidSessionName(_ name: String) -> Bool {
        guard (1...64).contains(name.utf8.count), let first = name.utf8.first, isAlnum(first) else { return false }
        return name.utf8.allSatisfy { isAlnum($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }

    private static func isAlnum(_ b: UInt8) -> Bool {
        (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122)
    }

    /// ` # comment` after a value is a comment; a `#` inside a word (like `a#b`) is kept.
    static func stripInlineComment(_ value: String) -> String {
        var previous: Character = " "
        var index = value.startIndex
        while index != value.endIndex {
            let ch = value[index]
            if (ch == "#" || ch == ";") && (previous == " " || previous == "\t") {
                return String(value[..<index])
            }
            previous = ch
            index = value.index(after: index)
        }
        return value
    }

    public static func directoryName(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    /// Joins a relative path to the config file's directory and removes `.` and `..` segments.
    public static func resolve(_ value: String, against base: String) -> String {
        let joined = value.hasPrefix("/") ? value : base + "/" + value
        var parts: [Substring] = []
        for part in joined.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == ".." { if !parts.isEmpty { parts.removeLast() }; continue }
            parts.append(part)
        }
        let result = "/" + parts.joined(separator: "/")
        return joined.hasPrefix("/") ? result : (base.hasPrefix("/") ? result : String(result.dropFirst()))
    }

    static func overlaps(_ a: String, _ b: String) -> Bool {
        let x = a.hasSuffix("/") ? a : a + "/"
        let y = b.hasSuffix("/") ? b : b + "/"
        return x.hasPrefix(y) || y.hasPrefix(x)
    }

    /// The candidate within two edits of `word`, if any (for "did you mean").
    public static func closest(to word: String, in candidates: [String]) -> String? {
        var best: (String, Int)?
        for c in candidates {
            let d = editDistance(word, c)
            if d <= 2, best == nil || d < best!.1 { best = (c, d) }
        }
        return best?.0
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let x = Array(a), y = Array(b)
        if x.isEmpty { return y.count }
        if y.isEmpty { return x.count }
        var row = Array(0...y.count)
        for i in 1...x.count {
            var previous = row[0]
            row[0] = i
            for j in 1...y.count {
                let current = row[j]
                row[j] = min(row[j] + 1, row[j - 1] + 1, previous + (x[i - 1] == y[j - 1] ? 0 : 1))
                previous = current
            }
        }
        return row[y.count]
    }
}

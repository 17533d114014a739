/// Parses the INI config (docs/design.md, data-safety rule 15). Pure: it gets the text and the
/// file's path, and returns a `Config` or throws a `FerryError(.usage)` naming the file, the line
/// and the key.
///
/// Syntax: `[agent]`, `[session NAME]`, `key = value`, comments from `#` or `;` at the start of a
/// line or from ` #` after a value. Relative paths are resolved against the config file's directory.
public enum ConfigParser {
    /// Every key, per section kind. The one place keys are defined; `config/ferry.conf` documents them.
    public static let agentKeys = ["state", "transfers", "stop-timeout", "metrics", "metrics-listen", "bwlimit", "network-metered", "log-level"]
    public static let sessionKeys = [
        "remote", "manifest", "local", "direction", "poll", "delete", "max-delete", "allow-rollback", "allow-empty",
        "max-manifest-size", "mode-mask",
        "ca-file", "basic-auth-file", "bearer-token-file", "connect-timeout", "min-speed", "stall-timeout", "max-duration",
        "retries", "retry-delay", "resource-timeout", "earliest-begin", "session-transfers",
        "on-file-done", "on-session-done", "hook-timeout", "verify-interval",
        "discretionary", "window", "require-ac-power", "require-unmetered", "max-load", "min-free-space", "bwlimit", "priority",
        "conflict", "verify-uploads",
        "s3-endpoint", "s3-region", "s3-path-style", "s3-credentials", "s3-profile", "upload-part-size",
        "trusted-keys", "require-expiry", "sign-key", "expires", "object-grace", "metadata-grace", "remote-layout", "keep-versions",
        "layout", "keep-generations", "exclude", "include",
    ]
    /// Keys about what a push publishes.
    static let pushKeys = ["verify-uploads", "sign-key", "expires", "object-grace", "metadata-grace", "remote-layout", "keep-versions"]
    /// Keys about how a pull keeps its mirror.
    static let pullKeys = ["layout", "keep-generations", "require-expiry"]
    /// Keys whose value is a command line, split into words by `HookCommand` (quotes and all).
    static let hookKeys: Set<String> = ["on-file-done", "on-session-done"]
    /// Keys whose value is a path on this machine.
    static let pathKeys: Set<String> = ["state", "metrics", "local", "ca-file", "basic-auth-file", "bearer-token-file", "s3-credentials", "sign-key"]
    /// Keys that only an `s3://` remote takes.
    static let s3Keys: Set<String> = ["s3-endpoint", "s3-region", "s3-path-style", "s3-credentials", "s3-profile"]
    /// The conditions of a discretionary session: set only with `discretionary = yes`.
    static let discretionKeys = ["window", "require-ac-power", "require-unmetered", "max-load", "min-free-space"]

    private struct Line {
        let number: Int
        let key: String
        let value: String
    }

    private struct Section {
        let number: Int
        let header: String
        let sessionName: String?
        var lines: [Line] = []
    }

    /// `allowingNoSession`: a config without a `[session NAME]` is taken (an agent started before
    /// its sessions are written waits for a reload); other readers need a session and say so.
    public static func parse(_ text: String, path: String, allowingNoSession: Bool = false) throws(FerryError) -> Config {
        let baseDirectory = directoryName(of: path)
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
                let line = stripInlineComment(line).trimmingSpaces()
                guard line.hasSuffix("]") else { throw fail("section header is missing its closing ']'") }
                let inner = String(line.dropFirst().dropLast()).trimmingSpaces()
                let words = inner.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
                if words == ["agent"] {
                    if sections.contains(where: { $0.header == "agent" }) { throw fail("[agent] appears twice") }
                    sections.append(Section(number: lineNumber, header: "agent", sessionName: nil))
                } else if words.count == 2 && words[0] == "session" {
                    let name = words[1]
                    guard isValidSessionName(name) else {
                        throw fail("session name '\(name)' is not valid", hint: "use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
                    }
                    if sections.contains(where: { $0.sessionName == name }) { throw fail("[session \(name)] appears twice") }
                    sections.append(Section(number: lineNumber, header: "session \(name)", sessionName: name))
                } else if words.first == "session" {
                    throw fail("section [\(inner)] needs exactly one session name, like [session assets]")
                } else {
                    throw fail("unknown section [\(inner)]", hint: "sections are [agent] and [session NAME]")
                }
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
            guard !sections.isEmpty else { throw fail("key '\(key)' is outside any section", hint: "put it under [agent] or [session NAME]") }
            let known = sections[sections.count - 1].sessionName == nil ? agentKeys : sessionKeys
            guard known.contains(key) else {
                var hint = "known keys in [\(sections[sections.count - 1].header)]: " + known.joined(separator: ", ")
                if let near = closest(to: key, in: known) { hint = "did you mean '\(near)'?" }
                throw fail("[\(sections[sections.count - 1].header)] unknown key '\(key)'", hint: hint)
            }
            if sections[sections.count - 1].lines.contains(where: { $0.key == key }) {
                throw fail("[\(sections[sections.count - 1].header)] key '\(key)' is set twice")
            }
            guard !value.isEmpty else { throw fail("[\(sections[sections.count - 1].header)] key '\(key)' has no value") }
            if pathKeys.contains(key) && value.hasPrefix("~") {
                throw fail("[\(sections[sections.count - 1].header)] key '\(key)': '\(value)' starts with ~, which ferry does not expand (as a service it may run with another HOME)",
                           hint: "write the absolute path, like /home/you/\(value.drop { $0 == "~" || $0 == "/" })")
            }
            sections[sections.count - 1].lines.append(Line(number: lineNumber, key: key, value: value))
        }

        var agent = AgentConfig()
        var sessions: [SessionConfig] = []
        for section in sections {
            func fail(_ line: Line, _ message: String, hint: String? = nil) -> FerryError {
                .usage("\(path):\(line.number): [\(section.header)] key '\(line.key)': \(message)", hint: hint)
            }
            func value(_ line: Line) -> String { line.value }
            if section.sessionName == nil {
                for line in section.lines {
                    switch line.key {
                    case "state": agent.state = resolve(line.value, against: baseDirectory)
                    case "transfers":
                        agent.transfers = try integer(line, in: RunLimits.transfersRange, fail)
                    case "stop-timeout":
                        agent.stopTimeout = try duration(line, minimum: 1, fail)
                    case "metrics":
                        guard line.value.hasSuffix(".prom") else {
                            throw fail(line, "'\(line.value)' does not end in .prom", hint: "node_exporter's textfile collector reads only *.prom files, like /var/lib/node_exporter/textfile_collector/ferry.prom")
                        }
                        agent.metrics = resolve(line.value, against: baseDirectory)
                    case "bwlimit":
                        agent.bwlimit = try bandwidth(line, fail)
                    case "network-metered":
                        guard let m = NetworkMetered(rawValue: line.value.lowercased()) else {
                            throw fail(line, "'\(line.value)' is not auto, yes or no", hint: "auto asks NetworkManager where it runs; yes or no says it outright")
                        }
                        agent.networkMetered = m
                    case "metrics-listen":
                        do { agent.metricsListen = try ListenAddress(parsing: line.value) } catch { throw fail(line, error.message) }
                    case "log-level":
                        guard let level = LogLevel(rawValue: line.value.lowercased()) else {
                            throw fail(line, "'\(line.value)' is not error, warning, info or debug")
                        }
                        agent.logLevel = level
                    default: break
                    }
                }
                continue
            }
            let name = section.sessionName!
            func find(_ key: String) -> Line? { section.lines.first { $0.key == key } }
            guard let remoteLine = find("remote") else {
                throw .usage("\(path):\(section.number): [\(section.header)] is missing the required key 'remote'",
                             hint: "add a line like: remote = https://mirror.example.net/assets/")
            }
            let remote: RemoteLocation
            do { remote = try RemoteLocation(parsing: remoteLine.value) } catch { throw fail(remoteLine, error.message) }
            guard let localLine = find("local") else {
                throw .usage("\(path):\(section.number): [\(section.header)] is missing the required key 'local'",
                             hint: "add a line like: local = /srv/assets")
            }
            var session = SessionConfig(name: name, remote: remote, local: resolve(localLine.value, against: baseDirectory))
            for line in section.lines {
                switch line.key {
                case "remote", "local": break
                case "manifest":
                    if line.value.contains("://") {
                        do { _ = try RemoteLocation(parsing: line.value) } catch { throw fail(line, error.message) }
                    } else if line.value.hasPrefix("/") || line.value.hasSuffix("/") {
                        throw fail(line, "expected a file name relative to the remote, like manifest.json")
                    }
                    session.manifest = line.value
                case "direction":
                    guard let d = Direction(rawValue: line.value.lowercased()) else { throw fail(line, "'\(line.value)' is not pull or push") }
                    session.direction = d
                case "poll":
                    session.poll = try duration(line, minimum: 1, fail)
                case "connect-timeout":
                    session.connectTimeout = try duration(line, minimum: 1, fail)
                case "stall-timeout":
                    session.stallTimeout = try duration(line, minimum: 1, fail)
                case "max-duration":
                    session.maxDuration = try duration(line, minimum: 1, fail)
                case "earliest-begin":
                    guard let e = EarliestBegin(parsing: line.value) else {
                        throw fail(line, "'\(line.value)' is neither a duration (30m) nor an RFC 3339 time (2026-11-24T02:00:00Z)")
                    }
                    session.earliestBegin = e
                case "retry-delay":
                    session.retryDelay = try duration(line, minimum: 0, fail)
                case "resource-timeout":
                    session.resourceTimeout = try duration(line, minimum: 1, fail)
                case "verify-interval":
                    session.verifyInterval = try duration(line, minimum: 1, fail)
                case "hook-timeout":
                    session.hookTimeout = try duration(line, minimum: 1, fail)
                case "on-file-done", "on-session-done":
                    let command: HookCommand
                    do { command = try HookCommand(parsing: line.value) } catch {
                        throw fail(line, error.message, hint: "write the program and its arguments, like: /usr/local/bin/notify --quiet; the file's name reaches it as $FERRY_PATH")
                    }
                    if line.key == "on-file-done" { session.onFileDone = command } else { session.onSessionDone = command }
                case "retries":
                    session.retries = try integer(line, in: 0...100, fail)
                case "session-transfers":
                    session.transfers = try integer(line, in: RunLimits.transfersRange, fail)
                case "delete": session.delete = try bool(line, fail)
                case "allow-rollback": session.allowRollback = try bool(line, fail)
                case "allow-empty": session.allowEmpty = try bool(line, fail)
                case "max-delete":
                    guard let cap = DeletionCap(parsing: line.value) else {
                        throw fail(line, "'\(line.value)' is neither a count (1000) nor a percentage (50%)")
                    }
                    session.maxDelete = cap
                case "max-manifest-size":
                    guard let size = Units.parseSize(line.value), size >= 1024 else {
                        throw fail(line, "'\(line.value)' is not a size of at least 1K, like 64M or 1G")
                    }
                    session.maxManifestSize = size
                case "mode-mask":
                    guard (1...4).contains(line.value.utf8.count), let mask = UInt32(line.value, radix: 8), mask <= 0o7777 else {
                        throw fail(line, "'\(line.value)' is not an octal mask like 022 or 077")
                    }
                    session.modeMask = mask & 0o777
                case "min-speed":
                    guard let s = Units.parseSize(line.value.hasSuffix("/s") ? String(line.value.dropLast(2)) : line.value) else {
                        throw fail(line, "'\(line.value)' is not a speed like 1K or 100K/s")
                    }
                    session.minSpeed = s
                case "discretionary":
                    if try bool(line, fail) { session.discretion = session.discretion ?? Discretion() }
                case "window", "require-ac-power", "require-unmetered", "max-load", "min-free-space":
                    break  // below, once discretionary is known
                case "bwlimit":
                    session.bwlimit = try bandwidth(line, fail)
                case "priority":
                    session.priority = try integer(line, in: -100...100, fail)
                case "conflict":
                    guard let c = ConflictPolicy(rawValue: line.value.lowercased()) else {
                        throw fail(line, "'\(line.value)' is not fail, local-wins or remote-wins")
                    }
                    session.conflict = c
                case "verify-uploads":
                    guard let v = VerifyUploads(rawValue: line.value.lowercased()) else {
                        throw fail(line, "'\(line.value)' is not auto, read-back or size-only")
                    }
                    session.verifyUploads = v
                case "ca-file": session.caFile = resolve(line.value, against: baseDirectory)
                case "basic-auth-file": session.basicAuthFile = resolve(line.value, against: baseDirectory)
                case "bearer-token-file": session.bearerTokenFile = resolve(line.value, against: baseDirectory)
                case "s3-endpoint":
                    do { session.s3.endpoint = try S3Endpoint.parse(line.value) } catch { throw fail(line, error.message) }
                case "s3-region":
                    guard S3Endpoint.isValidRegion(line.value) else { throw fail(line, "'\(line.value)' is not a region name like us-east-1") }
                    session.s3.region = line.value
                case "s3-path-style": session.s3.pathStyle = try bool(line, fail)
                case "s3-credentials": session.s3.credentials = resolve(line.value, against: baseDirectory)
                case "s3-profile":
                    guard !line.value.isEmpty, !line.value.contains("]"), !line.value.contains("[") else { throw fail(line, "'\(line.value)' is not a profile name") }
                    session.s3.profile = line.value
                case "trusted-keys":
                    let words = line.value.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "," }).map(String.init)
                    guard !words.isEmpty else { throw fail(line, "lists no key", hint: "write the keys `ferry key public` prints: ed25519:BASE64, separated by spaces") }
                    for word in words {
                        guard let key = PublicKey(text: word) else {
                            throw fail(line, "'\(word)' is not a public key like ed25519:BASE64 (the 32 bytes of an Ed25519 key in base64)",
                                       hint: "ferry key public KEYFILE prints the line to paste here")
                        }
                        if !session.trustedKeys.contains(key) { session.trustedKeys.append(key) }
                    }
                case "require-expiry": session.requireExpiry = try bool(line, fail)
                case "sign-key": session.signKey = resolve(line.value, against: baseDirectory)
                case "expires":
                    session.expires = line.value.lowercased() == "never" ? nil : try duration(line, minimum: 60, fail)
                // `metadata-grace`: its name before content objects (remote-layout = objects) shared it.
                case "object-grace", "metadata-grace": session.objectGrace = try duration(line, minimum: 0, fail)
                case "remote-layout":
                    guard let layout = RemoteLayout(rawValue: line.value.lowercased()) else {
                        throw fail(line, "'\(line.value)' is not tree or objects")
                    }
                    session.remoteLayout = layout
                case "keep-versions": session.keepVersions = try integer(line, in: 1...1000, fail)
                case "layout":
                    guard let layout = LocalLayout(rawValue: line.value.lowercased()) else {
                        throw fail(line, "'\(line.value)' is not in-place or generations")
                    }
                    session.layout = layout
                case "keep-generations": session.keepGenerations = try integer(line, in: 0...100, fail)
                case "exclude", "include":
                    let words = PathFilter.words(line.value)
                    guard !words.isEmpty else { throw fail(line, "lists no pattern", hint: "write gitignore-style globs separated by spaces, like *.tmp .git/ logs/**/*.gz") }
                    do throws(PathFilter.PatternProblem) {
                        session.filter = line.key == "exclude"
                            ? try PathFilter(exclude: words, include: session.filter.includes.map(\.text))
                            : try PathFilter(exclude: session.filter.excludes.map(\.text), include: words)
                    } catch {
                        throw fail(line, error.description, hint: "write gitignore-style globs separated by spaces, like *.tmp .git/ logs/**/*.gz (\\ quotes a space)")
                    }
                case "upload-part-size":
                    guard let size = Units.parseSize(line.value), size >= 5 << 20, size <= 5 << 30 else {
                        throw fail(line, "'\(line.value)' is not a part size from 5M to 5G (S3's limits), like 16M")
                    }
                    session.uploadPartSize = size
                default: break
                }
            }
            for line in section.lines where discretionKeys.contains(line.key) {
                guard var d = session.discretion else {
                    throw fail(line, "applies only to a discretionary session", hint: "add discretionary = yes to [\(section.header)], or remove this line")
                }
                switch line.key {
                case "window":
                    var windows: [TimeWindow] = []
                    for part in line.value.split(separator: ",").map({ String($0).trimmingSpaces() }) {
                        do { windows.append(try TimeWindow(parsing: part)) } catch { throw fail(line, error.message) }
                    }
                    d.windows = windows
                case "require-ac-power": d.requireACPower = try bool(line, fail)
                case "require-unmetered": d.requireUnmetered = try bool(line, fail)
                case "max-load":
                    guard let load = Double(line.value), load > 0, load <= 10_000 else {
                        throw fail(line, "'\(line.value)' is not a load average above 0, like 2 or 0.5")
                    }
                    d.maxLoad = load
                case "min-free-space":
                    guard let limit = FreeSpaceLimit(parsing: line.value) else {
                        throw fail(line, "'\(line.value)' is neither a size (10G) nor a percentage below 100 (5%)")
                    }
                    d.minFree = limit
                default: break
                }
                session.discretion = d
            }
            if session.signKey != nil && find("expires") == nil {
                // What a signed manifest says stops counting after a while, unless told otherwise.
                session.expires = ManifestEnvelope.defaultLifetime
            }
            if session.trustedKeys.isEmpty, session.direction == .pull, let line = find("require-expiry") {
                throw fail(line, "applies to a session with trusted-keys: only a signed manifest's expiry can be relied on",
                           hint: "remove this line, or add trusted-keys")
            }
            if session.direction == .push, let line = find("trusted-keys") {
                throw fail(line, "applies to a pull session: it says whose manifests a mirror takes",
                           hint: "a push session signs what it publishes with sign-key; mirrors list its public key in trusted-keys")
            }
            if session.direction == .pull, let line = section.lines.first(where: { pushKeys.contains($0.key) }) {
                throw fail(line, "applies to a push session: it is about the manifests it publishes",
                           hint: line.key == "remote-layout" ? "a pull reads the layout from the manifest; remove this line"
                                                              : "remove this line, or set direction = push")
            }
            if session.layout == .generations && session.local == "/", let line = find("layout") {
                throw fail(line, "needs local to be a directory with a parent, where its generations are kept beside it (local = /)")
            }
            if session.direction == .push, let line = section.lines.first(where: { pullKeys.contains($0.key) }) {
                throw fail(line, "applies to a pull session: it is about how the mirror keeps its versions",
                           hint: line.key == "layout" ? "a push chooses how the remote stores files with remote-layout = tree|objects"
                                                       : "remove this line, or set direction = pull")
            }
            if session.basicAuthFile != nil && session.bearerTokenFile != nil {
                throw .usage("\(path):\(section.number): [\(section.header)] sets both basic-auth-file and bearer-token-file; choose one")
            }
            if session.remote.scheme == .file && (session.basicAuthFile != nil || session.bearerTokenFile != nil || session.caFile != nil) {
                throw .usage("\(path):\(section.number): [\(section.header)] a file:// remote takes no ca-file or credentials")
            }
            if session.remote.scheme == .s3 && session.manifest.contains("://") {
                throw fail(find("manifest")!, "an s3:// remote's manifest is an object under its prefix, named relative to it (like manifest.json)")
            }
            if session.remote.scheme == .s3 && (session.basicAuthFile != nil || session.bearerTokenFile != nil) {
                throw .usage("\(path):\(section.number): [\(section.header)] an s3:// remote takes its credentials from s3-credentials (or the AWS credential chain), not basic-auth-file or bearer-token-file")
            }
            if session.remote.scheme != .s3, let line = section.lines.first(where: { s3Keys.contains($0.key) }) {
                throw fail(line, "applies only to an s3:// remote", hint: "remove this line, or set remote = s3://BUCKET/PREFIX/")
            }
            if session.remote.scheme == .s3, session.s3.endpoint == nil, session.s3.pathStyle == nil,
               let bucket = session.remote.bucket, bucket.contains(".") {
                // Virtual-hosted addressing of a dotted bucket breaks AWS's TLS certificate (*.s3...).
                session.s3.pathStyle = true
            }
            sessions.append(session)
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
        var warnings: [String] = []
        for session in sessions {
            // A limit shared by many transfers can leave each below min-speed: they would be
            // abandoned as stalled. Said once, at the lowest rate the schedules reach.
            let lowest = [agent.bwlimit?.lowest, session.bwlimit?.lowest].compactMap { $0 }.min()
            if let lowest {
                let share = lowest / Int64(min(session.transfers ?? agent.transfers, agent.transfers))
                if share < session.minSpeed {
                    warnings.append("session '\(session.name)': at bwlimit \(Units.formatBytes(lowest))/s each of its transfers may get \(Units.formatBytes(share))/s, "
                        + "below min-speed \(Units.formatBytes(session.minSpeed))/s, and be abandoned as stalled; lower min-speed or session-transfers")
                }
            }
        }
        return Config(path: path, agent: agent, sessions: sessions, warnings: warnings)
    }

    static func isValidSessionName(_ name: String) -> Bool {
        guard (1...64).contains(name.utf8.count), let first = name.utf8.first, isAlnum(first) else { return false }
        return name.utf8.allSatisfy { isAlnum($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }

    private static func isAlnum(_ b: UInt8) -> Bool {
        (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122)
    }

    private static func duration(_ line: Line, minimum: Double, _ fail: (Line, String, String?) -> FerryError) throws(FerryError) -> Double {
        guard let d = Units.parseDuration(line.value) else {
            throw fail(line, "'\(line.value)' is not a duration", "write durations like 90s, 15m, 2h or 7d")
        }
        guard d >= minimum else { throw fail(line, "'\(line.value)' is shorter than the minimum of \(Units.formatDuration(minimum))", nil) }
        return d
    }

    private static func bandwidth(_ line: Line, _ fail: (Line, String, String?) -> FerryError) throws(FerryError) -> BandwidthSchedule {
        do { return try BandwidthSchedule(parsing: line.value) } catch {
            throw fail(line, error.message, "write a rate like 512K, off, or a daily schedule like: 08:00,512K 19:00,off")
        }
    }

    private static func integer(_ line: Line, in range: ClosedRange<Int>, _ fail: (Line, String, String?) -> FerryError) throws(FerryError) -> Int {
        guard let n = Int(line.value), range.contains(n) else {
            let bounds = range.upperBound == Int.max ? "\(range.lowerBound) or more" : "from \(range.lowerBound) to \(range.upperBound)"
            throw fail(line, "'\(line.value)' is not a whole number \(bounds)", nil)
        }
        return n
    }

    private static func bool(_ line: Line, _ fail: (Line, String, String?) -> FerryError) throws(FerryError) -> Bool {
        switch line.value.lowercased() {
        case "yes", "true", "on", "1": return true
        case "no", "false", "off", "0": return false
        default: throw fail(line, "'\(line.value)' is not yes or no", nil)
        }
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

extension ConfigParser {
    /// Reads the values of one section: each key's value checked by its kind, each problem a
    /// `FerryError(.usage)` naming the file, the line and the key.
    struct Reader {
        let path: String
        let section: Section
        let baseDirectory: String

        func fail(_ line: Line, _ message: String, hint: String? = nil) -> FerryError {
            .usage("\(path):\(line.number): [\(section.header)] key '\(line.key)': \(message)", hint: hint)
        }

        /// A problem with the section as a whole (no one line is wrong).
        func failSection(_ message: String, hint: String? = nil) -> FerryError {
            .usage("\(path):\(section.number): [\(section.header)] \(message)", hint: hint)
        }

        func duration(_ line: Line, minimum: Double) throws(FerryError) -> Double {
            guard let d = Units.parseDuration(line.value) else {
                throw fail(line, "'\(line.value)' is not a duration", hint: "write durations like 90s, 15m, 2h or 7d")
            }
            guard d >= minimum else { throw fail(line, "'\(line.value)' is shorter than the minimum of \(Units.formatDuration(minimum))") }
            return d
        }

        func integer(_ line: Line, in range: ClosedRange<Int>) throws(FerryError) -> Int {
            guard let n = Int(line.value), range.contains(n) else {
                let bounds = range.upperBound == Int.max ? "\(range.lowerBound) or more" : "from \(range.lowerBound) to \(range.upperBound)"
                throw fail(line, "'\(line.value)' is not a whole number \(bounds)")
            }
            return n
        }

        func bool(_ line: Line) throws(FerryError) -> Bool {
            switch line.value.lowercased() {
            case "yes", "true", "on", "1": return true
            case "no", "false", "off", "0": return false
            default: throw fail(line, "'\(line.value)' is not yes or no")
            }
        }

        func bandwidth(_ line: Line) throws(FerryError) -> BandwidthSchedule {
            do { return try BandwidthSchedule(parsing: line.value) } catch {
                throw fail(line, error.message, hint: "write a rate like 512K, off, or a daily schedule like: 08:00,512K 19:00,off")
            }
        }

        /// A path on this machine, resolved against the config's directory. `~` is refused: as a
        /// service ferry may run with another HOME.
        func path(_ line: Line) throws(FerryError) -> String {
            if line.value.hasPrefix("~") {
                throw fail(line, "'\(line.value)' starts with ~, which ferry does not expand (as a service it may run with another HOME)",
                           hint: "write the absolute path, like /home/you/\(line.value.drop { $0 == "~" || $0 == "/" })")
            }
            return resolve(line.value, against: baseDirectory)
        }

        /// One of `cases`' raw values, in any case.
        func choice<T: RawRepresentable>(_ line: Line, _ cases: String) throws(FerryError) -> T where T.RawValue == String {
            guard let value = T(rawValue: line.value.lowercased()) else { throw fail(line, "'\(line.value)' is not \(cases)") }
            return value
        }

        /// A key of the `[agent]` section.
        func readAgent(_ line: Line, into agent: inout AgentConfig) throws(FerryError) {
            switch line.key {
            case "state": agent.state = try path(line)
            case "transfers": agent.transfers = try integer(line, in: RunLimits.transfersRange)
            case "stop-timeout": agent.stopTimeout = try duration(line, minimum: 1)
            case "metrics":
                guard line.value.hasSuffix(".prom") else {
                    throw fail(line, "'\(line.value)' does not end in .prom", hint: "node_exporter's textfile collector reads only *.prom files, like /var/lib/node_exporter/textfile_collector/ferry.prom")
                }
                agent.metrics = try path(line)
            case "bwlimit": agent.bwlimit = try bandwidth(line)
            case "budget":
                if line.value.lowercased() == "none" { agent.budget = nil; break }
                do { agent.budget = try ByteBudget(parsing: line.value) } catch {
                    throw fail(line, error.message, hint: "write a size per day or month, like 2G/month or 100M/day, or none")
                }
            case "network-metered":
                guard let m = NetworkMetered(rawValue: line.value.lowercased()) else {
                    throw fail(line, "'\(line.value)' is not auto, yes or no", hint: "auto asks NetworkManager where it runs; yes or no says it outright")
                }
                agent.networkMetered = m
            case "metrics-listen":
                do { agent.metricsListen = try ListenAddress(parsing: line.value) } catch { throw fail(line, error.message) }
            case "log-level": agent.logLevel = try choice(line, "error, warning, info or debug")
            case "machine-id":
                guard !line.value.isEmpty, line.value.utf8.count <= 256, !line.value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                    throw fail(line, "must be a name of 1 to 256 printable characters, like the 32 hex digits of /etc/machine-id")
                }
                agent.machineID = line.value
            default: break
            }
        }

        /// A `[session NAME]` section: its remote and local, then every key in the order of its
        /// lines (the backend's own read by it), then the rules between keys and the backend's
        /// checks of the whole session.
        func session(backends: [BackendDescription]) throws(FerryError) -> SessionConfig {
            guard let remoteLine = section.find("remote") else {
                throw failSection("is missing the required key 'remote'", hint: "add a line like: remote = https://mirror.example.net/assets/")
            }
            let remote: RemoteLocation
            do { remote = try RemoteLocation(parsing: remoteLine.value, backends: backends) } catch { throw fail(remoteLine, error.message) }
            guard let localLine = section.find("local") else {
                throw failSection("is missing the required key 'local'", hint: "add a line like: local = /srv/assets")
            }
            var session = SessionConfig(name: section.sessionName!, remote: remote, local: try path(localLine))
            if let line = section.find("mirrors") { session.mirrors = try mirrors(line, remote: remote, backends) }
            if let line = section.find("report") {
                do { session.report = try RemoteLocation(parsing: line.value, backends: backends) } catch { throw fail(line, error.message) }
                if session.report == remote { throw fail(line, "names the remote itself; a report goes to a directory of its own, such as s3://fleet-status/site1/") }
            }
            // The keys of the remote's kind, of each mirror's and of the report location's.
            var kinds = [remote.backend]
            for mirror in session.mirrors + [session.report].compactMap({ $0 }) where !kinds.contains(where: { $0.called == mirror.backend.called }) { kinds.append(mirror.backend) }
            for line in section.lines {
                if let key = kinds.lazy.compactMap({ $0.keys.first { $0.name == line.key } }).first {
                    try readBackendKey(key, line, &session)
                    continue
                }
                var known = try readWhat(line, &session, backends)
                if !known { known = try readWhen(line, &session) }
                if !known { known = try readHow(line, &session) }
                if !known { known = try readPublishing(line, &session) }
                if !known, let other = backends.first(where: { $0.keys.contains { $0.name == line.key } }) {
                    throw fail(line, "applies only to " + other.called,
                               hint: "remove this line, or set remote = \(other.example)")
                }
            }
            try readDiscretion(&session)
            try checkDirection(session)
            if !session.signKeys.isEmpty && section.find("expires") == nil {
                // What a signed manifest says stops counting after a while, unless told otherwise.
                session.expires = ManifestEnvelope.defaultLifetime
            }
            try readBackendKeys(kinds, &session)
            return session
        }

        /// `mirrors`: URLs of any kind, separated by spaces, each once and none the remote itself.
        private func mirrors(_ line: Line, remote: RemoteLocation, _ backends: [BackendDescription]) throws(FerryError) -> [RemoteLocation] {
            var out: [RemoteLocation] = []
            for word in line.value.split(separator: " ", omittingEmptySubsequences: true) {
                let mirror: RemoteLocation
                do { mirror = try RemoteLocation(parsing: String(word), backends: backends) } catch { throw fail(line, error.message) }
                if mirror == remote { throw fail(line, "names the remote itself (\(mirror.url)); a mirror is another copy of it") }
                if out.contains(mirror) { throw fail(line, "names \(mirror.url) twice") }
                out.append(mirror)
            }
            guard !out.isEmpty, out.count <= 8 else {
                throw fail(line, out.isEmpty ? "names no mirror" : "names \(out.count) mirrors; at most 8 are tried",
                           hint: "write URLs separated by spaces, like mirrors = http://cache.site1/assets/ s3://replica/assets/")
            }
            return out
        }

        /// What is synced, where and which way: the manifest, the local side, deletion and the
        /// manifest's own limits.
        private func readWhat(_ line: Line, _ session: inout SessionConfig, _ backends: [BackendDescription]) throws(FerryError) -> Bool {
            switch line.key {
            case "remote", "local": break
            case "manifest":
                if line.value.contains("://") {
                    do { _ = try RemoteLocation(parsing: line.value, backends: backends) } catch { throw fail(line, error.message) }
                } else if line.value.hasPrefix("/") || line.value.hasSuffix("/") {
                    throw fail(line, "expected a file name relative to the remote, like manifest.json")
                }
                session.manifest = line.value
            case "direction": session.direction = try choice(line, "pull or push")
            case "delete": session.delete = try bool(line)
            case "allow-rollback": session.allowRollback = try bool(line)
            case "allow-empty": session.allowEmpty = try bool(line)
            case "delta": session.delta = try bool(line)
            case "seed":
                // Directories, separated by spaces.
                for word in line.value.split(separator: " ", omittingEmptySubsequences: true) {
                    session.seeds.append(try path(Line(number: line.number, key: line.key, value: String(word))))
                }
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
            case "exclude", "include": try readFilter(line, &session)
            default: return false
            }
            return true
        }

        /// `exclude =` and `include =`: gitignore-style patterns.
        private func readFilter(_ line: Line, _ session: inout SessionConfig) throws(FerryError) {
            let hint = "write gitignore-style globs separated by spaces, like *.tmp .git/ logs/**/*.gz"
            let words = PathFilter.words(line.value)
            guard !words.isEmpty else { throw fail(line, "lists no pattern", hint: hint) }
            do throws(PathFilter.PatternProblem) {
                session.filter = line.key == "exclude"
                    ? try PathFilter(exclude: words, include: session.filter.includes.map(\.text))
                    : try PathFilter(exclude: session.filter.excludes.map(\.text), include: words)
            } catch {
                throw fail(line, error.description, hint: hint + " (\\ quotes a space)")
            }
        }

        /// When and how often: polling, deadlines, retries, hooks, priority and rates.
        private func readWhen(_ line: Line, _ session: inout SessionConfig) throws(FerryError) -> Bool {
            switch line.key {
            case "poll": session.poll = try duration(line, minimum: 1)
            case "max-duration": session.maxDuration = try duration(line, minimum: 1)
            case "earliest-begin":
                guard let e = EarliestBegin(parsing: line.value) else {
                    throw fail(line, "'\(line.value)' is neither a duration (30m) nor an RFC 3339 time (2026-11-24T02:00:00Z)")
                }
                session.earliestBegin = e
            case "retries": session.retries = try integer(line, in: 0...100)
            case "retry-delay": session.retryDelay = try duration(line, minimum: 0)
            case "resource-timeout": session.resourceTimeout = try duration(line, minimum: 1)
            case "verify-interval": session.verifyInterval = try duration(line, minimum: 1)
            case "hook-timeout": session.hookTimeout = try duration(line, minimum: 1)
            case "on-file-done", "on-session-done":
                let command: HookCommand
                do { command = try HookCommand(parsing: line.value) } catch {
                    throw fail(line, error.message, hint: "write the program and its arguments, like: /usr/local/bin/notify --quiet; the file's name reaches it as $FERRY_PATH")
                }
                if line.key == "on-file-done" { session.onFileDone = command } else { session.onSessionDone = command }
            case "on-switch-check":
                do { session.onSwitchCheck = try HookCommand(parsing: line.value) } catch {
                    throw fail(line, error.message, hint: "write the program and its arguments, like: /usr/local/bin/health-check --quick; exit 0 keeps the new generation")
                }
            case "session-transfers": session.transfers = try integer(line, in: RunLimits.transfersRange)
            case "discretionary":
                if try bool(line) { session.discretion = session.discretion ?? Discretion() }
            case "window", "require-ac-power", "require-unmetered", "max-load", "min-free-space":
                break  // readDiscretion, once discretionary is known
            case "bwlimit": session.bwlimit = try bandwidth(line)
            case "priority": session.priority = try integer(line, in: -100...100)
            case "budget":
                switch line.value.lowercased() {
                case "exempt": session.budgetExempt = true
                case "counted": session.budgetExempt = false
                default: throw fail(line, "'\(line.value)' is not exempt or counted", hint: "the machine's budget is set in [agent]; budget = exempt lets a critical tree go on when it is spent")
                }
            default: return false
            }
            return true
        }

        /// How requests go: timeouts, speeds, and the transport's TLS and credentials files.
        private func readHow(_ line: Line, _ session: inout SessionConfig) throws(FerryError) -> Bool {
            switch line.key {
            case "connect-timeout": session.connectTimeout = try duration(line, minimum: 1)
            case "stall-timeout": session.stallTimeout = try duration(line, minimum: 1)
            case "min-speed":
                guard let s = Units.parseSize(line.value.hasSuffix("/s") ? String(line.value.dropLast(2)) : line.value) else {
                    throw fail(line, "'\(line.value)' is not a speed like 1K or 100K/s")
                }
                session.minSpeed = s
            case "ca-file": session.caFile = try path(line)
            case "basic-auth-file": session.basicAuthFile = try path(line)
            case "bearer-token-file": session.bearerTokenFile = try path(line)
            case "report-interval": session.reportInterval = try duration(line, minimum: 60)
            case "report": break
            default: return false
            }
            return true
        }

        /// What a push publishes and what a pull trusts and keeps.
        private func readPublishing(_ line: Line, _ session: inout SessionConfig) throws(FerryError) -> Bool {
            switch line.key {
            case "conflict": session.conflict = try choice(line, "fail, local-wins or remote-wins")
            case "verify-uploads": session.verifyUploads = try choice(line, "auto, read-back or size-only")
            case "upload-part-size":
                guard let size = Units.parseSize(line.value), size >= 5 << 20, size <= 5 << 30 else {
                    throw fail(line, "'\(line.value)' is not a part size from 5M to 5G (S3's limits), like 16M")
                }
                session.uploadPartSize = size
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
            case "require-expiry": session.requireExpiry = try bool(line)
            case "keys-dir": session.keysDirectory = try path(line)
            case "rollout":
                let text = line.value.hasSuffix("%") ? String(line.value.dropLast()) : line.value
                guard let p = Int(text), (1...100).contains(p) else { throw fail(line, "'\(line.value)' is not a share of machines from 1% to 100%, like 10%") }
                session.rollout = p
            case "trust-threshold": session.trustThreshold = try integer(line, in: 1...ManifestEnvelope.maximumSignatures)
            case "sign-key":
                // Several keys, separated by spaces: each signs (for mirrors with a trust-threshold).
                for word in line.value.split(whereSeparator: { $0 == " " || $0 == "\t" }) {
                    let file = try path(Line(number: line.number, key: line.key, value: String(word)))
                    if session.signKeys.contains(file) { throw fail(line, "names \(word) twice") }
                    session.signKeys.append(file)
                }
                if session.signKeys.count > ManifestEnvelope.maximumSignatures {
                    throw fail(line, "names \(session.signKeys.count) keys; a manifest carries at most \(ManifestEnvelope.maximumSignatures) signatures")
                }
            case "expires": session.expires = line.value.lowercased() == "never" ? nil : try duration(line, minimum: 60)
            // `metadata-grace`: its name before content objects (remote-layout = objects) shared it.
            case "object-grace", "metadata-grace": session.objectGrace = try duration(line, minimum: 0)
            case "remote-layout": session.remoteLayout = try choice(line, "tree or objects")
            case "keep-versions": session.keepVersions = try integer(line, in: 1...1000)
            case "delta-min-size":
                if line.value.lowercased() == "off" {
                    session.deltaMinimum = nil
                } else {
                    guard let size = Units.parseSize(line.value), size >= Int64(ContentChunker.maximum) else {
                        throw fail(line, "'\(line.value)' is neither off nor a size of at least 12K, like 1M or 64M")
                    }
                    session.deltaMinimum = size
                }
            case "layout": session.layout = try choice(line, "in-place or generations")
            case "keep-generations": session.keepGenerations = try integer(line, in: 0...100)
            default: return false
            }
            return true
        }

        /// The conditions of a discretionary session, set only with `discretionary = yes`.
        private func readDiscretion(_ session: inout SessionConfig) throws(FerryError) {
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
                case "require-ac-power": d.requireACPower = try bool(line)
                case "require-unmetered": d.requireUnmetered = try bool(line)
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
        }

        /// Keys that apply to one direction only, and the defaults that follow from others.
        private func checkDirection(_ session: SessionConfig) throws(FerryError) {
            if session.trustedKeys.isEmpty, session.direction == .pull, let line = section.find("trust-threshold") {
                throw fail(line, "applies to a session with trusted-keys: it says how many of them must have signed",
                           hint: "add trusted-keys, or remove this line")
            }
            if session.trustThreshold > session.trustedKeys.count, let line = section.find("trust-threshold") {
                throw fail(line, "asks for \(session.trustThreshold) signatures, but trusted-keys lists \(Plural.count(session.trustedKeys.count, "key")): no manifest could be taken",
                           hint: "list at least \(session.trustThreshold) keys in trusted-keys, or lower trust-threshold")
            }
            if session.trustedKeys.isEmpty, session.direction == .pull, let line = section.find("require-expiry") {
                throw fail(line, "applies to a session with trusted-keys: only a signed manifest's expiry can be relied on",
                           hint: "remove this line, or add trusted-keys")
            }
            if session.direction == .push, let line = section.find("trusted-keys") {
                throw fail(line, "applies to a pull session: it says whose manifests a mirror takes",
                           hint: "a push session signs what it publishes with sign-key; mirrors list its public key in trusted-keys")
            }
            if session.direction == .pull, let line = section.lines.first(where: { pushKeys.contains($0.key) }) {
                throw fail(line, "applies to a push session: it is about the manifests it publishes",
                           hint: line.key == "remote-layout" ? "a pull reads the layout from the manifest; remove this line"
                                                              : "remove this line, or set direction = push")
            }
            if session.rollout < 100 && session.remoteLayout != .objects, let line = section.find("rollout") {
                throw fail(line, "needs remote-layout = objects: the files of the release before must stay on the remote beside the new ones for the machines outside the rollout",
                           hint: "set remote-layout = objects (and publish one release to every machine with it first)")
            }
            if session.layout != .generations, let line = section.find("on-switch-check") {
                throw fail(line, "applies to a pull session with layout = generations: a failed check switches back to the generation before",
                           hint: "set layout = generations (and direction = pull), or remove this line")
            }
            if session.layout == .generations && session.local == "/", let line = section.find("layout") {
                throw fail(line, "needs local to be a directory with a parent, where its generations are kept beside it (local = /)")
            }
            if session.direction == .push, let line = section.lines.first(where: { pullKeys.contains($0.key) }) {
                throw fail(line, "applies to a pull session: it is about how the mirror keeps its versions",
                           hint: line.key == "layout" ? "a push chooses how the remote stores files with remote-layout = tree|objects"
                                                       : "remove this line, or set direction = pull")
            }
            if session.basicAuthFile != nil && session.bearerTokenFile != nil {
                throw failSection("sets both basic-auth-file and bearer-token-file; choose one")
            }
        }

        /// A key the session's backend declares, read by its kind and checked by the backend
        /// into `remoteOptions`.
        private func readBackendKey(_ key: ConfigKey, _ line: Line, _ session: inout SessionConfig) throws(FerryError) {
            var value = line.value
            switch key.kind {
            case .path, .secret: value = try path(line)
            case .flag: value = try bool(line) ? "yes" : "no"
            case .word, .url: break
            }
            do { session.remoteOptions[key.name] = try key.check(value) } catch { throw fail(line, error.message, hint: error.hint) }
        }

        /// The transport keys none of the session's kinds of remote takes (the remote's first, then
        /// its mirrors'); then each kind's checks of the whole session (a mirror's, of the session
        /// as that mirror is read: `SessionConfig.reading`).
        private func readBackendKeys(_ kinds: [BackendDescription], _ session: inout SessionConfig) throws(FerryError) {
            let backend = kinds[0]
            for line in section.lines where ConfigKey.transport.contains(line.key) && !kinds.contains(where: { $0.transportKeys.contains(line.key) }) {
                throw fail(line, "\(backend.called) does not take it; it authenticates with " + backend.credentialSources.joined(separator: ", "),
                           hint: "remove this line")
            }
            do throws(ConfigProblem) {
                try backend.finish(&session)
                for i in session.mirrors.indices {
                    var mirror = session.reading(mirror: i)
                    try mirror.remote.backend.finish(&mirror)
                }
            } catch {
                guard let key = error.key, let line = section.find(key) else { throw failSection(error.message, hint: error.hint) }
                throw fail(line, error.message, hint: error.hint)
            }
        }
    }
}

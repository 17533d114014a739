import Glibc
import FerryCore
import FerryRuntime

/// `ferry config check`: parse and validate the config, and read the credential files it names.
struct ConfigCheckCommand: Command {
    static let words = ["config", "check"]
    static let summary = "Check the config: syntax, keys, values, and everything it names that can be checked here."
    static let usage = "config check [--config F] [--online]"
    static let details = """
        Errors name the file, the line and the key. Beyond the syntax it checks that the state
        directory and each pull's local directory can be written (or created), that the state
        database opens (as the state's owner, the user the services run as), that each push's
        local directory can be read, that the ca-file and credential files are readable, that hook
        programs can be run, that an sftp-key is a private regular file without a passphrase and
        sftp-known-hosts is there, and that the metrics directory exists. Each S3 session's credentials
        are fetched from their source (s3-credentials, else the AWS chain: environment, shared
        credentials file, config file, web identity, container, EC2 instance metadata), which for
        the last three means asking STS, the container's endpoint or the instance metadata service
        (short timeouts); their source and region are printed, and a session without any is a
        problem whose hint lists every source tried. Nothing else uses the network, unless
        --online: then each session's remote and each mirror is opened with its credentials (S3
        keys, the SSH key and the server's host key) and asked for the manifest once, one line
        each, so wrong keys or an unreachable server are found before the first run; over HTTP
        and S3 also for the manifest's first byte as a range (whether resumes and deltas can read
        ranges) and the server's Date (this machine's clock more than 15 minutes off is a
        problem; more than a minute is said). Every problem is listed. Exit 0 when the config is usable, 2 when not.
        """
    static let options = [CommonOptions.config,
                           OptionSpec("--online", "also ask each remote and mirror once, as a run would: credentials, host key, the manifest, ranges, clock"),
                           CommonOptions.help]

    let configPath: String?
    let online: Bool
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
        online = arguments.has("--online")
    }

    func run() throws(FerryError) -> ExitCode {
        let path = ConfigLoader.resolvePath(configPath)
        // Checked as the user that owns the state (the services' user): what it can write is what counts.
        let (config, switched) = try CommandConfig.loadAdopting(path)
        for w in config.warnings { Console.warning(w) }
        var problems = ConfigLoader.problems(in: config)
        // Read above as root: the owner, which the services run as, must read it too.
        if let switched, access(path, R_OK) != 0 {
            problems.insert(.usage("\(switched.user) cannot read the config file: \(FileSystem.errorText())",
                                   hint: "chgrp \(switched.user) \(path) && chmod 640 \(path) (it holds no secret itself: credentials go in their own files)"), at: 0)
        }
        // The state database, opened as the runs open it (by the state's owner): one that cannot be
        // opened (damaged, or another user's) stops every run. A state not made yet is made by the first.
        let database = config.agent.state + "/ferry.db"
        if FileSystem.exists(database) {
            do { _ = try StateStore(directory: config.agent.state, clock: clock) } catch {
                let user = switched?.user ?? StateOwner.userName(geteuid())
                problems.append(.usage("[agent] state = \(config.agent.state): the state database cannot be opened as \(user): \(error.message)",
                                       hint: "it must be \(user)'s to read and write (chown -R \(user): \(config.agent.state)); a damaged one can be moved aside, and the next run starts a new one"))
            }
        }
        // Where each session's credentials come from (S3's chain): fetched now, so a source that
        // cannot give them is found here rather than by the first run.
        var credentials: [String: [String]] = [:]
        for s in config.sessions {
            do { credentials[s.name] = try Backends.check(s, now: clock.now()) } catch {
                problems.append(FerryError(.usage, "[session \(s.name)] " + error.message, hint: error.hint))
            }
        }
        var asked: [String: [OnlineCheck.Finding]] = [:]
        if online && problems.isEmpty {
            for s in config.sessions {
                asked[s.name] = OnlineCheck.findings(for: s, clock: clock)
                for f in asked[s.name]! where !f.ok { problems.append(FerryError(.usage, "[session \(s.name)] \(f.place): \(f.text)", hint: f.hint)) }
            }
        }
        for problem in problems { Console.error(FerryError(.usage, "\(path): " + problem.message, hint: problem.hint)) }
        if !problems.isEmpty {
            Console.err("ferry: \(path): \(Plural.count(problems.count, "problem")); the config is not usable as it is")
            return .usage
        }
        for session in config.sessions { _ = try HTTPSettings.of(session) }
        Console.out("\(path): OK — state \(config.agent.state), \(config.agent.transfers) transfers"
                    + (config.agent.bwlimit.map { ", bwlimit \($0)" } ?? ""))
        if let switched { Console.out("  checked as \(switched.user), the owner of the state directory (the user the services run as)") }
        for s in config.sessions {
            var notes: [String] = []
            if s.delete { notes.append("delete, max \(s.maxDelete)") }
            if let bwlimit = s.bwlimit { notes.append("bwlimit \(bwlimit)") }
            if s.priority != 0 { notes.append("priority \(s.priority)") }
            let flow = s.direction == .push ? "\(s.local) → \(s.manifestURL)" : "\(s.manifestURL) → \(s.local)"
            Console.out("  [session \(s.name)] \(s.direction.rawValue) \(flow)" + (notes.isEmpty ? "" : " (\(notes.joined(separator: ", ")))"))
            for line in credentials[s.name] ?? [] { Console.out("    " + line) }
            if let keys = ConfigShowCommand.keySetInForce(s, state: config.agent.state) { Console.out("    " + keys) }
            for f in asked[s.name] ?? [] { Console.out("    online: \(f.place): \(f.text)") }
            if let discretion = s.discretion {
                // What the conditions say right now, so a window or a threshold can be checked.
                let unmet = discretion.unmet(HostProbe.shared.state(local: s.local, networkMetered: config.agent.networkMetered, clock: clock))
                Console.out("    discretionary: " + (unmet.isEmpty ? "its conditions hold now" : "now waits for " + unmet.joined(separator: "; ")))
            }
        }
        return .inSync
    }
}

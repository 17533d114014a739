import FerryCore
import FerryRuntime

/// `ferry config check`: parse and validate the config, and read the credential files it names.
struct ConfigCheckCommand: Command {
    static let words = ["config", "check"]
    static let summary = "Check the config: syntax, keys, values, and everything it names that can be checked here."
    static let usage = "config check [--config F]"
    static let details = """
        Errors name the file, the line and the key. Beyond the syntax it checks, without the network:
        that the state directory and each pull's local directory can be written (or created), that
        each push's local directory can be read, that the ca-file and credential files are readable,
        that hook programs can be run, and that the metrics directory exists. Every problem is
        listed. Exit 0 when the config is usable, 2 when not.
        """
    static let options = [CommonOptions.config, CommonOptions.help]

    let configPath: String?

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
    }

    func run() throws(FerryError) -> ExitCode {
        let path = ConfigLoader.resolvePath(configPath)
        // Checked as the user that owns the state (the services' user): what it can write is what counts.
        let (config, switched) = try CommandConfig.loadAdopting(path)
        for w in config.warnings { Console.warning(w) }
        let problems = ConfigLoader.problems(in: config)
        for problem in problems { Console.error(FerryError(.usage, "\(path): " + problem.message, hint: problem.hint)) }
        if !problems.isEmpty {
            Console.err("ferry: \(path): \(Plural.count(problems.count, "problem")); the config is not usable as it is")
            return .usage
        }
        for session in config.sessions { _ = try ConfigLoader.httpSettings(for: session) }
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
            if let discretion = s.discretion {
                // What the conditions say right now, so a window or a threshold can be checked.
                let unmet = discretion.unmet(HostProbe.shared.state(local: s.local, networkMetered: config.agent.networkMetered))
                Console.out("    discretionary: " + (unmet.isEmpty ? "its conditions hold now" : "now waits for " + unmet.joined(separator: "; ")))
            }
        }
        return .inSync
    }
}

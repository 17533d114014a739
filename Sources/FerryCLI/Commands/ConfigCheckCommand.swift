import FerryCore
import FerryRuntime

/// `ferry config check`: parse and validate the config, and read the credential files it names.
struct ConfigCheckCommand: Command {
    static let words = ["config", "check"]
    static let summary = "Check the config file: syntax, keys, values, and that credential files are readable."
    static let usage = "config check [--config F]"
    static let details = "Errors name the file, the line and the key. Exit 0 when the config is usable, 2 when not."
    static let options = [CommonOptions.config, CommonOptions.help]

    let configPath: String?

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
    }

    func run() throws(FerryError) -> ExitCode {
        let path = ConfigLoader.resolvePath(configPath)
        let config = try ConfigLoader.load(path: path)
        for session in config.sessions { _ = try ConfigLoader.httpSettings(for: session) }
        for w in config.warnings { Console.warning(w) }
        Console.out("\(path): OK — state \(config.agent.state), \(config.agent.transfers) transfers")
        for s in config.sessions {
            Console.out("  [session \(s.name)] \(s.direction.rawValue) \(s.manifestURL) → \(s.local)\(s.delete ? " (delete, max \(s.maxDelete))" : "")")
        }
        return .inSync
    }
}

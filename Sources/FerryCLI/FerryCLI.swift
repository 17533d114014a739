import Glibc
import FerryCore
import FerryRuntime

/// The `ferry` command line: finds the command named by the first words, parses its options,
/// runs it, prints any error with its hint, and exits with the contract's exit code.
public enum FerryCLI {
    static let commands: [any Command.Type] = [
        SyncNowCommand.self, AgentCommand.self, StatusCommand.self, EventsCommand.self, CancelCommand.self, ResumeCommand.self, CheckCommand.self, ManifestBuildCommand.self, ManifestShowCommand.self, FleetCommand.self, KeyGenerateCommand.self, KeyPublicCommand.self, KeySetCommand.self,
        LsCommand.self, ReloadCommand.self, ConfigCheckCommand.self, ConfigShowCommand.self, ConfigUnitsCommand.self, VersionCommand.self, CompletionCommand.self, HelpCommand.self,
    ]

    static var overview: String {
        var out = "ferry \(FerryVersion.string) — mirror remote content into local directories, verified and resumable\n\nusage: ferry COMMAND [OPTIONS]\n\ncommands:\n"
        for c in commands {
            out += "  " + c.name.padding(to: 16) + c.summary + "\n"
        }
        out += "\nferry help COMMAND shows a command's options. ferry --version prints the version.\n"
        out += "Config: --config FILE, else $FERRY_CONFIG, else /etc/ferry/ferry.conf. --config, --json and --quiet\n"
        out += "may also come before the command (ferry --config F status).\n"
        return out
    }

    /// The commands whose first word is `word`, when they have more (`sync now`, `config check`).
    static func group(_ word: String) -> [any Command.Type] {
        commands.filter { $0.words.count > 1 && $0.words[0] == word }
    }

    /// The commands of a group (`sync`, `manifest`, `config`), listed; nil if `word` names no group.
    static func groupHelp(_ word: String) -> String? {
        let members = group(word)
        guard !members.isEmpty else { return nil }
        var out = "usage: ferry \(word) COMMAND [OPTIONS]\n\ncommands:\n"
        for c in members { out += "  " + c.name.padding(to: 16) + c.summary + "\n" }
        out += "\nferry help \(members[0].name) shows a command's options.\n"
        return out
    }

    static func command(matching words: [String]) -> (command: any Command.Type, rest: [String])? {
        for c in commands where words.count >= c.words.count && Array(words.prefix(c.words.count)) == c.words {
            return (c, Array(words.dropFirst(c.words.count)))
        }
        return nil
    }

    public static func main() -> Never {
        // A parent may have spawned us with signals blocked (dispatch threads do): take SIGTERM
        // and SIGINT as a user means them, through the signal thread, before any other thread starts.
        var none = sigset_t()
        sigemptyset(&none)
        sigprocmask(SIG_SETMASK, &none, nil)
        do throws(FerryError) { try StopSignals.start(clock: SystemClock()) } catch {
            // Without the thread that takes them, a stop or a reload would never be honoured.
            Console.error(error)
            exit(error.exitCode.rawValue)
        }
        Curl.initialize()
        FileSystem.raiseOpenFileLimit()
        signal(SIGPIPE, SIG_IGN)
        if Console.stderrIsTheJournal { Console.priorityPrefixes = true }
        let argv = Array(CommandLine.arguments.dropFirst())
        exit(run(argv).rawValue)
    }

    /// Options every command that takes them takes anywhere, so they may also come before the
    /// command's words (`ferry --config F status`, as git and rclone allow).
    static func globalOptions(_ argv: [String]) -> (global: [String], rest: [String]) {
        var argv = argv[...]
        var global: [String] = []
        while let first = argv.first {
            if first == "--config", argv.count >= 2 {
                global += argv.prefix(2)
                argv = argv.dropFirst(2)
            } else if first.hasPrefix("--config=") || first == "--json" || first == "--quiet" || first == "-q" {
                global.append(first)
                argv = argv.dropFirst()
            } else {
                break
            }
        }
        return (global, Array(argv))
    }

    static func run(_ argv: [String]) -> ExitCode {
        let (global, argv) = globalOptions(argv)
        if argv.isEmpty || argv == ["--help"] || argv == ["-h"] {
            Console.out(overview)
            return argv.isEmpty ? .usage : .inSync
        }
        if argv == ["--version"] || argv == ["-V"] {
            Console.out("ferry \(FerryVersion.string)")
            return .inSync
        }
        guard let match = command(matching: argv) else {
            if let help = groupHelp(argv[0]) {
                if argv.count == 2 && (argv[1] == "--help" || argv[1] == "-h") {
                    Console.out(help)
                    return .inSync
                }
                let members = group(argv[0]).map { "ferry " + $0.name }
                let what = argv.count > 1 ? "has no subcommand '\(Printable.name(argv[1]))'" : "needs a subcommand"
                Console.error(.usage("'ferry \(Printable.name(argv[0]))' \(what)", hint: "did you mean: \(members.joined(separator: ", "))?"))
            } else {
                var hint = "see: ferry help"
                // An option where a command belongs is near an option, never a command ('-V' is not 'ls').
                let isOption = argv[0].hasPrefix("-")
                let words = isOption ? ["--version", "--help"] : Set(commands.map { $0.words[0] }).sorted()
                if let near = ConfigParser.closest(to: argv[0], in: words) { hint = "did you mean '\(near)'? (see: ferry help)" }
                Console.error(.usage(isOption ? "unknown option '\(Printable.name(argv[0]))' before a command" : "unknown command '\(Printable.name(argv[0]))'",
                                     hint: hint))
            }
            return .usage
        }
        if match.rest.contains("--help") || match.rest.contains("-h") {
            Console.out(match.command.helpText)
            return .inSync
        }
        switch match.command.execute(match.rest + global) {
        case .success(let code):
            return code
        case .failure(let error):
            Console.error(error)
            return error.exitCode
        }
    }
}

import Glibc
import FerryCore
import FerryRuntime

/// The `ferry` command line: finds the command named by the first words, parses its options,
/// runs it, prints any error with its hint, and exits with the contract's exit code.
public enum FerryCLI {
    static let commands: [any Command.Type] = [
        SyncNowCommand.self, StatusCommand.self, CancelCommand.self, ResumeCommand.self, ManifestBuildCommand.self,
        ConfigCheckCommand.self, HelpCommand.self,
    ]

    static var overview: String {
        var out = "ferry \(FerryVersion.string) — mirror remote content into local directories, verified and resumable\n\nusage: ferry COMMAND [OPTIONS]\n\ncommands:\n"
        for c in commands {
            out += "  " + c.name.padding(to: 16) + c.summary + "\n"
        }
        out += "\nferry help COMMAND shows a command's options. ferry --version prints the version.\n"
        out += "Config: --config FILE, else $FERRY_CONFIG, else /etc/ferry/ferry.conf.\n"
        return out
    }

    static func command(matching words: [String]) -> (command: any Command.Type, rest: [String])? {
        for c in commands where words.count >= c.words.count && Array(words.prefix(c.words.count)) == c.words {
            return (c, Array(words.dropFirst(c.words.count)))
        }
        return nil
    }

    public static func main() -> Never {
        Curl.initialize()
        FileSystem.raiseOpenFileLimit()
        // A parent may have spawned us with signals blocked (dispatch threads do): take SIGTERM
        // and SIGINT as a user means them.
        var none = sigset_t()
        sigemptyset(&none)
        sigprocmask(SIG_SETMASK, &none, nil)
        signal(SIGPIPE, SIG_IGN)
        let argv = Array(CommandLine.arguments.dropFirst())
        exit(run(argv).rawValue)
    }

    static func run(_ argv: [String]) -> ExitCode {
        if argv.isEmpty || argv == ["--help"] || argv == ["-h"] {
            Console.out(overview)
            return argv.isEmpty ? .usage : .inSync
        }
        if argv == ["--version"] || argv == ["version"] {
            Console.out("ferry \(FerryVersion.string)")
            return .inSync
        }
        guard let match = command(matching: argv) else {
            let known = commands.map { $0.words }
            if let group = known.first(where: { $0.count > 1 && $0[0] == argv[0] }) {
                Console.error(.usage("'ferry \(argv[0])' needs a subcommand", hint: "did you mean: ferry \(group.joined(separator: " "))?"))
            } else {
                Console.error(.usage("unknown command '\(argv[0])'", hint: "see: ferry help"))
            }
            return .usage
        }
        if match.rest.contains("--help") || match.rest.contains("-h") {
            Console.out(match.command.helpText)
            return .inSync
        }
        switch match.command.execute(match.rest) {
        case .success(let code):
            return code
        case .failure(let error):
            Console.error(error)
            return error.exitCode
        }
    }
}

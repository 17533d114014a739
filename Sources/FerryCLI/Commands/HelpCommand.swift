import FerryCore

/// `ferry help [COMMAND]`.
struct HelpCommand: Command {
    static let words = ["help"]
    static let summary = "Show help for ferry or for one command."
    static let usage = "help [COMMAND]"
    static let details = ""
    static let options: [OptionSpec] = []

    let topic: [String]

    init(arguments: Arguments) throws(FerryError) {
        topic = arguments.positionals
    }

    func run() throws(FerryError) -> ExitCode {
        if topic.isEmpty {
            Console.out(FerryCLI.overview)
            return .inSync
        }
        guard let command = FerryCLI.command(matching: topic)?.command else {
            if topic.count == 1, let help = FerryCLI.groupHelp(topic[0]) {
                Console.out(help)
                return .inSync
            }
            throw .usage("no command 'ferry \(Printable.name(topic.joined(separator: " ")))'", hint: "see: ferry help")
        }
        Console.out(command.helpText)
        return .inSync
    }
}

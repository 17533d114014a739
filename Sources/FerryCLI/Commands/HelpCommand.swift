import FerryCore

/// `ferry help [COMMAND]`.
struct HelpCommand: Command {
    static let words = ["help"]
    static let summary = "Show help for ferry or for one command."
    static let usage = "help [COMMAND] [--man [--date D]]"
    static let details = "--man prints the manual page ferry(1) instead (troff; man -l - reads it): every command's help, exit codes, files."
    static let options = [OptionSpec("--man", "print the manual page ferry(1), made from every command's help"),
                          OptionSpec("--date", value: "D", "the date the manual page carries (default: today)")]

    let topic: [String]
    let man: Bool
    let date: String?
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        topic = arguments.positionals
        man = arguments.has("--man")
        date = arguments.value("--date")
    }

    func run() throws(FerryError) -> ExitCode {
        if man {
            Console.out(String(Manual.page(date: date ?? String(clock.now().rfc3339.prefix(10))).dropLast()))
            return .inSync
        }
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

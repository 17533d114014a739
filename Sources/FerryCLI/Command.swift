import FerryCore

/// A ferry command: its words (`sync now`), help text and options, and what it does.
protocol Command: Sendable {
    /// The words that select it, e.g. `["sync", "now"]`.
    static var words: [String] { get }
    static var summary: String { get }
    static var usage: String { get }
    static var details: String { get }
    static var options: [OptionSpec] { get }
    init(arguments: Arguments) throws(FerryError)
    func run() throws(FerryError) -> ExitCode
}

extension Command {
    /// Parses the options and runs the command.
    static func execute(_ argv: [String]) -> Result<ExitCode, FerryError> {
        do throws(FerryError) {
            let arguments = try Arguments(argv, options: options, command: name)
            return .success(try Self(arguments: arguments).run())
        } catch {
            return .failure(error)
        }
    }

    static var name: String { words.joined(separator: " ") }

    static var helpText: String {
        var out = "usage: ferry \(usage)\n\n\(summary)\n"
        if !details.isEmpty { out += "\n\(details)\n" }
        if !options.isEmpty {
            out += "\noptions:\n"
            for o in options {
                let left = "  " + o.name + (o.value.map { " " + $0 } ?? "")
                out += left.padding(to: 24) + " " + o.help + "\n"
            }
        }
        return out
    }
}

extension String {
    func padding(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}

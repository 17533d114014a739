import FerryCore
import FerryRuntime

/// `ferry version` (and `ferry --version`): which ferry this is.
struct VersionCommand: Command {
    static let words = ["version"]
    static let summary = "Print ferry's version."
    static let usage = "version [--json]"
    static let details = "The same as ferry --version; --json prints {\"version\": \"...\"}."
    static let options = [CommonOptions.json, CommonOptions.help]

    let json: Bool

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        json = arguments.has("--json")
    }

    func run() throws(FerryError) -> ExitCode {
        if json { Console.json("{\"version\":\(JSONText.quote(FerryVersion.string))}") } else { Console.out("ferry \(FerryVersion.string)") }
        return .inSync
    }
}

import FerryCore

/// One option a command accepts; its help text lives beside it.
struct OptionSpec {
    let name: String
    let value: String?
    let repeatable: Bool
    let help: String

    init(_ name: String, value: String? = nil, repeatable: Bool = false, _ help: String) {
        self.name = name
        self.value = value
        self.repeatable = repeatable
        self.help = help
    }
}

/// A command line split against a command's options. Unknown options are usage errors that name
/// the option and point at the command's help.
struct Arguments {
    private(set) var values: [String: [String]] = [:]
    private(set) var flags: Set<String> = []
    private(set) var positionals: [String] = []

    init(_ argv: [String], options: [OptionSpec], command: String) throws(FerryError) {
        var i = 0
        var onlyPositionals = false
        while i < argv.count {
            var arg = argv[i]
            i += 1
            if onlyPositionals || !arg.hasPrefix("-") || arg == "-" {
                positionals.append(arg)
                continue
            }
            if arg == "--" { onlyPositionals = true; continue }
            // Short forms of the options every tool user reaches for, where the command has them.
            if let long = Arguments.shortForms[arg], options.contains(where: { $0.name == long }) { arg = long }
            var inline: String?
            if let eq = arg.firstIndex(of: "="), arg.hasPrefix("--") {
                inline = String(arg[arg.index(after: eq)...])
                arg = String(arg[..<eq])
            }
            guard let spec = options.first(where: { $0.name == arg }) else {
                var hint = "see: ferry help \(command)"
                if let near = ConfigParser.closest(to: arg, in: options.map(\.name)) { hint = "did you mean '\(near)'? (see: ferry help \(command))" }
                throw .usage("ferry \(command): unknown option '\(Printable.name(arg))'", hint: hint)
            }
            if spec.value != nil {
                let value: String
                if let inline {
                    value = inline
                } else {
                    guard i < argv.count else { throw .usage("ferry \(command): option \(arg) needs a value (\(spec.value!))") }
                    value = argv[i]
                    i += 1
                }
                if !spec.repeatable && values[arg] != nil { throw .usage("ferry \(command): option \(arg) is given twice") }
                values[arg, default: []].append(value)
            } else {
                if inline != nil { throw .usage("ferry \(command): option \(arg) takes no value") }
                flags.insert(arg)
            }
        }
    }

    /// `-q`, `-v`, `-n`: `--quiet`, `--verbose`, `--dry-run`.
    static let shortForms = ["-q": "--quiet", "-v": "--verbose", "-n": "--dry-run"]

    func value(_ name: String) -> String? { values[name]?.last }
    func all(_ name: String) -> [String] { values[name] ?? [] }
    func has(_ name: String) -> Bool { flags.contains(name) }

    func expectPositionals(_ range: ClosedRange<Int>, command: String, what: String) throws(FerryError) {
        guard range.contains(positionals.count) else {
            if positionals.count > range.upperBound {
                throw .usage("ferry \(command): unexpected argument '\(positionals[range.upperBound])'", hint: "see: ferry help \(command)")
            }
            throw .usage("ferry \(command): missing \(what)", hint: "see: ferry help \(command)")
        }
    }
}

/// Options several commands share, defined once.
enum CommonOptions {
    static let config = OptionSpec("--config", value: "FILE", "config file (default: $FERRY_CONFIG, else /etc/ferry/ferry.conf)")
    static let session = OptionSpec("--session", value: "ID", "only this session")
    static let sessions = OptionSpec("--session", value: "ID", repeatable: true, "only this session (repeat for more)")
    static let json = OptionSpec("--json", "machine-readable output: one JSON object per line")
    static let quiet = OptionSpec("--quiet", "print nothing but errors (-q)")
    static let verbose = OptionSpec("--verbose", "also say each file as it starts and finishes (-v)")
    static let help = OptionSpec("--help", "show this help")
    static let maxDuration = OptionSpec("--max-duration", value: "D", "stop after D (e.g. 90s, 15m), keep resume data, exit 3")

    /// A time option (`--not-before`, `--since`), when given: a duration (30m), a local time in
    /// the machine's zone (2026-11-24 02:00) or an RFC 3339 time.
    static func time(_ arguments: Arguments, _ option: String, command: String) throws(FerryError) -> EarliestBegin? {
        guard let text = arguments.value(option) else { return nil }
        guard let time = EarliestBegin(parsing: text) else {
            throw .usage("ferry \(command): \(option) wants a duration (30m), a local time (2026-11-24 02:00) or an RFC 3339 time (2026-11-24T02:00:00Z), got '\(text)'")
        }
        return time
    }

    /// The events a command shows: `-v` adds each file's steps, `-q` keeps errors.
    static func level(_ arguments: Arguments) -> LogLevel {
        if arguments.has("--quiet") { return .error }
        return arguments.has("--verbose") ? .debug : .info
    }

    /// `--max-duration`, when given: a positive duration.
    static func maxDuration(_ arguments: Arguments, command: String) throws(FerryError) -> Double? {
        guard let text = arguments.value("--max-duration") else { return nil }
        guard let d = Units.parseDuration(text), d > 0 else {
            throw .usage("ferry \(command): --max-duration wants a duration like 90s, 15m or 2h, got '\(text)'")
        }
        return d
    }
}

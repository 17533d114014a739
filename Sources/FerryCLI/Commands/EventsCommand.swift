import Glibc
import FerryCore
import FerryRuntime

/// `ferry events`: the sessions' event logs, oldest first, and with --follow what comes next.
struct EventsCommand: Command {
    static let words = ["events"]
    static let summary = "Show the sessions' event logs; --follow waits for new events."
    static let usage = "events [--config F] [--session ID] [--type T,...] [--since D|T] [-n N] [--follow] [--json]"
    static let details = """
        Every run (ferry sync now, ferry resume, the agent) logs its events per session in the state
        directory, keeping the newest 4-8 MiB of each. Prints them oldest first, one per line:
        time, session, event and its fields. Without --session the agent's own events (starts,
        reloads, refused configs) are included. --follow keeps printing events as they are logged
        until interrupted (exit 0). --json prints each event as its JSON object, as --json runs do.
        --since shows only events from a duration ago (30m, 2h, 7d) or since a time (2026-11-24 02:00
        local time, or RFC 3339); -n N only the last N of them. --type shows only events of the
        names given, separated by commas (rolled-back,rollout; agent for the agent's starts,
        reloads and refused reloads; warning; file-failed; and so on), also with --follow.
        """
    static let options = [CommonOptions.config, CommonOptions.session,
                          OptionSpec("--since", value: "D|T", "only events from D ago (30m, 7d) or since a time (2026-11-24 02:00, or RFC 3339)"),
                          OptionSpec("--type", value: "T,...", "only events of these names (rolled-back,warning,agent,...)"),
                          OptionSpec("-n", value: "N", "only the last N events"),
                          OptionSpec("--follow", "keep printing new events until interrupted"),
                          CommonOptions.json, CommonOptions.help]

    let configPath: String?
    let session: String?
    let follow: Bool
    let json: Bool
    let since: EarliestBegin?
    let last: Int?
    /// The event names shown (nil: all).
    let types: Set<String>?
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
        session = arguments.value("--session")
        follow = arguments.has("--follow")
        json = arguments.has("--json")
        since = try CommonOptions.time(arguments, "--since", command: Self.name)
        types = try arguments.value("--type").map { text throws(FerryError) in try EventsCommand.types(text) }
        if let text = arguments.value("-n") {
            guard let n = Int(text), n >= 0 else { throw .usage("ferry events: -n wants a count of events, like 20, got '\(text)'") }
            last = n
        } else {
            last = nil
        }
    }

    func run() throws(FerryError) -> ExitCode {
        let config = try CommandConfig.load(configPath)
        let sessions = try selectSessions(config, names: session.map { [$0] } ?? [])
        var names: [String?] = sessions.map(\.name)
        if session == nil { names.append(nil) }
        let readers = names.map { EventLogReader(path: EventLog.path(state: config.agent.state, session: $0)) }
        var lines: [(time: Timestamp, line: [UInt8])] = []
        // A duration counts back from now: 30m is the last half hour.
        let from = since.map { since -> Timestamp in
            let now = clock.now()
            guard case let .after(seconds) = since else { return since.time(from: now) }
            return Timestamp(seconds: now.seconds - Int64(seconds.rounded(.up)))
        }
        for reader in readers {
            for line in reader.readAll() {
                let time = Timestamp(rfc3339: EventsCommand.time(of: line)) ?? Timestamp(seconds: 0)
                if let from, time < from { continue }
                guard wanted(line) else { continue }
                lines.append((time, line))
            }
        }
        // Each log is in order; across sessions, by time (a stable sort keeps each log's order).
        let sorted = lines.enumerated().sorted(by: { ($0.element.time, $0.offset) < ($1.element.time, $1.offset) })
        for entry in sorted.suffix(last ?? sorted.count) {
            show(entry.element.line)
        }
        guard follow else { return .inSync }
        let stop = StopToken()
        StopSignals.install(stopTimeout: config.agent.stopTimeout, token: stop, forcedExit: .inSync)
        while stop.reason == nil {
            for reader in readers { for line in reader.readNew() where wanted(line) { show(line) } }
            usleep(200_000)
        }
        return .inSync
    }

    /// The names `--type` gives, each one ferry writes.
    static func types(_ text: String) throws(FerryError) -> Set<String> {
        let names = text.split(separator: ",").map { String($0).trimmingSpaces() }.filter { !$0.isEmpty }
        guard !names.isEmpty else { throw .usage("ferry events: --type wants event names, like rolled-back,warning") }
        if let unknown = names.first(where: { !Event.names.contains($0) }) {
            throw .usage("ferry events: --type: no event is named '\(Printable.name(unknown))'",
                         hint: "the names are " + Event.names.joined(separator: ", "))
        }
        return Set(names)
    }

    /// Whether `line` is an event of a type asked for (every line without --type).
    private func wanted(_ line: [UInt8]) -> Bool {
        guard let types else { return true }
        guard let fields = try? line.withUnsafeBufferPointer({ (p) throws(JSONReader.Failure) in try JSONReader.flatObject(p) }),
              let name = fields.first(where: { $0.key == "event" })?.value else { return false }
        return types.contains(name)
    }

    private func show(_ line: [UInt8]) {
        if json {
            // The log holds what ferry wrote; a line that is not one JSON object is left out.
            guard let text = String(validating: line, as: UTF8.self), line.first == UInt8(ascii: "{") else { return }
            Console.json(text)
            return
        }
        guard let fields = try? line.withUnsafeBufferPointer({ (p) throws(JSONReader.Failure) in try JSONReader.flatObject(p) }) else { return }
        Console.out(EventsCommand.human(fields))
    }

    static func time(of line: [UInt8]) -> String {
        // Every line ferry writes starts with {"time":"...".
        let prefix = Array("{\"time\":\"".utf8)
        guard line.count > prefix.count + 20, Array(line[0..<prefix.count]) == prefix,
              let end = line[prefix.count...].firstIndex(of: UInt8(ascii: "\"")) else { return "" }
        return String(decoding: line[prefix.count..<end], as: UTF8.self)
    }

    /// `TIME SESSION EVENT key=value ...`, every value escaped for the terminal.
    static func human(_ fields: [(key: String, value: String?)]) -> String {
        func field(_ key: String) -> String { fields.first { $0.key == key }?.value ?? "" }
        let session = field("session").isEmpty ? "(agent)" : Printable.name(field("session"))
        var parts = [field("time"), session, field("event")]
        for (key, value) in fields where !["time", "session", "event"].contains(key) {
            guard let value else { continue }
            let shown = Printable.name(value)
            parts.append(key + "=" + (shown.contains(" ") || shown.isEmpty ? "\"" + shown + "\"" : shown))
        }
        return parts.joined(separator: " ")
    }
}

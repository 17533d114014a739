import FerryCore
import FerryRuntime

/// `ferry sync now` and `ferry resume` while an agent runs with the same state directory: the work
/// is handed to the agent over its control socket (never transferred beside it), its events and
/// progress bars are shown as a run of this process would show them, and the exit code is that of
/// the agent's cycles. `limits` (`sync now --bwlimit --transfers`) go with the work: the agent
/// runs these cycles at them. A deadline or signal here stops only the following (exit 3): the
/// agent goes on.
enum Handover {
    struct Outcome {
        let exitCode: ExitCode
        /// Sessions the agent does not run (not in its config): this process runs them itself.
        let leftOver: [SessionConfig]
    }

    /// nil when no agent listens: the caller runs the sessions itself.
    static func toAgent(config: Config, sessions: [SessionConfig], notBefore: String?, limits: RunLimits? = nil, reporter: SyncReporter,
                        mode: OutputMode, stop: StopCondition) -> Outcome? {
        guard let link = AgentLink(state: config.agent.state) else { return nil }
        let names = sessions.map(\.name)
        let request = ControlRequest(command: "sync", sessions: names, notBefore: notBefore, limits: limits, progress: reporter.drawsBars)
        guard link.send(request) else { return nil }
        var leftOver: [SessionConfig] = []
        while true {
            if let reason = stop.reason {
                if mode != .json {
                    Console.out("ferry: \(reason): stopped following; the agent goes on with the sync")
                }
                return Outcome(exitCode: .incomplete, leftOver: [])
            }
            switch link.receive(timeout: 0.2) {
            case .timedOut:
                continue
            case .closed:
                Console.error(FerryError(.stopped, "the agent closed the link before the sync finished",
                                         hint: "ferry status shows where the sessions stand; the agent, or the next run, resumes them"))
                return Outcome(exitCode: .incomplete, leftOver: leftOver)
            case .line(let line):
                guard let f = try? JSONReader.flatFields(line) else { continue }
                switch f["event"] {
                case "handover":
                    let unknown = Set((f["unknown"] ?? "").split(separator: ",").map(String.init))
                    leftOver = sessions.filter { unknown.contains($0.name) }
                    let accepted = names.filter { !unknown.contains($0) }
                    if mode == .human && !accepted.isEmpty {
                        Console.out("ferry: handing \(accepted.map(Printable.name).joined(separator: ", ")) over to the running agent (pid \(f["pid"] ?? "?"))")
                    }
                    if let limits = request.limits, !accepted.isEmpty, f["bwlimit"] == nil && f["transfers"] == nil {
                        // An agent older than per-run limits: said now, before its cycles run, not after.
                        reporter.event(Event(time: stop.clock.now(), session: "", body: .warning(
                            message: "the running agent (pid \(f["pid"] ?? "?")) takes no \(limits.description) from a hand-over: its cycles go at its own settings (restart it with this ferry to have them)")))
                    }
                case "handover-refused":
                    Console.warning("the running agent refused the hand-over: \(f["message"] ?? "no reason given"); running here instead")
                    return nil
                case "handover-done":
                    let code = f["exit_code"].flatMap(Int32.init).flatMap(ExitCode.init(rawValue:)) ?? .incomplete
                    return Outcome(exitCode: code, leftOver: leftOver)
                case "progress":
                    // Asked for only when bars are drawn; never a line of --json output.
                    if let progress = SyncProgress(controlLine: line) { reporter.progress(progress) }
                default:
                    if mode == .json {
                        if let text = String(validating: line, as: UTF8.self) { Console.json(text) }
                    } else if let event = Event(fields: f) {
                        reporter.event(event)
                    }
                }
            }
        }
    }
}

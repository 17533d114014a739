import FerryCore
import FerryRuntime

/// `ferry resume`: makes suspended tasks runnable and continues them now from their offsets. It
/// says so in a line per session, each task only when named, or with -v.
struct ResumeCommand: Command {
    static let words = ["resume"]
    static let summary = "Continue suspended transfers from where they stopped."
    static let usage = "resume [--config F] (--session ID | TASK...) [--max-duration D] [--json] [--quiet|-q] [--verbose|-v]"
    static let details = """
        Marks the tasks runnable again ("resuming 1,530 tasks of session assets (212 from their kept
        offsets)"; tasks named by id, and every task with -v, get a line each), then syncs their
        sessions now, so each continues from its kept offset (Range + If-Range). With a ferry agent running, it hands the sessions to the agent and
        follows them, as sync now does. If another ferry is running the session, that run takes the tasks back
        within a second and finishes them (or, if it has run out of work, its next run does).
        Like sync now, it stops at --max-duration or the session's max-duration with exit 3, keeping
        resume data. Exit codes as for ferry sync now.
        """
    static let options = [CommonOptions.config, CommonOptions.session, CommonOptions.maxDuration, CommonOptions.json,
                          CommonOptions.quiet, OptionSpec("--verbose", "also say each task resumed, and each file as it starts and finishes (-v)"),
                          CommonOptions.help]

    let arguments: Arguments
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        self.arguments = arguments
    }

    func run() throws(FerryError) -> ExitCode {
        let selection = try TaskSelection(arguments: arguments, command: Self.name, clock: clock)
        let (config, store) = (selection.config, selection.store)
        let mode = OutputMode(arguments: arguments)
        let reporter = SyncReporter(mode: mode, level: CommonOptions.level(arguments), clock: clock)
        reporter.busyIsExpected = true
        let maxDuration = try CommonOptions.maxDuration(arguments, command: Self.name)
        let stop = StopSignals.stopCondition(stopTimeout: config.agent.stopTimeout, maxDuration: maxDuration, clock: clock)
        var sessions: [SessionConfig] = []
        for (session, ids) in selection.targets {
            let tasks = try store.unsuspend(session: session.name, ids: ids)
            if mode == .human {
                let name = Printable.name(session.name)
                let verbose = arguments.has("--verbose")
                if verbose || ids != nil {
                    for t in tasks { Console.out("\(name): resuming task \(t.id) \(Printable.name(t.path.string)) from \(Units.formatBytes(t.bytesDone))") }
                }
                if tasks.isEmpty {
                    Console.out("\(name): no suspended tasks\(ids == nil ? "" : " among those named")")
                } else if verbose || ids == nil {
                    let partial = tasks.filter { $0.bytesDone > 0 }.count
                    let offsets = partial > 0 ? " (\(Units.formatCount(partial)) from \(partial == 1 ? "its" : "their") kept \(Plural.noun(partial, "offset")))" : ""
                    Console.out("resuming \(Units.formatCount(tasks.count)) \(Plural.noun(tasks.count, "task")) of session \(name)\(offsets)")
                }
            }
            sessions.append(session)
        }
        // A running agent continues them (its running cycle takes them back within a second, or it
        // polls the session now).
        var handedOver: [ExitCode] = []
        if let outcome = Handover.toAgent(config: config, sessions: sessions, notBefore: nil, reporter: reporter, mode: mode, stop: stop) {
            handedOver = [outcome.exitCode]
            sessions = outcome.leftOver
            if sessions.isEmpty { return outcome.exitCode }
        }
        let jobs = sessions.map { SessionRunner.Job(session: $0, options: SyncOptions(stop: stop.limited(to: $0.maxDuration))) }
        // A busy session is not a failure here: the process holding it takes the resumed tasks back.
        let record = try RunRecord(config: config, terminal: reporter, clock: clock)
        let results = try SessionRunner(agent: config.agent, clock: clock).run(jobs, sinks: [record.hub])
        record.finish()
        for result in results where result.error?.category == .busy && mode != .json {
            Console.out("\(result.session): \(result.error!.message); the ferry running it takes the resumed tasks back")
        }
        return ExitCode.worst(results.filter { $0.error?.category != .busy }.map(\.exitCode) + handedOver)
    }
}

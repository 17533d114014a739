import Glibc
import FerryCore
import FerryRuntime

/// `ferry cancel`: suspends tasks and keeps their resume data (partial file, offset, validator),
/// like `cancel(byProducingResumeData:)`. A run in progress stops them within a second. What
/// happened is said in a line per session, whatever the number of tasks; each task only when
/// named, or with -v.
struct CancelCommand: Command {
    static let words = ["cancel"]
    static let summary = "Suspend transfers, keeping their resume data; ferry resume continues them."
    static let usage = "cancel [--config F] (--session ID | TASK...) [--verbose|-v]"
    static let details = """
        TASK is a task id from ferry status (-v or --files list them). Suspended tasks keep their partial
        file, the offset reached and the validator; runs skip them (and postpone deletions) until ferry
        resume. A ferry already transferring for the session stops them within a second, checkpointing
        what it fetched; cancel waits for it (up to 10s) and says what happened, in one line per
        session: "suspended 1,530 tasks of session assets (resume data kept for 212)", and a line
        more for tasks whose file was committed before the cancel reached them, that left the
        manifest, or that the running ferry has not confirmed yet. Tasks named by id, and every task
        with -v, also get a line each.
        """
    static let options = [CommonOptions.config, CommonOptions.session,
                          OptionSpec("--verbose", "also say what happened to each task (-v)"), CommonOptions.help]

    let arguments: Arguments
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        self.arguments = arguments
    }

    /// What became of the tasks a cancel asked to suspend, counted for the session's line.
    private struct Outcome {
        var suspended = 0
        /// Suspended with bytes kept to resume from.
        var kept = 0
        var finished = 0
        var gone = 0
        var unconfirmed = 0
        var other: [TaskState: Int] = [:]
    }

    func run() throws(FerryError) -> ExitCode {
        let selection = try TaskSelection(arguments: arguments, command: Self.name, clock: clock)
        let store = selection.store
        let verbose = arguments.has("--verbose")
        for (session, ids) in selection.targets {
            let name = Printable.name(session.name)
            let (tasks, request) = try store.suspend(session: session.name, ids: ids)
            if tasks.isEmpty {
                Console.out("\(name): nothing to suspend (no unfinished tasks\(ids == nil ? "" : " among those named"))")
                continue
            }
            // A ferry transferring for the session stops the tasks within a second; one of them may
            // finish and be committed first. Wait for its answer, then report what really happened.
            let runner = try waitForRunner(store: store, session: session.name, request: request, timeout: 10)
            let now = Dictionary(uniqueKeysWithValues: try store.tasks(session: session.name).map { ($0.id, $0) })
            var outcome = Outcome()
            for t in tasks {
                let path = Printable.name(t.path.string)
                var said: String
                if let current = now[t.id] {
                    if let pid = runner, current.state != .done {
                        outcome.unconfirmed += 1
                        said = "asked to suspend task \(t.id) \(path); ferry (pid \(pid)) running the session has not confirmed yet"
                    } else {
                        switch current.state {
                        case .done:
                            outcome.finished += 1
                            said = "task \(t.id) \(path) had already finished: the file was committed before the cancel reached it"
                        case .suspended:
                            outcome.suspended += 1
                            if current.bytesDone > 0 { outcome.kept += 1 }
                            let kept = current.bytesDone > 0 ? "resume data kept: \(Units.formatBytes(current.bytesDone))" : "not started"
                            said = "suspended task \(t.id) \(path) (\(kept))"
                        default:
                            outcome.other[current.state, default: 0] += 1
                            said = "task \(t.id) \(path) is \(current.state.rawValue)"
                        }
                    }
                } else {
                    outcome.gone += 1
                    said = "task \(t.id) \(path) no longer exists (the file left the manifest)"
                }
                if verbose || ids != nil { Console.out("\(name): \(said)") }
            }
            if verbose || ids == nil { report(outcome, session: name, runner: runner) }
        }
        return .inSync
    }

    /// The session's line, and one more for each other way tasks ended.
    private func report(_ o: Outcome, session name: String, runner: Int32?) {
        func tasks(_ n: Int) -> String { Units.formatCount(n) + " " + Plural.noun(n, "task") }
        if o.suspended > 0 {
            // Bytes recorded to resume from; an upload keeps what it has elsewhere, if anything.
            let kept = o.kept > 0 ? " (resume data kept for \(Units.formatCount(o.kept)))" : ""
            Console.out("suspended \(tasks(o.suspended)) of session \(name)\(kept)")
        }
        if o.finished > 0 {
            Console.out("\(tasks(o.finished)) of session \(name) had already finished: committed before the cancel reached \(o.finished == 1 ? "it" : "them")")
        }
        if o.gone > 0 {
            Console.out("\(tasks(o.gone)) of session \(name) no longer \(o.gone == 1 ? "exists" : "exist") (the files left the manifest)")
        }
        for (state, n) in o.other.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            Console.out("\(tasks(n)) of session \(name) \(n == 1 ? "is" : "are") \(state.rawValue)")
        }
        if o.unconfirmed > 0, let pid = runner {
            Console.out("asked ferry (pid \(pid)) running session \(name) to suspend \(tasks(o.unconfirmed)); not confirmed after 10s "
                        + "(it may be busy committing or hashing): ferry status shows how they end")
        }
    }

    /// Waits until the process running the session (if any) has answered suspension `request`.
    /// Returns its pid if it is still running and has not answered by `timeout` seconds.
    private func waitForRunner(store: StateStore, session: String, request: Int64, timeout: Double) throws(FerryError) -> Int32? {
        let deadline = clock.monotonic() + timeout
        while true {
            guard let pid = try store.session(session)?.runningPID, kill(pid, 0) == 0 || errno == EPERM else { return nil }
            if try store.suspendRequests(session: session).handled >= request { return nil }
            if clock.monotonic() >= deadline { return pid }
            usleep(50_000)
        }
    }
}

import Glibc
import FerryCore
import FerryRuntime

/// `ferry cancel`: suspends tasks and keeps their resume data (partial file, offset, validator),
/// like `cancel(byProducingResumeData:)`. A run in progress stops them within a second.
struct CancelCommand: Command {
    static let words = ["cancel"]
    static let summary = "Suspend transfers, keeping their resume data; ferry resume continues them."
    static let usage = "cancel [--config F] (--session ID | TASK...)"
    static let details = """
        TASK is a task id from ferry status. Suspended tasks keep their partial file, the offset reached and
        the validator; runs skip them (and postpone deletions) until ferry resume. A ferry already
        transferring for the session stops them within a second, checkpointing what it fetched; cancel
        waits for it (up to 10s) and reports what happened to each task: suspended with its resume
        data, or already finished when the file was committed before the cancel reached it.
        """
    static let options = [CommonOptions.config, CommonOptions.session, CommonOptions.help]

    let arguments: Arguments

    init(arguments: Arguments) throws(FerryError) {
        self.arguments = arguments
    }

    func run() throws(FerryError) -> ExitCode {
        let selection = try TaskSelection(arguments: arguments, command: Self.name)
        let store = selection.store
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
            for t in tasks {
                let path = Printable.name(t.path.string)
                guard let current = now[t.id] else {
                    Console.out("\(name): task \(t.id) \(path) no longer exists (the file left the manifest)")
                    continue
                }
                if let pid = runner, current.state != .done {
                    Console.out("\(name): asked to suspend task \(t.id) \(path); ferry (pid \(pid)) running the session has not confirmed yet")
                    continue
                }
                switch current.state {
                case .done:
                    Console.out("\(name): task \(t.id) \(path) had already finished: the file was committed before the cancel reached it")
                case .suspended:
                    let kept = current.bytesDone > 0 ? "resume data kept: \(Units.formatBytes(current.bytesDone))" : "not started"
                    Console.out("\(name): suspended task \(t.id) \(path) (\(kept))")
                default:
                    Console.out("\(name): task \(t.id) \(path) is \(current.state.rawValue)")
                }
            }
            if let pid = runner {
                Console.out("\(name): ferry (pid \(pid)) had not confirmed after 10s (it may be busy committing or hashing); ferry status shows how each task ends")
            }
        }
        return .inSync
    }

    /// Waits until the process running the session (if any) has answered suspension `request`.
    /// Returns its pid if it is still running and has not answered by `timeout` seconds.
    private func waitForRunner(store: StateStore, session: String, request: Int64, timeout: Double) throws(FerryError) -> Int32? {
        let deadline = MonotonicClock.seconds() + timeout
        while true {
            guard let pid = try store.session(session)?.runningPID, kill(pid, 0) == 0 || errno == EPERM else { return nil }
            if try store.suspendRequests(session: session).handled >= request { return nil }
            if MonotonicClock.seconds() >= deadline { return pid }
            usleep(50_000)
        }
    }
}

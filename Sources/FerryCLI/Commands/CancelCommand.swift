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
        transferring for the session stops them within a second, checkpointing what it fetched.
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
            let tasks = try store.suspend(session: session.name, ids: ids)
            if tasks.isEmpty {
                Console.out("\(session.name): nothing to suspend (no unfinished tasks\(ids == nil ? "" : " among those named"))")
                continue
            }
            for t in tasks {
                let kept = t.bytesDone > 0 ? "resume data kept: \(Units.formatBytes(t.bytesDone))" : "not started"
                Console.out("\(session.name): suspended task \(t.id) \(t.path) (\(kept))")
            }
        }
        return .inSync
    }
}

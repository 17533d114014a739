import CSystem
import Dispatch
import Glibc
import Synchronization
import FerryCore

/// Runs the sessions' hooks: `on-file-done` for every file a run finished, `on-session-done` when a
/// run finished all of a session's work. A hook is its configured argv (`HookCommand`), started
/// with `posix_spawnp`, never through a shell, holding no descriptor of ferry's but 0, 1 and 2;
/// what the event was about reaches it only through the environment:
///
///     FERRY_SESSION  the session          FERRY_RESULT  done | failed (file); in-sync, files-failed, ... (session)
///     FERRY_PATH     the file, relative   FERRY_LOCAL   the file's local path (file); the local root (session)
///                                         (layout = generations: the file in the generation made current)
///     FERRY_BYTES    the file's size (file); bytes fetched (session)
///     FERRY_ERROR    why a file failed    FERRY_EXIT_CODE, FERRY_FILES, FERRY_DELETED, FERRY_FAILED (session)
///
/// A hook inherits ferry's environment but for ferry's own variables and its secrets (every
/// `AWS_*`, `CREDENTIALS_DIRECTORY`: `HookProcess.withheld`).
///
/// Hooks run one at a time on a thread of their own, in the order of their events, so a slow hook
/// never holds up a transfer; stdin is /dev/null and stdout goes to stderr (the journal). A hook
/// that runs past `hook-timeout` gets SIGTERM, then SIGKILL two seconds later. A hook that fails,
/// hangs or cannot start is reported as a warning event; at most `maxQueued` wait, and what comes
/// beyond that is dropped and reported.
public final class HookRunner: EventSink, @unchecked Sendable {
    public static let maxQueued = 10_000

    private struct Job {
        let kind: String
        let session: String
        let command: HookCommand
        let environment: [String]
        let timeout: Double
        let subject: String
    }

    private struct Queue {
        var jobs: [Job] = []
        var head = 0
        var busy = false
        var dropped = 0
    }

    private let sessions: Mutex<[String: SessionConfig]>
    private let queue = Mutex(Queue())
    private let available = DispatchSemaphore(value: 0)
    private let idle = DispatchSemaphore(value: 0)
    /// Where the runner's own reports go (warning events); set before the first event.
    public var report: @Sendable (Event) -> Void = { _ in }
    /// `hook-timeout` and the reports' times go by it.
    private let clock: any Clock

    public init(sessions: [SessionConfig], clock: any Clock) throws(FerryError) {
        self.sessions = Mutex(Dictionary(uniqueKeysWithValues: sessions.map { ($0.name, $0) }))
        self.clock = clock
        try Threads.start(name: "ferry-hooks") { [self] in work() }
    }

    /// The sessions after a reload: their hooks apply to the events that follow.
    public func update(sessions: [SessionConfig]) {
        self.sessions.withLock { $0 = Dictionary(uniqueKeysWithValues: sessions.map { ($0.name, $0) }) }
    }

    public func progress(_ progress: SyncProgress) {}

    public func event(_ event: Event) {
        // Most events start no hook: the session is looked up only for those that may.
        let file: (path: RelativePath, bytes: Int64, result: String, error: String?)
        switch event.body {
        case let .fileDone(path, size, _, _, _):
            // With layout = generations a file is done once the generation holding it is current
            // (below); until then it sits in one being built.
            if sessions.withLock({ $0[event.session]?.layout }) == .generations { return }
            file = (path, size, "done", nil)
        case let .generationSwitched(_, directory, _, _, files):
            guard let session = sessions.withLock({ $0[event.session] }), let command = session.onFileDone else { return }
            for f in files {
                let env = ["FERRY_SESSION=" + session.name, "FERRY_PATH=" + f.path.string, "FERRY_LOCAL=" + directory + "/" + f.path.string,
                           "FERRY_BYTES=\(f.size)", "FERRY_RESULT=done"]
                enqueue(Job(kind: "on-file-done", session: session.name, command: command, environment: env,
                            timeout: session.hookTimeout, subject: f.path.string))
            }
            return
        case let .fileFailed(path, error):
            file = (path, 0, "failed", error)
        case let .syncFinished(code, transferred, failed, deleted, bytes, _, _, _, dryRun):
            // Finished all its work: the run changed or failed something and left nothing for later.
            guard !dryRun, code != ExitCode.incomplete.rawValue, transferred + deleted + failed > 0,
                  let session = sessions.withLock({ $0[event.session] }), let command = session.onSessionDone else { return }
            let result = ExitCode(rawValue: code)?.name ?? "exit-\(code)"
            let env = ["FERRY_SESSION=" + session.name, "FERRY_PATH=", "FERRY_LOCAL=" + session.local, "FERRY_BYTES=\(bytes)",
                       "FERRY_RESULT=" + result, "FERRY_EXIT_CODE=\(code)", "FERRY_FILES=\(transferred)", "FERRY_DELETED=\(deleted)",
                       "FERRY_FAILED=\(failed)"]
            enqueue(Job(kind: "on-session-done", session: session.name, command: command, environment: env,
                        timeout: session.hookTimeout, subject: ""))
            return
        default:
            return
        }
        guard let session = sessions.withLock({ $0[event.session] }), let command = session.onFileDone else { return }
        var env = ["FERRY_SESSION=" + session.name, "FERRY_PATH=" + file.path.string, "FERRY_LOCAL=" + session.local + "/" + file.path.string,
                   "FERRY_BYTES=\(file.bytes)", "FERRY_RESULT=" + file.result]
        if let error = file.error { env.append("FERRY_ERROR=" + error) }
        enqueue(Job(kind: "on-file-done", session: session.name, command: command, environment: env,
                    timeout: session.hookTimeout, subject: file.path.string))
    }

    /// Waits until every queued hook has run (a one-shot `sync now` before it exits).
    public func drain() {
        while true {
            let done = queue.withLock { $0.head == $0.jobs.count && !$0.busy }
            if done { return }
            // Woken by each hook's end; the timeout (on the kernel's clock) only looks again.
            _ = idle.wait(timeout: .now() + 0.05)
        }
    }

    private func enqueue(_ job: Job) {
        let (accepted, firstDropped) = queue.withLock { q -> (Bool, Bool) in
            guard q.jobs.count - q.head < HookRunner.maxQueued else {
                q.dropped += 1
                return (false, q.dropped == 1)
            }
            q.jobs.append(job)
            return (true, false)
        }
        if accepted { available.signal() }
        if firstDropped {
            warn(job.session, "\(HookRunner.maxQueued) hooks are waiting to run; \(job.kind) for later events is skipped until they have")
        }
    }

    private func work() {
        while true {
            available.wait()
            let next = queue.withLock { q -> Job? in
                guard q.head < q.jobs.count else { return nil }
                let job = q.jobs[q.head]
                q.head += 1
                q.busy = true
                if q.head > 1024 && q.head * 2 > q.jobs.count {
                    q.jobs.removeFirst(q.head)
                    q.head = 0
                }
                if q.head == q.jobs.count { q.dropped = 0 }
                return job
            }
            guard let job = next else { continue }
            run(job)
            queue.withLock { $0.busy = false }
            idle.signal()
        }
    }

    private func run(_ job: Job) {
        let about = job.subject.isEmpty ? "" : " for \(Printable.name(job.subject))"
        let what = "hook \(job.kind) (\(Printable.name(job.command.program)))\(about)"
        switch HookProcess.run(job.command, environment: job.environment, timeout: job.timeout, clock: clock) {
        case .exited(0):
            break
        case .exited(let code):
            warn(job.session, "\(what) exited with status \(code)")
        case .signalled(let signal):
            warn(job.session, "\(what) was killed by signal \(signal)")
        case .timedOut:
            warn(job.session, "\(what) ran longer than hook-timeout = \(Units.formatDuration(job.timeout)) and was stopped")
        case .cannotStart(let reason):
            warn(job.session, "\(what) could not start: \(reason)")
        }
    }

    private func warn(_ session: String, _ message: String) {
        report(Event(time: clock.now(), session: session, body: .warning(message: message)))
    }
}

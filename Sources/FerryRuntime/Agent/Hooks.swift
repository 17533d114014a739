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

    public init(sessions: [SessionConfig]) throws(FerryError) {
        self.sessions = Mutex(Dictionary(uniqueKeysWithValues: sessions.map { ($0.name, $0) }))
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
        case let .fileDone(path, size, _):
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
        switch HookProcess.run(job.command, environment: job.environment, timeout: job.timeout) {
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
        report(Event(time: Timestamp.now(), session: session, body: .warning(message: message)))
    }
}

/// One run of a hook's program (or of a helper ferry asks, like `busctl`): spawned with the
/// caller's environment plus `environment`, waited for, stopped at `timeout`.
enum HookProcess {
    enum Result: Equatable {
        case exited(Int32)
        case signalled(Int32)
        case timedOut
        case cannotStart(String)
    }

    /// Its output goes to ferry's stderr.
    static func run(_ command: HookCommand, environment: [String], timeout: Double) -> Result {
        run(command, environment: environment, timeout: timeout, capture: nil)
    }

    /// Its standard output (the first 64 KiB) is returned; its stderr is ferry's.
    static func output(of command: HookCommand, timeout: Double) -> (Result, [UInt8]) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return (.cannotStart(FileSystem.errorText()), []) }
        // pipe2 is not exported to Swift here; the end of the child's output is its exit, not EOF.
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var output: [UInt8] = []
        let result = run(command, environment: [], timeout: timeout, capture: (fds[0], fds[1], { output += $0 }))
        close(fds[0])
        return (result, output)
    }

    /// Variables of ferry's environment a hook does not get: ferry's own (`FERRY_*`, which the
    /// hook's event sets), systemd's for ferry's process alone (notify, watchdog, sockets), and
    /// secrets — every `AWS_*` (keys, session tokens, the container token and where credentials
    /// come from) and systemd's `CREDENTIALS_DIRECTORY`. A hook that needs a secret reads it itself.
    static func withheld(_ name: String) -> Bool {
        name.hasPrefix("FERRY_") || name.hasPrefix("AWS_")
            || ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "CREDENTIALS_DIRECTORY"].contains(name)
    }

    private static func run(_ command: HookCommand, environment: [String], timeout: Double,
                            capture: (read: Int32, write: Int32, take: ([UInt8]) -> Void)?) -> Result {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if let capture {
            posix_spawn_file_actions_adddup2(&actions, capture.write, 1)
        } else {
            posix_spawn_file_actions_adddup2(&actions, 2, 1)
        }
        // Nothing of ferry's but stdin, stdout and stderr: not its connections to the remote, not
        // libcurl's socketpair, not the state database (a daemonizing hook would keep them open).
        ferry_spawn_close_from(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigfillset(&defaults)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        // A group of its own, so a timeout stops what the hook started too.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)

        let names = Set(environment.compactMap { $0.split(separator: "=", maxSplits: 1).first.map(String.init) })
        var inherited: [String] = []
        var p = environ
        while let entry = p.pointee {
            let text = String(cString: entry)
            let name = text.split(separator: "=", maxSplits: 1).first.map(String.init) ?? text
            if !names.contains(name) && !withheld(name) { inherited.append(text) }
            p += 1
        }
        let argv = command.arguments.map { strdup($0) } + [nil]
        let envp = (inherited + environment).map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, command.program, &actions, &attributes, argv, envp)
        if let capture {
            close(capture.write)
            _ = fcntl(capture.read, F_SETFL, fcntl(capture.read, F_GETFL) | O_NONBLOCK)
        }
        guard rc == 0 else { return .cannotStart(String(cString: strerror(rc))) }
        var taken = 0
        /// Takes what the child wrote so far (its pipe must not fill up while we wait).
        func drain() {
            guard let capture else { return }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(capture.read, &buffer, buffer.count)
                guard n > 0 else { return }
                if taken < 65_536 { capture.take(Array(buffer[0..<min(n, 65_536 - taken)])) }
                taken += n
            }
        }

        let deadline = MonotonicClock.seconds() + timeout
        var killAt: Double?
        var pause: UInt32 = 1_000
        while true {
            var status: Int32 = 0
            drain()
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid {
                drain()
                if killAt != nil { return .timedOut }
                let signal = status & 0x7F
                return signal == 0 ? .exited((status >> 8) & 0xFF) : .signalled(signal)
            }
            if r < 0 && errno != EINTR { return .cannotStart("lost track of it: \(String(cString: strerror(errno)))") }
            let now = MonotonicClock.seconds()
            if killAt == nil && now >= deadline {
                kill(-pid, SIGTERM)
                killAt = now + 2
            } else if let at = killAt, now >= at {
                kill(-pid, SIGKILL)
                killAt = .infinity
            }
            usleep(pause)
            pause = min(pause * 2, 50_000)
        }
    }
}

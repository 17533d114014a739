import Glibc
import Synchronization
import FerryCore

/// SIGTERM and SIGINT ask a run to stop through its `StopToken`: start nothing new, checkpoint
/// running transfers, exit 3. If the orderly stop has not finished within `stop-timeout`, the
/// process ends with exit code 3 anyway; that is safe because a final path never holds partial
/// data and every SQLite commit is atomic. A second signal ends it at once. SIGHUP is the agent's
/// reload.
///
/// The three signals are blocked in every thread from the start of `main` (`start`), and one
/// thread takes them with `sigwait`, so none is ever lost: one that comes before its handler is
/// registered waits, pending, and one that comes while a handler runs is taken next. (A dispatch
/// signal source arms its handler asynchronously, after the caller goes on: a SIGHUP sent as soon
/// as the agent said READY=1 could meet SIG_IGN and vanish.) A signal no command handles ends the
/// process as its default action would.
public enum StopSignals {
    private static let handled: [Int32] = [SIGTERM, SIGINT, SIGHUP]
    private static let handlers = Mutex<[Int32: @Sendable () -> Void]>([:])
    private static let received = Atomic<Int>(0)
    /// After a stop signal: how long the process may take to stop before it ends, and with
    /// which code. The signal thread keeps the time (on the clock `start` was given), so no other
    /// thread is needed for it (none may be to be had).
    private static let forcedExit = Mutex<(after: Double, code: ExitCode)?>(nil)

    /// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread, and in every thread it starts
    /// later, and starts the thread that takes them. Call first thing in `main`, before any other
    /// thread exists.
    public static func start(clock: any Clock) throws(FerryError) {
        var set = signalSet(handled)
        pthread_sigmask(SIG_BLOCK, &set, nil)
        try Threads.start(name: "ferry-signals") {
            var set = signalSet(handled)
            /// When the process ends, once a stop signal set the time (monotonic seconds).
            var deadline: Double?
            while true {
                var number: Int32 = 0
                if let (after, code) = forcedExit.withLock({ $0 }) {
                    let at = deadline ?? clock.monotonic() + after
                    deadline = at
                    let left = max(0, at - clock.monotonic())
                    var timeout = timespec(tv_sec: Int(left), tv_nsec: Int((left - left.rounded(.down)) * 1e9))
                    number = sigtimedwait(&set, nil, &timeout)
                    if number < 0 {
                        if errno == EAGAIN { _exit(code.rawValue) }
                        continue
                    }
                } else {
                    guard sigwait(&set, &number) == 0 else { continue }
                }
                if let handler = handlers.withLock({ $0[number] }) {
                    handler()
                } else {
                    endByDefault(number)
                }
            }
        }
    }

    /// What stops a command's runs: SIGTERM and SIGINT (handled from here on) and `maxDuration`
    /// on `clock`.
    public static func stopCondition(stopTimeout: Double, maxDuration: Double?, clock: any Clock) -> StopCondition {
        let token = StopToken()
        install(stopTimeout: stopTimeout, token: token)
        return StopCondition(token: token, clock: clock, maxDuration: maxDuration)
    }

    /// Feeds `token` from SIGTERM and SIGINT. A stop not done within `stopTimeout` ends the
    /// process with `forcedExit`; `then` runs after each signal (to wake a loop that waits).
    public static func install(stopTimeout: Double, token: StopToken, forcedExit: ExitCode = .incomplete,
                               then: @escaping @Sendable () -> Void = {}) {
        for (number, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
            handlers.withLock {
                $0[number] = {
                    if received.add(1, ordering: .relaxed).newValue > 1 { _exit(forcedExit.rawValue) }
                    token.request("stopped by \(name)")
                    then()
                    // Runs on the signal thread, which ends the process this long after it.
                    StopSignals.forcedExit.withLock { $0 = (max(1, stopTimeout), forcedExit) }
                }
            }
        }
    }

    /// Calls `handler` (on the signal thread) for every SIGHUP: the agent's reload.
    public static func onHangup(_ handler: @escaping @Sendable () -> Void) {
        handlers.withLock { $0[SIGHUP] = handler }
    }

    /// Ends the process by `number`'s default action (terminate), as if it had never been blocked.
    private static func endByDefault(_ number: Int32) -> Never {
        signal(number, SIG_DFL)
        var one = signalSet([number])
        pthread_sigmask(SIG_UNBLOCK, &one, nil)
        raise(number)
        _exit(128 + number)
    }

    private static func signalSet(_ numbers: [Int32]) -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for n in numbers { sigaddset(&set, n) }
        return set
    }
}

import Dispatch
import Glibc
import Synchronization
import FerryCore

/// SIGTERM and SIGINT ask a run to stop through its `StopToken`: start nothing new, checkpoint
/// running transfers, exit 3. If the orderly stop has not finished within `stop-timeout`, the
/// process ends with exit code 3 anyway; that is safe because a final path never holds partial
/// data and every SQLite commit is atomic. A second signal ends it at once.
public enum StopSignals {
    private static let received = Atomic<Int>(0)
    nonisolated(unsafe) private static var sources: [DispatchSourceSignal] = []

    /// What stops a command's runs: SIGTERM and SIGINT (installed here) and `maxDuration`.
    public static func stopCondition(stopTimeout: Double, maxDuration: Double?) -> StopCondition {
        let token = StopToken()
        install(stopTimeout: stopTimeout, token: token)
        return StopCondition(token: token, maxDuration: maxDuration)
    }

    /// Feeds `token` from SIGTERM and SIGINT. Call once, from the main thread, before any run.
    /// A stop not done within `stopTimeout` ends the process with `forcedExit`; `then` runs after
    /// each signal (to wake a loop that waits).
    public static func install(stopTimeout: Double, token: StopToken, forcedExit: ExitCode = .incomplete,
                               then: @escaping @Sendable () -> Void = {}) {
        let queue = DispatchQueue(label: "ferry.signals")
        for (number, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
            signal(number, SIG_IGN)  // delivered to the dispatch source instead
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler {
                if received.add(1, ordering: .relaxed).newValue > 1 { _exit(forcedExit.rawValue) }
                token.request("stopped by \(name)")
                then()
                queue.asyncAfter(deadline: .now() + max(1, stopTimeout)) { _exit(forcedExit.rawValue) }
            }
            source.resume()
            sources.append(source)
        }
    }

    /// Calls `handler` (on a queue of its own) for every SIGHUP: the agent's reload.
    public static func onHangup(_ handler: @escaping @Sendable () -> Void) {
        signal(SIGHUP, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: DispatchQueue(label: "ferry.hangup"))
        source.setEventHandler(handler: handler)
        source.resume()
        sources.append(source)
    }
}

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
    public static func install(stopTimeout: Double, token: StopToken) {
        let queue = DispatchQueue(label: "ferry.signals")
        for (number, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
            signal(number, SIG_IGN)  // delivered to the dispatch source instead
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler {
                if received.add(1, ordering: .relaxed).newValue > 1 { _exit(ExitCode.incomplete.rawValue) }
                token.request("stopped by \(name)")
                queue.asyncAfter(deadline: .now() + max(1, stopTimeout)) { _exit(ExitCode.incomplete.rawValue) }
            }
            source.resume()
            sources.append(source)
        }
    }
}

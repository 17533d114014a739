/// When `ferry agent` polls a session next (its background fetch). One rule for every session:
///
/// - after a poll that reached the remote, the next comes one `poll` interval later, up to 10%
///   early (jitter, so that machines started together do not poll together), never late: a
///   manifest change is applied within one interval;
/// - after a poll that failed (remote unreachable, manifest refused, local error), a capped
///   exponential backoff starts at `retry-delay` and doubles per failure, never waiting longer
///   than the interval, so a remote that comes back is noticed within seconds of a short outage
///   and within one interval of a long one;
/// - a session that another process holds is asked again after a few seconds.
public struct PollSchedule: Sendable, Equatable {
    public enum Outcome: Sendable, Equatable {
        /// The poll reached the remote and the run went as far as it could.
        case reached
        /// The poll failed; the session waits (for connectivity, a fixed manifest, a disk).
        case failed
        /// Another process holds the session.
        case busy
    }

    /// The `poll` interval, in seconds.
    public var interval: Double
    /// The first retry's delay after a failure (`retry-delay`, at least a second).
    public var firstRetry: Double
    /// Failed polls in a row.
    public private(set) var failures = 0

    /// How long a busy session waits before it is asked again.
    public static let busyDelay = 5.0

    public init(interval: Double, firstRetry: Double) {
        self.interval = interval
        self.firstRetry = firstRetry
    }

    /// Seconds from now until the next poll, after a poll that came to `outcome`. `random` is in
    /// 0..<1 (injected so tests are exact).
    public mutating func delay(after outcome: Outcome, random: Double) -> Double {
        let early = 1 - 0.1 * min(max(random, 0), 1)
        switch outcome {
        case .reached:
            failures = 0
            return interval * early
        case .failed:
            failures += 1
            let backoff = max(1, firstRetry) * Double(1 << min(failures - 1, 30))
            return min(interval, backoff) * early
        case .busy:
            return min(interval, PollSchedule.busyDelay)
        }
    }

    /// What one run's exit code means for the schedule. `waiting`: files waited for connectivity.
    public static func outcome(exitCode: ExitCode, waiting: Int) -> Outcome {
        switch exitCode {
        case .sessionBusy: return .busy
        case .remoteOrManifest, .localIO, .usage: return .failed
        case .inSync, .someFilesFailed, .incomplete: return waiting > 0 ? .failed : .reached
        }
    }
}

import Glibc
import Synchronization
import FerryCore

/// SIGTERM and SIGINT ask a run to stop: start nothing new, checkpoint running transfers, exit 3.
/// The handler only sets an atomic flag (async-signal-safe) and arms an alarm: if the orderly stop
/// has not finished within `stop-timeout`, SIGALRM ends the process with exit code 3. That is safe
/// because a final path never holds partial data and every SQLite commit is atomic. A second
/// signal ends it at once.
public enum StopSignals {
    private static let received = Atomic<Int32>(0)
    private static let timeout = Atomic<Int32>(5)

    public static func install(stopTimeout: Double) {
        _ = received.load(ordering: .relaxed)  // initialize the global here, not inside the handler
        timeout.store(Int32(max(1, stopTimeout.rounded(.up))), ordering: .relaxed)
        let handler: @convention(c) (Int32) -> Void = { signal in
            if StopSignals.received.exchange(signal, ordering: .relaxed) != 0 { _exit(ExitCode.incomplete.rawValue) }
            alarm(UInt32(StopSignals.timeout.load(ordering: .relaxed)))
        }
        signal(SIGTERM, handler)
        signal(SIGINT, handler)
        signal(SIGALRM, { _ in _exit(ExitCode.incomplete.rawValue) })
    }

    /// The signal that asked to stop, if any.
    public static var requested: Int32? {
        let s = received.load(ordering: .relaxed)
        return s == 0 ? nil : s
    }

    public static var name: String {
        switch requested {
        case SIGTERM?: return "SIGTERM"
        case SIGINT?: return "SIGINT"
        default: return "a signal"
        }
    }
}

/// When a run must stop: a deadline (`--max-duration`) and/or a stop signal.
public struct StopCondition: Sendable {
    /// Monotonic seconds at which to stop, if there is a deadline.
    public let deadline: Double?
    /// The same deadline in wall-clock time, for `ferry status`.
    public let deadlineTime: Timestamp?

    public init(maxDuration: Double?) {
        if let maxDuration {
            deadline = MonotonicClock.seconds() + maxDuration
            let now = Timestamp.now()
            deadlineTime = Timestamp(seconds: now.seconds + Int64(maxDuration.rounded(.up)), nanoseconds: now.nanoseconds)
        } else {
            deadline = nil
            deadlineTime = nil
        }
    }

    /// This condition, with a deadline no later than `maxDuration` from now.
    public func limited(to maxDuration: Double?) -> StopCondition {
        guard let maxDuration else { return self }
        let other = StopCondition(maxDuration: maxDuration)
        if let deadline, let otherDeadline = other.deadline, deadline <= otherDeadline { return self }
        return other
    }

    /// Why to stop now, or nil to go on.
    public var reason: String? {
        if StopSignals.requested != nil { return "stopped by \(StopSignals.name)" }
        if let deadline, MonotonicClock.seconds() >= deadline { return "stopped at the --max-duration deadline" }
        return nil
    }
}

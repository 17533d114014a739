import Glibc
import Synchronization

/// Time, injected: every read of it goes through a clock the code was given (`SystemClock` at the
/// top: `main`, each command, the agent), so what depends on it — deadlines, timeouts, backoff,
/// schedules, expiry, the times recorded — runs in tests on a `ManualClock` without sleeping.
/// The few waits the kernel keeps on its own clock are listed in docs/design.md ("Time").
public protocol Clock: Sendable {
    /// Seconds on a clock that never goes back (intervals, deadlines, timeouts).
    func monotonic() -> Double
    /// The wall-clock time now (what is recorded and shown, schedules, expiry).
    func now() -> Timestamp
    /// Waits until `monotonic() >= time`, or until `interrupted()` (asked often) says to stop.
    /// Returns false when interrupted.
    func wait(until time: Double, interrupted: () -> Bool) -> Bool
}

/// The machine's clocks: `CLOCK_MONOTONIC` and `CLOCK_REALTIME`.
public struct SystemClock: Clock {
    public init() {}
    public func monotonic() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
    public func now() -> Timestamp {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Timestamp(seconds: Int64(ts.tv_sec), nanoseconds: Int32(ts.tv_nsec))
    }
    public func wait(until time: Double, interrupted: () -> Bool) -> Bool {
        while monotonic() < time {
            if interrupted() { return false }
            usleep(UInt32(min(20_000, max(1, (time - monotonic()) * 1e6))))
        }
        return true
    }
}

/// A clock for tests: time moves only when advanced, and a wait moves it to the end at once. Its
/// wall clock moves with its monotonic one.
public final class ManualClock: Clock {
    private struct Times {
        var monotonic: Double
        var wall: Timestamp
        mutating func move(by seconds: Double) {
            guard seconds > 0 else { return }
            monotonic += seconds
            // A wait for ever (an infinite deadline) moves the monotonic time only.
            guard seconds < 1e15 else { return }
            let whole = seconds.rounded(.down)
            let nanos = Int64(wall.nanoseconds) + Int64(((seconds - whole) * 1e9).rounded())
            wall = Timestamp(seconds: wall.seconds + Int64(whole) + nanos / 1_000_000_000, nanoseconds: Int32(nanos % 1_000_000_000))
        }
    }
    private let times: Mutex<Times>
    /// `start`: the monotonic time; `wall`: the wall-clock time at that moment.
    public init(_ start: Double = 1000, wall: Timestamp = Timestamp(seconds: 1_800_000_000)) {
        times = Mutex(Times(monotonic: start, wall: wall))
    }
    public func monotonic() -> Double { times.withLock { $0.monotonic } }
    public func now() -> Timestamp { times.withLock { $0.wall } }
    public func advance(by seconds: Double) { times.withLock { $0.move(by: seconds) } }
    public func wait(until time: Double, interrupted: () -> Bool) -> Bool {
        if interrupted() { return false }
        times.withLock { $0.move(by: time - $0.monotonic) }
        return true
    }
}

/// Asks whoever holds it to stop (a signal, `ferry agent` shutting down): passed in, never read
/// from a global. The first reason given stays.
public final class StopToken: Sendable {
    private let requested = Mutex<String?>(nil)
    public init() {}
    public func request(_ reason: String) { requested.withLock { if $0 == nil { $0 = reason } } }
    public var reason: String? { requested.withLock { $0 } }
}

/// When a run must stop: its stop token, and a deadline (`max-duration`) on its clock.
public struct StopCondition: Sendable {
    public let token: StopToken
    public let clock: any Clock
    /// Monotonic seconds at which to stop, if there is a deadline.
    public let deadline: Double?
    /// The same deadline in wall-clock time, for `ferry status`.
    public let deadlineTime: Timestamp?

    public init(token: StopToken = StopToken(), clock: any Clock, maxDuration: Double?) {
        self.token = token
        self.clock = clock
        if let maxDuration {
            deadline = clock.monotonic() + maxDuration
            let now = clock.now()
            deadlineTime = Timestamp(seconds: now.seconds + Int64(maxDuration.rounded(.up)), nanoseconds: now.nanoseconds)
        } else {
            deadline = nil
            deadlineTime = nil
        }
    }

    /// This condition, with a deadline no later than `maxDuration` from now.
    public func limited(to maxDuration: Double?) -> StopCondition {
        guard let maxDuration else { return self }
        let other = StopCondition(token: token, clock: clock, maxDuration: maxDuration)
        if let deadline, let otherDeadline = other.deadline, deadline <= otherDeadline { return self }
        return other
    }

    /// Why to stop now, or nil to go on.
    public var reason: String? {
        if let reason = token.reason { return reason }
        if let deadline, clock.monotonic() >= deadline { return "stopped at the --max-duration deadline" }
        return nil
    }

    /// `error`, or the stop itself when it is a request this condition abandoned (libcurl's
    /// "aborted by callback": a request waiting on a server's answer as the run had to stop). A
    /// stopped run exits 3 and the next one resumes; it is not the remote's fault.
    public func explaining(_ error: FerryError) -> FerryError {
        guard let reason, error.cause == .network(curlCode: FailureCause.CurlCode.abortedByCallback) else { return error }
        return FerryError(.stopped, "\(reason) while waiting for the remote's answer (\(error.message))",
                          hint: "the next run starts again from there")
    }
}

extension Timestamp {
    /// A wall-clock time in the machine's time zone (`TZ`), as an operator types it:
    /// `2026-11-24 02:00`, with optional seconds, a `T` in place of the space allowed. nil for
    /// anything else, a date that does not exist (February 30), or a time a daylight-saving jump
    /// skips.
    public init?(localTime text: String) {
        let parts = text.split(whereSeparator: { $0 == " " || $0 == "T" })
        guard parts.count == 2 else { return nil }
        let date = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        let clock = parts[1].split(separator: ":", omittingEmptySubsequences: false)
        guard date.count == 3, date[0].count == 4, date[1].count == 2, date[2].count == 2, clock.count == 2 || clock.count == 3,
              clock.allSatisfy({ $0.count == 2 }),
              let y = Int32(date[0]), let mo = Int32(date[1]), let d = Int32(date[2]),
              let h = Int32(clock[0]), let mi = Int32(clock[1]), let s = clock.count == 3 ? Int32(clock[2]) : 0,
              (1...12).contains(mo), (1...31).contains(d), (0...23).contains(h), (0...59).contains(mi), (0...59).contains(s) else { return nil }
        var t = tm()
        t.tm_year = y - 1900
        t.tm_mon = mo - 1
        t.tm_mday = d
        t.tm_hour = h
        t.tm_min = mi
        t.tm_sec = s
        t.tm_isdst = -1
        let seconds = mktime(&t)
        // mktime moves a field out of range (Feb 30, a skipped hour) into the next: refused.
        guard seconds != -1 || (y == 1969 || y == 1970), t.tm_year == y - 1900, t.tm_mon == mo - 1, t.tm_mday == d, t.tm_hour == h, t.tm_min == mi
        else { return nil }
        self.init(seconds: Int64(seconds))
    }
}

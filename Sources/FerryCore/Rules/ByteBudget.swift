import Glibc

/// `[agent] budget = 2G/month` (or `/day`): the bytes all sessions of the machine may move in a
/// calendar period of the machine's time zone. A period is a local day (from midnight) or a local
/// month (from the 1st at midnight); what it has used is kept in the state database, so restarts
/// and the processes that share the state all spend one budget (`BudgetMeter`).
public struct ByteBudget: Sendable, Equatable, CustomStringConvertible {
    public enum Period: String, Sendable {
        case day, month
    }

    /// A period in time: its name in the state (`day:2026-11-29`, `month:2026-11`), its bounds.
    public struct Window: Sendable, Equatable {
        public let key: String
        public let start: Timestamp
        public let end: Timestamp
    }

    public let bytes: Int64
    public let period: Period

    public init(bytes: Int64, period: Period) {
        self.bytes = bytes
        self.period = period
    }

    /// `100M/day`, `2G/month`, `1.5G / month`; at least 1 MiB.
    public init(parsing text: String) throws(ConfigProblem) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false).map { String($0).trimmingSpaces() }
        guard parts.count == 2, let period = Period(rawValue: parts[1].lowercased()) else {
            throw ConfigProblem("'\(text)' is not a size per day or month, like 2G/month or 100M/day")
        }
        guard let bytes = Units.parseSize(parts[0]), bytes >= 1 << 20 else {
            throw ConfigProblem("'\(parts[0])' is not a size of at least 1M")
        }
        self.init(bytes: bytes, period: period)
    }

    public var description: String { "\(ConfigText.size(bytes))/\(period.rawValue)" }

    /// The period that holds `time`, in the machine's time zone.
    public func window(at time: Timestamp) -> Window {
        var t = time_t(time.seconds)
        var parts = tm()
        localtime_r(&t, &parts)
        parts.tm_hour = 0
        parts.tm_min = 0
        parts.tm_sec = 0
        if period == .month { parts.tm_mday = 1 }
        let key = period == .day
            ? "day:\(parts.tm_year + 1900)-\(ByteBudget.two(parts.tm_mon + 1))-\(ByteBudget.two(parts.tm_mday))"
            : "month:\(parts.tm_year + 1900)-\(ByteBudget.two(parts.tm_mon + 1))"
        var start = parts
        start.tm_isdst = -1
        var end = parts
        end.tm_isdst = -1
        if period == .day { end.tm_mday += 1 } else { end.tm_mon += 1 }
        let startSeconds = Int64(mktime(&start))
        // mktime carries the day or month over (the 32nd, month 13).
        let endSeconds = Int64(mktime(&end))
        return Window(key: key, start: Timestamp(seconds: startSeconds), end: Timestamp(seconds: max(endSeconds, time.seconds + 1)))
    }

    private static func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }

    /// Why transfers wait when `used` bytes are spent in `window`, for status and events; nil while
    /// some are left.
    public func spent(used: Int64, window: Window) -> String? {
        guard used >= bytes else { return nil }
        return "the byte budget (\(self): \(Units.formatBytes(used)) used; the next \(period.rawValue) begins at \(window.end.rfc3339))"
    }
}

/// A time of day in the machine's local time, as seconds after midnight: `08:00`, `22:30:15`.
public enum TimeOfDay {
    public static let day = 86_400

    /// `HH:MM` or `HH:MM:SS`, from 00:00 to 24:00 (24:00 only where `allowMidnightEnd`).
    public static func parse(_ text: String, allowMidnightEnd: Bool = false) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard (2...3).contains(parts.count), parts.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isASCIIDigit) }) else { return nil }
        let h = Int(parts[0])!, m = Int(parts[1])!, s = parts.count == 3 ? Int(parts[2])! : 0
        guard m < 60, s < 60 else { return nil }
        if h == 24 && m == 0 && s == 0 && allowMidnightEnd { return day }
        guard h < 24 else { return nil }
        return h * 3600 + m * 60 + s
    }

    /// `08:00`, or `08:00:15` when it has seconds.
    public static func format(_ seconds: Int) -> String {
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let text = two(seconds / 3600) + ":" + two(seconds / 60 % 60)
        return seconds % 60 == 0 ? text : text + ":" + two(seconds % 60)
    }
}

extension Character {
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}

/// A daily span of local time, `22:00-06:00` (it may pass midnight). The start is inside, the end
/// is not.
public struct TimeWindow: Sendable, Equatable, CustomStringConvertible {
    public let start: Int
    public let end: Int

    public init(parsing text: String) throws(ConfigProblem) {
        let halves = text.split(separator: "-", omittingEmptySubsequences: false)
        guard halves.count == 2, let start = TimeOfDay.parse(String(halves[0])),
              let end = TimeOfDay.parse(String(halves[1]), allowMidnightEnd: true) else {
            throw ConfigProblem("'\(text)' is not a window like 22:00-06:00 (local time, HH:MM or HH:MM:SS)")
        }
        guard start != end % TimeOfDay.day else { throw ConfigProblem("the window '\(text)' starts where it ends; to allow any time, leave window out") }
        self.start = start
        self.end = end
    }

    public func contains(_ secondOfDay: Int) -> Bool {
        start < end ? secondOfDay >= start && secondOfDay < end : secondOfDay >= start || secondOfDay < end % TimeOfDay.day
    }

    /// Seconds from `secondOfDay` until the window opens (0 when it is open).
    public func secondsUntilOpen(from secondOfDay: Int) -> Int {
        contains(secondOfDay) ? 0 : (start - secondOfDay + TimeOfDay.day) % TimeOfDay.day
    }

    public var description: String { TimeOfDay.format(start) + "-" + TimeOfDay.format(end) }
}

/// `min-free-space`: an amount of bytes, or a share of the filesystem.
public enum FreeSpaceLimit: Sendable, Equatable, CustomStringConvertible {
    case bytes(Int64)
    case percent(Double)

    public init?(parsing text: String) {
        if text.hasSuffix("%") {
            guard let p = Double(String(text.dropLast()).trimmingSpaces()), p > 0, p < 100 else { return nil }
            self = .percent(p)
        } else {
            guard let b = Units.parseSize(text), b > 0 else { return nil }
            self = .bytes(b)
        }
    }

    public func bytes(total: Int64) -> Int64 {
        switch self {
        case .bytes(let b): return b
        case .percent(let p): return Int64(Double(total) * p / 100)
        }
    }

    public var description: String {
        switch self {
        case .bytes(let b): return Units.formatBytes(b)
        case .percent(let p): return (p.rounded() == p ? "\(Int(p))" : "\(p)") + "%"
        }
    }
}

/// What the machine looks like right now, for discretionary sessions (read by the runtime's probe;
/// built by hand in tests).
public struct HostState: Sendable, Equatable {
    /// Local time, seconds after midnight.
    public var secondOfDay: Int
    /// False only when the machine runs on battery (no power-supply information means mains).
    public var onACPower: Bool = true
    /// Whether the network is metered, and who said so (`NetworkManager`, `network-metered = yes`).
    public var metered: Bool = false
    public var meteredSource: String = ""
    /// The 1-minute load average, when known.
    public var load: Double?
    /// Free and total bytes of the filesystem holding the session's local directory, when known.
    public var freeBytes: Int64?
    public var totalBytes: Int64?

    public init(secondOfDay: Int) { self.secondOfDay = secondOfDay }
}

/// `discretionary = yes` and its conditions: the session's transfers begin only while all of them
/// hold (Apple's `isDiscretionary`, with the conditions named in the config). Polling the manifest
/// is not held: only file transfers wait. Like `isDiscretionary`, AC power and an unmetered network
/// are asked for unless the config says otherwise.
public struct Discretion: Sendable, Equatable {
    /// Any of these windows (none: any time).
    public var windows: [TimeWindow] = []
    public var requireACPower = true
    public var requireUnmetered = true
    /// The 1-minute load average must be below this.
    public var maxLoad: Double?
    /// The local filesystem must have at least this much free.
    public var minFree: FreeSpaceLimit?

    public init() {}

    /// The conditions that do not hold, each saying what it waits for and how things stand; empty
    /// when the session's transfers may go.
    public func unmet(_ host: HostState) -> [String] {
        var unmet: [String] = []
        if !windows.isEmpty && !windows.contains(where: { $0.contains(host.secondOfDay) }) {
            let wait = windows.map { $0.secondsUntilOpen(from: host.secondOfDay) }.min()!
            let list = windows.map(\.description).joined(separator: ", ")
            unmet.append("the time window \(list) (opens in \(Units.formatDuration(Double(wait))))")
        }
        if requireACPower && !host.onACPower { unmet.append("AC power (the machine runs on battery)") }
        if requireUnmetered && host.metered {
            unmet.append("an unmetered network (\(host.meteredSource.isEmpty ? "the network is metered" : host.meteredSource + " says the network is metered"))")
        }
        if let maxLoad, let load = host.load, load >= maxLoad {
            unmet.append("a load below \(Units.formatFixed(maxLoad, digits: 2)) (the 1-minute load is \(Units.formatFixed(load, digits: 2)))")
        }
        if let minFree, let free = host.freeBytes, let total = host.totalBytes {
            let wanted = minFree.bytes(total: total)
            if free < wanted {
                unmet.append("\(Units.formatBytes(wanted)) free on the local filesystem (\(Units.formatBytes(free)) free)")
            }
        }
        return unmet
    }
}

/// One run's own `bwlimit` and `transfers`, in place of `[agent]`'s: what `ferry sync now
/// --bwlimit RATE --transfers N` asks. A run of its own applies them to its whole process; a run
/// handed over to a running agent gets them for the one cycle the agent starts for it, whose
/// transfers then count against these limits instead of the global ones the agent's other
/// sessions share (the session's own `bwlimit` and `session-transfers` still hold), and the
/// session's next cycle goes at the config's settings again.
public struct RunLimits: Sendable, Equatable {
    /// The rate or daily schedule (`off`: none); nil: `[agent] bwlimit` holds.
    public var bandwidth: BandwidthSchedule?
    /// Parallel transfers; nil: `[agent] transfers` holds.
    public var transfers: Int?

    public init(bandwidth: BandwidthSchedule? = nil, transfers: Int? = nil) {
        self.bandwidth = bandwidth
        self.transfers = transfers
    }

    /// Every `transfers` setting's range: `[agent] transfers`, `session-transfers`, `--transfers`.
    public static let transfersRange = 1...256

    /// `--transfers`' value, or why it is not one.
    public static func transfers(parsing text: String) throws(ConfigProblem) -> Int {
        guard let n = Int(text), transfersRange.contains(n) else {
            throw ConfigProblem("wants a whole number from \(transfersRange.lowerBound) to \(transfersRange.upperBound), got '\(text)'")
        }
        return n
    }

    /// Neither limit given.
    public var isEmpty: Bool { bandwidth == nil && transfers == nil }

    /// For messages: `bwlimit 512K and 2 transfers`.
    public var description: String {
        var parts: [String] = []
        if let bandwidth { parts.append("bwlimit \(bandwidth)") }
        if let transfers { parts.append(Plural.count(transfers, "transfer")) }
        return parts.joined(separator: " and ")
    }
}

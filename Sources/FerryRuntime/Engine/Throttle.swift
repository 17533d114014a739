import FerryCore

/// A token bucket for one bandwidth limit (`bwlimit`): filled at the rate in force, at most a
/// tenth of a second's worth ahead (and never less than 64 KiB, one read's worth), spent by the
/// bytes transfers take in. It may go below zero — a read is taken whole — and then stays shut
/// until the rate has paid the debt back, which keeps the average at the rate. Engine thread only.
final class RateBucket {
    /// Bytes per second; nil: no limit.
    private(set) var rate: Int64?
    private var tokens = 0.0
    private var last: Double

    init(now: Double) { last = now }

    /// The rate in force now; a change keeps what the bucket holds, up to the new capacity.
    func set(rate: Int64?, now: Double) {
        refill(now: now)
        self.rate = rate
        tokens = min(tokens, capacity)
    }

    private var capacity: Double { rate.map { max(Double($0) / 10, 65_536) } ?? 0 }

    func refill(now: Double) {
        defer { last = now }
        guard let rate else { return }
        tokens = min(capacity, tokens + (now - last) * Double(rate))
    }

    var open: Bool { rate == nil || tokens > 0 }

    func take(_ bytes: Int) {
        if rate != nil { tokens -= Double(bytes) }
    }
}

/// What transfers' bytes are charged to besides the rates: the machine's byte budget
/// (`BudgetMeter`, kept in the state). Any thread.
protocol TransferBudget: AnyObject, Sendable {
    /// Counts bytes moved.
    func charge(_ bytes: Int)
    /// Whether held transfers may take more bytes now (no state access).
    var open: Bool { get }
    /// Why held sessions wait while it is spent, and until when; nil while bytes are left.
    func hold() -> BudgetHold?
    /// Puts what was charged in the state now.
    func save()
}

/// Why a counted session's transfers wait on a spent budget, and when it is whole again.
struct BudgetHold {
    let reason: String
    let until: Timestamp
}

/// What the machine's byte budget is to a source's transfers: nothing (a probe's few bytes), a
/// count of what they move (`budget = exempt`), or also a hold on them once it is spent.
enum BudgetRole {
    case none, counted, held
}

/// A transfer's share of the limits over it: the global `bwlimit` and its session's, and the
/// machine's byte budget. A transfer takes bytes only while every bucket is open, and the budget
/// too when it holds the session; otherwise it pauses (libcurl keeps the bytes it offered) and the
/// engine continues it once they are open again — or, the budget spent, its session stops.
final class Throttle {
    private let buckets: [RateBucket]
    /// Charged with every byte; `holds`: its being spent closes this transfer.
    private let budget: (any TransferBudget)?
    private let holds: Bool
    /// The transfer declined bytes and waits for the engine to continue it.
    var paused = false

    init(_ buckets: [RateBucket], budget: (any TransferBudget)? = nil, holds: Bool = false) {
        self.buckets = buckets
        self.budget = budget
        self.holds = holds && budget != nil
    }

    var open: Bool { buckets.allSatisfy(\.open) && (!holds || budget!.open) }
    /// Whether any limit is in force now: transfers then read in small pieces (libcurl's default
    /// buffers), so a rate is kept smoothly and a budget is overrun by little.
    var limiting: Bool { holds || buckets.contains { $0.rate != nil } }

    func take(_ bytes: Int) {
        for b in buckets { b.take(bytes) }
        budget?.charge(bytes)
    }

    /// For a read or write callback: true when a limit is spent, and the transfer must pause
    /// until the engine continues it.
    func shut() -> Bool {
        guard !open else { return false }
        paused = true
        return true
    }

    /// For a write callback: true to take `bytes` now (and count them), false to pause.
    func admit(_ bytes: Int) -> Bool {
        if shut() { return false }
        take(bytes)
        return true
    }
}

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

/// A transfer's share of the limits over it: the global `bwlimit` and its session's. A transfer
/// takes bytes only while every bucket is open; otherwise it pauses (libcurl keeps the bytes it
/// offered) and the engine continues it once they are open again.
final class Throttle {
    private let buckets: [RateBucket]
    /// The transfer declined bytes and waits for the engine to continue it.
    var paused = false

    init(_ buckets: [RateBucket]) { self.buckets = buckets }

    var open: Bool { buckets.allSatisfy(\.open) }
    /// Whether any limit is in force now.
    var limiting: Bool { buckets.contains { $0.rate != nil } }

    func take(_ bytes: Int) { for b in buckets { b.take(bytes) } }

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

/// How many short requests (small files fetched whole) a source keeps in flight on its path.
///
/// A short request's time is the path's round trip, not its bytes: on loopback 64 in flight keep
/// a server busy, across a 50 ms link they wait most of the time. So a source that a far path
/// serves lets its short requests share a slot: 2, 4 or 8 to one of the `transfers` slots, the
/// sharing doubling for each 12.5 ms of the shortest request-to-first-byte time it has seen (the
/// round trip and the server's think time; the shortest, so requests queued behind others do not
/// count), and never above `most` requests in flight for the source's slots together. Larger
/// transfers take a slot each, as before: `transfers` stays the cap for what carries bytes.
/// Near paths (under 25 ms) see no change.
struct Depth {
    /// Up to this many bytes left to fetch, a whole-file download is a short request.
    static let shortRequest: Int64 = 256 << 10
    /// A slot, in the units the engine counts: a short request on the farthest path takes one.
    static let slot = 8
    /// The most short requests in flight one source's slots may carry.
    static let most = 128
    /// The round trip that each doubling of the sharing needs.
    static let step = 0.0125

    /// The shortest request-to-first-byte time seen, in seconds (nil: none yet).
    private(set) var roundTrip: Double?

    mutating func saw(_ seconds: Double) {
        guard seconds.isFinite, seconds >= 0 else { return }
        roundTrip = min(roundTrip ?? seconds, seconds)
    }

    /// How many short requests share a slot among `transfers` slots: 1, 2, 4 or 8.
    func sharing(transfers: Int) -> Int {
        guard let roundTrip else { return 1 }
        var shared = 1
        while shared < Depth.slot && Double(shared * 2) * Depth.step <= roundTrip
                && shared * 2 * max(1, transfers) <= Depth.most {
            shared *= 2
        }
        return shared
    }

    /// The units a transfer takes: a slot, or its share of one when it is short.
    func units(short: Bool, transfers: Int) -> Int {
        short ? Depth.slot / sharing(transfers: transfers) : Depth.slot
    }
}

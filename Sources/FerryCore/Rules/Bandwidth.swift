/// `bwlimit`: a rate in bytes per second, or a daily schedule of rates. `512K` is one rate all
/// day; `08:00,512K 19:00,off` is 512 KiB/s from 08:00 and no limit from 19:00 (until 08:00 the next
/// day). Each entry holds from its time until the next entry's; before the first, the last holds.
public struct BandwidthSchedule: Sendable, Equatable, CustomStringConvertible {
    public struct Entry: Sendable, Equatable {
        /// Seconds after local midnight.
        public let start: Int
        /// Bytes per second; nil: no limit.
        public let rate: Int64?
    }
    public let entries: [Entry]

    public init(parsing text: String) throws(ConfigProblem) {
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        func rate(_ word: String) throws(ConfigProblem) -> Int64? {
            if word.lowercased() == "off" { return nil }
            let number = word.hasSuffix("/s") ? String(word.dropLast(2)) : word
            guard let r = Units.parseSize(number), r >= 1024 else {
                throw ConfigProblem("'\(word)' is not a rate of at least 1K (per second) or off")
            }
            return r
        }
        if words.count == 1 && !words[0].contains(",") {
            entries = [Entry(start: 0, rate: try rate(words[0]))]
            return
        }
        var entries: [Entry] = []
        for word in words {
            let parts = word.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 2, let start = TimeOfDay.parse(parts[0]) else {
                throw ConfigProblem("'\(word)' is not an entry like 08:00,512K (a local time, a comma, a rate or off)")
            }
            if entries.contains(where: { $0.start == start }) { throw ConfigProblem("\(parts[0]) appears twice") }
            entries.append(Entry(start: start, rate: try rate(parts[1])))
        }
        guard !entries.isEmpty else { throw ConfigProblem("no rate given") }
        self.entries = entries.sorted { $0.start < $1.start }
    }

    /// The rate in force at `secondOfDay` (nil: no limit).
    public func rate(at secondOfDay: Int) -> Int64? {
        (entries.last { $0.start <= secondOfDay } ?? entries.last!).rate
    }

    /// The lowest rate anywhere in the schedule (nil when it never limits).
    public var lowest: Int64? { entries.compactMap(\.rate).min() }

    /// As the config writes it: `512K`, `08:00,512K 19:00,off`.
    public var description: String {
        func rate(_ r: Int64?) -> String {
            guard let r else { return "off" }
            if r % (1 << 30) == 0 { return "\(r >> 30)G" }
            if r % (1 << 20) == 0 { return "\(r >> 20)M" }
            return r % 1024 == 0 ? "\(r >> 10)K" : "\(r)"
        }
        if entries.count == 1 && entries[0].start == 0 { return rate(entries[0].rate) }
        return entries.map { TimeOfDay.format($0.start) + "," + rate($0.rate) }.joined(separator: " ")
    }
}

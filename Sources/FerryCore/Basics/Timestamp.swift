/// A point in time as seconds and nanoseconds since the Unix epoch, with RFC 3339 parsing and
/// formatting (UTC, `Z`). Manifest mtimes and event times use it; it is exact where `Double` is not.
public struct Timestamp: Hashable, Comparable, Sendable {
    public var seconds: Int64
    public var nanoseconds: Int32

    public init(seconds: Int64, nanoseconds: Int32 = 0) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }

    public static func < (a: Timestamp, b: Timestamp) -> Bool {
        a.seconds != b.seconds ? a.seconds < b.seconds : a.nanoseconds < b.nanoseconds
    }

    /// Parses `2026-11-20T08:00:00Z`, with optional fractional seconds and a `+hh:mm` / `-hh:mm`
    /// offset. Returns nil for anything else.
    public init?(rfc3339 text: String) {
        var copy = text
        guard let parsed = copy.withUTF8({ Timestamp(rfc3339Bytes: $0) }) else { return nil }
        self = parsed
    }

    init?(rfc3339Bytes b: UnsafeBufferPointer<UInt8>) {
        func digits(_ start: Int, _ count: Int) -> Int64? {
            guard start + count <= b.count else { return nil }
            var v: Int64 = 0
            for i in start..<(start + count) {
                let c = b[i]
                guard c >= 48 && c <= 57 else { return nil }
                v = v * 10 + Int64(c - 48)
            }
            return v
        }
        guard b.count >= 20,
              let year = digits(0, 4), b[4] == UInt8(ascii: "-"),
              let month = digits(5, 2), b[7] == UInt8(ascii: "-"),
              let day = digits(8, 2), b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: "t") || b[10] == UInt8(ascii: " "),
              let hour = digits(11, 2), b[13] == UInt8(ascii: ":"),
              let minute = digits(14, 2), b[16] == UInt8(ascii: ":"),
              let second = digits(17, 2),
              (1...12).contains(month), day >= 1, day <= Timestamp.daysIn(month: month, year: year),
              hour < 24, minute < 60, second <= 60
        else { return nil }
        var i = 19
        var nanos: Int64 = 0
        if i < b.count && b[i] == UInt8(ascii: ".") {
            i += 1
            var count = 0
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                if count < 9 { nanos = nanos * 10 + Int64(b[i] - 48) }
                count += 1
                i += 1
            }
            guard count > 0 else { return nil }
            for _ in count..<max(count, 9) { nanos *= 10 }
        }
        guard i < b.count else { return nil }
        var offset: Int64 = 0
        if b[i] == UInt8(ascii: "Z") || b[i] == UInt8(ascii: "z") {
            i += 1
        } else if b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            guard let oh = digits(i + 1, 2), b.count > i + 3, b[i + 3] == UInt8(ascii: ":"), let om = digits(i + 4, 2) else { return nil }
            offset = (oh * 3600 + om * 60) * (b[i] == UInt8(ascii: "+") ? 1 : -1)
            i += 6
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let days = Timestamp.daysFromCivil(year: year, month: month, day: day)
        self.seconds = days * 86400 + hour * 3600 + minute * 60 + min(second, 59) - offset
        self.nanoseconds = Int32(nanos)
    }

    /// Parses an HTTP date in the IMF-fixdate form every sender must generate (RFC 9110 §5.6.7),
    /// `Sun, 06 Nov 1994 08:49:37 GMT`; the weekday is not checked. Returns nil for anything else.
    public init?(httpDate text: String) {
        var copy = text
        guard let parsed = copy.withUTF8({ Timestamp(httpDateBytes: $0) }) else { return nil }
        self = parsed
    }

    init?(httpDateBytes b: UnsafeBufferPointer<UInt8>) {
        // Six fields split on spaces: weekday, day, month, year, hh:mm:ss, GMT. Every response
        // carries two dates, so this allocates nothing.
        var starts = SIMD8<Int>(), ends = SIMD8<Int>()
        var count = 0
        var i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: " ") { i += 1; continue }
            let start = i
            while i < b.count, b[i] != UInt8(ascii: " ") { i += 1 }
            guard count < 6 else { return nil }
            starts[count] = start
            ends[count] = i
            count += 1
        }
        guard count == 6 else { return nil }
        let day = starts[1]..<ends[1], month = starts[2]..<ends[2], year = starts[3]..<ends[3], time = starts[4]..<ends[4], zone = starts[5]
        guard ends[5] - zone == 3, b[zone] == UInt8(ascii: "G"), b[zone + 1] == UInt8(ascii: "M"), b[zone + 2] == UInt8(ascii: "T"),
              (1...2).contains(day.count), month.count == 3, year.count == 4, time.count == 8 else { return nil }
        let months: StaticString = "JanFebMarAprMayJunJulAugSepOctNovDec"
        let number = months.withUTF8Buffer { names in
            (0..<12).first { k in (0..<3).allSatisfy { names[k * 3 + $0] == b[month.lowerBound + $0] } }
        }
        guard let number else { return nil }
        // Rewritten as RFC 3339 so that one parser checks every range.
        let parsed: Timestamp? = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { text in
            var n = 0
            func put(_ c: UInt8) { text[n] = c; n += 1 }
            for k in year { put(b[k]) }
            put(UInt8(ascii: "-")); put(UInt8(ascii: "0") + UInt8((number + 1) / 10)); put(UInt8(ascii: "0") + UInt8((number + 1) % 10)); put(UInt8(ascii: "-"))
            if day.count == 1 { put(UInt8(ascii: "0")) }
            for k in day { put(b[k]) }
            put(UInt8(ascii: "T"))
            for k in time { put(b[k]) }
            put(UInt8(ascii: "Z"))
            return Timestamp(rfc3339Bytes: UnsafeBufferPointer(text))
        }
        guard let parsed else { return nil }
        self = parsed
    }

    /// `2026-11-20T08:00:00Z`, with fractional seconds only when there are some.
    public var rfc3339: String {
        String(unsafeUninitializedCapacity: 48) { writeRFC3339(into: $0) }
    }

    /// Appends `rfc3339`'s bytes to `out`.
    public func appendRFC3339(to out: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 48) { buf in
            let n = writeRFC3339(into: buf)
            out.append(contentsOf: UnsafeBufferPointer(rebasing: buf[..<n]))
        }
    }

    /// Writes `rfc3339` into `buf` (48 bytes hold any year); returns how many bytes it took.
    private func writeRFC3339(into buf: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let rem = seconds - days * 86400
        let (y, m, d) = Timestamp.civilFromDays(days)
        var n = 0
        func put(_ v: Int64, _ width: Int) {
            var v = v
            for k in stride(from: width - 1, through: 0, by: -1) {
                buf[n + k] = UInt8(ascii: "0") + UInt8(v % 10)
                v /= 10
            }
            n += width
        }
        func put(_ c: Unicode.Scalar) { buf[n] = UInt8(ascii: c); n += 1 }
        if (0...9999).contains(y) {
            put(y, 4)
        } else {
            // A year RFC 3339 cannot hold (a file's mtime can be anything): written in full, with its sign.
            for c in String(y).utf8 { buf[n] = c; n += 1 }
        }
        put("-"); put(m, 2); put("-"); put(d, 2); put("T")
        put(rem / 3600, 2); put(":"); put((rem % 3600) / 60, 2); put(":"); put(rem % 60, 2)
        if nanoseconds > 0 {
            put(".")
            var frac = Int64(nanoseconds), width = 9
            while frac % 10 == 0 { frac /= 10; width -= 1 }
            put(frac, width)
        }
        put("Z")
        return n
    }

    /// Whether RFC 3339 can write a time of `seconds` (the years 0000–9999), as a manifest carries it.
    public static func representable(seconds: Int64) -> Bool { (-62_167_219_200...253_402_300_799).contains(seconds) }

    public var timeInterval: Double { Double(seconds) + Double(nanoseconds) / 1e9 }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    static func civilFromDays(_ z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}

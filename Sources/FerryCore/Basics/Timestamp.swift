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
        // Six fields split on spaces: weekday, day, month, year, hh:mm:ss, GMT.
        var fields: [Range<Int>] = []
        fields.reserveCapacity(6)
        var i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: " ") { i += 1; continue }
            let start = i
            while i < b.count, b[i] != UInt8(ascii: " ") { i += 1 }
            guard fields.count < 6 else { return nil }
            fields.append(start..<i)
        }
        func field(_ n: Int) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: b[fields[n]]) }
        guard fields.count == 6, field(5).elementsEqual("GMT".utf8), (1...2).contains(field(1).count),
              field(2).count == 3, field(3).count == 4, field(4).count == 8 else { return nil }
        let months = "JanFebMarAprMayJunJulAugSepOctNovDec".utf8
        guard let month = (0..<12).first(where: { months.dropFirst($0 * 3).prefix(3).elementsEqual(field(2)) }) else { return nil }
        // Rewritten as RFC 3339 so that one parser checks every range.
        var text: [UInt8] = []
        text.reserveCapacity(20)
        text += field(3)
        text += [UInt8(ascii: "-"), UInt8(ascii: "0") + UInt8((month + 1) / 10), UInt8(ascii: "0") + UInt8((month + 1) % 10), UInt8(ascii: "-")]
        if field(1).count == 1 { text.append(UInt8(ascii: "0")) }
        text += field(1)
        text.append(UInt8(ascii: "T"))
        text += field(4)
        text.append(UInt8(ascii: "Z"))
        guard let parsed = text.withUnsafeBufferPointer({ Timestamp(rfc3339Bytes: $0) }) else { return nil }
        self = parsed
    }

    /// `2026-11-20T08:00:00Z`, with fractional seconds only when there are some.
    public var rfc3339: String {
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let rem = seconds - days * 86400
        let (y, m, d) = Timestamp.civilFromDays(days)
        return String(unsafeUninitializedCapacity: 48) { buf in
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

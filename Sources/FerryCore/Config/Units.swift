/// Durations (`90s 15m 2h 7d`) and sizes (`512K 20M 1G`) as written in the config file and on the
/// command line. Parsing returns nil on anything else; callers turn that into an error naming the key.
public enum Units {
    /// Seconds in a duration such as `90s`, `15m`, `2h`, `7d`, `1h30m` or a bare number of seconds.
    public static func parseDuration(_ text: String) -> Double? {
        let s = text.trimmingSpaces()
        guard !s.isEmpty else { return nil }
        if let plain = Double(s), plain >= 0, plain <= maximumDuration { return plain }
        var total = 0.0
        var number = ""
        var sawUnit = false
        for ch in s {
            if ch.isASCII && (ch.isNumber || ch == ".") {
                number.append(ch)
                continue
            }
            let factor: Double
            switch ch {
            case "s": factor = 1
            case "m": factor = 60
            case "h": factor = 3600
            case "d": factor = 86400
            case "w": factor = 604800
            default: return nil
            }
            guard let value = Double(number), value >= 0 else { return nil }
            total += value * factor
            number = ""
            sawUnit = true
        }
        guard number.isEmpty, sawUnit, total <= maximumDuration else { return nil }
        return total
    }

    /// About 300 years: longer durations are refused, so they convert to integers safely.
    public static let maximumDuration: Double = 1e10

    /// Bytes in a size such as `512K`, `20M`, `1G`, `1.5G`, `4096` (binary multiples; a trailing `B`
    /// or `iB` is accepted).
    public static func parseSize(_ text: String) -> Int64? {
        var s = text.trimmingSpaces().uppercased()
        guard !s.isEmpty else { return nil }
        if s.hasSuffix("IB") { s.removeLast(2) } else if s.hasSuffix("B") { s.removeLast() }
        var factor: Double = 1
        if let last = s.last, !last.isNumber {
            switch last {
            case "K": factor = 1024
            case "M": factor = 1024 * 1024
            case "G": factor = 1024 * 1024 * 1024
            case "T": factor = 1024 * 1024 * 1024 * 1024
            default: return nil
            }
            s.removeLast()
        }
        guard let value = Double(s), value >= 0, value.isFinite else { return nil }
        let bytes = value * factor
        guard bytes < 9.0e18 else { return nil }
        return Int64(bytes.rounded())
    }

    /// A size for people: `1.5 MiB`, `512 B`.
    public static func formatBytes(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(bytes) B" }
        return formatFixed(value, digits: value < 10 ? 2 : 1) + " " + units[unit]
    }

    /// A duration for people: `45s`, `3m05s`, `2h10m`.
    public static func formatDuration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "--" }
        let s = Int(seconds.rounded())
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m" + pad2(s % 60) + "s" }
        if s < 86400 { return "\(s / 3600)h" + pad2((s % 3600) / 60) + "m" }
        return "\(s / 86400)d" + pad2((s % 86400) / 3600) + "h"
    }

    /// A count for people, its thousands grouped: `1,530`.
    public static func formatCount(_ n: Int) -> String {
        let digits = String(n.magnitude)
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(c)
        }
        return (n < 0 ? "-" : "") + out
    }

    public static func formatFixed(_ value: Double, digits: Int) -> String {
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let scaled = Int64((value * scale).rounded())
        let whole = scaled / Int64(scale)
        var fraction = String(scaled % Int64(scale))
        while fraction.count < digits { fraction = "0" + fraction }
        return digits == 0 ? "\(whole)" : "\(whole).\(fraction)"
    }

    private static func pad2(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
}

extension String {
    /// Trims ASCII spaces and tabs (no Foundation needed).
    public func trimmingSpaces() -> String {
        var view = Substring(self)
        while let f = view.first, f == " " || f == "\t" || f == "\r" || f == "\n" { view.removeFirst() }
        while let l = view.last, l == " " || l == "\t" || l == "\r" || l == "\n" { view.removeLast() }
        return String(view)
    }
}

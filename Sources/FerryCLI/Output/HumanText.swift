import Glibc
import FerryCore

/// Terminal columns: how wide text is, and text cut, shortened or wrapped to a width, for lines
/// that must not wrap (progress bars redrawn in place, `ferry status` within its width).
enum Columns {
    /// The width `ferry status` writes in: the terminal's when stdout is one narrower than 80
    /// columns, else 80 (a wider terminal, a pipe, a file, a mail): lines stay readable wherever
    /// they end up, and a script that reads them sees the same lines on any terminal.
    static func standardOutput() -> Int {
        var size = winsize()
        if isatty(1) == 1 && ioctl(1, UInt(TIOCGWINSZ), &size) == 0 && size.ws_col > 0 { return max(20, min(80, Int(size.ws_col))) }
        return 80
    }

    /// `text` in at most `n` columns, its start and end kept around `…`.
    static func middle(_ text: String, _ n: Int) -> String {
        guard columns(text) > n else { return text }
        guard n > 1 else { return fit(text, max(0, n)) }
        let headRoom = (n - 1) / 2
        let head = fit(text, headRoom)
        var tail: [Character] = []
        var used = 0
        for c in text.reversed() {
            let w = columns(of: c)
            if used + w > n - 1 - columns(head) { break }
            tail.append(c)
            used += w
        }
        return head + "…" + String(tail.reversed())
    }

    /// A line cut to `n` columns, so it never wraps.
    static func fit(_ line: String, _ n: Int) -> String {
        var out = ""
        var used = 0
        for c in line {
            let w = columns(of: c)
            if used + w > n { break }
            out.append(c)
            used += w
        }
        return out
    }

    /// A line cut to `n` columns, ending with `…` when something was cut.
    static func cut(_ line: String, _ n: Int) -> String {
        columns(line) <= n ? line : fit(line, max(0, n - 1)) + "…"
    }

    /// How many terminal columns `text` takes (East Asian wide characters and most emoji two,
    /// combining marks none).
    static func columns(_ text: String) -> Int { text.reduce(0) { $0 + columns(of: $1) } }

    static func columns(of c: Character) -> Int {
        guard let v = c.unicodeScalars.first?.value else { return 0 }
        switch v {
        case 0x0300...0x036F, 0x200B...0x200F: return 0
        case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF, 0xAC00...0xD7A3,
             0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x1F300...0x1F64F, 0x1F900...0x1F9FF, 0x20000...0x3FFFD:
            return 2
        default:
            return 1
        }
    }

    /// `text` in lines of at most `width` columns, broken at spaces and newlines (a word wider
    /// than a line is cut), at most `maxLines` of them: the last of a text that goes on ends with
    /// `…`. Escape the text (`Printable`) first: an escape is wider than the byte it shows.
    static func wrap(_ text: String, _ width: Int, maxLines: Int = Int.max) -> [String] {
        let width = max(1, width)
        if !text.contains("\n") && columns(text) <= width { return [text] }
        var lines: [String] = []
        var line = ""
        for word in text.split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init) {
            let candidate = line.isEmpty ? word : line + " " + word
            if columns(candidate) <= width {
                line = candidate
                continue
            }
            if !line.isEmpty { lines.append(line) }
            var rest = word
            while columns(rest) > width {
                let head = fit(rest, width)
                lines.append(head)
                rest = String(rest.dropFirst(head.count))
            }
            line = rest
        }
        if !line.isEmpty || lines.isEmpty { lines.append(line) }
        guard lines.count > maxLines else { return lines }
        var kept = Array(lines.prefix(maxLines))
        kept[maxLines - 1] = fit(kept[maxLines - 1], width - 1) + "…"
        return kept
    }
}

/// Times for people: the local time zone (`TZ`, else /etc/localtime), to the second. `--json`
/// keeps RFC 3339 in UTC.
enum LocalTime {
    /// `2026-11-26 14:03:07`.
    static func text(_ t: Timestamp) -> String {
        var seconds = time_t(t.seconds)
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return t.rfc3339 }
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday)) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
    }
}

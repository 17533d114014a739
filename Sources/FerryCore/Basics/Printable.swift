/// How ferry shows names and remote-supplied text to a person (docs/design.md, data-safety rule 9).
/// Names come from remotes and from local trees, so they are hostile: a name holding `ESC [8m`
/// would hide the terminal text after it, a newline would split a log line, a bidi override would
/// reverse what follows. This is the one place that decides how such bytes are shown.
///
/// The style, documented in the README:
/// - control bytes (0x00–0x1F, DEL) and bytes that are not UTF-8 appear as `\xHH` (`\x1b`), except
///   tab, newline and carriage return, which appear as `\t`, `\n`, `\r`;
/// - C1 controls and invisible or direction-changing characters (bidi overrides and isolates, zero
///   width characters and fillers, the soft hyphen, variation selectors, tag characters, line and
///   paragraph separators, the byte-order mark) appear as `\u{202e}`;
/// - in names, a backslash appears as `\\`, so every shown name reads back to one name;
/// - a name longer than 160 bytes keeps its start and end around `…(N bytes)…`.
/// `--json` output does not use this: JSON strings carry the exact name, escaped as RFC 8259 says.
public enum Printable {
    /// Names longer than this (in UTF-8 bytes) are shortened in messages.
    public static let longestName = 160

    /// A file name or path, escaped and shortened, for any human-readable output.
    public static func name(_ name: String) -> String {
        var copy = name
        return copy.withUTF8 { render($0, escapingBackslash: true, keepNewlines: false, shortenBeyond: longestName) }
    }

    /// A name as the raw bytes a directory holds (which need not be UTF-8).
    public static func name(bytes: UnsafeBufferPointer<UInt8>) -> String {
        render(bytes, escapingBackslash: true, keepNewlines: false, shortenBeyond: longestName)
    }

    /// A name in double quotes, for messages that quote it.
    public static func quoted(_ name: String) -> String { "\"" + Printable.name(name) + "\"" }

    /// Text already composed for a person (a message that may hold a server's reason phrase or
    /// error text): control bytes and invisible characters are escaped, newlines kept, backslashes
    /// left alone (names inside were escaped when the message was composed).
    public static func text(_ text: String) -> String {
        var needed = false
        for b in text.utf8 where b < 0x20 && b != 0x0A || b == 0x7F || b >= 0xC2 {
            needed = true
            break
        }
        guard needed else { return text }
        var copy = text
        return copy.withUTF8 { render($0, escapingBackslash: false, keepNewlines: true, shortenBeyond: nil) }
    }

    /// Whether a Unicode scalar is shown escaped: C1 controls, and characters that are invisible or
    /// change the direction or layout of the text around them.
    static func isHidden(_ v: UInt32) -> Bool {
        switch v {
        case 0x80...0x9F, 0xAD, 0x061C, 0x115F, 0x1160, 0x180E, 0x200B...0x200F, 0x2028...0x202E, 0x2060...0x206F, 0x3164,
             0xFE00...0xFE0F, 0xFEFF, 0xFFA0, 0xFFF9...0xFFFB, 0xE0000...0xE007F:
            return true
        default:
            return false
        }
    }

    private static let hex = Array("0123456789abcdef".utf8)

    private static func render(_ bytes: UnsafeBufferPointer<UInt8>, escapingBackslash: Bool, keepNewlines: Bool,
                               shortenBeyond limit: Int?) -> String {
        if let limit, bytes.count > limit {
            // Keep the start and the end, cut at scalar boundaries, and say how long it was.
            var head = limit * 5 / 8
            while head > 0 && bytes[head] & 0xC0 == 0x80 { head -= 1 }
            var tail = bytes.count - (limit - limit * 5 / 8)
            while tail < bytes.count && bytes[tail] & 0xC0 == 0x80 { tail += 1 }
            let start = render(UnsafeBufferPointer(rebasing: bytes[0..<head]), escapingBackslash: escapingBackslash,
                               keepNewlines: keepNewlines, shortenBeyond: nil)
            let end = render(UnsafeBufferPointer(rebasing: bytes[tail...]), escapingBackslash: escapingBackslash,
                             keepNewlines: keepNewlines, shortenBeyond: nil)
            return start + "…(\(bytes.count) bytes)…" + end
        }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 8)
        func byteEscape(_ b: UInt8) {
            out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "x"))
            out.append(hex[Int(b >> 4)]); out.append(hex[Int(b & 0xF)])
        }
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if b < 0x80 {
                switch b {
                case 0x0A where keepNewlines: out.append(b)
                case 0x0A: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
                case 0x09: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "t"))
                case 0x0D: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "r"))
                case 0x00..<0x20, 0x7F: byteEscape(b)
                case UInt8(ascii: "\\") where escapingBackslash: out.append(b); out.append(b)
                default: out.append(b)
                }
                i += 1
                continue
            }
            guard let (scalar, length) = decodeScalar(bytes, at: i) else {
                byteEscape(b)
                i += 1
                continue
            }
            if isHidden(scalar) {
                out.append(contentsOf: Array("\\u{\(String(scalar, radix: 16))}".utf8))
            } else {
                out.append(contentsOf: bytes[i..<(i + length)])
            }
            i += length
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The scalar starting at `i` and its length in bytes, or nil if the bytes there are not UTF-8.
    private static func decodeScalar(_ bytes: UnsafeBufferPointer<UInt8>, at i: Int) -> (UInt32, Int)? {
        let b = bytes[i]
        let length: Int
        var value: UInt32
        switch b {
        case 0xC2...0xDF: length = 2; value = UInt32(b & 0x1F)
        case 0xE0...0xEF: length = 3; value = UInt32(b & 0x0F)
        case 0xF0...0xF4: length = 4; value = UInt32(b & 0x07)
        default: return nil
        }
        guard i + length <= bytes.count else { return nil }
        for k in 1..<length {
            let c = bytes[i + k]
            guard c & 0xC0 == 0x80 else { return nil }
            value = value << 6 | UInt32(c & 0x3F)
        }
        // Overlong forms, surrogates and values beyond U+10FFFF are not UTF-8.
        let minimum: UInt32 = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000
        guard value >= minimum, value <= 0x10FFFF, !(0xD800...0xDFFF).contains(value) else { return nil }
        return (value, length)
    }
}

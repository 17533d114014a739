/// A pull reader over JSON bytes: the caller walks the document it expects, key by key, without
/// building a tree. It keeps a million-entry manifest cheap in time and memory, and lets errors say
/// exactly where the document went wrong (line and column). It accepts only RFC 8259 JSON.
public struct JSONReader: ~Copyable {
    public struct Failure: Error, Sendable {
        public let message: String
        public let line: Int
        public let column: Int
        /// False for a well-formed document whose content the caller refused (`problem(_:)`):
        /// reading stops there too, at the first fatal error.
        public var isSyntax = true
    }

    public enum Kind { case object, array, string, number, bool, null }

    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0
    private static let maxDepth = 64

    public init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
        if bytes.count >= 3 && bytes[0] == 0xEF && bytes[1] == 0xBB && bytes[2] == 0xBF { index = 3 }
    }

    public func failure(_ message: String) -> Failure {
        var line = 1, column = 1
        for i in 0..<min(index, bytes.count) {
            if bytes[i] == UInt8(ascii: "\n") { line += 1; column = 1 } else { column += 1 }
        }
        return Failure(message: message, line: line, column: column)
    }

    /// A refusal of well-formed content, thrown from a walk to stop reading at once.
    public func problem(_ message: String) -> Failure {
        var f = failure(message)
        f.isSyntax = false
        return f
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    public mutating func peekKind() throws(Failure) -> Kind {
        skipWhitespace()
        guard index < bytes.count else { throw failure("unexpected end of document") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number
        default: throw failure("unexpected character '\(printable(bytes[index]))'")
        }
    }

    private mutating func expect(_ c: UInt8, _ what: String) throws(Failure) {
        skipWhitespace()
        guard index < bytes.count else { throw failure("unexpected end of document, expected \(what)") }
        guard bytes[index] == c else { throw failure("expected \(what), found '\(printable(bytes[index]))'") }
        index += 1
    }

    /// Calls `body` once per member with its key; `body` must consume the value.
    public mutating func readObject(_ body: (inout JSONReader, String) throws(Failure) -> Void) throws(Failure) {
        try expect(UInt8(ascii: "{"), "an object")
        depth += 1
        guard depth <= JSONReader.maxDepth else { throw failure("nesting deeper than \(JSONReader.maxDepth) levels") }
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("expected a member name in quotes") }
            let key = try readString()
            try expect(UInt8(ascii: ":"), "':' after a member name")
            try body(&self, key)
            skipWhitespace()
            guard index < bytes.count else { throw failure("unexpected end of document inside an object") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; break }
            throw failure("expected ',' or '}' in an object, found '\(printable(bytes[index]))'")
        }
        depth -= 1
    }

    /// Calls `body` once per element with its index; `body` must consume the value.
    public mutating func readArray(_ body: (inout JSONReader, Int) throws(Failure) -> Void) throws(Failure) {
        try expect(UInt8(ascii: "["), "an array")
        depth += 1
        guard depth <= JSONReader.maxDepth else { throw failure("nesting deeper than \(JSONReader.maxDepth) levels") }
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return
        }
        var n = 0
        while true {
            try body(&self, n)
            n += 1
            skipWhitespace()
            guard index < bytes.count else { throw failure("unexpected end of document inside an array") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; break }
            throw failure("expected ',' or ']' in an array, found '\(printable(bytes[index]))'")
        }
        depth -= 1
    }

    public mutating func readString() throws(Failure) -> String {
        try expect(UInt8(ascii: "\""), "a string")
        let start = index
        var hasEscape = false
        var ascii = true
        while true {
            guard index < bytes.count else { throw failure("unterminated string") }
            let b = bytes[index]
            if b == UInt8(ascii: "\"") { break }
            if b < 0x20 { throw failure("raw control character (0x\(String(b, radix: 16))) in a string") }
            if b >= 0x80 { ascii = false }
            if b == UInt8(ascii: "\\") { hasEscape = true; index += 1 }
            index += 1
        }
        let end = index
        index += 1
        if !hasEscape {
            let raw = UnsafeBufferPointer(rebasing: bytes[start..<end])
            // ASCII is valid UTF-8 as it is: no validation (which, generic, costs more than the rest of a read).
            if ascii { return String(decoding: raw, as: UTF8.self) }
            guard let s = String(validating: raw, as: UTF8.self) else {
                throw failure("string is not valid UTF-8")
            }
            return s
        }
        var out: [UInt8] = []
        out.reserveCapacity(end - start)
        var i = start
        while i < end {
            let b = bytes[i]
            if b != UInt8(ascii: "\\") { out.append(b); i += 1; continue }
            i += 1
            switch bytes[i] {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard let high = hex4(at: i + 1, end: end) else { throw failure("bad \\u escape") }
                i += 4
                var scalarValue = UInt32(high)
                if (0xD800...0xDBFF).contains(high) {
                    guard i + 2 < end, bytes[i + 1] == UInt8(ascii: "\\"), bytes[i + 2] == UInt8(ascii: "u"),
                          let low = hex4(at: i + 3, end: end), (0xDC00...0xDFFF).contains(low) else {
                        throw failure("unpaired surrogate in \\u escape")
                    }
                    scalarValue = 0x10000 + ((UInt32(high) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                    i += 6
                } else if (0xDC00...0xDFFF).contains(high) {
                    throw failure("unpaired surrogate in \\u escape")
                }
                guard let scalar = Unicode.Scalar(scalarValue) else { throw failure("bad \\u escape") }
                out.append(contentsOf: Array(String(scalar).utf8))
            default:
                throw failure("unknown escape '\\\(printable(bytes[i]))'")
            }
            i += 1
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw failure("string is not valid UTF-8") }
        return s
    }

    private func hex4(at i: Int, end: Int) -> UInt16? {
        guard i + 4 <= end else { return nil }
        var v: UInt16 = 0
        for k in i..<(i + 4) {
            guard let h = hexValue(bytes[k]) else { return nil }
            v = v << 4 | UInt16(h)
        }
        return v
    }

    /// A whole number that fits in Int64 (no fraction, no exponent).
    public mutating func readInteger() throws(Failure) -> Int64 {
        skipWhitespace()
        let start = index
        var negative = false
        if index < bytes.count && bytes[index] == UInt8(ascii: "-") { negative = true; index += 1 }
        var value: Int64 = 0
        var digits = 0
        while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(Int64(bytes[index] - 48))
            if o1 || o2 { index = start; throw failure("number is too large") }
            value = a
            digits += 1
            index += 1
        }
        guard digits > 0 else { index = start; throw failure("expected a whole number") }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") || bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index = start
            throw failure("expected a whole number, found a fraction or exponent")
        }
        return negative ? -value : value
    }

    public mutating func readBool() throws(Failure) -> Bool {
        skipWhitespace()
        if matchLiteral("true") { return true }
        if matchLiteral("false") { return false }
        throw failure("expected true or false")
    }

    private mutating func matchLiteral(_ word: StaticString) -> Bool {
        let n = word.utf8CodeUnitCount
        guard index + n <= bytes.count else { return false }
        let p = word.utf8Start
        for k in 0..<n where bytes[index + k] != p[k] { return false }
        index += n
        return true
    }

    /// Consumes any value (used for members ferry does not know, for forward compatibility).
    public mutating func skipValue() throws(Failure) {
        switch try peekKind() {
        case .object: try readObject { (r: inout JSONReader, _: String) throws(Failure) in try r.skipValue() }
        case .array: try readArray { (r: inout JSONReader, _: Int) throws(Failure) in try r.skipValue() }
        case .string: _ = try readString()
        case .bool: _ = try readBool()
        case .null:
            guard matchLiteral("null") else { throw failure("expected null") }
        case .number:
            let start = index
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            while index < bytes.count, (bytes[index] >= 48 && bytes[index] <= 57) || bytes[index] == UInt8(ascii: ".")
                || bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") || bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            if index == start { throw failure("bad number") }
        }
    }

    /// A string, number, true, false or null as text (a number as written); nil for an object or
    /// an array, which is skipped.
    public mutating func readScalarText() throws(Failure) -> String? {
        switch try peekKind() {
        case .string: return try readString()
        case .object, .array:
            try skipValue()
            return nil
        case .number, .bool, .null:
            let start = index
            try skipValue()
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        }
    }

    /// The members of a one-level object, in order, with scalar values as text (`readScalarText`);
    /// nil when `bytes` is not one JSON object.
    public static func flatObject(_ bytes: UnsafeBufferPointer<UInt8>) -> [(key: String, value: String?)]? {
        var reader = JSONReader(bytes)
        var members: [(key: String, value: String?)] = []
        do throws(Failure) {
            guard try reader.peekKind() == .object else { return nil }
            try reader.readObject { (r: inout JSONReader, key: String) throws(Failure) in members.append((key, try r.readScalarText())) }
            try reader.expectEnd()
        } catch {
            return nil
        }
        return members
    }

    /// The scalar members of a one-level object by key (nulls, objects and arrays left out); nil
    /// when `bytes` is not one JSON object. For lines whose order does not matter.
    public static func flatFields(_ bytes: [UInt8]) -> [String: String]? {
        guard let members = bytes.withUnsafeBufferPointer({ flatObject($0) }) else { return nil }
        var fields: [String: String] = [:]
        for (key, value) in members { if let value { fields[key] = value } }
        return fields
    }

    /// Where the next value starts (after whitespace): with `offset` after reading it, the exact
    /// bytes it spans.
    public mutating func valueStart() throws(Failure) -> Int {
        _ = try peekKind()
        return index
    }

    /// The byte offset reading has reached.
    public var offset: Int { index }

    /// After the top-level value: only whitespace may follow.
    public mutating func expectEnd() throws(Failure) {
        skipWhitespace()
        if index < bytes.count { throw failure("unexpected data after the end of the document") }
    }

    private func printable(_ b: UInt8) -> String {
        (b >= 0x20 && b < 0x7F) ? String(Character(Unicode.Scalar(b))) : "0x" + String(b, radix: 16)
    }
}

/// Writes JSON strings with the escapes RFC 8259 requires, and `\uXXXX` for DEL, C1 controls and
/// invisible or direction-changing characters (`Printable.isHidden`): the string decodes to the
/// exact name, and JSON shown on a terminal cannot reorder or hide what follows.
public enum JSONText {
    public static func quote(_ s: String) -> String {
        var out: [UInt8] = []
        appendQuoted(s, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `s` as a JSON string, quotes included: control characters, DEL and invisible
    /// characters (`Printable.isHidden`) escaped as `\uXXXX`.
    public static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most text (paths, messages) is printable ASCII with nothing to escape: copied whole.
        if s.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) {
            out.append(contentsOf: s.utf8)
            out.append(UInt8(ascii: "\""))
            return
        }
        let hex = Array("0123456789abcdef".utf8)
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case "\\": out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case "\n": out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case "\r": out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case "\t": out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F || Printable.isHidden(scalar.value) {
                    // Outside the BMP (tag characters), JSON writes the UTF-16 surrogate pair.
                    for unit in UTF16.encode(scalar)! {
                        out += [UInt8(ascii: "\\"), UInt8(ascii: "u")]
                        for shift in stride(from: 12, through: 0, by: -4) { out.append(hex[Int((unit >> UInt16(shift)) & 0xF)]) }
                    }
                } else {
                    out.append(contentsOf: UTF8.encode(scalar)!)
                }
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Appends `v` in decimal.
    public static func appendInteger(_ v: Int64, to out: inout [UInt8]) {
        if v < 0 { out.append(UInt8(ascii: "-")) }
        // Digits come out last first: written, then turned around in place.
        let start = out.count
        var magnitude = v.magnitude
        repeat {
            out.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        } while magnitude > 0
        out[start...].reverse()
    }
}

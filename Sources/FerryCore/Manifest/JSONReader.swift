/// A pull reader over JSON bytes: the caller walks the document it expects, key by key, without
/// building a tree. It keeps a million-entry manifest cheap in time and memory, and lets errors say
/// exactly where the document went wrong (line and column). It accepts only RFC 8259 JSON, and
/// of it only what every reader agrees on: a member name given twice in one object is refused
/// (readers differ on which one counts, so what ferry checked and what another tool sees could
/// differ), and numbers follow the grammar exactly (no `01`, `+1`, `.5`, `1.`).
public struct JSONReader: ~Copyable {
    public struct Failure: Error, Sendable {
        public var message: String
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
        var names = MemberNames()
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("expected a member name in quotes") }
            let keyStart = index
            let key = try readString()
            guard names.insert(key) else {
                index = keyStart
                throw problem("member \(Printable.quoted(key)) is given twice in one object (JSON readers disagree on which one counts)")
            }
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

    /// A whole number of 0 or more that fits in Int64, for a size, a version or a count (ferry reads
    /// no other integers); `what` names it in errors (`"version"`, `files[3].size`). A minus sign
    /// is refused, `-0` too: RFC 8259 allows it, but no writer of a count puts it there, and readers
    /// disagree on what it is.
    public mutating func readCount(_ what: String) throws(Failure) -> Int64 {
        skipWhitespace()
        let start = index
        guard index < bytes.count, bytes[index] == UInt8(ascii: "-") || (bytes[index] >= 48 && bytes[index] <= 57) else {
            throw failure("\(what): expected a whole number, found " + (index < bytes.count ? "'\(printable(bytes[index]))'" : "the end of the document"))
        }
        let integral: Bool
        do { integral = try scanNumber() } catch { throw failure("\(what): \(error.message)", at: error) }
        guard integral else { index = start; throw failure("\(what): expected a whole number, found a fraction or exponent") }
        if bytes[start] == UInt8(ascii: "-") {
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            index = start
            throw problem("\(what) must be 0 or more, found \(text.prefix(24))")
        }
        var value: Int64 = 0
        for i in start..<index {
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(Int64(bytes[i] - 48))
            if o1 || o2 { index = start; throw failure("\(what): number is too large") }
            value = a
        }
        return value
    }

    /// Moves past one number as RFC 8259 §6 writes it, `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`,
    /// and says whether it was whole (no fraction, no exponent). The error stands where the grammar
    /// broke (`01`, `-`, `1.`, `1e+`); what follows a number is the caller's to check.
    private mutating func scanNumber() throws(Failure) -> Bool {
        func isDigit(_ i: Int) -> Bool { i < bytes.count && bytes[i] >= 48 && bytes[i] <= 57 }
        if index < bytes.count && bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard isDigit(index) else { throw failure("a number needs a digit after '-'") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if isDigit(index) { throw failure("a number must not start with 0 followed by more digits (a leading zero)") }
        } else {
            while isDigit(index) { index += 1 }
        }
        var integral = true
        if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard isDigit(index) else { throw failure("a number needs a digit after its decimal point") }
            while isDigit(index) { index += 1 }
            integral = false
        }
        if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
            index += 1
            if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) { index += 1 }
            guard isDigit(index) else { throw failure("a number needs a digit in its exponent") }
            while isDigit(index) { index += 1 }
            integral = false
        }
        return integral
    }

    /// `failure` with the message given and the place of `at`.
    private func failure(_ message: String, at: Failure) -> Failure {
        var f = at
        f.message = message
        return f
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
            _ = try scanNumber()
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
    /// throws where `bytes` stops being one JSON object.
    public static func flatObject(_ bytes: UnsafeBufferPointer<UInt8>) throws(Failure) -> [(key: String, value: String?)] {
        var reader = JSONReader(bytes)
        var members: [(key: String, value: String?)] = []
        guard try reader.peekKind() == .object else { throw reader.failure("expected one JSON object") }
        try reader.readObject { (r: inout JSONReader, key: String) throws(Failure) in members.append((key, try r.readScalarText())) }
        try reader.expectEnd()
        return members
    }

    /// The scalar members of a one-level object by key (nulls, objects and arrays left out); throws
    /// where `bytes` stops being one JSON object. For lines whose order does not matter.
    public static func flatFields(_ bytes: [UInt8]) throws(Failure) -> [String: String] {
        let members = try bytes.withUnsafeBufferPointer { (p) throws(Failure) in try flatObject(p) }
        var fields: [String: String] = [:]
        for (key, value) in members { if let value { fields[key] = value } }
        return fields
    }

    /// A count as `readScalarText` gives it back (a line read flat, like an event): digits as RFC
    /// 8259 writes a number of 0 or more (no sign, no leading zero, no fraction); nil otherwise.
    public static func count(_ text: String) -> Int64? {
        let digits = Array(text.utf8)
        guard !digits.isEmpty, digits.count == 1 || digits[0] != UInt8(ascii: "0"),
              digits.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int64(text)
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

/// The member names of one object read so far. Compared as their UTF-8 bytes, as RFC 8259
/// compares names: Swift's `==` would call `"\u00e9"` and `"e\u0301"` one name. A few are searched
/// in a list (an entry has five); past 16, in a set, so an object of many members costs no more
/// than its size.
private struct MemberNames {
    private var few: [String] = []
    private var many: Set<[UInt8]> = []

    /// False when `name` was given before.
    mutating func insert(_ name: String) -> Bool {
        guard many.isEmpty else { return many.insert(Array(name.utf8)).inserted }
        if few.contains(where: { $0.utf8.elementsEqual(name.utf8) }) { return false }
        if few.isEmpty { few.reserveCapacity(8) }
        few.append(name)
        if few.count > 16 {
            many = Set(few.map { Array($0.utf8) })
            few = []
        }
        return true
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
        // Most text (paths, messages) is printable ASCII with nothing to escape: copied whole,
        // checked and copied from the string's own bytes.
        var text = s
        let plain = text.withUTF8 { bytes -> Bool in
            guard bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) else {
                return false
            }
            out.append(contentsOf: bytes)
            return true
        }
        if plain {
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

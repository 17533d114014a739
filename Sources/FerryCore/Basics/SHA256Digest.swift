/// A SHA-256 digest held as its 32 bytes, inline: no heap allocation, compared and hashed as four
/// words. A million manifest entries and cached hashes would otherwise each carry a 64-character
/// String (~100 bytes of heap apiece). Written out as 64 lowercase hex digits (`hex`).
public struct SHA256Digest: Hashable, Sendable, CustomStringConvertible {
    private var w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

    /// The digest's 32 bytes.
    public init(bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count == 32, "a SHA-256 digest is 32 bytes")
        w0 = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self))
        w1 = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        w2 = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
        w3 = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
    }

    /// 64 hex digits, either case; nil for anything else.
    public init?(hex: UnsafeBufferPointer<UInt8>) {
        guard hex.count == 64 else { return nil }
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        let valid = SHA256Digest.digitValues.withUnsafeBufferPointer { values -> Bool in
            var bad: UInt8 = 0
            func word(_ w: Int) -> UInt64 {
                var value: UInt64 = 0
                for i in 0..<16 {
                    let digit = values[Int(hex[w * 16 + i])]
                    bad |= digit
                    value = value << 4 | UInt64(digit & 0xF)
                }
                return value
            }
            words = (word(0), word(1), word(2), word(3))
            return bad & 0x80 == 0
        }
        guard valid else { return nil }
        (w0, w1, w2, w3) = words
    }

    /// The value of each byte as a hex digit, 0x80 for a byte that is not one.
    private static let digitValues: [UInt8] = (0...255).map { (b: Int) -> UInt8 in
        switch b {
        case 0x30...0x39: return UInt8(b - 0x30)
        case 0x61...0x66: return UInt8(b - 0x61 + 10)
        case 0x41...0x46: return UInt8(b - 0x41 + 10)
        default: return 0x80
        }
    }

    /// 64 hex digits, either case; nil for anything else.
    public init?(hex text: String) {
        var text = text
        guard let digest = text.withUTF8({ SHA256Digest(hex: $0) }) else { return nil }
        self = digest
    }

    /// 64 lowercase hex digits.
    public var hex: String {
        String(unsafeUninitializedCapacity: 64) { out in
            let digits: StaticString = "0123456789abcdef"
            digits.withUTF8Buffer { digits in
                for (w, word) in [w0, w1, w2, w3].enumerated() {
                    for i in 0..<16 {
                        out[w * 16 + i] = digits[Int((word >> UInt64(60 - 4 * i)) & 0xF)]
                    }
                }
            }
            return 64
        }
    }

    public var description: String { hex }

    /// The digest's 32 bytes.
    public var bytes: [UInt8] {
        [w0, w1, w2, w3].flatMap { word in (0..<8).map { UInt8(truncatingIfNeeded: word >> UInt64(56 - 8 * $0)) } }
    }

    /// Byte `i` of the 32, without making the array `bytes` makes.
    public func byte(_ i: Int) -> UInt8 {
        let word = i < 8 ? w0 : i < 16 ? w1 : i < 24 ? w2 : w3
        return UInt8(truncatingIfNeeded: word >> UInt64(56 - 8 * (i % 8)))
    }

    /// Standard base64 of the 32 bytes (S3's `x-amz-checksum-sha256`, RFC 9530's `Repr-Digest`).
    public var base64: String { Base64.encode(bytes) }

    /// The SHA-256 a server vouches for in a response: RFC 9530 `Repr-Digest: sha-256=:BASE64:`,
    /// or RFC 3230 `Digest: SHA-256=BASE64` (a list may name other algorithms too). nil when
    /// neither names SHA-256, or the value is not 32 bytes of base64.
    public static func fromServer(reprDigest: String?, digest: String?) -> SHA256Digest? {
        func pick(_ header: String?, quoted: Bool) -> SHA256Digest? {
            guard let header else { return nil }
            for member in header.split(separator: ",") {
                let parts = member.split(separator: "=", maxSplits: 1)
                guard parts.count == 2, String(parts[0]).trimmingSpaces().lowercased() == "sha-256" else { continue }
                var value = Substring(String(parts[1]).trimmingSpaces())
                if quoted {
                    guard value.hasPrefix(":"), value.hasSuffix(":"), value.count >= 2 else { continue }
                    value = value.dropFirst().dropLast()
                }
                guard let bytes = Base64.decode(String(value)), bytes.count == 32 else { continue }
                return bytes.withUnsafeBytes { SHA256Digest(bytes: $0) }
            }
            return nil
        }
        return pick(reprDigest, quoted: true) ?? pick(digest, quoted: false)
    }
}

/// Standard base64 (RFC 4648 §4), with or without padding.
public enum Base64 {
    public static func encode(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let n = min(3, bytes.count - i)
            var chunk = UInt32(bytes[i]) << 16
            if n > 1 { chunk |= UInt32(bytes[i + 1]) << 8 }
            if n > 2 { chunk |= UInt32(bytes[i + 2]) }
            for j in 0..<4 { out.append(j <= n ? alphabet[Int((chunk >> UInt32(18 - 6 * j)) & 63)] : UInt8(ascii: "=")) }
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    public static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        var padding = 0
        for c in text.utf8 {
            let v: UInt32
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): v = UInt32(c - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): v = UInt32(c - UInt8(ascii: "a") + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = UInt32(c - UInt8(ascii: "0") + 52)
            case UInt8(ascii: "+"): v = 62
            case UInt8(ascii: "/"): v = 63
            case UInt8(ascii: "="): padding += 1; continue
            default: return nil
            }
            guard padding == 0 else { return nil }
            buffer = buffer << 6 | v
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8((buffer >> UInt32(bits)) & 0xFF))
            }
        }
        return padding <= 2 ? out : nil
    }
}

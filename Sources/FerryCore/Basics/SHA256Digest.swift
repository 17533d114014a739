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
        for w in 0..<4 {
            var value: UInt64 = 0
            for i in 0..<16 {
                let c = hex[w * 16 + i]
                let digit: UInt8
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = c &- UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = c &- UInt8(ascii: "a") &+ 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = c &- UInt8(ascii: "A") &+ 10
                default: return nil
                }
                value = value << 4 | UInt64(digit)
            }
            switch w {
            case 0: words.0 = value
            case 1: words.1 = value
            case 2: words.2 = value
            default: words.3 = value
            }
        }
        (w0, w1, w2, w3) = words
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
}

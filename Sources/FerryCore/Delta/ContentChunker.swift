/// Cuts a file into chunks where its content says (a gear hash over the bytes since the chunk
/// began), so the same bytes are cut the same way in the old version of a file and the new one,
/// wherever they sit: an insertion moves the cuts only near it. Normalised cuts: never before
/// `minimum` bytes, a 13-bit condition up to `normal` and a 10-bit one after it, always at
/// `maximum` (chunks average about 3.7 KiB). Fed buffer by buffer; pure.
public struct ContentChunker: Sendable {
    public static let minimum = 1536
    public static let normal = 3072
    public static let maximum = 12288
    static let smallMask: UInt64 = 0xFFF8_0000_0000_0000  // the top 13 bits
    static let largeMask: UInt64 = 0xFFC0_0000_0000_0000  // the top 10 bits

    private var hash: UInt64 = 0
    /// Bytes of the chunk being cut so far.
    public private(set) var length = 0

    public init() {}

    /// Reads `bytes` from `start`: the index just past the cut when the chunk ends in them (the
    /// chunker then starts the next one), nil when they were all taken and the chunk goes on.
    public mutating func cut(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        let n = bytes.count
        var i = start
        if length < ContentChunker.minimum {
            let skip = min(ContentChunker.minimum - length, n - i)
            i += skip
            length += skip
            if length < ContentChunker.minimum { return nil }
        }
        var h = hash
        var length = self.length
        defer { self.length = length; hash = h }
        return ContentChunker.gear.withUnsafeBufferPointer { gear -> Int? in
            // Up to the normal size: the stricter condition.
            while i < n && length < ContentChunker.normal {
                h = (h << 1) &+ gear[Int(bytes[i])]
                i += 1
                length += 1
                if h & ContentChunker.smallMask == 0 { h = 0; length = 0; return i }
            }
            while i < n {
                h = (h << 1) &+ gear[Int(bytes[i])]
                i += 1
                length += 1
                if h & ContentChunker.largeMask == 0 || length >= ContentChunker.maximum { h = 0; length = 0; return i }
            }
            return nil
        }
    }

    /// The lengths of the chunks of `bytes` taken whole (the last one ends where they end).
    public static func lengths(of bytes: UnsafeBufferPointer<UInt8>) -> [Int] {
        var chunker = ContentChunker()
        var out: [Int] = []
        var start = 0
        while let end = chunker.cut(bytes, from: start) {
            out.append(end - start)
            start = end
        }
        if start < bytes.count { out.append(bytes.count - start) }
        return out
    }

    /// 256 fixed values from SplitMix64 seeded with "ferry": the same on every machine, forever
    /// (changing them changes every index).
    static let gear: [UInt64] = {
        var state: UInt64 = 0x6665_7272_79  // "ferry"
        return (0..<256).map { _ in
            state &+= 0x9e37_79b9_7f4a_7c15
            var z = state
            z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
            z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
            return z ^ (z >> 31)
        }
    }()
}

/// A piece's detail: 16 bits of a hash of each block of 512 bytes of the piece (from its start;
/// the last block may be short), one index object (`fdD1`) per piece that the piece names. What a
/// chunk cannot tell a mirror: which bytes of a changed chunk changed. A 4 KiB write changes the
/// chunks around it (about 11 KiB); the old bytes where the changed chunks stood, checked block by
/// block against the detail, give back all but the blocks the write touched (`DeltaPlan.refine`).
/// A mirror fetches a piece's detail only when the piece changed beside bytes it holds, so a cold
/// mirror and a contiguous change never pay for it.
///
/// The block's size grows with the piece (512 bytes up to 1 MiB, then doubled) so a detail object
/// never passes `ContentIndex.maximumObjectSize`: 2 bytes a block, 0.4% of the file at the
/// origin. A false match (1 in 65,536 blocks compared) costs its piece a fetch: the piece's
/// SHA-256 is what an assembled piece must match.
public enum PieceDetail {
    static let magic: [UInt8] = Array("fdD1".utf8)
    static let smallestBlock = 512
    static let mostBlocks = 2040

    /// The size of a block of a piece of `length` bytes.
    public static func blockSize(forPieceOf length: Int) -> Int {
        var size = smallestBlock
        while (length + size - 1) / size > mostBlocks { size *= 2 }
        return size
    }

    /// A block's hash as a detail keeps it: 16 bits of a 64-bit multiply-rotate hash of each 512
    /// bytes (with their length), folded over the block (not a cryptographic hash: the piece's
    /// SHA-256 decides; this only finds candidates).
    public static func hash(_ block: UnsafeRawBufferPointer) -> UInt16 {
        var parts: [UInt64] = []
        var at = 0
        while at < block.count {
            let end = min(at + smallestBlock, block.count)
            parts.append(part(UnsafeRawBufferPointer(rebasing: block[at..<end])))
            at = end
        }
        return fold(parts[...])
    }

    public static func hash(_ block: [UInt8]) -> UInt16 { block.withUnsafeBytes { hash($0) } }

    /// The 64-bit hash of up to 512 bytes.
    static func part(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var h: UInt64 = 0x243F_6A88_85A3_08D3 ^ UInt64(bytes.count)
        var i = 0
        while i + 8 <= bytes.count {
            h = mix(h, bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self).littleEndian)
            i += 8
        }
        if i < bytes.count {
            var tail: UInt64 = 0
            for (k, byte) in bytes[i...].enumerated() { tail |= UInt64(byte) << (8 * UInt64(k)) }
            h = mix(h, tail)
        }
        return h
    }

    /// One block's 16 bits from the hashes of its 512-byte parts.
    static func fold(_ parts: ArraySlice<UInt64>) -> UInt16 {
        var h = parts.count == 1 ? parts.first! : parts.reduce(0x1319_8A2E_0370_7344, mix)
        h ^= h >> 31
        h = h &* 0x94D0_49BB_1331_11EB
        h ^= h >> 29
        return UInt16(truncatingIfNeeded: h >> 48)
    }

    @inline(__always) static func mix(_ h: UInt64, _ word: UInt64) -> UInt64 {
        let x = h ^ (word &* 0x9E37_79B9_7F4A_7C15)
        return ((x << 27) | (x >> 37)) &* 0xBF58_476D_1CE4_E5B9
    }

    /// Hashes a piece's bytes as they are read, 512 bytes at a time; `finish` at the piece's end
    /// gives the piece's detail object and starts the next piece.
    public struct Hasher {
        var buffer: [UInt8] = []
        var parts: [UInt64] = []
        var length = 0

        public init() { buffer.reserveCapacity(smallestBlock) }

        public mutating func update(_ bytes: UnsafeBufferPointer<UInt8>) {
            length += bytes.count
            var rest = bytes[...]
            while !rest.isEmpty {
                let take = min(smallestBlock - buffer.count, rest.count)
                buffer += rest.prefix(take)
                rest = rest.dropFirst(take)
                if buffer.count == smallestBlock { seal() }
            }
        }

        private mutating func seal() {
            parts.append(buffer.withUnsafeBytes { PieceDetail.part($0) })
            buffer.removeAll(keepingCapacity: true)
        }

        public mutating func finish() -> [UInt8] {
            if !buffer.isEmpty { seal() }
            let per = blockSize(forPieceOf: length) / smallestBlock
            let hashes = stride(from: 0, to: parts.count, by: per).map { fold(parts[$0..<min($0 + per, parts.count)]) }
            let out = PieceDetail.encode(hashes, blockSize: per * smallestBlock)
            parts.removeAll(keepingCapacity: true)
            length = 0
            return out
        }
    }

    static func encode(_ hashes: [UInt16], blockSize: Int) -> [UInt8] {
        var out = magic + [UInt8(blockSize.trailingZeroBitCount)]
        ContentIndex.varint(UInt64(hashes.count), into: &out)
        for h in hashes { out += [UInt8(h & 0xFF), UInt8(h >> 8)] }
        return out
    }

    /// The block hashes of the detail `bytes` of a piece of `length` bytes (nil: they are not one).
    public static func hashes(_ bytes: [UInt8], pieceLength length: Int) -> [UInt16]? {
        try? read(bytes, pieceLength: length)
    }

    /// The block hashes of the detail `bytes` of a piece of `length` bytes, checked: its kind, its
    /// block size for that length, a hash for every block.
    static func read(_ bytes: [UInt8], pieceLength length: Int) throws(ManifestTree.Problem) -> [UInt16] {
        try bytes.withUnsafeBufferPointer { (b) throws(ManifestTree.Problem) -> [UInt16] in
            var r = ManifestTree.ObjectReader(b)
            try r.expect(magic, "a piece's detail")
            let size = blockSize(forPieceOf: length)
            let stated = Int(try r.byte())
            guard stated < 32, 1 << stated == size else {
                throw ManifestTree.Problem(text: "it says its blocks are of 2^\(stated) bytes, not the \(size) of a piece of \(length)")
            }
            let count = (length + size - 1) / size
            let statedCount = try r.varint(max: UInt64(mostBlocks), "its count of blocks")
            guard statedCount == count else {
                throw ManifestTree.Problem(text: "it holds \(statedCount) blocks, not the \(count) of a piece of \(length) bytes")
            }
            let raw = try r.take(2 * count)
            guard r.atEnd else { throw ManifestTree.Problem(text: "it has bytes after its last block") }
            return (0..<count).map { UInt16(raw[2 * $0]) | UInt16(raw[2 * $0 + 1]) << 8 }
        }
    }
}

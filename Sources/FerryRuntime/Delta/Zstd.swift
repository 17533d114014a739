import CZstd
import FerryCore

/// zstd through Debian's libzstd, for pieces stored compressed (`ContentIndex.Stored`): each chunk
/// of such a piece is one frame of its own, so a range of whole chunks of the stored object
/// decompresses alone. Level 3: at about 200 MB/s a core, a publisher's CPU, not its bandwidth,
/// is what it costs; a higher level gains a few percent on frames of 4 KiB.
enum Zstd {
    static let level: Int32 = 3
    /// A frame is never asked to use a window larger than this (a chunk is at most 12 KiB): a
    /// frame that says otherwise is refused before it is decoded.
    static let windowLogMax: Int32 = 20

    /// One compression context, reused frame after frame (not shared between threads).
    final class Compressor {
        private let context: OpaquePointer
        private var out: [UInt8] = []

        init() {
            context = ZSTD_createCCtx()
            ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, Zstd.level)
            // The frame's size is in the index; the frame need not say it or its checksum.
            ZSTD_CCtx_setParameter(context, ZSTD_c_contentSizeFlag, 0)
            ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 0)
        }

        deinit { ZSTD_freeCCtx(context) }

        /// `bytes` as one frame.
        func frame(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
            let bound = ZSTD_compressBound(bytes.count)
            if out.count < bound { out = [UInt8](repeating: 0, count: bound) }
            let n = out.withUnsafeMutableBytes { o in
                ZSTD_compress2(context, o.baseAddress, bound, bytes.baseAddress, bytes.count)
            }
            precondition(ZSTD_isError(n) == 0, "zstd could not compress \(bytes.count) bytes into \(bound)")
            return Array(out[0..<n])
        }
    }

    /// One decompression context, reused (not shared between threads).
    final class Decompressor {
        private let context: OpaquePointer

        init() {
            context = ZSTD_createDCtx()
            ZSTD_DCtx_setParameter(context, ZSTD_d_windowLogMax, Zstd.windowLogMax)
        }

        deinit { ZSTD_freeDCtx(context) }

        /// Decompresses the frames of `source` into `into`, which they must fill exactly: true
        /// when they do. Frames that would give more bytes stop at the buffer's end (what bounds a
        /// bomb: the bytes the index says), as do frames that are not zstd's.
        func decompress(_ source: UnsafeRawBufferPointer, into: UnsafeMutableRawBufferPointer) -> Bool {
            guard !source.isEmpty, let base = into.baseAddress else { return into.isEmpty && source.isEmpty }
            let n = ZSTD_decompressDCtx(context, base, into.count, source.baseAddress, source.count)
            return ZSTD_isError(n) == 0 && n == into.count
        }
    }
}

/// A piece stored compressed, as an index is built (`ContentScan.index`): its bytes gather (a
/// piece is at most 3 MiB) with where each chunk ends; at the piece's end, the form `known` says
/// it is stored in, or its chunks compressed (a frame each) and stored so (`ContentIndex.Stored`)
/// when that saves 1/16 of it or more, else nil (stored as it is). `frames` makes the stored bytes
/// again when the piece is sent: the same frames, checked against the index.
struct PieceCompression {
    private let known: [SHA256Digest: ContentIndex.Stored?]
    private let compressor = Zstd.Compressor()
    private let hasher = SHA256Hasher()
    private var bytes: [UInt8] = []
    private var chunkEnds: [Int] = []

    init(known: [SHA256Digest: ContentIndex.Stored?]) { self.known = known }

    mutating func take(_ more: UnsafeBufferPointer<UInt8>) { bytes += more }

    mutating func endChunk() { chunkEnds.append(bytes.count) }

    mutating func endPiece(_ sha256: SHA256Digest) -> ContentIndex.Stored? {
        defer {
            bytes.removeAll(keepingCapacity: true)
            chunkEnds = []
        }
        if let form = known[sha256] { return form }
        var frames: [Int] = []
        var start = 0
        bytes.withUnsafeBytes { all in
            for end in chunkEnds {
                let frame = compressor.frame(UnsafeRawBufferPointer(rebasing: all[start..<end]))
                frame.withUnsafeBytes { hasher.update($0.baseAddress!, count: $0.count) }
                frames.append(frame.count)
                start = end
            }
        }
        let digest = hasher.finalize()
        return frames.reduce(0, +) <= bytes.count - bytes.count / 16 ? ContentIndex.Stored(sha256: digest, lengths: frames) : nil
    }

    /// The stored bytes of `piece` whose `bytes` are given: a frame a chunk, which must be the
    /// frames the index says (nil: they are not; this libzstd compresses otherwise).
    static func frames(of piece: ContentIndex.Piece, bytes: UnsafeRawBufferPointer,
                       using compressor: Zstd.Compressor) -> [UInt8]? {
        guard let stored = piece.stored, bytes.count == piece.length else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(stored.size)
        var at = 0
        for (chunk, length) in zip(piece.chunks, stored.lengths) {
            let frame = compressor.frame(UnsafeRawBufferPointer(rebasing: bytes[at..<(at + chunk.length)]))
            guard frame.count == length else { return nil }
            out += frame
            at += chunk.length
        }
        return SHA256Hasher.digest(of: out) == stored.sha256 ? out : nil
    }
}

import Glibc
import FerryCore

/// The bytes of the piece a delta is gathering, held in memory until they match the piece's
/// SHA-256 from the signed index (a piece is at most 256 chunks of 12 KiB): only then do they go
/// to the partial file, where the download hashes them for the whole-file check.
final class PieceMemory {
    static let capacity = ContentIndex.pieceMaximumChunks * ContentChunker.maximum
    let bytes = UnsafeMutableRawPointer.allocate(byteCount: PieceMemory.capacity, alignment: 16)
    /// How much of the piece is gathered.
    private(set) var filled = 0
    private let hasher = SHA256Hasher()

    deinit { bytes.deallocate() }

    /// Where the next bytes go.
    var end: UnsafeMutableRawPointer { bytes + filled }

    /// Copies `count` bytes in after those gathered.
    func take(_ from: UnsafeRawPointer, count: Int) {
        end.copyMemory(from: from, byteCount: count)
    }

    /// `count` more bytes were put at `end` (copied or read there).
    func grew(by count: Int) { filled += count }

    /// Whether what was gathered is the piece `sha256` names.
    func matches(_ sha256: SHA256Digest) -> Bool {
        hasher.update(bytes, count: filled)
        return hasher.finalize() == sha256
    }

    /// The piece is done with (written, or to be fetched again).
    func clear() { filled = 0 }

    /// Up to `count` bytes of `fd` at `offset` (fewer where it ends or cannot be read).
    static func read(_ fd: Int32, at offset: Int64, count: Int64) -> [UInt8] {
        guard count > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: Int(count))
        var got = 0
        out.withUnsafeMutableBytes { raw in
            while got < raw.count {
                let n = pread(fd, raw.baseAddress! + got, raw.count - got, off_t(offset) + off_t(got))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                got += n
            }
        }
        return Array(out.prefix(got))
    }
}

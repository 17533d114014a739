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

}

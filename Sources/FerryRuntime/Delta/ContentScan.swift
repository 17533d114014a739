import Glibc
import FerryCore

/// One read of a file for delta: its chunks (`ContentChunker`, each with the first 3 bytes of
/// its SHA-256) and, for a publisher, its pieces, their details and whole SHA-256 in the same pass
/// (`ContentIndex.Builder`, `PieceDetail.Hasher`).
enum ContentScan {
    static let bufferSize = 1 << 20

    /// What a publisher records of a file: its SHA-256, size and index (nil when empty).
    struct Indexed {
        let sha256: SHA256Digest
        let size: Int64
        let index: (reference: ContentIndex.Reference, objects: [(sha256: SHA256Digest, bytes: [UInt8])])?
    }

    /// Reads `fd` from its start to its end once. `what` names the file in errors. `compress`
    /// (`remote-layout = objects`): a piece it names keeps the form it is stored in; any other that
    /// compression makes 1/16 smaller or more is stored so, without a detail (a frame is fetched
    /// whole).
    static func index(_ fd: Int32, what: String,
                      compress: [SHA256Digest: ContentIndex.Stored?]? = nil) throws(FerryError) -> Indexed {
        let whole = SHA256Hasher()
        let piece = SHA256Hasher()
        var detail = PieceDetail.Hasher()
        var packing = compress.map { PieceCompression(known: $0) }
        var builder = ContentIndex.Builder()
        func endPiece() {
            let details = detail.finish()
            let sha = piece.finalize()
            let stored = packing?.endPiece(sha)
            builder.endPiece(sha256: sha, detail: stored == nil ? details : nil, stored: stored)
        }
        let size = try chunks(fd, what: what, each: { bytes in
            whole.update(bytes.baseAddress!, count: bytes.count)
            piece.update(bytes.baseAddress!, count: bytes.count)
            detail.update(bytes)
            packing?.take(bytes)
        }, chunk: { chunk, _ in
            packing?.endChunk()
            if builder.add(chunk) { endPiece() }
        })
        if builder.pieceOpen { endPiece() }
        let built = builder.finish { SHA256Hasher().digest(of: $0) }
        return Indexed(sha256: whole.finalize(), size: size, index: built)
    }

    /// The chunks of a local file a delta may take bytes from, as `DeltaPlan` wants them.
    static func localChunks(_ fd: Int32, file: Int, what: String) throws(FerryError) -> [DeltaPlan.LocalChunk] {
        var out: [DeltaPlan.LocalChunk] = []
        _ = try chunks(fd, what: what, each: { _ in }, chunk: { chunk, offset in
            out.append(DeltaPlan.LocalChunk(chunk, at: DeltaPlan.Location(file: file, offset: offset)))
        })
        return out
    }

    /// Reads `fd` from 0 to its end, handing every span read to `each` (in order) and every chunk
    /// with its offset to `chunk` (after the bytes it ends in went to `each`). Returns the length read.
    private static func chunks(_ fd: Int32, what: String, each: (UnsafeBufferPointer<UInt8>) -> Void,
                               chunk: (ContentIndex.Chunk, Int64) -> Void) throws(FerryError) -> Int64 {
        let buffer = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: bufferSize)
        defer { buffer.deallocate() }
        let hasher = SHA256Hasher()
        var chunker = ContentChunker()
        var offset: Int64 = 0
        var chunkStart: Int64 = 0
        while true {
            let n = pread(fd, buffer.baseAddress, bufferSize, off_t(offset))
            if n < 0 {
                if errno == EINTR { continue }
                throw FerryError(.localIO, "cannot read \(what): \(FileSystem.errorText())", cause: .local(errno: errno))
            }
            if n == 0 { break }
            let bytes = UnsafeBufferPointer(rebasing: buffer[0..<n])
            var start = 0
            while start < n {
                let end = chunker.cut(bytes, from: start) ?? n
                let span = UnsafeBufferPointer(rebasing: bytes[start..<end])
                hasher.update(span.baseAddress!, count: span.count)
                each(span)
                if end < n || chunker.length == 0 {
                    let length = Int(offset + Int64(end) - chunkStart)
                    chunk(ContentIndex.Chunk(length: length, digest: hasher.finalize()), chunkStart)
                    chunkStart = offset + Int64(end)
                }
                start = end
            }
            offset += Int64(n)
        }
        if offset > chunkStart {
            chunk(ContentIndex.Chunk(length: Int(offset - chunkStart), digest: hasher.finalize()), chunkStart)
        }
        return offset
    }
}

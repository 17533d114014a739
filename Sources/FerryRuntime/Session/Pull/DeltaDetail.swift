import Glibc
import FerryCore

/// A delta's plan made finer with the details of the pieces it fetches part of (`PieceDetail`,
/// `DeltaPlan.refine`): the detail objects come like the index's (through the session's cache,
/// which does not keep them), and the old bytes where a changed run stood are read from the
/// plan's local files. A detail that cannot be had costs only the bytes it would have saved.
extension DeltaPreparation {
    func refined(_ plan: DeltaPlan, pieces: [ContentIndex.Piece], sources: [Source],
                 of path: RelativePath) -> DeltaPlan {
        let wanted = plan.detailsWanted(pieces, files: sources.count)
        guard !wanted.isEmpty else { return plan }
        let files = sources.map { try? $0.root.open($0.path, for: "to reuse its bytes") }
        defer { for fd in files { if let fd { close(fd) } } }
        var plan = plan
        for batch in stride(from: 0, to: wanted.count, by: ManifestObjects.group).map({
            wanted[$0..<min($0 + ManifestObjects.group, wanted.count)]
        }) {
            var names: [SHA256Digest] = []
            for i in batch where !names.contains(pieces[i].detail!) { names.append(pieces[i].detail!) }
            guard let loaded = try? objects.load(names, source: session.manifestURL,
                                                 maximumSize: ContentIndex.maximumObjectSize, index: true) else {
                continue
            }
            let details = Dictionary(zip(names, loaded), uniquingKeysWith: { a, _ in a })
            for i in batch {
                guard let bytes = details[pieces[i].detail!],
                      let hashes = PieceDetail.hashes(bytes, pieceLength: pieces[i].length) else { continue }
                plan.refine(i, hashes: hashes, files: files.count) { at, count in
                    guard at.file < files.count, let fd = files[at.file] else { return nil }
                    return DeltaDetailRead.bytes(fd, at: at.offset, count: count)
                }
            }
        }
        return plan
    }
}

enum DeltaDetailRead {
    /// `count` bytes of `fd` at `offset` (nil: fewer could be read).
    static func bytes(_ fd: Int32, at offset: Int64, count: Int) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = out.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return nil }
            done += n
        }
        return out
    }
}

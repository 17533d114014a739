import Glibc
import FerryCore

/// A delta's plan made finer with the details of the pieces it fetches part of (`PieceDetail`,
/// `DeltaPlan.refine`): the detail objects come like the index's (`IndexLoader`: many wanted come
/// in the index's detail bundles), and the old bytes where a
/// changed run stood are read from the plan's local files. A detail that cannot be had costs only
/// the bytes it would have saved.
extension DeltaPreparation {
    func refined(_ plan: DeltaPlan, pieces: [ContentIndex.Piece], sources: [Source],
                 loader: IndexLoader) -> DeltaPlan {
        let wanted = plan.detailsWanted(pieces, files: sources.count)
        guard !wanted.isEmpty else { return plan }
        loader.expectDetails(Set(wanted.map { pieces[$0].detail! }))
        let files = sources.map { try? $0.root.open($0.path, for: "to reuse its bytes") }
        defer { for fd in files { if let fd { close(fd) } } }
        var plan = plan
        let reader = DeltaDetailRead(files)
        for batch in stride(from: 0, to: wanted.count, by: ManifestObjects.group).map({
            wanted[$0..<min($0 + ManifestObjects.group, wanted.count)]
        }) {
            var names: [SHA256Digest] = []
            for i in batch where !names.contains(pieces[i].detail!) { names.append(pieces[i].detail!) }
            guard let loaded = try? loader.details(names) else { continue }
            let details = Dictionary(zip(names, loaded), uniquingKeysWith: { a, _ in a })
            for i in batch {
                guard let bytes = details[pieces[i].detail!],
                      let hashes = PieceDetail.hashes(bytes, pieceLength: pieces[i].length) else { continue }
                plan.refine(i, hashes: hashes, files: files.count) { reader.bytes(at: $0, count: $1) }
            }
        }
        return plan
    }
}

/// The old bytes a refinement asks for, a block at a time and mostly near each other: read a
/// window of 256 KiB at a time per file, so that each block costs a copy, not a system call.
final class DeltaDetailRead {
    static let window = 256 << 10
    private let files: [Int32?]
    private var held: [(offset: Int64, bytes: [UInt8])?]

    init(_ files: [Int32?]) {
        self.files = files
        held = Array(repeating: nil, count: files.count)
    }

    /// `count` bytes of file `at.file` at `at.offset` (nil: fewer could be read).
    func bytes(at: DeltaPlan.Location, count: Int) -> [UInt8]? {
        guard at.file >= 0, at.file < files.count, let fd = files[at.file], at.offset >= 0, count >= 0 else { return nil }
        if let w = held[at.file], at.offset >= w.offset, at.offset + Int64(count) <= w.offset + Int64(w.bytes.count) {
            let from = Int(at.offset - w.offset)
            return Array(w.bytes[from..<(from + count)])
        }
        let start = at.offset / 4096 * 4096
        let wanted = max(DeltaDetailRead.window, Int(at.offset - start) + count)
        let bytes = DeltaDetailRead.read(fd, at: start, upTo: wanted)
        held[at.file] = (start, bytes)
        let from = Int(at.offset - start)
        guard bytes.count >= from + count else { return nil }
        return Array(bytes[from..<(from + count)])
    }

    /// Up to `count` bytes of `fd` at `offset`: fewer at its end or on an error.
    static func read(_ fd: Int32, at offset: Int64, upTo count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = out.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            done += n
        }
        out.removeLast(count - done)
        return out
    }
}

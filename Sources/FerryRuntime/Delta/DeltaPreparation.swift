import Glibc
import FerryCore

/// Before a pull's transfers: the content index of each large file to download (its objects
/// from the session's cache, the rest fetched like the tree's), and, where an older version of
/// the file is at its path, the plan that takes its bytes from there (`DeltaPlan`). A file whose
/// index cannot be read, or whose old version holds too little of the new one, is downloaded
/// whole as before. Runs on the session's thread.
struct DeltaPreparation {
    let session: SessionConfig
    let root: LocalRoot
    let objects: ManifestObjects
    let remote: Remote
    let emit: (Event.Body) -> Void

    struct Prepared {
        /// The plans, by path, of the files a delta brings.
        var plans: [RelativePath: DeltaPlan] = [:]
        /// The index objects the session's cache keeps: those of every indexed file the manifest
        /// lists that the cache holds, and those read now.
        var keep: [SHA256Digest] = []
        /// The files whose index was read.
        var resolved = Set<RelativePath>()
        /// Files in sync whose index is not all in the cache.
        var uncached: [ManifestEntry] = []
    }

    func prepare(_ downloads: [Plan.Download], manifest: Manifest) -> Prepared {
        var prepared = Prepared()
        let downloading = Set(downloads.map(\.entry.path))
        for entry in manifest.entries where !downloading.contains(entry.path) {
            guard let index = entry.index else { continue }
            let names = ContentIndex.names(index) { objects.bytes(of: $0) }
            prepared.keep += names
            // A file in sync whose index the cache lacks (it came before its index did, or the
            // cache was lost): read after the transfers, for the file's next update.
            if !names.allSatisfy({ objects.has($0) }) { prepared.uncached.append(entry) }
        }
        guard session.delta, remote.base.backend.abilities.contains(.rangedReads) else { return prepared }
        var refused: [(RelativePath, FerryError)] = []
        var whole = 0
        for download in downloads {
            let entry = download.entry
            // Only a file with an older version at its path can take a delta now; the index of
            // any other is read after the transfers (`cacheIndexes`), for its next update.
            guard let index = entry.index, let size = entry.size, size > 0, let held = root.stat(entry.path), held.kind == .file, held.size > 0 else { continue }
            let pieces: [ContentIndex.Piece]
            do throws(FerryError) {
                let read = try resolve(index, of: entry.path, size: size)
                pieces = read.pieces
                prepared.keep += read.objects
            } catch {
                refused.append((entry.path, error))
                continue
            }
            prepared.resolved.insert(entry.path)
            guard let local = localChunks(of: entry.path) else { continue }
            let plan = DeltaPlan(pieces: pieces, local: local)
            if plan.worthIt { prepared.plans[entry.path] = plan } else { whole += 1 }
        }
        if !prepared.plans.isEmpty || whole > 0 {
            let plans = prepared.plans.values
            emit(.deltaPlanned(files: plans.count, reused: plans.reduce(0) { $0 + $1.reused }, fetch: plans.reduce(0) { $0 + $1.fetched }, whole: whole))
        }
        // One warning for the cause, however many files share it.
        if let (path, error) = refused.first {
            let others = refused.count > 1 ? " (and \(Plural.count(refused.count - 1, "more file")))" : ""
            emit(.warning(message: "\(Printable.name(path.string))\(others): no delta, the whole file is fetched: \(error.message)"))
        }
        return prepared
    }

    /// After the transfers: the indexes of the files fetched whole, and of files in sync whose
    /// index the cache lacks, read into the cache so their next update fetches only the index
    /// objects that changed. Returns the objects read; one that cannot be read now is read when
    /// the file next changes.
    func cacheIndexes(_ downloads: [Plan.Download], skipping prepared: Prepared) -> [SHA256Digest] {
        guard session.delta, remote.base.backend.abilities.contains(.rangedReads) else { return [] }
        var read: [SHA256Digest] = []
        for entry in downloads.map(\.entry) + prepared.uncached where !prepared.resolved.contains(entry.path) {
            // Only for a file the mirror now holds whole: what it reads is bounded by what was fetched.
            guard let index = entry.index, let size = entry.size, size > 0, let held = root.stat(entry.path), held.kind == .file, held.size == size else { continue }
            if let objects = try? resolve(index, of: entry.path, size: size).objects { read += objects }
        }
        return read
    }

    private func resolve(_ index: ContentIndex.Reference, of path: RelativePath, size: Int64) throws(FerryError) -> (pieces: [ContentIndex.Piece], objects: [SHA256Digest]) {
        try ContentIndex.resolve(index, size: size, source: Printable.name(path.string)) { (batch) throws(FerryError) in
            try objects.load(batch, source: session.manifestURL, maximumSize: ContentIndex.maximumObjectSize)
        }
    }

    /// The chunks of the version of `path` the mirror holds, when it holds a regular file there.
    private func localChunks(of path: RelativePath) -> [DeltaPlan.LocalChunk]? {
        guard let held = root.stat(path), held.kind == .file, held.size > 0 else { return nil }
        guard let fd = try? root.open(path, for: "to reuse its bytes") else { return nil }
        defer { close(fd) }
        return try? ContentScan.localChunks(fd, file: 0, what: root.display(path))
    }
}

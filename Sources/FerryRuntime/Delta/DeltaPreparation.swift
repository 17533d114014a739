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
    /// The SHA-256 the hash cache vouches for of a local file (nil: none).
    let localHash: (RelativePath) -> SHA256Digest?
    /// Where the session keeps which index describes which content (`IndexMap`).
    let mapPath: String

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
        let known = IndexMap.read(mapPath)
        var refused: [(RelativePath, FerryError)] = []
        var whole = 0
        var read = 0
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
            guard let (local, wasRead) = localChunks(of: entry.path, size: held.size, known: known) else { continue }
            if wasRead { read += 1 }
            let plan = DeltaPlan(pieces: pieces, local: local)
            if plan.worthIt { prepared.plans[entry.path] = plan } else { whole += 1 }
        }
        if !prepared.plans.isEmpty || whole > 0 {
            let plans = prepared.plans.values
            emit(.deltaPlanned(files: plans.count, reused: plans.reduce(0) { $0 + $1.reused }, fetch: plans.reduce(0) { $0 + $1.fetched }, whole: whole,
                               read: read))
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

    /// The chunks of the version of `path` the mirror holds: from the cached index of its content
    /// when the hash cache vouches for what it holds and an earlier manifest indexed that content
    /// (nothing is read), else read from the file (`ContentScan.localChunks`).
    private func localChunks(of path: RelativePath, size: Int64, known: [SHA256Digest: ContentIndex.Reference]) -> (chunks: [DeltaPlan.LocalChunk], read: Bool)? {
        if let held = localHash(path), let index = known[held] {
            let cached = try? ContentIndex.resolve(index, size: size, source: Printable.name(path.string)) { (batch) throws(FerryError) -> [[UInt8]] in
                try batch.map { (digest) throws(FerryError) -> [UInt8] in
                    guard let bytes = objects.bytes(of: digest) else { throw FerryError(.manifest, "not cached") }
                    return bytes
                }
            }
            if let pieces = cached?.pieces {
                var out: [DeltaPlan.LocalChunk] = []
                for piece in pieces {
                    var at = piece.offset
                    for chunk in piece.chunks {
                        out.append(DeltaPlan.LocalChunk(chunk, at: DeltaPlan.Location(file: 0, offset: at)))
                        at += Int64(chunk.length)
                    }
                }
                return (out, false)
            }
        }
        guard let fd = try? root.open(path, for: "to reuse its bytes") else { return nil }
        defer { close(fd) }
        return (try? ContentScan.localChunks(fd, file: 0, what: root.display(path))).map { ($0, true) }
    }
}

/// Which index describes which content, from the manifests a session took: the file
/// `<state>/manifests/<session>.manifest.index-map`, a line per content (`<sha256> <top> <level>`),
/// rewritten after each pull. A delta takes the chunks of the version a mirror holds from the
/// cached index of its content instead of reading the file. Not synced: a torn one is read as far
/// as it goes, and a wrong line costs only pieces that do not verify.
enum IndexMap {
    static func read(_ path: String) -> [SHA256Digest: ContentIndex.Reference] {
        guard let bytes = try? FileSystem.readFile(path, limit: 256 << 20) else { return [:] }
        var out: [SHA256Digest: ContentIndex.Reference] = [:]
        for line in bytes.split(separator: 0x0A) {
            let fields = line.split(separator: 0x20)
            guard fields.count == 3, let content = SHA256Digest(hex: String(decoding: fields[0], as: UTF8.self)),
                  let top = SHA256Digest(hex: String(decoding: fields[1], as: UTF8.self)),
                  let level = Int(String(decoding: fields[2], as: UTF8.self)), level >= 0, level <= ContentIndex.maximumLevel else { continue }
            out[content] = ContentIndex.Reference(sha256: top, level: level)
        }
        return out
    }

    /// The map of `entries` (none indexed: no file).
    static func write(_ path: String, _ entries: [ManifestEntry]) {
        var text: [UInt8] = []
        for e in entries {
            guard let index = e.index else { continue }
            text += Array("\(e.sha256.hex) \(index.sha256.hex) \(index.level)\n".utf8)
        }
        if text.isEmpty {
            unlink(path)
        } else {
            try? FileSystem.writeAtomically(path, bytes: text, mode: 0o600, synced: false)
        }
    }
}

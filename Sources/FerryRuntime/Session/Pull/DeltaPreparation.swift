import Glibc
import FerryCore

/// Before a pull's transfers: the content index of each large file to download (its objects
/// from the session's cache, the rest fetched like the tree's), and, where the mirror holds data
/// of it, the plan that takes its bytes from there (`DeltaPlan`). Where it looks (`sources`): the
/// older version at the file's path, the current generation's (`layout = generations`), a file
/// this run deletes that looks like a rename, and the same path under each `seed` directory. A
/// file whose index cannot be read, or of which the mirror holds too little, is downloaded whole
/// as before. A file stored as its pieces (`ContentIndex.Reference.storedAsPieces`, in a manifest
/// of the objects layout) is always assembled from them, whatever `delta` says: its plan takes what
/// the mirror holds where it may (nothing otherwise), and one whose index cannot be read cannot be
/// fetched. Runs on the session's thread.
struct DeltaPreparation {
    let session: SessionConfig
    let root: LocalRoot
    let objects: ManifestObjects
    let remote: Remote
    let emit: (Event.Body) -> Void
    /// Says a file fetched whole, its index not read (`DeltaFallback`), once per file and run.
    let fallback: (RelativePath, DeltaFallback, String) -> Void
    /// The SHA-256 the hash cache vouches for of a local file (nil: none).
    let localHash: (RelativePath) -> SHA256Digest?
    /// Where the session keeps which index describes which content (`IndexMap`).
    let mapPath: String
    /// A compressed piece's local bytes between two fetched runs are fetched too where the run
    /// that makes takes at most this many bytes of frames (`DeltaPlan.bridgingGaps`).
    static let bridgedRun = 60 << 10
    /// The current generation, when the root is a generation being built.
    var current: LocalRoot? = nil
    /// Files this run deletes (a rename's old name is among them).
    var deletions: [RelativePath] = []

    /// A delta's plan and the files it takes bytes from.
    typealias Planned = (plan: DeltaPlan, sources: [Source])

    /// A local file a plan takes bytes from (`DeltaPlan.Location.file` is its place in the list).
    struct Source {
        let root: LocalRoot
        let path: RelativePath
    }

    struct Prepared {
        /// The plans, by path, of the files a delta brings, with the files each takes bytes from.
        var plans: [RelativePath: Planned] = [:]
        /// The index objects the session's cache keeps: those of every indexed file the manifest
        /// lists that the cache holds, and those read now.
        var keep: [SHA256Digest] = []
        /// The files whose index was read.
        var resolved = Set<RelativePath>()
        /// Files in sync whose index is not all in the cache.
        var uncached: [ManifestEntry] = []
        /// Files stored as their pieces whose index cannot be read: they cannot be fetched.
        var unfetchable: [RelativePath: FerryError] = [:]
        /// Where a piece's object is, by its SHA-256, when the manifest stores files as pieces.
        var piecesAt: ((SHA256Digest) -> RelativePath)?

        /// Whether the file `entry` is stored as its pieces.
        func storedAsPieces(_ entry: ManifestEntry) -> Bool { piecesAt != nil && entry.index?.storedAsPieces == true }
    }

    func prepare(_ downloads: [Plan.Download], manifest: Manifest) -> Prepared {
        var prepared = Prepared()
        let downloading = Set(downloads.map(\.entry.path))
        // What the cache holds, listed once (not a lookup per object of every index).
        lazy var cached = Set(objects.names())
        for entry in manifest.entries where !downloading.contains(entry.path) {
            guard let index = entry.index else { continue }
            let names = ContentIndex.names(index) { objects.bytes(of: $0) }
            prepared.keep += names
            // A file in sync whose index the cache lacks (it came before its index did, or the
            // cache was lost): read after the transfers, for the file's next update.
            if !names.allSatisfy({ cached.contains($0.hex) }) { prepared.uncached.append(entry) }
        }
        if manifest.layout == .objects, let beside = session.manifestPath {
            prepared.piecesAt = { RemoteLayout.contentPath($0, beside: beside) }
        }
        let reuses = session.delta && remote.base.backend.abilities.contains(.rangedReads)
        guard reuses || downloads.contains(where: { prepared.storedAsPieces($0.entry) }) else { return prepared }
        let known = IndexMap.read(mapPath)
        var whole = 0
        var read = 0
        let seeds = openSeeds()
        // A deleted file is still where the mirror (or, while a generation is built, the current
        // one) holds it: deletions come after the transfers.
        let holder = current ?? root
        let deleted = deletions.compactMap { path in
            holder.stat(path).flatMap { $0.kind == .file && $0.size > 0 ? (path, $0.size) : nil }
        }
        for download in downloads {
            let entry = download.entry
            // Only a file the mirror holds data of can take a delta now; the index of any other
            // is read after the transfers (`cacheIndexes`), for its next update.
            guard let index = entry.index, let size = entry.size, size > 0 else { continue }
            let asPieces = prepared.storedAsPieces(entry)
            let sources = reuses ? candidates(for: entry.path, size: size, deleted: deleted, seeds: seeds) : []
            guard !sources.isEmpty || asPieces else { continue }
            let pieces: [ContentIndex.Piece]
            let loader: IndexLoader
            do throws(FerryError) {
                let read = try resolve(index, of: entry.path, size: size)
                (pieces, loader) = (read.pieces, read.loader)
                prepared.keep += read.objects
            } catch {
                if asPieces { prepared.unfetchable[entry.path] = error } else {
                    fallback(entry.path, DeltaFallback.reading(error), error.message)
                }
                continue
            }
            prepared.resolved.insert(entry.path)
            var local: [DeltaPlan.LocalChunk] = []
            var usable: [Source] = []
            for source in sources {
                guard let (chunks, wasRead) = localChunks(of: source, file: usable.count, known: known) else {
                    continue
                }
                if wasRead { read += 1 }
                usable.append(source)
                local += chunks
            }
            // A repeat of an earlier piece's bytes comes from the partial once that piece is in it.
            // What changed in place of held bytes, made finer with the changed pieces' details.
            let plan = refined(DeltaPlan(pieces: pieces, local: local, selfFile: usable.count), pieces: pieces,
                               sources: usable, loader: loader).bridgingGaps(upTo: DeltaPreparation.bridgedRun)
            prepared.keep += loader.detailNames
            // Stored as pieces: every byte saved is worth it (a whole fetch costs a request a piece too).
            if plan.worthIt || (asPieces && plan.reused > 0) {
                prepared.plans[entry.path] = (plan, usable)
            } else {
                if asPieces { prepared.plans[entry.path] = (plan, []) }
                if !sources.isEmpty { whole += 1 }
            }
        }
        let plans = prepared.plans.values.map(\.plan).filter { $0.reused > 0 }
        if !plans.isEmpty || whole > 0 {
            emit(.deltaPlanned(files: plans.count, reused: plans.reduce(0) { $0 + $1.reused },
                               fetch: plans.reduce(0) { $0 + $1.fetched }, whole: whole,
                               read: read))
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
            guard let index = entry.index, let size = entry.size, size > 0, let held = root.stat(entry.path),
                  held.kind == .file, held.size == size else {
                continue
            }
            if let objects = try? resolve(index, of: entry.path, size: size).objects { read += objects }
        }
        return read
    }

    /// The index's pieces and objects, through a loader (`IndexLoader`) that later gives the
    /// pieces' details the same way.
    private func resolve(_ index: ContentIndex.Reference, of path: RelativePath,
                         size: Int64) throws(FerryError) -> (pieces: [ContentIndex.Piece], objects: [SHA256Digest],
                                                             loader: IndexLoader) {
        let loader = IndexLoader(objects: objects, top: index.sha256, source: session.manifestURL,
                                 what: "the content index of \(Printable.name(path.string))")
        let read = try ContentIndex.resolve(index, size: size, source: Printable.name(path.string)) {
            (batch) throws(FerryError) in try loader.load(batch)
        }
        return (read.pieces, read.objects, loader)
    }

    /// The seed directories that can be opened (one that cannot is said once a run).
    private func openSeeds() -> [LocalRoot] {
        session.seeds.compactMap { seed in
            do throws(FerryError) {
                return try LocalRoot(path: seed, create: false, role: .remote)
            } catch {
                var why = error.message
                if case let .local(code)? = error.cause { why = FileSystem.errorText(code) }
                emit(.warning(message: "seed \(Printable.name(seed)) cannot be read, so a delta takes nothing from it: "
                                       + "\(why)"))
                return nil
            }
        }
    }

    /// Where the mirror may hold bytes of the file at `path` of `size` bytes, in the order a plan
    /// prefers them: its older version at the path, the current generation's, up to two files
    /// this run deletes that look like its old name (the same name elsewhere, else about its size:
    /// within 1/8), and the same path under each seed.
    private func candidates(for path: RelativePath, size: Int64, deleted: [(RelativePath, Int64)],
                            seeds: [LocalRoot]) -> [Source] {
        var out: [Source] = []
        func regular(_ root: LocalRoot, _ p: RelativePath) -> Bool {
            root.stat(p).map { $0.kind == .file && $0.size > 0 } ?? false
        }
        if regular(root, path) { out.append(Source(root: root, path: path)) }
        if let current, regular(current, path) { out.append(Source(root: current, path: path)) }
        let renamed = deleted.filter { $0.0.name == path.name }
            + deleted.filter { $0.0.name != path.name && abs($0.1 - size) <= size / 8 }
        for (old, _) in renamed.prefix(2) { out.append(Source(root: current ?? root, path: old)) }
        for seed in seeds where regular(seed, path) { out.append(Source(root: seed, path: path)) }
        return out
    }

    /// The chunks of a source, as file `file` of a plan: from the cached index of its content when
    /// it is the mirror's own file, the hash cache vouches for what it holds and an earlier manifest
    /// indexed that content (nothing is read), else read from the file (`ContentScan.localChunks`).
    private func localChunks(of source: Source, file: Int,
                             known: [SHA256Digest: ContentIndex.Reference]) -> (chunks: [DeltaPlan.LocalChunk],
                                                                                read: Bool)? {
        if source.root === root, let held = localHash(source.path), let index = known[held],
           let size = root.stat(source.path)?.size {
            let what = Printable.name(source.path.string)
            let cached = try? ContentIndex.resolve(index, size: size, source: what) { (batch) throws(FerryError) in
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
                        out.append(DeltaPlan.LocalChunk(chunk, at: DeltaPlan.Location(file: file, offset: at)))
                        at += Int64(chunk.length)
                    }
                }
                return (out, false)
            }
        }
        guard let fd = try? source.root.open(source.path, for: "to reuse its bytes") else { return nil }
        defer { close(fd) }
        return (try? ContentScan.localChunks(fd, file: file, what: source.root.display(source.path))).map { ($0, true) }
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
                  let level = Int(String(decoding: fields[2], as: UTF8.self)), level >= 0,
                  level <= ContentIndex.maximumLevel else {
                      continue
                  }
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

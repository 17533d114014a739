import Glibc
import FerryCore

/// A manifest read from the remote, or from the cache when the remote says it is unchanged.
struct FetchedManifest {
    let manifest: Manifest
    /// The remote sent new bytes (not a 304).
    let changed: Bool
    /// Where the new bytes wait to become the cached manifest once accepted (nil: unchanged, or a dry run).
    let staged: String?
    let etag: String?
    let lastModified: String?
    /// The session's metadata objects, and the hashes of those of this manifest's tree (format 2).
    let objects: ManifestObjects
    let names: [SHA256Digest]
    /// What came over the network for it: the manifest (not for a 304) and the objects not cached.
    let metadataBytes: Int64
    /// Where the manifest's bytes came from, when a redirect took the request elsewhere.
    var redirectedTo: String? = nil
}

/// The local side of a run: the root when it exists (it is created only once the run will write
/// it, and never by a dry run), and what a scan of it sees. One owner, handed from stage to stage:
/// the plan changes the tree in place as it hashes files the cache cannot vouch for (a tree of a
/// million files is not copied for that).
final class LocalSide {
    let root: LocalRoot?
    var tree: LocalTree
    let warnings: [String]

    init(root: LocalRoot?, tree: LocalTree, warnings: [String]) {
        self.root = root
        self.tree = tree
        self.warnings = warnings
    }
}

/// What observe hands on: the manifest, and the local side scanned meanwhile.
struct Observed {
    let record: SessionRecord?
    let mirror: Mirror
    let fetched: FetchedManifest
    let local: LocalSide
}

/// Observe: the manifest is fetched and parsed while the local root is scanned, with the hash
/// cache joined to the scan, on a second thread: on a large tree each takes seconds, and neither
/// needs the other. The store is that thread's until it is joined. The run ends here, in sync,
/// when the agent knows nothing under the root changed since a run left it in sync, the manifest
/// last taken would still be trusted (`TrustStage.stillTrusted`) and the remote answers 304: no
/// scan, no parse, no plan (cheap at rest).
struct ObserveStage {
    let pull: PullRun

    func run(_ recovered: Recovered) throws(FerryError) -> Onward<Observed> {
        let (record, mirror) = (recovered.record, recovered.mirror)
        var early: ManifestFetch?
        if pull.options.localUnchanged && TrustStage(pull: pull).stillTrusted(record) && mirror.settled {
            let answer = try requestManifest(record: record)
            if case .unchanged = answer { return .end(try unchanged(record)) }
            early = answer
        }
        let expected = try pull.store.hashCacheCount(session: pull.session.name)
        // Without a thread to be had, the scan runs after the fetch, on this one.
        let (current, renewing) = (mirror.current, pull.state.renewalPending)
        let reading = try? BackgroundWork(name: "ferry-scan") { () throws(FerryError) -> LocalSide in
            try pull.scan(current, expecting: expected, renewing: renewing)
        }
        let fetched: FetchedManifest
        do throws(FerryError) {
            // Held in one place, which `read` empties: a large body is freed once it is staged.
            var answer: ManifestFetch
            if let taken = early {
                answer = taken
                early = nil
            } else {
                answer = try requestManifest(record: record)
            }
            fetched = try read(&answer, record: record)
        } catch {
            _ = try? reading?.wait()
            throw error
        }
        let local: LocalSide
        if let reading {
            local = try reading.wait()
        } else {
            local = try pull.scan(current, expecting: expected, renewing: renewing)
        }
        return .go(Observed(record: record, mirror: mirror, fetched: fetched, local: local))
    }

    /// The run ends at a 304: said as the manifest the state recorded. A state from before
    /// migration 8 has no count of its files yet: the hash cache stands for it.
    private func unchanged(_ record: SessionRecord?) throws(FerryError) -> SyncResult {
        var files = record?.manifestFiles ?? 0
        if record?.manifestFiles == nil { files = try pull.store.hashCacheCount(session: pull.session.name) }
        pull.emit(.manifestFetched(url: pull.session.manifestURL, version: record?.manifestVersion, files: files,
                                   unchanged: true,
                                  signedBy: TrustStage.named(record?.manifestSigners ?? [])))
        return pull.result()
    }

    /// Asks the remote for the manifest, conditionally when the cache holds the last one; when the
    /// remote cannot be had, a mirror's copy may stand for it (`PullSources.rootFromMirror`). Where
    /// one may, the origin is asked with a mirror's patience, and a timeout goes to the mirrors at
    /// once (`PullSources.rootOrigin`).
    func requestManifest(record: SessionRecord?) throws(FerryError) -> ManifestFetch {
        let manifests = pull.manifests
        let patient = pull.sources.rootOrigin()
        do {
            let cached = record?.manifestURL == pull.session.manifestURL && FileSystem.exists(manifests.path)
            return try manifests.fetch(from: patient ?? pull.remote, record: record, cached: cached, options: pull.options,
                                       hedged: patient != nil, emit: { pull.emit($0) }).required()
        } catch {
            if patient != nil, error.cause?.isTimeout == true { pull.sources.originTimedOut() }
            guard let copy = pull.sources.rootFromMirror(after: error) else { throw error }
            return copy
        }
    }

    /// The manifest an answer stands for, parsed (the cached one for a 304), with the tree of a
    /// format-2 root read: its objects from the cache, or fetched (from the mirrors first). A root
    /// this session would refuse (unsigned, rolled back, expired) is refused before any object is
    /// fetched (`TrustStage.precheck`); the trust stage checks the whole manifest against the
    /// mirror before anything is recorded.
    func read(_ answer: inout ManifestFetch, record: SessionRecord?) throws(FerryError) -> FetchedManifest {
        // A mirror's root standing for the origin's is named as the mirror's.
        let url = pull.sources.rootSource
        let objects = pull.state.objects(remote: pull.remote, mirrors: pull.sources)
        func resolved(_ root: Manifest) throws(FerryError) -> (Manifest, [SHA256Digest]) {
            guard root.tree != nil else { return (root, []) }
            try TrustStage(pull: pull).precheck(root, record: record)
            let read = try objects.resolve(root, source: url, maximumSize: pull.session.maxManifestSize)
            pull.sayWhatObjectsFound(objects)
            if objects.damaged > 0 {
                pull.emit(.warning(message: "\(Plural.count(objects.damaged, "cached metadata object")) of session "
                                            + "'\(pull.session.name)' did not match "
                                            + "\(objects.damaged == 1 ? "its" : "their") hash (damaged on this "
                                            + "machine's disk): fetched again"))
            }
            return read
        }
        switch answer {
        case .unchanged:
            // Mapped, not read: the parser gives the file's pages back as it passes them.
            let (root, digest) = try Manifests.parse(MappedFile(pull.manifests.path, limit: Int(pull.session.maxManifestSize)),
                                                     source: url, hashing: objects.bad != nil)
            if let digest { objects.bad?.reading(root: digest) }
            let (manifest, names) = try resolved(root)
            return FetchedManifest(manifest: manifest, changed: false, staged: nil, etag: nil, lastModified: nil,
                                   objects: objects, names: names,
                           metadataBytes: objects.fetchedBytes)
        case let .missing(error):
            throw error
        case .fetched:
            break
        }
        // Staged on disk, then parsed from there as the cached manifest is: the body in memory
        // is freed first (`staging`).
        let body = try staging(&answer, objects: objects)
        do {
            let root: Manifest
            if let staged = body.staged {
                root = try Manifests.parse(MappedFile(staged, limit: Int(pull.session.maxManifestSize)), source: url, hashing: false).0
            } else {
                root = try Manifests.parse(body.unstaged, source: url)
            }
            let (manifest, names) = try resolved(root)
            return FetchedManifest(manifest: manifest, changed: true, staged: body.staged, etag: body.etag,
                                   lastModified: body.lastModified, objects: objects,
                                   names: names, metadataBytes: Int64(body.count) + objects.fetchedBytes,
                                   redirectedTo: body.redirectedTo)
        } catch {
            if let staged = body.staged { unlink(staged) }
            throw error
        }
    }
}

extension ObserveStage {
    /// A fetched manifest's body once staged: where (nil: a state kept in memory, which holds
    /// the body in `unstaged` instead), its size, and the answer's validators.
    private struct StagedBody {
        var staged: String?
        var count = 0
        var unstaged: [UInt8] = []
        var etag, lastModified, redirectedTo: String?
    }

    /// Takes a fetched body out of `answer` and stages it, its hash told to the bad objects. A
    /// staged body is freed when this returns.
    private func staging(_ answer: inout ManifestFetch, objects: ManifestObjects) throws(FerryError) -> StagedBody {
        guard case let .fetched(bytes, etag, lastModified, redirectedTo) = answer else { return StagedBody() }
        answer = .unchanged
        let staged = try pull.state.stage(bytes)
        objects.bad?.reading(root: SHA256Hasher.digest(of: bytes))
        return StagedBody(staged: staged, count: bytes.count, unstaged: staged == nil ? bytes : [], etag: etag,
                          lastModified: lastModified, redirectedTo: redirectedTo)
    }
}

extension PullRun {
    /// The scan of the directory readers see now (`Mirror.current`; nil: there is none yet).
    func scan(_ current: String?, expecting: Int, renewing: Bool) throws(FerryError) -> LocalSide {
        guard let current, FileSystem.exists(current) else { return LocalSide(root: nil, tree: .empty, warnings: []) }
        return try scan(LocalRoot(path: current, create: false), expecting: expecting, renewing: renewing)
    }

    /// The root's tree with the hash cache joined to it. `renewing` (`expectCtimeMoves`): a row
    /// that differs from its file in ctime alone still vouches for it, and is written again.
    func scan(_ root: LocalRoot, expecting: Int, renewing: Bool = false) throws(FerryError) -> LocalSide {
        var scan = try root.scan(expecting: expecting)
        try store.loadHashes(session: session.name, into: &scan.tree, ignoringCtime: renewing)
        if renewing {
            var rows: [(RelativePath, CachedHash)] = []
            for item in scan.tree.items {
                guard let sha = item.verified else { continue }
                rows.append((item.path, CachedHash(item.entry, sha256: sha, wanted: scan.tree.wantedMtime(item.path))))
                if rows.count >= 8192 {
                    try state.saveHashes(rows)
                    rows.removeAll(keepingCapacity: true)
                }
            }
            try state.saveHashes(rows)
            state.ctimesRenewed()
        }
        return LocalSide(root: root, tree: scan.tree, warnings: scan.warnings)
    }
}

import Glibc
import FerryCore

/// One push cycle for one session (issue 9): the manifest ferry last published on the remote →
/// local scan (with the hash cache) → `PushPlanner` → tasks recorded → removals of remote paths
/// that changed type → uploads to temporary names under the remote's `.ferry/upload/` through the
/// engine → each moved to its final name → deletions → the new manifest, last, under a temporary
/// name and moved into place. A reader of the remote never sees a partial file under a final
/// name, and the manifest it reads never lists a file that is not on the remote as listed; until
/// the manifest moves, a pull may see new bytes under an old manifest's hash, which its hash check
/// refuses (exit 1, never a mixed tree with exit 0).
///
/// Plain WebDAV cannot continue a PUT: an interrupted upload starts again from zero.
final class PushSync: SessionWork {
    /// Stands for the hash of a file hashed while it is sent; never published (the upload's digest replaces it).
    static let unknownHash = SHA256Digest(hex: String(repeating: "0", count: 64))!

    func cycle(store: StateStore, result: inout SyncResult) throws(FerryError) {
        guard !session.manifest.contains("://") else {
            throw .usage("session '\(session.name)' pushes, so its manifest must live on its remote: manifest = \(session.manifest) is another URL",
                         hint: "set manifest to a name relative to the remote, like manifest.json")
        }
        let remote = try Remotes.open(session)
        guard let writer = remote as? RemoteWriting else {
            throw .usage("the remote of session '\(session.name)' cannot be written to")
        }
        let manifestPath = RelativePath(trusted: session.manifest)
        // The agent knows nothing under the root changed since a run published it all: when the
        // remote still holds what was published (304), there is nothing to parse, scan or send.
        guard let (published, changedOnRemote, lastVersion) = try remoteState(remote, store: store, unchangedEnds: options.localUnchanged) else {
            let record = try store.session(session.name)
            emit(.manifestFetched(url: session.manifestURL, version: record?.manifestVersion, files: record?.manifestFiles ?? 0, unchanged: true))
            return
        }
        let remoteUnchanged = changedOnRemote.isEmpty && lastVersion != nil
        emit(.manifestFetched(url: session.manifestURL, version: published?.version, files: published?.entries.count ?? 0,
                              unchanged: remoteUnchanged))
        if options.localUnchanged && remoteUnchanged { return }

        // Someone else changed the remote since ferry published there: never overwritten blindly.
        var keepingRemote = Set<RelativePath>()
        if !changedOnRemote.isEmpty {
            let since = "changed on the remote since ferry published version \(lastVersion.map(String.init) ?? "?")"
            switch session.conflict {
            case .fail:
                for path in changedOnRemote { emit(.fileFailed(path: path, error: "conflict: \(since)")) }
                result.failed = changedOnRemote.count
                result.exitCode = .someFilesFailed
                result.message = "\(changedOnRemote.count) paths \(since); nothing was uploaded or deleted, on either side"
                result.hint = "set conflict = local-wins in [session \(session.name)] to replace them with the local tree, or remote-wins to keep the remote's versions"
                return
            case .localWins:
                emit(.warning(message: "\(changedOnRemote.count) paths \(since); conflict = local-wins: the local tree replaces them"))
            case .remoteWins:
                emit(.warning(message: "\(changedOnRemote.count) paths \(since); conflict = remote-wins: they keep the remote's versions"))
                keepingRemote = Set(changedOnRemote)
            }
        }

        let (root, local, stats, hashed, unhashed) = try scanLocal(store: store, published: published)
        result.hashed = hashed
        try PushPlanner.refuseEmptying(localFiles: local.count,
                                       remoteFiles: (published?.entries ?? []).filter { !keepingRemote.contains($0.path) }.count,
                                       session: session)
        var plan = PushPlanner.plan(local: local, remote: published, rules: DeletionRules(delete: session.delete, cap: session.maxDelete),
                                    keepingRemote: keepingRemote)
        emit(.planned(downloads: plan.uploads.count, bytes: plan.uploadBytes, metadataFixes: plan.metadataChanges,
                      deletions: plan.deletions.count + plan.replacements.count, upToDate: plan.upToDate, hashed: hashed, extrasKept: plan.extrasKept))
        if options.dryRun {
            for u in plan.uploads { emit(.planItem(action: "upload", path: u.entry.path, reason: u.reason.rawValue, size: u.entry.size)) }
            for p in plan.replacements { emit(.planItem(action: "replace", path: p, reason: "the local tree has another type here", size: nil)) }
            for p in plan.deletions { emit(.planItem(action: "delete", path: p, reason: nil, size: nil)) }
            for p in plan.refusedDeletions?.paths ?? [] { emit(.planItem(action: "refused-delete", path: p, reason: nil, size: nil)) }
            return
        }
        // A run that died mid-upload (kill -9, power) left its tasks running and maybe a partial
        // temporary upload: the task row names it, and it goes before anything is sent again.
        writer.removeLeftovers(running: try store.taskIDs(session: session.name, state: .running).sorted(),
                               all: try store.taskIDs(session: session.name))
        // Tasks of files the local tree no longer has go (their leftovers were just removed).
        let present = Set(local.map(\.path))
        _ = try store.pruneTasks(session: session.name, keeping: { present.contains($0) })
        guard !plan.isEmpty else { return }

        // Paths that changed type go first: what the remote has there is in the way of the uploads.
        // Not while the session's conditions hold its uploads back: the remote keeps them meanwhile.
        let gate = DiscretionGate(session: session, agent: agent)
        let heldNow = !plan.uploads.isEmpty && gate?.waitsFor() != nil
        for path in plan.replacements where !heldNow {
            try writer.remove(path)
            result.deleted += 1
            emit(.fileDeleted(path: path))
        }
        for file in Set(plan.replacements.flatMap(\.ancestors)).intersection(local.map(\.path)).sorted(by: >) where !heldNow {
            try writer.remove(file)  // the now empty directory where a local file goes
        }

        let notBefore = (options.notBefore ?? session.earliestBegin)?.time(from: Timestamp.now())
        let tasks = try store.queueUploads(session: session.name, entries: plan.uploads.map(\.entry), notBefore: notBefore)
        let transfers = PushTransfers(session: session, store: store, writer: writer, root: root, observer: observer,
                                      emit: { [unowned self] in self.emit($0) }, stop: options.stop,
                                      gate: gate)
        transfers.run(plan.uploads.compactMap { u in
            tasks[u.entry.path].flatMap { task in
                stats[u.entry.path].map { PushTransfers.Item(entry: u.entry, task: task, stat: $0, hashKnown: !unhashed.contains(u.entry.path)) }
            }
        }, localRoot: session.local, engine: engine)
        result.downloaded = transfers.uploaded
        result.bytes = transfers.bytesSent
        result.failed = transfers.failed
        result.waiting = transfers.waiting
        result.suspended = transfers.suspended
        result.delayed = transfers.delayed
        result.nextBegin = transfers.nextBegin
        result.held = transfers.onHold
        result.heldFor = transfers.heldFor
        if let error = transfers.storeError { throw error }
        let stopped = transfers.stopped ?? options.stop.reason

        // A file that failed for good fails alone: the manifest goes on listing what the remote
        // holds at its path, and the rest is published. Work left for later holds the manifest back.
        let notDone = transfers.waiting + transfers.suspended + transfers.delayed + transfers.onHold
        var unfinished = notDone
        let ended = transfers.uploaded + transfers.vanished.count + transfers.failed
        if stopped == nil && unfinished == 0 && ended < plan.uploads.count {
            unfinished = plan.uploads.count - ended
        }
        if let refused = plan.refusedDeletions {
            result.message = "refused to delete \(refused.count) files on the remote: more than max-delete = \(session.maxDelete) allows (\(refused.limit) of the \(refused.managed) files published); nothing was deleted"
            result.hint = "if this is intended, raise max-delete for session '\(session.name)'"
            emit(.warning(message: result.message!))
        }
        guard stopped == nil && unfinished == 0 else {
            let outcome = RunOutcome(failed: transfers.failed, deletionsRefused: plan.refusedDeletions != nil, waiting: transfers.waiting,
                                     stopped: stopped != nil || notDone < unfinished, suspended: transfers.suspended, delayed: transfers.delayed,
                                     held: transfers.onHold)
            result.exitCode = outcome.exitCode
            var reasons: [String] = []
            if transfers.failed > 0 { reasons.append("\(transfers.failed) of \(plan.uploads.count) uploads failed") }
            if transfers.waiting > 0 { reasons.append("the remote could not be reached for \(transfers.waiting) uploads") }
            reasons += result.leftForLater("uploads")
            if let stopped { reasons.append("\(stopped); the next run uploads what is left") }
            reasons.append("the manifest was not published, so readers of the remote still see version \(published?.version.map(String.init) ?? "none")")
            result.message = reasons.joined(separator: "; ")
            return
        }

        var deletionsFailed = 0
        for path in plan.deletions {
            do {
                try writer.remove(path)
                result.deleted += 1
                emit(.fileDeleted(path: path))
            } catch {
                deletionsFailed += 1
                emit(.fileFailed(path: path, error: error.message))
            }
        }
        result.failed += deletionsFailed
        // The manifest last: it never names a file that is not on the remote as it says (a file that
        // changed while it was sent went again, and the manifest lists what went).
        // A file gone before it was sent: the remote still holds its last published version (or nothing).
        // A file that failed: the same (its final name was never touched).
        let before = Dictionary((published?.entries ?? []).map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        let asPublished = transfers.vanished.union(transfers.failedPaths)
        plan.manifest = plan.manifest.compactMap { asPublished.contains($0.path) ? before[$0.path] : transfers.rehashed[$0.path] ?? $0 }
        if !transfers.vanished.isEmpty {
            _ = try store.pruneTasks(session: session.name, keeping: { !transfers.vanished.contains($0) })
        }
        let text = ManifestWriter.render(version: plan.version, generated: Timestamp.now(), entries: plan.manifest)
        // Another writer that published while this run uploaded is not overwritten: the files this
        // run placed are on the remote, but readers go on seeing the other writer's manifest (a file
        // of both, if any, fails their hash check, never a mixed tree with exit 0), and the next run
        // compares and applies `conflict`.
        if try changedSinceRead(remote) {
            result.failed += 1
            result.exitCode = .someFilesFailed
            result.message = "the remote's manifest changed while this run uploaded (another writer?): version \(plan.version) was not published"
            result.hint = "the next run compares the remote with what this session last published and applies conflict = \(session.conflict.rawValue)"
            emit(.warning(message: result.message!))
            return
        }
        try writer.publish(Array(text.utf8), at: manifestPath)
        try remember(published: Array(text.utf8), version: plan.version, files: plan.manifest.count, remote: remote, store: store)
        emit(.manifestBuilt(output: session.manifestURL, version: plan.version, files: plan.manifest.count,
                            bytes: plan.manifest.reduce(0) { $0 + ($1.size ?? 0) }))
        let outcome = RunOutcome(failed: result.failed, deletionsRefused: plan.refusedDeletions != nil)
        result.exitCode = outcome.exitCode
        var reasons: [String] = []
        if transfers.failed > 0 {
            reasons.append("\(transfers.failed) of \(plan.uploads.count) uploads failed; version \(plan.version) lists what the remote holds at their paths, and the next run sends them again")
        }
        if deletionsFailed > 0 { reasons.append("\(deletionsFailed) deletions on the remote failed") }
        if let refusal = result.message { reasons.append(refusal) }
        result.message = reasons.isEmpty ? nil : reasons.joined(separator: "; ")
    }


    /// The remote's manifest as this run read it: its validators and bytes (nil: there was none).
    private struct Seen {
        var etag: String?
        var lastModified: String?
        var bytes: [UInt8]?
    }
    private var seen: Seen?

    /// Whether the remote's manifest is another than this run read at its start: another writer
    /// published meanwhile. Asked with the validators read then, just before this run publishes.
    private func changedSinceRead(_ remote: Remote) throws(FerryError) -> Bool {
        guard let seen else { return false }
        do {
            let known = seen.bytes != nil
            switch try remote.fetchManifest(url: session.manifestURL, etag: known ? seen.etag : nil, lastModified: known ? seen.lastModified : nil,
                                            maximumSize: session.maxManifestSize) {
            case .unchanged: return false
            case let .fetched(bytes, _, _): return bytes != seen.bytes
            }
        } catch {
            switch error.cause {
            case .http(404)?, .local(ENOENT)?: return seen.bytes != nil
            default: throw error
            }
        }
    }

    /// The remote's manifest now; the paths it says differently from the manifest this session
    /// last published there (someone else changed them); and that version. With nothing
    /// published by this session yet (or its state lost), the remote's manifest is taken as it is.
    /// nil when the remote says its manifest is still the one published and `unchangedEnds` (the
    /// agent's poll of an untouched tree): then nothing is parsed.
    private func remoteState(_ remote: Remote, store: StateStore, unchangedEnds: Bool, useCache: Bool = true) throws(FerryError)
        -> (Manifest?, [RelativePath], Int64?)? {
        let url = session.manifestURL
        let record = try store.session(session.name)
        let cached = useCache && record?.manifestURL == url ? try? FileSystem.readFile(cachePath, limit: Int(session.maxManifestSize)) : nil
        /// The manifest last published, parsed only when it is needed.
        func published() -> Manifest? { cached.flatMap { try? Manifest.parse($0, source: cachePath) } }
        var now: Manifest?
        var last: Manifest?
        do throws(FerryError) {
            switch try remote.fetchManifest(of: session, etag: cached == nil ? nil : record?.manifestETag,
                                            lastModified: cached == nil ? nil : record?.manifestLastModified, options: options,
                                            emit: { [unowned self] in self.emit($0) }) {
            case .unchanged:
                if unchangedEnds { return nil }
                // A cache that no longer parses cannot stand for the remote: ask again without it.
                guard let manifest = published() else { return try remoteState(remote, store: store, unchangedEnds: false, useCache: false) }
                seen = Seen(etag: record?.manifestETag, lastModified: record?.manifestLastModified, bytes: cached)
                return (manifest, [], manifest.version)
            case let .fetched(bytes, etag, lastModified):
                seen = Seen(etag: etag, lastModified: lastModified, bytes: bytes)
                last = published()
                if let last, bytes == cached {
                    // What was published, asked for in full (its validators did not hold then):
                    // the validators of this answer serve the next poll.
                    if etag != record?.manifestETag || lastModified != record?.manifestLastModified {
                        try store.saveManifestValidators(session: session.name, etag: etag, lastModified: lastModified)
                    }
                    return (last, [], last.version)
                }
                do throws(FerryError) {
                    now = try Manifest.parse(bytes, source: url)
                } catch {
                    // Someone else wrote something there that is not a manifest: it says nothing
                    // of what the remote holds.
                    guard session.conflict == .localWins else {
                        throw FerryError(.manifest, "the remote's manifest does not parse (\(error.message)): something other than this session wrote it; nothing was uploaded or deleted",
                                         hint: "fix or remove \(url) on the remote, or set conflict = local-wins in [session \(session.name)] to publish the whole local tree over it")
                    }
                    emit(.warning(message: "the remote's manifest does not parse (\(error.message)); conflict = local-wins: the whole local tree is published over it"))
                    // As a remote that lists nothing, every path changed (the manifest too): the
                    // version goes on from the last one published.
                    let empty = Manifest(format: .ferry, version: last?.version, generated: nil, expires: nil, entries: [])
                    return (empty, (last?.entries.map(\.path) ?? []) + [RelativePath(trusted: session.manifest)], last?.version)
                }
            }
        } catch {
            let missing: Bool
            switch error.cause {
            case .http(404)?, .local(ENOENT)?: missing = true
            default: missing = false
            }
            guard missing else { throw error }
            seen = Seen(etag: nil, lastModified: nil, bytes: nil)
            last = published()
        }
        guard let last else { return (now, [], nil) }
        return (now, ConflictPolicy.changedOnRemote(published: last, now: now), last.version)
    }

    /// Keeps what was just published, and the remote's validators for it, so the next run can
    /// tell whether someone else changed the remote meanwhile.
    private func remember(published bytes: [UInt8], version: Int64, files: Int, remote: Remote, store: StateStore) throws(FerryError) {
        try FileSystem.makePrivateDirectory(agent.state + "/manifests")
        try FileSystem.writeAtomically(cachePath, bytes: bytes, mode: 0o600)
        var etag: String?, lastModified: String?
        if case let .fetched(now, e, l)? = try? remote.fetchManifest(url: session.manifestURL, etag: nil, lastModified: nil,
                                                                     maximumSize: session.maxManifestSize) {
            if now == bytes {
                (etag, lastModified) = (e, l)
            } else {
                emit(.warning(message: "the remote's manifest changed again right after this run published version \(version): another writer? The next run compares"))
            }
        }
        try store.saveManifest(session: session.name, url: session.manifestURL, etag: etag, lastModified: lastModified, version: version, files: files)
    }

    /// The files of the local tree as manifest entries, and the stat each was taken at. A file the
    /// hash cache does not vouch for is hashed now when the remote lists its path at its size (the
    /// hash decides whether it changed); otherwise it is an upload whatever its hash, and its hash
    /// is taken as it is sent (`unhashed`), so its bytes are read once. Names a manifest cannot
    /// carry are skipped with a warning.
    private func scanLocal(store: StateStore, published: Manifest?) throws(FerryError)
        -> (LocalRoot, [ManifestEntry], [RelativePath: LocalEntry], Int, Set<RelativePath>) {
        let root = try LocalRoot(path: session.local, create: false)
        var scan = try root.scan(expecting: try store.hashCacheCount(session: session.name))
        try store.loadHashes(session: session.name, into: &scan.tree)
        for warning in scan.warnings { emit(.warning(message: warning)) }
        var entries: [ManifestEntry] = []
        var stats: [RelativePath: LocalEntry] = [:]
        var fresh: [(RelativePath, CachedHash)] = []
        var unhashed = Set<RelativePath>()
        let (files, skipped) = scan.tree.publishable()
        for warning in skipped { emit(.warning(message: warning)) }
        for item in files {
            var entry = item.entry
            var sha = item.verified
            if sha == nil, published.flatMap({ m in m.index(of: item.path).map { m.entries[$0].size } }).map({ $0 == nil || $0 == entry.size }) != true {
                sha = PushSync.unknownHash
                unhashed.insert(item.path)
            }
            if sha == nil {
                let hashed = try root.hash(item.path)
                fresh.append((item.path, hashed))
                sha = hashed.sha256
                entry = LocalEntry(kind: .file, size: hashed.size, mtime: hashed.mtime, ctime: hashed.ctime, inode: hashed.inode, mode: entry.mode)
            }
            entries.append(ManifestEntry(path: item.path, size: entry.size, sha256: sha!, mtime: entry.mtime, mode: entry.mode & 0o777))
            stats[item.path] = entry
        }
        try store.saveHashes(session: session.name, fresh)
        return (root, entries, stats, fresh.count, unhashed)
    }
}

/// The upload stage of a push run, the session's `TransferSource`: hands out the uploads, moves
/// each one that verified into place, and retries what is worth retrying.
final class PushTransfers: SessionTransfers<PushTransfers.Item> {
    struct Item: SessionTransferItem {
        var entry: ManifestEntry
        var task: TransferTask
        var stat: LocalEntry
        var notBefore = 0.0
        var triesThisRun = 0
        /// false: hashed while sent (see `Upload.hashKnown`).
        var hashKnown = true
        /// Bytes the upload sent, once it verified (then it waits for its move).
        var sent: Int64 = 0
        /// The upload that verified, until it is in place (its files stay open until then).
        var upload: Upload?
        var moveTries = 0
        var path: RelativePath { entry.path }
    }

    private let writer: RemoteWriting
    private let root: LocalRoot
    private var localRoot = ""
    private var running: [Int64: Item] = [:]
    /// Uploads that verified and wait to be moved into place (before any new upload starts).
    private var toMove: [Item] = []
    /// Moved into place; recorded done in groups (one transaction per 256, or per 0.2 s).
    private var moved: [Item] = []
    private var lastFlush = MonotonicClock.seconds()
    private(set) var uploaded = 0
    private(set) var bytesSent: Int64 = 0
    /// Entries whose hash is known only now: hashed while sent, or hashed again after a change.
    private(set) var rehashed: [RelativePath: ManifestEntry] = [:]
    /// Files gone from the local tree between the scan and their upload: not sent. The manifest
    /// goes on listing what the remote holds at their paths; the next run sees them gone.
    private(set) var vanished: Set<RelativePath> = []

    init(session: SessionConfig, store: StateStore, writer: RemoteWriting, root: LocalRoot, observer: EventSink,
         emit: @escaping (Event.Body) -> Void, stop: StopCondition, gate: DiscretionGate?) {
        self.writer = writer
        self.root = root
        super.init(session: session, store: store, observer: observer, emit: emit, stop: stop, gate: gate)
    }

    func run(_ items: [Item], localRoot: String, engine: TransferEngine) {
        self.localRoot = localRoot
        let runnable = runnable(items)
        ready = ArraySlice(runnable)
        guard !runnable.isEmpty else { return }
        progress.filesTotal = runnable.count
        progress.bytesTotal = runnable.reduce(0) { $0 + $1.stat.size }
        run(engine: engine)
        // Stopped (a deadline, a signal) between an upload and its move: the next run sends it again.
        for item in toMove { discard(item) }
        toMove.removeAll()
    }

    /// Also the verified uploads still waiting for their move: their temporary uploads go.
    override func leftWhenHeld() -> [Item] {
        for item in toMove { discard(item) }
        return super.leftWhenHeld() + toMove
    }

    /// An upload that will not be placed: its files are closed and its temporary upload goes.
    private func discard(_ item: Item) {
        item.upload?.close()
        writer.removeUpload(task: item.task.id)
    }

    override func next() -> TransferEngine.Next {
        while let item = toMove.popLast() {
            if let move = startMove(item) { return .start(move) }
        }
        while let item = nextDue() {
            if let upload = start(item) { return .start(upload) }
        }
        return backingOff.isEmpty ? .none : .notYet
    }

    /// The move of a verified upload to its final name: an engine transfer over WebDAV, done at
    /// once for a local directory.
    private func startMove(_ item: Item) -> RemoteMove? {
        guard let upload = item.upload else { return nil }
        do throws(FerryError) {
            if let move = try writer.place(upload) {
                running[item.task.id] = item
                return move
            }
            placed(item)
        } catch {
            discard(item)
            fail(item, error.message)
        }
        return nil
    }

    private func placed(_ item: Item) {
        var item = item
        item.upload?.close()
        item.upload = nil
        moved.append(item)
        if moved.count >= 256 || MonotonicClock.seconds() - lastFlush >= 0.2 { flush() }
    }

    /// Records the moved files done, and their hashes, in one transaction.
    override func flush() {
        lastFlush = MonotonicClock.seconds()
        guard !moved.isEmpty else { return }
        do throws(FerryError) {
            try store.markDone(session: session.name, moved.map { ($0.task, CachedHash($0.stat, sha256: $0.entry.sha256, wanted: nil)) })
            for item in moved {
                uploaded += 1
                bytesSent += item.sent
                completedBytes += item.sent
                progress.filesDone += 1
                emit(.fileDone(path: item.entry.path, size: item.sent, fetched: item.sent))
            }
        } catch {
            storeError = error
        }
        moved.removeAll(keepingCapacity: true)
    }

    private func start(_ item: Item) -> Upload? {
        var item = item
        item.triesThisRun += 1
        item.task.attempts += 1
        do throws(FerryError) {
            let file = try root.open(item.entry.path, for: "to upload it")
            if let changed = Upload.change(fd: file, from: item.stat) {
                close(file)
                throw FerryError(.localIO, "\(Printable.name(localRoot + "/" + item.entry.path.string)) changed after it was hashed (\(changed)); it is hashed and sent again",
                                 cause: .sourceChanged)
            }
            let upload: Upload
            do { upload = try writer.upload(task: item.task, entry: item.entry, stat: item.stat, hashKnown: item.hashKnown, file: file) } catch {
                close(file)
                throw error
            }
            running[item.task.id] = item
            if item.triesThisRun == 1 { emit(.fileStarted(path: item.entry.path, size: item.entry.size, reason: .missing)) }
            try store.markRunning([(item.task.id, item.task.attempts)])
            return upload
        } catch {
            if PushTransfers.isGone(error.cause) {
                // Gone since the scan (deleted, renamed, a symlink or a FIFO now, or under a file):
                // a change like any other, which the session takes up.
                afterFailure(item, TransferFailure(message: error.message, keepPartial: false, cause: .sourceChanged))
            } else {
                fail(item, error.message)
            }
            return nil
        }
    }

    /// Whether a failure to open a local file says it is no longer a file at that path.
    static func isGone(_ cause: FailureCause?) -> Bool {
        switch cause {
        case .sourceChanged?: return true
        case let .local(code)?: return code == ENOENT || code == ENOTDIR || code == ELOOP || code == EINVAL
        default: return false
        }
    }

    /// The item for a file that changed after it was hashed: hashed again as it is now, so the
    /// next try sends (and the manifest lists) its current content. nil when it is gone.
    private func rehash(_ item: Item) -> Item? {
        guard let now = root.stat(item.entry.path), now.kind == .file, let hashed = try? root.hash(item.entry.path) else { return nil }
        var item = item
        item.stat = LocalEntry(kind: .file, size: hashed.size, mtime: hashed.mtime, ctime: hashed.ctime, inode: hashed.inode, mode: now.mode)
        item.entry = ManifestEntry(path: item.entry.path, size: hashed.size, sha256: hashed.sha256, mtime: hashed.mtime, mode: now.mode & 0o777)
        item.hashKnown = true
        rehashed[item.entry.path] = item.entry
        return item
    }

    override func finished(_ batch: [(Transfer, TransferOutcome)]) {
        for (transfer, outcome) in batch {
            if let move = transfer as? RemoteMove {
                guard let item = running.removeValue(forKey: move.task.id) else { continue }
                moveEnded(item, outcome)
                continue
            }
            let upload = transfer as! Upload
            guard var item = running.removeValue(forKey: upload.task.id) else {
                upload.close()
                continue
            }
            switch outcome {
            case .succeeded:
                item.upload = upload
                item.sent = upload.sent
                if !item.hashKnown, let digest = upload.digest {
                    // Hashed as it went: the manifest and the hash cache get what was sent.
                    item.entry = ManifestEntry(path: item.entry.path, size: item.entry.size, sha256: digest, mtime: item.entry.mtime, mode: item.entry.mode)
                    item.hashKnown = true
                    rehashed[item.entry.path] = item.entry
                }
                toMove.append(item)
            case let .failed(failure):
                upload.close()
                writer.removeUpload(task: item.task.id)
                afterFailure(item, failure)
            case .interrupted:
                upload.close()
                interrupted(item, cancelled: upload.cancelRequested)
            }
        }
    }

    /// A move refused for want of its directories (`HTTPRemote.mayLackCollections`) makes them and tries once more.
    private func moveEnded(_ item: Item, _ outcome: TransferOutcome) {
        switch outcome {
        case .succeeded:
            placed(item)
        case let .failed(failure):
            var item = item
            item.moveTries += 1
            if case .http(let status) = failure.cause, HTTPRemote.mayLackCollections(item.entry.path, status: status), item.moveTries == 1 {
                do throws(FerryError) {
                    try writer.makeCollections(for: item.entry.path)
                    toMove.append(item)
                    return
                } catch {
                    discard(item)
                    fail(item, error.message)
                    return
                }
            }
            discard(item)
            fail(item, failure.message)
        case .interrupted:
            item.upload?.close()
            interrupted(item)
        }
    }

    /// An upload or move stopped before it ended: its temporary upload goes (a WebDAV PUT starts
    /// again from zero).
    private func interrupted(_ item: Item, cancelled: Bool = false) {
        writer.removeUpload(task: item.task.id)
        interrupted(item, offset: 0, cancelled: cancelled)
    }

    override func tick(_ running: [Transfer]) {
        // `ferry cancel`: an upload it suspends stops (its temporary upload goes) and waits for
        // `ferry resume`; the manifest is not published.
        applySuspensions(running: running.compactMap { ($0 as? Upload)?.task.id }, recordFinished: flush) { ids in
            for case let upload as Upload in running where ids.contains(upload.task.id) { upload.cancelRequested = true }
        }
        let uploads = running.compactMap { $0 as? Upload }
        progress.active = uploads.map { SyncProgress.Active(path: $0.entry.path, done: $0.sent, size: $0.stat.size) }
        progress.bytesDone = completedBytes + uploads.reduce(0) { $0 + $1.sent }
        observer.progress(progress)
        if !moved.isEmpty && MonotonicClock.seconds() - lastFlush >= 0.2 { flush() }
    }

    /// A file that changed after it was hashed is hashed again before its next try; one that is
    /// gone (deleted, or no longer a regular file) leaves this run (`vanished`).
    private func afterFailure(_ item: Item, _ failure: TransferFailure) {
        var item = item
        if failure.cause == .sourceChanged {
            guard let fresh = rehash(item) else {
                vanished.insert(item.entry.path)
                emit(.warning(message: "\(Printable.name(item.entry.path.string)) is gone from the local tree since the scan; not sent, and the remote keeps what it had there until the next run"))
                return
            }
            item = fresh
        }
        retryOrFail(item, failure)
    }

    private func fail(_ item: Item, _ message: String) {
        fail(item.entry.path, item.task, message)
    }

}

import Glibc
import FerryCore

/// The upload stage of a push run, the session's `TransferSource`: hands out each file's placement
/// (the steps its remote plans: an upload, then a move, or parts and a completion), checks that the
/// remote holds what was sent at its final name (size, and the SHA-256 where the remote gives one),
/// and retries what is worth retrying. A file the remote does not hold as sent fails alone.
final class PushTransfers: SessionTransfers<PushTransfers.Item> {
    struct Item: SessionTransferItem {
        var entry: ManifestEntry
        var task: TransferTask
        var stat: LocalEntry
        var notBefore = 0.0
        var triesThisRun = 0
        /// false: hashed while sent (see `Upload.expected`).
        var hashKnown = true
        /// Bytes the placement sent, once it placed the file.
        var sent: Int64 = 0
        /// The steps placing the file, while they run (its local file stays open until they end).
        var placement: Placement?
        var checkTries = 0
        /// The check reads the file back (the store computes no checksum, or `verify-uploads = read-back`).
        var readBack = false
        /// What the remote said of the file once it was placed.
        var placed: PlacedFile?
        /// A file stored as its pieces (`PiecesPlacement`): the pieces to send.
        var pieces: [ContentIndex.Piece]?
        var path: RelativePath { entry.path }
    }

    private let writer: RemoteWriting
    private let root: LocalRoot
    /// Where a file's content goes under the remote (`RemoteLayout.location`).
    private let destination: (ManifestEntry) -> RelativePath
    private var localRoot = ""
    /// Items whose placement has a step running, by that step.
    private var running: [ObjectIdentifier: Item] = [:]
    /// The next steps of placements under way, started before any new file (their files are open).
    private var continuing: [(Transfer, Item)] = []
    /// Files whose first step the engine is starting: recorded running before it runs (`started`).
    private var starting: [(id: Int64, attempts: Int)] = []
    /// Placed, to be checked on the remote.
    private var toCheck: [Item] = []
    /// Set once the remote answered a check without a checksum of its own: later checks read back
    /// at once instead of asking first.
    private var computesNoChecksum = false
    /// How the files placed this run were verified.
    private(set) var verifications: [UploadVerification: Int] = [:]
    /// Files refused with 403 before any file was placed this run, not yet said: a refusal of one
    /// key fails that file alone (`failed`), but one that every write meets stops the run with one error.
    private var refused: [(Item, TransferFailure)] = []
    /// Checks running, by where they look (the file's destination).
    private var checking: [RelativePath: Item] = [:]
    /// Placed and checked; recorded done in groups (one transaction per 256, or per 0.2 s).
    private var moved: [Item] = []
    private var lastFlush: Double
    /// The content of the files placed and checked this run, by SHA-256.
    private(set) var placedContent = Set<SHA256Digest>()
    /// Entries whose hash is known only now: hashed while sent, or hashed again after a change.
    private(set) var rehashed: [RelativePath: ManifestEntry] = [:]
    /// Files gone from the local tree between the scan and their upload: not sent. The manifest
    /// goes on listing what the remote holds at their paths; the next run sees them gone.
    private(set) var vanished: Set<RelativePath> = []

    init(session: SessionConfig, store: StateStore, writer: RemoteWriting, root: LocalRoot, destination: @escaping (ManifestEntry) -> RelativePath,
         observer: EventSink, emit: @escaping (Event.Body) -> Void, stop: StopCondition, gate: DiscretionGate?) {
        self.writer = writer
        self.root = root
        self.destination = destination
        lastFlush = stop.clock.monotonic()
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
        failRefused()
        // Stopped (a deadline, a signal) between two steps of a placement: what a later run can
        // resume stays (S3's parts), the rest goes. One placed but not yet checked: the manifest
        // goes on listing what was there, and the next run checks and sends it again.
        for (_, item) in continuing { item.placement?.end(placed: false, keep: true) }
        continuing.removeAll()
        toCheck.removeAll()
    }

    /// Also the placements between two steps: they stop where they are.
    override func leftWhenHeld() -> [Item] {
        for (_, item) in continuing { item.placement?.end(placed: false, keep: true) }
        let left = continuing.map { $0.1 }
        continuing.removeAll()
        return super.leftWhenHeld() + left
    }

    override func next() -> TransferEngine.Next {
        if let (step, item) = continuing.popLast() {
            running[ObjectIdentifier(step)] = item
            return .start(step)
        }
        while let item = toCheck.popLast() {
            if let probe = startCheck(item) { return .start(probe) }
        }
        while let item = nextDue() {
            if let step = start(item) { return .start(step) }
        }
        return backingOff.isEmpty ? .none : .notYet
    }

    /// A step of the item's placement succeeded: the next one goes first in line, or the file is
    /// placed and is checked on the remote.
    private func stepDone(_ item: Item, _ step: Transfer) {
        var item = item
        guard let placement = item.placement else { return }
        do throws(FerryError) {
            if let next = try placement.next(after: step) {
                if step.cancelRequested {
                    // `ferry cancel` came as the step ended: the placement stops here.
                    counts.bytes += placement.sent
                    placement.end(placed: false, keep: true)
                    interrupted(item, offset: 0, cancelled: true)
                    return
                }
                continuing.append((next, item))
                return
            }
        } catch {
            counts.bytes += placement.sent
            placement.end(placed: false, keep: error.retryClass != .never)
            failed(item, TransferFailure(message: error.message, keepPartial: false, cause: error.cause ?? .http(status: 500)))
            return
        }
        placement.end(placed: true, keep: false)
        item.sent = placement.sent
        if !item.hashKnown, let digest = placement.digest {
            // Hashed as it went: the manifest and the hash cache get what was sent.
            item.entry = ManifestEntry(path: item.entry.path, size: item.entry.size, sha256: digest, mtime: item.entry.mtime, mode: item.entry.mode)
            item.hashKnown = true
            rehashed[item.entry.path] = item.entry
        }
        item.placement = nil
        switch (placement.check, session.verifyUploads) {
        case let (.vouched(state), mode) where mode != .readBack:
            checked(item, state)
        case (.inspect, .auto), (.inspect, .sizeOnly):
            item.readBack = computesNoChecksum && session.verifyUploads == .auto
            toCheck.append(item)
        default:
            item.readBack = true
            toCheck.append(item)
        }
    }

    /// The files started in the engine's last round, recorded running before their first byte
    /// goes (a run after a crash removes their temporary uploads), in one transaction. A store
    /// that fails stops the run.
    ///
    /// With them go the next files in line (`markAhead`), as they will be when they start: a
    /// round that starts only files already recorded costs no transaction (one per round was most
    /// of a small-file push's SQLite work). A run that ends before those start leaves them
    /// running, and the next run treats them as interrupted: it removes temporary uploads they
    /// never made, and sends them.
    override func started() {
        let due = starting.filter { marked[$0.id] != $0.attempts }
        starting.removeAll(keepingCapacity: true)
        guard !due.isEmpty else { return }
        var batch = due
        for item in ready.prefix(PushTransfers.markAhead) where marked[item.task.id] != item.task.attempts + 1 {
            batch.append((item.task.id, item.task.attempts + 1))
        }
        do throws(FerryError) {
            try store.markRunning(batch)
            for (id, attempts) in batch { marked[id] = attempts }
        } catch {
            storeError = error
        }
    }

    /// How many files in line are recorded running with those that start.
    static let markAhead = 64
    /// The attempt each task was recorded running for.
    private var marked: [Int64: Int] = [:]

    /// Asks the remote what it holds at the item's final name (a `HEAD` run by the engine, or at
    /// once), or reads it back.
    private func startCheck(_ item: Item) -> StateProbe? {
        let at = destination(item.entry)
        switch item.readBack ? writer.readBack(at, limit: item.entry.size ?? item.stat.size) : writer.inspect(at) {
        case let .probe(probe):
            checking[at] = item
            return probe
        case let .now(state):
            inspected(item, state)
            return nil
        case let .failed(error):
            fail(item, error.message)
            return nil
        }
    }

    /// What the remote answered of a placed file: with a checksum of its own (or read back), or
    /// holding other than what was sent, it is checked; otherwise it is read back, or with
    /// `verify-uploads = size-only` taken by its size.
    private func inspected(_ item: Item, _ state: RemoteFileState) {
        guard !item.readBack, state.sha256 == nil, state.mismatch(with: item.entry) == nil else {
            checked(item, state)
            return
        }
        computesNoChecksum = true
        if session.verifyUploads == .sizeOnly {
            var state = state
            state.verified = .sizeOnly
            checked(item, state)
            return
        }
        var item = item
        item.readBack = true
        toCheck.append(item)
    }

    /// A file placed and checked: done if the remote holds what was sent, else it fails alone (the
    /// manifest goes on listing what was there before, and the next run sends it again). Either way
    /// what the remote says of it now is recorded, so the next run does not take the file for
    /// someone else's change — except a content object (`remote-layout = objects`): a record says
    /// the object holds the content it is named by (`PushObjects.storedContent`), so one that
    /// failed its check is forgotten instead, and the next run sends it again rather than taking
    /// it as stored for ever on a HEAD that matches the damaged bytes.
    private func checked(_ item: Item, _ state: RemoteFileState) {
        var item = item
        // A file stored as its pieces is at no name of its own: its pieces were recorded as placed.
        item.placed = item.pieces == nil ? state.placed(as: item.entry) : nil
        if let why = state.mismatch(with: item.entry) {
            let at = destination(item.entry)
            do throws(FerryError) {
                if RemoteLayout.contentHash(at: at, beside: session.manifest) != nil {
                    try store.forgetPlaced(session: session.name, [at])
                } else if let placed = item.placed {
                    try store.recordPlaced(session: session.name, [(at, placed)])
                }
            } catch {
                storeError = error
            }
            fail(item, why + "; the remote does not hold what was sent, so the manifest does not list it")
            return
        }
        verifications[state.verified ?? .sizeOnly, default: 0] += 1
        moved.append(item)
        failRefused()
        if moved.count >= 256 || stop.clock.monotonic() - lastFlush >= 0.2 { flush() }
    }

    /// Records the moved files done, and their hashes, in one transaction.
    override func flush() {
        lastFlush = stop.clock.monotonic()
        guard !moved.isEmpty else { return }
        do throws(FerryError) {
            try store.markDone(session: session.name, moved.map { ($0.task, CachedHash($0.stat, sha256: $0.entry.sha256, wanted: nil)) },
                               placed: moved.compactMap { item in item.placed.map { (destination(item.entry), $0) } })
            for item in moved {
                counts.transferred += 1
                placedContent.insert(item.entry.sha256)
                counts.bytes += item.sent
                completedBytes += item.stat.size
                progress.filesDone += 1
                // `fetched`: what this run sent (a resumed upload in parts sends less than the size).
                emit(.fileDone(path: item.entry.path, size: item.stat.size, fetched: item.sent))
            }
        } catch {
            storeError = error
        }
        moved.removeAll(keepingCapacity: true)
    }

    /// The first step of the item's placement, once its file is open and still what was hashed.
    private func start(_ item: Item) -> Transfer? {
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
            let placement: Placement
            do throws(FerryError) {
                if let pieces = pieces(of: item, file: file) {
                    placement = pieces
                } else {
                    placement = try writer.placement(for: LocalUpload(task: item.task, entry: item.entry, destination: destination(item.entry), stat: item.stat,
                                                                      hashKnown: item.hashKnown, file: file),
                                                     journal: UploadJournal(store: store, task: item.task))
                }
            } catch {
                close(file)
                throw error
            }
            item.placement = placement
            let first: Transfer?
            do { first = try placement.next(after: nil) } catch {
                placement.end(placed: false, keep: error.retryClass != .never)
                throw error
            }
            guard let first else {
                placement.end(placed: false, keep: false)
                return nil
            }
            running[ObjectIdentifier(first)] = item
            starting.append((item.task.id, item.task.attempts))
            if item.triesThisRun == 1 { emit(.fileStarted(path: item.entry.path, size: item.entry.size, reason: .missing)) }
            return first
        } catch {
            failed(item, TransferFailure(message: error.message, keepPartial: false, cause: error.cause ?? .http(status: 500)), opening: true)
            return nil
        }
    }

    /// The placement of a file stored as its pieces: each piece the remote's usual placement of a
    /// range of the file, on a descriptor of its own, at the content object of the piece.
    private func pieces(of item: Item, file: Int32) -> Placement? {
        guard let pieces = item.pieces else { return nil }
        let (task, stat, manifest) = (item.task, item.stat, session.manifest)
        let path = { (piece: ContentIndex.Piece) in RemoteLayout.contentPath(piece.object, beside: manifest) }
        let shown = Printable.name(item.entry.path.string)
        return PiecesPlacement(entry: item.entry, pieces: pieces, file: file, writer: writer, verifyUploads: session.verifyUploads, path: path,
                               place: { [writer, store] (piece) throws(FerryError) -> Placement in
            let (own, range, held) = try PieceSource.open(piece, file: file, stat: stat, shown: shown)
            do throws(FerryError) {
                let object = ManifestEntry(path: path(piece), size: range.upperBound - range.lowerBound,
                                           sha256: piece.object)
                let upload = LocalUpload(task: task, entry: object, destination: path(piece), stat: held,
                                         hashKnown: true, file: own, range: range)
                return try writer.placement(for: upload,
                                            journal: UploadJournal(store: store, task: task))
            } catch {
                close(own)
                throw error
            }
        }, record: { [unowned self] placed in
            do throws(FerryError) { try store.recordPlaced(session: session.name, placed) } catch { storeError = error }
        })
    }

    /// The run's error when the server refused a write in a way every file would meet: no WebDAV
    /// writes (405, 501), no permission (401, 403), no room (507).
    static func refusesEveryWrite(_ cause: FailureCause?, _ message: String) -> FerryError? {
        guard case let .http(status)? = cause else { return nil }
        let hint: String
        switch status {
        case 405, 501: hint = "the server does not accept WebDAV writes here; enable WebDAV (nginx: dav_methods PUT DELETE MKCOL MOVE, and dav_ext_methods PROPFIND from libnginx-mod-http-dav-ext; Apache: Dav On), or check 'remote ='"
        case 401, 403: hint = "check the credentials file named in the config, and that the server lets it write here"
        case 507: hint = "the remote's storage is full"
        default: return nil
        }
        return FerryError(.remote, message + "; nothing more was sent", hint: hint, cause: cause)
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
            if let probe = transfer as? StateProbe, var item = checking.removeValue(forKey: probe.path) {
                switch outcome {
                case .succeeded:
                    inspected(item, probe.state ?? .absent)
                case let .failed(failure):
                    // The answer did not come: asked again, twice, then the file fails (the next
                    // run checks it and sends it again).
                    item.checkTries += 1
                    if item.checkTries < 3 && failure.retry != .never {
                        toCheck.insert(item, at: 0)
                    } else {
                        fail(item, "cannot check what the remote holds: \(failure.message)")
                    }
                case .interrupted:
                    interrupted(item, offset: 0, cancelled: false)
                }
                continue
            }
            guard let item = running.removeValue(forKey: ObjectIdentifier(transfer)), let placement = item.placement else { continue }
            switch outcome {
            case .succeeded:
                stepDone(item, transfer)
            case let .failed(failure):
                if let mended = placement.mend(transfer, failure) {
                    continuing.append((mended, item))
                    continue
                }
                counts.bytes += placement.sent
                // A failure the next try may get past keeps what it can resume (S3's parts).
                placement.end(placed: false, keep: failure.retry != .never && failure.cause != .sourceChanged)
                failed(item, failure)
            case .interrupted:
                counts.bytes += placement.sent
                placement.end(placed: false, keep: true)
                interrupted(item, offset: 0, cancelled: transfer.cancelRequested)
            }
        }
    }

    /// A step (or the file's opening) failed: the run stops when every write would be refused the
    /// same way; a file gone or changed since the scan is taken up as such; anything else follows
    /// the retry rule.
    private func failed(_ item: Item, _ failure: TransferFailure, opening: Bool = false) {
        var item = item
        item.placement = nil
        if !opening, failure.cause == .http(status: 403) {
            // One key the store refuses (a policy on a prefix) fails alone and is tried again next
            // run; refusals are held back until a file is placed, and a third with none placed
            // means every write is refused: the run stops with one error.
            if let stopping = abort {
                // The run already stops for it: back in line with the others.
                abort(stopping, item)
                return
            }
            refused.append((item, failure))
            if verifications.isEmpty && refused.count >= PushTransfers.refusalsThatStop,
               let refusal = PushTransfers.refusesEveryWrite(failure.cause, "\(Printable.name(item.entry.path.string)): " + failure.message) {
                for (held, _) in refused { abort(refusal, held) }
                refused.removeAll()
            } else if !verifications.isEmpty {
                failRefused()
            }
        } else if let refusal = PushTransfers.refusesEveryWrite(failure.cause, (opening ? "" : "\(Printable.name(item.entry.path.string)): ") + failure.message) {
            abort(refusal, item)
        } else if opening && LocalRoot.isGone(failure.cause) {
            // Gone since the scan (deleted, renamed, a symlink or a FIFO now, or under a file):
            // a change like any other, which the session takes up.
            afterFailure(item, TransferFailure(message: failure.message, keepPartial: false, cause: .sourceChanged))
        } else if opening && failure.cause != .sourceChanged && failure.retry == .never {
            fail(item, failure.message)
        } else {
            afterFailure(item, failure)
        }
    }

    override func tick(_ running: [Transfer]) {
        // `ferry cancel`: an upload it suspends stops (what cannot resume goes) and waits for
        // `ferry resume`; the manifest is not published.
        let steps = running.compactMap { step in self.running[ObjectIdentifier(step)].map { (step, $0.task.id) } }
        applySuspensions(running: steps.map(\.1) + continuing.map(\.1.task.id), recordFinished: flush) { ids in
            for (step, id) in steps where ids.contains(id) { step.cancelRequested = true }
            // Between two steps: stopped where they are, kept for `ferry resume`.
            for (_, item) in continuing where ids.contains(item.task.id) {
                counts.bytes += item.placement?.sent ?? 0
                item.placement?.end(placed: false, keep: true)
                interrupted(item, offset: 0, cancelled: true)
            }
            continuing.removeAll { ids.contains($0.1.task.id) }
        }
        let uploads = running.compactMap { $0 as? Upload }
        // A part's place in its file stands for what is done of it (the parts before it are on the remote).
        progress.active = uploads.map { SyncProgress.Active(path: $0.entry.path, done: $0.range.lowerBound + $0.sent, size: $0.stat.size) }
        progress.bytesDone = completedBytes + uploads.reduce(0) { $0 + $1.range.lowerBound + $1.sent }
        observer.progress(progress)
        if !moved.isEmpty && stop.clock.monotonic() - lastFlush >= 0.2 { flush() }
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

    /// How many files refused with 403, none placed, stop the run.
    static let refusalsThatStop = 3

    /// The files refused with 403 fail, each alone (a file was placed, or the run ends).
    private func failRefused() {
        guard !refused.isEmpty else { return }
        let held = refused
        refused.removeAll()
        for (item, failure) in held { fail(item, failure.message + "; the other files go on, and the next run tries this one again") }
    }

}

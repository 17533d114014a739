import Glibc
import FerryCore

/// The transfer stage of a pull run, the session's `TransferSource` for the shared `TransferEngine`:
/// it hands out the plan's downloads, commits each verified file into place, retries what is worth
/// retrying, and keeps the task table in step.
///
/// Retries: a failed attempt that can succeed later (reset, truncation, stall, 5xx, 429, a wrong
/// Content-Range) is tried again after a capped exponential backoff with jitter, or after the
/// server's `Retry-After` if longer, resuming from the data it kept. When the remote cannot be
/// reached at all, the task ends the run *waiting for connectivity* (exit 4) rather than failed,
/// until `resource-timeout` after it was queued.
///
/// Durability order (docs/design.md, data-safety rule 2): data synced → rename → directory fsynced
/// → task marked done. Verified files are committed in groups (up to 256, or every 0.2 s) by
/// `PullCommitter` on a thread of its own: the group's data is synced at once (one syncfs rather
/// than an fsync per file, each a journal commit on a disk), then each file is renamed into place,
/// its directories fsynced, and the group's tasks marked done in one SQLite transaction on that
/// thread's own connection; the engine thread counts and reports what each group gave. A crash
/// inside a group leaves verified partials, or files in place whose tasks are not yet done: the
/// next run verifies either by hash and keeps what is right. No file reaches its final path
/// before its data is on disk.
final class PullTransfers: SessionTransfers<PullTransfers.Item> {
    private let root: LocalRoot
    /// The remote, and the mirrors tried before it (`PullSources`).
    let sources: PullSources
    /// Files are named by their content on the remote (`remote-layout = objects`, where pieces
    /// have a place): a mirror that sends other bytes under such a name is wrong, not stale.
    private var contentAddressed: Bool { deltas.piecesAt != nil }
    /// Where a file's bytes are under the remote (`RemoteLayout.location`).
    private let locate: (ManifestEntry) -> RelativePath
    /// The files a delta assembles (`DeltaPreparation`), by path; those whose delta stopped this
    /// run are fetched whole (`deltaStopped`, by task). Files stored as their pieces are all among them.
    private let deltas: DeltaPreparation.Prepared
    private var deltaStopped = Set<Int64>()
    /// Where a file fetched whole, its delta stopped, is said.
    private let fallbacks: DeltaFallbacks

    /// Downloads that neither finished, failed, wait nor are suspended, delayed or held: only a stop leaves any.
    var unfinished: Int { progress.filesTotal - counts.transferred - counts.failed - counts.notDone }
    /// A disk-level failure (full, read-only, I/O error): the run ends with exit code 5.
    private(set) var localIOError: String?
    /// Files whose manifest mtime the filesystem could not store (their `wantedMtime` is set).
    private(set) var unstorableMtimes: [(RelativePath, CachedHash)] = []

    /// Tasks recorded as running; files that finish between two ticks are never marked running.
    private var markedRunning = Set<Int64>()
    /// Puts verified downloads in place, a group at a time, beside the engine thread.
    private let committer: PullCommitter

    init(session: SessionConfig, root: LocalRoot, store: StateStore, sources: PullSources,
         locate: @escaping (ManifestEntry) -> RelativePath,
         deltas: DeltaPreparation.Prepared = .init(), fallbacks: DeltaFallbacks, observer: EventSink,
         emit: @escaping (Event.Body) -> Void, plan: Plan, stop: StopCondition, gate: DiscretionGate?) {
        self.root = root
        self.fallbacks = fallbacks
        self.sources = sources
        self.locate = locate
        self.deltas = deltas
        committer = PullCommitter(root: root, store: store, session: session.name, clock: stop.clock)
        super.init(session: session, store: store, observer: observer, emit: emit, stop: stop, gate: gate)
        progress.filesTotal = plan.downloads.count
        progress.bytesTotal = plan.downloadBytes
    }

    /// A download still to do: its task (resume data, attempts) and when it may start.
    struct Item: SessionTransferItem {
        let download: Plan.Download
        var task: TransferTask
        var notBefore: Double = 0
        var triesThisRun = 0
        /// The source of the current attempt (`PullSources`), and the mirrors that failed it this run.
        var source = 0
        var skipped = Set<Int>()
        var path: RelativePath { download.entry.path }
    }

    /// Runs `downloads`, each with its task (`tasks`, in the same order), through the shared
    /// engine; returns when all have ended or the run must stop.
    func run(_ downloads: [Plan.Download], tasks: [TransferTask], engine: TransferEngine) {
        precondition(downloads.count == tasks.count, "a task for each download")
        var items = runnable(zip(downloads, tasks).map { Item(download: $0, task: $1) })
        if sources.hasMirrors,
           let smallest = items.indices.min(by: { (items[$0].download.entry.size ?? .max)
                                                   < (items[$1].download.entry.size ?? .max) }) {
            // A mirror's first file is fetched alone (`PullSources.pick`): the smallest, so the others wait least.
            items.swapAt(items.startIndex, smallest)
        }
        ready = ArraySlice(items)
        if (try? root.openStaging()) != nil {
            // Without it, each download opens its own partial and says why it cannot.
            // Not those a pack fills: the fill writes them, the transfer then opens them.
            committer.expect(ready.map(\.task.id).filter { packs?.filling.contains($0) != true })
        }
        committer.start()
        run(engine: engine)  // its last flush commits what is left
        committer.stop()
    }

    /// Turns what placing files changed in the local tree (replacements, repairs) into events and
    /// forgets the hashes of what is gone. Returns how many files were removed.
    static func report(_ changes: [LocalRoot.Change], session: String, store: StateStore,
                       emit: (Event.Body) -> Void) throws(FerryError) -> Int {
        var removed = 0
        var gone: [RelativePath] = []
        for change in changes {
            switch change {
            case let .replacedByDirectory(path, was):
                gone.append(path)
                emit(.replaced(path: path, was: was == .other ? "special file" : was.rawValue, now: "directory"))
            case let .removed(path):
                emit(.fileDeleted(path: path))
                removed += 1
                gone.append(path)
            case let .replacedDirectory(path):
                emit(.replaced(path: path, was: "directory", now: "file"))
            case let .repaired(message):
                emit(.warning(message: message))
            }
        }
        try store.forgetHashes(session: session, gone)
        return removed
    }

    // MARK: TransferSource (called on the engine thread while `run` waits)

    override func next() -> TransferEngine.Next {
        while let item = waitingForPack.take() ?? waitingForMirror.take() ?? nextDue() {
            if let packs, packs.waits(item.task.id) {
                // Its pack is on its way (the files behind it mostly wait for theirs too).
                waitingForPack = item
                return .notYet
            }
            guard let source = sources.pick(skipping: item.skipped, now: stop.clock.monotonic()) else {
                waitingForMirror = item
                return .notYet
            }
            if let download = start(item, from: source) { return .start(download) }
        }
        return backingOff.isEmpty ? .none : .notYet
    }

    /// The next file, waiting for a mirror's first file to verify (`PullSources.pick`).
    private var waitingForMirror: Item?
    /// The next file, waiting for the pack that brings it (`PullPacks`).
    private var waitingForPack: Item?
    /// The packs being fetched while the transfers run, if any.
    var packs: PackFill?

    /// The files set aside for a mirror or a pack wait with the others when the session is held.
    override func leftWhenHeld() -> [Item] { [waitingForPack, waitingForMirror].compactMap { $0 } + super.leftWhenHeld() }

    override func finished(_ batch: [(Transfer, TransferOutcome)]) {
        finish(batch.map { ($0.0 as! Download, $0.1) })
    }

    override func tick(_ running: [Transfer]) {
        tick(downloads: running.map { $0 as! Download })
    }

    private var items: [Int64: Item] = [:]

    private func start(_ item: Item, from source: Int) -> Download? {
        var item = item
        item.task.attempts += 1
        item.triesThisRun += 1
        item.source = source
        let entry = item.download.entry
        var opened: (partial: PartialFile, stray: LocalEntry.Kind?)
        do throws(FerryError) {
            // Most were made ahead by the committer's thread; one a pack fills is opened as it is.
            if let made = committer.takePartial(item.task.id) {
                opened = made
            } else {
                opened = try root.openPartial(taskID: item.task.id, existing: packs?.filling.contains(item.task.id) == true)
                // What this run's pack wrote was checked as it was written: not read back to hash.
                if packs?.wroteWhole(item.task.id) == true { opened.partial.wholeDigest = entry.sha256 }
            }
        } catch {
            // The directory for partial files cannot be written: every file would fail the same way.
            abort(FerryError(.localIO, error.message,
                             hint: "ferry writes partial files in \(Printable.name(session.local))/.ferry/partial: let "
                                   + "its user write \(Printable.name(session.local)) (a read-only or full filesystem, "
                                   + "or another owner?), or fix 'local ='"),
                  item)
            return nil
        }
        do throws(FerryError) {
            let (partial, stray) = opened
            if let stray {
                emit(.warning(message: "\(Printable.name(entry.path.string)): its partial file in .ferry/partial was a "
                                       + "\(stray.rawValue), not a file; removed it (not followed) and starting this "
                                       + "file again"))
                item.task.bytesDone = 0
                item.task.validator = nil
            }
            do throws(FerryError) {
                let download = try makeDownload(item, into: partial)
                download.onCheckpoint = { [unowned self] in self.checkpoint($0) }
                items[item.task.id] = item
                sources.started(source)
                if item.triesThisRun == 1 {
                    emit(.fileStarted(path: entry.path, size: entry.size, reason: item.download.reason))
                }
                // A file a pack of this run wrote whole is not resumed: it came in the pack.
                if download.requestedOffset > 0 && packs?.filling.contains(item.task.id) != true {
                    emit(.fileResumed(path: entry.path, offset: download.requestedOffset))
                }
                return download
            } catch {
                close(partial.fd)
                throw error
            }
        } catch {
            if error.category == .localIO { localIOError = localIOError ?? error.message }
            fail(entry.path, item.task, error.message)
            return nil
        }
    }

    /// A delta where one was planned and has not stopped this run (and the files it takes bytes
    /// from still open); otherwise the remote's download of the whole file.
    private func makeDownload(_ item: Item, into partial: PartialFile) throws(FerryError) -> Download {
        let entry = item.download.entry
        let remote = sources.all[item.source].remote
        // A mirror is asked for a file at its path by the version it must hold (an HTTP cache
        // then never serves an older copy of it).
        let versioned = !sources.all[item.source].isOrigin && !contentAddressed
        if let error = deltas.unfetchable[entry.path] { throw error }
        let asPieces = deltas.storedAsPieces(entry)
        if var (plan, sources) = deltas.plans[entry.path], !deltaStopped.contains(item.task.id) {
            var opened: [Int32] = []
            for source in sources {
                guard let fd = try? source.root.open(source.path, for: "to reuse its bytes") else { break }
                opened.append(fd)
            }
            if opened.count < sources.count && asPieces {
                // Stored as pieces: without the local files, every piece is fetched.
                for fd in opened { close(fd) }
                (plan, sources, opened) = (plan.fetchingAll(), [], [])
            }
            if opened.count == sources.count {
                let piecesAt = deltas.piecesAt
                let pieces: ((SHA256Digest) -> Download.Origin)?
                pieces = asPieces ? { [remote] in remote.origin(of: piecesAt!($0)) } : nil
                do throws(FerryError) {
                    let origin = versioned ? remote.origin(of: locate(entry),
                                                           content: entry.sha256) : remote.origin(of: locate(entry))
                    return try DeltaAssembly.download(task: item.task, entry: entry, reason: item.download.reason,
                                                      origin: origin,
                                             partial: partial, resumeFrom: item.task.bytesDone, plan: plan,
                                             sources: opened, pieces: pieces,
                                             fromMirror: !self.sources.all[item.source].isOrigin, clock: remote.clock)
                } catch {
                    for fd in opened { close(fd) }
                    throw error
                }
            }
            for fd in opened { close(fd) }
        }
        return try remote.download(task: item.task, entry: entry, from: locate(entry), reason: item.download.reason,
                                   into: partial,
                                   resumeFrom: item.task.bytesDone, validator: item.task.validator,
                                   versioned: versioned)
    }

    /// An attempt from a mirror failed: `PullSources.judge` decides what that costs the mirror,
    /// and the file goes to the next source at once (not a try of its own). What the mirror sent
    /// is kept for the next source unless it was wrong: a delta's verified pieces, or a file's
    /// bytes under their validator, which the next source resumes only if it gives the same (a
    /// cache passes the origin's on).
    private func mirrorFailed(_ item: Item, _ download: Download, _ failure: TransferFailure) {
        let fault: PullSources.Fault
        if let stopped = download.deltaStopped {
            fault = .wrongBytes(how: "did not answer ranges as asked for", detail: stopped.why)
        } else if case .contentMismatch = failure.cause {
            fault = .wrongBytes(how: "sent wrong bytes for", detail: failure.message)
        } else if failure.cause == .wrongLength {
            // Another size than the manifest's at the path: a stale copy, as wrong as other bytes.
            fault = .wrongBytes(how: "sent a file of another size for", detail: failure.message)
        } else if failure.cause == .http(status: 404) || failure.cause == .http(status: 410) {
            fault = .lacks
        } else if failure.cause.isTimeout {
            fault = .slow
        } else {
            fault = .failed
        }
        sources.judge(item.source, path: download.entry.path, fault, contentAddressed: contentAddressed)
        var wrongBytes = false
        if case .wrongBytes = fault { wrongBytes = true }
        toNextSource(item, download, keeping: (download.kind != .wholeFile || !wrongBytes) && failure.keepPartial)
    }

    /// The file goes to the next source at once (not a try of its own), with what it kept.
    private func toNextSource(_ item: Item, _ download: Download, keeping: Bool) {
        var item = item
        item.skipped.insert(item.source)
        var kept: Int64 = 0
        if keeping && download.syncData() {
            kept = min(download.written, download.bytesOnDisk)
        } else {
            root.removePartial(taskID: download.task.id)
        }
        item.task.bytesDone = kept
        item.task.validator = kept > 0 && download.kind == .wholeFile ? download.validator : nil
        try? store.checkpoint(item.task.id, bytesDone: kept, validator: item.task.validator)
        item.triesThisRun -= 1
        item.notBefore = 0
        backingOff.insertByDue(item)
    }

    /// Downloads cancelled because their mirror was demoted while they ran.
    private var abandoned = Set<Int64>()

    private func checkpoint(_ download: Download) {
        markRunning([download])
        do throws(FerryError) {
            try store.checkpoint(download.task.id, bytesDone: download.checkpointed, validator: download.validator)
        } catch {
            storeError = error
        }
    }

    private func tick(downloads active: [Download]) {
        applySuspensions(running: active.map(\.task.id), recordFinished: flush) { ids in
            for d in active where ids.contains(d.task.id) { d.cancelRequested = true }
        }
        // What a demoted mirror is still sending is not waited for: each such file goes to the next source.
        for d in active where !d.cancelRequested {
            if let item = items[d.task.id], sources.demoted(item.source) != nil {
                d.cancelRequested = true
                abandoned.insert(d.task.id)
            }
        }
        markRunning(active)
        progress.active = active.map { SyncProgress.Active(path: $0.entry.path, done: $0.written, size: $0.entry.size) }
        progress.bytesDone = completedBytes + active.reduce(0) { $0 + $1.written }
        observer.progress(progress)
        record(committer.collect())
    }

    private func markRunning(_ downloads: [Download]) {
        let new = downloads.filter { !markedRunning.contains($0.task.id) }
        guard !new.isEmpty else { return }
        do throws(FerryError) {
            try store.markRunning(new.map { ($0.task.id, $0.task.attempts) })
            for d in new { markedRunning.insert(d.task.id) }
        } catch {
            storeError = error
        }
    }

    private func finish(_ batch: [(Download, TransferOutcome)]) {
        for (download, outcome) in batch {
            if let item = items[download.task.id] {
                var verified = false
                if case .succeeded = outcome { verified = true }
                sources.ended(item.source, verified: verified)
            }
            if let reason = download.restartReason { emit(.fileRestarted(path: download.entry.path, reason: reason)) }
            switch outcome {
            case .succeeded:
                committer.submit(download)
                continue  // the committer closes it
            case let .failed(failure):
                failed(download, failure)
            case .interrupted:
                interrupted(download)
            }
            download.close()
        }
        record(committer.collect())
    }

    /// An attempt that failed: a mirror's goes to the next source (`mirrorFailed`), a delta that
    /// stopped is fetched whole at once (neither a try of its own); otherwise it is retried or
    /// fails by the session's rules, with what it kept.
    private func failed(_ download: Download, _ failure: TransferFailure) {
        // What came over the network counts, kept or not.
        counts.bytes += download.received
        if let item = items[download.task.id] {
            sources.count(item.source, bytes: download.received, requests: download.requests)
            // This machine's own failures (its disk) are no mirror's doing.
            var local = false
            if case .local = failure.cause { local = true }
            if !sources.isOrigin(item.source) && !local {
                items[download.task.id] = nil
                mirrorFailed(item, download, failure)
                return
            }
        }
        if let stop = download.deltaStopped, var item = items.removeValue(forKey: download.task.id) {
            // Not a failed try: the file is fetched whole at once, said once.
            fallbacks.say(download.entry.path, stop.reason, stop.why)
            root.removePartial(taskID: download.task.id)
            deltaStopped.insert(item.task.id)
            item.task.bytesDone = 0
            item.task.validator = nil
            item.triesThisRun -= 1
            item.notBefore = 0
            backingOff.insertByDue(item)
            return
        }
        if let code = download.localIOFailure, code == ENOSPC || code == EDQUOT || code == EROFS || code == EIO {
            localIOError = localIOError ?? "\(session.local): \(failure.message)"
        }
        var kept: Int64 = 0
        if failure.keepPartial && download.syncData() {
            kept = min(download.written, download.bytesOnDisk)
        } else {
            root.removePartial(taskID: download.task.id)
        }
        if var item = items.removeValue(forKey: download.task.id) {
            item.task.bytesDone = kept
            item.task.validator = failure.keepPartial ? download.validator : nil
            retryOrFail(item, failure)
        }
    }

    /// An attempt stopped (a deadline, a signal, `ferry cancel`, a demoted mirror): what it wrote
    /// is kept as resume data.
    private func interrupted(_ download: Download) {
        counts.bytes += download.received
        if let item = items[download.task.id] {
            sources.count(item.source, bytes: download.received, requests: download.requests)
        }
        if abandoned.remove(download.task.id) != nil, let item = items.removeValue(forKey: download.task.id) {
            // Only a delta's verified pieces are kept from a mirror that sent wrong bytes.
            toNextSource(item, download, keeping: download.kind != .wholeFile)
            return
        }
        var kept: Int64 = 0
        if download.syncData() {
            kept = min(download.written, download.bytesOnDisk)
        } else {
            root.removePartial(taskID: download.task.id)
        }
        try? store.checkpoint(download.task.id, bytesDone: kept, validator: kept > 0 ? download.validator : nil)
        if var item = items.removeValue(forKey: download.task.id) {
            item.task.bytesDone = kept
            item.task.validator = kept > 0 ? download.validator : nil
            interrupted(item, offset: kept, cancelled: download.cancelRequested)
        }
    }

    /// Counts and reports what the committer's groups gave: files in place (their tasks marked
    /// done by the committer), and those it could not place, which fail with what they kept.
    private func record(_ results: PullCommitter.Results) {
        guard !results.isEmpty else { return }
        for outcome in results.outcomes {
            switch outcome {
            case let .unrecorded(d):
                // Not recorded done: the run stops (`storeError`), and the next one verifies the file by hash.
                items.removeValue(forKey: d.task.id)
            case let .placed(d, cache):
                var source: String?
                if let item = items.removeValue(forKey: d.task.id) {
                    sources.count(item.source, bytes: d.received, requests: d.requests)
                    sources.served(item.source)
                    if sources.hasMirrors { source = sources.all[item.source].name }
                }
                if cache.wantedMtime != nil { unstorableMtimes.append((d.entry.path, cache)) }
                counts.transferred += 1
                counts.bytes += d.received
                counts.reused += d.reused
                completedBytes += d.entry.size ?? d.written
                progress.filesDone += 1
                emit(.fileDone(path: d.entry.path, size: d.written, fetched: d.received, reused: d.reused,
                               source: source))
            case let .failed(download, error, kept):
                if error.category == .localIO { localIOError = localIOError ?? error.message }
                if let item = items.removeValue(forKey: download.task.id) {
                    sources.count(item.source, bytes: download.received, requests: download.requests)
                }
                fail(download.entry.path, download.task, error.message, bytesDone: kept,
                     validator: kept > 0 ? download.validator : nil)
            }
        }
        if let error = results.storeError { storeError = storeError ?? error }
        do throws(FerryError) {
            // Files removed to make room for listed files (what directories in the way held) are
            // deleted; they are reported even when their file did not commit (a removal failed half way).
            counts.deleted += try PullTransfers.report(results.changes, session: session.name, store: store, emit: emit)
        } catch {
            storeError = error
        }
    }

    /// Commits every verified file now and records it (the committer is idle afterwards, so the
    /// root's changes can be taken here too).
    override func flush() {
        var results = committer.drain()
        results.changes += root.takeChanges()
        record(results)
    }
}

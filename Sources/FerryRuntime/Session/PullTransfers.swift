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
/// Durability order (product.md §6 rule 2): data fsynced with the file → rename → directory
/// fsynced → task marked done. Finished files are committed in groups (up to 256, or every 0.2 s)
/// so that 10,000 small files do not cost 10,000 SQLite transactions; a crash inside a group
/// leaves files in place whose tasks are not yet done, which the next run verifies by hash.
final class PullTransfers: TransferSource {
    private let session: SessionConfig
    private let root: LocalRoot
    private let store: StateStore
    private let remote: Remote
    private let emit: (Event.Body) -> Void
    private let observer: EventSink
    private let stop: StopCondition
    /// A discretionary session's conditions (nil: transfers go at any time).
    private let gate: DiscretionGate?
    /// Why the run stopped before all downloads finished, if it did.
    private(set) var stopped: String?
    /// What a discretionary session's transfers wait for, when its conditions did not hold, and
    /// how many downloads were left waiting (`onHold`).
    private(set) var heldFor: String?
    private(set) var onHold = 0

    private(set) var downloaded = 0
    private(set) var failed = 0
    /// Tasks left waiting for connectivity.
    private(set) var waiting = 0
    /// Tasks suspended by `ferry cancel` (before or during the run).
    private(set) var suspended = 0
    /// Tasks delayed to a later time (`earliest-begin`, `--not-before`), and the soonest of them.
    private(set) var delayed = 0
    private(set) var nextBegin: Timestamp?
    /// Downloads that neither finished, failed, wait nor are suspended, delayed or held: only a stop leaves any.
    var unfinished: Int { progress.filesTotal - downloaded - failed - waiting - suspended - delayed - onHold }
    private(set) var bytesFetched: Int64 = 0
    /// A disk-level failure (full, read-only, I/O error): the run ends with exit code 5.
    private(set) var localIOError: String?
    private(set) var storeError: FerryError?
    /// Files removed to make room for listed files (what directories in the way held).
    private(set) var deletedInReplacements = 0
    /// Files whose manifest mtime the filesystem could not store (their `wantedMtime` is set).
    private(set) var unstorableMtimes: [(RelativePath, CachedHash)] = []

    private var progress: SyncProgress
    private var completedBytes: Int64 = 0
    /// Tasks recorded as running; files that finish between two ticks are never marked running.
    private var markedRunning = Set<Int64>()
    private var committed: [(download: Download, cache: CachedHash)] = []
    private var lastFlush = MonotonicClock.seconds()

    init(session: SessionConfig, root: LocalRoot, store: StateStore, remote: Remote, observer: EventSink,
         emit: @escaping (Event.Body) -> Void, plan: Plan, stop: StopCondition, gate: DiscretionGate?) {
        self.stop = stop
        self.gate = gate
        self.session = session
        self.root = root
        self.store = store
        self.remote = remote
        self.observer = observer
        self.emit = emit
        progress = SyncProgress(session: session.name)
        progress.filesTotal = plan.downloads.count
        progress.bytesTotal = plan.downloadBytes
    }

    /// A download still to do: its task (resume data, attempts) and when it may start.
    private struct Item: BackingOff {
        let download: Plan.Download
        var task: TransferTask
        var notBefore: Double = 0
        var triesThisRun = 0
    }

    private var ready: ArraySlice<Item> = []
    /// Items suspended by `ferry cancel`, before or during the run: `ferry resume` from another
    /// process can make them runnable again while this run goes on (`takeResumed`).
    private var held: [Int64: Item] = [:]
    /// Items waiting out a retry backoff, soonest first.
    private var backingOff: [Item] = []

    /// Runs the downloads through the shared engine; returns when all have ended or the run must stop.
    func run(_ downloads: [Plan.Download], tasks: [RelativePath: TransferTask], engine: TransferEngine) {
        var runnable: [Item] = []
        for d in downloads {
            guard let task = tasks[d.entry.path] else { continue }
            if task.state == .suspended {
                suspended += 1
                held[task.id] = Item(download: d, task: task)
                emit(.fileSuspended(path: d.entry.path, offset: task.bytesDone))
            } else if task.state == .delayed, let until = task.notBefore {
                delayed += 1
                nextBegin = min(nextBegin ?? until, until)
                emit(.fileDelayed(path: d.entry.path, until: until))
            } else {
                runnable.append(Item(download: d, task: task))
            }
        }
        ready = ArraySlice(runnable)
        if !runnable.isEmpty, let reason = gate?.waitsFor() {
            heldFor = reason
        } else {
            engine.run(self)
        }
        flush()
        suspensions.acknowledgeOpen()
        if let heldFor {
            // What had not begun, waited out a backoff or was stopped when the conditions ended.
            let left = Array(ready) + backingOff
            onHold += left.count
            do throws(FerryError) { try store.requeue(left.map(\.task.id)) } catch { storeError = error }
            // Conditions that ended as the last transfer finished held nothing back.
            if onHold > 0 { emit(.sessionHeld(files: onHold, waitsFor: heldFor)) } else { self.heldFor = nil }
        }
        progress.active = []
        progress.bytesDone = completedBytes
        observer.progress(progress)
    }

    /// Turns what placing files changed in the local tree (replacements, repairs) into events and
    /// forgets the hashes of what is gone. Returns how many files were removed.
    static func report(_ changes: [LocalRoot.Change], session: String, store: StateStore, emit: (Event.Body) -> Void) throws(FerryError) -> Int {
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

    func next() -> TransferEngine.Next {
        while let item = nextDue() {
            if let download = start(item) { return .start(download) }
        }
        return backingOff.isEmpty ? .none : .notYet
    }

    var shouldStop: Bool {
        if storeError != nil { return true }
        if let reason = stop.reason {
            stopped = reason
            return true
        }
        if let reason = gate?.waitsFor() {
            // A discretionary condition ended: running transfers checkpoint, the rest waits.
            heldFor = reason
            return true
        }
        return false
    }

    /// `session-transfers`, within the engine's global `transfers`.
    var limit: Int { session.transfers ?? Int.max }
    var priority: Int { session.priority }
    var bandwidth: BandwidthSchedule? { session.bwlimit }

    func finished(_ batch: [(Transfer, TransferOutcome)]) {
        finish(batch.map { ($0.0 as! Download, $0.1) })
    }

    func tick(_ running: [Transfer]) {
        tick(downloads: running.map { $0 as! Download })
    }

    private func nextDue() -> Item? {
        backingOff.popDue(now: stop.clock.monotonic()) ?? ready.popFirst()
    }

    private var items: [Int64: Item] = [:]

    private func start(_ item: Item) -> Download? {
        var item = item
        item.task.attempts += 1
        item.triesThisRun += 1
        let entry = item.download.entry
        do throws(FerryError) {
            let (fd, stray) = try root.openPartial(taskID: item.task.id)
            if let stray {
                emit(.warning(message: "\(Printable.name(entry.path.string)): its partial file in .ferry/partial was a \(stray.rawValue), not a file; removed it (not followed) and starting this file again"))
                item.task.bytesDone = 0
                item.task.validator = nil
            }
            do throws(FerryError) {
                let download = try remote.download(task: item.task, entry: entry, reason: item.download.reason, into: fd,
                                                   resumeFrom: item.task.bytesDone, validator: item.task.validator)
                download.onCheckpoint = { [unowned self] in self.checkpoint($0) }
                items[item.task.id] = item
                if item.triesThisRun == 1 { emit(.fileStarted(path: entry.path, size: entry.size, reason: item.download.reason)) }
                if download.requestedOffset > 0 { emit(.fileResumed(path: entry.path, offset: download.requestedOffset)) }
                return download
            } catch {
                close(fd)
                throw error
            }
        } catch {
            if error.category == .localIO { localIOError = localIOError ?? error.message }
            fail(entry.path, item.task, error.message)
            return nil
        }
    }

    /// After a failed attempt: try again later, wait for connectivity, or give up.
    private func retryOrFail(_ download: Download, _ failure: TransferFailure, kept: Int64) {
        guard var item = items.removeValue(forKey: download.task.id) else { return }
        let path = download.entry.path
        item.task.bytesDone = kept
        item.task.validator = failure.keepPartial ? download.validator : nil
        switch session.retryRule.decide(after: failure, task: item.task, triesThisRun: item.triesThisRun) {
        case let .giveUp(message):
            fail(path, item.task, message, bytesDone: kept, validator: item.task.validator)
        case .waitForConnectivity:
            waiting += 1
            record(item.task, waiting: true, error: failure.message)
            emit(.fileWaiting(path: path, error: failure.message))
        case let .retry(delay):
            item.notBefore = stop.clock.monotonic() + delay
            record(item.task, waiting: failure.retry == .connectivity, error: failure.message)
            emit(.fileRetrying(path: path, attempt: item.triesThisRun + 1, delay: delay, error: failure.message))
            backingOff.insertByDue(item)
        }
    }

    private func record(_ task: TransferTask, waiting: Bool, error: String) {
        do throws(FerryError) {
            try store.markRetrying(task.id, waiting: waiting, attempts: task.attempts, error: error, bytesDone: task.bytesDone, validator: task.validator)
        } catch {
            storeError = error
        }
    }

    private func checkpoint(_ download: Download) {
        markRunning([download])
        do throws(FerryError) {
            try store.checkpoint(download.task.id, bytesDone: download.checkpointed, validator: download.validator)
        } catch {
            storeError = error
        }
    }

    private lazy var suspensions = Suspensions(session: session.name, store: store)

    /// Honours `ferry cancel` from another process (`Suspensions`); suspended items are held
    /// here, and `ferry resume` can put them back in line while this run goes on.
    private func applySuspensions(_ active: [Download]) {
        do throws(FerryError) {
            guard let ids = try suspensions.check(running: active.map(\.task.id), recordFinished: flush, everySecond: takeResumed) else { return }
            for d in active where ids.contains(d.task.id) { d.cancelRequested = true }
            func drop(_ item: Item) -> Bool {
                guard ids.contains(item.task.id) else { return false }
                suspended += 1
                held[item.task.id] = item
                emit(.fileSuspended(path: item.download.entry.path, offset: item.task.bytesDone))
                return true
            }
            ready = ArraySlice(ready.filter { !drop($0) })
            backingOff.removeAll { drop($0) }
        } catch {
            storeError = error
        }
    }

    /// Puts the held items that `ferry resume` made runnable back in line, with the resume data the
    /// store holds for them. A resume that comes after this run ran out of work is left to the next run.
    private func takeResumed() throws(FerryError) {
        guard !held.isEmpty else { return }
        let stillSuspended = try store.suspendedTaskIDs(session: session.name)
        for (id, item) in held where !stillSuspended.contains(id) {
            held.removeValue(forKey: id)
            guard let task = try store.task(id: id), task.state.after(.start) != nil else { continue }
            suspended -= 1
            ready.append(Item(download: item.download, task: task))
        }
    }

    private func tick(downloads active: [Download]) {
        applySuspensions(active)
        markRunning(active)
        progress.active = active.map { SyncProgress.Active(path: $0.entry.path, done: $0.written, size: $0.entry.size) }
        progress.bytesDone = completedBytes + active.reduce(0) { $0 + $1.written }
        observer.progress(progress)
        if !committed.isEmpty && MonotonicClock.seconds() - lastFlush >= 0.2 { flush() }
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
            let path = download.entry.path
            if let reason = download.restartReason { emit(.fileRestarted(path: path, reason: reason)) }
            switch outcome {
            case .succeeded:
                do throws(FerryError) {
                    let placed = try root.commit(partialFD: download.fd, taskID: download.task.id, to: path,
                                                 mode: download.entry.mode, mtime: download.entry.mtime)
                    items.removeValue(forKey: download.task.id)
                    let cache = CachedHash(placed, sha256: download.entry.sha256, wanted: download.entry.mtime)
                    if cache.wantedMtime != nil { unstorableMtimes.append((path, cache)) }
                    committed.append((download, cache))
                } catch {
                    if error.category == .localIO { localIOError = localIOError ?? error.message }
                    // The partial is verified and complete: keep it so the next run only commits it.
                    let kept = download.syncData() ? download.written : 0
                    items.removeValue(forKey: download.task.id)
                    fail(path, download.task, error.message, bytesDone: kept, validator: download.validator)
                }
            case let .failed(failure):
                if let code = download.localIOFailure, code == ENOSPC || code == EDQUOT || code == EROFS || code == EIO {
                    localIOError = localIOError ?? "\(session.local): \(failure.message)"
                }
                var kept: Int64 = 0
                if failure.keepPartial && download.syncData() {
                    kept = min(download.written, download.bytesOnDisk)
                } else {
                    root.removePartial(taskID: download.task.id)
                }
                retryOrFail(download, failure, kept: kept)
            case .interrupted:
                let item = items.removeValue(forKey: download.task.id)
                var kept: Int64 = 0
                if download.syncData() {
                    kept = min(download.written, download.bytesOnDisk)
                } else {
                    root.removePartial(taskID: download.task.id)
                }
                try? store.checkpoint(download.task.id, bytesDone: kept, validator: kept > 0 ? download.validator : nil)
                if heldFor != nil && !download.cancelRequested {
                    onHold += 1
                    do throws(FerryError) { try store.requeue([download.task.id]) } catch { storeError = error }
                    emit(.fileInterrupted(path: path, offset: kept))
                } else if download.cancelRequested {
                    suspended += 1
                    if var item {
                        item.task.bytesDone = kept
                        item.task.validator = kept > 0 ? download.validator : nil
                        held[item.task.id] = item
                    }
                    emit(.fileSuspended(path: path, offset: kept))
                } else {
                    emit(.fileInterrupted(path: path, offset: kept))
                }
            }
            download.close()
        }
        if committed.count >= 256 || MonotonicClock.seconds() - lastFlush >= 0.2 { flush() }
    }

    /// Makes the committed group durable and marks its tasks done.
    private func flush() {
        lastFlush = MonotonicClock.seconds()
        guard !committed.isEmpty || root.hasChanges else { return }
        do throws(FerryError) {
            try root.syncDirectories()
            // Replacements are reported even when their file did not commit (a removal failed half way).
            deletedInReplacements += try PullTransfers.report(root.takeChanges(), session: session.name, store: store, emit: emit)
            guard !committed.isEmpty else { return }
            try store.markDone(session: session.name, committed.map { ($0.download.task, $0.cache) })
            for (d, _) in committed {
                downloaded += 1
                bytesFetched += d.received
                completedBytes += d.entry.size ?? d.written
                progress.filesDone += 1
                emit(.fileDone(path: d.entry.path, size: d.written, fetched: d.received))
            }
        } catch {
            storeError = error
        }
        committed.removeAll(keepingCapacity: true)
    }

    private func fail(_ path: RelativePath, _ task: TransferTask, _ message: String, bytesDone: Int64 = 0, validator: String? = nil) {
        failed += 1
        progress.filesFailed += 1
        do throws(FerryError) {
            try store.markFailed(task.id, attempts: task.attempts, error: message, bytesDone: bytesDone, validator: validator)
        } catch {
            storeError = error
        }
        emit(.fileFailed(path: path, error: message))
    }
}

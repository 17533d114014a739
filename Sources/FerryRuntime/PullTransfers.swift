import Glibc
import FerryCore

/// The transfer stage of a pull run: feeds the plan's downloads to the `DownloadEngine`, commits
/// each verified file into place, and keeps the task table in step.
///
/// Durability order (product.md §6 rule 2): data fsynced with the file → rename → directory
/// fsynced → task marked done. Finished files are committed in groups (up to 256, or every 0.2 s)
/// so that 10,000 small files do not cost 10,000 SQLite transactions; a crash inside a group
/// leaves files in place whose tasks are not yet done, which the next run verifies by hash.
final class PullTransfers {
    private let session: SessionConfig
    private let root: LocalRoot
    private let store: StateStore
    private let settings: HTTPSettings
    private let emit: (Event.Body) -> Void
    private let observer: SyncObserver
    private let stop: StopCondition
    /// Why the run stopped before all downloads finished, if it did.
    private(set) var stopped: String?

    private(set) var downloaded = 0
    private(set) var failed = 0
    private(set) var bytesFetched: Int64 = 0
    /// A disk-level failure (full, read-only, I/O error): the run ends with exit code 5.
    private(set) var localIOError: String?
    private(set) var storeError: FerryError?

    private var progress: SyncProgress
    private var completedBytes: Int64 = 0
    /// Tasks recorded as running; files that finish between two ticks are never marked running.
    private var markedRunning = Set<Int64>()
    private var committed: [(download: Download, cache: CachedHash)] = []
    private var lastFlush = MonotonicClock.seconds()

    init(session: SessionConfig, root: LocalRoot, store: StateStore, settings: HTTPSettings, observer: SyncObserver,
         emit: @escaping (Event.Body) -> Void, plan: Plan, stop: StopCondition) {
        self.stop = stop
        self.session = session
        self.root = root
        self.store = store
        self.settings = settings
        self.observer = observer
        self.emit = emit
        progress = SyncProgress(session: session.name)
        progress.filesTotal = plan.downloads.count
        progress.bytesTotal = plan.downloadBytes
    }

    func run(_ downloads: [Plan.Download], tasks: [RelativePath: TransferTask], concurrency: Int) {
        let engine = DownloadEngine(settings: settings, concurrency: concurrency)
        var pending = downloads[...]
        engine.run(
            next: { () -> Download? in
                while let item = pending.popFirst() {
                    guard let task = tasks[item.entry.path] else { continue }
                    if let download = start(item, task: task) { return download }
                }
                return nil
            },
            onCheckpoint: { download in self.checkpoint(download) },
            onFinish: { batch in self.finish(batch) },
            onTick: { active in self.tick(active) },
            shouldStop: {
                if self.storeError != nil { return true }
                if let reason = self.stop.reason {
                    self.stopped = reason
                    return true
                }
                return false
            })
        flush()
        progress.active = []
        progress.bytesDone = completedBytes
        observer.progress(progress)
    }

    private func start(_ item: Plan.Download, task: TransferTask) -> Download? {
        do throws(FerryError) {
            let fd = try root.openPartial(taskID: task.id)
            do throws(FerryError) {
                let download = try Download(task: task, entry: item.entry, reason: item.reason, url: session.remote.url(for: item.entry.path),
                                            fd: fd, scheme: settings.scheme, resumeFrom: task.bytesDone, validator: task.validator)
                emit(.fileStarted(path: item.entry.path, size: item.entry.size, reason: item.reason))
                if download.requestedOffset > 0 { emit(.fileResumed(path: item.entry.path, offset: download.requestedOffset)) }
                return download
            } catch {
                close(fd)
                throw error
            }
        } catch {
            if error.category == .localIO { localIOError = localIOError ?? error.message }
            fail(item.entry.path, task, error.message)
            return nil
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

    private func tick(_ active: [Download]) {
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
            try store.markRunning(new.map { ($0.task.id, $0.task.attempts + 1) })
            for d in new { markedRunning.insert(d.task.id) }
        } catch {
            storeError = error
        }
    }

    private func finish(_ batch: [(Download, Download.Outcome)]) {
        for (download, outcome) in batch {
            let path = download.entry.path
            if let reason = download.restartReason { emit(.fileRestarted(path: path, reason: reason)) }
            switch outcome {
            case .verified:
                do throws(FerryError) {
                    let placed = try root.commit(partialFD: download.fd, taskID: download.task.id, to: path,
                                                 mode: download.entry.mode, mtime: download.entry.mtime)
                    committed.append((download, CachedHash(size: placed.size, mtime: placed.mtime, ctime: placed.ctime,
                                                           inode: placed.inode, sha256: download.entry.sha256)))
                } catch {
                    if error.category == .localIO { localIOError = localIOError ?? error.message }
                    fail(path, download.task, error.message)
                }
            case let .failed(message, keepPartial, _):
                if let code = download.localIOFailure, code == ENOSPC || code == EDQUOT || code == EROFS || code == EIO {
                    localIOError = localIOError ?? "\(session.local): \(message)"
                }
                var kept: Int64 = 0
                if keepPartial && download.syncData() {
                    kept = download.written
                } else {
                    root.removePartial(taskID: download.task.id)
                }
                fail(path, download.task, message, bytesDone: kept, validator: keepPartial ? download.validator : nil)
            case .interrupted:
                let kept = download.syncData() ? download.written : download.checkpointed
                try? store.checkpoint(download.task.id, bytesDone: kept, validator: download.validator)
                emit(.fileInterrupted(path: path, offset: kept))
            }
            download.close()
        }
        if committed.count >= 256 || MonotonicClock.seconds() - lastFlush >= 0.2 { flush() }
    }

    /// Makes the committed group durable and marks its tasks done.
    private func flush() {
        lastFlush = MonotonicClock.seconds()
        guard !committed.isEmpty else { return }
        do throws(FerryError) {
            try root.syncDirectories()
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
            try store.markFailed(task.id, attempts: task.attempts + 1, error: message, bytesDone: bytesDone, validator: validator)
        } catch {
            storeError = error
        }
        emit(.fileFailed(path: path, error: message))
    }
}

import Glibc
import FerryCore

/// The filesystem half of a pull's group commit, on a thread of its own (`ferry-commit`), so that
/// the engine thread goes on receiving while verified files are put in place. For each group (up
/// to `groupSize` files, or what came within `interval`): each file's mode and mtime are set, the
/// group's data is synced at once (`LocalRoot.syncPartials`), each file is renamed into place, and
/// the directories that changed are fsynced. Only then are the group's outcomes handed back
/// (`collect`, `drain`), and the engine thread marks the tasks done: the order of product.md §6
/// rule 2 is kept, a group at a time.
///
/// Ownership: from `start` to `stop`, the root's placing side (its directory descriptors, the
/// directories to sync, the changes it records) belongs to this thread; the engine thread only
/// opens and removes partial files, whose staging directory exists before the first file is
/// submitted. A download belongs to this thread from `submit` until its outcome is collected,
/// and is closed here. When no thread can be had, the groups are committed on the calling thread
/// as they fall due (the order and the grouping stay the same). All shared state is guarded by
/// one pthread mutex (hence `@unchecked Sendable`).
final class PullCommitter: @unchecked Sendable {
    static let groupSize = 256
    static let interval = 0.2

    enum Outcome {
        /// In place, its directory synced: the stat of the file now at its final path.
        case placed(Download, LocalEntry)
        /// Not placed: `kept` bytes of its partial stay, synced (a later run only commits them),
        /// or none (its data could not be made durable).
        case failed(Download, FerryError, kept: Int64)
    }

    /// What the groups committed since the last call gave.
    struct Results {
        var outcomes: [Outcome] = []
        /// What placing changed besides the files (`LocalRoot.Change`), for the caller to report.
        var changes: [LocalRoot.Change] = []
        /// A directory fsync failed: the files of its group are in place but not durable, and
        /// the run stops (the next one verifies them by hash).
        var syncError: FerryError?
        var isEmpty: Bool { outcomes.isEmpty && changes.isEmpty && syncError == nil }
    }

    private let root: LocalRoot
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// Signalled for the thread: a group is full, a drain is asked, or the run ends.
    private let work = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    /// Signalled by the thread after each group.
    private let committed = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    // Guarded by `mutex`.
    private var pending: [Download] = []
    private var results = Results()
    private var inFlight = 0
    private var draining = false
    private var stopping = false
    private var running = false
    private var lastCommit = MonotonicClock.seconds()

    init(root: LocalRoot) {
        self.root = root
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(work, &attributes)
        pthread_condattr_destroy(&attributes)
        pthread_cond_init(committed, nil)
    }

    deinit {
        pthread_cond_destroy(work)
        pthread_cond_destroy(committed)
        pthread_mutex_destroy(mutex)
        work.deallocate()
        committed.deallocate()
        mutex.deallocate()
    }

    /// Starts the thread; without one, groups are committed by `collect` and `drain`.
    func start() {
        locked { running = true }
        do throws(FerryError) {
            try Threads.start(name: "ferry-commit") { [self] in loop() }
        } catch {
            // Out of threads: the calling thread commits (rule 12: worked around, not fatal).
            locked { running = false }
        }
    }

    /// Ends the thread once everything submitted is committed (`drain` first to have the outcomes).
    func stop() {
        locked {
            stopping = true
            pthread_cond_signal(work)
            while running { pthread_cond_wait(committed, mutex) }
        }
    }

    /// Hands over a verified download (its partial complete, its hash checked).
    func submit(_ download: Download) {
        locked {
            pending.append(download)
            inFlight += 1
            if pending.count >= PullCommitter.groupSize { pthread_cond_signal(work) }
        }
    }

    /// The outcomes of the groups committed since the last call, without waiting.
    func collect() -> Results {
        if !isThreaded, locked({ due(now: MonotonicClock.seconds()) }) { commitPending() }
        return locked { take() }
    }

    /// Commits everything submitted and returns the outcomes (waits for the thread).
    func drain() -> Results {
        guard isThreaded else {
            commitPending()
            return locked { take() }
        }
        return locked {
            draining = true
            pthread_cond_signal(work)
            while inFlight > 0 { pthread_cond_wait(committed, mutex) }
            draining = false
            return take()
        }
    }

    // MARK: private

    private var isThreaded: Bool { locked { running } }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body()
    }

    /// Under the mutex.
    private func take() -> Results {
        defer { results = Results() }
        return results
    }

    /// Under the mutex: whether the pending files form a group now.
    private func due(now: Double) -> Bool {
        !pending.isEmpty && (pending.count >= PullCommitter.groupSize || draining || stopping || now - lastCommit >= PullCommitter.interval)
    }

    private func loop() {
        pthread_mutex_lock(mutex)
        while true {
            let now = MonotonicClock.seconds()
            if due(now: now) {
                let group = pending
                pending.removeAll(keepingCapacity: true)
                pthread_mutex_unlock(mutex)
                let done = commit(group)
                pthread_mutex_lock(mutex)
                add(done, count: group.count)
                continue
            }
            if stopping && pending.isEmpty { break }
            if pending.isEmpty {
                pthread_cond_wait(work, mutex)
            } else {
                var deadline = timespec()
                clock_gettime(CLOCK_MONOTONIC, &deadline)
                let wait = max(0.001, PullCommitter.interval - (now - lastCommit))
                let nanos = Int(deadline.tv_nsec) + Int(wait * 1e9)
                deadline.tv_sec += nanos / 1_000_000_000
                deadline.tv_nsec = nanos % 1_000_000_000
                pthread_cond_timedwait(work, mutex, &deadline)
            }
        }
        running = false
        pthread_cond_broadcast(committed)
        pthread_mutex_unlock(mutex)
    }

    /// Under the mutex: a group's outcomes are in.
    private func add(_ done: Results, count: Int) {
        results.outcomes += done.outcomes
        results.changes += done.changes
        if results.syncError == nil { results.syncError = done.syncError }
        inFlight -= count
        lastCommit = MonotonicClock.seconds()
        pthread_cond_broadcast(committed)
    }

    /// Without a thread: commits what is pending on the calling thread.
    private func commitPending() {
        let group: [Download] = locked {
            defer { pending.removeAll(keepingCapacity: true) }
            return pending
        }
        guard !group.isEmpty else { return }
        let done = commit(group)
        locked { add(done, count: group.count) }
    }

    /// One group: metadata, one sync of the data, renames, then the directories' fsync.
    private func commit(_ group: [Download]) -> Results {
        var done = Results()
        var verified: [Download] = []
        verified.reserveCapacity(group.count)
        for download in group {
            do throws(FerryError) {
                try root.setMetadata(partialFD: download.fd, of: download.entry.path, mode: download.entry.mode, mtime: download.entry.mtime)
                verified.append(download)
            } catch {
                done.outcomes.append(keep(download, error))
            }
        }
        let failed = root.syncPartials(verified.map(\.fd))
        for (i, download) in verified.enumerated() {
            let path = download.entry.path
            if let code = failed[i] {
                root.removePartial(taskID: download.task.id)
                done.outcomes.append(.failed(download, root.lostData(path, code), kept: 0))
                continue
            }
            do throws(FerryError) {
                done.outcomes.append(.placed(download, try root.place(taskID: download.task.id, at: path)))
            } catch {
                done.outcomes.append(keep(download, error))
            }
        }
        do throws(FerryError) { try root.syncDirectories() } catch { done.syncError = error }
        done.changes = root.takeChanges()
        for outcome in done.outcomes {
            switch outcome {
            case let .placed(d, _), let .failed(d, _, _): d.close()
            }
        }
        return done
    }

    /// A verified download that could not be placed: its partial is kept, synced, so that the
    /// next run only commits it.
    private func keep(_ download: Download, _ error: FerryError) -> Outcome {
        .failed(download, error, kept: download.syncData() ? download.written : 0)
    }
}

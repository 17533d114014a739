import Glibc
import FerryCore

/// The filesystem half of a pull's group commit, on a thread of its own (`ferry-commit`), so that
/// the engine thread goes on receiving while verified files are put in place. For each group (up
/// to `groupSize` files, or what came within `interval`): each file's mode and mtime are set, the
/// group's data is synced at once (`LocalRoot.syncPartials`), each file is renamed into place, and
/// the directories that changed are fsynced; only then are the group's tasks marked done, in one
/// SQLite transaction on a connection of this thread's own: the order of docs/design.md's
/// data-safety rule 2, a group at a time. The outcomes go back to the engine thread (`collect`,
/// `drain`), which counts and reports them.
///
/// Between groups, the thread also creates the partial files of the downloads due next
/// (`expect`, `takePartial`), a few dozen ahead: creating a file costs the kernel about as much
/// as receiving it, and the engine thread then spends nothing on it.
///
/// Ownership: from `start` to `stop`, the root's placing side (its directory descriptors, the
/// directories to sync, the changes it records) belongs to this thread; the engine thread only
/// opens and removes partial files, which needs nothing but the staging directory, opened before
/// `start`. A download belongs to this thread from `submit` until its outcome is collected, and
/// is closed here. At most two groups of downloads are open at once: `submit` waits while a full
/// group waits for the one being committed. When no thread can be had, the groups are committed
/// on the calling thread as they fall due (the order and the grouping stay the same) and the
/// engine thread creates its partial files. All shared state is guarded by one pthread mutex
/// (hence `@unchecked Sendable`).
final class PullCommitter: @unchecked Sendable {
    static let groupSize = 256
    static let interval = 0.2
    /// How many partial files are created ahead of the downloads that take them.
    static let openAhead = 48

    enum Outcome {
        /// In place, its directory synced, its task marked done: what the hash cache now holds
        /// for the file at its final path.
        case placed(Download, CachedHash)
        /// Not placed: `kept` bytes of its partial stay, synced (a later run only commits them),
        /// or none (its data could not be made durable).
        case failed(Download, FerryError, kept: Int64)
        /// In place, but its group's directory fsync or record failed (`Results.storeError`): not
        /// done; the next run verifies it by hash.
        case unrecorded(Download)
    }

    /// What the groups committed since the last call gave.
    struct Results {
        var outcomes: [Outcome] = []
        /// What placing changed besides the files (`LocalRoot.Change`), for the caller to report.
        var changes: [LocalRoot.Change] = []
        /// A directory fsync, or the record of the tasks done, failed: the files of that group are
        /// in place but not recorded (`unrecorded`), and the run stops (the next one verifies them
        /// by hash).
        var storeError: FerryError?
        var isEmpty: Bool { outcomes.isEmpty && changes.isEmpty && storeError == nil }
    }

    private let root: LocalRoot
    private let session: String
    /// The run's store; the thread opens a connection of its own to the same database.
    private let store: StateStore
    /// The run's: when a group is due (`interval` after the last commit).
    private let clock: any Clock
    private var threadStore: StateStore?
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
    private var committing = false
    private var lastCommit: Double
    /// The tasks expected to start, in order; the next to get a partial file; how many the
    /// engine asked for; the partial files made for them and not yet taken.
    private var upcoming: [Int64] = []
    /// Of those, the ones the engine has not asked for yet.
    private var notAsked = Set<Int64>()
    private var nextToOpen = 0
    private var asked = 0
    private var opened: [Int64: (partial: PartialFile, stray: LocalEntry.Kind?)] = [:]
    /// Asked for before their file was made here: the engine opened them itself.
    private var missed = Set<Int64>()
    /// Being made now, outside the mutex.
    private var making = Set<Int64>()

    init(root: LocalRoot, store: StateStore, session: String, clock: any Clock) {
        self.root = root
        self.store = store
        self.session = session
        self.clock = clock
        lastCommit = clock.monotonic()
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

    /// Starts the thread; without one (or without a second connection to the store), groups are
    /// committed by `collect` and `drain` on the calling thread.
    func start() {
        guard let own = try? StateStore(directory: store.directory, clock: store.clock) else { return }
        threadStore = own
        locked { running = true }
        do throws(FerryError) {
            try Threads.start(name: "ferry-commit") { [self] in loop() }
        } catch {
            // Out of threads: the calling thread commits (data-safety rule 13: worked around, not
            // fatal).
            locked { running = false }
            threadStore = nil
        }
    }

    /// Ends the thread once everything submitted is committed (`drain` first to have the
    /// outcomes). The partial files made for downloads that never started are removed (they are
    /// empty: a kept partial is closed and stays).
    func stop() {
        let left: [Int64: (partial: PartialFile, stray: LocalEntry.Kind?)] = locked {
            stopping = true
            pthread_cond_signal(work)
            while running { pthread_cond_wait(committed, mutex) }
            defer { opened.removeAll() }
            return opened
        }
        for (id, made) in left {
            var st = stat()
            if fstat(made.partial.fd, &st) == 0 && st.st_size == 0 && made.partial.length == 0 { root.removePartial(taskID: id) }
            close(made.partial.fd)
        }
    }

    /// The tasks whose downloads are expected to start, in that order: their partial files are
    /// made ahead. Call before `start`, once the root's staging directory is open.
    func expect(_ ids: [Int64]) {
        locked {
            upcoming = ids
            notAsked = Set(ids)
        }
    }

    /// The partial file made ahead for `taskID` (as `LocalRoot.openPartial` gives it), or nil:
    /// the caller opens it then.
    func takePartial(_ taskID: Int64) -> (partial: PartialFile, stray: LocalEntry.Kind?)? {
        locked {
            guard running else { return nil }
            // A retry, or a task `ferry resume` brought back, takes no place in the line.
            if notAsked.remove(taskID) != nil { asked += 1 }
            // Being made now: a moment's wait (a few files are made at a time), so that each
            // partial is opened by one thread only, and what it found there is reported once.
            while making.contains(taskID) { pthread_cond_wait(committed, mutex) }
            let made = opened.removeValue(forKey: taskID)
            // Not made yet: the engine opens it itself, and it is not made here.
            if made == nil { missed.insert(taskID) }
            if needsFiles { pthread_cond_signal(work) }
            return made
        }
    }

    /// How many partial files wait to be taken.
    var partialsReady: Int { locked { opened.count } }

    /// Hands over a verified download (its partial complete, its hash checked). Waits while a
    /// full group is already waiting for the one being committed.
    func submit(_ download: Download) {
        locked {
            while running && committing && pending.count >= PullCommitter.groupSize { pthread_cond_wait(committed, mutex) }
            pending.append(download)
            inFlight += 1
            // The first of a group starts the thread's 0.2 s clock; a full group goes at once.
            if pending.count == 1 || pending.count >= PullCommitter.groupSize { pthread_cond_signal(work) }
        }
    }

    /// The outcomes of the groups committed since the last call, without waiting.
    func collect() -> Results {
        if !isThreaded, locked({ due(now: clock.monotonic()) }) { commitPending() }
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
            let now = clock.monotonic()
            if due(now: now) {
                let group = Array(pending.prefix(PullCommitter.groupSize))
                pending.removeFirst(group.count)
                committing = true
                pthread_mutex_unlock(mutex)
                let done = commit(group)
                pthread_mutex_lock(mutex)
                committing = false
                add(done, count: group.count)
                continue
            }
            if stopping && pending.isEmpty { break }
            if !stopping, let ids = idsToOpen() {
                pthread_mutex_unlock(mutex)
                var made: [(Int64, (partial: PartialFile, stray: LocalEntry.Kind?))] = []
                var failed = false
                for id in ids {
                    // A failure is the engine's to report: it opens that file itself.
                    do throws(FerryError) { made.append((id, try root.openPartial(taskID: id))) } catch { failed = true; break }
                }
                pthread_mutex_lock(mutex)
                for (id, file) in made { opened[id] = file }
                making.removeAll()
                pthread_cond_broadcast(committed)
                if failed { upcoming.removeAll() }
                continue
            }
            if pending.isEmpty {
                pthread_cond_wait(work, mutex)
            } else {
                // The condition variable waits on the kernel's monotonic clock: the wait is
                // measured on the injected one, the deadline set on the kernel's.
                var deadline = timespec()
                clock_gettime(CLOCK_MONOTONIC, &deadline)
                let wait = max(0.001, PullCommitter.interval - (now - lastCommit))
                let nanos = Int(deadline.tv_nsec) + Int(wait * 1e9)
                deadline.tv_sec += nanos / 1_000_000_000
                deadline.tv_nsec = nanos % 1_000_000_000
                pthread_cond_timedwait(work, mutex, &deadline)
            }
        }
        threadStore = nil
        running = false
        pthread_cond_broadcast(committed)
        pthread_mutex_unlock(mutex)
    }

    /// Under the mutex: the next tasks to make partial files for (a few at a time), until
    /// `openAhead` wait to be taken; nil when none is needed now.
    private func idsToOpen() -> [Int64]? {
        var ids: [Int64] = []
        while nextToOpen < upcoming.count && nextToOpen < asked + PullCommitter.openAhead && ids.count < 16 {
            let id = upcoming[nextToOpen]
            nextToOpen += 1
            if missed.remove(id) == nil { ids.append(id) }
        }
        making = Set(ids)
        return ids.isEmpty ? nil : ids
    }

    /// Under the mutex: fewer than half of `openAhead` files wait to be taken, and more are
    /// expected: worth waking the thread for (it tops up whenever it is awake).
    private var needsFiles: Bool { nextToOpen < upcoming.count && nextToOpen - asked <= PullCommitter.openAhead / 2 }

    /// Under the mutex: a group's outcomes are in.
    private func add(_ done: Results, count: Int) {
        results.outcomes += done.outcomes
        results.changes += done.changes
        if results.storeError == nil { results.storeError = done.storeError }
        inFlight -= count
        lastCommit = clock.monotonic()
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

    /// One group: metadata, one sync of the data, renames, the directories' fsync, then the tasks
    /// marked done.
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
                let placed = try root.place(taskID: download.task.id, at: path, fd: download.fd)
                done.outcomes.append(.placed(download, CachedHash(placed, sha256: download.entry.sha256, wanted: download.entry.mtime)))
            } catch {
                done.outcomes.append(keep(download, error))
            }
        }
        do throws(FerryError) {
            try root.syncDirectories()
            var finished: [(task: TransferTask, cache: CachedHash)] = []
            for case let .placed(download, cache) in done.outcomes { finished.append((download.task, cache)) }
            // The thread's own connection; without a thread, the caller's (the engine thread's).
            try (threadStore ?? store).markDone(session: session, finished)
        } catch {
            done.storeError = error
            done.outcomes = done.outcomes.map { outcome in
                if case let .placed(d, _) = outcome { return .unrecorded(d) }
                return outcome
            }
        }
        done.changes = root.takeChanges()
        for outcome in done.outcomes {
            switch outcome {
            case let .placed(d, _), let .failed(d, _, _), let .unrecorded(d): d.close()
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

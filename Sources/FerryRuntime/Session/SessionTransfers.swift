import FerryCore

/// One file's turn in a session's transfer stage: its task, and when it may start again after a
/// failed attempt.
protocol SessionTransferItem: BackingOff {
    var task: TransferTask { get set }
    var path: RelativePath { get }
    var notBefore: Double { get set }
    var triesThisRun: Int { get set }
}

/// What the transfer stages of a pull (`PullTransfers`) and a push (`PushTransfers`) share, so
/// that downloads and uploads follow one set of rules:
/// - the line of items due now and those waiting out a retry backoff;
/// - the session's share of the engine (`transfers`, `priority`, `bwlimit`) and when to stop: a
///   failing store, a deadline or signal, or the session's conditions ending;
/// - tasks suspended by `ferry cancel` or delayed to a later time, before and during the run, and
///   `ferry resume` taking suspended ones back while the run goes on;
/// - the hold: a discretionary session whose conditions do not hold leaves its work queued,
///   waiting for them;
/// - after a failed attempt, `RetryRule`'s decision (retry, wait for connectivity, give up), and
///   the task table kept in step with each.
///
/// A subclass hands out its transfers (`next`, `finished`, `tick`) and records finished files
/// (`flush`).
class SessionTransfers<Item: SessionTransferItem>: TransferSource {
    let session: SessionConfig
    let store: StateStore
    let observer: EventSink
    let emit: (Event.Body) -> Void
    let stop: StopCondition
    /// A discretionary session's conditions (nil: transfers go at any time).
    let gate: DiscretionGate?

    /// Why the run stopped before all its transfers ended, if it did.
    private(set) var stopped: String?
    /// What the stage did with its files: transferred (the subclass counts those, and their
    /// bytes), failed, left waiting for connectivity, suspended by `ferry cancel` (before or during
    /// the run), delayed to a later time (`earliest-begin`, `--not-before`) or held by the
    /// session's conditions (`heldFor`: what they wait for).
    var counts = TransferCounts()
    /// The paths of the files that failed for good this run.
    private(set) var failedPaths = Set<RelativePath>()
    var storeError: FerryError?
    /// A failure that is the run's, not one file's (the local directory cannot be written, the
    /// server refuses every write): the run stops, it is said once, and the files stay queued.
    private(set) var abort: FerryError?
    var progress: SyncProgress
    /// Bytes of the files done (for progress).
    var completedBytes: Int64 = 0

    var ready: ArraySlice<Item> = []
    /// Items waiting out a retry backoff, soonest first.
    var backingOff: [Item] = []
    /// Items suspended by `ferry cancel`: `ferry resume` from another process can put them back in
    /// line while this run goes on (`takeResumed`).
    private var held: [Int64: Item] = [:]
    lazy var suspensions = Suspensions(session: session.name, store: store, clock: stop.clock)

    init(session: SessionConfig, store: StateStore, observer: EventSink, emit: @escaping (Event.Body) -> Void,
         stop: StopCondition, gate: DiscretionGate?) {
        self.session = session
        self.store = store
        self.observer = observer
        self.emit = emit
        self.stop = stop
        self.gate = gate
        progress = SyncProgress(session: session.name)
    }

    /// The items that may start now. Those suspended by `ferry cancel` are held for `ferry resume`,
    /// and those delayed to a later time are counted; both are reported.
    func runnable(_ items: [Item]) -> [Item] {
        let now = stop.clock.now()
        var runnable: [Item] = []
        for item in items {
            if item.task.state == .suspended {
                counts.suspended += 1
                held[item.task.id] = item
                emit(.fileSuspended(path: item.path, offset: item.task.bytesDone))
            } else if item.task.state == .delayed, let until = item.task.notBefore, until > now {
                counts.delayed += 1
                counts.nextBegin = min(counts.nextBegin ?? until, until)
                emit(.fileDelayed(path: item.path, until: until))
            } else {
                runnable.append(item)
            }
        }
        return runnable
    }

    /// Runs `ready` through the engine, unless the session's conditions hold it back; returns when
    /// all of it has ended or the run must stop. What the conditions left undone is requeued,
    /// waiting for them.
    func run(engine: TransferEngine) {
        budget = engine.budget
        if !ready.isEmpty, let reason = gate?.waitsFor() ?? budgetHold() {
            counts.heldFor = reason
        } else {
            engine.run(self)
        }
        budget?.save()
        flush()
        suspensions.acknowledgeOpen()
        if let heldFor = counts.heldFor {
            // What had not begun, or waited out a backoff, when the conditions ended; what was
            // running was counted as it was interrupted.
            let left = leftWhenHeld()
            counts.held += left.count
            do throws(FerryError) { try store.requeue(left.map(\.task.id)) } catch { storeError = error }
            // Conditions that ended as the last transfer finished held nothing back.
            if counts.held > 0 { emit(.sessionHeld(files: counts.held, waitsFor: heldFor)) } else { counts.heldFor = nil }
        }
        progress.active = []
        progress.bytesDone = completedBytes
        observer.progress(progress)
    }

    /// What waits when the session's conditions end: the items not yet begun.
    func leftWhenHeld() -> [Item] { Array(ready) + backingOff }

    /// Records the files finished since the last call (a group commit).
    func flush() {}

    // MARK: TransferSource (on the engine thread while `run` waits)

    func next() -> TransferEngine.Next { .none }
    func finished(_ batch: [(Transfer, TransferOutcome)]) {}
    func tick(_ running: [Transfer]) {}
    func started() {}

    var shouldStop: Bool {
        if storeError != nil || abort != nil { return true }
        if let reason = stop.reason {
            stopped = reason
            return true
        }
        if let reason = gate?.waitsFor() ?? budgetHold() {
            // A discretionary condition ended, or the byte budget is spent: running transfers
            // stop, and the rest waits.
            counts.heldFor = reason
            return true
        }
        return false
    }

    /// The machine's byte budget, for this run (the engine's); a session with `budget = exempt`
    /// is counted, never held.
    private var budget: (any TransferBudget)?
    var budgetRole: BudgetRole { session.budgetExempt ? .counted : .held }

    /// Why the spent budget holds this session now, nil when it does not; the time it resumes is
    /// counted (`heldUntil`).
    private func budgetHold() -> String? {
        guard !session.budgetExempt, let hold = budget?.hold() else { return nil }
        counts.heldUntil = hold.until
        return hold.reason
    }

    /// `session-transfers`, within the engine's global `transfers`.
    var limit: Int { session.transfers ?? Int.max }
    var priority: Int { session.priority }
    var bandwidth: BandwidthSchedule? { session.bwlimit }
    /// The run's own limits (`SyncOptions.limits`), set before the run.
    var runLimits: RunLimits?

    /// The item to start next: a backoff that is over, else the next in line.
    func nextDue() -> Item? {
        backingOff.popDue(now: stop.clock.monotonic()) ?? ready.popFirst()
    }

    /// Honours `ferry cancel` from another process (`Suspensions`), on every tick: asks the running
    /// transfers it suspended to stop (`cancel`), and takes those waiting out of line, held for
    /// `ferry resume`.
    func applySuspensions(running: [Int64], recordFinished: () -> Void, cancel: (Set<Int64>) -> Void) {
        do throws(FerryError) {
            guard let ids = try suspensions.check(running: running, recordFinished: recordFinished, everySecond: takeResumed) else { return }
            cancel(ids)
            func drop(_ item: Item) -> Bool {
                guard ids.contains(item.task.id) else { return false }
                counts.suspended += 1
                held[item.task.id] = item
                emit(.fileSuspended(path: item.path, offset: item.task.bytesDone))
                return true
            }
            ready = ArraySlice(ready.filter { !drop($0) })
            backingOff.removeAll { drop($0) }
        } catch {
            storeError = error
        }
    }

    /// Puts the held items that `ferry resume` made runnable back in line, with what the store
    /// holds for their tasks. A resume that comes after this run ran out of work is left to the next run.
    private func takeResumed() throws(FerryError) {
        guard !held.isEmpty else { return }
        let stillSuspended = try store.suspendedTaskIDs(session: session.name)
        for (id, item) in held where !stillSuspended.contains(id) {
            held.removeValue(forKey: id)
            guard let task = try store.task(id: id), task.state.after(.start) != nil else { continue }
            counts.suspended -= 1
            var item = item
            item.task = task
            item.notBefore = 0
            item.triesThisRun = 0
            ready.append(item)
        }
    }

    /// A transfer stopped before it ended, having kept `offset` bytes: suspended by `ferry cancel`
    /// (held for `ferry resume`), or stopped by the session's conditions ending (requeued, waiting
    /// for them), or by a deadline or signal (the next run takes it up).
    func interrupted(_ item: Item, offset: Int64, cancelled: Bool) {
        if cancelled {
            counts.suspended += 1
            held[item.task.id] = item
            emit(.fileSuspended(path: item.path, offset: offset))
            return
        }
        if counts.heldFor != nil { counts.held += 1 }
        // Back in line with its resume data: no process transfers it now.
        do throws(FerryError) { try store.requeue([item.task.id]) } catch { storeError = error }
        emit(.fileInterrupted(path: item.path, offset: offset))
    }

    /// After a failed attempt: try again after a delay, wait for connectivity, or give up
    /// (`RetryRule`). The item's task carries what the attempt kept (offset, validator).
    func retryOrFail(_ item: Item, _ failure: TransferFailure) {
        var item = item
        switch session.retryRule.decide(after: failure, task: item.task, triesThisRun: item.triesThisRun, now: stop.clock.now()) {
        case let .giveUp(message):
            fail(item.path, item.task, message, bytesDone: item.task.bytesDone, validator: item.task.validator)
        case .waitForConnectivity:
            counts.waiting += 1
            record(item.task, waiting: true, error: failure.message)
            emit(.fileWaiting(path: item.path, error: failure.message))
        case let .retry(delay):
            item.notBefore = stop.clock.monotonic() + delay
            record(item.task, waiting: failure.retry == .connectivity, error: failure.message)
            emit(.fileRetrying(path: item.path, attempt: item.triesThisRun + 1, delay: delay, error: failure.message))
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

    /// Stops the run for a cause every file shares; `item` goes back in line.
    func abort(_ error: FerryError, _ item: Item) {
        if abort == nil { abort = error }
        do throws(FerryError) { try store.requeue([item.task.id]) } catch { storeError = error }
    }

    /// A file that failed for good this run: counted, recorded with what it kept, and reported.
    func fail(_ path: RelativePath, _ task: TransferTask, _ message: String, bytesDone: Int64 = 0, validator: String? = nil) {
        counts.failed += 1
        failedPaths.insert(path)
        progress.filesFailed += 1
        do throws(FerryError) {
            try store.markFailed(task.id, attempts: task.attempts, error: message, bytesDone: bytesDone, validator: validator)
        } catch {
            storeError = error
        }
        emit(.fileFailed(path: path, error: message))
    }
}

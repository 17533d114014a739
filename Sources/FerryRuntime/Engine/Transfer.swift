import CCurl
import FerryCore

/// One request the engine runs, and the policy for what its response may do: a download writing
/// into a partial file (`Download`), and from the push issue on an upload reading from a file.
/// Every call comes on the engine's thread.
protocol Transfer: AnyObject {
    /// How the engine runs it.
    var mode: TransferMode { get }
    /// `.curl`: sets up the easy handle — the request (URL, method, headers, credentials, limits)
    /// and the callbacks, which get `context` (this transfer, retained by the engine) as their user data.
    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer)
    /// `.curl`: the verdict once libcurl reports the request done.
    func finish(code: CURLcode, errorText: String?) -> TransferOutcome
    /// `.steps`: does the next bounded piece of work (a few MiB); returns the outcome once done.
    func step() -> TransferOutcome?
    /// The outcome without any work, when the data needs none (a partial that already holds the
    /// whole file is verified from disk), or when the request cannot be made; nil to run the
    /// transfer. Called as it starts, right before `prepare`.
    func outcomeWithoutRequest() -> TransferOutcome?
    /// Set when the transfer was asked to stop (`ferry cancel`): the engine ends it as interrupted.
    var cancelRequested: Bool { get set }
    /// Called about ten times a second while the request runs (time-based checkpoints).
    func tick()
    /// The bandwidth limits over it, set by the engine before `prepare` when any limit is
    /// configured; the transfer takes its bytes through it (`Throttle.admit`, `take`).
    var throttle: Throttle? { get set }
}

extension Transfer {
    /// Most transfers always run, take no steps of their own (`.curl`) and keep no time-based
    /// checkpoints: these say so once.
    func outcomeWithoutRequest() -> TransferOutcome? { nil }
    func step() -> TransferOutcome? { nil }
    func tick() {}
}

enum TransferMode {
    /// A request through the engine's libcurl multi handle.
    case curl
    /// Local work (a `file://` remote) the engine advances a piece at a time between its polls.
    case steps
}

enum TransferOutcome {
    /// The data is complete and verified.
    case succeeded
    /// This attempt failed.
    case failed(TransferFailure)
    /// Stopped by a deadline, a signal or a cancel; what was transferred is kept as resume data.
    case interrupted
}

/// A failed attempt: what to say, whether the data so far is good resume data, and why it failed
/// (which decides whether trying again can help).
struct TransferFailure {
    let message: String
    /// Whether the partial data (up to what was written) is still good resume data.
    let keepPartial: Bool
    let cause: FailureCause
    /// What the server asked to wait (`Retry-After` on 429 and 503).
    var retryAfter: RetryAfter? = nil
    var retry: RetryClass { cause.retryClass }
}

extension RetryRule {
    /// What `task` does after this run's try number `triesThisRun` failed with `failure`, at
    /// `now`: `resource-timeout` counts from when the task was queued, and the backoff gets its
    /// jitter here.
    func decide(after failure: TransferFailure, task: TransferTask, triesThisRun: Int, now: Timestamp) -> RetryDecision {
        decide(message: failure.message, retry: failure.retry, retryAfter: failure.retryAfter?.seconds(from: now), triesThisRun: triesThisRun,
               queuedFor: now.timeInterval - task.createdAt.timeInterval, jitter: Double.random(in: 0.5...1.0))
    }
}

/// A session's work, as the engine sees it: it hands out transfers and takes their outcomes.
/// Every call comes on the engine's thread, from the moment the source is submitted until `ended`.
protocol TransferSource: AnyObject {
    /// The next transfer to start.
    func next() -> TransferEngine.Next
    /// Transfers that ended, in the order they ended.
    func finished(_ batch: [(Transfer, TransferOutcome)])
    /// About ten times a second, with the source's running transfers (progress, cancel requests,
    /// group commits); also while all of its work waits out a backoff.
    func tick(_ running: [Transfer])
    /// After the engine started transfers of this source, before any of them sends or receives a
    /// byte: a source records what it started here, in one go.
    func started()
    /// True when the source must stop now (a deadline, a signal, a failing store): its running
    /// transfers end as interrupted and it gets no more turns.
    var shouldStop: Bool { get }
    /// At most this many of its transfers run at once (within the engine's global limit).
    var limit: Int { get }
    /// Sources with a higher priority are given free slots first; equal ones take turns.
    var priority: Int { get }
    /// The rate its transfers together may use, within the engine's global limit (nil: none of its own).
    var bandwidth: BandwidthSchedule? { get }
    /// Limits of its run's own that take the place of the engine's global `transfers` and
    /// `bwlimit` for its transfers (`RunLimits`); nil: the global ones.
    var runLimits: RunLimits? { get }
}

extension TransferSource {
    func started() {}
    var priority: Int { 0 }
    var bandwidth: BandwidthSchedule? { nil }
    var runLimits: RunLimits? { nil }
}

/// A transfer's item waiting out a retry backoff until `notBefore` (monotonic seconds).
protocol BackingOff {
    var notBefore: Double { get }
}

extension Array where Element: BackingOff {
    /// Inserts `item` in order of `notBefore` (soonest first; equal ones keep their arrival order).
    mutating func insertByDue(_ item: Element) {
        insert(item, at: firstIndex { $0.notBefore > item.notBefore } ?? count)
    }

    /// Removes and returns the soonest item if it is due at `now`.
    mutating func popDue(now: Double) -> Element? {
        guard let first, first.notBefore <= now else { return nil }
        return removeFirst()
    }
}

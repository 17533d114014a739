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
    /// `.steps`: what the last `step` waits for before it can go on (a socket to become readable
    /// or writable, `poll`'s events); nil when it can go on at once. The engine polls it beside
    /// libcurl's sockets and steps the transfer when it is ready (and twice a second regardless,
    /// so a transfer can notice that it stalled).
    var waitingOn: (fd: Int32, events: Int16)? { get }
    /// Read when a request or a step ends `.succeeded`: true when the transfer goes on with
    /// another request or more steps (a delta's next range, after the local bytes before it), in
    /// whatever `mode` it now says; the engine then starts it again in the same slot.
    var continues: Bool { get }
    /// Whether it is one short request (a small file fetched whole), whose time is the path's round
    /// trip rather than its bytes: on a far path the engine runs more of these at once (`Depth`).
    var isShortRequest: Bool { get }
}

extension Transfer {
    /// Most transfers always run, take no steps of their own (`.curl`) and keep no time-based
    /// checkpoints: these say so once.
    func outcomeWithoutRequest() -> TransferOutcome? { nil }
    func step() -> TransferOutcome? { nil }
    func tick() {}
    var waitingOn: (fd: Int32, events: Int16)? { nil }
    var continues: Bool { false }
    var isShortRequest: Bool { false }
}

/// Where a download's steps read from themselves, without libcurl: a file of a `file://` remote
/// (pread), a file over SFTP (packets over a socket the engine polls). Called on the engine's thread.
protocol SteppedSource: AnyObject {
    /// Whether a resume needs the partial's validator to equal the file's (a file read over the
    /// network, which another version may replace); false: read from any offset, the whole
    /// verified by its hash all the same (a local file).
    var checksValidator: Bool { get }
    /// Gets ready to read (opens the file).
    func open() -> SteppedOpen
    /// Reads up to `count` bytes at `offset` into `buffer`.
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) -> SteppedRead
    /// What the last call waits for (`Transfer.waitingOn`).
    var waitingOn: (fd: Int32, events: Int16)? { get }
    /// Done with it (closes the file; returns a connection that is fit for more).
    func close()
    /// The reads that follow stop at `end` (a delta's range): a source that reads ahead asks for
    /// nothing past it.
    func limitReadAhead(to end: Int64)
}

extension SteppedSource {
    func limitReadAhead(to end: Int64) {}
}

/// Where an upload's steps write themselves, without libcurl: a file over SFTP (packets over a
/// socket the engine polls). It takes the bytes first; once the upload verified them (the hash it
/// expected, a local file that held still) it puts them at their final name. Called on the engine's thread.
protocol SteppedSink: AnyObject {
    /// Takes the next bytes from `next` (at most its argument; an empty buffer at the end; nil:
    /// none now, the bandwidth is spent or the file could not be read) as far as the remote takes
    /// them; `.done` once it holds all of them where they wait to be placed.
    func send(_ next: (Int) -> UnsafeRawBufferPointer?) -> SteppedWrite
    /// Puts what was sent at its final name.
    func place() -> SteppedWrite
    /// What the last call waits for (`Transfer.waitingOn`).
    var waitingOn: (fd: Int32, events: Int16)? { get }
    /// The upload is over without being placed: what it left on the remote goes, where that can
    /// be done soon (a short, bounded wait); else a later run's `removeLeftovers` takes it.
    func discard()
}

enum SteppedWrite {
    case wait
    case done
    case failed(TransferFailure)
}

enum SteppedOpen {
    /// Not yet: call again once `waitingOn` is ready.
    case wait
    /// Open: the file's validator and size, where the source knows them.
    case ready(validator: String?, size: Int64?)
    case failed(TransferFailure)
}

enum SteppedRead {
    case bytes(Int)
    case end
    case wait
    case failed(TransferFailure)
}

enum TransferMode {
    /// A request through the engine's libcurl multi handle.
    case curl
    /// Work the engine advances a piece at a time between its polls, without libcurl (a
    /// `file://` remote's file, a file over SFTP).
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
    /// What the machine's byte budget is to its transfers (`BudgetMeter`).
    var budgetRole: BudgetRole { get }
}

extension TransferSource {
    func started() {}
    var budgetRole: BudgetRole { .none }
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

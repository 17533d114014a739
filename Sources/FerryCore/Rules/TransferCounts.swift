/// What one run did with its files, counted alike in either direction: kept by a session's transfer
/// stage (`SessionTransfers`), added up in the run's result (`SyncResult`) and read for its exit
/// code (`RunOutcome`). What users see keeps its words: `sync-finished` carries `transferred` as
/// `downloaded` in `--json` and in hooks' `FERRY_FILES`, and the summary line says downloaded or
/// uploaded by the session's direction.
public struct TransferCounts: Sendable, Equatable {
    /// Files transferred: downloaded and in place (pull), or placed and checked on the remote (push).
    public var transferred = 0
    /// Files that failed for good this run (a transfer, a verification, a path in the way, a file
    /// that could not be read, a conflict).
    public var failed = 0
    /// Files deleted: from the mirror (pull, a directory in the way included), or from the remote (push).
    public var deleted = 0
    /// Bytes of files that went over the network this run: of those done, and of those that failed
    /// or stopped (what a stop keeps is resume data, and counts).
    public var bytes: Int64 = 0
    /// Bytes of files placed that a delta took from data the mirror held (pull), not the network.
    public var reused: Int64 = 0
    /// Files waiting for connectivity: the remote could not be reached for them.
    public var waiting = 0
    /// Files suspended by `ferry cancel`.
    public var suspended = 0
    /// Files delayed to a later run (`earliest-begin`, `--not-before`), and the earliest time one may begin.
    public var delayed = 0
    public var nextBegin: Timestamp?
    /// Files a discretionary session holds until its conditions hold, and the conditions they wait
    /// for; or files the spent byte budget holds, and when its next period begins (`heldUntil`).
    public var held = 0
    public var heldFor: String?
    public var heldUntil: Timestamp?

    public init(transferred: Int = 0, failed: Int = 0, deleted: Int = 0, bytes: Int64 = 0, waiting: Int = 0, suspended: Int = 0,
                delayed: Int = 0, nextBegin: Timestamp? = nil, held: Int = 0, heldFor: String? = nil) {
        self.transferred = transferred
        self.failed = failed
        self.deleted = deleted
        self.bytes = bytes
        self.waiting = waiting
        self.suspended = suspended
        self.delayed = delayed
        self.nextBegin = nextBegin
        self.held = held
        self.heldFor = heldFor
    }

    /// Files the run left for a later one: waiting, suspended, delayed or held.
    public var notDone: Int { waiting + suspended + delayed + held }

    /// What a stage counted, added to what the run counted before it: the earliest begin of both,
    /// and the conditions the stage's files wait for, if they wait.
    public static func += (run: inout TransferCounts, stage: TransferCounts) {
        run.transferred += stage.transferred
        run.failed += stage.failed
        run.deleted += stage.deleted
        run.bytes += stage.bytes
        run.reused += stage.reused
        run.waiting += stage.waiting
        run.suspended += stage.suspended
        run.delayed += stage.delayed
        if let begin = stage.nextBegin { run.nextBegin = min(run.nextBegin ?? begin, begin) }
        run.held += stage.held
        run.heldFor = stage.heldFor ?? run.heldFor
        if let until = stage.heldUntil { run.heldUntil = max(run.heldUntil ?? until, until) }
    }
}

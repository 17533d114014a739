/// The life of one file's transfer, as recorded in the task table.
public enum TaskState: String, Sendable, CaseIterable {
    /// Planned, not started.
    case queued
    /// A process is transferring it (or was, when it died: the next run resumes it).
    case running
    /// Verified and in place.
    case done
    /// Gave up; the partial file and validator are kept as resume data.
    case failed
    /// The remote could not be reached; retried (with the kept resume data) until it can, or
    /// until `resource-timeout` after the task was queued.
    case waiting
    /// Stopped by `ferry cancel`, resume data kept; runs skip it until `ferry resume`.
    case suspended
    /// Not before `notBefore` (`earliest-begin`, `--not-before`); revalidated when it comes due.
    case delayed
}

/// What happens to a task; `TaskState.after(_:)` says which state each leads to.
public enum TaskEvent: String, Sendable, CaseIterable {
    /// Recorded for a planned transfer (new, or its content changed).
    case queue
    /// Recorded for a planned transfer that may not begin before a time.
    case delay
    /// A delayed task came due and still has work to do.
    case due
    /// A transfer took it up.
    case start
    /// An attempt failed and will be tried again.
    case retry
    /// The remote could not be reached; tried again when it can be.
    case wait
    /// Given up on (kept with its resume data).
    case fail
    /// Verified and in place.
    case complete
    /// `ferry cancel`.
    case suspend
    /// `ferry resume`.
    case resume
}

extension TaskState {
    /// The state after `event`, or nil when the event does not apply to a task in this state (the
    /// row is left as it is). The rules: a suspended task stays suspended until `resume` whatever a
    /// running transfer reports, except that a file committed before the cancel reached it is done;
    /// a done task only starts again when queued again.
    public func after(_ event: TaskEvent) -> TaskState? {
        switch (event, self) {
        case (.complete, _): return .done
        case (.resume, .suspended): return .queued
        case (.resume, _): return nil
        case (.suspend, .done), (.suspend, .suspended): return nil
        case (.suspend, _): return .suspended
        case (.due, .delayed): return .queued
        case (.due, _): return nil
        case (_, .suspended): return nil
        case (.queue, _): return .queued
        case (.delay, _): return .delayed
        case (_, .done): return nil
        case (.start, _): return .running
        case (.retry, _): return .queued
        case (.wait, _): return .waiting
        case (.fail, _): return .failed
        }
    }

    /// The states `event` applies to.
    public static func applying(_ event: TaskEvent) -> [TaskState] {
        allCases.filter { $0.after(event) != nil }
    }
}

/// One row of the task table: a file's transfer within a session.
public struct TransferTask: Sendable, Equatable {
    public var id: Int64
    public var session: String
    public var path: RelativePath
    public var direction: Direction
    public var state: TaskState
    public var size: Int64?
    public var sha256: String
    /// Bytes safely on disk in the partial file (synced before recorded).
    public var bytesDone: Int64
    /// Strong ETag or Last-Modified of the partial's source, for `If-Range`.
    public var validator: String?
    public var attempts: Int
    public var lastError: String?
    public var createdAt: Timestamp
    public var updatedAt: Timestamp
    /// For delayed tasks: the earliest time to begin.
    public var notBefore: Timestamp?
    /// The URL the task was queued for (a changed URL makes a delayed task a replacement).
    public var url: String?

    public init(id: Int64, session: String, path: RelativePath, direction: Direction, state: TaskState, size: Int64?,
                sha256: String, bytesDone: Int64, validator: String?, attempts: Int, lastError: String?,
                createdAt: Timestamp, updatedAt: Timestamp, notBefore: Timestamp? = nil, url: String? = nil) {
        self.id = id
        self.session = session
        self.path = path
        self.direction = direction
        self.state = state
        self.size = size
        self.sha256 = sha256
        self.bytesDone = bytesDone
        self.validator = validator
        self.attempts = attempts
        self.lastError = lastError
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.notBefore = notBefore
        self.url = url
    }
}

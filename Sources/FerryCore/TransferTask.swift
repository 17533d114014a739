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

import CSQLite
import Glibc
import FerryCore

/// What ferry remembers about a session between runs: the manifest's validators and version.
public struct SessionRecord: Sendable {
    public var name: String
    public var manifestURL: String?
    public var manifestETag: String?
    public var manifestLastModified: String?
    public var manifestVersion: Int64?
    public var lastRunStarted: Timestamp?
    public var lastRunFinished: Timestamp?
    public var lastExitCode: Int32?
    public var lastMessage: String?
    /// Process currently running the session (while a run is going).
    public var runningPID: Int32?
    /// When the running process will stop by itself, if it has a deadline.
    public var deadline: Timestamp?
    /// The `ferry agent` that schedules the session, while one does.
    public var agentPID: Int32?
    /// What the agent says of the session between runs ("waiting for connectivity: ...").
    public var agentState: String?
    /// When the agent polls the session next.
    public var nextPoll: Timestamp?
    /// The last poll that reached the remote and applied its manifest.
    public var lastPollOK: Timestamp?
    /// What a discretionary session's transfers wait for, after a run whose conditions did not hold.
    public var heldFor: String?
    /// How many files the manifest last applied lists.
    public var manifestFiles: Int?
    /// The key that signed the manifest last applied or published (nil: unsigned).
    public var manifestSigner: PublicKey?
    /// When that manifest expires, if it says.
    public var manifestExpires: Timestamp?
}

/// What a remote said of a file right after ferry placed it there (push): a later run that finds
/// anything else there knows someone else changed it.
public struct PlacedFile: Sendable, Equatable {
    public var size: Int64
    /// ETag, else Last-Modified (or a local directory's size, mtime and inode); nil when the remote gives none.
    public var validator: String?
    public init(size: Int64, validator: String?) {
        self.size = size
        self.validator = validator
    }
}

/// The SQLite state of all sessions (WAL mode): sessions, the task table and the hash cache.
/// The only code that knows the schema. Used from one thread at a time.
public final class StateStore {
    let db: SQLiteDatabase
    public let directory: String
    /// Where the times recorded (runs, tasks, checks) come from.
    public let clock: any Clock

    /// Ordered schema migrations; `PRAGMA user_version` says how many have run. Append, never edit.
    static let migrations: [String] = [
        // 1: sessions, the per-file task table, and the hash cache keyed by what makes a hash stale.
        """
        CREATE TABLE sessions (
            name TEXT PRIMARY KEY,
            manifest_url TEXT,
            manifest_etag TEXT,
            manifest_last_modified TEXT,
            manifest_version INTEGER,
            last_run_started TEXT,
            last_run_finished TEXT,
            last_exit_code INTEGER,
            last_message TEXT,
            running_pid INTEGER,
            deadline TEXT
        );
        CREATE TABLE tasks (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            direction TEXT NOT NULL,
            state TEXT NOT NULL,
            size INTEGER,
            sha256 TEXT NOT NULL,
            bytes_done INTEGER NOT NULL DEFAULT 0,
            validator TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            UNIQUE (session, path)
        );
        CREATE TABLE hash_cache (
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            ctime_ns INTEGER NOT NULL,
            inode INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            PRIMARY KEY (session, path)
        ) WITHOUT ROWID;
        """,
        // 2: delayed tasks (earliest-begin, --not-before) and the URL a task was queued for, so a
        // task coming due can be revalidated against the newest manifest.
        """
        ALTER TABLE tasks ADD COLUMN not_before TEXT;
        ALTER TABLE tasks ADD COLUMN url TEXT;
        """,
        // 3: `ferry cancel` asks (suspend_requested counts its requests) and the process running the
        // session answers (suspend_handled) once every task it had in hand is stopped or committed,
        // so cancel can report what really happened. The hash cache keeps times as seconds and
        // nanoseconds: nanoseconds since 1970 in 64 bits end in 2262, and files carry later (and
        // earlier) times. It also remembers the mtime ferry asked for when the filesystem stored
        // another. Cached rows are carried over.
        """
        ALTER TABLE sessions ADD COLUMN suspend_requested INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN suspend_handled INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE hash_cache_3 (
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_sec INTEGER NOT NULL,
            mtime_nsec INTEGER NOT NULL,
            ctime_sec INTEGER NOT NULL,
            ctime_nsec INTEGER NOT NULL,
            inode INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            wanted_mtime_sec INTEGER,
            wanted_mtime_nsec INTEGER,
            PRIMARY KEY (session, path)
        ) WITHOUT ROWID;
        INSERT INTO hash_cache_3
            SELECT session, path, size,
                   (mtime_ns - ((mtime_ns % 1000000000) + 1000000000) % 1000000000) / 1000000000, ((mtime_ns % 1000000000) + 1000000000) % 1000000000,
                   (ctime_ns - ((ctime_ns % 1000000000) + 1000000000) % 1000000000) / 1000000000, ((ctime_ns % 1000000000) + 1000000000) % 1000000000,
                   inode, sha256, NULL, NULL
            FROM hash_cache;
        DROP TABLE hash_cache;
        ALTER TABLE hash_cache_3 RENAME TO hash_cache;
        """,
        // 4: the task table checks its states and directions, so a row no ferry wrote (or a bug)
        // cannot hold a state the state machine (TaskState.after) does not know. A row with an
        // unknown state is carried over as queued: the next run checks it against the manifest.
        """
        CREATE TABLE tasks_4 (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            direction TEXT NOT NULL CHECK (direction IN ('pull', 'push')),
            state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed', 'waiting', 'suspended', 'delayed')),
            size INTEGER,
            sha256 TEXT NOT NULL,
            bytes_done INTEGER NOT NULL DEFAULT 0 CHECK (bytes_done >= 0),
            validator TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            not_before TEXT,
            url TEXT,
            UNIQUE (session, path)
        );
        INSERT INTO tasks_4
            SELECT id, session, path,
                   CASE WHEN direction IN ('pull', 'push') THEN direction ELSE 'pull' END,
                   CASE WHEN state IN ('queued', 'running', 'done', 'failed', 'waiting', 'suspended', 'delayed') THEN state ELSE 'queued' END,
                   size, sha256, max(bytes_done, 0), validator, attempts, last_error, created_at, updated_at, not_before, url
            FROM tasks;
        DROP TABLE tasks;
        ALTER TABLE tasks_4 RENAME TO tasks;
        """,
        // 5: the same checks written as OR chains. SQLite evaluates a CHECK's `IN (list)` by
        // building a temporary b-tree for the list on every statement, which made each task insert
        // and update 1.5-2x slower (10,000 small files: ~0.15 s); `=` comparisons cost nothing.
        """
        CREATE TABLE tasks_5 (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            direction TEXT NOT NULL CHECK (direction = 'pull' OR direction = 'push'),
            state TEXT NOT NULL CHECK (state = 'queued' OR state = 'running' OR state = 'done' OR state = 'failed'
                                       OR state = 'waiting' OR state = 'suspended' OR state = 'delayed'),
            size INTEGER,
            sha256 TEXT NOT NULL,
            bytes_done INTEGER NOT NULL DEFAULT 0 CHECK (bytes_done >= 0),
            validator TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            not_before TEXT,
            url TEXT,
            UNIQUE (session, path)
        );
        INSERT INTO tasks_5 SELECT * FROM tasks;
        DROP TABLE tasks;
        ALTER TABLE tasks_5 RENAME TO tasks;
        """,
        // 6: what `ferry agent` says of a session between runs, for status and metrics.
        """
        ALTER TABLE sessions ADD COLUMN agent_pid INTEGER;
        ALTER TABLE sessions ADD COLUMN agent_state TEXT;
        ALTER TABLE sessions ADD COLUMN next_poll TEXT;
        ALTER TABLE sessions ADD COLUMN last_poll_ok TEXT;
        CREATE INDEX tasks_by_state ON tasks (session, state);
        """,
        // 7: what a discretionary session's transfers wait for.
        """
        ALTER TABLE sessions ADD COLUMN held_for TEXT;
        """,
        // 8: the manifest's file count, so an unchanged poll says it without counting the hash cache.
        """
        ALTER TABLE sessions ADD COLUMN manifest_files INTEGER;
        """,
        // 9: push: what the remote said of each file right after ferry placed it there (its size
        // and validator), so a later run tells a file someone else changed from one ferry placed;
        // when the session last checked every published file on the remote; and the warnings said
        // once per path (a symlink in a push source), with what each was about when it was said.
        """
        CREATE TABLE placed (
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER NOT NULL,
            validator TEXT,
            PRIMARY KEY (session, path)
        ) WITHOUT ROWID;
        ALTER TABLE sessions ADD COLUMN remote_checked TEXT;
        CREATE TABLE notices (
            session TEXT NOT NULL,
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            signature TEXT NOT NULL,
            PRIMARY KEY (session, kind, key)
        ) WITHOUT ROWID;
        """,
        // 10: push to S3: a multipart upload in flight, with what it is for, and each part the
        // store acknowledged, so a run after a crash resumes it (`UploadJournal`).
        """
        ALTER TABLE tasks ADD COLUMN upload_id TEXT;
        ALTER TABLE tasks ADD COLUMN upload_content TEXT;
        CREATE TABLE upload_parts (
            task INTEGER NOT NULL,
            number INTEGER NOT NULL,
            size INTEGER NOT NULL,
            etag TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            PRIMARY KEY (task, number)
        ) WITHOUT ROWID;
        """,
        // 11: the key whose signature vouched for the manifest last applied or published
        // (`ed25519:BASE64`; NULL: unsigned), for status, and so that an unchanged poll after
        // trusted-keys dropped that key does not stand for an accepted manifest; and when that
        // manifest expires, so a push re-issues it in time without parsing it.
        """
        ALTER TABLE sessions ADD COLUMN manifest_signer TEXT;
        ALTER TABLE sessions ADD COLUMN manifest_expires TEXT;
        """,
    ]

    /// `TaskState.after(event)` as SQL: the expression a row's new state is set to, so the table
    /// moves exactly as the core's state machine says and no state rule is spelled out here.
    static func stateAfter(_ event: TaskEvent) -> String { stateAfterSQL[event]! }

    /// True (in SQL) for a row `event` applies to. An OR chain, not `IN (list)`: SQLite builds a
    /// temporary b-tree for an IN list each time a statement runs.
    static func applies(_ event: TaskEvent) -> String { appliesSQL[event]! }

    // Spelled out once: statements run once per file or per engine round name them.
    private static let appliesSQL: [TaskEvent: String] = Dictionary(uniqueKeysWithValues: TaskEvent.allCases.map { event in
        (event, "(" + TaskState.applying(event).map { "state = '\($0.rawValue)'" }.joined(separator: " OR ") + ")")
    })
    private static let stateAfterSQL: [TaskEvent: String] = Dictionary(uniqueKeysWithValues: TaskEvent.allCases.map { event in
        let targets = Set(TaskState.applying(event).compactMap { $0.after(event) })
        precondition(targets.count == 1, "every state an event applies to must move to the same one")
        return (event, "CASE WHEN \(appliesSQL[event]!) THEN '\(targets.first!.rawValue)' ELSE state END")
    })

    /// Opens (creating if needed) `<directory>/ferry.db` and brings its schema up to date.
    public init(directory: String, clock: any Clock) throws(FerryError) {
        self.directory = directory
        self.clock = clock
        // State is private to its owner whatever the umask (docs/design.md, data-safety rule 12): the directory
        // 0700, the database 0600 before its WAL exists (SQLite gives the -wal and -shm files the
        // database's mode). By name only: closing any descriptor of the database would drop the
        // locks SQLite holds on it for the process's other connections.
        try FileSystem.makePrivateDirectory(directory)
        let path = directory + "/ferry.db"
        db = try SQLiteDatabase(path: path)
        for file in [path, path + "-wal", path + "-shm"] { FileSystem.makePrivate(file) }
        try db.executeRetryingWhileBusy("PRAGMA journal_mode=WAL", clock: clock)
        for file in [path, path + "-wal", path + "-shm"] { FileSystem.makePrivate(file) }
        try db.execute("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
        if try db.userVersion < StateStore.migrations.count {
            // Another ferry may be migrating at this moment: read the version again under the write lock.
            try db.transaction { () throws(FerryError) in
                let version = try db.userVersion
                for (i, sql) in StateStore.migrations.enumerated() where i >= version {
                    try db.execute(sql)
                }
                if version < StateStore.migrations.count { try db.execute("PRAGMA user_version = \(StateStore.migrations.count)") }
            }
        }
        let version = try db.userVersion
        if version > StateStore.migrations.count {
            throw .localIO("state database \(db.path) was written by a newer ferry (schema \(version))",
                           hint: "run the newer ferry, or point [agent] state at another directory")
        }
    }

    // MARK: sessions

    public func session(_ name: String) throws(FerryError) -> SessionRecord? {
        let s = try db.prepare("""
            SELECT manifest_url, manifest_etag, manifest_last_modified, manifest_version, last_run_started,
                   last_run_finished, last_exit_code, last_message, running_pid, deadline,
                   agent_pid, agent_state, next_poll, last_poll_ok, held_for, manifest_files, manifest_signer, manifest_expires FROM sessions WHERE name = ?
            """).bind(.text(name))
        guard try s.step() else { return nil }
        return SessionRecord(
            name: name, manifestURL: s.text(0), manifestETag: s.text(1), manifestLastModified: s.text(2),
            manifestVersion: s.isNull(3) ? nil : s.int(3), lastRunStarted: s.text(4).flatMap(Timestamp.init(rfc3339:)),
            lastRunFinished: s.text(5).flatMap(Timestamp.init(rfc3339:)), lastExitCode: s.isNull(6) ? nil : Int32(s.int(6)),
            lastMessage: s.text(7), runningPID: s.isNull(8) ? nil : Int32(s.int(8)), deadline: s.text(9).flatMap(Timestamp.init(rfc3339:)),
            agentPID: s.isNull(10) ? nil : Int32(s.int(10)), agentState: s.text(11), nextPoll: s.text(12).flatMap(Timestamp.init(rfc3339:)),
            lastPollOK: s.text(13).flatMap(Timestamp.init(rfc3339:)), heldFor: s.text(14), manifestFiles: s.isNull(15) ? nil : Int(s.int(15)),
            manifestSigner: s.text(16).flatMap(PublicKey.init(text:)), manifestExpires: s.text(17).flatMap(Timestamp.init(rfc3339:)))
    }

    /// What the agent `pid` says of a session between runs; a nil pid says no agent schedules it.
    public func recordAgentState(session: String, pid: Int32?, state: String?, nextPoll: Timestamp?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET agent_pid = ?, agent_state = ?, next_poll = ? WHERE name = ?")
            .bind(.optional(pid.map(Int64.init)), .optional(state), .optional(nextPoll?.rfc3339), .text(session)).run()
    }

    /// What the session's transfers wait for (discretionary conditions), or nil when none were held.
    public func recordHold(session: String, waitsFor: String?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET held_for = ? WHERE name = ?").bind(.optional(waitsFor), .text(session)).run()
    }

    /// A poll reached the remote and its manifest was applied.
    public func recordPollSucceeded(session: String, at time: Timestamp) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET last_poll_ok = ? WHERE name = ?").bind(.text(time.rfc3339), .text(session)).run()
    }

    private func ensureSession(_ name: String) throws(FerryError) {
        try db.prepare("INSERT OR IGNORE INTO sessions (name) VALUES (?)").bind(.text(name)).run()
    }

    public func saveManifest(session: String, url: String, etag: String?, lastModified: String?, version: Int64?, files: Int,
                             signer: PublicKey?, expires: Timestamp?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("""
            UPDATE sessions SET manifest_url = ?, manifest_etag = ?, manifest_last_modified = ?, manifest_version = ?, manifest_files = ?,
                                manifest_signer = ?, manifest_expires = ? WHERE name = ?
            """)
            .bind(.text(url), .optional(etag), .optional(lastModified), .optional(version), .int(Int64(files)), .optional(signer?.description),
                  .optional(expires?.rfc3339), .text(session)).run()
    }

    /// New validators for the manifest the session already has (the remote sent the same bytes
    /// again, with validators that now hold).
    public func saveManifestValidators(session: String, etag: String?, lastModified: String?) throws(FerryError) {
        try db.prepare("UPDATE sessions SET manifest_etag = ?, manifest_last_modified = ? WHERE name = ?")
            .bind(.optional(etag), .optional(lastModified), .text(session)).run()
    }

    public func recordRunStarted(session: String, pid: Int32, deadline: Timestamp?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET last_run_started = ?, running_pid = ?, deadline = ? WHERE name = ?")
            .bind(.text(clock.now().rfc3339), .int(Int64(pid)), .optional(deadline?.rfc3339), .text(session)).run()
    }

    public func recordRunFinished(session: String, exitCode: Int32, message: String?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET last_run_finished = ?, last_exit_code = ?, last_message = ?, running_pid = NULL, deadline = NULL WHERE name = ?")
            .bind(.text(clock.now().rfc3339), .int(Int64(exitCode)), .optional(message), .text(session)).run()
    }

    // MARK: tasks

    private static let taskColumns = "id, session, path, direction, state, size, sha256, bytes_done, validator, attempts, last_error, created_at, updated_at, not_before, url"

    private func task(from s: SQLiteStatement) -> TransferTask {
        TransferTask(
            id: s.int(0), session: s.text(1) ?? "", path: RelativePath(trusted: s.text(2) ?? ""),
            direction: Direction(rawValue: s.text(3) ?? "") ?? .pull, state: TaskState(rawValue: s.text(4) ?? "") ?? .queued,
            size: s.isNull(5) ? nil : s.int(5), sha256: s.text(6) ?? "", bytesDone: s.int(7), validator: s.text(8),
            attempts: Int(s.int(9)), lastError: s.text(10),
            createdAt: s.text(11).flatMap(Timestamp.init(rfc3339:)) ?? Timestamp(seconds: 0),
            updatedAt: s.text(12).flatMap(Timestamp.init(rfc3339:)) ?? Timestamp(seconds: 0),
            notBefore: s.text(13).flatMap(Timestamp.init(rfc3339:)), url: s.text(14))
    }

    public func tasks(session: String) throws(FerryError) -> [TransferTask] {
        let s = try db.prepare("SELECT \(StateStore.taskColumns) FROM tasks WHERE session = ? ORDER BY path").bind(.text(session))
        var out: [TransferTask] = []
        while try s.step() { out.append(task(from: s)) }
        return out
    }

    /// What `queueDownloads` did: the task of each entry (in the entries' order), and the delayed
    /// tasks that came due.
    public struct Queued {
        public var tasks: [TransferTask] = []
        public var due: [(path: RelativePath, disposition: DelayedRequest.Disposition, reason: String)] = []

        /// The task of the entry at `path` (a linear search: for a few entries).
        public func task(_ path: RelativePath) -> TransferTask? { tasks.first { $0.path == path } }
    }

    /// Records a download task per entry, in one transaction. An existing row for the same content
    /// keeps its resume data; a suspended one stays suspended; a delayed one stays delayed until
    /// due, and is then revalidated (continue, or replace when the file changed). New tasks begin
    /// no earlier than `notBefore`. A task keeps the URL it was queued with only while it is
    /// delayed (the one way a pull task becomes delayed is here): one that comes due is checked
    /// against that URL (`DelayedRequest`); the others are fetched from where the manifest says
    /// when they start.
    public func queueDownloads(session: String, entries: [ManifestEntry], urlFor: (ManifestEntry) -> String,
                               notBefore: Timestamp?) throws(FerryError) -> Queued {
        guard !entries.isEmpty else { return Queued() }
        let nowTime = clock.now()
        let now = nowTime.rfc3339
        let delayUntil = notBefore.flatMap { $0 > nowTime ? $0 : nil }
        // Read and written in one transaction: a `ferry cancel` in between is never overwritten.
        return try db.transaction { () throws(FerryError) -> Queued in
            var existing: [RelativePath: TransferTask] = [:]
            let rows = try db.prepare("""
                SELECT id, path, state, size, sha256, bytes_done, validator, attempts, created_at, not_before, url FROM tasks WHERE session = ?
                """).bind(.text(session))
            while try rows.step() {
                let path = RelativePath(trusted: rows.text(1) ?? "")
                existing[path] = TransferTask(
                    id: rows.int(0), session: session, path: path, direction: .pull, state: TaskState(rawValue: rows.text(2) ?? "") ?? .queued,
                    size: rows.isNull(3) ? nil : rows.int(3), sha256: rows.text(4) ?? "", bytesDone: rows.int(5), validator: rows.text(6),
                    attempts: Int(rows.int(7)), lastError: nil, createdAt: rows.text(8).flatMap(Timestamp.init(rfc3339:)) ?? nowTime,
                    updatedAt: Timestamp(seconds: 0), notBefore: rows.text(9).flatMap(Timestamp.init(rfc3339:)), url: rows.text(10))
            }
            let insert = try db.prepare("""
                INSERT INTO tasks (session, path, direction, state, size, sha256, bytes_done, validator, attempts, last_error, created_at, updated_at, not_before, url)
                VALUES (?, ?, 'pull', ?, ?, ?, 0, NULL, 0, NULL, ?, ?, ?, ?)
                """)
            let reset = try db.prepare("""
                UPDATE tasks SET state = ?, size = ?, sha256 = ?, bytes_done = 0, validator = NULL, attempts = 0,
                last_error = NULL, created_at = ?, updated_at = ?, not_before = ?, url = ? WHERE id = ?
                """)
            let requeue = try db.prepare("UPDATE tasks SET state = \(StateStore.stateAfter(.queue)), not_before = NULL, url = NULL, updated_at = ? WHERE id = ?")
            var out = Queued()
            out.tasks.reserveCapacity(entries.count)
            let delayedUntil = delayUntil?.rfc3339
            for e in entries {
                let sha256 = e.sha256.hex
                guard var t = existing[e.path] else {
                    let state: TaskState = delayUntil == nil ? .queued : .delayed
                    let url = delayUntil == nil ? nil : urlFor(e)
                    try insert.bind(.text(session), .text(e.path.string), .text(state.rawValue), .optional(e.size), .text(sha256),
                                    .text(now), .text(now), .optional(delayedUntil), .optional(url)).run()
                    out.tasks.append(TransferTask(id: sqlite3_last_insert_rowid(db.handle), session: session, path: e.path, direction: .pull,
                                                  state: state, size: e.size, sha256: sha256, bytesDone: 0, validator: nil, attempts: 0,
                                                  lastError: nil, createdAt: nowTime, updatedAt: nowTime, notBefore: delayUntil, url: url))
                    continue
                }
                let sameContent = t.sha256 == sha256 && t.size == e.size
                if t.state == .delayed, let due = t.notBefore, due > nowTime {
                    // Not due yet: left as it is; revalidated when it comes due.
                } else if t.state == .delayed {
                    let (disposition, reason) = DelayedRequest.disposition(for: t, entry: e, url: urlFor(e))
                    out.due.append((e.path, disposition, reason))
                    if disposition == .proceed {
                        try requeue.bind(.text(now), .int(t.id)).run()
                        t.state = .queued
                        t.url = nil
                    } else {
                        try reset.bind(.text(TaskState.queued.rawValue), .optional(e.size), .text(sha256), .text(now), .text(now), nil, nil, .int(t.id)).run()
                        t = TransferTask(id: t.id, session: session, path: e.path, direction: .pull, state: .queued, size: e.size, sha256: sha256,
                                         bytesDone: 0, validator: nil, attempts: 0, lastError: nil, createdAt: nowTime, updatedAt: nowTime, url: nil)
                    }
                    t.notBefore = nil
                } else if sameContent && t.state == .suspended {
                    // Suspended by `ferry cancel`: stays so, resume data and all, until `ferry resume`.
                } else if sameContent && t.state != .done {
                    try requeue.bind(.text(now), .int(t.id)).run()
                    t.state = .queued
                    t.url = nil
                } else {
                    // New content: no resume data. A suspended task stays suspended; a new task may be delayed.
                    let state = t.state.after(delayUntil == nil ? .queue : .delay) ?? t.state
                    let url = state == .delayed ? urlFor(e) : nil
                    try reset.bind(.text(state.rawValue), .optional(e.size), .text(sha256), .text(now), .text(now),
                                   .optional(state == .delayed ? delayUntil?.rfc3339 : nil), .optional(url), .int(t.id)).run()
                    t = TransferTask(id: t.id, session: session, path: e.path, direction: .pull, state: state, size: e.size, sha256: sha256,
                                     bytesDone: 0, validator: nil, attempts: 0, lastError: nil, createdAt: nowTime, updatedAt: nowTime,
                                     notBefore: state == .delayed ? delayUntil : nil, url: url)
                }
                out.tasks.append(t)
            }
            return out
        }
    }

    /// Delayed tasks that need no download any more (their file is already in place), now due:
    /// removed, and returned so the caller can report them cancelled.
    public func dropDueDelayedTasks(session: String, keeping downloads: Set<RelativePath>) throws(FerryError) -> [TransferTask] {
        let now = clock.now()
        var stale: [TransferTask] = []
        let rows = try db.prepare("SELECT \(StateStore.taskColumns) FROM tasks WHERE session = ? AND state = '\(TaskState.delayed.rawValue)'").bind(.text(session))
        while try rows.step() {
            let t = task(from: rows)
            if !downloads.contains(t.path) && (t.notBefore.map { $0 <= now } ?? true) { stale.append(t) }
        }
        guard !stale.isEmpty else { return [] }
        try db.transaction { () throws(FerryError) in
            let delete = try db.prepare("DELETE FROM tasks WHERE id = ?")
            for t in stale { try delete.bind(.int(t.id)).run() }
        }
        return stale
    }

    /// Removes the rows of paths the manifest no longer lists; returns their ids (their partial
    /// files are now garbage).
    public func pruneTasks(session: String, keeping wanted: (RelativePath) -> Bool) throws(FerryError) -> [(id: Int64, path: RelativePath, delayed: Bool)] {
        var gone: [(id: Int64, path: RelativePath, delayed: Bool)] = []
        let rows = try db.prepare("SELECT id, path, state FROM tasks WHERE session = ?").bind(.text(session))
        while try rows.step() {
            let path = RelativePath(trusted: rows.text(1) ?? "")
            if !wanted(path) { gone.append((rows.int(0), path, rows.text(2) == TaskState.delayed.rawValue)) }
        }
        guard !gone.isEmpty else { return [] }
        try db.transaction { () throws(FerryError) in
            let delete = try db.prepare("DELETE FROM tasks WHERE id = ?")
            let parts = try db.prepare("DELETE FROM upload_parts WHERE task = ?")
            for g in gone {
                try delete.bind(.int(g.id)).run()
                try parts.bind(.int(g.id)).run()
            }
        }
        return gone
    }

    // MARK: uploads in parts (`UploadJournal`)

    /// The multipart upload recorded for a task, with its acknowledged parts.
    func journaledUpload(task: Int64) throws(FerryError) -> JournaledUpload? {
        let row = try db.prepare("SELECT id, path, upload_id, upload_content FROM tasks WHERE id = ? AND upload_id IS NOT NULL").bind(.int(task))
        guard try row.step() else { return nil }
        return try journaled(row)
    }

    /// Every multipart upload the session's tasks record.
    func journaledUploads(session: String) throws(FerryError) -> [JournaledUpload] {
        let rows = try db.prepare("SELECT id, path, upload_id, upload_content FROM tasks WHERE session = ? AND upload_id IS NOT NULL")
            .bind(.text(session))
        var out: [JournaledUpload] = []
        while try rows.step() { out.append(try journaled(rows)) }
        return out
    }

    private func journaled(_ row: SQLiteStatement) throws(FerryError) -> JournaledUpload {
        let task = row.int(0)
        var upload = JournaledUpload(task: task, path: RelativePath(trusted: row.text(1) ?? ""), uploadID: row.text(2) ?? "",
                                     content: row.text(3) ?? "", parts: [])
        let parts = try db.prepare("SELECT number, size, etag, sha256 FROM upload_parts WHERE task = ? ORDER BY number").bind(.int(task))
        while try parts.step() {
            guard let sha = parts.text(3).flatMap(SHA256Digest.init(hex:)) else { continue }
            upload.parts.append(UploadedPart(number: Int(parts.int(0)), size: parts.int(1), etag: parts.text(2) ?? "", sha256: sha))
        }
        return upload
    }

    func beginJournaledUpload(task: Int64, uploadID: String, content: String) throws(FerryError) {
        try db.transaction { () throws(FerryError) in
            try db.prepare("DELETE FROM upload_parts WHERE task = ?").bind(.int(task)).run()
            try db.prepare("UPDATE tasks SET upload_id = ?, upload_content = ? WHERE id = ?").bind(.text(uploadID), .text(content), .int(task)).run()
        }
    }

    func recordUploadedPart(task: Int64, _ part: UploadedPart) throws(FerryError) {
        try db.cached("INSERT OR REPLACE INTO upload_parts (task, number, size, etag, sha256) VALUES (?, ?, ?, ?, ?)")
            .bind(.int(task), .int(Int64(part.number)), .int(part.size), .text(part.etag), .text(part.sha256.hex)).run()
    }

    func clearJournaledUpload(task: Int64) throws(FerryError) {
        try db.transaction { () throws(FerryError) in
            try db.prepare("DELETE FROM upload_parts WHERE task = ?").bind(.int(task)).run()
            try db.prepare("UPDATE tasks SET upload_id = NULL, upload_content = NULL WHERE id = ?").bind(.int(task)).run()
        }
    }

    /// Marks done every unfinished task whose path the run does not transfer (`transferring`): its
    /// file is in place as the plan wants it (a run killed between placing a file and recording it
    /// left the row running or queued, and no later run would touch it). Delayed tasks are left
    /// to come due. Returns how many were settled.
    @discardableResult
    public func settleTasks(session: String, transferring: Set<RelativePath>) throws(FerryError) -> Int {
        var settled: [Int64] = []
        let rows = try db.prepare("SELECT id, path, state FROM tasks WHERE session = ? AND state != 'done' AND state != 'delayed'").bind(.text(session))
        while try rows.step() {
            if !transferring.contains(RelativePath(trusted: rows.text(1) ?? "")) { settled.append(rows.int(0)) }
        }
        guard !settled.isEmpty else { return 0 }
        let now = clock.now().rfc3339
        try db.transaction { () throws(FerryError) in
            let update = try db.cached("UPDATE tasks SET state = 'done', last_error = NULL, updated_at = ? WHERE id = ?")
            for id in settled { try update.bind(.text(now), .int(id)).run() }
        }
        return settled.count
    }

    /// Suspends tasks (all unfinished ones of the session when `ids` is nil), keeping their resume
    /// data. Returns the tasks now suspended, and the number of this request: the process running
    /// the session answers it with `acknowledgeSuspensions` once it has stopped (or committed) them.
    public func suspend(session: String, ids: [Int64]?) throws(FerryError) -> (tasks: [TransferTask], request: Int64) {
        try ensureSession(session)
        return try db.transaction { () throws(FerryError) -> ([TransferTask], Int64) in
            let tasks = try changeState(session: session, ids: ids, .suspend)
            try db.prepare("UPDATE sessions SET suspend_requested = suspend_requested + 1 WHERE name = ?").bind(.text(session)).run()
            return (tasks, try suspendRequests(session: session).requested)
        }
    }

    /// How many suspension requests `ferry cancel` made for the session, and how many of them the
    /// process running it has answered.
    public func suspendRequests(session: String) throws(FerryError) -> (requested: Int64, handled: Int64) {
        let s = try db.cached("SELECT suspend_requested, suspend_handled FROM sessions WHERE name = ?").bind(.text(session))
        defer { sqlite3_reset(s.statement) }
        return try s.step() ? (s.int(0), s.int(1)) : (0, 0)
    }

    /// Answers suspension requests up to `request`: the tasks they named are stopped with their
    /// resume data recorded, or were committed (and are done).
    public func acknowledgeSuspensions(session: String, upTo request: Int64) throws(FerryError) {
        try db.cached("UPDATE sessions SET suspend_handled = max(suspend_handled, ?) WHERE name = ?").bind(.int(request), .text(session)).run()
    }

    /// Makes suspended tasks runnable again. Returns them.
    public func unsuspend(session: String, ids: [Int64]?) throws(FerryError) -> [TransferTask] {
        try db.transaction { () throws(FerryError) -> [TransferTask] in
            try changeState(session: session, ids: ids, .resume)
        }
    }

    /// Call inside a transaction.
    private func changeState(session: String, ids: [Int64]?, _ event: TaskEvent) throws(FerryError) -> [TransferTask] {
        let changed = try tasks(session: session).compactMap { t -> TransferTask? in
            guard ids.map({ $0.contains(t.id) }) ?? true, let next = t.state.after(event) else { return nil }
            var t = t
            t.state = next
            return t
        }
        let update = try db.prepare("UPDATE tasks SET state = ?, updated_at = ? WHERE id = ?")
        let now = clock.now().rfc3339
        for t in changed { try update.bind(.text(t.state.rawValue), .text(now), .int(t.id)).run() }
        return changed
    }

    /// The task with this id, in any session.
    /// How many of the session's tasks are in each state other than done (for metrics: counted
    /// through the (session, state) index, without reading a million done rows).
    public func openTaskCounts(session: String) throws(FerryError) -> [TaskState: Int] {
        var out: [TaskState: Int] = [:]
        for state in TaskState.allCases where state != .done {
            let s = try db.prepare("SELECT count(*) FROM tasks WHERE session = ? AND state = ?").bind(.text(session), .text(state.rawValue))
            if try s.step() { out[state] = Int(s.int(0)) }
        }
        return out
    }

    public func task(id: Int64) throws(FerryError) -> TransferTask? {
        let s = try db.prepare("SELECT \(StateStore.taskColumns) FROM tasks WHERE id = ?").bind(.int(id))
        return try s.step() ? task(from: s) : nil
    }

    /// Ids of the session's suspended tasks (polled by a running transfer to honour `ferry cancel`).
    public func suspendedTaskIDs(session: String) throws(FerryError) -> Set<Int64> {
        try taskIDs(session: session, state: .suspended)
    }

    /// Ids of the session's tasks in `state`.
    public func taskIDs(session: String, state: TaskState) throws(FerryError) -> Set<Int64> {
        var ids = Set<Int64>()
        let rows = try db.cached("SELECT id FROM tasks WHERE session = ? AND state = ?").bind(.text(session), .text(state.rawValue))
        while try rows.step() { ids.insert(rows.int(0)) }
        return ids
    }

    /// Ids of all the session's tasks.
    public func taskIDs(session: String) throws(FerryError) -> Set<Int64> {
        var ids = Set<Int64>()
        let rows = try db.prepare("SELECT id FROM tasks WHERE session = ?").bind(.text(session))
        while try rows.step() { ids.insert(rows.int(0)) }
        return ids
    }

    /// Ids of tasks that may own a partial file (every state but done).
    public func unfinishedTaskIDs(session: String) throws(FerryError) -> Set<Int64> {
        var ids = Set<Int64>()
        let rows = try db.prepare("SELECT id FROM tasks WHERE session = ? AND state != '\(TaskState.done.rawValue)'").bind(.text(session))
        while try rows.step() { ids.insert(rows.int(0)) }
        return ids
    }

    /// Marks tasks as being transferred (with their attempt count), in one transaction.
    public func markRunning(_ tasks: [(id: Int64, attempts: Int)]) throws(FerryError) {
        guard !tasks.isEmpty else { return }
        let now = clock.now().rfc3339
        try db.transaction { () throws(FerryError) in
            let s = try db.cached("UPDATE tasks SET state = \(StateStore.stateAfter(.start)), attempts = ?, updated_at = ? WHERE id = ? AND \(StateStore.applies(.start))")
            for t in tasks { try s.bind(.int(Int64(t.attempts)), .text(now), .int(t.id)).run() }
        }
    }

    /// Records push tasks for `entries` (the uploads a plan made): a new row, or the path's row
    /// started over for this content, delayed to `notBefore` when that is still to come
    /// (`earliest-begin`, `--not-before`); a task suspended by `ferry cancel` stays suspended. A
    /// task for the same content still owed since an earlier run keeps its row as it is: delayed to
    /// its time, or back in line with when it was first queued (resource-timeout counts from then)
    /// and its attempts.
    public func queueUploads(session: String, entries: [ManifestEntry], notBefore: Timestamp? = nil) throws(FerryError) -> [RelativePath: TransferTask] {
        guard !entries.isEmpty else { return [:] }
        let nowTime = clock.now()
        let now = nowTime.rfc3339
        let delayUntil = notBefore.flatMap { $0 > nowTime ? $0 : nil }
        let fresh: TaskState = delayUntil == nil ? .queued : .delayed
        return try db.transaction { () throws(FerryError) -> [RelativePath: TransferTask] in
            var out: [RelativePath: TransferTask] = [:]
            let find = try db.prepare("SELECT id, state, sha256, size, created_at, attempts, not_before FROM tasks WHERE session = ? AND path = ?")
            let insert = try db.prepare("""
                INSERT INTO tasks (session, path, direction, state, size, sha256, bytes_done, validator, attempts, last_error, created_at, updated_at, not_before)
                VALUES (?, ?, 'push', ?, ?, ?, 0, NULL, 0, NULL, ?, ?, ?)
                """)
            let reset = try db.prepare("""
                UPDATE tasks SET direction = 'push', state = ?, size = ?, sha256 = ?, bytes_done = 0, validator = NULL, attempts = 0,
                last_error = NULL, created_at = ?, updated_at = ?, not_before = ?, url = NULL WHERE id = ?
                """)
            let requeue = try db.prepare("UPDATE tasks SET state = 'queued', updated_at = ? WHERE id = ?")
            for e in entries {
                var id: Int64
                var state = fresh
                var (created, attempts, until) = (nowTime, 0, delayUntil)
                find.bind(.text(session), .text(e.path.string))
                if try find.step() {
                    id = find.int(0)
                    let current = TaskState(rawValue: find.text(1) ?? "") ?? .queued
                    let sameContent = find.text(2) == e.sha256.hex && (find.isNull(3) ? nil : find.int(3)) == e.size
                    if sameContent && current != .done {
                        created = find.text(4).flatMap(Timestamp.init(rfc3339:)) ?? nowTime
                        attempts = Int(find.int(5))
                        until = find.text(6).flatMap(Timestamp.init(rfc3339:))
                        state = current
                        if current != .suspended && current != .delayed {
                            state = .queued
                            try requeue.bind(.text(now), .int(id)).run()
                        }
                    } else {
                        // New content: a task suspended by `ferry cancel` stays suspended until `ferry resume`.
                        state = current == .suspended ? .suspended : fresh
                        try reset.bind(.text(state.rawValue), .optional(e.size), .text(e.sha256.hex), .text(now), .text(now),
                                       .optional(state == .delayed ? delayUntil?.rfc3339 : nil), .int(id)).run()
                    }
                    find.reset()
                } else {
                    find.reset()
                    try insert.bind(.text(session), .text(e.path.string), .text(fresh.rawValue), .optional(e.size), .text(e.sha256.hex),
                                    .text(now), .text(now), .optional(delayUntil?.rfc3339)).run()
                    id = sqlite3_last_insert_rowid(db.handle)
                }
                out[e.path] = TransferTask(id: id, session: session, path: e.path, direction: .push, state: state, size: e.size, sha256: e.sha256.hex,
                                           bytesDone: 0, validator: nil, attempts: attempts, lastError: nil, createdAt: created, updatedAt: nowTime,
                                           notBefore: state == .delayed ? until : nil)
            }
            return out
        }
    }

    /// Puts tasks back in line (`queued`) without a failure: a discretionary session's conditions
    /// ended before or while they ran.
    public func requeue(_ ids: [Int64]) throws(FerryError) {
        guard !ids.isEmpty else { return }
        let now = clock.now().rfc3339
        try db.transaction { () throws(FerryError) in
            let s = try db.cached("UPDATE tasks SET state = \(StateStore.stateAfter(.retry)), updated_at = ? WHERE id = ? AND \(StateStore.applies(.retry))")
            for id in ids { try s.bind(.text(now), .int(id)).run() }
        }
    }

    /// Records how many bytes of the partial are synced to disk, and the validator they came with.
    public func checkpoint(_ id: Int64, bytesDone: Int64, validator: String?) throws(FerryError) {
        try db.cached("UPDATE tasks SET bytes_done = ?, validator = ?, updated_at = ? WHERE id = ?")
            .bind(.int(bytesDone), .optional(validator), .text(clock.now().rfc3339), .int(id)).run()
    }

    /// Records a failed attempt that will be tried again (`queued`) or that waits for
    /// connectivity (`waiting`), with its resume data.
    public func markRetrying(_ id: Int64, waiting: Bool, attempts: Int, error: String, bytesDone: Int64, validator: String?) throws(FerryError) {
        try db.cached("UPDATE tasks SET state = \(StateStore.stateAfter(waiting ? .wait : .retry)), attempts = ?, last_error = ?, bytes_done = ?, validator = ?, updated_at = ? WHERE id = ?")
            .bind(.int(Int64(attempts)), .text(error), .int(bytesDone), .optional(validator),
                  .text(clock.now().rfc3339), .int(id)).run()
    }

    public func markFailed(_ id: Int64, attempts: Int, error: String, bytesDone: Int64, validator: String?) throws(FerryError) {
        try db.cached("UPDATE tasks SET state = \(StateStore.stateAfter(.fail)), attempts = ?, last_error = ?, bytes_done = ?, validator = ?, updated_at = ? WHERE id = ?")
            .bind(.int(Int64(attempts)), .text(error), .int(bytesDone), .optional(validator), .text(clock.now().rfc3339), .int(id)).run()
    }

    /// Marks files done and remembers their verified hashes, and (push) what the remote said of
    /// each file placed, in one transaction.
    public func markDone(session: String, _ done: [(task: TransferTask, cache: CachedHash)],
                         placed: [(RelativePath, PlacedFile)] = []) throws(FerryError) {
        guard !done.isEmpty || !placed.isEmpty else { return }
        let now = clock.now().rfc3339
        try db.transaction { () throws(FerryError) in
            // The row takes the hash verified: an upload hashed as it was sent (or hashed again
            // after a change) was queued under a placeholder or an older hash.
            let update = try db.cached("""
                UPDATE tasks SET state = \(StateStore.stateAfter(.complete)), attempts = ?, bytes_done = ?, size = ?, sha256 = ?, last_error = NULL,
                updated_at = ? WHERE id = ?
                """)
            for d in done {
                try update.bind(.int(Int64(d.task.attempts)), .int(d.cache.size), .int(d.cache.size), .text(d.cache.sha256.hex), .text(now),
                                .int(d.task.id)).run()
            }
            try saveHashesInTransaction(session: session, done.map { ($0.task.path, $0.cache) })
            try recordPlacedInTransaction(session: session, placed)
        }
    }

    // MARK: files placed on a remote (push)

    /// What the remote said of each file this session placed there, by path.
    public func placedFiles(session: String) throws(FerryError) -> [RelativePath: PlacedFile] {
        let s = try db.prepare("SELECT path, size, validator FROM placed WHERE session = ?").bind(.text(session))
        var out: [RelativePath: PlacedFile] = [:]
        while try s.step() { out[RelativePath(trusted: s.text(0) ?? "")] = PlacedFile(size: s.int(1), validator: s.text(2)) }
        return out
    }

    public func recordPlaced(session: String, _ files: [(RelativePath, PlacedFile)]) throws(FerryError) {
        guard !files.isEmpty else { return }
        try db.transaction { () throws(FerryError) in try recordPlacedInTransaction(session: session, files) }
    }

    private func recordPlacedInTransaction(session: String, _ files: [(RelativePath, PlacedFile)]) throws(FerryError) {
        let s = try db.cached("INSERT OR REPLACE INTO placed (session, path, size, validator) VALUES (?, ?, ?, ?)")
        for (path, file) in files { try s.bind(.text(session), .text(path.string), .int(file.size), .optional(file.validator)).run() }
    }

    /// Paths ferry removed from the remote (or no longer vouches for).
    public func forgetPlaced(session: String, _ paths: [RelativePath]) throws(FerryError) {
        guard !paths.isEmpty else { return }
        try db.transaction { () throws(FerryError) in
            let s = try db.cached("DELETE FROM placed WHERE session = ? AND path = ?")
            for p in paths { try s.bind(.text(session), .text(p.string)).run() }
        }
    }

    /// When the session last checked every published file on its remote.
    public func remoteChecked(session: String) throws(FerryError) -> Timestamp? {
        let s = try db.prepare("SELECT remote_checked FROM sessions WHERE name = ?").bind(.text(session))
        return try s.step() ? s.text(0).flatMap(Timestamp.init(rfc3339:)) : nil
    }

    public func recordRemoteChecked(session: String, at time: Timestamp) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET remote_checked = ? WHERE name = ?").bind(.text(time.rfc3339), .text(session)).run()
    }

    // MARK: notices said once

    /// Of `notices` (a key, like a path, and a signature of what it is about now), those not said
    /// before with the same signature; the session's notices of `kind` become `notices`, so one
    /// that no longer applies is said again if it comes back.
    public func unsaidNotices(session: String, kind: String, _ notices: [(key: String, signature: String)]) throws(FerryError) -> Set<String> {
        var said: [String: String] = [:]
        let rows = try db.prepare("SELECT key, signature FROM notices WHERE session = ? AND kind = ?").bind(.text(session), .text(kind))
        while try rows.step() { said[rows.text(0) ?? ""] = rows.text(1) ?? "" }
        let unsaid = Set(notices.filter { said[$0.key] != $0.signature }.map(\.key))
        let current = Dictionary(notices.map { ($0.key, $0.signature) }, uniquingKeysWith: { a, _ in a })
        guard !unsaid.isEmpty || current.count != said.count else { return [] }
        try db.transaction { () throws(FerryError) in
            try db.prepare("DELETE FROM notices WHERE session = ? AND kind = ?").bind(.text(session), .text(kind)).run()
            let insert = try db.prepare("INSERT INTO notices (session, kind, key, signature) VALUES (?, ?, ?, ?)")
            for (key, signature) in current { try insert.bind(.text(session), .text(kind), .text(key), .text(signature)).run() }
        }
        return unsaid
    }

    // MARK: hash cache

    /// How many files the session's hash cache holds (about how many the local root holds).
    public func hashCacheCount(session: String) throws(FerryError) -> Int {
        let count = try db.prepare("SELECT count(*) FROM hash_cache WHERE session = ?").bind(.text(session))
        return try count.step() ? Int(count.int(0)) : 0
    }

    /// The whole cache as a map (for tests and tools; a sync joins it to its scan, `loadHashes`).
    public func hashCache(session: String) throws(FerryError) -> [RelativePath: CachedHash] {
        let s = try hashCacheRows(session: session)
        var out: [RelativePath: CachedHash] = [:]
        while try s.step() {
            if let hash = cachedHash(s) { out[RelativePath(trusted: s.text(0) ?? "")] = hash }
        }
        return out
    }

    /// Gives the files of `tree` (a whole scan of the session's local root) the hashes the cache
    /// holds for them, where still valid: one pass over the rows in primary-key order, which is
    /// the tree's order, without a String per row. Rows of paths the tree holds no file at go:
    /// every direction and layout keeps the cache to the files there are (a pull's deletions
    /// forget theirs at once, but a push's or a generation's gone files are only seen here).
    public func loadHashes(session: String, into tree: inout LocalTree, ignoringCtime: Bool = false) throws(FerryError) {
        let s = try hashCacheRows(session: session)
        var gone: [RelativePath] = []
        try tree.join(next: { () throws(FerryError) in try s.step() }, path: { s.bytes(0) }, hash: { cachedHash(s) }, ignoringCtime: ignoringCtime,
                      stale: { gone.append(RelativePath(trusted: s.text(0) ?? "")) })
        s.reset()
        try forgetHashes(session: session, gone)
    }

    private func hashCacheRows(session: String) throws(FerryError) -> SQLiteStatement {
        try db.prepare("""
            SELECT path, size, mtime_sec, mtime_nsec, ctime_sec, ctime_nsec, inode, sha256, wanted_mtime_sec, wanted_mtime_nsec
            FROM hash_cache WHERE session = ? ORDER BY path
            """).bind(.text(session))
    }

    /// The current row of `hashCacheRows`. One whose hash is not 64 hex digits (no ferry writes
    /// one) vouches for nothing: the file is hashed again.
    private func cachedHash(_ s: SQLiteStatement) -> CachedHash? {
        func time(_ column: Int32) -> Timestamp { Timestamp(seconds: s.int(column), nanoseconds: Int32(truncatingIfNeeded: s.int(column + 1))) }
        guard let sha = s.digest(7) else { return nil }
        return CachedHash(size: s.int(1), mtime: time(2), ctime: time(4), inode: UInt64(bitPattern: s.int(6)), sha256: sha,
                          wantedMtime: s.isNull(8) ? nil : time(8))
    }

    public func saveHashes(session: String, _ hashes: [(RelativePath, CachedHash)]) throws(FerryError) {
        guard !hashes.isEmpty else { return }
        try db.transaction { () throws(FerryError) in try saveHashesInTransaction(session: session, hashes) }
    }

    private func saveHashesInTransaction(session: String, _ hashes: [(RelativePath, CachedHash)]) throws(FerryError) {
        let s = try db.cached("""
            INSERT OR REPLACE INTO hash_cache (session, path, size, mtime_sec, mtime_nsec, ctime_sec, ctime_nsec, inode, sha256,
                                               wanted_mtime_sec, wanted_mtime_nsec) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        for (path, h) in hashes {
            try s.bind(.text(session), .text(path.string), .int(h.size), .int(h.mtime.seconds), .int(Int64(h.mtime.nanoseconds)),
                       .int(h.ctime.seconds), .int(Int64(h.ctime.nanoseconds)), .int(Int64(bitPattern: h.inode)), .text(h.sha256.hex),
                       .optional(h.wantedMtime?.seconds), .optional(h.wantedMtime.map { Int64($0.nanoseconds) })).run()
        }
    }

    public func forgetHashes(session: String, _ paths: [RelativePath]) throws(FerryError) {
        guard !paths.isEmpty else { return }
        try db.transaction { () throws(FerryError) in
            let s = try db.prepare("DELETE FROM hash_cache WHERE session = ? AND path = ?")
            for p in paths { try s.bind(.text(session), .text(p.string)).run() }
        }
    }
}

extension Timestamp {
    init(_ ts: timespec) {
        self.init(seconds: Int64(ts.tv_sec), nanoseconds: Int32(ts.tv_nsec))
    }


    var timespecValue: timespec { timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds)) }
}

extension StateStore {
    /// Where a session keeps the manifest it last accepted (the one a 304 stands for); for a push
    /// session, the one it last published.
    static func cachedManifestPath(state: String, session: String) -> String { state + "/manifests/" + session + ".manifest" }
}

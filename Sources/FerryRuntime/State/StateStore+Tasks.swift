import CSQLite
import FerryCore

/// The task table: one row per (session, path), queued for a run, moved through its states as
/// `TaskState.after` says (`stateAfter`), suspended and resumed by `ferry cancel` and `ferry resume`.
extension StateStore {
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
        let delayUntil = notBefore.flatMap { $0 > nowTime ? $0 : nil }
        // Read and written in one transaction: a `ferry cancel` in between is never overwritten.
        return try db.transaction { () throws(FerryError) -> Queued in
            let existing = try downloadTasks(session: session, now: nowTime)
            let queue = try DownloadQueue(db, session: session, now: nowTime, delayUntil: delayUntil)
            var out = Queued()
            out.tasks.reserveCapacity(entries.count)
            // New rows go in groups (`SQLiteDatabase.runInGroups`); their places wait for their ids.
            var new: [Int] = []
            for e in entries {
                if let t = existing[e.path] {
                    out.tasks.append(try queue.update(t, to: e, urlFor: urlFor, due: &out.due))
                } else {
                    new.append(out.tasks.count)
                    out.tasks.append(queue.new(e, urlFor: urlFor))
                }
            }
            let ids = try queue.add(new.map { out.tasks[$0] })
            for (k, i) in new.enumerated() { out.tasks[i].id = ids[k] }
            return out
        }
    }

    /// The session's tasks by path, as `queueDownloads` compares them with the entries.
    private func downloadTasks(session: String, now nowTime: Timestamp) throws(FerryError) -> [RelativePath: TransferTask] {
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
        return existing
    }

    /// One `queueDownloads`: its statements and times, shared by its entries.
    private struct DownloadQueue {
        let db: SQLiteDatabase
        let session: String
        let nowTime: Timestamp
        let now: String
        let delayUntil: Timestamp?
        let delayedUntil: String?
        let reset: SQLiteStatement
        let requeue: SQLiteStatement

        init(_ db: SQLiteDatabase, session: String, now nowTime: Timestamp, delayUntil: Timestamp?) throws(FerryError) {
            self.db = db
            self.session = session
            self.nowTime = nowTime
            now = nowTime.rfc3339
            self.delayUntil = delayUntil
            delayedUntil = delayUntil?.rfc3339
            reset = try db.prepare("""
                UPDATE tasks SET state = ?, size = ?, sha256 = ?, bytes_done = 0, validator = NULL, attempts = 0,
                last_error = NULL, created_at = ?, updated_at = ?, not_before = ?, url = ? WHERE id = ?
                """)
            requeue = try db.prepare("UPDATE tasks SET state = \(StateStore.stateAfter(.queue)), not_before = NULL, url = NULL, updated_at = ? WHERE id = ?")
        }

        /// A new task for an entry no row holds, queued, or delayed with its URL kept: its row is
        /// written by `add`, which gives its id.
        func new(_ e: ManifestEntry, urlFor: (ManifestEntry) -> String) -> TransferTask {
            TransferTask(id: 0, session: session, path: e.path, direction: .pull, state: newState, size: e.size,
                         sha256: e.sha256.hex, bytesDone: 0, validator: nil, attempts: 0, lastError: nil,
                         createdAt: nowTime, updatedAt: nowTime, notBefore: delayUntil,
                         url: delayUntil == nil ? nil : urlFor(e))
        }

        /// What a new task is: queued, or delayed to `delayUntil`.
        var newState: TaskState { delayUntil == nil ? .queued : .delayed }

        /// Writes the rows of new tasks (`new`), a group per statement; returns their ids, in order.
        /// A group's rows take the ids after the table's largest one, one by one: the last row's id
        /// says whether they did (no other writer runs in this transaction), and where it does not
        /// (ids near the largest an integer holds, which SQLite then picks at random) each row's id
        /// is read back by its path.
        func add(_ tasks: [TransferTask]) throws(FerryError) -> [Int64] {
            guard !tasks.isEmpty else { return [] }
            let largest = try db.prepare("SELECT coalesce(max(id), 0) FROM tasks")
            _ = try largest.step()
            var before = largest.int(0)
            var ids: [Int64] = []
            ids.reserveCapacity(tasks.count)
            let find = try db.prepare("SELECT id FROM tasks WHERE session = ? AND path = ?")
            // What every new row shares is bound once a statement (?1 to ?4, named before any
            // row's own values, which SQLite then numbers from ?5): 4 values a row instead of 9.
            let state = newState
            precondition(tasks.allSatisfy { $0.state == state }, "new tasks are all queued, or all delayed")
            try db.runInGroups(tasks, sql: """
                INSERT INTO tasks (session, state, created_at, updated_at, not_before, path, direction, size, sha256, bytes_done, validator, attempts, last_error, url)
                VALUES
                """, placeholder: "(?1, ?2, ?3, ?3, ?4, ?, 'pull', ?, ?, 0, NULL, 0, NULL, ?)",
                leading: [.text(session), .text(state.rawValue), .text(now), .optional(delayedUntil)], values: { t in
                [.text(t.path.string), .optional(t.size), .text(t.sha256), .optional(t.url)]
            }, done: { (group) throws(FerryError) in
                let last = sqlite3_last_insert_rowid(db.handle)
                let (expected, overflow) = before.addingReportingOverflow(Int64(group.count))
                if !overflow && last == expected {
                    ids += (before + 1)...last
                    before = last
                    return
                }
                for t in group {
                    guard try find.bind(.text(session), .text(t.path.string)).step() else {
                        throw .localIO("state database: the task just written for \(Printable.name(t.path.string)) is not there")
                    }
                    ids.append(find.int(0))
                    before = max(before, find.int(0))
                }
                find.reset()
            })
            return ids
        }

        /// An existing task for an entry: left, requeued, revalidated when delayed and due (said in `due`), or reset for new content.
        func update(_ existing: TransferTask, to e: ManifestEntry, urlFor: (ManifestEntry) -> String,
                    due: inout [(path: RelativePath, disposition: DelayedRequest.Disposition, reason: String)]) throws(FerryError) -> TransferTask {
            var t = existing
            let sha256 = e.sha256.hex
            let sameContent = t.sha256 == sha256 && t.size == e.size
            if t.state == .delayed, let until = t.notBefore, until > nowTime {
                // Not due yet: left as it is; revalidated when it comes due.
            } else if t.state == .delayed {
                let (disposition, reason) = DelayedRequest.disposition(for: t, entry: e, url: urlFor(e))
                due.append((e.path, disposition, reason))
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
            return t
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

    /// The task with this id, in any session.
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
            // after a change) was queued under a placeholder or an older hash, and is updated alone.
            // The rest (a download's, as it was queued) go a group per statement, by their attempts.
            let update = try db.cached("""
                UPDATE tasks SET state = \(StateStore.stateAfter(.complete)), attempts = ?, bytes_done = ?, size = ?, sha256 = ?, last_error = NULL,
                updated_at = ? WHERE id = ?
                """)
            var asQueued: [Int: [Int64]] = [:]
            for d in done {
                let hex = d.cache.sha256.hex
                if d.cache.size == d.task.size && hex == d.task.sha256 {
                    asQueued[d.task.attempts, default: []].append(d.task.id)
                    continue
                }
                try update.bind(.int(Int64(d.task.attempts)), .int(d.cache.size), .int(d.cache.size), .text(hex), .text(now),
                                .int(d.task.id)).run()
            }
            for (attempts, ids) in asQueued {
                try db.runInGroups(ids, sql: """
                    UPDATE tasks SET state = \(StateStore.stateAfter(.complete)), attempts = ?, bytes_done = size, last_error = NULL,
                    updated_at = ? WHERE id IN (
                    """, placeholder: "?", after: ")", leading: [.int(Int64(attempts)), .text(now)], values: { [.int($0)] })
            }
            try saveHashesInTransaction(session: session, done.map { ($0.task.path, $0.cache) })
            try recordPlacedInTransaction(session: session, placed)
        }
    }
}

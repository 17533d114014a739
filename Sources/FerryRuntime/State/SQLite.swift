import CSQLite
import Glibc
import FerryCore

/// A thin wrapper over one SQLite connection. Errors become `FerryError(.localIO)` naming the
/// database file, since a state database that cannot be read or written is a local I/O problem.
final class SQLiteDatabase {
    let handle: OpaquePointer
    let path: String

    init(path: String) throws(FerryError) {
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            if let db { sqlite3_close(db) }
            throw .localIO("cannot open the state database \(path): \(message)",
                           hint: "check that the [agent] state directory exists and is writable")
        }
        self.handle = db
        self.path = path
        sqlite3_busy_timeout(db, 10_000)
        sqlite3_extended_result_codes(db, 1)
    }

    deinit {
        cache.removeAll()
        groups.removeAll()
        sqlite3_close_v2(handle)
    }

    func error(_ what: String) -> FerryError {
        let text = String(cString: sqlite3_errmsg(handle))
        return damaged(sqlite3_errcode(handle), text) ?? .localIO("state database \(path): \(what): \(text)")
    }

    /// A database file that is not SQLite, or is damaged, cannot be repaired by retrying: say so,
    /// and what to do. Moving it aside is safe, because the local tree is the truth: the next run
    /// re-hashes it and fetches only what is missing or wrong.
    private func damaged(_ code: Int32, _ text: String) -> FerryError? {
        guard code & 0xFF == SQLITE_NOTADB || code & 0xFF == SQLITE_CORRUPT else { return nil }
        return .localIO("the state database \(path) is damaged or not a SQLite database (\(text))",
                        hint: "move it aside: mv \(path) \(path).broken (with \(path)-wal and \(path)-shm if they exist); "
                            + "the next run starts a new state, re-hashes the local tree and downloads nothing that is already right")
    }

    func execute(_ sql: String) throws(FerryError) {
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? "unknown error"
            sqlite3_free(message)
            if let error = damaged(rc, text) { throw error }
            let what = sql.split(separator: "\n").first.map { String($0.prefix(40)) } ?? ""
            throw .localIO("state database \(path): \(text) (in: \(what))")
        }
    }

    private var cache: [String: SQLiteStatement] = [:]

    /// Rows one statement of `runInGroups` writes at most: a statement per row costs SQLite about a
    /// third more than the row itself (10,000 task rows: 33 ms one by one, 22 ms 64 at a time).
    static let rowsPerStatement = 64

    /// Runs `sql` (ending in `VALUES` or `IN (`) once per `rowsPerStatement` items, with a group
    /// of `placeholder` (`(?, ?)` or `?`) for each item, joined by commas, then `after` (a closing
    /// parenthesis); binds `leading` (the values of `sql`'s own placeholders), then the items'
    /// values in order. What is left after the full groups goes in groups of 32, 16, … 1 items, so
    /// that every statement is prepared once and kept: a group of another size would be prepared
    /// each time, and preparing 64 rows' statement costs SQLite more than writing them (~0.5 M
    /// instructions; a commit's last group is seldom full). Calls `done` after each statement with
    /// the items it wrote.
    func runInGroups<Item>(_ items: [Item], sql: String, placeholder: String, after: String = "",
                           leading: [SQLiteValue?] = [], values: (Item) -> [SQLiteValue?],
                           done: (ArraySlice<Item>) throws(FerryError) -> Void = { _ in }) throws(FerryError) {
        var start = 0
        while start < items.count {
            var size = SQLiteDatabase.rowsPerStatement
            while size > items.count - start { size /= 2 }
            let group = items[start..<start + size]
            let key = GroupKey(sql: sql, placeholder: placeholder, after: after, size: size)
            let statement: SQLiteStatement
            if let kept = groups[key] {
                statement = kept
            } else {
                statement = try prepare(sql + " " + Array(repeating: placeholder, count: size).joined(separator: ", ") + after)
                groups[key] = statement
            }
            try statement.bind(leading + group.flatMap(values)).run()
            try done(group)
            start += size
        }
    }

    /// A statement of `runInGroups`: its text's parts and how many items it takes.
    private struct GroupKey: Hashable {
        let sql: String
        let placeholder: String
        let after: String
        let size: Int
    }

    private var groups: [GroupKey: SQLiteStatement] = [:]

    /// A prepared statement kept for reuse (for statements run once per file).
    func cached(_ sql: String) throws(FerryError) -> SQLiteStatement {
        if let s = cache[sql] { return s }
        let s = try prepare(sql)
        cache[sql] = s
        return s
    }

    /// For statements SQLite answers with SQLITE_BUSY without waiting for the busy timeout (such as
    /// switching a new database to WAL while another process has it open): retried for up to `seconds`.
    func executeRetryingWhileBusy(_ sql: String, seconds: Double = 10, clock: any Clock) throws(FerryError) {
        let deadline = clock.monotonic() + seconds
        while true {
            let rc = sqlite3_exec(handle, sql, nil, nil, nil)
            if rc == SQLITE_OK { return }
            let busy = rc & 0xFF == SQLITE_BUSY || rc & 0xFF == SQLITE_LOCKED
            guard busy, clock.monotonic() < deadline else { return try execute(sql) }
            _ = clock.wait(until: clock.monotonic() + 0.01, interrupted: { false })
        }
    }

    func prepare(_ sql: String) throws(FerryError) -> SQLiteStatement {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw error("preparing a statement")
        }
        return SQLiteStatement(statement: statement, database: self)
    }

    func transaction<T>(_ body: () throws(FerryError) -> T) throws(FerryError) -> T {
        // Prepared once: a transaction per engine round or per group of files is frequent.
        try cached("BEGIN IMMEDIATE").run()
        do {
            let result = try body()
            try cached("COMMIT").run()
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    var userVersion: Int {
        get throws(FerryError) {
            let s = try prepare("PRAGMA user_version")
            _ = try s.step()
            return Int(s.int(0))
        }
    }
}

/// A prepared statement. Bind by 1-based index, `step()` until it returns false.
final class SQLiteStatement {
    let statement: OpaquePointer
    unowned let database: SQLiteDatabase

    init(statement: OpaquePointer, database: SQLiteDatabase) {
        self.statement = statement
        self.database = database
    }

    deinit { sqlite3_finalize(statement) }

    @discardableResult
    func bind(_ values: SQLiteValue?...) -> SQLiteStatement { bind(values) }

    @discardableResult
    func bind(_ values: [SQLiteValue?]) -> SQLiteStatement {
        sqlite3_reset(statement)
        // Every parameter is bound below when all are given (the statements of groups take
        // hundreds): only fewer values leave some to clear.
        if values.count < Int(sqlite3_bind_parameter_count(statement)) { sqlite3_clear_bindings(statement) }
        for (i, v) in values.enumerated() {
            let index = Int32(i + 1)
            switch v {
            case nil: sqlite3_bind_null(statement, index)
            case .int(let n): sqlite3_bind_int64(statement, index, n)
            case .text(var s): bindText(&s, at: index)
            case .real(let d): sqlite3_bind_double(statement, index, d)
            }
        }
        return self
    }

    /// Binds `s` with its length (SQLite copies it), so that SQLite need not look for its end.
    private func bindText(_ s: inout String, at index: Int32) {
        s.withUTF8 { bytes in
            // An empty buffer may have no address, which SQLite would take for NULL.
            if let base = bytes.baseAddress, bytes.count > 0 {
                base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                    _ = sqlite3_bind_text(statement, index, $0, Int32(bytes.count), ferry_sqlite_transient())
                }
            } else {
                sqlite3_bind_text(statement, index, "", 0, ferry_sqlite_transient())
            }
        }
    }

    /// True when a row is ready; false when done.
    func step() throws(FerryError) -> Bool {
        let rc = sqlite3_step(statement)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw database.error("running a statement")
    }

    func run() throws(FerryError) {
        while try step() {}
        sqlite3_reset(statement)
    }

    /// Ends a query before its last row, so the statement holds no read and can run again.
    func reset() { sqlite3_reset(statement) }

    func int(_ column: Int32) -> Int64 { sqlite3_column_int64(statement, column) }
    func real(_ column: Int32) -> Double { sqlite3_column_double(statement, column) }
    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(statement, column) == SQLITE_NULL }
    func text(_ column: Int32) -> String? {
        guard let p = sqlite3_column_text(statement, column) else { return nil }
        return String(cString: p)
    }
    /// A text column's bytes, valid until the next step (empty for NULL).
    func bytes(_ column: Int32) -> UnsafeRawBufferPointer {
        guard let p = sqlite3_column_text(statement, column) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: p, count: Int(sqlite3_column_bytes(statement, column)))
    }
    /// A text column as a digest, without making a String of it; nil for NULL or anything not 64 hex digits.
    func digest(_ column: Int32) -> SHA256Digest? {
        guard let p = sqlite3_column_text(statement, column) else { return nil }
        return SHA256Digest(hex: UnsafeBufferPointer(start: p, count: Int(sqlite3_column_bytes(statement, column))))
    }
}

enum SQLiteValue {
    case int(Int64)
    case text(String)
    case real(Double)
}

extension SQLiteValue {
    static func optional(_ s: String?) -> SQLiteValue? { s.map { .text($0) } }
    static func optional(_ n: Int64?) -> SQLiteValue? { n.map { .int($0) } }
}

import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// The store applies the core's task state machine, in-process on a temporary database.
struct StateStoreTests {
    let dir = Harness.temporaryDirectory("store")

    func entry(_ name: String, _ fill: Character = "a") -> ManifestEntry {
        ManifestEntry(path: RelativePath(trusted: name), size: 10, sha256: SHA256Digest(hex: String(repeating: fill, count: 64))!)
    }

    func state(_ store: StateStore, _ id: Int64) throws -> TaskState? { try store.task(id: id)?.state }

    @Test func rowsMoveAsTheStateMachineSays() throws {
        defer { Harness.remove(dir) }
        let store = try StateStore(directory: dir, clock: SystemClock())
        let queued = try store.queueDownloads(session: "s", entries: [entry("a"), entry("b")], urlFor: { "http://x/" + $0.path.string }, notBefore: nil)
        let a = try #require(queued.task(RelativePath(trusted: "a"))).id
        let b = try #require(queued.task(RelativePath(trusted: "b"))).id
        #expect(try state(store, a) == .queued)

        try store.markRunning([(a, 1), (b, 1)])
        #expect(try state(store, a) == .running)
        try store.markRetrying(a, waiting: true, attempts: 1, error: "down", bytesDone: 4, validator: "\"v\"")
        #expect(try state(store, a) == .waiting)

        // ferry cancel: the waiting and running tasks are suspended; what the transfer then reports
        // is recorded (resume data) without waking the task.
        let suspended = try store.suspend(session: "s", ids: nil).tasks
        #expect(Set(suspended.map(\.id)) == [a, b])
        try store.markRetrying(a, waiting: false, attempts: 2, error: "reset", bytesDone: 6, validator: "\"v\"")
        try store.markFailed(b, attempts: 2, error: "404", bytesDone: 0, validator: nil)
        try store.markRunning([(a, 3)])
        let kept = try #require(try store.task(id: a))
        #expect(kept.state == .suspended && kept.bytesDone == 6 && kept.attempts == 2)
        #expect(try state(store, b) == .suspended)

        // Queuing the same content again leaves a suspended task alone.
        _ = try store.queueDownloads(session: "s", entries: [entry("a"), entry("b")], urlFor: { "http://x/" + $0.path.string }, notBefore: nil)
        #expect(try state(store, a) == .suspended)

        // ferry resume makes it runnable; a file committed before a cancel reached it is done.
        #expect(try store.unsuspend(session: "s", ids: [a]).map(\.id) == [a])
        #expect(try state(store, a) == .queued && state(store, b) == .suspended)
        var done = try #require(try store.task(id: b))
        done.attempts = 3
        let cache = CachedHash(size: 10, mtime: Timestamp(seconds: 1), ctime: Timestamp(seconds: 1), inode: 1, sha256: SHA256Digest(hex: done.sha256)!, wantedMtime: nil)
        try store.markDone(session: "s", [(done, cache)])
        #expect(try state(store, b) == .done)
        // A done task is not restarted by a stray report.
        try store.markRunning([(b, 4)])
        try store.markFailed(b, attempts: 4, error: "late", bytesDone: 0, validator: nil)
        #expect(try state(store, b) == .done)
        // New content queues it again, without resume data.
        let requeued = try store.queueDownloads(session: "s", entries: [entry("b", "c")], urlFor: { "http://x/" + $0.path.string }, notBefore: nil)
        #expect(requeued.task(RelativePath(trusted: "b"))?.state == .queued)
        #expect(try state(store, b) == .queued)
    }

    /// An upload still owed since an earlier run keeps its task (when it was queued, its attempts),
    /// so resource-timeout counts from then; new content is a new task.
    @Test func anUploadStillOwedKeepsWhenItWasQueued() throws {
        defer { Harness.remove(dir) }
        let store = try StateStore(directory: dir, clock: SystemClock())
        let first = try #require(try store.queueUploads(session: "s", entries: [entry("a"), entry("b")])[RelativePath(trusted: "a")])
        try store.markRunning([(first.id, 1)])
        try store.markRetrying(first.id, waiting: true, attempts: 1, error: "down", bytesDone: 0, validator: nil)
        let again = try store.queueUploads(session: "s", entries: [entry("a"), entry("b", "c")])
        let a = try #require(again[RelativePath(trusted: "a")])
        #expect(a.id == first.id && a.createdAt == first.createdAt && a.attempts == 1, "the same upload: \(a)")
        #expect(try state(store, a.id) == .queued)
        let b = try #require(again[RelativePath(trusted: "b")])
        #expect(b.createdAt > first.createdAt && b.attempts == 0, "new content is queued anew")
    }

    @Test func delayedTasksComeDue() throws {
        defer { Harness.remove(dir) }
        let store = try StateStore(directory: dir, clock: SystemClock())
        let later = Timestamp(seconds: SystemClock().now().seconds + 3600)
        let queued = try store.queueDownloads(session: "s", entries: [entry("a")], urlFor: { "http://x/" + $0.path.string }, notBefore: later)
        let a = try #require(queued.task(RelativePath(trusted: "a")))
        #expect(a.state == .delayed && a.notBefore == later)
        // A delayed task keeps the URL it was queued with (checked when it comes due), in the
        // store too; a task queued to run now keeps none.
        #expect(a.url == "http://x/a")
        #expect(try store.task(id: a.id)?.url == "http://x/a")
        let now = try store.queueDownloads(session: "s", entries: [entry("b")], urlFor: { "http://x/" + $0.path.string }, notBefore: nil)
        let b = try #require(now.task(RelativePath(trusted: "b")))
        #expect(b.state == .queued && b.url == nil)
        #expect(try store.task(id: b.id)?.url == nil)
        // Not due yet: queuing again leaves it delayed.
        let again = try store.queueDownloads(session: "s", entries: [entry("a")], urlFor: { "http://x/" + $0.path.string }, notBefore: nil)
        #expect(again.task(RelativePath(trusted: "a"))?.state == .delayed && again.due.isEmpty)
        // Once due (its time set in the past here), queued with the same URL it goes on, and
        // keeps the URL no longer; at another URL (the file moved) it starts over.
        try store.db.execute("UPDATE tasks SET not_before = '2000-01-01T00:00:00Z' WHERE state = 'delayed'")
        let due = try store.queueDownloads(session: "s", entries: [entry("a")], urlFor: { "http://x/" + $0.path.string }, notBefore: nil)
        #expect(due.due.map(\.disposition) == [.proceed] && due.task(RelativePath(trusted: "a"))?.state == .queued)
        #expect(try store.task(id: a.id)?.url == nil)
        _ = try store.queueDownloads(session: "s", entries: [entry("c")], urlFor: { "http://x/" + $0.path.string }, notBefore: later)
        try store.db.execute("UPDATE tasks SET not_before = '2000-01-01T00:00:00Z' WHERE state = 'delayed'")
        let moved = try store.queueDownloads(session: "s", entries: [entry("c")], urlFor: { "http://y/" + $0.path.string }, notBefore: nil)
        #expect(moved.due.map(\.disposition) == [.replace] && moved.task(RelativePath(trusted: "c"))?.url == nil)
    }

    /// Migration 4 adds CHECK constraints: a row in a state the machine does not know is carried
    /// over as queued, and no such row can be written afterwards.
    @Test func theTaskTableRefusesUnknownStates() throws {
        defer { Harness.remove(dir) }
        try writeStateDatabase(in: dir, schema: 3, """
                INSERT INTO tasks (session, path, direction, state, size, sha256, bytes_done, created_at, updated_at)
                VALUES ('s', 'odd.bin', 'pull', 'paused', 10, '\(String(repeating: "a", count: 64))', 5, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z');
                """)
        let store = try StateStore(directory: dir, clock: SystemClock())
        let task = try #require(try store.tasks(session: "s").first)
        #expect(task.state == .queued && task.bytesDone == 5)
        #expect(throws: FerryError.self) {
            try store.db.execute("UPDATE tasks SET state = 'paused' WHERE id = \(task.id)")
        }
        #expect(throws: FerryError.self) {
            try store.db.execute("UPDATE tasks SET direction = 'sideways' WHERE id = \(task.id)")
        }
        #expect(throws: FerryError.self) {
            try store.db.execute("UPDATE tasks SET bytes_done = -1 WHERE id = \(task.id)")
        }
    }

    /// Migration 5 rewrites the checks (OR chains instead of IN lists, which SQLite evaluated with
    /// a temporary b-tree per statement): every column of a schema-4 row comes through unchanged.
    @Test func migrationFiveKeepsTasks() throws {
        defer { Harness.remove(dir) }
        let sha = String(repeating: "b", count: 64)
        try writeStateDatabase(in: dir, schema: 4, """
                INSERT INTO tasks (session, path, direction, state, size, sha256, bytes_done, validator, attempts, last_error,
                                   created_at, updated_at, not_before, url)
                VALUES ('s', 'kept.bin', 'pull', 'suspended', 10, '\(sha)', 7, '"v1"', 3, 'reset',
                        '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z', NULL, 'http://x/kept.bin');
                """)
        let store = try StateStore(directory: dir, clock: SystemClock())
        let task = try #require(try store.tasks(session: "s").first)
        #expect(task.path.string == "kept.bin" && task.state == .suspended && task.size == 10 && task.sha256 == sha)
        #expect(task.bytesDone == 7 && task.validator == "\"v1\"" && task.attempts == 3 && task.lastError == "reset")
        #expect(task.url == "http://x/kept.bin" && task.createdAt == Timestamp(rfc3339: "2026-01-01T00:00:00Z"))
        // The generated transition SQL works against the new checks: resume moves it to queued.
        #expect(try store.unsuspend(session: "s", ids: nil).map(\.state) == [.queued])
        #expect(try store.tasks(session: "s").first?.state == .queued)
    }
}

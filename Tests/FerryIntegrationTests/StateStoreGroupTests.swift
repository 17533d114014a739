import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Task and hash rows are written a group per statement (`SQLiteDatabase.runInGroups`): each
/// task must still get its own row's id, whatever ids SQLite picks, and each row the values of
/// its own file.
struct StateStoreGroupTests {
    let dir = Harness.temporaryDirectory("store-groups")

    func entries(_ count: Int, from first: Int = 0) -> [ManifestEntry] {
        (first..<first + count).map { i in
            ManifestEntry(path: RelativePath(trusted: "d/f\(i)"), size: Int64(100 + i),
                          sha256: SHA256Digest(hex: String(repeating: "0", count: 56) + String(format: "%08x", i))!)
        }
    }

    /// What the rows say for each task id: its path, size and state.
    func rows(_ store: StateStore) throws -> [Int64: (path: String, size: Int64, state: String)] {
        let s = try store.db.prepare("SELECT id, path, size, state FROM tasks WHERE session = 's'")
        var out: [Int64: (path: String, size: Int64, state: String)] = [:]
        while try s.step() { out[s.int(0)] = (s.text(1) ?? "", s.int(2), s.text(3) ?? "") }
        return out
    }

    func expectIdsMatchRows(_ queued: StateStore.Queued, _ entries: [ManifestEntry], _ store: StateStore) throws {
        #expect(queued.tasks.map(\.path) == entries.map(\.path))
        #expect(Set(queued.tasks.map(\.id)).count == entries.count)
        let byId = try rows(store)
        for (task, entry) in zip(queued.tasks, entries) {
            #expect(byId[task.id]?.path == entry.path.string && byId[task.id]?.size == entry.size)
        }
    }

    @Test func newTasksInGroupsTakeTheirOwnRowsIds() throws {
        defer { Harness.remove(dir) }
        let store = try StateStore(directory: dir, clock: SystemClock())
        // Some rows exist (updated one by one), most are new (150: two full groups and a part).
        let old = entries(20, from: 1000)
        _ = try store.queueDownloads(session: "s", entries: old, urlFor: { _ in "" }, notBefore: nil)
        let mixed = Array((entries(150) + old).shuffled())
        let queued = try store.queueDownloads(session: "s", entries: mixed, urlFor: { _ in "" }, notBefore: nil)
        try expectIdsMatchRows(queued, mixed, store)
    }

    /// Once the table's largest id is the largest an integer holds, SQLite picks new ids at
    /// random: the ids are then read back by path.
    @Test func idsPickedAtRandomAreReadBack() throws {
        defer { Harness.remove(dir) }
        let store = try StateStore(directory: dir, clock: SystemClock())
        try store.db.execute("""
            INSERT INTO tasks (id, session, path, direction, state, size, sha256, created_at, updated_at)
            VALUES (\(Int64.max - 70), 'other', 'x', 'pull', 'queued', 1, 'aa', 'now', 'now')
            """)
        let fresh = entries(140)
        let queued = try store.queueDownloads(session: "s", entries: fresh, urlFor: { _ in "" }, notBefore: nil)
        try expectIdsMatchRows(queued, fresh, store)
        #expect(queued.tasks.contains { $0.id < Int64.max - 70 }, "some ids were picked at random")
    }

    @Test func doneInGroupsKeepsEachRowsOwnValues() throws {
        defer { Harness.remove(dir) }
        let store = try StateStore(directory: dir, clock: SystemClock())
        let all = entries(130)
        var tasks = try store.queueDownloads(session: "s", entries: all, urlFor: { _ in "" }, notBefore: nil).tasks
        // Most took one attempt (two full groups of 64 and a part), a few two or three.
        for i in tasks.indices { tasks[i].attempts = i % 13 == 0 ? 2 + i % 2 : 1 }
        var done = tasks.map { task in
            (task: task, cache: CachedHash(size: task.size!, mtime: Timestamp(seconds: 1), ctime: Timestamp(seconds: 2),
                                           inode: UInt64(task.id), sha256: SHA256Digest(hex: task.sha256)!))
        }
        // One whose verified hash differs from the one it was queued with (an upload's) is updated alone.
        let other = SHA256Digest(hex: String(repeating: "b", count: 64))!
        done[5].cache = CachedHash(size: 7, mtime: Timestamp(seconds: 1), ctime: Timestamp(seconds: 2), inode: 5, sha256: other)
        try store.markDone(session: "s", Array(done.prefix(129)))
        for (k, d) in done.enumerated() {
            let row = try #require(try store.task(id: d.task.id))
            if k == 129 {
                #expect(row.state == .queued, "a task not handed over stays as it was")
                continue
            }
            #expect(row.state == .done && row.attempts == d.task.attempts)
            #expect(row.bytesDone == d.cache.size && row.size == d.cache.size && row.sha256 == d.cache.sha256.hex)
        }
        let hashes = try store.hashCache(session: "s")
        #expect(hashes.count == 129)
        for d in done.prefix(129) { #expect(hashes[d.task.path]?.inode == d.cache.inode && hashes[d.task.path]?.sha256 == d.cache.sha256) }
    }
}

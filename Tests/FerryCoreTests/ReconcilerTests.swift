import Testing
@testable import FerryCore

struct ReconcilerTests {
    let h1 = String(repeating: "1", count: 64)
    let h2 = String(repeating: "2", count: 64)

    func p(_ s: String) -> RelativePath { RelativePath(trusted: s) }

    func file(_ size: Int64, mtime: Int64 = 100, mode: UInt32 = 0o644, inode: UInt64 = 1) -> LocalEntry {
        LocalEntry(kind: .file, size: size, mtime: Timestamp(seconds: mtime), ctime: Timestamp(seconds: mtime), inode: inode, mode: mode)
    }

    func dir() -> LocalEntry { LocalEntry(kind: .directory, size: 0, mtime: Timestamp(seconds: 0), ctime: Timestamp(seconds: 0), inode: 9, mode: 0o755) }

    func manifest(_ entries: [ManifestEntry]) -> Manifest { Manifest(format: .ferry, version: 1, generated: nil, expires: nil, entries: entries) }

    @Test func decidesEachPathOnce() {
        let m = manifest([
            ManifestEntry(path: p("new.txt"), size: 5, sha256: h1),
            ManifestEntry(path: p("same.txt"), size: 5, sha256: h1, mtime: Timestamp(seconds: 100), mode: 0o644),
            ManifestEntry(path: p("edited.txt"), size: 5, sha256: h1),
            ManifestEntry(path: p("resized.txt"), size: 5, sha256: h1),
            ManifestEntry(path: p("chmod.txt"), size: 5, sha256: h1, mode: 0o600),
            ManifestEntry(path: p("link"), size: 5, sha256: h1),
            ManifestEntry(path: p("d/in-dir.txt"), size: 5, sha256: h1),
            ManifestEntry(path: p("blocked"), size: 5, sha256: h1),
        ])
        let local: [RelativePath: LocalEntry] = [
            p("same.txt"): file(5), p("edited.txt"): file(5), p("resized.txt"): file(7), p("chmod.txt"): file(5),
            p("link"): LocalEntry(kind: .symlink, size: 10, mtime: Timestamp(seconds: 0), ctime: Timestamp(seconds: 0), inode: 3, mode: 0o777),
            p("d"): dir(), p("blocked"): dir(), p("extra.txt"): file(1), p("old"): dir(), p("old/x"): file(1),
        ]
        let hashes = [p("same.txt"): h1, p("edited.txt"): h2, p("chmod.txt"): h1]
        let plan = Reconciler.plan(manifest: m, local: local, hashes: hashes, deleteExtras: true)
        #expect(plan.downloads.map(\.entry.path.string) == ["d/in-dir.txt", "edited.txt", "link", "new.txt", "resized.txt"])
        #expect(plan.downloads.first { $0.entry.path == p("link") }?.reason == .notAFile)
        #expect(plan.downloads.first { $0.entry.path == p("new.txt") }?.reason == .missing)
        #expect(plan.downloads.first { $0.entry.path == p("edited.txt") }?.reason == .changed)
        #expect(plan.metadataFixes.map(\.path) == [p("chmod.txt")])
        #expect(plan.upToDate == 1)
        #expect(plan.blocked == [p("blocked")])
        #expect(plan.deletions == [p("extra.txt"), p("old/x")])
        #expect(plan.directoryRemovals == [p("old")])
    }

    @Test func keepsExtrasWhenNotDeleting() {
        let plan = Reconciler.plan(manifest: manifest([]), local: [p("x"): file(1), p("d"): dir(), p("d/y"): file(1)], hashes: [:], deleteExtras: false)
        #expect(plan.deletions.isEmpty)
        #expect(plan.directoryRemovals.isEmpty)
        #expect(plan.extrasKept == 2)
    }

    @Test func removesDeepestDirectoriesFirst() {
        let local = [p("a"): dir(), p("a/b"): dir(), p("a/b/c"): dir(), p("keep"): dir()]
        let m = manifest([ManifestEntry(path: p("keep/f"), size: 1, sha256: h1)])
        let plan = Reconciler.plan(manifest: m, local: local, hashes: [:], deleteExtras: true)
        #expect(plan.directoryRemovals == [p("a/b/c"), p("a/b"), p("a")])
    }

    @Test func hashesOnlyWhatTheCacheCannotVouchFor() {
        let e = ManifestEntry(path: p("f"), size: 5, sha256: h1)
        let local = file(5, mtime: 100, inode: 7)
        let fresh = CachedHash(size: 5, mtime: Timestamp(seconds: 100), ctime: Timestamp(seconds: 100), inode: 7, sha256: h1)
        let stale = CachedHash(size: 5, mtime: Timestamp(seconds: 99), ctime: Timestamp(seconds: 100), inode: 7, sha256: h1)
        let moved = CachedHash(size: 5, mtime: Timestamp(seconds: 100), ctime: Timestamp(seconds: 100), inode: 8, sha256: h1)
        #expect(!Reconciler.needsHash(e, local: local, cached: fresh))
        #expect(Reconciler.needsHash(e, local: local, cached: stale))
        #expect(Reconciler.needsHash(e, local: local, cached: moved))
        #expect(Reconciler.needsHash(e, local: local, cached: nil))
        #expect(!Reconciler.needsHash(e, local: file(6), cached: nil), "a file of another size is changed without hashing")
        #expect(!Reconciler.needsHash(e, local: nil, cached: nil))
        let sums = ManifestEntry(path: p("f"), size: nil, sha256: h1)
        #expect(Reconciler.needsHash(sums, local: file(6), cached: nil), "SHA256SUMS has no size: hash to know")
    }
}

struct DelayedRequestTests {
    let task = TransferTask(id: 1, session: "s", path: RelativePath(trusted: "f"), direction: .pull, state: .delayed, size: 5,
                            sha256: String(repeating: "1", count: 64), bytesDone: 0, validator: nil, attempts: 0, lastError: nil,
                            createdAt: Timestamp(seconds: 0), updatedAt: Timestamp(seconds: 0), url: "http://h/f")

    @Test func decidesContinueReplaceOrCancel() {
        let same = ManifestEntry(path: task.path, size: 5, sha256: task.sha256)
        #expect(DelayedRequest.disposition(for: task, entry: same, url: "http://h/f").0 == .proceed)
        #expect(DelayedRequest.disposition(for: task, entry: same, url: "http://other/f").0 == .replace)
        let resized = ManifestEntry(path: task.path, size: 6, sha256: task.sha256)
        #expect(DelayedRequest.disposition(for: task, entry: resized, url: "http://h/f").0 == .replace)
        let rehashed = ManifestEntry(path: task.path, size: 5, sha256: String(repeating: "2", count: 64))
        #expect(DelayedRequest.disposition(for: task, entry: rehashed, url: "http://h/f").0 == .replace)
        #expect(DelayedRequest.disposition(for: task, entry: nil, url: nil).0 == .cancel)
    }
}

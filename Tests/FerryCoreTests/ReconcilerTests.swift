import Testing
@testable import FerryCore

struct ReconcilerTests {
    let h1 = SHA256Digest(hex: String(repeating: "1", count: 64))!
    let h2 = SHA256Digest(hex: String(repeating: "2", count: 64))!

    func p(_ s: String) -> RelativePath { RelativePath(trusted: s) }

    func file(_ size: Int64, mtime: Int64 = 100, mode: UInt32 = 0o644, inode: UInt64 = 1) -> LocalEntry {
        LocalEntry(kind: .file, size: size, mtime: Timestamp(seconds: mtime), ctime: Timestamp(seconds: mtime), inode: inode, mode: mode)
    }

    func dir() -> LocalEntry { LocalEntry(kind: .directory, size: 0, mtime: Timestamp(seconds: 0), ctime: Timestamp(seconds: 0), inode: 9, mode: 0o755) }

    func manifest(_ entries: [ManifestEntry]) -> Manifest { Manifest(format: .ferry, version: 1, generated: nil, expires: nil, entries: entries) }

    func known(_ pairs: [(String, SHA256Digest)]) -> [RelativePath: CachedHash] {
        var out: [RelativePath: CachedHash] = [:]
        for (path, hash) in pairs { out[p(path)] = CachedHash(file(5), sha256: hash, wanted: nil) }
        return out
    }

    func symlink() -> LocalEntry { LocalEntry(kind: .symlink, size: 10, mtime: Timestamp(seconds: 0), ctime: Timestamp(seconds: 0), inode: 3, mode: 0o777) }

    let deleteAll = DeletionRules(delete: true, cap: .percent(100))
    let keepAll = DeletionRules(delete: false, cap: .percent(100))

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
            p("link"): symlink(), p("d"): dir(), p("blocked"): dir(), p("blocked/inner"): file(1),
            p("extra.txt"): file(1), p("old"): dir(), p("old/x"): file(1),
        ]
        let hashes = known([("same.txt", h1), ("edited.txt", h2), ("chmod.txt", h1)])
        let plan = Reconciler.plan(manifest: m, local: local, known: hashes, rules: deleteAll)
        #expect(plan.downloads.map(\.entry.path.string) == ["blocked", "d/in-dir.txt", "edited.txt", "link", "new.txt", "resized.txt"])
        #expect(plan.downloads.first { $0.entry.path == p("link") }?.reason == .notAFile)
        #expect(plan.downloads.first { $0.entry.path == p("new.txt") }?.reason == .missing)
        #expect(plan.downloads.first { $0.entry.path == p("edited.txt") }?.reason == .changed)
        #expect(plan.downloads.first { $0.entry.path == p("blocked") }?.reason == .directoryInTheWay)
        #expect(plan.directoriesToReplace == [p("blocked"): [p("blocked/inner")]])
        #expect(plan.metadataFixes.map(\.path) == [p("chmod.txt")])
        #expect(plan.upToDate == 1)
        #expect(plan.blocked.isEmpty)
        #expect(plan.deletions == [p("extra.txt"), p("old/x")])
        #expect(plan.directoryRemovals == [p("old")])
        #expect(plan.localFiles == 8)
        #expect(plan.filesRemoved == 3)
    }

    @Test func keepsExtrasWhenNotDeleting() {
        let plan = Reconciler.plan(manifest: manifest([]), local: [p("x"): file(1), p("d"): dir(), p("d/y"): file(1)], known: [:], rules: keepAll)
        #expect(plan.deletions.isEmpty)
        #expect(plan.directoryRemovals.isEmpty)
        #expect(plan.extrasKept == 2)
    }

    @Test func removesDeepestDirectoriesFirst() {
        let local = [p("a"): dir(), p("a/b"): dir(), p("a/b/c"): dir(), p("keep"): dir()]
        let m = manifest([ManifestEntry(path: p("keep/f"), size: 1, sha256: h1)])
        let plan = Reconciler.plan(manifest: m, local: local, known: [:], rules: deleteAll)
        #expect(plan.directoryRemovals == [p("a/b/c"), p("a/b"), p("a")])
    }

    /// What stands where the manifest needs a directory gives way whatever `delete` says, and is
    /// neither a deletion nor an extra; a directory where it needs a file goes only if what it
    /// holds may be deleted.
    @Test(arguments: [true, false])
    func typeChangesConverge(delete: Bool) {
        let m = manifest([
            ManifestEntry(path: p("was-file/now-inside"), size: 5, sha256: h1),
            ManifestEntry(path: p("was-link/x"), size: 5, sha256: h1),
            ManifestEntry(path: p("deep/was-fifo/y/z"), size: 5, sha256: h1),
            ManifestEntry(path: p("was-dir"), size: 5, sha256: h1),
            ManifestEntry(path: p("was-empty-dir"), size: 5, sha256: h1),
        ])
        let fifo = LocalEntry(kind: .other, size: 0, mtime: Timestamp(seconds: 0), ctime: Timestamp(seconds: 0), inode: 4, mode: 0o644)
        let local: [RelativePath: LocalEntry] = [
            p("was-file"): file(3), p("was-link"): symlink(), p("deep"): dir(), p("deep/was-fifo"): fifo,
            p("was-dir"): dir(), p("was-dir/a"): file(1), p("was-dir/sub"): dir(), p("was-dir/sub/b"): file(1),
            p("was-empty-dir"): dir(), p("was-empty-dir/nested"): dir(),
        ]
        let plan = Reconciler.plan(manifest: m, local: local, known: [:], rules: DeletionRules(delete: delete, cap: .percent(100)))
        #expect(plan.replacedByDirectory == [p("deep/was-fifo"), p("was-file"), p("was-link")])
        #expect(plan.deletions.isEmpty, "what is replaced is not deleted: \(plan.deletions)")
        #expect(plan.extrasKept == 0)
        #expect(plan.directoriesToReplace[p("was-empty-dir")] == [], "an empty directory gives way whatever delete says")
        if delete {
            #expect(plan.directoriesToReplace[p("was-dir")] == [p("was-dir/a"), p("was-dir/sub/b")])
            #expect(plan.blocked.isEmpty)
            #expect(plan.directoryRemovals.isEmpty, "directories inside a replaced one go with it")
        } else {
            #expect(plan.directoriesToReplace[p("was-dir")] == nil)
            #expect(plan.blocked.map(\.path) == [p("was-dir")])
            #expect(plan.blocked.first?.reason == .directoryKept(files: 2))
        }
        let downloads = Set(plan.downloads.map(\.entry.path.string))
        #expect(downloads.contains("was-file/now-inside") && downloads.contains("was-link/x") && downloads.contains("deep/was-fifo/y/z"))
        #expect(downloads.contains("was-empty-dir"))
        #expect(downloads.contains("was-dir") == delete)
    }

    /// `max-delete` counts deletions and what directories in the way hold, against the files the
    /// mirror holds; over it, nothing is deleted and such directories stay.
    @Test(arguments: [
        (DeletionCap.percent(50), 4, 2, true),   // 2 of 4 files: at the cap, allowed
        (DeletionCap.percent(50), 4, 3, false),  // 3 of 4: over
        (DeletionCap.percent(100), 4, 4, true),
        (DeletionCap.percent(0), 4, 1, false),
        (DeletionCap.count(3), 10, 3, true),
        (DeletionCap.count(3), 10, 4, false),
        (DeletionCap.count(0), 10, 1, false),
    ])
    func capsDeletions(cap: DeletionCap, files: Int, deleting: Int, allowed: Bool) {
        var local: [RelativePath: LocalEntry] = [:]
        var entries: [ManifestEntry] = []
        for i in 0..<files {
            local[p("f\(i)")] = file(5)
            if i >= deleting { entries.append(ManifestEntry(path: p("f\(i)"), size: 5, sha256: h1)) }
        }
        let plan = Reconciler.plan(manifest: manifest(entries), local: local, known: [:], rules: DeletionRules(delete: true, cap: cap))
        #expect(plan.deletions.count == (allowed ? deleting : 0))
        #expect((plan.refusedDeletions == nil) == allowed)
        if let refused = plan.refusedDeletions {
            #expect(refused.count == deleting && refused.managed == files && refused.paths.count == deleting)
        }
    }

    /// The percentage counts what the mirror holds, not what the manifest adds: a manifest that
    /// adds as many files as a directory of unrelated files holds cannot make deleting all of
    /// them look like half. (A small mirror whose names all change needs a count, or 100%.)
    @Test func whatTheManifestAddsDoesNotDiluteTheCap() {
        var local: [RelativePath: LocalEntry] = [:]
        var entries: [ManifestEntry] = []
        for i in 0..<100 {
            local[p("unrelated/\(i)")] = file(1)
            entries.append(ManifestEntry(path: p("site/\(i)"), size: 5, sha256: h1))
        }
        let plan = Reconciler.plan(manifest: manifest(entries), local: local, known: [:], rules: DeletionRules(delete: true, cap: .percent(50)))
        #expect(plan.deletions.isEmpty)
        #expect(plan.refusedDeletions == Plan.RefusedDeletions(count: 100, managed: 100, limit: 50, paths: plan.refusedDeletions?.paths ?? []))
        let rotation = Reconciler.plan(manifest: manifest([ManifestEntry(path: p("app-1.3.tar"), size: 5, sha256: h1)]),
                                       local: [p("app-1.2.tar"): file(5)], known: [:], rules: DeletionRules(delete: true, cap: .percent(50)))
        #expect(rotation.refusedDeletions?.count == 1)
        let counted = Reconciler.plan(manifest: manifest([ManifestEntry(path: p("app-1.3.tar"), size: 5, sha256: h1)]),
                                      local: [p("app-1.2.tar"): file(5)], known: [:], rules: DeletionRules(delete: true, cap: .count(5)))
        #expect(counted.deletions == [p("app-1.2.tar")])
    }

    @Test func aDirectoryInTheWayCountsAgainstTheCap() {
        let m = manifest([ManifestEntry(path: p("d"), size: 5, sha256: h1), ManifestEntry(path: p("keep"), size: 5, sha256: h1)])
        let local: [RelativePath: LocalEntry] = [p("d"): dir(), p("d/1"): file(1), p("d/2"): file(1), p("keep"): file(5), p("extra"): file(1)]
        let plan = Reconciler.plan(manifest: m, local: local, known: known([("keep", h1)]), rules: DeletionRules(delete: true, cap: .count(2)))
        #expect(plan.refusedDeletions?.count == 3, "two in the directory and one extra")
        #expect(plan.deletions.isEmpty)
        #expect(plan.blocked.first?.reason == .directoryOverCap(files: 2))
        #expect(plan.directoriesToReplace.isEmpty)
        #expect(!plan.downloads.contains { $0.entry.path == p("d") })
    }

    /// The first sync into a directory of unrelated files is covered by the same rule.
    @Test func unrelatedFilesAreRefusedByTheDefaultCap() {
        let local: [RelativePath: LocalEntry] = [p("mine1"): file(1), p("mine2"): file(1), p("docs"): dir(), p("docs/mine3"): file(1)]
        let m = manifest([ManifestEntry(path: p("site/index.html"), size: 5, sha256: h1)])
        let plan = Reconciler.plan(manifest: m, local: local, known: [:], rules: DeletionRules(delete: true, cap: .percent(50)))
        #expect(plan.deletions.isEmpty)
        #expect(plan.refusedDeletions?.count == 3)
        #expect(plan.refusedDeletions?.managed == 3)
        #expect(plan.directoryRemovals.isEmpty)
        #expect(plan.downloads.count == 1, "transfers still happen")
    }

    @Test(arguments: [(UInt32(0o7777 & 0o777), UInt32(0o022), UInt32(0o755)), (0o666, 0o022, 0o644), (0o777, 0o077, 0o700), (0o644, 0, 0o644)])
    func masksModes(manifestMode: UInt32, mask: UInt32, expected: UInt32) {
        let m = manifest([ManifestEntry(path: p("new"), size: 5, sha256: h1, mode: manifestMode),
                          ManifestEntry(path: p("here"), size: 5, sha256: h1, mode: manifestMode)])
        let plan = Reconciler.plan(manifest: m, local: [p("here"): file(5, mode: expected)], known: known([("here", h1)]),
                                   rules: keepAll, modeMask: mask)
        #expect(plan.downloads.map(\.entry.mode) == [expected])
        #expect(plan.metadataFixes.isEmpty, "a file with the masked mode is up to date")
        #expect(plan.upToDate == 1)
    }

    /// An mtime the filesystem could not store is recorded as applied: no fix on every run.
    @Test func anUnstorableMtimeIsNotFixedAgain() {
        let wanted = Timestamp(seconds: -62135596800)  // 0001-01-01
        let stored = file(5, mtime: -2147483648)
        let m = manifest([ManifestEntry(path: p("old"), size: 5, sha256: h1, mtime: wanted)])
        let remembered = CachedHash(stored, sha256: h1, wanted: wanted)
        #expect(remembered.wantedMtime == wanted)
        let plan = Reconciler.plan(manifest: m, local: [p("old"): stored], known: [p("old"): remembered], rules: keepAll)
        #expect(plan.metadataFixes.isEmpty && plan.upToDate == 1)
        let forgotten = CachedHash(stored, sha256: h1, wanted: nil)
        let again = Reconciler.plan(manifest: m, local: [p("old"): stored], known: [p("old"): forgotten], rules: keepAll)
        #expect(again.metadataFixes.map(\.path) == [p("old")])
        #expect(CachedHash(stored, sha256: h1, wanted: stored.mtime).wantedMtime == nil, "stored as asked: nothing to remember")
    }

    /// The plan merges manifest and tree in byte order: names that sort around '/' ('-' and '.'
    /// below it, '0' above) put a directory's contents between its siblings, and each path is
    /// still decided once.
    @Test func mergesAroundTheSlash() {
        let m = manifest(["a.txt", "a/b", "a0", "é"].map { ManifestEntry(path: p($0), size: 5, sha256: h1) })
        let local: [RelativePath: LocalEntry] = [
            p("a"): dir(), p("a/b"): file(5), p("a/old"): file(5), p("a-x"): file(5), p("a.txt"): file(5),
            p("a0"): dir(), p("a0/in"): file(5),
        ]
        let plan = Reconciler.plan(manifest: m, local: local, known: known([("a/b", h1), ("a.txt", h2)]), rules: deleteAll)
        #expect(plan.downloads.map(\.entry.path.string) == ["a.txt", "a0", "é"])
        #expect(plan.downloads.map(\.reason) == [.changed, .directoryInTheWay, .missing])
        #expect(plan.directoriesToReplace == [p("a0"): [p("a0/in")]])
        #expect(plan.upToDate == 1)
        #expect(plan.deletions == [p("a-x"), p("a/old")])
        #expect(plan.directoryRemovals.isEmpty, "a holds a listed file")
        #expect(plan.localFiles == 5)
    }

    @Test func hashesOnlyWhatTheCacheCannotVouchFor() {
        let e = ManifestEntry(path: p("f"), size: 5, sha256: h1)
        let local = file(5, mtime: 100, inode: 7)
        let fresh = CachedHash(size: 5, mtime: Timestamp(seconds: 100), ctime: Timestamp(seconds: 100), inode: 7, sha256: h1)
        let stale = CachedHash(size: 5, mtime: Timestamp(seconds: 99), ctime: Timestamp(seconds: 100), inode: 7, sha256: h1)
        let moved = CachedHash(size: 5, mtime: Timestamp(seconds: 100), ctime: Timestamp(seconds: 100), inode: 8, sha256: h1)
        func needsHash(_ e: ManifestEntry, local: LocalEntry?, cached: CachedHash?) -> Bool {
            let plan = Reconciler.plan(manifest: manifest([e]), local: local.map { [e.path: $0] } ?? [:],
                                       known: cached.map { [e.path: $0] } ?? [:], rules: keepAll)
            return plan.unhashed == [e.path]
        }
        #expect(!needsHash(e, local: local, cached: fresh))
        #expect(needsHash(e, local: local, cached: stale))
        #expect(needsHash(e, local: local, cached: moved))
        #expect(needsHash(e, local: local, cached: nil))
        #expect(!needsHash(e, local: file(6), cached: nil), "a file of another size is changed without hashing")
        #expect(!needsHash(e, local: nil, cached: nil))
        let sums = ManifestEntry(path: p("f"), size: nil, sha256: h1)
        #expect(needsHash(sums, local: file(6), cached: nil), "SHA256SUMS has no size: hash to know")
    }
}

struct DelayedRequestTests {
    let task = TransferTask(id: 1, session: "s", path: RelativePath(trusted: "f"), direction: .pull, state: .delayed, size: 5,
                            sha256: String(repeating: "1", count: 64), bytesDone: 0, validator: nil, attempts: 0, lastError: nil,
                            createdAt: Timestamp(seconds: 0), updatedAt: Timestamp(seconds: 0), url: "http://h/f")

    @Test func decidesContinueReplaceOrCancel() {
        let same = ManifestEntry(path: task.path, size: 5, sha256: task.sha256.digest)
        #expect(DelayedRequest.disposition(for: task, entry: same, url: "http://h/f").0 == .proceed)
        #expect(DelayedRequest.disposition(for: task, entry: same, url: "http://other/f").0 == .replace)
        let resized = ManifestEntry(path: task.path, size: 6, sha256: task.sha256.digest)
        #expect(DelayedRequest.disposition(for: task, entry: resized, url: "http://h/f").0 == .replace)
        let rehashed = ManifestEntry(path: task.path, size: 5, sha256: String(repeating: "2", count: 64).digest)
        #expect(DelayedRequest.disposition(for: task, entry: rehashed, url: "http://h/f").0 == .replace)
        #expect(DelayedRequest.disposition(for: task, entry: nil, url: nil).0 == .cancel)
    }
}

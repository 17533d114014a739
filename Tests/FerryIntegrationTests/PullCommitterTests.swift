import Foundation
import Glibc
import Testing
@testable import FerryRuntime
import FerryCore

/// The pull's group commit (`PullCommitter`) on a real directory and state database, with its own
/// thread and without one (what a process out of threads gets): verified downloads of a `file://`
/// source, taken in exactly as the engine takes them, are put in place in groups with their mode
/// and mtime and their tasks marked done; one that cannot be placed fails alone, keeps its data,
/// and its task is not done.
struct PullCommitterTests {
    let dir = Harness.temporaryDirectory("pull-committer")

    /// A download of `path` from the source tree, run to its verified end.
    func entry(_ path: String, _ i: Int) -> ManifestEntry {
        let bytes = Array("content of \(path)\n".utf8)
        let sha = bytes.withUnsafeBytes { SHA256Hasher().digest(of: $0) }
        return ManifestEntry(path: RelativePath(trusted: path), size: Int64(bytes.count), sha256: sha, mtime: Timestamp(seconds: 1_000_000_000 + Int64(i)), mode: 0o640)
    }

    func verifiedDownload(_ root: LocalRoot, source: RemoteTree, _ entry: ManifestEntry, task: TransferTask) throws -> Download {
        let (partial, _) = try root.openPartial(taskID: task.id)
        let download = try Download(task: task, entry: entry, reason: .missing, origin: .stepped(FileSource(tree: source, path: entry.path)), partial: partial,
                                    resumeFrom: 0, validator: nil, clock: SystemClock())
        var outcome: TransferOutcome?
        while outcome == nil { outcome = download.step() }
        guard case .succeeded = outcome! else { throw FerryError.localIO("\(entry.path) did not verify") }
        return download
    }

    @Test(arguments: [true, false])
    func verifiedFilesArePlacedInGroupsAndOneInTheWayFailsAlone(threaded: Bool) throws {
        defer { Harness.remove(dir) }
        let paths = (0..<600).map { "d\($0 % 3)/f\($0).txt" } + ["blocked"]
        for p in paths {
            let full = dir + "/source/" + p
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data("content of \(p)\n".utf8).write(to: URL(fileURLWithPath: full))
        }
        // Where "blocked" goes, a directory that holds a file (the plan did not allow it to go).
        try FileManager.default.createDirectory(atPath: dir + "/local/blocked", withIntermediateDirectories: true)
        try Data("keep\n".utf8).write(to: URL(fileURLWithPath: dir + "/local/blocked/x"))
        let root = try LocalRoot(path: dir + "/local", create: true)
        let source = RemoteTree(path: dir + "/source")
        let store = try StateStore(directory: dir + "/state", clock: SystemClock())
        let entries = paths.enumerated().map { entry($1, $0) }
        let queued = try store.queueDownloads(session: "s", entries: entries, urlFor: { "file:///" + $0.path.string }, notBefore: nil)

        let committer = PullCommitter(root: root, store: store, session: "s", clock: SystemClock())
        if threaded { committer.start() }
        var outcomes: [PullCommitter.Outcome] = []
        for (e, queuedTask) in zip(entries, queued.tasks) {
            var task = queuedTask
            task.attempts = 1
            committer.submit(try verifiedDownload(root, source: source, e, task: task))
            outcomes += committer.collect().outcomes
        }
        let last = committer.drain()
        outcomes += last.outcomes
        committer.stop()
        #expect(last.storeError == nil)
        #expect(committer.drain().isEmpty, "everything was handed back once")

        var placed = Set<String>()
        for outcome in outcomes {
            switch outcome {
            case let .placed(download, cache):
                placed.insert(download.entry.path.string)
                #expect(cache.size == download.entry.size && cache.sha256 == download.entry.sha256)
            case let .failed(download, error, kept):
                #expect(download.entry.path.string == "blocked")
                #expect(error.message.contains("is a directory where the manifest has a file"), "\(error.message)")
                #expect(kept == download.entry.size, "its verified data stays for the next run")
            case let .unrecorded(download):
                Issue.record("\(download.entry.path) was placed but not recorded")
            }
        }
        #expect(placed.count == 600 && !placed.contains("blocked"))
        #expect(outcomes.count == 601)
        for (i, p) in paths.enumerated() where p != "blocked" {
            let full = dir + "/local/" + p
            #expect(fileContents(full) == "content of \(p)\n")
            var st = stat()
            #expect(lstat(full, &st) == 0 && st.st_mode & 0o7777 == 0o640 && st.st_mtim.tv_sec == 1_000_000_000 + i, "\(p)")
        }
        // Done in the store (by the committer's own connection when it has a thread), with the
        // hash of what is in place; the blocked file's task is not.
        let states = Dictionary(uniqueKeysWithValues: try store.tasks(session: "s").map { ($0.path.string, $0.state) })
        #expect(states.filter { $0.value == .done }.count == 600 && states["blocked"] != .done, "\(states["blocked"].map(\.rawValue) ?? "none")")
        let hashes = try store.hashCache(session: "s")
        #expect(hashes.count == 600 && hashes[RelativePath(trusted: "d1/f1.txt")]?.sha256 == entries[1].sha256)
        #expect(fileContents(dir + "/local/blocked/x") == "keep\n")
        // Every partial file was closed by the committer, placed or not.
        let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap { fd in
            try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd)
        }
        #expect(!open.contains { $0.hasPrefix(dir + "/local/") && ($0.hasSuffix(".txt") || $0.hasSuffix(".part")) }, "\(open.filter { $0.hasPrefix(dir) }.prefix(3))")
        let partials = try FileManager.default.contentsOfDirectory(atPath: dir + "/local/" + LocalRoot.stagingPath)
        #expect(partials == [LocalRoot.partialName(Int64(paths.count))], "only the blocked file's partial is left: \(partials.prefix(5))")
    }

    /// The commit thread makes the partial files of the downloads due next, in order, before
    /// they are asked for; each taken is the empty file at its task's name. Those never taken go
    /// when it stops, except one that holds data (resume data is never thrown away).
    @Test func partialFilesAreMadeAheadAndOnlyEmptyOnesNeverTakenGo() throws {
        defer { Harness.remove(dir) }
        let root = try LocalRoot(path: dir + "/local", create: true)
        try root.openStaging()
        let staging = dir + "/local/" + LocalRoot.stagingPath
        // Task 30 was cut short by an earlier run: 5 bytes kept (opened ahead, never taken).
        try Data("hello".utf8).write(to: URL(fileURLWithPath: staging + "/" + LocalRoot.partialName(30)))
        let store = try StateStore(directory: dir + "/state", clock: SystemClock())
        let committer = PullCommitter(root: root, store: store, session: "s", clock: SystemClock())
        committer.expect(Array(1...200))
        committer.start()
        func files() -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: staging)) ?? [] }
        #expect(eventually { committer.partialsReady >= PullCommitter.openAhead }, "made ahead: \(committer.partialsReady)")
        var taken: [Int32] = []
        defer { for fd in taken { close(fd) } }
        for id in Int64(1)...20 {
            guard let made = committer.takePartial(id) else {
                Issue.record("task \(id) was made ahead but not handed out")
                continue
            }
            taken.append(made.partial.fd)
            var held = stat(), named = stat()
            #expect(fstat(made.partial.fd, &held) == 0 && lstat(staging + "/" + LocalRoot.partialName(id), &named) == 0)
            #expect(held.st_ino == named.st_ino && held.st_size == 0 && made.partial.length == 0 && made.stray == nil)
        }
        committer.stop()
        let left = Set(files())
        #expect(left == Set((1...20).map { LocalRoot.partialName($0) } + [LocalRoot.partialName(30)]), "\(left.sorted().prefix(8))")
        #expect(fileContents(staging + "/" + LocalRoot.partialName(30)) == "hello")
    }

    /// A group need not fill up: a lone verified file is in place, and its task done, within the
    /// group interval, with no drain (a pull of a few large files places each as it ends).
    @Test func aLoneFileIsPlacedWithoutWaitingForTheRunToEnd() throws {
        defer { Harness.remove(dir) }
        try FileManager.default.createDirectory(atPath: dir + "/source", withIntermediateDirectories: true)
        try Data("content of one.txt\n".utf8).write(to: URL(fileURLWithPath: dir + "/source/one.txt"))
        let root = try LocalRoot(path: dir + "/local", create: true)
        let store = try StateStore(directory: dir + "/state", clock: SystemClock())
        let e = entry("one.txt", 7)
        var task = try store.queueDownloads(session: "s", entries: [e], urlFor: { _ in "file:///one.txt" }, notBefore: nil).task(e.path)!
        task.attempts = 1
        let committer = PullCommitter(root: root, store: store, session: "s", clock: SystemClock())
        committer.start()
        defer { committer.stop() }
        committer.submit(try verifiedDownload(root, source: RemoteTree(path: dir + "/source"), e, task: task))
        var outcomes: [PullCommitter.Outcome] = []
        #expect(eventually(10) {
            outcomes += committer.collect().outcomes
            return !outcomes.isEmpty
        }, "placed by the thread on its own")
        guard case .placed? = outcomes.first else { Issue.record("not placed: \(outcomes)"); return }
        #expect(fileContents(dir + "/local/one.txt") == "content of one.txt\n")
        #expect(try store.tasks(session: "s").first?.state == .done)
    }
}

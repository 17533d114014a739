import Foundation
import Synchronization
import Testing
@testable import FerryRuntime
import FerryCore

/// `layout = generations` (issue 21): `local` is a symlink to a directory holding one whole,
/// verified version; a sync builds the next one beside it (hard links for what did not change)
/// and switches the symlink with one rename. Readers never see two versions mixed, a kill at any
/// moment leaves a whole generation current, and an edit in the current generation never travels
/// into another through a shared inode.
@Suite(.serialized)
struct GenerationsTests {
    func inode(_ path: String) -> UInt64? {
        var st = stat()
        return lstat(path, &st) == 0 ? UInt64(st.st_ino) : nil
    }

    func mode(_ path: String) -> UInt32? {
        var st = stat()
        return lstat(path, &st) == 0 ? UInt32(st.st_mode & 0o7777) : nil
    }

    /// What `local` names (`mirror.generations/g3`), or nil when it is not a symlink.
    func target(_ box: Sandbox) -> String? { Generations.readLink(box.local) }

    /// The directory `local` leads to (tree walks do not follow a symlink at their root).
    func current(_ box: Sandbox) -> String {
        target(box).map { (box.local as NSString).deletingLastPathComponent + "/" + $0 } ?? box.local
    }

    /// The names in `<local>.generations`, sorted.
    func generations(_ box: Sandbox) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: box.local + ".generations")) ?? []).sorted()
    }

    func generation(_ box: Sandbox, _ name: String) -> String { box.local + ".generations/" + name }

    @Test func onlyNumberedNamesAreGenerations() {
        #expect(Generations.number("g1") == 1 && Generations.number("g0") == 0 && Generations.number("g120") == 120)
        for name in ["g", "g01", "g1.deleting", ".switch", "G1", "g-1", "g1x", "g99999999999999999999"] { #expect(Generations.number(name) == nil, "\(name)") }
        let g = Generations(local: "/srv/mirror")
        #expect(g.directory == "/srv/mirror.generations" && g.path(3) == "/srv/mirror.generations/g3")
    }

    @Test func eachChangeBuildsAGenerationOfLinksAndSwitchesOnce() throws {
        let box = Sandbox("generations")
        for i in 0..<6 { box.publish("d\(i % 2)/f\(i).txt", "one \(i)\n") }
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        box.configure(remote: server.url, session: ["layout = generations", "delete = yes"])

        let first = box.sync(["--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(target(box) == "mirror.generations/g1")
        expectIdentical(box.published, current(box))
        let switched = try #require(first.events(named: "generation-switched").first)
        #expect(switched["generation"] as? String == "g1" && switched["changed"] as? Int == 6 && switched["previous"] == nil, "\(switched)")

        // One file changes, one goes: a new generation; the other files are the same inodes
        // (they cost no space), the changed one is new, and the old generation is untouched.
        box.publish("d0/f0.txt", "two 0\n")
        box.unpublish("d1/f5.txt")
        box.buildManifest()
        let second = box.sync(["--json"])
        #expect(second.exitCode == 0, "\(second.output)")
        #expect(target(box) == "mirror.generations/g2")
        expectIdentical(box.published, current(box))
        let (g1, g2) = (generation(box, "g1"), generation(box, "g2"))
        for i in 1..<5 { #expect(inode(g1 + "/d\(i % 2)/f\(i).txt") == inode(g2 + "/d\(i % 2)/f\(i).txt"), "f\(i) is a hard link") }
        #expect(inode(g1 + "/d0/f0.txt") != inode(g2 + "/d0/f0.txt"))
        #expect(fileContents(g1 + "/d0/f0.txt") == "one 0\n" && fileContents(g1 + "/d1/f5.txt") == "one 5\n", "the old generation is whole")
        #expect(second.events(named: "file-done").count == 1)
        #expect(second.events(named: "generation-switched").first?["changed"] as? Int == 1)
        #expect(second.events(named: "generation-switched").first?["previous"] as? String == "g1")

        // Nothing changed: no generation, nothing fetched, nothing hashed.
        let idle = box.sync(["--json"])
        #expect(idle.exitCode == 0 && idle.events(named: "generation-switched").isEmpty && idle.events(named: "file-done").isEmpty, "\(idle.output)")
        #expect(idle.events(named: "planned").first?["hashed"] as? Int == 0, "\(idle.output)")
        #expect(target(box) == "mirror.generations/g2")

        // keep-generations = 2: the current one and two before it stay.
        for round in 3...5 {
            box.publish("d1/f1.txt", "round \(round)\n")
            box.buildManifest()
            #expect(box.sync().exitCode == 0)
            #expect(target(box) == "mirror.generations/g\(round)")
        }
        #expect(generations(box) == ["g3", "g4", "g5"], "\(generations(box))")
        expectIdentical(box.published, current(box))
        let status = box.statusText()
        #expect(status.contains("  generation g5 is current; kept: g3, g4"), "\(status)")
        #expect(box.statusSessions().first?["generation"] as? String == "g5")
    }

    /// What the readers saw: each open directory one whole version, the versions changing; by
    /// path, whole files, the old version until the switch and the new one after, never back.
    static func expectOneVersionEach(views: [Set<Int?>], reads: [Int?]) {
        #expect(views.count >= 6, "the reader that opens local once ran throughout: \(views.count)")
        for view in views {
            #expect(view.count == 1 && view.first! != nil, "one whole version per open directory: \(view)")
        }
        #expect(Set(views.compactMap { $0.first ?? nil }).count >= 3, "it saw the versions change")
        #expect(reads.allSatisfy { $0 != nil }, "every file read by path is whole")
        let rounds = reads.compactMap { $0 }
        #expect(zip(rounds, rounds.dropFirst()).allSatisfy { $0 <= $1 },
                "by path: the old version until the switch, the new one after, never back")
        #expect(Set(rounds).count >= 3)
    }

    /// Readers run beside syncs (some killed): one that opens `local` once and reads relative to
    /// it sees one version; one that resolves the path for every file never goes back to an
    /// older version once it saw a newer one; and every file read is whole.
    @Test func readersNeverSeeAMixWhileSyncsSwitchAndAreKilled() throws {
        let box = Sandbox("generations-readers")
        let names = (0..<12).map { "f\($0).txt" }
        func publishRound(_ round: Int) {
            for name in names { box.publish(name, "round \(round) \(name)\n") }
            box.publish("big.bin", Data("round \(round) big\n".utf8) + randomData(600_000, seed: UInt64(round)))
            box.buildManifest()
        }
        publishRound(0)
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["*": ["rate": 2_000_000]])
        box.configure(remote: server.url, session: ["layout = generations"])
        #expect(box.sync().exitCode == 0)

        /// "round N ...": N.
        @Sendable func round(_ data: Data) -> Int? { Int(String(decoding: data.dropFirst(6).prefix { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self)) }
        let local = box.local
        let stop = Shared(Atomic<Bool>(false))
        let snapshots = Shared(Mutex<[Set<Int?>]>([]))
        let pathReads = Shared(Mutex<[Int?]>([]))
        let opened = Thread {
            while !stop.value.load(ordering: .relaxed) {
                let dir = open(local, O_RDONLY | O_DIRECTORY)
                guard dir >= 0 else { continue }
                var seen = Set<Int?>()
                for name in names + ["big.bin"] {
                    let fd = openat(dir, name, O_RDONLY)
                    var data = Data()
                    if fd >= 0 {
                        var buffer = [UInt8](repeating: 0, count: 1 << 16)
                        while true {
                            let n = read(fd, &buffer, buffer.count)
                            if n <= 0 { break }
                            data.append(contentsOf: buffer[..<n])
                        }
                        close(fd)
                    }
                    seen.insert(round(data))
                }
                close(dir)
                snapshots.value.withLock { $0.append(seen) }
            }
        }
        let resolving = Thread {
            while !stop.value.load(ordering: .relaxed) {
                for name in names {
                    let data = FileManager.default.contents(atPath: local + "/" + name) ?? Data()
                    let r = round(data)
                    // Whole: the file is exactly what round r published for it.
                    pathReads.value.withLock { $0.append(data == Data("round \(r ?? -1) \(name)\n".utf8) ? r : nil) }
                }
            }
        }
        opened.start()
        resolving.start()
        for r in 1...6 {
            publishRound(r)
            let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config], stdout: box.directory + "/sync.out",
                                  stderr: box.directory + "/sync.err")
            if r % 2 == 1 {
                #expect(box.waitForRunningTask(), "round \(r): the download began")
                child.signal(SIGKILL)
                _ = child.wait(timeout: 10)
                #expect(box.sync().exitCode == 0, "round \(r): the run after the kill finishes the generation")
            } else {
                #expect(child.wait(timeout: 60) == 0, "round \(r): \(fileContents(box.directory + "/sync.err") ?? "")")
            }
            #expect(target(box) != nil)
        }
        stop.value.store(true, ordering: .relaxed)
        #expect(eventually(60) { opened.isFinished && resolving.isFinished })

        Self.expectOneVersionEach(views: snapshots.value.withLock { $0 }, reads: pathReads.value.withLock { $0 })
        expectIdentical(box.published, current(box))
    }

    /// `local` names a whole generation: every file of one of `rounds`, and nothing else; and
    /// builds never pile up.
    func expectWhole(_ box: Sandbox, rounds: [[String: UInt64]], after moment: String) {
        guard target(box) != nil else {
            #expect(!FileManager.default.fileExists(atPath: box.local), "after \(moment): local is a symlink or absent")
            return
        }
        var seen: [String: UInt64] = [:]
        let root = current(box) + "/"
        let walker = FileManager.default.enumerator(atPath: root)
        while let rel = walker?.nextObject() as? String {
            if rel == ".ferry" { walker?.skipDescendants(); continue }
            var st = stat()
            guard lstat(root + rel, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
            seen[rel] = fnv1a(FileManager.default.contents(atPath: root + rel) ?? Data())
        }
        #expect(rounds.contains { $0 == seen },
                "after \(moment): local holds one whole published version (\(seen.count) files)")
        let builds = generations(box).filter { !$0.hasSuffix(".deleting") }
        #expect(builds.count <= 3,
                "after \(moment): the current generation, one kept and at most one build: \(generations(box))")
    }

    /// `kill -9` at random moments of syncs that build generations: after every kill `local`
    /// names a generation holding exactly one published version, builds never accumulate, and a
    /// relaunch goes on with the build (resuming its partial files).
    @Test func killNineAtAnyMomentLeavesAWholeGenerationCurrent() throws {
        let env = ProcessInfo.processInfo.environment
        let kills = Int(env["FERRY_KILLS"] ?? "") ?? (env["FERRY_SOAK"] != nil ? 40 : 10)
        let seed = UInt64(env["FERRY_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970 * 1000)
        var random = CrashTests.SeededRandom(state: seed)
        print("generations kill -9 test: \(kills) kills, FERRY_SEED=\(seed)")
        let box = Sandbox("generations-kill9")
        /// Per round, what each path holds.
        var rounds: [[String: UInt64]] = []
        func publishRound() {
            let r = rounds.count
            var files: [String: UInt64] = [:]
            func put(_ path: String, _ data: Data) {
                box.publish(path, data)
                files[path] = fnv1a(data)
            }
            put("big/one.bin", Data("round \(r)\n".utf8) + randomData(3_000_000, seed: seed &+ UInt64(r)))
            for i in 0..<40 { put("small/d\(i % 4)/s\(i).txt", Data("round \(r) \(i)\n".utf8) + (i % 3 == r % 3 ? randomData(500, seed: seed &+ UInt64(r * 100 + i)) : Data())) }
            if r > 0 {
                // Some files come and go between rounds.
                let goneFrom = rounds[r - 1].keys.filter { $0.hasPrefix("extra/") }
                for path in goneFrom where r % 2 == 0 { box.unpublish(path) }
                if r % 2 == 1 { put("extra/e\(r).txt", Data("round \(r) extra\n".utf8)) }
            }
            for (path, hash) in rounds.last ?? [:] where files[path] == nil && FileManager.default.fileExists(atPath: box.published + "/" + path) {
                files[path] = hash
            }
            box.buildManifest()
            rounds.append(files)
        }
        publishRound()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["*": ["rate": 3_000_000]])
        box.configure(remote: server.url, session: ["layout = generations", "keep-generations = 1", "delete = yes"])

        var completed = 0
        for i in 0..<kills {
            let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--json"], stdout: box.directory + "/run\(i).jsonl",
                                  stderr: box.directory + "/err\(i)")
            var (status, moment): (Int32?, String)
            if i == 0 {
                // The first kill lands once the big file's partial holds checkpointed bytes, however
                // slow a loaded machine is to get there, so a relaunch has one to resume (a small
                // file checkpointed whole is no partial to resume); the rest at random.
                let store = try StateStore(directory: box.state, clock: SystemClock())
                let checkpointed = eventually(60) {
                    ((try? store.tasks(session: "test")) ?? []).contains { $0.path.string == "big/one.bin" && $0.bytesDone > 0 && $0.bytesDone < $0.size ?? .max }
                }
                child.signal(SIGKILL)
                (status, moment) = (child.wait(timeout: 30), "once a partial was checkpointed (\(checkpointed))")
            } else {
                (status, moment) = CrashTests.kill(child, within: 0.05...1.2, using: &random)
            }
            expectWhole(box, rounds: rounds, after: "kill \(i + 1) \(moment)")
            if status == 0 {
                completed += 1
                publishRound()
            }
        }
        server.setFaults([:])
        let final = box.sync(["--json"])
        #expect(final.exitCode == 0, "\(final.output)")
        expectWhole(box, rounds: rounds, after: "the final run")
        expectIdentical(box.published, current(box))
        // The final run builds a generation over the last one a run finished (kept: keep-generations
        // = 1); when every run was killed before it finished (a slow, loaded machine), there is none.
        let left = generations(box)
        #expect(left.count == (completed > 0 ? 2 : 1) && left.allSatisfy { Generations.number($0) != nil },
                "the current and one kept (\(completed) runs finished), nothing else: \(left)")
        // A relaunch killed (at random) before it said so leaves the partial to the next: the final
        // run is a relaunch too (on a loaded machine every random kill may land before the resume).
        let resumed = (0..<kills).flatMap { FerryRun(exitCode: 0, stdout: fileContents(box.directory + "/run\($0).jsonl") ?? "", stderr: "").events(named: "file-resumed") }
            + final.events(named: "file-resumed")
        #expect(resumed.count > 0, "a relaunch went on with the build and resumed a partial file in it (seed \(seed))")
        print("generations kill -9 test: \(kills) kills, \(completed) runs finished, \(resumed.count) resumes (seed \(seed))")
    }

    /// A file edited in the current generation shares its inode with the generations before: the
    /// edit is not carried into the next one (its stat moved, so it is hashed, and bytes that are
    /// not the manifest's are fetched anew, never linked), and ferry writes into no shared inode
    /// (a mode change copies the file first).
    @Test func anEditInTheCurrentGenerationIsFetchedAnewAndNeverSpreads() throws {
        let box = Sandbox("generations-edit")
        box.publish("a.txt", "alpha\n")
        box.publish("b.txt", "bravo\n")
        box.publish("c.txt", "charlie\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["layout = generations"])
        #expect(box.sync().exitCode == 0)
        box.publish("c.txt", "charlie two\n")
        box.buildManifest()
        #expect(box.sync().exitCode == 0)
        let (g1, g2) = (generation(box, "g1"), generation(box, "g2"))
        #expect(inode(g1 + "/a.txt") == inode(g2 + "/a.txt"))

        // Written in place with the same size and mtime put back: only the ctime says so.
        var st = stat()
        #expect(stat(box.localPath("a.txt"), &st) == 0)
        let fd = open(box.localPath("a.txt"), O_WRONLY)
        #expect(fd >= 0 && write(fd, "ALPHA\n", 6) == 6)
        close(fd)
        var times = [st.st_atim, st.st_mtim]
        utimensat(AT_FDCWD, box.localPath("a.txt"), &times, 0)
        #expect(fileContents(g1 + "/a.txt") == "ALPHA\n", "a hard link shares the edit (why it must not spread further)")

        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(target(box) == "mirror.generations/g3", "the edit alone makes a new generation that repairs it")
        let g3 = generation(box, "g3")
        #expect(fileContents(g3 + "/a.txt") == "alpha\n")
        #expect(inode(g3 + "/a.txt") != inode(g2 + "/a.txt"), "fetched anew, not linked")
        #expect(run.events(named: "planned").first?["hashed"] as? Int == 1, "the edited file was hashed: \(run.output)")
        #expect(fileContents(g2 + "/a.txt") == "ALPHA\n", "ferry did not write into the edited inode")
        #expect(inode(g3 + "/b.txt") == inode(g2 + "/b.txt"))

        // Only the ctime moved (another hard link, as a backup's `cp -al` makes): the bytes are
        // the manifest's, so the file is linked, not fetched.
        #expect(link(box.localPath("b.txt"), box.directory + "/backup-b.txt") == 0)
        box.publish("c.txt", "charlie three\n")
        box.buildManifest()
        let linked = box.sync(["--json"])
        #expect(linked.exitCode == 0 && linked.events(named: "file-done").map { $0["path"] as? String } == ["c.txt"], "\(linked.output)")
        #expect(linked.events(named: "planned").first?["hashed"] as? Int == 1)
        let g4 = generation(box, "g4")
        #expect(inode(g4 + "/b.txt") == inode(g3 + "/b.txt"))
        unlink(box.directory + "/backup-b.txt")
        #expect(box.sync(["--json"]).events(named: "planned").first?["hashed"] as? Int == 1, "the unlink moved the ctime again")

        // A mode change on the remote: the new generation's file is a copy with the new mode; the
        // generations before keep theirs.
        chmod(box.published + "/b.txt", 0o600)
        box.buildManifest()
        let fix = box.sync(["--json"])
        #expect(fix.exitCode == 0, "\(fix.output)")
        let g5 = generation(box, "g5")
        #expect(target(box) == "mirror.generations/g5")
        #expect(mode(g5 + "/b.txt") == 0o600 && mode(g4 + "/b.txt") == 0o644 && mode(g3 + "/b.txt") == 0o644)
        #expect(inode(g5 + "/b.txt") != inode(g4 + "/b.txt"))
        #expect(fix.events(named: "file-done").isEmpty, "a mode change fetches nothing: \(fix.output)")
        expectIdentical(box.published, current(box))
        #expect(box.sync(["--json"]).events(named: "planned").first?["hashed"] as? Int == 0, "the cache holds every file")
    }

    /// An existing mirror changes layout both ways without fetching or hashing its files again.
    @Test func convertsAnExistingMirrorBothWaysWithoutFetchingAgain() throws {
        let box = Sandbox("generations-convert")
        for i in 0..<20 { box.publish("d\(i % 3)/f\(i).txt", "file \(i)\n") }
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        #expect(box.sync().exitCode == 0)
        let before = inode(box.localPath("d1/f1.txt"))

        box.configure(remote: "file://" + box.published, session: ["layout = generations"])
        let toGenerations = box.sync(["--json"])
        #expect(toGenerations.exitCode == 0, "\(toGenerations.output)")
        #expect(toGenerations.events(named: "file-done").isEmpty && toGenerations.events(named: "planned").first?["hashed"] as? Int == 0,
                "\(toGenerations.output)")
        #expect(target(box) == "mirror.generations/g2")
        #expect(inode(box.localPath("d1/f1.txt")) == before, "the files are the mirror's own, linked")
        #expect(generations(box) == ["g1", "g2"], "the directory the mirror was is the generation before: \(generations(box))")
        expectIdentical(box.published, current(box))
        #expect(box.sync(["--json"]).events(named: "generation-switched").isEmpty, "converted once")

        box.configure(remote: "file://" + box.published, session: ["layout = in-place"])
        let back = box.sync(["--json"])
        #expect(back.exitCode == 0, "\(back.output)")
        #expect(target(box) == nil && !FileManager.default.fileExists(atPath: box.local + ".generations"))
        #expect(back.events(named: "file-done").isEmpty && back.events(named: "planned").first?["hashed"] as? Int == 0, "\(back.output)")
        #expect(inode(box.localPath("d1/f1.txt")) == before)
        expectIdentical(box.published, box.local)
    }

    /// Hooks run once the generation is current, and name the file in it; check and check
    /// --repair see the current generation; a delayed file holds the switch back until it arrives.
    @Test func hooksCheckAndDelayedTasksWorkOnGenerations() throws {
        let box = Sandbox("generations-more")
        box.publish("a.txt", "alpha\n")
        box.publish("b.txt", "bravo\n")
        box.buildManifest()
        let log = box.directory + "/hooks.log"
        let hook = "on-file-done = /bin/sh -c 'echo \"$FERRY_PATH $FERRY_LOCAL $(readlink \(box.local)) $(cat \"$FERRY_LOCAL\")\" >> \(log)'"
        box.configure(remote: "file://" + box.published, session: ["layout = generations", hook])
        #expect(box.sync().exitCode == 0)
        box.publish("b.txt", "bravo two\n")
        box.buildManifest()
        #expect(box.sync().exitCode == 0)
        let lines = (fileContents(log) ?? "").split(separator: "\n").map(String.init)
        let g2 = generation(box, "g2")
        #expect(lines.last == "b.txt \(g2)/b.txt mirror.generations/g2 bravo two", "\(lines)")
        #expect(lines.count == 3, "one hook per file a switch made new: \(lines)")

        // check reads the current generation; --repair makes a new one with the file put right.
        try "BRAVO TWO\n".writeReplacing(g2 + "/b.txt.tmp")
        rename(g2 + "/b.txt.tmp", g2 + "/b.txt")
        let found = ferry(["check", "--config", box.config, "--json"])
        #expect(found.exitCode == 1 && found.events(named: "plan-item").map { $0["path"] as? String } == ["b.txt"], "\(found.output)")
        let repaired = ferry(["check", "--repair", "--config", box.config])
        #expect(repaired.exitCode == 0, "\(repaired.output)")
        #expect(target(box) == "mirror.generations/g3" && fileContents(box.localPath("b.txt")) == "bravo two\n")
        #expect(fileContents(g2 + "/b.txt") == "BRAVO TWO\n", "the generation before is left as it was")

        // A file delayed to later: the generation waits, whole, until it is there.
        box.publish("c.txt", "charlie\n")
        box.buildManifest()
        let later = Date().addingTimeInterval(3)
        let delayed = box.sync(["--not-before", Timestamp(seconds: Int64(later.timeIntervalSince1970)).rfc3339])
        #expect(delayed.exitCode != 0 && delayed.output.contains("is not complete"), "\(delayed.output)")
        #expect(target(box) == "mirror.generations/g3" && !FileManager.default.fileExists(atPath: box.localPath("c.txt")))
        #expect(box.statusText().contains("g4 is being built"), "\(box.statusText())")
        box.waitUntilDelayedTasksAreDue()
        #expect(box.sync().exitCode == 0)
        #expect(target(box) == "mirror.generations/g4" && fileContents(box.localPath("c.txt")) == "charlie\n")
        expectIdentical(box.published, current(box))
    }
}

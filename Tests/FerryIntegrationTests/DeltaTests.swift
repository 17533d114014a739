import Foundation
import Testing
import FerryCore

/// Delta transfers end to end, through the binary: a changed large file costs a mirror about
/// what changed (the server's own count), every byte verified; a remote that serves wrong bytes
/// for a range, or will not answer ranges, never gets a wrong byte placed.
@Suite(.serialized)
struct DeltaTests {
    /// Bytes from a fixed seed: the same in every run.
    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] { Array(randomData(count, seed: seed)) }

    static let size = 6 << 20

    /// The new version: a 64 KiB run rewritten, three 4 KiB writes, 1 KiB inserted (77 KiB in all).
    static func changed(_ old: [UInt8]) -> [UInt8] {
        var data = old
        data.replaceSubrange((1 << 20)..<((1 << 20) + 65_536), with: bytes(65_536, seed: 11))
        for (i, at) in [2_600_000, 3_400_000, 4_200_000].enumerated() {
            data.replaceSubrange(at..<(at + 4096), with: bytes(4096, seed: 20 + UInt64(i)))
        }
        data.insert(contentsOf: bytes(1024, seed: 30), at: 5 << 20)
        return data
    }
    static let changedBytes = 65_536 + 3 * 4096 + 1024

    /// Publishes the first version, mirrors it, then publishes the changed one.
    static func mirrorThenChange(_ box: Sandbox, session: [String] = [], remote: String) -> (old: [UInt8], new: [UInt8]) {
        let old = bytes(size, seed: 1)
        box.publish("big.bin", Data(old))
        box.publish("small.txt", "small\n")
        box.buildManifest()
        box.configure(remote: remote, session: session)
        let first = box.sync(["--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(old))
        let new = changed(old)
        box.publish("big.bin", Data(new))
        box.publish("small.txt", "small, changed\n")
        box.buildManifest()
        return (old, new)
    }

    /// Publishes `big.bin` holding `data`, serves it with ferry's test server and mirrors it.
    static func mirrorOverPython(_ box: Sandbox, _ data: Data) throws -> PythonServer {
        box.publish("big.bin", data)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        box.configure(remote: server.url)
        #expect(box.sync().exitCode == 0)
        return server
    }

    /// The run's `delta-fallback` events: each file fetched whole, why, and what said so.
    static func fallbacks(_ run: FerryRun) -> [(path: String, reason: String, message: String)] {
        run.events(named: "delta-fallback").map {
            ($0["path"] as? String ?? "", $0["reason"] as? String ?? "", $0["message"] as? String ?? "")
        }
    }

    static func fileDone(_ run: FerryRun, _ path: String = "big.bin") -> (fetched: Int, reused: Int)? {
        guard let e = run.events(named: "file-done").first(where: { $0["path"] as? String == path }) else { return nil }
        return ((e["fetched"] as? Int) ?? -1, (e["reused"] as? Int) ?? 0)
    }

    @Test func aChangedLargeFileCostsAboutWhatChangedOverHTTP() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("delta-http", published: server.root)
        let (_, new) = Self.mirrorThenChange(box, remote: server.url)
        let indexObjects = (try? FileManager.default.contentsOfDirectory(atPath: server.root + "/.ferry/meta"))?.count ?? 0
        server.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new), "the new version, byte for byte")
        let done = try #require(Self.fileDone(run), "\(run.output)")
        // Every byte either reused or fetched (the fetched ones in parts of one multipart answer,
        // whose framing counts as fetched).
        #expect(done.reused + done.fetched >= new.count && done.reused + done.fetched < new.count + 5_000, "\(done)")
        #expect(done.fetched < Self.changedBytes + 100_000, "fetched about what changed: \(done.fetched) for \(Self.changedBytes)")
        let planned = try #require(run.events(named: "delta-planned").first, "\(run.output)")
        #expect(planned["files"] as? Int == 1 && planned["whole"] as? Int == 0, "\(planned)")
        #expect((planned["fetch"] as? Int ?? .max) <= done.fetched && planned["reused"] as? Int == done.reused, "the plan is what happened: \(planned)")
        // The version held was known by the cached index of its content (the hash cache vouches
        // for the file): it was not read to plan.
        #expect(planned["read"] as? Int == 0, "\(planned)")
        // nginx's own count of what it sent for the file, every request a bounded range.
        let sent = server.bytesSent { $0 == "/big.bin" }
        #expect(sent.bytes == done.fetched && sent.requests == 1, "the ranges asked at once: \(sent)")
        #expect(server.requests().filter { $0.path == "/big.bin" }.allSatisfy { $0.status == 206 }, "ranges only")
        // The index: only the objects that changed came over the network.
        let meta = server.bytesSent { $0.hasPrefix("/.ferry/meta/") }
        #expect(meta.requests > 0 && meta.requests < indexObjects / 2, "\(meta.requests) of \(indexObjects) objects fetched")
        #expect(meta.bytes < 20_000, "\(meta.bytes) bytes of metadata")
        // Status says what the last run fetched and reused.
        let bytes = try #require(run.events(named: "sync-finished").first?["bytes"] as? Int)
        let summary = box.statusText()
        #expect(summary.contains("exit 0, \(Units.formatBytes(Int64(bytes))) fetched, \(Units.formatBytes(Int64(done.reused))) reused from local data"), "\(summary)")
        let session = box.statusSessions().first ?? [:]
        #expect(session["last_reused"] as? Int == done.reused && session["last_fetched"] as? Int == bytes, "\(session)")
        // In sync: a second run fetches nothing.
        server.clearLog()
        #expect(box.sync().exitCode == 0)
        #expect(server.bytesSent { $0 == "/big.bin" }.requests == 0)
    }

    @Test func aRangeServedWithAFlippedByteIsFetchedAgain() throws {
        let box = Sandbox("delta-flip")
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        let (_, new) = Self.mirrorThenChange(box, remote: server.url)
        server.setFaults(["/big.bin": ["flip_ranges": 1]])
        server.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new))
        let done = try #require(Self.fileDone(run), "\(run.output)")
        #expect(done.reused > Self.size / 2, "still a delta: \(done)")
        #expect(run.events(named: "warning").isEmpty, "a piece fetched again is not worth a word: \(run.output)")
        let ranges = server.requests().filter { $0["path"] as? String == "/big.bin" }.compactMap { $0["range"] as? String }
        #expect(ranges.allSatisfy { $0.range(of: #"^bytes=\d+-\d+(,\d+-\d+)*$"#, options: .regularExpression) != nil }, "bounded ranges: \(ranges)")
        let starts = Self.firstRanges(server)
        #expect(zip(starts, starts.dropFirst()).contains { $1 <= $0 }, "the bad piece was asked for again: \(starts)")
    }

    /// The ranges the test server was asked for the file, in order (several a request, in turn).
    static func ranges(_ server: PythonServer) -> [(first: Int, last: Int)] {
        server.requests().filter { $0["path"] as? String == "/big.bin" }.compactMap { $0["range"] as? String }.flatMap { text in
            text.dropFirst("bytes=".count).split(separator: ",").compactMap { item -> (first: Int, last: Int)? in
                let parts = item.split(separator: "-")
                guard parts.count == 2, let a = Int(parts[0]), let b = Int(parts[1]) else { return nil }
                return (a, b)
            }
        }
    }

    /// The first range of each request the test server was asked for the file.
    static func firstRanges(_ server: PythonServer) -> [Int] {
        server.requests().filter { $0["path"] as? String == "/big.bin" }.compactMap { $0["range"] as? String }.compactMap { text in
            text.dropFirst("bytes=".count).split(separator: "-").first.flatMap { Int($0) }
        }
    }

    @Test func aServerThatAlwaysServesWrongBytesGetsTheWholeFileFetched() throws {
        let box = Sandbox("delta-liar")
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        let (_, new) = Self.mirrorThenChange(box, remote: server.url)
        server.setFaults(["/big.bin": ["flip_ranges": -1]])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new), "no wrong byte placed")
        let said = Self.fallbacks(run)
        #expect(said.count == 1 && said[0].reason == "pieces-wrong"
                && said[0].message.contains("did not match the file's index twice"),
                "said once, with why: \(said)")
        let done = try #require(Self.fileDone(run))
        #expect(done.reused == 0 && done.fetched == new.count, "fetched whole: \(done)")
    }

    @Test func aServerThatIgnoresRangesGetsTheWholeFileFetched() throws {
        let box = Sandbox("delta-norange")
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        let (_, new) = Self.mirrorThenChange(box, remote: server.url)
        server.setFaults(["/big.bin": ["ignore_range": true]])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new))
        let said = Self.fallbacks(run)
        #expect(said.count == 1 && said[0].reason == "ranges-refused"
                && said[0].message.contains("answered a range request with the whole file (HTTP 200)"), "\(said)")
    }

    /// Several ranges are asked in one request where the server serves them as parts; one that
    /// answers with a single range is asked one range at a time (still a delta, nothing said); one
    /// whose parts are not the ranges asked has the file fetched whole, said once.
    @Test func manyRangesAreAskedAtOnceAndAServerThatCannotIsAskedOneAtATime() throws {
        let box = Sandbox("delta-multipart")
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        let (old, new) = Self.mirrorThenChange(box, remote: server.url)
        server.setFaults(["/big.bin": ["no_multipart": true]])
        server.clearLog()
        let single = box.sync(["--json"])
        #expect(single.exitCode == 0 && single.events(named: "warning").isEmpty, "\(single.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new))
        #expect((Self.fileDone(single)?.reused ?? 0) > Self.size / 2)
        let asked = server.requests().filter { $0["path"] as? String == "/big.bin" }.compactMap { $0["range"] as? String }
        #expect(asked.first?.contains(",") == true && asked.dropFirst().allSatisfy { !$0.contains(",") } && asked.count > 2, "\(asked)")

        // Back to the old version, then the new one from a server that swaps its parts.
        box.publish("big.bin", Data(old))
        box.buildManifest()
        server.setFaults([:])
        #expect(box.sync().exitCode == 0)
        box.publish("big.bin", Data(new))
        box.buildManifest()
        server.setFaults(["/big.bin": ["multipart_swap": true]])
        let swapped = box.sync(["--json"])
        #expect(swapped.exitCode == 0, "\(swapped.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new), "no wrong byte placed")
        let said = Self.fallbacks(swapped)
        #expect(said.count == 1 && said[0].reason == "ranges-refused"
                && said[0].message.contains("is refused: part 1 is bytes"),
                "\(said)")
    }

    @Test func damagedLocalBytesAreFetchedNotPlaced() throws {
        let box = Sandbox("delta-damaged")
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        let (_, new) = Self.mirrorThenChange(box, remote: server.url)
        server.clearLog()
        // The mirror's old version is damaged in place: a piece built from it does not verify
        // and is fetched whole.
        let fd = open(box.localPath("big.bin"), O_WRONLY)
        var junk = [UInt8](repeating: 0x5A, count: 100)
        _ = pwrite(fd, &junk, 100, 400_000)
        close(fd)
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new))
        let done = try #require(Self.fileDone(run))
        #expect(done.reused > Self.size / 2 && done.fetched < 400_000, "\(done)")
        #expect(Self.ranges(server).contains { $0.first <= 400_000 && $0.last >= 400_099 }, "the damaged bytes came from the remote")
        #expect(run.events(named: "delta-planned").first?["read"] as? Int == 1, "a file the hash cache cannot vouch for is read to plan")
    }

    /// `kill -9` at random moments of a delta (the server sends 400 KB/s, so the delta takes a
    /// few seconds): the file at its path is always the old version or the new one, a relaunch
    /// resumes the assembly from its last checkpoint, and what the kills cost is bounded.
    @Test func killNineDuringADeltaNeverMixesVersionsAndResumes() throws {
        let env = ProcessInfo.processInfo.environment
        let kills = Int(env["FERRY_KILLS"] ?? "") ?? (env["FERRY_SOAK"] != nil ? 40 : 10)
        let seed = UInt64(env["FERRY_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970 * 1000)
        var random = CrashTests.SeededRandom(state: seed)
        print("delta kill -9 test: \(kills) kills, FERRY_SEED=\(seed)")
        let box = Sandbox("delta-kill")
        let old = Self.bytes(8 << 20, seed: 41)
        var new = old
        // 1.5 MB changed in 48 runs of 32 KiB, spread over the file.
        for k in 0..<48 {
            let at = 100_000 + k * 170_000
            new.replaceSubrange(at..<(at + 32_768), with: Self.bytes(32_768, seed: 100 + UInt64(k)))
        }
        let server = try Self.mirrorOverPython(box, Data(old))
        defer { server.stop() }

        // What the delta costs without a kill, measured on a copy of the mirror.
        let reference = Sandbox("delta-kill-ref", published: box.published)
        reference.configure(remote: server.url)
        #expect(reference.sync().exitCode == 0)
        box.publish("big.bin", Data(new))
        box.buildManifest()
        let uninterrupted = try #require(Self.fileDone(reference.sync(["--json"])))
        #expect(uninterrupted.reused > 6_000_000, "\(uninterrupted)")

        server.setFaults(["/big.bin": ["rate": 400_000, "log_sent": true]])
        server.clearLog()
        let versions: Set<Data> = [Data(old), Data(new)]
        var outputs: [String] = []
        for i in 0..<kills {
            let out = box.directory + "/run\(i).jsonl"
            outputs.append(out)
            let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--json"], stdout: out, stderr: box.directory + "/err\(i)")
            let (_, moment) = CrashTests.kill(child, within: 0.3...1.6, using: &random)
            let held = FileManager.default.contents(atPath: box.localPath("big.bin")) ?? Data()
            #expect(versions.contains(held), "after kill \(i + 1) \(moment): big.bin is neither version (seed \(seed))")
        }
        server.setFaults([:])
        let resumed = CrashTests.finishAndCheckResumes(box, outputs: outputs, seed: seed)
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new))
        // What the server sent for the file over all the runs: at most what the uninterrupted
        // delta fetched plus what each kill can lose. Fetched bytes go to the partial as they
        // come and a relaunch takes them again (pieces after the last checkpoint re-verified, the
        // piece being gathered restored), so that is what was in flight: the server's last 16 KiB
        // write, what the sockets held, a request's framing.
        let sent = server.requests().filter { $0["sent_path"] as? String == "/big.bin" }.reduce(0) { $0 + (($1["sent"] as? Int) ?? 0) }
        print("delta kill -9 test: \(resumed) resumes; \(sent) bytes sent against \(uninterrupted.fetched) uninterrupted")
        #expect(sent <= uninterrupted.fetched + kills * 80_000, "\(sent) sent for an uninterrupted \(uninterrupted.fetched) (seed \(seed))")
    }

    /// What a killed delta left in its partial file is checked again, never trusted: its end and
    /// a byte before it damaged between the kill and the relaunch, the relaunch still places
    /// exactly the new version.
    @Test func aDamagedPartialOfAKilledDeltaIsCheckedAgain() throws {
        let box = Sandbox("delta-partial")
        let old = Self.bytes(Self.size, seed: 121)
        let new = Self.changed(old)
        let server = try Self.mirrorOverPython(box, Data(old))
        defer { server.stop() }
        box.publish("big.bin", Data(new))
        box.buildManifest()
        server.setFaults(["/big.bin": ["rate": 20_000]])
        let partials = box.localPath(".ferry/partial")
        func partial() -> String? {
            (try? FileManager.default.contentsOfDirectory(atPath: partials))?.first { $0.hasSuffix(".part") }.map { partials + "/" + $0 }
        }
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config], stdout: box.directory + "/out", stderr: box.directory + "/err")
        // Killed once the delta fetched 30 KB of the first change, at 1 MiB (the server sends 20 KB/s).
        #expect(eventually(30) { partial().flatMap { try? FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int }.map { $0 > (1 << 20) + 30_000 } ?? false })
        child.signal(SIGKILL)
        _ = child.wait(timeout: 10)
        server.setFaults([:])
        let path = try #require(partial())
        var bytes = try #require(FileManager.default.contents(atPath: path))
        for i in max(0, bytes.count - 2048)..<bytes.count { bytes[i] ^= 0xA5 }
        bytes[bytes.count * 3 / 4] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: path))
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new), "exactly the new version")
    }

    /// `check --repair` of a large file damaged in three places behind the hash cache's back (the
    /// size and times put back) fetches the chunks that hold the damage, not the file.
    @Test func repairFetchesOnlyTheDamagedChunks() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("delta-repair", published: server.root)
        let data = Self.bytes(Self.size, seed: 61)
        box.publish("big.bin", Data(data))
        box.buildManifest()
        box.configure(remote: server.url)
        #expect(box.sync().exitCode == 0)
        let path = box.localPath("big.bin")
        var st = stat()
        stat(path, &st)
        let fd = open(path, O_WRONLY)
        for at in [700_000, 2_900_000, 5_100_000] {
            var junk = Self.bytes(4096, seed: UInt64(at))
            _ = pwrite(fd, &junk, 4096, off_t(at))
        }
        close(fd)
        var times = [st.st_atim, st.st_mtim]
        utimensat(AT_FDCWD, path, &times, 0)
        server.clearLog()
        let run = ferry(["check", "--config", box.config, "--repair", "--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: path) == Data(data), "repaired")
        let sent = server.bytesSent { $0 == "/big.bin" }
        #expect(sent.bytes > 3 * 4096 && sent.bytes < 3 * (4096 + 2 * 12_288), "the damaged chunks only: \(sent)")
    }

    /// A push indexes the large files it publishes: a mirror of it takes a delta; the push sends
    /// only the index objects that changed, and an unchanged push sends none. For each layout.
    @Test(arguments: ["tree", "objects"])
    func aMirrorOfAPushTakesDeltas(layout: String) throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("delta-push")
        let src = box.directory + "/src", dst = box.directory + "/dst"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        let old = Self.bytes(Self.size, seed: 71)
        try Data(old).write(to: URL(fileURLWithPath: src + "/big.bin"))
        try Data("small\n".utf8).write(to: URL(fileURLWithPath: src + "/small.txt"))
        try """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = \(server.url)site/
            local = \(src)
            remote-layout = \(layout)
            object-grace = 0s
            keep-versions = 1
            [session down]
            remote = \(server.url)site/
            local = \(dst)
            """.writeReplacing(box.config)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        #expect(box.sync(["--session", "down"]).exitCode == 0)
        let indexObjects = try FileManager.default.contentsOfDirectory(atPath: server.root + "/site/.ferry/meta").count

        let new = Self.changed(old)
        try Data(new).write(to: URL(fileURLWithPath: src + "/big.bin"))
        server.clearLog()
        let up = box.sync(["--session", "up"])
        #expect(up.exitCode == 0, "\(up.output)")
        let metaPuts = server.requests().filter { $0.method == "PUT" && $0.path.contains("/.ferry/meta/") }
        #expect(metaPuts.count > 0 && metaPuts.count < indexObjects / 2, "\(metaPuts.count) objects sent of \(indexObjects)")
        server.clearLog()
        let down = box.sync(["--session", "down", "--json"])
        #expect(down.exitCode == 0, "\(down.output)")
        #expect(FileManager.default.contents(atPath: dst + "/big.bin") == Data(new))
        let done = try #require(Self.fileDone(down), "\(down.output)")
        #expect(done.reused > Self.size - 300_000 && done.fetched < Self.changedBytes + 100_000, "\(done)")
        #expect(server.requests().filter { $0.method == "GET" && !$0.path.contains("/.ferry/meta/") && $0.path.hasSuffix(".json") == false }.allSatisfy { $0.status == 206 },
                "the file came in ranges")

        // Nothing changed: nothing is sent. Objects are collected at once (object-grace = 0s), and
        // a new mirror still finds every one the manifest names, the indexes' among them.
        server.clearLog()
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        #expect(server.requests().filter { $0.method == "PUT" }.isEmpty, "\(server.requests())")
        let fresh = Sandbox("delta-push-fresh")
        fresh.configure(remote: server.url + "site/")
        server.clearLog()
        let cold = fresh.sync()
        let metaGets = server.requests().filter { $0.method == "GET" && $0.path.contains("/.ferry/meta/") }
        #expect(metaGets.count > 2 && metaGets.allSatisfy { $0.status == 200 }, "the tree and the index read whole: \(metaGets)")
        #expect(cold.exitCode == 0, "\(cold.output)")
        #expect(FileManager.default.contents(atPath: fresh.localPath("big.bin")) == Data(new))
        #expect(!cold.output.contains("warning"), "every index object is there: \(cold.output)")
        let left = try FileManager.default.contentsOfDirectory(atPath: server.root + "/site/.ferry/meta").count
        #expect(left < indexObjects + metaPuts.count, "what the old index alone named was collected: \(left)")
    }

    /// Besides the older version at the path, a delta takes bytes from the same path under a
    /// `seed` directory, from a file this run deletes that looks like the new one's old name, and
    /// with `layout = generations` from the current generation.
    @Test func seedsRenamesAndTheCurrentGenerationAreReused() throws {
        let old = Self.bytes(Self.size, seed: 101)
        let new = Self.changed(old)

        // A new mirror with a seed that holds the old version.
        let seeded = Sandbox("delta-seed")
        let seed = seeded.directory + "/seed"
        try FileManager.default.createDirectory(atPath: seed + "/images", withIntermediateDirectories: true)
        try Data(old).write(to: URL(fileURLWithPath: seed + "/images/big.bin"))
        seeded.publish("images/big.bin", Data(new))
        seeded.buildManifest()
        seeded.configure(remote: "file://" + seeded.published + "/", session: ["seed = /nonexistent-seed \(seed)"])
        let first = seeded.sync(["--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(FileManager.default.contents(atPath: seeded.localPath("images/big.bin")) == Data(new))
        let fromSeed = try #require(Self.fileDone(first, "images/big.bin"))
        #expect(fromSeed.reused > Self.size - 300_000, "from the seed: \(fromSeed)")
        #expect(first.events(named: "warning").compactMap { $0["message"] as? String }.contains { $0.contains("seed /nonexistent-seed cannot be read, so a delta takes nothing from it: No such file or directory") },
                "\(first.output)")
        #expect(FileManager.default.contents(atPath: seed + "/images/big.bin") == Data(old), "a seed is only read")

        // The remote renames the file (and changes it): the mirror's copy under the old name is used.
        let renamed = Sandbox("delta-rename")
        renamed.publish("a/big.bin", Data(old))
        renamed.buildManifest()
        renamed.configure(remote: "file://" + renamed.published + "/", session: ["delete = yes", "max-delete = 100%"])
        #expect(renamed.sync().exitCode == 0)
        renamed.unpublish("a/big.bin")
        renamed.publish("b/moved.bin", Data(new))
        renamed.buildManifest()
        let moved = renamed.sync(["--json"])
        #expect(moved.exitCode == 0, "\(moved.output)")
        #expect(FileManager.default.contents(atPath: renamed.localPath("b/moved.bin")) == Data(new))
        #expect(!FileManager.default.fileExists(atPath: renamed.localPath("a/big.bin")), "the old name went")
        let fromRename = try #require(Self.fileDone(moved, "b/moved.bin"))
        #expect(fromRename.reused > Self.size - 300_000, "from the old name: \(fromRename)")

        // Generations: the current generation holds the old version.
        let generations = Sandbox("delta-generations")
        generations.publish("big.bin", Data(old))
        generations.buildManifest()
        generations.configure(remote: "file://" + generations.published + "/", session: ["layout = generations"])
        #expect(generations.sync().exitCode == 0)
        generations.publish("big.bin", Data(new))
        generations.buildManifest()
        let switched = generations.sync(["--json"])
        #expect(switched.exitCode == 0, "\(switched.output)")
        #expect(FileManager.default.contents(atPath: generations.localPath("big.bin")) == Data(new))
        let fromGeneration = try #require(Self.fileDone(switched))
        #expect(fromGeneration.reused > Self.size - 300_000, "from the current generation: \(fromGeneration)")
    }

    /// A seed is read as a remote is: never through a symlink (to a file or on the way), never a
    /// FIFO that would block.
    @Test func aSeedIsNeverReadThroughASymlinkOrAFIFO() throws {
        let box = Sandbox("delta-evil-seed")
        let old = Self.bytes(Self.size, seed: 111)
        let outside = box.directory + "/outside"
        try FileManager.default.createDirectory(atPath: outside + "/images", withIntermediateDirectories: true)
        try Data(old).write(to: URL(fileURLWithPath: outside + "/images/big.bin"))
        let links = box.directory + "/links", dirLink = box.directory + "/dirlink", fifo = box.directory + "/fifo"
        try FileManager.default.createDirectory(atPath: links + "/images", withIntermediateDirectories: true)
        symlink(outside + "/images/big.bin", links + "/images/big.bin")
        try FileManager.default.createDirectory(atPath: dirLink, withIntermediateDirectories: true)
        symlink(outside + "/images", dirLink + "/images")
        try FileManager.default.createDirectory(atPath: fifo + "/images", withIntermediateDirectories: true)
        mkfifo(fifo + "/images/big.bin", 0o644)
        box.publish("images/big.bin", Data(Self.changed(old)))
        box.buildManifest()
        box.configure(remote: "file://" + box.published + "/", session: ["seed = \(links) \(dirLink) \(fifo)"])
        let run = box.sync(["--json"], timeout: 60)
        #expect(run.exitCode == 0, "\(run.output)")
        let done = try #require(Self.fileDone(run, "images/big.bin"))
        #expect(done.reused == 0 && run.events(named: "delta-planned").isEmpty, "nothing taken from a symlink or a FIFO: \(run.output)")
    }

    /// A file that came before its index (published without one, then indexed) has its index
    /// read while it is in sync, so its next update fetches only the index objects that changed.
    @Test func aFileInSyncHasItsIndexReadForItsNextUpdate() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("delta-insync", published: server.root)
        let old = Self.bytes(Self.size, seed: 81)
        box.publish("big.bin", Data(old))
        box.buildManifest(["--delta-min-size", "off"])
        box.configure(remote: server.url)
        #expect(box.sync().exitCode == 0)
        box.buildManifest()
        // A mirror reads the index (the tree's objects and the pieces' details aside: a detail is
        // fetched only for a piece that changed beside bytes the mirror holds), in a few
        // requests: its top, then the bundles it names.
        let meta = server.root + "/.ferry/meta/"
        let kinds = Array(try metadataKinds(meta).values)
        let indexObjects = kinds.filter { $0 == "fdC3" || $0 == "fdN1" }.count
        #expect(indexObjects > 40 && kinds.contains("fdB1"), "pieces and nodes, and their bundles")
        server.clearLog()
        let insync = box.sync(["--json"])
        #expect(insync.exitCode == 0 && insync.events(named: "file-done").isEmpty, "\(insync.output)")
        let read = server.bytesSent { $0.hasPrefix("/.ferry/meta/") }
        #expect(read.requests <= 5, "the index was read in a few requests: \(read.requests)")
        let cache = box.state + "/manifests/test.manifest.objects/"
        let cachedKinds = Array(try metadataKinds(cache).values)
        #expect(cachedKinds.filter { $0 == "fdC3" || $0 == "fdN1" }.count == indexObjects
                && cachedKinds.contains("fdN2"), "the cache holds every piece and node")
        #expect(!cachedKinds.contains("fdB1"), "and no bundle")
        let new = Self.changed(old)
        box.publish("big.bin", Data(new))
        box.buildManifest()
        server.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new))
        #expect(server.bytesSent { $0.hasPrefix("/.ferry/meta/") }.requests < indexObjects / 2, "only the changed index objects")
        #expect((Self.fileDone(run)?.reused ?? 0) > Self.size / 2)
    }

    /// A file that shares too little with the version held is fetched whole, and the run says so.
    @Test func tooLittleInCommonIsFetchedWholeAndSaid() throws {
        let box = Sandbox("delta-whole")
        box.publish("big.bin", Data(Self.bytes(3 << 20, seed: 51)))
        box.buildManifest()
        box.configure(remote: "file://" + box.published + "/")
        #expect(box.sync().exitCode == 0)
        var other = Self.bytes(3 << 20, seed: 52)
        other.replaceSubrange(0..<100_000, with: Self.bytes(3 << 20, seed: 51)[0..<100_000])
        box.publish("big.bin", Data(other))
        box.buildManifest()
        let run = box.sync(["-v"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.output.contains("test: 1 indexed file fetched whole (too little of it held locally)"), "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(other))
        #expect(!run.output.contains("reused"), "\(run.output)")
    }

    @Test func deltaNoFetchesWholeFilesAndFileRemotesTakeDeltasToo() throws {
        let off = Sandbox("delta-off")
        _ = Self.mirrorThenChange(off, session: ["delta = no"], remote: "file://" + off.published + "/")
        let plain = off.sync(["--json"])
        #expect(plain.exitCode == 0, "\(plain.output)")
        let whole = try #require(Self.fileDone(plain))
        #expect(whole.reused == 0 && whole.fetched > Self.size, "\(whole)")

        let on = Sandbox("delta-file")
        let (_, new) = Self.mirrorThenChange(on, remote: "file://" + on.published + "/")
        let run = on.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: on.localPath("big.bin")) == Data(new))
        let done = try #require(Self.fileDone(run))
        #expect(done.reused > Self.size - 200_000 && done.fetched < Self.changedBytes + 100_000, "\(done)")
    }
}

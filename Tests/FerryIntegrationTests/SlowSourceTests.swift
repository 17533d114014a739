import Foundation
import Testing
import FerryCore
@testable import FerryRuntime

/// Sources that fail slowly: a mirror that accepts requests and never answers, or trickles below
/// `min-speed`, is given `SessionConfig.mirrorPatience` (seconds), not the session's minute of
/// `stall-timeout`, and is then left for the run, said once: a hung cache costs a run seconds
/// once, not a stall per file or per metadata object.
@Suite(.serialized)
struct SlowSourceTests {
    static func publish(_ box: Sandbox, count: Int, size: Int) -> [String: Data] {
        var files: [String: Data] = [:]
        for i in 0..<count { files["f\(i).bin"] = randomData(size, seed: UInt64(100 + i)) }
        for (path, data) in files { box.publish(path, data) }
        let built = box.buildManifest()
        #expect(built.exitCode == 0, "\(built.output)")
        return files
    }

    static func slowWarnings(_ run: FerryRun) -> [String] {
        run.events(named: "warning").compactMap { $0["message"] as? String }.filter { $0.contains("sent nothing for 5s") }
    }

    /// Files through a mirror that hangs on every file: the first file waits out the mirror's
    /// patience, the mirror is left for the run, and the other 19 come from the origin without
    /// asking it. The session's stall-timeout is a minute, which each file used to wait.
    @Test func aMirrorThatHangsOnFilesIsLeftAfterOneWait() throws {
        let box = Sandbox("slow-hung-files")
        let files = Self.publish(box, count: 20, size: 4096)
        let origin = try PythonServer(directory: box.published)
        defer { origin.stop() }
        let mirror = try PythonServer(directory: box.published)
        defer { mirror.stop() }
        mirror.setFaults(Dictionary(uniqueKeysWithValues: files.keys.map { ("/" + $0, ["hang": true] as [String: Any]) }))
        box.configure(remote: origin.url, session: ["mirrors = \(mirror.url)", "stall-timeout = 60s"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
        let asked = mirror.requests().filter { ($0["path"] as? String)?.contains(".bin") == true }
        #expect(asked.count == 1, "one file waited on the mirror; the rest went to the origin: \(asked)")
        let warnings = Self.slowWarnings(run)
        #expect(warnings.count == 1, "said once: \(warnings)")
        #expect(warnings.first?.contains("mirror \(mirror.url) sent nothing for 5s (hung, or slower than min-speed)") == true, "\(warnings)")
        #expect(run.events(named: "file-done").allSatisfy { $0["source"] as? String == "origin" })
        let served = run.events(named: "source-served").first { $0["source"] as? String == mirror.url }
        #expect((served?["demoted"] as? String)?.contains("sent nothing for 5s") == true, "\(String(describing: served))")
        #expect(run.events(named: "file-failed").isEmpty && run.events(named: "file-retrying").isEmpty)
    }

    /// A mirror hung for everything, metadata objects included: the lanes that fetch the tree's
    /// objects wait out its patience once, it is left, and the objects and files come from the
    /// origin. Then a mirror that trickles (200 bytes a second, below min-speed) is left the same.
    @Test func aHungOrTricklingMirrorCostsTheMetadataAndFilesOneWait() throws {
        let box = Sandbox("slow-hung-all")
        let files = Self.publish(box, count: 20, size: 64 << 10)
        let origin = try PythonServer(directory: box.published)
        defer { origin.stop() }
        let mirror = try PythonServer(directory: box.published)
        defer { mirror.stop() }
        mirror.setFaults(["*": ["hang": true]])
        box.configure(remote: origin.url, session: ["mirrors = \(mirror.url)", "stall-timeout = 60s"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
        let asked = mirror.requests().compactMap { $0["path"] as? String }
        #expect(!asked.isEmpty && asked.allSatisfy { $0.hasPrefix("/.ferry/") }, "only metadata objects were asked of it: \(asked)")
        #expect(asked.count <= 8, "at most one object per fetching lane: \(asked.count)")
        #expect(run.output.contains("mirror \(mirror.url) sent nothing for 5s (hung, or slower than min-speed) for a metadata object"), "\(run.output)")

        // A trickling mirror, for the files of a changed tree: left after its first file.
        for (path, data) in files { var changed = data; changed[0] ^= 1; box.publish(path, changed) }
        #expect(box.buildManifest().exitCode == 0)
        let trickle = try PythonServer(directory: box.published)
        defer { trickle.stop() }
        trickle.setFaults(Dictionary(uniqueKeysWithValues: files.keys.map { ("/" + $0, ["rate": 200] as [String: Any]) }))
        box.configure(remote: origin.url, session: ["mirrors = \(trickle.url)", "stall-timeout = 60s", "delta = no"])
        let second = box.sync(["--json"])
        #expect(second.exitCode == 0, "\(second.output)")
        let trickled = trickle.requests().filter { ($0["path"] as? String)?.contains(".bin") == true }
        #expect(trickled.count == 1, "one file trickled, the rest went to the origin: \(trickled.count)")
        #expect(Self.slowWarnings(second).count == 1, "\(Self.slowWarnings(second))")
    }

    /// The agent says which source was left: `ferry_source_up` is 0 for the hung mirror and 1
    /// for the origin, and `status` names the mirror and why.
    @Test func theAgentsMetricsAndStatusSayWhichSourceWasLeft() throws {
        let box = Sandbox("slow-metrics")
        let files = Self.publish(box, count: 3, size: 4096)
        let origin = try PythonServer(directory: box.published)
        defer { origin.stop() }
        let mirror = try PythonServer(directory: box.published)
        defer { mirror.stop() }
        mirror.setFaults(Dictionary(uniqueKeysWithValues: files.keys.map { ("/" + $0, ["hang": true] as [String: Any]) }))
        let prom = box.directory + "/ferry.prom"
        box.configure(remote: origin.url, session: ["mirrors = \(mirror.url)", "poll = 1h"], agent: ["metrics = \(prom)"])
        let agent = try AgentTests.RunningAgent(box)
        #expect(eventually(40) { files.allSatisfy { FileManager.default.contents(atPath: box.localPath($0.key)) == $0.value } }, "\(agent.output)")
        let up = "ferry_source_up{session=\"test\",source=\"\(mirror.url)\"} 0"
        #expect(eventually { fileContents(prom)?.contains(up) == true }, "\(fileContents(prom) ?? "")")
        #expect(fileContents(prom)?.contains("ferry_source_up{session=\"test\",source=\"origin\"} 1") == true, "\(fileContents(prom) ?? "")")
        let status = box.status(["--json"]).stdout
        #expect(status.contains("sent nothing for 5s"), "\(status)")
        // How soon the origin answered (loopback: well under a second), told in both.
        let firstByte = fileContents(prom)?.split(separator: "\n")
            .first { $0.hasPrefix("ferry_source_first_byte_seconds{session=\"test\",source=\"origin\"} ") }
            .flatMap { Double($0.split(separator: " ").last ?? "") }
        #expect(firstByte.map { $0 > 0 && $0 < 5 } == true, "\(fileContents(prom) ?? "")")
        #expect(status.contains("\"first_byte_seconds\":0."), "\(status)")
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    /// An origin that hangs, for a session that takes signed roots only and has a mirror: the
    /// root is asked of the origin once, with a mirror's patience, and after it the mirror's
    /// signed root and files are taken. The session's stall-timeout is a minute and it retries;
    /// the run's own deadline (40 s) would end it before one stall-timeout passed.
    @Test func aHungOriginsRootIsTakenFromTheMirrorAfterItsPatience() throws {
        let box = Sandbox("slow-hung-origin")
        let key = box.directory + "/publisher.key"
        let publicKey = SignedManifestTests.generateKey(key)
        var files: [String: Data] = [:]
        for i in 0..<5 { files["f\(i).bin"] = randomData(8192, seed: UInt64(300 + i)) }
        for (path, data) in files { box.publish(path, data) }
        #expect(ferry(["manifest", "build", box.published, "--version", "3", "--sign", key]).exitCode == 0)
        let origin = try PythonServer(directory: box.published)
        defer { origin.stop() }
        let mirror = try PythonServer(directory: box.published)
        defer { mirror.stop() }
        origin.setFaults(["*": ["hang": true]])
        box.configure(remote: origin.url, session: ["mirrors = \(mirror.url)", "trusted-keys = \(publicKey)", "stall-timeout = 60s",
                                                    "retries = 3"])
        let run = box.sync(["--json", "--max-duration", "40s"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
        #expect(origin.requests().count == 1, "the root asked once, not retried: \(origin.requests())")
        let taken = run.events(named: "warning").compactMap { $0["message"] as? String }.filter { $0.contains("taken from mirror \(mirror.url)") }
        #expect(taken.count == 1 && taken.first?.contains("(it sent nothing for 5s, hung or slower than min-speed)") == true, "\(run.output)")
        #expect(run.events(named: "manifest-fetched").first?["url"] as? String == mirror.url + "manifest.json", "\(run.output)")
        #expect(run.events(named: "file-done").allSatisfy { $0["source"] as? String == mirror.url }, "\(run.output)")
        let served = run.events(named: "source-served").first { $0["source"] as? String == mirror.url }
        #expect((served?["first_byte"] as? Double).map { $0 > 0 } == true, "\(String(describing: served))")
    }

    /// A hung cache in front of S3: the mirror is an HTTP cache whose store is the session's S3
    /// bucket. It is waited on once, left, and the files come from the bucket.
    @Test func aHungCacheInFrontOfS3CostsOneWait() throws {
        let empty = Harness.temporaryDirectory("slow-s3-cache")
        defer { Harness.remove(empty) }
        let cache = try PythonServer(directory: empty)
        defer { cache.stop() }
        cache.setFaults(["*": ["hang": true]])
        let w = try S3PushTests.World("slow-cache", down: ["mirrors = \(cache.url)", "stall-timeout = 60s"])
        var files: [String: Data] = [:]
        for i in 0..<20 { files["f\(i).bin"] = randomData(4096, seed: UInt64(400 + i)) }
        for (path, data) in files { w.write(path, data) }
        #expect(w.push().exitCode == 0)
        let run = w.pull(["--json", "--max-duration", "40s"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: w.dst + "/" + path) == data, "\(path)") }
        #expect(Self.slowWarnings(run).count == 1, "\(run.output)")
        #expect(cache.requests().count <= 8, "waited on once per lane at most: \(cache.requests())")
        #expect(run.events(named: "file-done").allSatisfy { $0["source"] as? String == "origin" }, "\(run.output)")
    }

    /// A hung and a trickling cache in front of real origins, nginx and S3 (SeaweedFS): each run
    /// of 20 files waits on the cache once (a hung one: its patience; a trickling one: until it
    /// has sent below min-speed for that long), says so once, and takes the files from the origin.
    @Test func hungAndTricklingCachesInFrontOfNginxAndS3CostOneWait() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        for fault in ["hang", "trickle"] {
            let box = Sandbox("slow-nginx-\(fault)", published: nginx.root + "/\(fault)")
            let files = Self.publish(box, count: 20, size: 64 << 10)
            let cache = try PythonServer(directory: box.published)
            defer { cache.stop() }
            cache.setFaults(Self.fault(fault, files: files))
            box.configure(remote: "http://127.0.0.1:\(nginx.port)/\(fault)/", session: ["mirrors = \(cache.url)", "stall-timeout = 60s", "delta = no"])
            Self.checkOneWait(box.sync(["--json", "--max-duration", "40s"]), cache: cache, files: files, local: box.local, "nginx, \(fault)")
            Harness.remove(box.published)
        }
        for fault in ["hang", "trickle"] {
            let source = Harness.temporaryDirectory("slow-s3-\(fault)")
            defer { Harness.remove(source) }
            let cache = try PythonServer(directory: source)
            defer { cache.stop() }
            let w = try S3PushTests.World("slow-\(fault)", down: ["mirrors = \(cache.url)", "stall-timeout = 60s", "delta = no"])
            var files: [String: Data] = [:]
            for i in 0..<20 { files["f\(i).bin"] = randomData(64 << 10, seed: UInt64(500 + i)) }
            for (path, data) in files {
                w.write(path, data)
                try data.write(to: URL(fileURLWithPath: source + "/" + path))
            }
            #expect(w.push().exitCode == 0)
            cache.setFaults(Self.fault(fault, files: files))
            Self.checkOneWait(w.pull(["--json", "--max-duration", "40s"]), cache: cache, files: files, local: w.dst, "S3, \(fault)")
        }
    }

    /// A cache that hangs on everything, or trickles each file at 200 bytes a second.
    static func fault(_ kind: String, files: [String: Data]) -> [String: [String: Any]] {
        kind == "hang" ? ["*": ["hang": true]] : Dictionary(uniqueKeysWithValues: files.keys.map { ("/" + $0, ["rate": 200] as [String: Any]) })
    }

    static func checkOneWait(_ run: FerryRun, cache: PythonServer, files: [String: Data], local: String, _ what: String) {
        #expect(run.exitCode == 0, "\(what): \(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: local + "/" + path) == data, "\(what): \(path)") }
        #expect(slowWarnings(run).count == 1, "\(what): said once: \(slowWarnings(run))")
        // A file's request carries its hash as a query (`?ferry_sha256=`): matched by name.
        let asked = cache.requests().filter { ($0["path"] as? String)?.contains(".bin") == true }
        #expect(asked.count <= 8, "\(what): waited on once per lane at most: \(asked.count) files asked of the cache")
        #expect(run.events(named: "file-done").filter { $0["source"] as? String == cache.url }.isEmpty, "\(what): \(run.output)")
        print("slow cache (\(what)): \(asked.count) files asked of it, \(run.events(named: "file-done").count) from the origin")
    }

    /// Patience follows what the run has seen: an origin whose answers take 0.8 s to start (a far
    /// or busy server) gives a hung mirror about ten times that, not the 5 s floor, and the
    /// warning says the patience it was given.
    @Test func patienceFollowsTheSlowestFirstByteOfTheRun() throws {
        let box = Sandbox("slow-patience")
        let files = Self.publish(box, count: 4, size: 4096)
        let origin = try PythonServer(directory: box.published)
        defer { origin.stop() }
        let mirror = try PythonServer(directory: box.published)
        defer { mirror.stop() }
        origin.setFaults(["*": ["delay": 0.8]])
        mirror.setFaults(Dictionary(uniqueKeysWithValues: files.keys.map { ("/" + $0, ["hang": true] as [String: Any]) }))
        box.configure(remote: origin.url, session: ["mirrors = \(mirror.url)", "stall-timeout = 60s"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
        let said = run.events(named: "warning").compactMap { $0["message"] as? String }.filter { $0.contains("mirror \(mirror.url) sent nothing for") }
        let words = said.first?.split(separator: " ") ?? []
        let patience = words.firstIndex(of: "for").flatMap { Int(words[$0 + 1].dropLast()) }
        #expect(said.count == 1 && patience.map { (8...20).contains($0) } == true, "\(said)")
        let origins = run.events(named: "source-served").first { $0["source"] as? String == "origin" }
        #expect((origins?["slowest_first_byte"] as? Double).map { $0 >= 0.8 } == true, "\(String(describing: origins))")
    }

    /// The patience rule itself: the floor until something slower is seen, ten times the slowest
    /// first byte of any source after, never above the session's stall-timeout (nor its
    /// connect-timeout to connect), and a floor no higher than either.
    @Test func patienceIsTenTimesTheSlowestFirstByteBetweenTheFloorAndTheSessionsTimeouts() {
        let log = FirstBytes(floor: 5, stallTimeout: 60, connectTimeout: 30)
        #expect(log.patience == 5)
        log.record(0, seconds: 0.2)
        #expect(log.patience == 5, "a quick link keeps the floor")
        log.record(1, seconds: 1.2)
        #expect(abs(log.patience - 12) < 1e-9, "another source's slow answer counts too")
        log.record(0, seconds: 0)
        log.record(0, seconds: .nan)
        #expect(log.seen(0) == FirstBytes.Seen(count: 1, total: 0.2, slowest: 0.2), "no first byte is not a time")
        log.record(2, seconds: 9)
        #expect(log.patience == 60 && log.connectCeiling == 30)
        let tight = FirstBytes(floor: 5, stallTimeout: 2, connectTimeout: 30)
        #expect(tight.patience == 2, "a session's shorter stall-timeout stands")
    }
}


import Foundation
import Testing
import FerryCore
import FerryRuntime

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
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }
}

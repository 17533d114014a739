import Foundation
import Testing

/// Every misbehaviour of scripts/testserver.py ends in a correct tree or a clear error, and never
/// in spliced or unverified bytes at a final path.
@Suite(.serialized)
struct ServerFaultTests {
    struct World {
        let box: Sandbox
        let server: PythonServer
        let content: Data
        var file: String { box.localPath("f.bin") }
        func local() -> Data? { try? Data(contentsOf: URL(fileURLWithPath: file)) }
        func task() -> [String: Any]? {
            let run = box.status(["--json", "--files"])
            let object = try? JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
            let sessions = object?["sessions"] as? [[String: Any]]
            return (sessions?.first?["tasks"] as? [[String: Any]])?.first { $0["path"] as? String == "f.bin" }
        }
    }

    func world(_ label: String, size: Int = 3_000_000, session: [String] = []) throws -> World {
        let box = Sandbox(label)
        let content = randomData(size, seed: UInt64(size))
        box.publish("f.bin", content)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        box.configure(remote: server.url, session: ["retry-delay = 0.05s"] + session)
        return World(box: box, server: server, content: content)
    }

    /// Leaves resume data: the first attempt is cut off and no retry is allowed.
    func leavePartial(_ w: World) -> Int {
        w.server.setFaults(["/f.bin": ["reset_after": 1_000_000]])
        w.box.configure(remote: w.server.url, session: ["retries = 0"])
        let run = w.box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        // An RST discards bytes still in flight, so the client keeps somewhat less than was sent.
        let kept = w.task()?["bytes_done"] as? Int ?? 0
        #expect(kept > 0 && kept <= 1_000_000, "the cut-off attempt left its bytes as resume data: \(kept)")
        w.box.configure(remote: w.server.url, session: ["retry-delay = 0.05s"])
        return kept
    }

    /// The manifest fetch follows the same retry rules as transfers: a 503 (and a reset) is tried
    /// again after a backoff, a 404 is not.
    @Test func aManifestFetchThatMayPassIsRetried() throws {
        let w = try world("manifest-retry", size: 10_000)
        defer { w.server.stop() }
        w.server.setFaults(["/manifest.json": ["statuses": [503, 502], "retry_after": 0]])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        let retries = run.events(named: "manifest-retrying")
        #expect(retries.map { $0["attempt"] as? Int } == [2, 3], "\(retries)")
        #expect((retries.first?["error"] as? String)?.contains("HTTP 503") == true)
        #expect(w.local() == w.content)

        // The server counts requests per path: "statuses" is indexed from the first request (3 so far).
        w.server.setFaults(["/manifest.json": ["statuses": [503, 502, 0, 404]]])
        w.box.markRepublished()
        let missing = w.box.sync(["--json"])
        #expect(missing.exitCode == 4, "\(missing.output)")
        #expect(missing.events(named: "manifest-retrying").isEmpty, "a 404 will not pass: \(missing.output)")

        w.server.setFaults(["/manifest.json": ["statuses": [503, 502, 0, 404, 503, 503, 503]]])
        w.box.configure(remote: w.server.url, session: ["retry-delay = 0.05s", "retries = 1"])
        let exhausted = w.box.sync(["--json"])
        #expect(exhausted.exitCode == 4, "\(exhausted.output)")
        #expect(exhausted.events(named: "manifest-retrying").count == 1)
        #expect(w.local() == w.content, "nothing already synced is lost")
    }

    @Test func connectionResetMidBodyResumesUntilDone() throws {
        let w = try world("reset")
        defer { w.server.stop() }
        w.server.setFaults(["/f.bin": ["reset_after": 1_000_000, "only_first": 3]])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(w.local() == w.content)
        #expect(run.events(named: "file-retrying").count >= 2)
        let offsets = run.events(named: "file-resumed").compactMap { $0["offset"] as? Int }
        #expect(offsets.count >= 2 && offsets.allSatisfy { $0 > 0 } && offsets == offsets.sorted(), "each try resumed further: \(offsets)")
        #expect((w.task()?["attempts"] as? Int ?? 0) >= 3, "attempts are recorded")
    }

    @Test func truncatedBodyIsRetriedFromWhereItStopped() throws {
        let w = try world("truncated")
        defer { w.server.stop() }
        w.server.setFaults(["/f.bin": ["truncate_after": 1_200_000, "only_first": 1]])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(w.local() == w.content)
        let offset = run.events(named: "file-resumed").first?["offset"] as? Int ?? 0
        #expect(offset > 0 && offset <= 1_200_000, "resumed at \(offset)")
    }

    @Test func wrongContentRangeIsRefusedAndTheFileRestarts() throws {
        let w = try world("wrongrange")
        defer { w.server.stop() }
        let kept = leavePartial(w)
        w.server.setFaults(["/f.bin": ["wrong_range": 100]])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        let retry = try #require(run.events(named: "file-retrying").first)
        #expect((retry["error"] as? String)?.contains("Content-Range 'bytes \(kept + 100)-") == true, "\(retry)")
        #expect(w.local() == w.content, "never spliced")
        let done = try #require(run.events(named: "file-done").first)
        #expect(done["fetched"] as? Int == w.content.count, "started again from zero")
    }

    @Test func changedETagMeansANewFileNotASplice() throws {
        let w = try world("etag")
        defer { w.server.stop() }
        let kept = leavePartial(w)
        w.server.setFaults(["/f.bin": ["etag": "\"a-new-version\""]])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "file-resumed").first?["offset"] as? Int == kept, "it asked to resume, with If-Range")
        let restarted = try #require(run.events(named: "file-restarted").first)
        #expect((restarted["reason"] as? String)?.contains("starting again from zero") == true)
        #expect(run.events(named: "file-done").first?["fetched"] as? Int == w.content.count)
        #expect(w.local() == w.content)
    }

    @Test func serverThatIgnoresRangesRestartsFromZero() throws {
        let w = try world("norange")
        defer { w.server.stop() }
        _ = leavePartial(w)
        w.server.setFaults(["/f.bin": ["ignore_range": true]])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect((run.events(named: "file-restarted").first?["reason"] as? String)?.contains("did not resume") == true)
        #expect(w.local() == w.content)
    }

    @Test func weakETagsAndNoValidatorsAreNeverUsedForIfRange() throws {
        let w = try world("weak")
        defer { w.server.stop() }
        w.server.setFaults(["/f.bin": ["reset_after": 1_000_000, "etag": "W/\"weak\""]])
        w.box.configure(remote: w.server.url, session: ["retries = 0"])
        #expect(w.box.sync().exitCode == 1)
        let kept = w.task()?["bytes_done"] as? Int ?? 0
        w.server.setFaults(["/f.bin": ["etag": "W/\"weak\""]])
        w.server.clearLog()
        #expect(w.box.sync().exitCode == 0)
        let ranged = w.server.requests().first { $0["path"] as? String == "/f.bin" }
        #expect(ranged?["range"] as? String == "bytes=\(kept)-")
        #expect((ranged?["if_range"] as? String)?.hasPrefix("W/") != true, "a weak ETag never validates a range: \(String(describing: ranged))")
        #expect(w.local() == w.content)
    }

    /// A Last-Modified that is not a second older than the answer's Date (a file written in that
    /// second, or a clock ahead) does not validate a range: the file starts again from zero
    /// instead of risking a splice of two versions written within one second.
    @Test func aLastModifiedWithinTheSecondNeverValidatesARange() throws {
        let w = try world("weak-date")
        defer { w.server.stop() }
        var times = [timespec(tv_sec: time(nil) + 120, tv_nsec: 0), timespec(tv_sec: time(nil) + 120, tv_nsec: 0)]
        utimensat(AT_FDCWD, w.box.published + "/f.bin", &times, 0)
        w.server.setFaults(["/f.bin": ["reset_after": 1_000_000, "no_etag": true]])
        w.box.configure(remote: w.server.url, session: ["retries = 0"])
        #expect(w.box.sync().exitCode == 1)
        w.server.setFaults(["/f.bin": ["no_etag": true]])
        w.server.clearLog()
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        let again = w.server.requests().first { $0["path"] as? String == "/f.bin" }
        #expect(again?["range"] == nil || again?["range"] is NSNull, "no range without a validator that holds: \(String(describing: again))")
        #expect(again?["if_range"] == nil || again?["if_range"] is NSNull, "\(String(describing: again))")
        #expect(w.local() == w.content)
    }

    @Test(arguments: [[503, 503], [500, 502, 504], [429]])
    func serverErrorBurstsAreRetriedWithBackoff(statuses: [Int]) throws {
        let w = try world("burst", size: 50_000)
        defer { w.server.stop() }
        w.server.setFaults(["/f.bin": ["statuses": statuses]])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        let retries = run.events(named: "file-retrying")
        #expect(retries.count == statuses.count)
        let delays = retries.compactMap { Double($0["delay"] as? Double ?? -1) }
        #expect(delays.allSatisfy { $0 >= 0.025 }, "backoff with jitter: \(delays)")
        #expect(w.local() == w.content)
    }

    @Test func retryAfterIsHonoured() throws {
        let w = try world("retryafter", size: 50_000)
        defer { w.server.stop() }
        w.server.setFaults(["/f.bin": ["statuses": [503], "retry_after": 2]])
        let started = Date()
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect((run.events(named: "file-retrying").first?["delay"] as? Double ?? 0) >= 2)
        #expect(Date().timeIntervalSince(started) >= 2)
        #expect(w.local() == w.content)
    }

    @Test func tooManyFailuresEndWithTheLastErrorInStatus() throws {
        let w = try world("exhausted", size: 50_000, session: ["retries = 2"])
        defer { w.server.stop() }
        w.server.setFaults(["/f.bin": ["statuses": [500, 500, 500, 500, 500]]])
        let run = w.box.sync()
        #expect(run.exitCode == 1)
        #expect(run.stderr.contains("HTTP 500"))
        #expect(run.stderr.contains("after 3 tries"))
        let task = try #require(w.task())
        #expect(task["state"] as? String == "failed")
        #expect(task["attempts"] as? Int == 3)
        #expect((task["last_error"] as? String)?.contains("HTTP 500") == true)
        #expect(!FileManager.default.fileExists(atPath: w.file))
    }

    @Test func aStalledTransferIsAbandonedAndResumed() throws {
        let w = try world("stall", size: 600_000, session: ["min-speed = 200K", "stall-timeout = 1s"])
        defer { w.server.stop() }
        w.server.setFaults(["/f.bin": ["stall_after": 250_000, "only_first": 2]])
        let run = w.box.sync(["--json"], timeout: 60)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "file-retrying").contains { ($0["error"] as? String)?.contains("stalled") == true })
        let offset = run.events(named: "file-resumed").first?["offset"] as? Int ?? 0
        #expect(offset > 0 && offset <= 250_000, "resumed at \(offset)")
        #expect(w.local() == w.content)
    }

    @Test func unreachableFilesWaitForConnectivityUntilTheResourceTimeout() throws {
        let box = Sandbox("offline")
        box.publish("files/a.txt", "a\n")
        box.buildManifest()
        let dead = freePort()
        let server = try PythonServer(directory: box.published, extra: ["--redirect", "/files/=http://127.0.0.1:\(dead)/files/"])
        defer { server.stop() }
        box.configure(remote: server.url, session: ["retry-delay = 0.05s", "retries = 2"])
        let offline = box.sync(["--json"])
        #expect(offline.exitCode == 4, "\(offline.output)")
        #expect(offline.events(named: "file-waiting").count == 1)
        let status = box.statusText()
        #expect(status.contains("waiting for connectivity"), "\(status)")
        #expect(status.contains("1 waiting"), "\(status)")

        // Past the resource timeout, waiting turns into failing.
        box.configure(remote: server.url, session: ["retry-delay = 0.05s", "retries = 1", "resource-timeout = 1s"])
        box.waitUntilTasksAreOlderThan(1)
        let expired = box.sync()
        #expect(expired.exitCode == 1, "\(expired.output)")
        #expect(expired.stderr.contains("resource-timeout"))
    }

    @Test func aRangeBeyondTheServersFileEndsWithAClearError() throws {
        let w = try world("416")
        defer { w.server.stop() }
        w.server.setFaults(["/f.bin": ["reset_after": 1_000_000, "etag": "\"fixed\""]])
        w.box.configure(remote: w.server.url, session: ["retries = 0"])
        #expect(w.box.sync().exitCode == 1)
        // The server's file shrinks under the same validator: the range is not satisfiable.
        w.box.publish("f.bin", randomData(100_000, seed: 5))
        w.server.setFaults(["/f.bin": ["etag": "\"fixed\""]])
        w.box.configure(remote: w.server.url, session: ["retry-delay = 0.05s"])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.events(named: "file-retrying").contains { ($0["error"] as? String)?.contains("HTTP 416") == true })
        #expect(run.output.contains("the server says the file has 100000 bytes; the manifest says 3000000"), "\(run.output)")
        #expect(!FileManager.default.fileExists(atPath: w.file))
    }

    /// A directory that appears at the final path while the file is on its way (not in the plan,
    /// so not ferry's to remove) stops the commit; the verified partial is kept and the next run
    /// commits it without fetching a byte.
    @Test func aVerifiedFileThatCouldNotBePlacedIsCommittedLaterWithoutFetching() throws {
        let box = Sandbox("blocked")
        let content = randomData(500_000, seed: 8)
        box.publish("x/f.bin", content)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/x/f.bin": ["rate": 400_000]])
        box.configure(remote: server.url)
        let out = box.directory + "/blocked.out", err = box.directory + "/blocked.err"
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config], stdout: out, stderr: err)
        server.waitForRequest("/x/f.bin")
        try FileManager.default.createDirectory(atPath: box.localPath("x/f.bin/appeared"), withIntermediateDirectories: true)
        try "someone else's\n".writeReplacing(box.localPath("x/f.bin/appeared/file"))
        let code = child.wait(timeout: 60)
        let stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        #expect(code == 1, "\(stderr)")
        #expect(stderr.contains("x/f.bin is a directory where the manifest has a file"), "\(stderr)")
        #expect(fileContents(box.localPath("x/f.bin/appeared/file")) == "someone else's\n", "a directory not in the plan is never removed")
        try FileManager.default.removeItem(atPath: box.localPath("x/f.bin"))
        server.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "file-done").first?["fetched"] as? Int == 0, "verified from disk")
        #expect(!server.requests().contains { $0["path"] as? String == "/x/f.bin" }, "no request for the file")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("x/f.bin"))) == content)
    }
}

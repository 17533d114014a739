import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// A server's word is taken within bounds (issue 39): a store whose list of parts never ends, a
/// `Retry-After` of an hour, an answer that stops midway, a redirect from `https://` to plain
/// HTTP, a `304` to a request that asked nothing conditionally, a symlink in a `file://` remote.
/// Each ends the run (or the file) with its own words, asking a bounded number of times, as the
/// servers' own request logs count.
@Suite(.serialized)
struct ServerWordTests {
    let p = PushTests()

    /// A published one-file tree served by scripts/testserver.py, pulled by session `test`.
    func served(_ label: String, size: Int = 10_000, session: [String] = []) throws -> (Sandbox, PythonServer) {
        let box = Sandbox(label)
        box.publish("f.bin", randomData(size, seed: UInt64(size)))
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        box.configure(remote: server.url, session: ["retry-delay = 0.05s"] + session)
        return (box, server)
    }

    func requests(_ server: PythonServer, _ method: String, _ path: String) -> Int {
        server.requests().filter { $0["method"] as? String == method && $0["path"] as? String == path }.count
    }

    /// After `kill -9` mid-upload, the store answers every `ListParts` with the first page, saying
    /// it is truncated (the attack had a push asking forever): the push asks twice (the second page
    /// does not advance), fails the file in words that name the store's fault, and gives the upload
    /// up; the next run sends a new upload, which needs no listing, and completes.
    @Test func aStoreWhoseListOfPartsNeverEndsIsAskedTwiceAtMost() throws {
        let store = try SeaweedFS.shared()
        let proxy = try S3FaultProxy(before: store, upstreamPort: store.port)
        defer { proxy.stop() }
        let w = try S3PushTests.World("endless-list", up: ["upload-part-size = 5M", "bwlimit = 8M"], endpoint: proxy.endpoint)
        w.write("large.bin", randomData(24 << 20, seed: 91))
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", w.box.config, "--session", "up"],
                              stdout: w.box.directory + "/out", stderr: w.box.directory + "/err")
        let deadline = Date().addingTimeInterval(60)
        var recorded = 0
        while Date() < deadline && child.isRunning && recorded < 1 {
            recorded = (try? StateStore(directory: w.box.state, clock: SystemClock()).journaledUploads(session: "up").first?.parts.count) ?? 0
            usleep(20_000)
        }
        child.signal(SIGKILL)
        _ = child.wait(timeout: 30)
        try #require(recorded >= 1, "killed once the store acknowledged a part")

        proxy.setFaults([["list_parts_truncated": true]])
        proxy.clearLog()
        let run = w.push(["--json"])
        #expect(run.exitCode == 1, "\(run.output)")
        let lists = proxy.requests().filter { $0.method == "GET" && $0.query.contains("uploadId=") && !$0.query.contains("partNumber=") }
        #expect((1...2).contains(lists.count), "ListParts asked \(lists.count) times")
        let failed = run.events(named: "file-failed")
        #expect(failed.count == 1 && (failed.first?["error"] as? String)?.contains("does not advance") == true, "\(run.output)")
        #expect(try w.store.pendingUploads(w.bucket).isEmpty, "the upload the store would not list was given up")

        let again = w.push()
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(w.store.get(w.bucket, "tree/large.bin").map(fnv1a) == w.versions["large.bin"]?.first)
    }

    /// `Retry-After: 3600` on a file: the retry waits 5 minutes at most (the event says so), and
    /// a run with a 2-second deadline stops at it (exit 3) instead of asking again after the wait.
    @Test func aRetryAfterOfAnHourIsCappedAndNeverOutlastsTheDeadline() throws {
        let (box, server) = try served("retry-after")
        defer { server.stop() }
        server.setFaults(["/f.bin": ["statuses": [503, 503, 503], "retry_after": 3600]])
        let run = box.sync(["--json", "--max-duration", "2s"])
        #expect(run.exitCode == 3, "\(run.output)")
        let retrying = run.events(named: "file-retrying")
        #expect(retrying.count == 1 && (retrying.first?["delay"] as? Double) == 300, "\(retrying)")
        #expect(run.output.contains("--max-duration deadline"), "\(run.output)")
        #expect(requests(server, "GET", "/f.bin") == 1, "no second try before the deadline")
    }

    /// A manifest whose answer stops after 100 bytes, with min-speed = 0 (no rate asked of the
    /// server): each try is cut off after stall-timeout, the retry too, and the run ends (exit 4).
    @Test func anAnswerThatStopsMidwayIsCutOffWithoutAMinimumSpeed() throws {
        let (box, server) = try served("manifest-stall", session: ["min-speed = 0", "stall-timeout = 1s", "retries = 1"])
        defer { server.stop() }
        server.setFaults(["/manifest.json": ["stall_after": 100]])
        let run = box.sync(["--json"], timeout: 60)
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.events(named: "manifest-retrying").count == 1, "\(run.output)")
        #expect(requests(server, "GET", "/manifest.json") == 2)
        #expect(!FileManager.default.fileExists(atPath: box.localPath("f.bin")))
    }

    /// A manifest whose answer stops after 100 bytes, with a stall-timeout of ten minutes: the
    /// run's 2-second deadline abandons the request waiting on it (exit 3, as any run stopped at
    /// its deadline), instead of holding the run until the server's stall is cut off.
    @Test func aDeadlineAbandonsAManifestAnswerThatNeverEnds() throws {
        let (box, server) = try served("manifest-deadline", session: ["min-speed = 0", "stall-timeout = 10m"])
        defer { server.stop() }
        server.setFaults(["/manifest.json": ["stall_after": 100]])
        let run = box.sync(["--json", "--max-duration", "2s"], timeout: 120)
        #expect(run.exitCode == 3, "\(run.output)")
        let finished = run.events(named: "sync-finished").first
        #expect((finished?["message"] as? String)?.contains("--max-duration deadline while waiting for the remote's answer") == true, "\(run.output)")
        #expect(requests(server, "GET", "/manifest.json") == 1, "abandoned, not tried again")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("f.bin")))
    }

    /// A WebDAV `MOVE` (an engine request of a push) answered with headers and then nothing: cut
    /// off after stall-timeout with min-speed = 0, tried again, and the push completes.
    @Test func aPushStepWhoseAnswerNeverEndsIsCutOffAndRetried() throws {
        let box = Sandbox("move-stall")
        let remoteDir = box.directory + "/remote"
        try FileManager.default.createDirectory(atPath: remoteDir, withIntermediateDirectories: true)
        let server = try PythonServer(directory: remoteDir, extra: ["--dav", "--digests"])
        defer { server.stop() }
        let body = randomData(50_000, seed: 17)
        p.write(box.directory + "/src", "a.bin", body)
        try p.config(box, remote: server.url, up: "min-speed = 0\nstall-timeout = 1s\nretry-delay = 0.05s")
        server.setFaults(["/a.bin": ["move_stall": 1]])
        let run = box.sync(["--session", "up", "--json"], timeout: 60)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "file-retrying").count == 1, "\(run.output)")
        #expect(server.requests().filter { $0["method"] as? String == "MOVE" }.count >= 2)
        #expect(FileManager.default.contents(atPath: remoteDir + "/a.bin") == body)
    }

    /// An `https://` remote whose server redirects to plain `http://`: nothing is fetched over
    /// plain HTTP, the run fails (exit 4) naming the redirect, and nothing is written.
    @Test func anHTTPSRemoteNeverFollowsARedirectToPlainHTTP() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let tls = try TestCertificates.shared()
        let box = Sandbox("downgrade", published: nginx.root)
        box.publish("f.txt", "served over plain http\n")
        box.buildManifest()
        box.configure(remote: nginx.tlsURL + "to-plain/", session: ["ca-file = \(tls.caCertificate)", "retry-delay = 0.05s"])
        let run = box.sync()
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.stderr.contains("redirected (HTTP 302) to http://127.0.0.1:\(nginx.port)/manifest.json, which is not https://"), "\(run.output)")
        #expect(nginx.requestLines().filter { $0.hasPrefix("GET /to-plain/manifest.json") }.count == 1, "a refused redirect is not tried again")
        #expect(!nginx.requestLines().contains { $0.hasPrefix("GET /manifest.json") }, "nothing asked over plain HTTP: \(nginx.requestLines())")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("f.txt")))
    }

    /// An `https://` remote whose server redirects to another host over `https://`: followed, and
    /// the manifest's source is said as where its bytes came from, in text and in `--json`.
    @Test func aFollowedRedirectIsSaidWithTheSource() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let tls = try TestCertificates.shared()
        let box = Sandbox("redirect-elsewhere", published: nginx.root)
        box.publish("f.txt", "served by another name\n")
        box.buildManifest()
        let asked = nginx.tlsURL + "to-localhost/manifest.json"
        let final = "https://localhost:\(nginx.tlsPort)/manifest.json"
        box.configure(remote: nginx.tlsURL + "to-localhost/", session: ["ca-file = \(tls.caCertificate)"])
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.output.contains("from \(asked) (redirected to \(final))"), "\(run.output)")
        #expect(fileContents(box.localPath("f.txt")) == "served by another name\n")

        box.publish("f.txt", "changed\n")
        box.buildManifest()
        let json = box.sync(["--json"])
        let fetched = json.events(named: "manifest-fetched").first
        #expect(fetched?["url"] as? String == asked && fetched?["redirected_to"] as? String == final, "\(json.output)")
    }

    /// A `304 Not Modified` to the first manifest request, which sent no validator: the remote's
    /// fault, exit 4, said as such, asked once.
    @Test func anUnsolicitedNotModifiedIsTheRemotesFault() throws {
        let (box, server) = try served("unsolicited-304")
        defer { server.stop() }
        server.setFaults(["/manifest.json": ["statuses": [304], "body": ""]])
        let run = box.sync()
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.stderr.contains("304 Not Modified to a request for \(server.url)manifest.json that asked nothing conditionally"), "\(run.output)")
        #expect(!run.stderr.contains("state"), "the state directory is not blamed: \(run.output)")
        #expect(requests(server, "GET", "/manifest.json") == 1)
    }

    /// A `file://` remote whose directory `d` became a symlink to a copy elsewhere, pushed with
    /// conflict = local-wins: the upload under it is refused once (not tried again), and the file
    /// deleted locally is not said to be deleted, since it is still there through the symlink.
    @Test func aSymlinkInAFileRemoteIsRefusedOnceAndNothingIsSaidDeleted() throws {
        let box = Sandbox("file-symlink")
        let remote = box.directory + "/remote"
        let src = box.directory + "/src"
        p.write(src, "d/a", Data("a\n".utf8))
        p.write(src, "d/b", Data("b\n".utf8))
        try p.config(box, remote: "file://" + remote, up: "conflict = local-wins\nretry-delay = 0.05s")
        let first = box.sync(["--session", "up"])
        #expect(first.exitCode == 0, "\(first.output)")

        let outside = box.directory + "/outside"
        try FileManager.default.moveItem(atPath: remote + "/d", toPath: outside)
        try FileManager.default.createSymbolicLink(atPath: remote + "/d", withDestinationPath: outside)
        p.write(src, "d/a", Data("a, changed\n".utf8))
        try FileManager.default.removeItem(atPath: src + "/d/b")
        let run = box.sync(["--session", "up", "--json"])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.events(named: "file-retrying").isEmpty, "a symlink refusal is not tried again: \(run.output)")
        let failed = run.events(named: "file-failed").compactMap { $0["path"] as? String }
        #expect(failed.filter { $0 == "d/a" }.count == 1, "said once: \(run.output)")
        #expect(!run.events(named: "file-deleted").contains { $0["path"] as? String == "d/b" }, "d/b is still served through the symlink: \(run.output)")
        #expect(fileContents(outside + "/a") == "a\n" && fileContents(outside + "/b") == "b\n", "nothing written or removed through the symlink")
    }
}

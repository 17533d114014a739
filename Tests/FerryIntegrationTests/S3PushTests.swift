import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Push to S3 (issue 19), end to end through the `ferry` binary against SeaweedFS: a tree with
/// keys that need encoding and a file in parts goes up and comes back identical (against moto
/// too); another writer's manifest is never overwritten; `kill -9` during pushes and pulls never
/// leaves a bad object or a pending upload, and a multipart upload killed at three quarters
/// resends only what the store lacks.
struct S3PushTests {
    /// A source tree, a bucket, and a config with a push session `up` and a pull session `down`
    /// on the same prefix.
    final class World {
        let store: any S3TestStore
        let bucket: String
        let box: Sandbox
        let src: String
        let dst: String
        /// Every version each path of the source had, by FNV-1a of its bytes.
        var versions: [String: Set<UInt64>] = [:]

        init(_ label: String, up: [String] = [], down: [String] = [], prefix: String = "tree/", endpoint: String? = nil,
             store: (any S3TestStore)? = nil) throws {
            self.store = try store ?? SeaweedFS.shared()
            let store = self.store
            bucket = try store.newBucket(label)
            box = Sandbox("s3-" + label)
            src = box.directory + "/src"
            dst = box.directory + "/dst"
            let s3 = ["s3-endpoint = \(endpoint ?? store.endpoint)", "s3-credentials = \(try store.credentialsFile(in: box.directory))"]
            try (["[agent]", "state = \(box.state)", "transfers = 4", "", "[session up]", "direction = push", "remote = s3://\(bucket)/\(prefix)",
                  "local = \(src)", "delete = yes"] + s3 + up
                 + ["", "[session down]", "remote = s3://\(bucket)/\(prefix)", "local = \(dst)", "delete = yes"] + s3 + down)
                .joined(separator: "\n").appending("\n").writeReplacing(box.config)
        }

        func write(_ path: String, _ data: Data) {
            let full = src + "/" + path
            try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try! data.write(to: URL(fileURLWithPath: full))
            versions[path, default: []].insert(fnv1a(data))
        }

        func push(_ extra: [String] = []) -> FerryRun { box.sync(["--session", "up"] + extra) }
        func pull(_ extra: [String] = []) -> FerryRun { box.sync(["--session", "down"] + extra) }

        /// Every object at a final key holds a version the source had; the manifest, if any, is whole.
        func checkObjects(_ moment: String, prefix: String = "tree/") {
            for key in store.keys(bucket, prefix: prefix) {
                let path = String(key.dropFirst(prefix.count))
                let data = store.get(bucket, key) ?? Data()
                if path == "manifest.json" {
                    #expect((try? Manifest.parse(Array(data), source: key)) != nil, "after \(moment): the manifest is whole")
                } else if path.hasPrefix(".ferry/meta/") {
                    #expect(SHA256Hasher.digest(of: Array(data)).hex == String(path.dropFirst(".ferry/meta/".count)), "after \(moment): \(key) holds its hash's bytes")
                } else {
                    #expect(versions[path]?.contains(fnv1a(data)) == true, "after \(moment): \(key) holds bytes the source never had")
                }
            }
        }
    }

    /// A tree with keys that need every kind of encoding, and a file above `upload-part-size` (a
    /// multipart upload), goes up and comes back byte-identical, verified as the store allows
    /// (SeaweedFS computes the SHA-256 of what it keeps; moto computes none of a single PUT, which
    /// is read back); the next push sends nothing; a deletion and a change go up as such.
    @Test(arguments: S3Implementation.allCases)
    func pushesATreeWithAFileInPartsAndPullsItBackIdentical(store: S3Implementation) throws {
        let w = try World("push", up: ["upload-part-size = 5M"], store: store.shared())
        let names = ["a b.txt", "plus+sign.txt", "percent%41.txt", "hash#1.txt", "question?.txt", "tilde~.txt", "ünï/çødé.txt", "semi;colon=eq&amp.txt"]
        for (i, name) in names.enumerated() { w.write(name, Data("file \(i) \(name)\n".utf8)) }
        let big = randomData(12 << 20, seed: 31)
        w.write("deep/er/big.bin", big)
        let first = w.push(["--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(first.events(named: "file-done").count == names.count + 1, "\(first.stdout)")
        #expect(!first.output.contains(SeaweedFS.secretKey))
        let verified = try #require(first.events(named: "uploads-verified").last, "\(first.stdout)")
        let (byStore, readBack) = (verified["store_checksum"] as? Int ?? -1, verified["read_back"] as? Int ?? -1)
        switch store {
        case .seaweedfs: #expect(byStore >= names.count + 1 && readBack == 0, "\(verified)")
        // moto answers a multipart upload with the (bare) composite of its parts' SHA-256s, and a
        // single PUT with none: those are read back.
        case .moto: #expect(byStore == 1 && readBack >= names.count, "\(verified)")
        }
        #expect(w.store.get(w.bucket, "tree/deep/er/big.bin") == big)
        #expect(try w.store.pendingUploads(w.bucket).isEmpty, "no multipart upload is left pending")
        w.checkObjects("the first push")

        let down = w.pull()
        #expect(down.exitCode == 0, "\(down.output)")
        expectIdentical(w.src, w.dst)

        let again = w.push(["--json"])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(again.events(named: "file-done").isEmpty, "an unchanged tree sends nothing: \(again.stdout)")

        try FileManager.default.removeItem(atPath: w.src + "/hash#1.txt")
        w.write("a b.txt", Data("changed\n".utf8))
        let third = w.push()
        #expect(third.exitCode == 0, "\(third.output)")
        #expect(!w.store.keys(w.bucket, prefix: "tree/").contains("tree/hash#1.txt"), "a deletion goes up")
        #expect(w.pull().exitCode == 0)
        expectIdentical(w.src, w.dst)
    }

    /// What a fleet costs the store at rest: through a logging proxy, an unchanged pull poll is one
    /// conditional GET of the manifest (304), and so is an unchanged push poll (once the push has
    /// checked the files it placed: it does so again every `verify-interval`).
    @Test func anUnchangedPollIsOneRequest() throws {
        let store = try SeaweedFS.shared()
        let proxy = try NginxServer(proxyTo: store.port)
        defer { proxy.stop() }
        let w = try World("at-rest", up: ["verify-interval = 1h"], endpoint: "http://127.0.0.1:\(proxy.port)")
        for i in 0..<50 { w.write("d\(i % 5)/f\(i).txt", Data("file \(i)\n".utf8)) }
        #expect(w.push().exitCode == 0)
        // Each file is one PUT, whose answer (the SHA-256 the store checked) stands for what it
        // holds: no HEAD after it. Then the manifest: a GET before, a PUT last.
        let placing = proxy.requests()
        let objects = placing.filter { $0.method == "PUT" && $0.path.contains("/.ferry/meta/") }
        #expect(!objects.isEmpty && Set(objects.map(\.path)).count == objects.count, "each metadata object is sent once")
        #expect(placing.filter { $0.method == "PUT" }.count == 51 + objects.count && !placing.contains { $0.method == "HEAD" },
                "\(placing.map { "\($0.method) \($0.path)" })")
        #expect(w.pull().exitCode == 0)
        #expect(w.push().exitCode == 0, "the first poll after a publish checks the placed files")
        func requests(during run: () -> FerryRun) -> [(method: String, path: String, status: Int)] {
            let before = proxy.requests().count
            let result = run()
            #expect(result.exitCode == 0, "\(result.output)")
            return Array(proxy.requests().dropFirst(before))
        }
        let pull = requests { w.pull() }
        #expect(pull.count == 1 && pull.first?.method == "GET" && pull.first?.status == 304, "\(pull)")
        let push = requests { w.push() }
        #expect(push.count == 1 && push.first?.method == "GET" && push.first?.status == 304, "\(push)")
        // A push whose state is new (a replaced state directory, a second machine with the same
        // tree) places nothing: its first run reads the published tree's metadata objects back,
        // and from then on its poll is one request again (a GET of the whole manifest: until it
        // publishes, such a push keeps no copy of it to ask conditionally on).
        try FileManager.default.removeItem(atPath: w.box.state)
        let adopting = requests { w.push() }
        #expect(adopting.contains { $0.path.contains("/.ferry/meta/") } && !adopting.contains { $0.method == "PUT" }, "\(adopting)")
        let adopted = requests { w.push() }
        #expect(adopted.count == 1 && adopted.first?.method == "GET" && adopted.first?.path.hasSuffix("/manifest.json") == true, "\(adopted)")
    }

    /// Another writer publishes while a push uploads: the push's manifest write is conditional
    /// (`If-Match` on the ETag it read), so it is refused, the other writer's manifest stays, and
    /// the run says so (exit 1). Before the first publish, `If-None-Match: *` does the same.
    @Test func anotherWritersManifestIsNeverOverwritten() throws {
        let w = try World("writers", up: ["bwlimit = 2M"])
        w.write("a.txt", Data("a\n".utf8))
        #expect(w.push().exitCode == 0)
        let theirs = Data(#"{"format":"ferry-manifest/1","version":999,"files":[]}"#.utf8)
        for round in 0..<2 {
            if round == 1 {
                // Before any publish of this session's: a fresh prefix, nothing there.
                try FileManager.default.removeItem(atPath: w.box.state)
                let del = runProcess("/usr/bin/curl", ["-s", "-X", "DELETE", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                                                       "\(SeaweedFS.accessKey):\(SeaweedFS.secretKey)", w.store.url(w.bucket, "tree/manifest.json")])
                #expect(del.exitCode == 0)
            }
            w.write("slow\(round).bin", randomData(3_000_000, seed: UInt64(40 + round)))
            let out = w.box.directory + "/out\(round)"
            let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", w.box.config, "--session", "up", "--json"],
                                  stdout: out, stderr: w.box.directory + "/err\(round)")
            // Once the upload runs, another writer publishes.
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline, !((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("\"file-started\"") { usleep(20_000) }
            try w.store.put(w.bucket, "tree/manifest.json", data: theirs)
            let status = child.wait(timeout: 60)
            let stdout = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            #expect(status == 1, "round \(round): \(stdout)")
            #expect(stdout.contains("another writer"), "round \(round): \(stdout)")
            #expect(w.store.get(w.bucket, "tree/manifest.json") == theirs, "round \(round): the other writer's manifest stays")
        }
    }

    /// `kill -9` at random moments of S3 pushes (a multipart upload among small files) and pulls.
    /// After every kill each object at a final key is a version the source had and the manifest is
    /// whole; at the end one push completes, nothing is left pending on the store, and a pull is
    /// byte-identical.
    ///
    /// 6 kills by default; FERRY_SOAK=1 makes it 40, FERRY_KILLS=N sets N. FERRY_SEED=S replays a run.
    @Test func killNineDuringS3PushesAndPullsNeverLeavesABadObject() throws {
        let env = ProcessInfo.processInfo.environment
        let kills = Int(env["FERRY_KILLS"] ?? "") ?? (env["FERRY_SOAK"] != nil ? 40 : 6)
        let seed = UInt64(env["FERRY_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970 * 1000)
        var random = CrashTests.SeededRandom(state: seed)
        print("S3 kill -9 test: \(kills) kills, FERRY_SEED=\(seed)")
        let w = try World("kill9", up: ["upload-part-size = 5M", "bwlimit = 12M"])
        w.write("big/one.bin", randomData(14 << 20, seed: seed &+ 1))
        for i in 0..<60 { w.write("small/d\(i % 6)/s\(i).txt", randomData(1500 + i * 7, seed: seed &+ 100 &+ UInt64(i))) }
        var completed = 0
        for i in 0..<kills {
            let pulling = i % 3 == 2
            let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", w.box.config, "--session", pulling ? "down" : "up"],
                                  stdout: w.box.directory + "/out\(i)", stderr: w.box.directory + "/err\(i)")
            let (status, moment) = CrashTests.kill(child, within: 0.05...1.6, using: &random)
            w.checkObjects("kill \(i + 1) \(moment)")
            if pulling { continue }
            if status == 0 {
                completed += 1
                w.write("big/one.bin", randomData(14 << 20, seed: seed &+ 1000 &+ UInt64(i)))
                for k in 0..<5 { w.write("small/d\(k)/s\(k).txt", randomData(2500 + i, seed: seed &+ 2000 &+ UInt64(i * 100 + k))) }
                try? FileManager.default.removeItem(atPath: w.src + "/small/d\(i % 6)/s\(50 + i % 10).txt")
            }
        }
        let final = w.push()
        #expect(final.exitCode == 0, "\(final.output) (seed \(seed))")
        #expect(try w.store.pendingUploads(w.bucket).isEmpty, "no multipart upload left pending (seed \(seed))")
        let down = w.pull()
        #expect(down.exitCode == 0, "\(down.output) (seed \(seed))")
        expectIdentical(w.src, w.dst)
        print("S3 kill -9 test: \(kills) kills, \(completed) pushes finished before their kill")
    }

    /// A 48 MiB file in 5 MiB parts, killed once the task table records three quarters of its
    /// parts: the relaunch asks the store which parts it holds and sends at most half the file
    /// (rclone sends all of it again).
    @Test func aMultipartUploadKilledAtThreeQuartersResendsOnlyWhatTheStoreLacks() throws {
        let w = try World("resume", up: ["upload-part-size = 5M", "bwlimit = 24M"])
        let size = 48 << 20
        w.write("large.bin", randomData(size, seed: 52))
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", w.box.config, "--session", "up"],
                              stdout: w.box.directory + "/out", stderr: w.box.directory + "/err")
        let parts = (size + (5 << 20) - 1) / (5 << 20)
        let deadline = Date().addingTimeInterval(60)
        var recorded = 0
        while Date() < deadline && child.isRunning {
            recorded = (try? StateStore(directory: w.box.state, clock: SystemClock()).journaledUploads(session: "up").first?.parts.count) ?? 0
            if recorded * 4 >= parts * 3 { break }
            usleep(20_000)
        }
        child.signal(SIGKILL)
        _ = child.wait(timeout: 30)
        #expect(recorded * 4 >= parts * 3, "killed at \(recorded) of \(parts) parts")
        #expect(w.store.keys(w.bucket, prefix: "tree/").isEmpty, "nothing at a final key yet")

        let relaunch = w.push(["--json"])
        #expect(relaunch.exitCode == 0, "\(relaunch.output)")
        let sent = relaunch.events(named: "file-done").first?["fetched"] as? Int ?? -1
        #expect(sent >= 0 && sent <= size / 2, "sent \(sent) of \(size) bytes again")
        #expect(w.store.get(w.bucket, "tree/large.bin").map(fnv1a) == w.versions["large.bin"]?.first)
        #expect(try w.store.pendingUploads(w.bucket).isEmpty)
        print("S3 multipart resume: killed at \(recorded) of \(parts) parts recorded, \(sent) of \(size) bytes sent again")
    }

    /// On a real cluster (master, two volume servers with replication 001, filer, S3 gateway), one
    /// volume server stops in the middle of a push and comes back: the push completes (at once, or
    /// with the next run once the server is back) and every object is a version the source had.
    /// It stops again in the middle of a pull, and the pull completes through the replica.
    @Test func aVolumeServerThatStopsMidPushAndMidPullCostsNothingButTime() throws {
        let cluster = try SeaweedCluster()
        defer { cluster.stop() }
        let w = try World("cluster", up: ["upload-part-size = 5M", "bwlimit = 8M", "retry-delay = 0.5", "retries = 20"],
                          down: ["bwlimit = 8M", "retry-delay = 0.5", "retries = 20"], store: cluster)
        w.write("big.bin", randomData(16 << 20, seed: 61))
        for i in 0..<30 { w.write("small/s\(i).txt", randomData(2000 + i, seed: 62 &+ UInt64(i))) }

        let out = w.box.directory + "/push.out"
        let push = try Child(Harness.ferryBinary, ["sync", "now", "--config", w.box.config, "--session", "up", "--json"],
                             stdout: out, stderr: w.box.directory + "/push.err")
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, !((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("\"file-started\"") { usleep(20_000) }
        // Away until the push has gone on without it: a file placed or a retry since, or the end.
        func progress() -> Int {
            let said = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            return said.components(separatedBy: "\"file-done\"").count + said.components(separatedBy: "\"file-retrying\"").count
        }
        let before = progress()
        cluster.stopVolume(1)
        let awayUntil = Date().addingTimeInterval(30)
        while Date() < awayUntil, push.isRunning, progress() == before { usleep(20_000) }
        try cluster.startVolume(1)
        var status = push.wait(timeout: 120)
        let said = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        print("cluster push through an outage: exit \(status ?? -1), \(said.components(separatedBy: "\"file-retrying\"").count - 1) retries")
        if status != 0 {
            // Failed while the server was away: the next run completes.
            status = w.push().exitCode
        }
        #expect(status == 0, "\((try? String(contentsOfFile: out, encoding: .utf8)) ?? "")")
        w.checkObjects("the push through an outage")
        #expect(try w.store.pendingUploads(w.bucket).isEmpty)

        let pullOut = w.box.directory + "/pull.out"
        let pull = try Child(Harness.ferryBinary, ["sync", "now", "--config", w.box.config, "--session", "down", "--json"],
                             stdout: pullOut, stderr: w.box.directory + "/pull.err")
        while Date() < deadline.addingTimeInterval(60), !((try? String(contentsOfFile: pullOut, encoding: .utf8)) ?? "").contains("\"file-started\"") {
            usleep(20_000)
        }
        cluster.stopVolume(0)
        let pulled = pull.wait(timeout: 120)
        let pullSaid = (try? String(contentsOfFile: pullOut, encoding: .utf8)) ?? ""
        print("cluster pull with a volume server down: exit \(pulled ?? -1), \(pullSaid.components(separatedBy: "\"file-retrying\"").count - 1) retries")
        #expect(pulled == 0, "the replica serves the pull: \((try? String(contentsOfFile: pullOut, encoding: .utf8)) ?? "")")
        expectIdentical(w.src, w.dst)
    }

    /// `ferry cancel` during a multipart upload stops it where it is (between parts or in one),
    /// keeps what the store acknowledged, publishes nothing; `ferry resume` sends only the parts
    /// the store lacks and publishes.
    @Test func cancelDuringAnUploadInPartsKeepsItsPartsAndResumeFinishesIt() throws {
        let w = try World("cancel", up: ["upload-part-size = 5M", "bwlimit = 6M"])
        let size = 30 << 20
        w.write("large.bin", randomData(size, seed: 71))
        let out = w.box.directory + "/push.out"
        let push = try Child(Harness.ferryBinary, ["sync", "now", "--config", w.box.config, "--session", "up"],
                             stdout: out, stderr: w.box.directory + "/push.err")
        let deadline = Date().addingTimeInterval(60)
        var recorded = 0
        while Date() < deadline && push.isRunning && recorded < 2 {
            recorded = (try? StateStore(directory: w.box.state, clock: SystemClock()).journaledUploads(session: "up").first?.parts.count) ?? 0
            usleep(20_000)
        }
        let cancel = ferry(["cancel", "--config", w.box.config, "--session", "up"])
        #expect(cancel.stdout == "suspended 1 task of session up\n", "\(cancel.output)")
        #expect(push.wait(timeout: 30) == 3, "\((try? String(contentsOfFile: w.box.directory + "/push.err", encoding: .utf8)) ?? "")")
        let kept = (try StateStore(directory: w.box.state, clock: SystemClock()).journaledUploads(session: "up").first?.parts.count) ?? 0
        #expect(kept >= 2, "the parts the store acknowledged stay recorded: \(kept)")
        #expect(w.store.keys(w.bucket, prefix: "tree/").isEmpty, "nothing at a final key, no manifest")
        #expect(try w.store.pendingUploads(w.bucket) == ["tree/large.bin"], "the upload waits on the store for resume")

        try (try String(contentsOfFile: w.box.config, encoding: .utf8)).replacingOccurrences(of: "bwlimit = 6M", with: "")
            .writeReplacing(w.box.config)
        let resumed = ferry(["resume", "--config", w.box.config, "--session", "up", "--json"])
        #expect(resumed.exitCode == 0, "\(resumed.output)")
        let sent = resumed.events(named: "file-done").first?["fetched"] as? Int ?? -1
        #expect(sent >= 0 && sent <= size - kept * (5 << 20), "only the parts the store lacked: \(sent) of \(size)")
        #expect(w.store.get(w.bucket, "tree/large.bin").map(fnv1a) == w.versions["large.bin"]?.first)
        #expect(try w.store.pendingUploads(w.bucket).isEmpty)
    }

    /// Virtual-hosted addressing (`BUCKET.host/KEY`, the AWS default) against a real store: the
    /// same push and pull, with `s3-path-style = no` and the store reached as `localhost`.
    @Test func pushesAndPullsWithVirtualHostedAddressing() throws {
        let store = try SeaweedFS.shared()
        let w = try World("vhost", up: ["s3-path-style = no"], down: ["s3-path-style = no"], endpoint: "http://localhost:\(store.port)")
        w.write("a b/ü+1.txt", Data("virtual\n".utf8))
        w.write("big.bin", randomData(6 << 20, seed: 81))
        let up = w.push(["--json"])
        #expect(up.exitCode == 0, "\(up.output)")
        #expect(store.get(w.bucket, "tree/a b/ü+1.txt") == Data("virtual\n".utf8), "the object is where path style finds it too")
        let down = w.pull()
        #expect(down.exitCode == 0, "\(down.output)")
        expectIdentical(w.src, w.dst)
    }
}

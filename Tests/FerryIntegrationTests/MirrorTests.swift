import Foundation
import Testing
import FerryCore
@testable import FerryRuntime

/// `mirrors` (issue 42): copies of the remote tried in order before it for each file, the
/// remote staying the authority for the manifest. Nothing a mirror sends is trusted: a mirror that
/// fails a file is skipped for it, one that sends wrong bytes is demoted for the run, and every
/// file is checked as ever. What each source served is counted and said.
@Suite(.serialized)
struct MirrorTests {
    /// A published tree: a few small files and two large ones, with its manifest, in `root`.
    static func publishTree(_ root: String, version: Int, seed: UInt64) -> [String: Data] {
        var files: [String: Data] = [:]
        for i in 0..<4 { files["small/\(i).txt"] = Data("version \(version), file \(i)\n".utf8) }
        files["big/a.bin"] = randomData(1_500_000, seed: seed)
        files["big/b.bin"] = randomData(700_000, seed: seed + 1)
        for (path, data) in files {
            let full = root + "/" + path
            try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try! data.write(to: URL(fileURLWithPath: full))
        }
        let built = ferry(["manifest", "build", root, "--version", String(version)])
        #expect(built.exitCode == 0, "\(built.output)")
        return files
    }

    /// How many requests `server` had for files (not the manifest or its metadata objects).
    static func fileRequests(_ server: PythonServer) -> Int {
        server.requests().filter { ($0["path"] as? String).map { !$0.hasPrefix("/.ferry/") && $0 != "/manifest.json" } ?? false }.count
    }

    /// The `source-served` events of a run, by source: bytes, requests, demoted.
    static func served(_ run: FerryRun) -> [String: (bytes: Int, requests: Int, demoted: String?)] {
        var out: [String: (Int, Int, String?)] = [:]
        for e in run.events(named: "source-served") {
            out[e["source"] as? String ?? "?"] = (e["bytes"] as? Int ?? -1, e["requests"] as? Int ?? -1, e["demoted"] as? String)
        }
        return out
    }

    /// Agents behind an nginx site cache: the first fetches every file through the cache, the
    /// others find them there, so the origin serves each file once however many agents there are;
    /// the runs, `status` and the files say which source served what. With the cache gone, agents
    /// are served by the origin with nothing failed.
    @Test func agentsBehindASiteCacheCostTheOriginEachFileOnce() throws {
        let origin = try NginxServer()
        defer { origin.stop() }
        let cache = try NginxServer(cacheFor: origin.port)
        defer { cache.stop() }
        let files = Self.publishTree(origin.root, version: 1, seed: 7)
        // The sources serve the tree's metadata objects too, and count them with the files.
        let objects = try FileManager.default.contentsOfDirectory(atPath: origin.root + "/.ferry/meta")
        let metadata = objects.reduce(0) { $0 + (FileManager.default.contents(atPath: origin.root + "/.ferry/meta/" + $1)?.count ?? 0) }
        let content = files.values.reduce(0) { $0 + $1.count }
        var agents: [Sandbox] = []
        var total = 0
        for i in 0..<3 {
            let box = Sandbox("mirror-agent\(i)")
            box.configure(remote: origin.url, session: ["mirrors = \(cache.url)"])
            agents.append(box)
        }
        for box in agents {
            let run = box.sync(["--json"])
            #expect(run.exitCode == 0, "\(run.output)")
            for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
            let served = Self.served(run)
            // (A cold pull fetches the tree's objects, not the large file's index.)
            let bytes = served[cache.url]?.bytes ?? 0, requests = served[cache.url]?.requests ?? 0
            #expect(bytes > content && bytes <= content + metadata && requests > files.count && requests <= files.count + objects.count,
                    "every file and object from the cache: \(served)")
            total = bytes
            #expect(served["origin"]?.bytes == 0, "\(served)")
            #expect(run.events(named: "file-done").allSatisfy { $0["source"] as? String == cache.url })
        }
        // The origin's own count: each file once (the root and the tree's objects aside; the
        // cache asks again after a second, answered 304 with no body).
        let fromOrigin = origin.bytesSent { !$0.hasPrefix("/.ferry/") && $0 != "/manifest.json" }
        let whole = origin.requests().filter { !$0.path.hasPrefix("/.ferry/") && $0.path != "/manifest.json" && $0.status == 200 }
        #expect(fromOrigin.bytes == content && whole.count == files.count, "the origin served each file once for 3 agents: \(content), \(whole.count) answers")
        let status = agents[2].statusSessions().first ?? [:]
        let sources = status["last_sources"] as? [[String: Any]] ?? []
        #expect(sources.map { $0["source"] as? String } == [cache.url, "origin"] && sources.first?["bytes"] as? Int == total, "\(status)")
        let text = agents[2].statusText()
        #expect(text.contains("sources") && text.contains("\(cache.url) \(Units.formatBytes(Int64(total))) (100%), first byte ")
                && text.contains("; origin 0 B (0%)"), "\(text)")

        // A change inside the large file: each agent's delta asks the cache for ranges, and the
        // cache asks the origin for those ranges once, not for the new version whole.
        var changed = files["big/a.bin"]!
        changed.replaceSubrange(500_000..<540_000, with: randomData(40_000, seed: 99))
        // Rewritten within the second at the same size: nginx's validators (the mtime in seconds
        // and the size) say nothing changed, but the agents ask the cache by version.
        try changed.write(to: URL(fileURLWithPath: origin.root + "/big/a.bin"))
        #expect(ferry(["manifest", "build", origin.root, "--version", "2"]).exitCode == 0)
        origin.clearLog()
        var fetched = 0
        for box in agents {
            let run = box.sync(["--json"])
            #expect(run.exitCode == 0, "\(run.output)")
            #expect(FileManager.default.contents(atPath: box.localPath("big/a.bin")) == changed)
            let done = run.events(named: "file-done").first { $0["path"] as? String == "big/a.bin" }
            #expect((done?["reused"] as? Int ?? 0) > 1_000_000 && done?["source"] as? String == cache.url, "a delta through the cache: \(done ?? [:])")
            fetched = max(fetched, done?["fetched"] as? Int ?? 0)
        }
        // (The cache asks the origin by version as the agents asked it: the path and its query.)
        let asked = origin.requests().filter { $0.path.hasPrefix("/big/a.bin?") }
        #expect(Self.served(agents[0].sync(["--json"])).isEmpty, "in sync: nothing to fetch, nothing to say")
        let sent = origin.bytesSent { $0.hasPrefix("/big/a.bin") }.bytes
        #expect(!asked.isEmpty && asked.allSatisfy { $0.status == 206 }, "ranges, not the file: \(asked)")
        #expect(sent >= 40_000 && sent <= fetched + fetched / 2, "the origin sent about the change once for 3 agents: \(sent) bytes, an agent's delta \(fetched)")

        try Self.missAtOnce(agents, origin: origin, changing: &changed)

        // The cache goes away: a new version comes from the origin, nothing fails, said once a run.
        cache.goAway()
        let second = Self.publishTree(origin.root, version: 3, seed: 9)
        let run = agents[0].sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in second { #expect(FileManager.default.contents(atPath: agents[0].localPath(path)) == data, "\(path)") }
        let served = Self.served(run)
        #expect(served[cache.url]?.bytes == 0 && (served["origin"]?.bytes ?? 0) >= 2_200_000, "\(served)")
        #expect(run.events(named: "file-failed").isEmpty && run.events(named: "file-retrying").isEmpty, "a mirror's failure is not a try: \(run.stdout)")
    }

    /// The agents miss at once, on another change to big/a.bin: still one request to the origin
    /// (the cache's lock holds the others until the first answer is kept).
    static func missAtOnce(_ agents: [Sandbox], origin: NginxServer, changing changed: inout Data) throws {
        changed.replaceSubrange(900_000..<930_000, with: randomData(30_000, seed: 98))
        try changed.write(to: URL(fileURLWithPath: origin.root + "/big/a.bin"))
        #expect(ferry(["manifest", "build", origin.root, "--version", "3"]).exitCode == 0)
        origin.clearLog()
        let children = try agents.map { box in
            try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config], stdout: box.directory + "/burst.out", stderr: box.directory + "/burst.err")
        }
        for child in children { #expect(child.wait(timeout: 120) == 0) }
        for box in agents { #expect(FileManager.default.contents(atPath: box.localPath("big/a.bin")) == changed, "\(fileContents(box.directory + "/burst.err") ?? "")") }
        let burst = origin.requests().filter { $0.path.hasPrefix("/big/a.bin?") }
        #expect(burst.count == 1 && burst.allSatisfy { $0.status == 206 }, "one request for the three: \(burst)")
    }

    /// A mirror that serves other bytes at every file's path: no wrong file is placed, each costs
    /// one refetch from the origin, and once its wrong files reach 4 and outnumber its right ones
    /// it is left for the run (said once). One that holds a few stale copies (of another size)
    /// among right ones is kept, each stale file costing one refetch. A mirror that lacks a file
    /// (404) is skipped for that file only.
    @Test func aMirrorWithWrongBytesAtPathsCostsOneRefetchAFile() throws {
        let box = Sandbox("mirror-hostile")
        let files = Self.publishTree(box.published, version: 1, seed: 11)
        let origin = try PythonServer(directory: box.published)
        defer { origin.stop() }
        // The bad mirror: the same tree, each file with one byte changed.
        let bad = box.directory + "/bad"
        try FileManager.default.copyItem(atPath: box.published, toPath: bad)
        for path in files.keys {
            var data = files[path]!
            data[data.count / 2] ^= 0x20
            try data.write(to: URL(fileURLWithPath: bad + "/" + path))
        }
        let mirror = try PythonServer(directory: bad)
        defer { mirror.stop() }
        box.configure(remote: origin.url, session: ["mirrors = \(mirror.url)", "session-transfers = 1"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path): exactly the published bytes") }
        // Wrong at every path: after 4 wrong files and none right it is lying or behind, and is
        // left for the run; the last 2 files go to the origin without asking it.
        let fromMirror = Self.fileRequests(mirror)
        #expect(fromMirror == PullSources.wrongAtPathLimit, "files asked of the mirror until it was left: \(fromMirror)")
        let fromOrigin = Self.fileRequests(origin)
        #expect(fromOrigin == files.count, "each once of the origin: \(fromOrigin)")
        #expect(Self.served(run)[mirror.url]?.demoted == "sent wrong bytes for 4 files at their paths", "\(Self.served(run))")
        #expect(run.events(named: "warning").filter { ($0["message"] as? String)?.contains("sent wrong bytes for 4 files at their paths") == true }.count == 1)
        #expect(run.events(named: "file-done").allSatisfy { $0["source"] as? String == "origin" })
        #expect(run.events(named: "file-retrying").isEmpty && run.events(named: "file-failed").isEmpty)

        // A cache holding a few stale copies among right ones is kept: each stale file costs one refetch.
        let fewStale = box.directory + "/few-stale"
        try FileManager.default.copyItem(atPath: box.published, toPath: fewStale)
        let staleFiles = ["small/0.txt", "small/1.txt"]
        for path in staleFiles { try Data("stale\n".utf8).write(to: URL(fileURLWithPath: fewStale + "/" + path)) }
        let stale = try PythonServer(directory: fewStale)
        defer { stale.stop() }
        try FileManager.default.removeItem(atPath: box.local)
        try FileManager.default.removeItem(atPath: box.state)
        box.configure(remote: origin.url, session: ["mirrors = \(stale.url)", "session-transfers = 1"])
        let kept = box.sync(["--json"])
        #expect(kept.exitCode == 0, "\(kept.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
        #expect(Self.served(kept)[stale.url]?.demoted == nil, "\(Self.served(kept))")
        let fromStale = Dictionary(kept.events(named: "file-done").map { ($0["path"] as? String ?? "", $0["source"] as? String ?? "") }, uniquingKeysWith: { a, _ in a })
        #expect(fromStale.filter { $0.value == "origin" }.keys.sorted() == staleFiles, "only the stale files came from the origin: \(fromStale)")

        // A mirror that lacks one file: that file from the origin, the rest from the mirror.
        let good = box.directory + "/good"
        let published = Self.publishTree(box.published, version: 2, seed: 13)
        try FileManager.default.copyItem(atPath: box.published, toPath: good)
        try FileManager.default.removeItem(atPath: good + "/big/b.bin")
        let partial = try PythonServer(directory: good)
        defer { partial.stop() }
        box.configure(remote: origin.url, session: ["mirrors = \(partial.url)", "session-transfers = 1"])
        let second = box.sync(["--json"])
        #expect(second.exitCode == 0, "\(second.output)")
        for (path, data) in published { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
        let sources = Dictionary(second.events(named: "file-done").map { ($0["path"] as? String ?? "", $0["source"] as? String ?? "") }, uniquingKeysWith: { a, _ in a })
        #expect(sources["big/b.bin"] == "origin" && sources["big/a.bin"] == partial.url, "\(sources)")
        #expect(Self.served(second)[partial.url]?.demoted == nil)
    }

    /// With `remote-layout = objects` every name is its content's: a mirror (here a directory) that
    /// holds other bytes under one is wrong, not stale. It is demoted after its first bad object
    /// (said once, in the run and in status), that one object is fetched again from the remote, the
    /// rest come from there, and no wrong file is placed.
    @Test func aMirrorThatServesWrongContentObjectsIsDemoted() throws {
        let box = Sandbox("mirror-objects")
        var files: [String: Data] = [:]
        for i in 0..<6 { files["f\(i).bin"] = randomData(200_000 + i, seed: 30 + UInt64(i)) }
        let (remote, bad, _) = try Self.damagedCopy(box, files)
        box.configure(remote: "file://\(remote)/", session: ["mirrors = file://\(bad)/", "session-transfers = 1"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path): exactly the published bytes") }
        let warnings = run.events(named: "warning").compactMap { $0["message"] as? String }.filter { $0.contains("mirror") }
        #expect(warnings.count == 1 && warnings[0].contains("sent wrong bytes"), "said once: \(warnings)")
        let served = Self.served(run)
        #expect(served[bad.hasSuffix("/") ? "file://" + bad : "file://" + bad + "/"]?.demoted?.contains("sent wrong bytes") == true, "\(served)")
        let sources = run.events(named: "file-done").map { $0["source"] as? String ?? "" }
        #expect(sources.count == files.count && sources.allSatisfy { $0 == "origin" }, "after the first bad object, every file from the remote: \(sources)")
        // The tree's one metadata object came from the mirror (it was not damaged there).
        let requests = served.values.reduce(0) { $0 + $1.requests }
        #expect(requests == 1 + files.count + 1, "one object fetched again for the demotion: \(requests) requests for \(files.count) files")
        #expect(box.statusText().contains("demoted"), "\(box.statusText())")
    }

    /// `files` pushed with `remote-layout = objects` (from `src`, with `push` lines added) into
    /// `remote`, and a copy of it, `bad`, with every content object damaged but those of a size
    /// `intact` says; with each object's path on a server and its size.
    static func damagedCopy(_ box: Sandbox, _ files: [String: Data], push: [String] = [],
                            intact: (Int) -> Bool = { _ in false }) throws -> (remote: String, bad: String, objects: [(path: String, size: Int)]) {
        let src = box.directory + "/src", remote = box.directory + "/remote", bad = box.directory + "/bad"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        for (path, data) in files { try data.write(to: URL(fileURLWithPath: src + "/" + path)) }
        try box.configure(push: "file://\(remote)/", from: src, ["remote-layout = objects"] + push)
        let pushed = box.sync(["--session", "up"])
        #expect(pushed.exitCode == 0, "\(pushed.output)")
        try FileManager.default.copyItem(atPath: remote, toPath: bad)
        var objects: [(path: String, size: Int)] = []
        for object in try FileManager.default.subpathsOfDirectory(atPath: bad + "/.ferry/data") where object.count > 3 {
            var data = try #require(FileManager.default.contents(atPath: bad + "/.ferry/data/" + object))
            if !intact(data.count) {
                data[data.count / 3] ^= 0x10
                try data.write(to: URL(fileURLWithPath: bad + "/.ferry/data/" + object))
            }
            objects.append(("/.ferry/data/" + object, data.count))
        }
        return (remote, bad, objects)
    }

    /// `damagedCopy`, served by the project's own server with `faults(object path, size)` per
    /// object and every body's bytes logged.
    static func hostileMirror(_ box: Sandbox, _ files: [String: Data], push: [String] = [], intact: (Int) -> Bool = { _ in false },
                              faults: (String, Int) -> [String: Any] = { _, _ in [:] }) throws -> (remote: String, mirror: PythonServer) {
        let (remote, bad, objects) = try damagedCopy(box, files, push: push, intact: intact)
        let mirror = try PythonServer(directory: bad)
        mirror.setFaults(Dictionary(uniqueKeysWithValues: objects.map { ($0.path, faults($0.path, $0.size).merging(["log_sent": true]) { a, _ in a }) }))
        return (remote, mirror)
    }

    /// The bodies of content objects a test server sent: path and bytes, once each has ended (a
    /// body cut short is logged when the server's next write fails).
    static func objectBodies(_ server: PythonServer) -> [(path: String, sent: Int)] {
        func data(_ key: String) -> [[String: Any]] { server.requests().filter { ($0[key] as? String)?.hasPrefix("/.ferry/data/") == true } }
        let deadline = Date().addingTimeInterval(20)
        while data("sent_path").count < data("path").count && Date() < deadline { usleep(20_000) }
        return data("sent_path").map { ($0["sent_path"] as! String, $0["sent"] as? Int ?? 0) }
    }

    /// Until a mirror has sent one file that verified, one file at a time comes from it, the
    /// smallest first: a mirror whose every object is wrong is asked for one, however many
    /// transfers the session runs, and demoted. (Files larger than a pack's members, so each is
    /// its own object.)
    @Test func aMirrorsFirstFileComesAlone() throws {
        let box = Sandbox("mirror-first-alone")
        var files: [String: Data] = [:]
        for i in 0..<6 { files["f\(i).bin"] = randomData(130_000 - 1_000 * i, seed: 70 + UInt64(i)) }
        let (remote, mirror) = try Self.hostileMirror(box, files)
        defer { mirror.stop() }
        box.configure(remote: "file://\(remote)/", session: ["mirrors = \(mirror.url)", "session-transfers = 4"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
        let bodies = Self.objectBodies(mirror)
        #expect(bodies.count == 1 && bodies.first?.sent == 125_000, "one object asked of it, the smallest: \(bodies)")
        #expect(Self.served(run)[mirror.url]?.demoted?.contains("f5.bin") == true, "\(Self.served(run))")
    }

    /// A mirror demoted while other files are still coming from it (`session-transfers = 4`):
    /// those downloads are stopped, not waited for and checked, so the demotion costs the one bad
    /// object it took to see it. Here the mirror sends the smallest file right (so it is trusted
    /// with four at once), then three 1.5 MB objects dripping at 40 KB/s and a small one at once,
    /// wrong. (Files larger than a pack's members, so each is its own object.)
    @Test func aDemotedMirrorsDownloadsInFlightAreStopped() throws {
        let box = Sandbox("mirror-demoted-inflight")
        var files: [String: Data] = ["first.txt": randomData(70_000, seed: 49), "small.txt": randomData(80_000, seed: 50)]
        for i in 0..<3 { files["large\(i).bin"] = randomData(1_500_000 + i, seed: 51 + UInt64(i)) }
        // Stored whole: each file one object.
        let (remote, mirror) = try Self.hostileMirror(box, files, push: ["delta-min-size = 64MiB"], intact: { $0 == 70_000 }) { _, size in
            size > 1_000_000 ? ["rate": 40_000] : [:]
        }
        defer { mirror.stop() }
        box.configure(remote: "file://\(remote)/", session: ["mirrors = \(mirror.url)", "session-transfers = 4"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path): exactly the published bytes") }
        let warnings = run.events(named: "warning").compactMap { $0["message"] as? String }.filter { $0.contains("mirror") }
        #expect(warnings.count == 1 && warnings[0].contains("sent wrong bytes for small.txt"), "said once: \(warnings)")
        #expect(Self.served(run)[mirror.url]?.demoted != nil)
        // What left the mirror: the good object, the wrong one, and what was in flight beside it
        // when it was seen (each drip starts with 16 KiB at once). Waited for, 4.5 MB.
        let bodies = Self.objectBodies(mirror)
        let sent = bodies.reduce(0) { $0 + $1.sent }
        #expect(bodies.count == 5 && sent < 300_000, "the objects in flight were stopped once the mirror was demoted: \(bodies)")
        let sources = Dictionary(run.events(named: "file-done").map { ($0["path"] as? String ?? "", $0["source"] as? String ?? "") }) { a, _ in a }
        #expect(sources.count == files.count && sources.allSatisfy { $0.value == ($0.key == "first.txt" ? mirror.url : "origin") }, "\(sources)")
    }

    /// A file stored as pieces, from a mirror whose pieces are all wrong: the first wrong piece
    /// demotes it, asked once (from the remote a piece that fails its hash is asked twice, to rule
    /// out damage on the way); the file comes whole and right from the remote.
    @Test func aMirrorsWrongPieceIsNotAskedTwice() throws {
        let box = Sandbox("mirror-wrong-piece")
        let files = ["big.bin": randomData(2_000_000, seed: 60)]
        let (remote, mirror) = try Self.hostileMirror(box, files)
        defer { mirror.stop() }
        box.configure(remote: "file://\(remote)/", session: ["mirrors = \(mirror.url)", "session-transfers = 1"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == files["big.bin"])
        let bodies = Self.objectBodies(mirror)
        #expect(bodies.count == 1, "one wrong piece, asked once: \(bodies)")
        #expect(Self.served(run)[mirror.url]?.demoted?.contains("sent wrong bytes for big.bin") == true, "\(Self.served(run))")
    }

    /// A session that trusts only signed manifests takes the root from a mirror while its origin
    /// cannot be reached, and the tree's objects and the files from there too: a site goes on with
    /// its origin down, a new machine included, with the cache as shipped and agents as configured.
    /// A mirror's root that is unsigned, or signed by a key the session does not trust, is never
    /// taken nor announced as taken, and its refusal names the mirror.
    @Test func aSignedRootComesFromAMirrorWhileTheOriginIsDown() throws {
        let box = Sandbox("mirror-origin-down")
        let key = box.directory + "/publisher.key"
        let publicKey = SignedManifestTests.generateKey(key)
        let origin = try NginxServer()
        defer { origin.stop() }
        let cache = try NginxServer(cacheFor: origin.port)
        defer { cache.stop() }
        let files = Self.publishTree(origin.root, version: 1, seed: 17)
        #expect(ferry(["manifest", "build", origin.root, "--version", "2", "--sign", key]).exitCode == 0)
        box.configure(remote: origin.url, session: ["mirrors = \(cache.url)", "trusted-keys = \(publicKey)", "retries = 1", "retry-delay = 0.1s"])
        // Another agent of the site, with the cache as its mirror as shipped, warms it: the files
        // asked by version, and the root it took from the origin, which it asks of the cache too.
        let peer = Sandbox("mirror-origin-down-peer")
        peer.configure(remote: origin.url, session: ["mirrors = \(cache.url)", "trusted-keys = \(publicKey)"])
        #expect(peer.sync().exitCode == 0)
        origin.goAway()
        // A new machine starts from the cache alone.
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
        #expect(run.output.contains("taken from mirror \(cache.url)"), "\(run.output)")

        // Unsigned, a mirror's root is refused (exit 4) and nothing changes.
        let plain = box.directory + "/plain"
        _ = Self.publishTree(plain, version: 5, seed: 19)
        let mirror = try PythonServer(directory: plain)
        defer { mirror.stop() }
        let unsigned = Sandbox("mirror-unsigned")
        unsigned.configure(remote: origin.url, session: ["mirrors = \(mirror.url)", "trusted-keys = \(publicKey)", "retries = 1", "retry-delay = 0.1s"])
        let refused = unsigned.sync()
        #expect(refused.exitCode == 4, "\(refused.output)")
        // Refused as the mirror's, never announced as taken.
        #expect(!refused.output.contains("taken from mirror"), "\(refused.output)")
        #expect(refused.stderr.contains(mirror.url + "manifest.json") && !refused.stderr.contains("manifest \(origin.url)"), "\(refused.output)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: unsigned.local)) ?? []).filter { !$0.hasPrefix(".") }.isEmpty)

        // Signed by a key the session does not trust, it is refused the same way.
        let forged = box.directory + "/forged"
        _ = Self.publishTree(forged, version: 6, seed: 23)
        let forger = box.directory + "/forger.key"
        _ = SignedManifestTests.generateKey(forger)
        #expect(ferry(["manifest", "build", forged, "--version", "7", "--sign", forger]).exitCode == 0)
        let forging = try PythonServer(directory: forged)
        defer { forging.stop() }
        let fooled = Sandbox("mirror-forged")
        fooled.configure(remote: origin.url, session: ["mirrors = \(forging.url)", "trusted-keys = \(publicKey)", "retries = 1", "retry-delay = 0.1s"])
        let forgery = fooled.sync()
        #expect(forgery.exitCode == 4, "\(forgery.output)")
        #expect(!forgery.output.contains("taken from mirror") && !forgery.output.contains("as signed by a trusted key"), "\(forgery.output)")
        #expect(forgery.stderr.contains(forging.url + "manifest.json") && !forgery.stderr.contains("manifest \(origin.url)"), "\(forgery.output)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: fooled.local)) ?? []).filter { !$0.hasPrefix(".") }.isEmpty)
    }

    /// The key: URLs of any kind, none the remote itself nor twice, on pulls only; an HTTP mirror
    /// is never sent the origin's credentials.
    @Test func theMirrorsKeyIsCheckedAndCarriesNoCredentials() throws {
        let box = Sandbox("mirror-config")
        func check(_ lines: [String], direction: String = "pull") -> FerryRun {
            try! (["[agent]", "state = \(box.state)", "", "[session s]", "remote = https://origin.example/a/", "local = \(box.directory)/l",
                   "direction = \(direction)"] + lines).joined(separator: "\n").appending("\n").writeReplacing(box.config)
            return ferry(["config", "check", "--config", box.config])
        }
        #expect(check(["mirrors = http://cache.site/a/ file:///srv/copy/"]).exitCode == 0)
        #expect(check(["mirrors = https://origin.example/a/"]).output.contains("names the remote itself"))
        #expect(check(["mirrors = http://c/a/ http://c/a"]).output.contains("twice"))
        #expect(check(["mirrors = ftp://c/a/"]).exitCode == 2)
        #expect(check(["mirrors = http://c/a/"], direction: "push").output.contains("applies to a pull session"))
        var session = try ConfigParser.parse(try String(contentsOfFile: box.config, encoding: .utf8).replacingOccurrences(of: "direction = push", with: "")
            + "basic-auth-file = \(box.directory)/auth\n", path: box.config).sessions[0]
        session.mirrors = try [RemoteLocation(parsing: "http://c/a/", backends: Backends.descriptions)]
        #expect(session.basicAuthFile != nil && session.reading(mirror: 0).basicAuthFile == nil && session.reading(mirror: 0).remote.url == "http://c/a/")
    }
}

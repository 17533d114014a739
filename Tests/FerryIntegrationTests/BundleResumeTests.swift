import Foundation
import Testing
@testable import FerryCore

/// A content index's bundle cut off mid-answer (by our fault-injecting server, which stops
/// sending after half of it) and its run killed with `kill -9`: the bytes that had arrived are
/// kept beside the cache, and the next run asks for the rest only. A rest that is not the
/// bundle's costs one fetch of the whole; a symlink planted where the part goes is never
/// written through.
@Suite(.serialized) struct BundleResumeTests {
    typealias D = DeltaTests

    struct World {
        let box: Sandbox
        let server: PythonServer
        let data: [UInt8]
        /// The bundle's path under the server, its size, and where its part is kept.
        let path: String
        let size: Int
        let part: String
    }

    /// One indexed file published behind our test server; its first bundle's answer stops after
    /// half of it (`stall_after`), the first time it is asked for.
    static func world(_ label: String) throws -> World {
        let box = Sandbox(label)
        let (data, bundle, size) = try publishIndexed(box, seed: 41)
        let server = try PythonServer(directory: box.published)
        let path = "/.ferry/meta/" + bundle
        server.setFaults([path: ["stall_after": size / 2, "only_first": 1]])
        box.configure(remote: server.url, session: ["min-speed = 0", "stall-timeout = 10m"])
        return World(box: box, server: server, data: data, path: path, size: size,
                     part: box.state + "/manifests/test.manifest.objects/\(bundle).part")
    }

    /// big.bin (indexed, of random bytes) published in `box`: its bytes, and the name and size of
    /// the bundle of its index's pieces (a cold mirror reads it), not that of their details.
    static func publishIndexed(_ box: Sandbox, seed: UInt64) throws -> (data: [UInt8], bundle: String, size: Int) {
        let data = D.bytes(D.size, seed: seed)
        box.publish("big.bin", Data(data))
        box.buildManifest()
        let meta = box.published + "/.ferry/meta"
        let bundle = try #require(try metadataKinds(meta).first { name, kind in
            kind == "fdB1" && FileManager.default.contents(atPath: meta + "/" + name)!.range(of: Data("fdC3".utf8)) != nil
        }?.key)
        let size = try #require(FileManager.default.contents(atPath: meta + "/" + bundle)).count
        return (data, bundle, size)
    }

    /// Runs `ferry sync now` until the bundle's part holds the half the server sent, then kills it.
    static func killWhileTheBundleStalls(_ w: World) throws {
        try killWhileTheBundleStalls(w.box, part: w.part, sent: w.size / 2)
    }

    static func killWhileTheBundleStalls(_ box: Sandbox, part: String, sent: Int) throws {
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--quiet"])
        let held = eventually(60) { fileSize(part) == sent }
        child.signal(SIGKILL)
        child.wait(timeout: 30)
        #expect(held, "the part holds \(fileSize(part) ?? -1) of the \(sent) bytes sent")
    }

    /// The run ended while the bundle stalls: by `kill -9`, or politely by its deadline (which
    /// abandons the request and sweeps the cache as any run's end does).
    static func interrupt(_ w: World, by how: String) throws {
        guard how == "deadline" else { return try killWhileTheBundleStalls(w) }
        // The file is in by then: the index a cold mirror keeps for its next update is abandoned.
        _ = w.box.sync(["--max-duration", "3s"])
        #expect(fileSize(w.part) == w.size / 2, "the part holds \(fileSize(w.part) ?? -1) of the \(w.size / 2) bytes sent")
    }

    static func fileSize(_ path: String) -> Int? {
        var st = stat()
        return lstat(path, &st) == 0 ? Int(st.st_size) : nil
    }

    static func bundleRequests(_ w: World) -> [[String: Any]] {
        w.server.requests().filter { $0["path"] as? String == w.path && $0["method"] as? String == "GET" }
    }

    @Test(arguments: ["kill", "deadline"])
    func aBundleCutOffIsResumedFromWhatArrived(how: String) throws {
        let w = try Self.world("bundle-resume-\(how)")
        defer { w.server.stop() }
        try Self.interrupt(w, by: how)
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "warning").isEmpty, "\(run.output)")
        #expect(FileManager.default.contents(atPath: w.box.localPath("big.bin")) == Data(w.data))
        let asked = Self.bundleRequests(w).map { $0["range"] as? String ?? "whole" }
        #expect(asked == ["whole", "bytes=\(w.size / 2)-\(w.size - 1)"], "\(asked)")
        #expect(Self.fileSize(w.part) == nil, "the part is gone once the bundle is whole")
        let cached = try metadataKinds(w.box.state + "/manifests/test.manifest.objects")
        #expect(cached.values.filter { $0 == "fdC3" }.count > 30, "the bundle's members are cached")
    }

    /// The rest comes with its first byte changed (a cache serving bad bytes): the bundle does not
    /// match its name, so it is fetched whole once more; nothing is said, nothing remembered bad.
    @Test func aRestThatIsNotTheBundlesCostsOneFetchOfTheWhole() throws {
        let w = try Self.world("bundle-resume-wrong")
        defer { w.server.stop() }
        try Self.killWhileTheBundleStalls(w)
        w.server.setFaults([w.path: ["flip_ranges": 1]])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "warning").isEmpty, "\(run.output)")
        #expect(FileManager.default.contents(atPath: w.box.localPath("big.bin")) == Data(w.data))
        let asked = Self.bundleRequests(w).map { $0["range"] as? String ?? "whole" }
        #expect(asked == ["whole", "bytes=\(w.size / 2)-\(w.size - 1)", "whole"], "\(asked)")
        #expect(Self.fileSize(w.part) == nil)
    }

    /// A symlink planted where the part goes, to a file of the user's: the bundle is fetched and
    /// read as if there were no part, the file it points at is untouched, and the link is gone.
    @Test func aSymlinkPlantedAsThePartIsNeverWrittenThrough() throws {
        let w = try Self.world("bundle-resume-link")
        defer { w.server.stop() }
        let victim = w.box.directory + "/victim"
        try Data("the user's own bytes\n".utf8).write(to: URL(fileURLWithPath: victim))
        try FileManager.default.createDirectory(atPath: (w.part as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        #expect(symlink(victim, w.part) == 0)
        w.server.setFaults([:])
        let run = w.box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: w.box.localPath("big.bin")) == Data(w.data))
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "the user's own bytes\n")
        #expect(Self.bundleRequests(w).map { $0["range"] as? String ?? "whole" } == ["whole"])
        #expect(Self.fileSize(w.part) == nil)
    }

    /// The same over S3 (SeaweedFS behind our fault proxy, which stops the bundle's answer after
    /// half of it): the relaunch asks for the rest with a signed range, and the mirror is right.
    @Test func aBundleCutByAKillIsResumedOverS3() throws {
        let box = Sandbox("bundle-resume-s3")
        let (data, bundle, size) = try Self.publishIndexed(box, seed: 43)
        let store = try SeaweedFS.shared()
        let bucket = try store.newBucket("bundle-resume")
        try store.putTree(box.published, bucket: bucket, prefix: "p/")
        let proxy = try S3FaultProxy(before: store, upstreamPort: store.port)
        defer { proxy.stop() }
        proxy.setFaults([["method": "GET", "key": bundle, "times": 1, "stall_after": size / 2]])
        box.configure(remote: "s3://\(bucket)/p/", session: ["s3-endpoint = \(proxy.endpoint)",
                                                            "s3-credentials = \(try store.credentialsFile(in: box.directory))",
                                                            "min-speed = 0", "stall-timeout = 10m"])
        let part = box.state + "/manifests/test.manifest.objects/\(bundle).part"
        try Self.killWhileTheBundleStalls(box, part: part, sent: size / 2)
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "warning").isEmpty, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(data))
        #expect(proxy.ranges(of: bundle) == ["whole", "bytes=\(size / 2)-\(size - 1)"], "\(proxy.ranges(of: bundle))")
        #expect(Self.fileSize(part) == nil)
    }

    /// A delta killed, or stopped by its deadline, while its ranges are under way (the server
    /// never answers them): the next run plans the same delta from the cache, with no metadata object
    /// fetched a second time (the changed pieces' details among them, which the cache keeps
    /// until the update is in).
    @Test(arguments: ["kill", "deadline"])
    func aDeltaCutOffFetchesNoDetailAgain(how: String) throws {
        let box = Sandbox("detail-\(how)")
        let old = randomData(DeltaDetailTests.size, seed: 400)
        box.publish("big.bin", old)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        box.configure(remote: server.url, session: ["min-speed = 0", "stall-timeout = 10m"])
        #expect(box.sync().exitCode == 0)
        let new = DeltaDetailTests.scattered(old)
        box.publish("big.bin", new)
        box.buildManifest()
        server.clearLog()
        // The delta's ranges are asked and never answered until the run ends.
        server.setFaults(["/big.bin": ["hang": true]])
        if how == "kill" {
            let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--quiet"])
            server.waitForRequest("/big.bin", timeout: 60)
            child.signal(SIGKILL)
            #expect(child.wait(timeout: 30) == 128 + SIGKILL, "killed while the range stalls")
        } else {
            let cut = box.sync(["--max-duration", "3s", "--json"])
            #expect(cut.exitCode == 3, "\(cut.output)")
        }
        server.setFaults([:])
        let meta = { server.requests().compactMap { $0["path"] as? String }.filter { $0.hasPrefix("/.ferry/meta/") } }
        let before = meta()
        // Details, alone or in a bundle of them.
        let details = before.filter { path in
            let bytes = FileManager.default.contents(atPath: box.published + path) ?? Data()
            return bytes.prefix(4) == Data("fdD1".utf8) || (bytes.prefix(4) == Data("fdB1".utf8) && bytes.range(of: Data("fdD1".utf8)) != nil)
        }
        #expect(!details.isEmpty, "the killed run fetched details: \(before)")
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == new)
        #expect(meta() == before, "fetched again: \(meta().dropFirst(before.count))")
        #expect(!server.requests().isEmpty && run.events(named: "delta-fallback").isEmpty, "\(run.output)")
    }
}

import Foundation
import Testing
@testable import FerryCore

/// A content index read through its bundles on a real server (nginx): a cold mirror reads it in
/// a few requests, and a bundle the origin holds wrong (other bytes, or far more than the top
/// says) costs requests, said once, never a wrong file or a refused index.
@Suite(.serialized) struct IndexBundlePullTests {
    typealias D = DeltaTests

    /// A cold mirror of one indexed file; `damage` changes the origin's bundles first.
    static func coldMirror(_ label: String, damage: (String) throws -> Void = { _ in }) throws
        -> (run: FerryRun, box: Sandbox, server: NginxServer, data: [UInt8], kinds: [String: String]) {
        let server = try NginxServer()
        let box = Sandbox(label, published: server.root)
        let data = D.bytes(D.size, seed: 97)
        box.publish("big.bin", Data(data))
        box.buildManifest()
        let meta = server.root + "/.ferry/meta"
        let kinds = try metadataKinds(meta)
        try damage(meta)
        box.configure(remote: server.url)
        server.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(data))
        return (run, box, server, data, kinds)
    }

    @Test func aColdMirrorReadsTheIndexInAFewRequestsAndCachesIt() throws {
        let (run, box, server, _, kinds) = try Self.coldMirror("bundles-cold")
        defer { server.stop() }
        #expect(run.events(named: "warning").isEmpty, "\(run.output)")
        let pieces = kinds.values.filter { $0 == "fdC3" }.count
        #expect(pieces > 30 && kinds.values.contains("fdB1"), "\(pieces) pieces, and bundles")
        // The tree's leaf, the index's top, its bundle: not a request per piece.
        let meta = server.bytesSent { $0.hasPrefix("/.ferry/meta/") }
        #expect(meta.requests <= 4, "\(meta.requests) requests for \(pieces) pieces")
        let cached = try metadataKinds(box.state + "/manifests/test.manifest.objects")
        #expect(cached.values.filter { $0 == "fdC3" }.count == pieces, "every piece cached")
        #expect(!cached.values.contains("fdB1") && !cached.values.contains("fdD1"), "no bundle, no detail")
    }

    /// Each bundle replaced by 3 MB (more than the top says it holds), then by other bytes of its
    /// size: the index comes one object at a time, and the run says why once.
    @Test(arguments: ["larger", "other"])
    func aBundleHeldWrongCostsRequestsSaidOnce(wrong: String) throws {
        let (run, _, server, _, kinds) = try Self.coldMirror("bundles-\(wrong)") { meta in
            for (name, kind) in try metadataKinds(meta) where kind == "fdB1" {
                let path = meta + "/" + name
                let size = try #require(FileManager.default.contents(atPath: path)).count
                let bytes = wrong == "larger" ? D.bytes(3 << 20, seed: 5) : D.bytes(size, seed: 6)
                try Data(bytes).write(to: URL(fileURLWithPath: path))
            }
        }
        defer { server.stop() }
        let warnings = run.events(named: "warning").compactMap { $0["message"] as? String }
        let said = wrong == "larger" ? "bundles of the content index of big.bin cannot be read"
            : "does not match its hash"
        #expect(warnings.count == 1 && warnings[0].contains(said), "\(warnings)")
        let pieces = kinds.values.filter { $0 == "fdC3" }.count
        let meta = server.bytesSent { $0.hasPrefix("/.ferry/meta/") }
        #expect(meta.requests > pieces, "one by one: \(meta.requests) requests")
        #expect(run.events(named: "delta-fallback").isEmpty)
    }
}

/// A format-2 tree read through its bundles (nginx): a cold mirror of 5,000 files reads its
/// metadata in a handful of requests, an update of one file reads no bundle, and a list of
/// bundles held wrong costs requests, said once.
@Suite(.serialized) struct TreeBundlePullTests {
    static func world(_ label: String) throws -> (box: Sandbox, server: NginxServer) {
        let server = try NginxServer()
        let box = Sandbox(label, published: server.root)
        for i in 0..<5000 { box.publish("d\(i % 50)/file-\(i).txt", "content \(i)\n") }
        box.buildManifest()
        box.configure(remote: server.url)
        return (box, server)
    }

    static func metaRequests(_ server: NginxServer) -> Int {
        server.bytesSent { $0.hasPrefix("/.ferry/meta/") }.requests
    }

    @Test func aColdMirrorReadsItsTreeInAFewRequests() throws {
        let (box, server) = try Self.world("tree-bundles-cold")
        defer { server.stop() }
        let published = try publishedTree(box.published)
        #expect(published.manifest.treeBundles != nil)
        let leaves = try metadataKinds(server.root + "/.ferry/meta").values.filter { $0 == "fm2L" }.count
        server.clearLog()
        let cold = box.sync(["--json"])
        #expect(cold.exitCode == 0 && cold.events(named: "warning").isEmpty, "\(cold.output)")
        expectIdentical(box.published, box.local)
        #expect(leaves > 100 && Self.metaRequests(server) <= 8,
                "\(Self.metaRequests(server)) requests for \(leaves) leaves")
        let cached = try metadataKinds(box.state + "/manifests/test.manifest.objects")
        #expect(cached.values.filter { $0 == "fm2L" }.count == leaves && !cached.values.contains("fdB1"))

        // One file changed: the objects on its path, one by one; no bundle.
        box.publish("d7/file-307.txt", "changed\n")
        box.buildManifest()
        server.clearLog()
        let one = box.sync(["--json"])
        #expect(one.exitCode == 0, "\(one.output)")
        expectIdentical(box.published, box.local)
        let level = try readPublished(box.published).tree!.level
        #expect(Self.metaRequests(server) == level + 1, "one object per level")
    }

    @Test func aListHeldWrongCostsRequestsSaidOnce() throws {
        let (box, server) = try Self.world("tree-bundles-wrong")
        defer { server.stop() }
        let list = try #require(try publishedTree(box.published).manifest.treeBundles)
        let path = server.root + "/.ferry/meta/" + list.sha256.hex
        try Data(DeltaTests.bytes(2 << 20, seed: 3)).write(to: URL(fileURLWithPath: path))
        server.clearLog()
        let cold = box.sync(["--json"])
        #expect(cold.exitCode == 0, "\(cold.output)")
        expectIdentical(box.published, box.local)
        let warnings = cold.events(named: "warning").compactMap { $0["message"] as? String }
        #expect(warnings.count == 1 && warnings[0].contains("the bundles of the tree of manifest"), "\(warnings)")
        #expect(Self.metaRequests(server) > 100, "one by one")
    }
}

import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Format 2 (issue 20 §2): a signed root naming content-addressed metadata objects. A change
/// costs a mirror the objects on the path to it; every object is checked against the hash its
/// parent gives, and one that does not match refuses the manifest with nothing changed; a
/// damaged cached object is fetched again; old objects go after the grace period; format 1 is
/// still read.
@Suite
struct ManifestTreeTests {
    /// `files` files in 20 directories, published and served over HTTP by the logging server.
    static func world(_ label: String, files: Int = 600) throws -> (Sandbox, PythonServer) {
        let box = Sandbox(label)
        for i in 0..<files { box.publish("d\(i % 20)/file-\(i).txt", "content \(i)\n") }
        let server = try PythonServer(directory: box.published)
        box.configure(remote: server.url)
        return (box, server)
    }

    /// The metadata objects asked of `server` since its log was cleared, by name, in order.
    static func objectsAsked(_ server: PythonServer) -> [String] {
        server.requests().compactMap { $0["path"] as? String }.filter { $0.hasPrefix("/.ferry/meta/") }.map { String($0.dropFirst(13)) }
    }

    static func metadataBytes(_ run: FerryRun) -> Int {
        run.events(named: "manifest-fetched").first?["metadata_bytes"] as? Int ?? -1
    }

    @Test func aChangeCostsTheObjectsOnItsPathAndAMirrorBehindPaysOnlyForWhatChanged() throws {
        let (box, server) = try Self.world("tree-cost")
        defer { server.stop() }
        box.buildManifest()
        let root = try String(contentsOfFile: box.published + "/manifest.json", encoding: .utf8)
        #expect(root.contains("\"format\": \"ferry-manifest/2\"") && !root.contains("\"files\": ["), "\(root)")
        let cold = box.sync(["--json"])
        #expect(cold.exitCode == 0, "\(cold.output)")
        expectIdentical(box.published, box.local)
        #expect(!FileManager.default.fileExists(atPath: box.local + "/.ferry/meta"), "a pull never mirrors .ferry/")
        // A cold mirror fetches the root, the tree's top, the list of its bundles and each bundle
        // once: not each object.
        let top = try readPublished(box.published).tree!.sha256.hex
        var total = 0
        for (name, kind) in try metadataKinds(box.published + "/.ferry/meta")
        where name == top || kind == "fdB1" || kind == "fm2B" {
            total += FileManager.default.contents(atPath: box.published + "/.ferry/meta/" + name)?.count ?? 0
        }
        #expect(Self.metadataBytes(cold) == total + root.utf8.count, "the root, the top, the bundles and their list")

        // One change: the root, one leaf and the nodes above it.
        box.publish("d7/file-307.txt", "changed\n")
        box.buildManifest()
        server.clearLog()
        let one = box.sync(["--json"])
        #expect(one.exitCode == 0, "\(one.output)")
        expectIdentical(box.published, box.local)
        let fetched = Self.objectsAsked(server)
        let levels = try readPublished(box.published).tree!.level
        #expect(fetched.count == levels + 1, "one object per level: \(fetched)")
        #expect(Self.metadataBytes(one) < 2_500 && Self.metadataBytes(one) * 10 < Self.metadataBytes(cold), "\(Self.metadataBytes(one)) of \(Self.metadataBytes(cold))")

        // Three versions later, with a change in each: what changed, not each version in between.
        var expected = Set<String>()
        let before = publishedObjects(box.published)
        for (k, path) in ["d1/file-21.txt", "d19/file-599.txt", "d1/file-41.txt"].enumerated() {
            box.publish(path, "edit \(k)\n")
            box.buildManifest()
        }
        let named = try treeObjects(box.published)
        expected = named.subtracting(before)
        server.clearLog()
        let behind = box.sync(["--json"])
        #expect(behind.exitCode == 0, "\(behind.output)")
        expectIdentical(box.published, box.local)
        let asked = Set(Self.objectsAsked(server))
        #expect(asked == expected, "only the objects of the newest tree the mirror lacked: \(asked.count) asked, \(expected.count) new")

        // At rest: one conditional request, answered 304, nothing else.
        server.clearLog()
        let rest = box.sync(["--json"])
        #expect(rest.exitCode == 0 && Self.metadataBytes(rest) == 0)
        #expect(server.requests().map { $0["path"] as? String } == ["/manifest.json"] && server.requests().first?["status"] as? Int == 304,
                "\(server.requests())")
        // The cache holds exactly the tree taken.
        #expect(Set((try? FileManager.default.contentsOfDirectory(atPath: box.state + "/manifests/test.manifest.objects")) ?? []) == named)
    }

    /// Changes scattered over the tree rewrite every node of an upper level: a mirror that holds
    /// the tree still fetches just those objects, never every bundle (the whole tree again).
    @Test func scatteredChangesFetchTheirObjectsNotEveryBundle() throws {
        let (box, server) = try Self.world("tree-scattered", files: 3000)
        defer { server.stop() }
        box.buildManifest()
        // The mirror holds the files already (hashed, not fetched): the tree is what is measured.
        for d in 0..<20 { try FileManager.default.copyItem(atPath: box.published + "/d\(d)", toPath: box.local + "/d\(d)") }
        #expect(box.sync().exitCode == 0)
        let before = publishedObjects(box.published)
        for d in stride(from: 0, to: 20, by: 4) { box.publish("d\(d)/file-\(d + 20 * 70).txt", "scattered \(d)\n") }
        box.buildManifest()
        #expect(try readPublished(box.published).tree!.level >= 2, "nodes above the leaves")
        let expected = try treeObjects(box.published).subtracting(before)
        server.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        expectIdentical(box.published, box.local)
        let asked = Set(Self.objectsAsked(server))
        #expect(asked == expected, "the new objects alone: \(asked.count) asked, \(expected.count) new, \(Self.metadataBytes(run)) bytes")
    }

    /// The hashes of every object the published tree names.
    func treeObjects(_ directory: String) throws -> Set<String> { try publishedTree(directory).objects }

    @Test func tamperingWithTheRootOrAnyKindOfObjectIsRefusedAndChangesNothing() throws {
        let (box, server) = try Self.world("tree-tamper", files: 300)
        defer { server.stop() }
        let key = box.directory + "/publisher.key"
        let publicKey = SignedManifestTests.generateKey(key)
        box.buildManifest(["--sign", key])
        box.configure(remote: server.url, session: ["trusted-keys = \(publicKey)"])
        #expect(box.sync().exitCode == 0)
        let good = treeSnapshot(box.local)

        // The next version, which each tampering below spoils in one place.
        box.publish("d3/file-3.txt", "version two\n")
        box.publish("d4/new.txt", "new\n")
        box.buildManifest(["--sign", key])
        let tree = try readPublished(box.published).tree!
        #expect(tree.level >= 2, "a root node, inner nodes and leaves")
        let meta = box.published + "/.ferry/meta/"
        let rootNode = tree.sha256.hex
        let newObjects = try treeObjects(box.published).filter { !FileManager.default.fileExists(atPath: box.state + "/manifests/test.manifest.objects/" + $0) }
        let leaf = try #require(newObjects.first { (FileManager.default.contents(atPath: meta + $0)?.prefix(4)).map { Array($0) } == Array("fm2L".utf8) })
        let inner = try #require(newObjects.first { $0 != rootNode && (FileManager.default.contents(atPath: meta + $0)?.prefix(4)).map { Array($0) } == Array("fm2N".utf8) })

        func expectRefused(_ what: String, _ needle: String) {
            let run = box.sync()
            #expect(run.exitCode == 4 && run.output.contains(needle), "\(what): \(run.output)")
            #expect(treeSnapshot(box.local) == good, "\(what): the mirror is as it was")
            let tasks = (try? StateStore(directory: box.state, clock: SystemClock()).tasks(session: "test")) ?? []
            #expect(tasks.allSatisfy { $0.state == .done }, "\(what): no task was queued")
        }
        for (what, name) in [("the root node", rootNode), ("an inner node", inner), ("a leaf", leaf)] {
            let original = try Data(contentsOf: URL(fileURLWithPath: meta + name))
            var altered = original
            altered[altered.count - 1] ^= 1
            try altered.write(to: URL(fileURLWithPath: meta + name))
            expectRefused("\(what) altered", "does not match its hash")
            try FileManager.default.removeItem(atPath: meta + name)
            expectRefused("\(what) missing", "is not on the remote")
            try original.write(to: URL(fileURLWithPath: meta + name))
        }
        // The root altered after signing: the signature no longer holds, and nothing is fetched.
        let rootText = try String(contentsOfFile: box.published + "/manifest.json", encoding: .utf8)
        try rootText.replacingOccurrences(of: "\"level\": \(tree.level)", with: "\"level\": \(tree.level + 1)").writeReplacing(box.published + "/manifest.json")
        box.markRepublished()
        server.clearLog()
        expectRefused("the root altered", "does not match its content")
        #expect(!server.requests().contains { ($0["path"] as? String)?.hasPrefix("/.ferry/") == true }, "no object fetched for an untrusted root")
        // An unsigned root naming a well-formed tree someone else made: refused before any object.
        box.buildManifest()
        server.clearLog()
        expectRefused("an unsigned root", "is not signed")
        #expect(!server.requests().contains { ($0["path"] as? String)?.hasPrefix("/.ferry/") == true })

        box.buildManifest(["--sign", key])
        let fixed = box.sync()
        #expect(fixed.exitCode == 0, "\(fixed.output)")
        expectIdentical(box.published, box.local)
    }

    /// A 200-file tree mirrored once, its objects in the cache: the world, and the cache's directory.
    static func cachedWorld(_ label: String) throws -> (Sandbox, PythonServer, cache: String) {
        let (box, server) = try world(label, files: 200)
        box.buildManifest()
        #expect(box.sync().exitCode == 0)
        return (box, server, box.state + "/manifests/test.manifest.objects/")
    }

    @Test func aDamagedCachedObjectIsFetchedAgain() throws {
        let (box, server, cache) = try Self.cachedWorld("tree-damaged")
        defer { server.stop() }
        let names = try FileManager.default.contentsOfDirectory(atPath: cache).sorted()
        // Damage every cached object: the next version shares all but a path with this one.
        for name in names { try Data("rot".utf8).write(to: URL(fileURLWithPath: cache + name)) }
        box.publish("d0/file-0.txt", "new\n")
        box.buildManifest()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "warning").contains { ($0["message"] as? String)?.contains("did not match") == true }, "\(run.stdout)")
        expectIdentical(box.published, box.local)
        for name in try FileManager.default.contentsOfDirectory(atPath: cache) {
            #expect(SHA256Hasher.digest(of: Array(FileManager.default.contents(atPath: cache + name)!)).hex == name, "\(name) was fetched again")
        }
    }

    /// The cache writes each object under its own name without a temporary one: a symlink planted
    /// there in place of an object is never written through (nor read as the object).
    @Test func aSymlinkPlantedInTheObjectCacheIsNeverWrittenThrough() throws {
        let (box, server, cache) = try Self.cachedWorld("tree-planted")
        defer { server.stop() }
        let outside = box.directory + "/outside.txt"
        try Data("not ferry's\n".utf8).write(to: URL(fileURLWithPath: outside))
        let names = try FileManager.default.contentsOfDirectory(atPath: cache)
        for name in names {
            try FileManager.default.removeItem(atPath: cache + name)
            try FileManager.default.createSymbolicLink(atPath: cache + name, withDestinationPath: outside)
        }
        box.publish("d0/file-0.txt", "new\n")
        box.buildManifest()
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        expectIdentical(box.published, box.local)
        #expect(FileManager.default.contents(atPath: outside) == Data("not ferry's\n".utf8))
    }

    @Test func formatOneIsStillReadAndASessionSwitchesEitherWay() throws {
        let (box, server) = try Self.world("tree-format1", files: 50)
        defer { server.stop() }
        box.buildManifest(["--format", "1"])
        #expect(try String(contentsOfFile: box.published + "/manifest.json", encoding: .utf8).contains("\"format\": \"ferry-manifest/1\""))
        #expect(box.sync().exitCode == 0)
        expectIdentical(box.published, box.local)
        box.publish("d1/file-1.txt", "two\n")
        box.buildManifest()
        #expect(box.sync().exitCode == 0)
        expectIdentical(box.published, box.local)
        #expect(!(try FileManager.default.contentsOfDirectory(atPath: box.state + "/manifests/test.manifest.objects")).isEmpty)
        box.publish("d2/file-2.txt", "three\n")
        box.buildManifest(["--format", "1"])
        #expect(box.sync().exitCode == 0)
        expectIdentical(box.published, box.local)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: box.state + "/manifests/test.manifest.objects")) ?? []).isEmpty,
                "a flat manifest needs no objects: the cache is emptied")
        let check = ferry(["check", "--config", box.config])
        #expect(check.exitCode == 0, "\(check.output)")
    }

    @Test func objectsNoRootNamesGoAfterTheGracePeriod() throws {
        let box = Sandbox("tree-gc")
        for i in 0..<100 { box.publish("f\(i).txt", "\(i)\n") }
        box.buildManifest()
        let first = publishedObjects(box.published)
        box.publish("f5.txt", "five\n")
        box.buildManifest()
        let second = try treeObjects(box.published).union(publishedBundles(box.published))
        #expect(publishedObjects(box.published) == first.union(second), "within the grace period the old objects stay")
        let retired = try String(contentsOfFile: box.published + "/.ferry/retired", encoding: .utf8)
        #expect(Set(retired.split(separator: "\n").map { String($0.prefix(64)) }) == first.subtracting(second), "\(retired)")
        box.publish("f6.txt", "six\n")
        let run = box.buildManifest(["--grace", "0s", "--json"])
        #expect(publishedObjects(box.published) == (try treeObjects(box.published).union(publishedBundles(box.published))),
                "\(run.output)")

        // A push session removes them the same way, on its remote.
        let remote = box.directory + "/remote"
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        let text = ["[agent]", "state = \(box.state)", "", "[session up]", "remote = file://\(remote)/", "local = \(box.published)",
                    "direction = push", "object-grace = 0s", "keep-versions = 1"].joined(separator: "\n") + "\n"
        try text.writeReplacing(box.config)
        #expect(ferry(["sync", "now", "--config", box.config]).exitCode == 0)
        let pushed = try treeObjects(remote).union(publishedBundles(remote))
        #expect(publishedObjects(remote) == pushed)
        #expect(try readPublished(remote).entries.count == 100)
        box.publish("f7.txt", "seven\n")
        let again = ferry(["sync", "now", "--config", box.config])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(publishedObjects(remote) == (try treeObjects(remote).union(publishedBundles(remote)))
                && publishedObjects(remote) != pushed, "the push's old objects went")
    }

    @Test func aDryRunFetchesButKeepsNothing() throws {
        let (box, server) = try Self.world("tree-dry", files: 40)
        defer { server.stop() }
        box.buildManifest()
        let dry = box.sync(["--dry-run", "--json"])
        #expect(dry.exitCode == 0, "\(dry.output)")
        #expect(dry.events(named: "plan-item").count == 40)
        #expect(!FileManager.default.fileExists(atPath: box.state + "/manifests/test.manifest.objects"), "a dry run writes no cache")
    }
}

import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// What a push records as placed rests on the store's own computation over the bytes it holds (a
/// checksum it computed, or ferry reading them back), never on ferry's own metadata echoed back;
/// a store that says it holds other bytes, or reads back otherwise, fails the file alone; a key
/// the store refuses fails alone; every object of a publication is verified and repaired. Against
/// a hostile S3 store of the project's own (scripts/s3faults.py in front of SeaweedFS), moto,
/// WebDAV servers without a digest, and `file://`.
struct PlacementTrustTests {
    typealias World = S3PushTests.World
    let p = PushTests()

    /// A proxy in front of the shared SeaweedFS, and a world whose sessions reach the store through it.
    func hostile(_ label: String, up: [String] = []) throws -> (S3FaultProxy, World) {
        let store = try SeaweedFS.shared()
        let proxy = try S3FaultProxy(before: store, upstreamPort: store.port)
        return (proxy, try World(label, up: up, endpoint: proxy.endpoint))
    }

    func verified(_ run: FerryRun) -> (store: Int, readBack: Int, size: Int)? {
        guard let e = run.events(named: "uploads-verified").last else { return nil }
        return (e["store_checksum"] as? Int ?? -1, e["read_back"] as? Int ?? -1, e["size_only"] as? Int ?? -1)
    }

    /// A store that answers a PUT with another SHA-256 than was sent (it says it keeps other
    /// bytes) fails that file: exit 1, the manifest does not list it, a mirror never sees it; once
    /// the store behaves, the next push places it. Before, ferry read back its own metadata.
    @Test func aStoreThatSaysItHoldsOtherBytesFailsTheFile() throws {
        let (proxy, w) = try hostile("lying-echo")
        defer { proxy.stop() }
        let a = randomData(50_000, seed: 1)
        w.write("a.bin", a)
        w.write("b.txt", Data("b\n".utf8))
        proxy.setFaults([["method": "PUT", "key": "/tree/a.bin", "echo_checksum": SHA256Hasher.digest(of: [1, 2, 3]).base64]])
        let run = w.push(["--json"])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.output.contains("which is not what was sent"), "\(run.output)")
        #expect(run.events(named: "file-failed").count == 1, "\(run.stdout)")
        let down = w.pull()
        #expect(down.exitCode == 0, "\(down.output)")
        #expect(!FileManager.default.fileExists(atPath: w.dst + "/a.bin"), "the manifest never lists what the store does not vouch for")
        #expect(FileManager.default.fileExists(atPath: w.dst + "/b.txt"))

        proxy.setFaults([])
        let again = w.push(["--json"])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(verified(again)?.store ?? 0 >= 1, "SeaweedFS computes the SHA-256 of what it keeps: \(again.stdout)")
        #expect(w.pull().exitCode == 0)
        #expect(FileManager.default.contents(atPath: w.dst + "/a.bin") == a)
    }

    /// With `remote-layout = objects`, a content object the store says it holds otherwise fails its
    /// file, and the next push sends the object again: what a HEAD finds at a content name after a
    /// failed check is not taken as stored. Before, it was recorded as placed, and every later push
    /// published it unsent (exit 0, "nothing to transfer") while mirrors read what the store held.
    @Test func aContentObjectThatFailedItsCheckIsSentAgain() throws {
        let (proxy, w) = try hostile("objects-wedge", up: ["remote-layout = objects"])
        defer { proxy.stop() }
        let a = randomData(50_000, seed: 21)
        w.write("a.bin", a)
        w.write("b.txt", Data("b\n".utf8))
        let hex = sha256(of: a).hex
        func puts() -> Int { proxy.requests().filter { $0.method == "PUT" && $0.path.contains(hex) }.count }
        proxy.setFaults([["method": "PUT", "key": hex, "echo_checksum": SHA256Hasher.digest(of: [1, 2, 3]).base64]])
        let run = w.push(["--json"])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.events(named: "file-failed").count == 1, "\(run.stdout)")
        let before = puts()
        #expect(before >= 1)

        proxy.setFaults([])
        let again = w.push(["--json"])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(puts() > before, "the object was sent again, not taken as stored: \(again.output)")
        #expect(again.events(named: "file-done").contains { $0["path"] as? String == "a.bin" }, "\(again.stdout)")
        #expect(w.pull().exitCode == 0)
        #expect(FileManager.default.contents(atPath: w.dst + "/a.bin") == a)
    }

    /// The wedge of attack round 5: a store that says nothing of what it holds (no checksum in the
    /// PUT's answer or a HEAD), whose content object reads back wrong, fails the file; the next
    /// push, whose HEAD again says nothing but size and ETag, sends the object again. Before, the
    /// failed object was recorded as placed, the HEAD matched the record, and every later push
    /// published it unsent ("in sync", exit 0) while mirrors read what the store held.
    @Test func aContentObjectThatReadBackWrongIsNotTakenAsStoredByAHead() throws {
        let (proxy, w) = try hostile("objects-readback", up: ["remote-layout = objects"])
        defer { proxy.stop() }
        let a = randomData(50_000, seed: 23)
        w.write("a.bin", a)
        w.write("b.txt", Data("b\n".utf8))
        let hex = sha256(of: a).hex
        func puts() -> Int { proxy.requests().filter { $0.method == "PUT" && $0.path.contains(hex) }.count }
        proxy.setFaults([["method": "GET", "key": hex, "flip_body": true, "drop_checksums": true, "times": 1],
                         ["key": hex, "drop_checksums": true]])
        let run = w.push(["--json"])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.events(named: "file-failed").count == 1, "\(run.stdout)")
        let before = puts()
        #expect(before >= 1)

        proxy.setFaults([["key": hex, "drop_checksums": true]])
        let again = w.push(["--json"])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(puts() > before, "the object was sent again, not taken as stored on a HEAD: \(again.output)")
        #expect(again.events(named: "file-done").contains { $0["path"] as? String == "a.bin" }, "\(again.stdout)")
        #expect(w.pull().exitCode == 0)
        #expect(FileManager.default.contents(atPath: w.dst + "/a.bin") == a)
    }

    /// A store that computes no checksum (none in its answers) is read back: each file is fetched
    /// and hashed, and the run says so; one whose bytes read back otherwise fails alone; with
    /// verify-uploads = size-only only the size is compared, and the run warns that it was.
    @Test func aStoreThatComputesNothingIsReadBack() throws {
        let (proxy, w) = try hostile("no-checksum")
        defer { proxy.stop() }
        w.write("a.bin", randomData(40_000, seed: 2))
        w.write("b.bin", randomData(30_000, seed: 3))
        proxy.setFaults([["drop_checksums": true]])
        let run = w.push(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        let gets = proxy.requests().filter { $0.method == "GET" && ($0.path.hasSuffix("/tree/a.bin") || $0.path.hasSuffix("/tree/b.bin")) }
        #expect(gets.count == 2, "each file is read back once: \(proxy.requests())")
        let counts = verified(run)
        #expect(counts?.store == 0 && (counts?.readBack ?? 0) >= 2 && counts?.size == 0, "\(run.stdout)")
        #expect(!run.output.contains("x-amz-meta"), "\(run.output)")

        // Other bytes, as read back: the file fails, the manifest keeps what it listed.
        w.write("a.bin", randomData(40_000, seed: 4))
        proxy.setFaults([["method": "GET", "key": "/tree/a.bin", "drop_checksums": true, "flip_body": true], ["drop_checksums": true]])
        let lied = w.push()
        #expect(lied.exitCode == 1, "\(lied.output)")
        #expect(lied.output.contains("SHA-256"), "\(lied.output)")

        // size-only: the size is all that is compared, and said.
        proxy.setFaults([["method": "GET", "key": "/tree/a.bin", "drop_checksums": true, "flip_body": true], ["drop_checksums": true]])
        let text = try String(contentsOfFile: w.box.config, encoding: .utf8)
        try text.replacingOccurrences(of: "[session up]\n", with: "[session up]\nverify-uploads = size-only\n").writeReplacing(w.box.config)
        let cheap = w.push(["--json"])
        #expect(cheap.exitCode == 0, "\(cheap.output)")
        #expect((verified(cheap)?.size ?? 0) >= 1, "\(cheap.stdout)")
    }

    /// The human summary names how placed objects were verified, and warns of size-only.
    @Test func theRunSaysHowItVerified() throws {
        let (proxy, w) = try hostile("says-how", up: ["verify-uploads = size-only"])
        defer { proxy.stop() }
        proxy.setFaults([["drop_checksums": true]])
        w.write("a.txt", Data("a\n".utf8))
        let run = w.push()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.output.contains("warning: up: 2 objects placed on the remote, verified 1 read back, 1 by size only (verify-uploads = size-only)"),
                "the file by its size, the metadata object read back: \(run.output)")
        w.write("b.txt", Data("b\n".utf8))
        proxy.setFaults([])
        let plain = w.push()
        #expect(plain.output.contains("verified by the store's SHA-256"), "\(plain.output)")
    }

    /// A multipart upload is vouched for by the store's composite checksum of its parts, in the
    /// dialect the store speaks: AWS's and SeaweedFS's `X-N` with type COMPOSITE, moto's bare `X`
    /// (the proxy rewrites SeaweedFS's answers so), a real moto; a composite that does not match
    /// the parts sent fails the file.
    @Test func multipartChecksumsInEveryDialect() throws {
        let (proxy, w) = try hostile("dialects", up: ["upload-part-size = 5M"])
        defer { proxy.stop() }
        let big = randomData(11 << 20, seed: 5)
        w.write("big.bin", big)
        proxy.setFaults([["composite_bare": true]])
        let bare = w.push(["--json"])
        #expect(bare.exitCode == 0, "\(bare.output)")
        #expect(verified(bare)?.store ?? 0 >= 1, "\(bare.stdout)")

        w.write("big.bin", randomData(11 << 20, seed: 6))
        proxy.setFaults([["method": "POST", "query": "uploadId=", "drop_checksums": true],
                         ["method": "HEAD", "key": "/tree/big.bin", "echo_checksum": SHA256Hasher.digest(of: [9]).base64 + "-3"]])
        let wrong = w.push()
        #expect(wrong.exitCode == 1, "\(wrong.output)")
        #expect(wrong.output.contains("which is not what was sent"), "\(wrong.output)")
        #expect(try w.store.pendingUploads(w.bucket).isEmpty)

        proxy.setFaults([])
        #expect(w.push().exitCode == 0)
        #expect(w.pull().exitCode == 0)
        expectIdentical(w.src, w.dst)
    }

    /// moto, a second S3 implementation: single objects and an upload in parts are placed and
    /// verified whatever it says of checksums, and come back identical.
    @Test func pushesToMoto() throws {
        let moto = try MotoServer.shared()
        let w = try World("moto", up: ["upload-part-size = 5M"], store: moto)
        w.write("small.txt", Data("small\n".utf8))
        w.write("big.bin", randomData(12 << 20, seed: 7))
        let up = w.push(["--json"])
        #expect(up.exitCode == 0, "\(up.output)")
        let counts = verified(up)
        #expect(counts != nil && counts!.size == 0, "\(up.stdout)")
        #expect(try moto.pendingUploads(w.bucket).isEmpty)
        let down = w.pull()
        #expect(down.exitCode == 0, "\(down.output)")
        expectIdentical(w.src, w.dst)
        let again = w.push(["--json"])
        #expect(again.exitCode == 0 && again.events(named: "file-done").isEmpty, "\(again.output)")
    }

    /// One key the store refuses (AccessDenied, a policy on a prefix) fails that file alone: the
    /// others are published, exit 1, the manifest lists what the remote holds, and the next run
    /// tries it again. A store that refuses every write stops the run with one error.
    @Test func oneRefusedKeyFailsAlone() throws {
        let (proxy, w) = try hostile("denied")
        defer { proxy.stop() }
        for name in ["a.txt", "b.txt", "c.txt", "d.txt"] { w.write(name, Data("\(name)\n".utf8)) }
        w.write("secret/x.txt", Data("x\n".utf8))
        let denied = "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        proxy.setFaults([["method": "PUT", "key": "/tree/secret/", "status": 403, "body": denied]])
        let run = w.push(["--json"])
        #expect(run.exitCode == 1, "\(run.output)")
        let failed = run.events(named: "file-failed")
        #expect(failed.count == 1 && failed.first?["path"] as? String == "secret/x.txt", "\(run.stdout)")
        #expect(run.events(named: "file-done").count == 4, "\(run.stdout)")
        #expect(w.pull().exitCode == 0)
        #expect(FileManager.default.fileExists(atPath: w.dst + "/d.txt") && !FileManager.default.fileExists(atPath: w.dst + "/secret/x.txt"))

        proxy.setFaults([])
        let next = w.push(["--json"])
        #expect(next.exitCode == 0, "\(next.output)")
        #expect(next.events(named: "file-done").count == 1, "the refused file is tried again: \(next.stdout)")
        #expect(w.pull().exitCode == 0)
        expectIdentical(w.src, w.dst)

        // Every write refused: one error for the run, not one per file.
        for i in 0..<6 { w.write("n\(i).txt", Data("n\(i)\n".utf8)) }
        proxy.setFaults([["method": "PUT", "status": 403, "body": denied]])
        let all = w.push(["--json"])
        #expect(all.exitCode != 0 && all.exitCode != 1, "\(all.output)")
        #expect(all.events(named: "file-failed").isEmpty, "\(all.stdout)")
        #expect(all.output.contains("AccessDenied"), "\(all.output)")
    }

    /// A metadata object the store lost or damaged after a push wrote it: mirrors refuse the
    /// publication (and say a push writes it again), the push's next verification writes it
    /// again from its cache, and mirrors take the publication.
    @Test func aDamagedMetadataObjectIsRepairedByTheNextPush() throws {
        let box = Sandbox("meta-repair")
        let remote = box.directory + "/remote"
        let src = box.directory + "/src"
        let dst = box.directory + "/dst"
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        for i in 0..<40 { p.write(src, "d\(i % 4)/f\(i).txt", Data("file \(i)\n".utf8)) }
        try ["[agent]", "state = \(box.state)", "", "[session up]", "direction = push", "remote = file://\(remote)/", "local = \(src)",
             "", "[session down]", "remote = file://\(remote)/", "local = \(dst)", ""].joined(separator: "\n").writeReplacing(box.config)
        let first = box.sync(["--session", "up", "--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(verified(first).map { $0.readBack > 40 } == true, "files and metadata objects are read back: \(first.stdout)")
        let meta = remote + "/.ferry/meta"
        // A tree object damaged, and the list of the tree's bundles gone (else a cold mirror takes
        // the tree's objects from the bundles, which hold them intact).
        let kinds = try metadataKinds(meta)
        let tree = kinds.keys.sorted().filter { kinds[$0] == "fm2L" || kinds[$0] == "fm2N" }
        let list = try #require(kinds.first { $0.value == "fm2B" }?.key)
        #expect(!tree.isEmpty)
        try Data("damaged".utf8).write(to: URL(fileURLWithPath: meta + "/" + tree[0]))
        try FileManager.default.removeItem(atPath: meta + "/" + list)

        let refused = box.sync(["--session", "down"])
        #expect(refused.exitCode == 4, "\(refused.output)")
        #expect(refused.output.contains("a push writes it again"), "\(refused.output)")

        let repair = box.sync(["--session", "up"])
        #expect(repair.exitCode == 0, "\(repair.output)")
        #expect(repair.output.contains("written again"), "\(repair.output)")
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "\(down.output)")
        expectIdentical(src, dst)
    }

    /// A content object (remote-layout = objects) that the store damaged is sent again on the
    /// push's verify schedule: mirrors get the file.
    @Test func aDamagedContentObjectIsSentAgain() throws {
        let w = try World("content-repair", up: ["remote-layout = objects", "verify-interval = 1h"])
        let a = randomData(20_000, seed: 8)
        w.write("a.bin", a)
        #expect(w.push().exitCode == 0)
        let key = "tree/" + RemoteLayout.contentPath(SHA256Hasher.digest(of: Array(a)), beside: "manifest.json").string
        #expect(w.store.get(w.bucket, key) == a)
        try w.store.put(w.bucket, key, data: randomData(20_000, seed: 9))
        // The push checks what it placed once verify-interval passed since it last did: as if it had.
        try StateStore(directory: w.box.state, clock: SystemClock()).recordRemoteChecked(session: "up", at: Timestamp(seconds: SystemClock().now().seconds - 7200, nanoseconds: 0))
        let repair = w.push()
        #expect(repair.exitCode == 0, "\(repair.output)")
        #expect(repair.output.contains("sent again"), "\(repair.output)")
        #expect(w.store.get(w.bucket, key) == a)
        #expect(w.pull().exitCode == 0)
        expectIdentical(w.src, w.dst)
    }

    /// A remote an older ferry wedged: on a store that computes no checksum, it recorded a damaged
    /// content object as placed, with the size and ETag a HEAD gives of the damaged bytes, and
    /// kept no word of how it verified it. A HEAD cannot tell those bytes from the right ones, so
    /// the record is read back once, at the push's next check: the damage is found and the object
    /// sent again. A record that reads back right is kept as read back, and not read again.
    @Test func aPlacedRecordOfAnOlderFerryIsReadBackOnce() throws {
        let (proxy, w) = try hostile("objects-older", up: ["remote-layout = objects", "verify-interval = 1h"])
        defer { proxy.stop() }
        let a = randomData(30_000, seed: 24)
        let b = randomData(20_000, seed: 25)
        w.write("a.bin", a)
        w.write("b.bin", b)
        let (ha, hb) = (sha256(of: a).hex, sha256(of: b).hex)
        proxy.setFaults([["key": ha, "drop_checksums": true], ["key": hb, "drop_checksums": true]])
        #expect(w.push().exitCode == 0)
        let key = { (hex: String) in "tree/" + RemoteLayout.contentPath(SHA256Digest(hex: hex)!, beside: "manifest.json").string }
        // The damage, behind ferry's back, and the records as the older ferry left them.
        try w.store.put(w.bucket, key(ha), data: randomData(30_000, seed: 26))
        let db = try SQLiteDatabase(path: w.box.state + "/ferry.db")
        for hex in [ha, hb] {
            let head = w.store.curl(["-I", w.store.url(w.bucket, key(hex))])
            let etag = try #require(head.body.split(separator: "\r\n").first { $0.lowercased().hasPrefix("etag:") }?.dropFirst(5)
                .trimmingCharacters(in: .whitespaces), "\(head)")
            try db.execute("UPDATE placed SET validator = '\(etag)', verified = NULL WHERE path LIKE '%\(hex)'")
        }
        let due = { try StateStore(directory: w.box.state, clock: SystemClock())
            .recordRemoteChecked(session: "up", at: Timestamp(seconds: SystemClock().now().seconds - 7200, nanoseconds: 0)) }
        func gets(_ hex: String) -> Int { proxy.requests().filter { $0.method == "GET" && $0.path.contains(hex) }.count }
        try due()
        let repair = w.push()
        #expect(repair.exitCode == 0, "\(repair.output)")
        #expect(repair.output.contains("sent again"), "\(repair.output)")
        #expect(w.store.get(w.bucket, key(ha)) == a)
        #expect(w.pull().exitCode == 0)
        expectIdentical(w.src, w.dst)
        // Both are recorded as read back now: the next check asks after them with a HEAD only.
        let before = (gets(ha), gets(hb))
        try due()
        #expect(w.push().exitCode == 0)
        #expect(gets(ha) == before.0 && gets(hb) == before.1, "read back once, not at every check")
    }

    /// WebDAV without a digest (nginx): every file is read back; a server that stores other bytes
    /// than it was sent and says nothing of it (no Repr-Digest) is caught by the read-back.
    @Test func webDAVWithoutADigestIsReadBack() throws {
        let box = Sandbox("dav-readback")
        let remoteDir = box.directory + "/remote"
        try FileManager.default.createDirectory(atPath: remoteDir, withIntermediateDirectories: true)
        let server = try PythonServer(directory: remoteDir, extra: ["--dav"])
        defer { server.stop() }
        let src = box.directory + "/src"
        p.write(src, "a.bin", randomData(60_000, seed: 10))
        p.write(src, "b.txt", Data("b\n".utf8))
        try ["[agent]", "state = \(box.state)", "", "[session up]", "direction = push", "remote = \(server.url)", "local = \(src)", ""]
            .joined(separator: "\n").writeReplacing(box.config)
        server.setFaults(["/a.bin": ["store_flip": true]])
        let run = box.sync(["--session", "up", "--json"])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.output.contains("SHA-256"), "\(run.output)")
        #expect(publishedListing(remoteDir).contains("b.txt") && !publishedListing(remoteDir).contains("a.bin"))
        #expect(server.requests().contains { $0["method"] as? String == "GET" && $0["path"] as? String == "/b.txt" }, "b.txt was read back")

        server.setFaults([:])
        let again = box.sync(["--session", "up", "--json"])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(verified(again).map { $0.readBack >= 1 && $0.store == 0 } == true, "\(again.stdout)")
    }
}

import Foundation
import Testing
import FerryCore

/// Small writes scattered over a large file (a database's pages, a filesystem's blocks) cost a
/// mirror about their own bytes: the changed pieces' details (`fdD1`, 16 bits a block of 512)
/// give back the unchanged bytes of the chunks around each write. Over every kind of remote that
/// reads ranges; a detail the remote holds damaged costs only the bytes it would have saved.
@Suite(.serialized)
struct DeltaDetailTests {
    static let size = 6 << 20
    static let writes = 24

    /// `old` with `writes` writes of 4 KiB at 4 KiB boundaries spread over it.
    static func scattered(_ old: Data) -> Data {
        var new = old
        for k in 0..<writes {
            let at = (k * (size / writes) + 4096 * (k % 7 + 3)) / 4096 * 4096
            new.replaceSubrange(at..<(at + 4096), with: randomData(4096, seed: 500 + UInt64(k)))
        }
        return new
    }

    /// A mirror of `old` (big.bin) from `kind`, then the scattered writes published: the run.
    static func update(_ kind: RemoteConformanceTests.Kind, label: String,
                       damage: (String) throws -> Void = { _ in }) throws -> (run: FerryRun, box: Sandbox,
                                                                              new: Data, fixture: any ConformanceFixture) {
        let fixture = try kind.fixture()
        let box = Sandbox(label, published: fixture.root)
        let old = randomData(size, seed: 400)
        box.publish("big.bin", old)
        box.buildManifest()
        let lines = try fixture.publish(scratch: box.directory)
        let remote = String(lines[0].dropFirst("remote = ".count))
        box.configure(remote: remote, session: Array(lines.dropFirst()))
        let first = box.sync()
        #expect(first.exitCode == 0, "\(first.output)")
        let new = scattered(old)
        box.publish("big.bin", new)
        box.buildManifest()
        try damage(fixture.root + "/.ferry/meta")
        if let s3 = fixture as? S3Fixture { try s3.store.putTree(s3.root, bucket: s3.bucket, prefix: s3.prefix) }
        (fixture as? NginxFixture)?.server.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == new, "the new version, byte for byte")
        return (run, box, new, fixture)
    }

    static func fetched(_ run: FerryRun) -> Int? {
        run.events(named: "file-done").first { $0["path"] as? String == "big.bin" }.flatMap { $0["fetched"] as? Int }
    }

    @Test(arguments: [RemoteConformanceTests.Kind.http, .s3, .sftp])
    func scatteredWritesFetchAboutTheirOwnBytes(kind: RemoteConformanceTests.Kind) throws {
        let (run, _, _, fixture) = try Self.update(kind, label: "detail-\(kind)")
        defer { fixture.stop() }
        #expect(run.events(named: "warning").isEmpty && run.events(named: "delta-fallback").isEmpty, "\(run.output)")
        let fetched = try #require(Self.fetched(run), "\(run.stdout)")
        // Each write's 4 KiB and at most the two blocks of 512 at its ends (the chunks around
        // them, without details, come to about 11 KiB a write).
        #expect(fetched >= Self.writes * 4096 && fetched <= Self.writes * (4096 + 1024),
                "\(fetched) bytes fetched for \(Self.writes) writes of 4 KiB")
        if let nginx = fixture as? NginxFixture {
            // On the wire, the multipart answers' part headers beside: under 200 bytes a write.
            let sent = nginx.server.bytesSent { $0 == "/big.bin" }
            #expect(sent.bytes <= fetched + Self.writes * 200, "\(sent.bytes) bytes sent for \(fetched) fetched")
            let meta = nginx.server.bytesSent { $0.hasPrefix("/.ferry/meta/") }
            #expect(meta.bytes < 60_000, "the index objects that changed and their details: \(meta.bytes) bytes")
        }
    }

    /// Every detail damaged at the origin, and every bundle that would hold them: the delta is
    /// still taken (its chunks), said once as damaged metadata, and the file is right.
    @Test func aDamagedDetailCostsOnlyWhatItWouldHaveSaved() throws {
        let (run, _, _, fixture) = try Self.update(.http, label: "detail-damaged") { meta in
            for name in try FileManager.default.contentsOfDirectory(atPath: meta) {
                let path = meta + "/" + name
                var bytes = try #require(FileManager.default.contents(atPath: path))
                guard bytes.prefix(4) == Data("fdD1".utf8) || bytes.prefix(4) == Data("fdB1".utf8) else { continue }
                bytes[bytes.count - 1] ^= 0x5A
                try bytes.write(to: URL(fileURLWithPath: path))
            }
        }
        defer { fixture.stop() }
        #expect(run.events(named: "delta-fallback").isEmpty, "the delta was taken: \(run.output)")
        let warnings = run.events(named: "warning").compactMap { $0["message"] as? String }
        #expect(warnings.count == 1 && warnings[0].contains("does not match its hash")
                || warnings.count == 1 && warnings[0].contains("do not match their hash"), "\(warnings)")
        let fetched = try #require(Self.fetched(run), "\(run.stdout)")
        #expect(fetched > Self.writes * (4096 + 1024) && fetched < Self.writes * 20_000,
                "the chunks around the writes: \(fetched) bytes")
    }
}

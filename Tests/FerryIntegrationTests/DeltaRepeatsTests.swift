import Foundation
import Testing
import FerryCore

/// Real data repeats itself: an image's zeroed space, a file an archive holds several times, a
/// file whose halves are alike. An index that names the same piece many times is content, not an
/// attack: the delta is taken, each repeated piece comes over the network once (its later copies
/// are taken from the first, in the partial file), and a push of pieces sends each once.
@Suite(.serialized)
struct DeltaRepeatsTests {
    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] { Array(randomData(count, seed: seed)) }

    /// Mirrors `old` as big.bin from nginx, then publishes `new` there; the run that takes it.
    static func deltaFrom(_ old: [UInt8], to new: [UInt8], label: String) throws -> (FerryRun, NginxServer, Sandbox) {
        let server = try NginxServer()
        let box = Sandbox(label, published: server.root)
        box.publish("big.bin", Data(old))
        box.buildManifest()
        box.configure(remote: server.url)
        let first = box.sync()
        #expect(first.exitCode == 0, "\(first.output)")
        box.publish("big.bin", Data(new))
        box.buildManifest()
        server.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == Data(new),
                "the new version, byte for byte")
        return (run, server, box)
    }

    /// The delta was taken, with no warning: nothing refused, nothing fetched whole.
    static func expectDelta(_ run: FerryRun, sourceLocation: SourceLocation = #_sourceLocation) {
        let planned = run.events(named: "delta-planned").first
        #expect(planned?["files"] as? Int == 1 && planned?["whole"] as? Int == 0, "\(run.output)",
                sourceLocation: sourceLocation)
        #expect(run.events(named: "warning").isEmpty, "no fallback: \(run.output)", sourceLocation: sourceLocation)
    }

    /// The new version is one half written twice, the half a changed copy of the old version's
    /// first: every piece of the second half repeats one of the first's. About the change is
    /// fetched, once, not twice, and the whole file not at all.
    @Test func aFileOfTwoIdenticalHalvesTakesADelta() throws {
        let half = 3 << 20
        let old = Self.bytes(2 * half, seed: 1)
        var changed = Array(old[0..<half])
        changed.replaceSubrange((1 << 20)..<((1 << 20) + 65_536), with: Self.bytes(65_536, seed: 2))
        let (run, server, box) = try Self.deltaFrom(old, to: changed + changed, label: "repeat-halves")
        defer { server.stop() }
        _ = box
        Self.expectDelta(run)
        let sent = server.bytesSent { $0 == "/big.bin" }
        #expect(sent.bytes >= 65_536 && sent.bytes < 65_536 + 120_000, "the change, once: \(sent.bytes) bytes")
    }

    /// A filesystem image: 16 MiB of zeros with data here and there, a few of its blocks written
    /// again. Zeroed space is one piece repeated hundreds of times; the changes are what comes.
    @Test func aMostlyZeroImageWithScatteredChangesCostsItsChanges() throws {
        var old = [UInt8](repeating: 0, count: 16 << 20)
        for i in 0..<16 {
            let at = (i << 20) + 12_345
            old.replaceSubrange(at..<(at + 4096), with: Self.bytes(4096, seed: 10 + UInt64(i)))
        }
        var new = old
        for i in 0..<8 {
            let at = i * (2 << 20) + 700_000
            new.replaceSubrange(at..<(at + 4096), with: Self.bytes(4096, seed: 40 + UInt64(i)))
        }
        let (run, server, box) = try Self.deltaFrom(old, to: new, label: "repeat-zeros")
        defer { server.stop() }
        _ = box
        Self.expectDelta(run)
        // Each write is fetched with the chunks it touches (a chunk of zeros is up to 12 KiB).
        let sent = server.bytesSent { $0 == "/big.bin" }
        #expect(sent.bytes >= 8 * 4096 && sent.bytes < 8 * 40_000, "about the 8 writes: \(sent.bytes) bytes")
    }

    /// An archive (`tar`) holding one file five times, pushed with `remote-layout = objects`: the
    /// push sends the pieces once and a fresh mirror fetches them once, whatever remote holds them.
    @Test(arguments: ["nginx", "file", "s3", "sftp"])
    func aTarHoldingOneFileFiveTimesGoesAndComesAboutOnce(kind: String) throws {
        let box = Sandbox("repeat-tar-\(kind)")
        let target = try ObjectLayoutTests.PushTarget(kind, scratch: box.directory)
        let layout = ObjectLayoutTests()
        try layout.configure(box, target)
        let tree = box.directory + "/tree"
        let payload = randomData(1_500_000, seed: 77)
        for dir in ["a", "b", "c", "d", "e"] {
            try FileManager.default.createDirectory(atPath: tree + "/" + dir, withIntermediateDirectories: true)
            try payload.write(to: URL(fileURLWithPath: tree + "/" + dir + "/payload.bin"))
        }
        try FileManager.default.createDirectory(atPath: box.directory + "/src", withIntermediateDirectories: true)
        let tar = runProcess("/usr/bin/tar", ["--sort=name", "--mtime=@0", "--owner=0", "--group=0", "-cf",
                                              box.directory + "/src/image.tar", "-C", tree, "."])
        #expect(tar.exitCode == 0, "\(tar.output)")
        let attributes = try FileManager.default.attributesOfItem(atPath: box.directory + "/src/image.tar")
        let size = try #require(attributes[.size] as? Int)
        #expect(size > 5 * payload.count)

        let up = box.sync(["--session", "up", "--json"])
        #expect(up.exitCode == 0, "\(up.output)")
        let sent = try #require(layout.moved(up, "image.tar"), "\(up.stdout)")
        #expect(sent < size / 2, "the pieces went once: \(sent) of \(size) bytes")
        let down = box.sync(["--session", "down", "--json"])
        #expect(down.exitCode == 0, "\(down.output)")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/image.tar")
                == FileManager.default.contents(atPath: box.directory + "/src/image.tar"), "the archive, byte for byte")
        let fetched = try #require(layout.moved(down, "image.tar"), "\(down.stdout)")
        #expect(fetched < size / 2, "a fresh mirror fetched each piece once: \(fetched) of \(size) bytes")
        #expect(down.events(named: "warning").isEmpty, "\(down.output)")
    }
}

import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// With `remote-layout = objects`, a piece that compresses is stored as zstd frames (one a chunk)
/// in an object named by those bytes: the push sends and the pull fetches about the compressed
/// size, a change costs the frames of the chunks it touched, and frames that are not the piece's
/// (a bomb, other bytes) from a mirror or the remote itself never reach the file.
@Suite(.serialized)
struct CompressedPiecesTests {
    static let size = 3 << 20
    /// Text-like bytes: words of a small vocabulary in a seeded order (compresses about 3:1).
    static func text(_ count: Int, seed: UInt64) -> Data {
        let words = ["ferry", "mirror", "piece", "chunk", "origin", "manifest", "index", "delta", "fleet",
                     "object", "frame", "bytes", "signed", "release", "cache", "\n"].map { Array(($0 + " ").utf8) }
        let noise = Array(randomData(count, seed: seed))
        var out: [UInt8] = []
        out.reserveCapacity(count + 16)
        var i = 0
        while out.count < count {
            out += words[Int(noise[i % noise.count]) % words.count]
            i += 1
        }
        return Data(out.prefix(count))
    }
    static let zstdMagic = Data([0x28, 0xB5, 0x2F, 0xFD])

    @Test(arguments: ["nginx", "file", "s3", "sftp"])
    func aCompressiblePieceTravelsCompressedAndComesBackExact(kind: String) throws {
        let box = Sandbox("compressed-\(kind)")
        let target = try ObjectLayoutTests.PushTarget(kind, scratch: box.directory)
        let layout = ObjectLayoutTests()
        try layout.configure(box, target)
        let old = Self.text(Self.size, seed: 11)
        layout.write(box, "big.txt", old)
        let up = box.sync(["--session", "up", "--json"])
        #expect(up.exitCode == 0, "\(up.output)")
        let sent = try #require(layout.moved(up, "big.txt"), "\(up.stdout)")
        #expect(sent * 2 < Self.size, "the frames went up: \(sent) bytes for \(Self.size)")
        // Every content object holds the bytes its name says, and the pieces are frames.
        let names = target.contentObjects()
        let frames = target.files().filter {
            $0.key.hasPrefix(RemoteLayout.contentDirectory + "/") && $0.value.prefix(4) == Self.zstdMagic
        }
        #expect(!frames.isEmpty && frames.count == names.count, "\(frames.count) of \(names.count) objects are frames")

        let down = box.sync(["--session", "down", "--json"])
        #expect(down.exitCode == 0, "\(down.output)")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/big.txt") == old)
        let fetched = try #require(layout.moved(down, "big.txt"), "\(down.stdout)")
        #expect(fetched == sent, "a cold mirror fetched the frames: \(fetched)")

        // 30 KB of other text in the middle: the push sends the changed pieces' frames, the
        // mirror fetches the frames of the chunks that changed.
        var new = old
        new.replaceSubrange(1_500_000..<1_530_000, with: Self.text(30_000, seed: 12))
        layout.write(box, "big.txt", new)
        let second = box.sync(["--session", "up", "--json"])
        #expect(second.exitCode == 0, "\(second.output)")
        let pushed = try #require(layout.moved(second, "big.txt"), "\(second.stdout)")
        #expect(pushed < 200_000, "the changed pieces' frames went up, the others kept: \(pushed) bytes")
        let update = box.sync(["--session", "down", "--json"])
        #expect(update.exitCode == 0, "\(update.output)")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/big.txt") == new)
        let changed = try #require(layout.moved(update, "big.txt"), "\(update.stdout)")
        #expect(changed < 30_000, "less than the change itself: \(changed) bytes")
        #expect(update.events(named: "warning").isEmpty, "\(update.output)")
    }

    /// Through the shipped site cache (nginx in front of the WebDAV origin, a `mirrors =` source):
    /// a cold mirror and then an update take the compressed pieces' frames from the cache, the
    /// update's as ranges, and the files are exact, with nothing said.
    @Test func compressedPiecesComeThroughTheSiteCache() throws {
        let box = Sandbox("compressed-cache")
        let target = try ObjectLayoutTests.PushTarget("nginx", scratch: box.directory)
        let origin = try #require(target.nginxServer)
        let cache = try NginxServer(cacheFor: origin.port)
        defer { cache.stop() }
        let layout = ObjectLayoutTests()
        try layout.configure(box, target)
        // The last section is the mirror's.
        let mirror = target.url.replacingOccurrences(of: origin.url, with: cache.url)
        try (String(contentsOfFile: box.config, encoding: .utf8) + "mirrors = \(mirror)\n").writeReplacing(box.config)
        let old = Self.text(Self.size, seed: 21)
        layout.write(box, "big.txt", old)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let cold = box.sync(["--session", "down", "--json"])
        #expect(cold.exitCode == 0, "\(cold.output)")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/big.txt") == old)
        #expect(cold.events(named: "file-done").first?["source"] as? String == mirror, "\(cold.stdout)")

        var new = old
        new.replaceSubrange(1_500_000..<1_530_000, with: Self.text(30_000, seed: 22))
        layout.write(box, "big.txt", new)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        cache.clearLog()
        let update = box.sync(["--session", "down", "--json"])
        #expect(update.exitCode == 0, "\(update.output)")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/big.txt") == new)
        #expect(update.events(named: "warning").isEmpty, "\(update.output)")
        #expect(update.events(named: "file-done").first?["source"] as? String == mirror, "\(update.stdout)")
        let content = "/" + RemoteLayout.contentDirectory + "/"
        let ranges = cache.requests().filter { $0.path.contains(content) && $0.status == 206 }
        #expect(!ranges.isEmpty, "the changed chunks' frames came as ranges: \(cache.requests())")
        let changed = try #require(layout.moved(update, "big.txt"), "\(update.stdout)")
        #expect(changed < 30_000, "less than the change itself: \(changed) bytes")
    }

    /// Scattered small changes (a database's updated rows) touch a compressed piece in many runs:
    /// each piece's runs come in few requests (the local chunks between them fetched too, within
    /// the bound), not one request a run, and the file is exact.
    @Test func scatteredChangesInACompressedPieceComeInFewRequests() throws {
        let box = Sandbox("compressed-scattered")
        let target = try ObjectLayoutTests.PushTarget("nginx", scratch: box.directory)
        let nginx = try #require(target.nginxServer)
        let layout = ObjectLayoutTests()
        try layout.configure(box, target)
        let old = Self.text(Self.size, seed: 21)
        layout.write(box, "big.txt", old)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        #expect(box.sync(["--session", "down"]).exitCode == 0)
        var new = old
        for at in stride(from: 1_000_000, to: 2_000_000, by: 20_000) {
            new.replaceSubrange(at..<at + 40, with: Self.text(40, seed: UInt64(at)))
        }
        layout.write(box, "big.txt", new)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        nginx.clearLog()
        let update = box.sync(["--session", "down", "--json"])
        #expect(update.exitCode == 0, "\(update.output)")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/big.txt") == new)
        let gets = nginx.requestLines().filter { $0.hasPrefix("GET ") && $0.contains("/" + RemoteLayout.contentDirectory + "/") }
        let objects = Set(gets.map { $0.split(separator: " ")[1] })
        // 50 changes in a few pieces: one request a run would be ~50.
        #expect(!objects.isEmpty && gets.count <= 2 * objects.count + 2, "\(gets.count) requests for \(objects.count) objects")
        let fetched = try #require(layout.moved(update, "big.txt"))
        #expect(fetched < Self.size / 3, "far less than the file's frames: \(fetched) bytes")
    }

    /// `frame` followed by a skippable frame (zstd's own padding) up to `size` bytes: an object of
    /// the size the index says, whose frames are not the piece's.
    static func padded(_ frame: [UInt8], to size: Int) -> Data {
        precondition(frame.count + 8 <= size, "a frame of \(frame.count) bytes fits in \(size)")
        let skip = size - frame.count - 8
        var out = Data(frame)
        out += [0x50, 0x2A, 0x4D, 0x18]
        out += withUnsafeBytes(of: UInt32(skip).littleEndian) { Data($0) }
        out += Data(count: skip)
        return out
    }

    /// Another text's frame of about `size` bytes (at most `size - 8`).
    static func otherFrame(_ compressor: Zstd.Compressor, within size: Int, seed: UInt64) -> [UInt8] {
        var count = size * 2
        while true {
            let frame = text(count, seed: seed).withUnsafeBytes { compressor.frame($0) }
            if frame.count + 8 <= size { return frame }
            count = count * 3 / 4
        }
    }

    /// A copy of a pushed file:// remote whose compressed pieces are replaced by `replace`.
    static func hostileCopy(_ box: Sandbox,
                            replace: (Data) -> Data) throws -> (remote: String, bad: String, file: Data) {
        let file = text(size, seed: 21)
        let src = box.directory + "/src", remote = box.directory + "/remote", bad = box.directory + "/bad"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try file.write(to: URL(fileURLWithPath: src + "/big.txt"))
        try box.configure(push: "file://\(remote)/", from: src, ["remote-layout = objects"])
        let pushed = box.sync(["--session", "up"])
        #expect(pushed.exitCode == 0, "\(pushed.output)")
        try FileManager.default.copyItem(atPath: remote, toPath: bad)
        var replaced = 0
        for object in try FileManager.default.subpathsOfDirectory(atPath: bad + "/.ferry/data") where object.count > 3 {
            let path = bad + "/.ferry/data/" + object
            let data = try #require(FileManager.default.contents(atPath: path))
            guard data.prefix(4) == zstdMagic else { continue }
            try replace(data).write(to: URL(fileURLWithPath: path))
            replaced += 1
        }
        #expect(replaced > 3)
        return (remote, bad, file)
    }

    /// Frames of 64 MiB of zeros (a bomb), or frames of other text as long as the piece's: from a
    /// mirror, neither reaches the file nor takes more memory than a piece; the mirror is demoted
    /// and the file comes from the remote.
    @Test(arguments: ["bomb", "other bytes"])
    func framesThatAreNotThePieceFromAMirrorDemoteIt(kind: String) throws {
        let box = Sandbox("compressed-mirror-\(kind == "bomb" ? "bomb" : "other")")
        let compressor = Zstd.Compressor()
        let bomb = [UInt8](repeating: 0, count: 64 << 20).withUnsafeBytes { compressor.frame($0) }
        let (remote, bad, file) = try Self.hostileCopy(box) { data in
            guard kind != "bomb" else { return Self.padded(bomb, to: data.count) }
            let other = Self.otherFrame(compressor, within: data.count, seed: UInt64(data.count))
            return Self.padded(other, to: data.count)
        }
        box.configure(remote: "file://\(remote)/", session: ["mirrors = file://\(bad)/", "session-transfers = 1"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: box.localPath("big.txt")) == file, "exactly the published bytes")
        let warnings = run.events(named: "warning").compactMap { $0["message"] as? String }
            .filter { $0.contains("mirror") }
        #expect(warnings.count == 1 && warnings[0].contains("sent wrong bytes"), "said once: \(warnings)")
        #expect(run.events(named: "file-done").first?["source"] as? String == "origin", "\(run.stdout)")
    }

    /// The remote's own objects replaced by other frames: the file is not placed, and the run says
    /// which piece's object does not hold what its name says.
    @Test func framesThatAreNotThePieceFromTheRemoteFailTheFile() throws {
        let box = Sandbox("compressed-origin-wrong")
        let compressor = Zstd.Compressor()
        let (_, bad, _) = try Self.hostileCopy(box) { data in
            Self.padded(Self.otherFrame(compressor, within: data.count, seed: UInt64(data.count) + 1), to: data.count)
        }
        box.configure(remote: "file://\(bad)/")
        let run = box.sync(["--json"])
        #expect(run.exitCode != 0, "\(run.output)")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("big.txt")), "nothing placed")
        #expect(run.output.contains("does not hold the bytes its name says"), "\(run.output)")
    }
}

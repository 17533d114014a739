import Foundation
import Testing
@testable import FerryCore
@testable import FerryRuntime

/// Pieces stored compressed (`remote-layout = objects`): a frame a chunk, in an object named by
/// the frames' SHA-256; what the index says of them, what a reader refuses, and what a
/// decompression may give (exactly the bytes asked for, never more).
struct CompressedPieceTests {
    typealias Core = DeltaCoreTests

    /// Text-like bytes: words of a small vocabulary in a seeded order (compresses about 3:1).
    static func text(_ count: Int, seed: UInt64) -> [UInt8] {
        let words = ["ferry", "mirror", "piece", "chunk", "origin", "manifest", "index", "delta", "fleet",
                     "object", "frame", "bytes", "signed", "release", "cache", "\n"].map { Array(($0 + " ").utf8) }
        let noise = Core.bytes(count, seed: seed)
        var out: [UInt8] = []
        out.reserveCapacity(count + 16)
        var i = 0
        while out.count < count {
            out += words[Int(noise[i % noise.count]) % words.count]
            i += 1
        }
        return Array(out.prefix(count))
    }

    static func index(_ data: [UInt8], compress: Bool,
                      known: [SHA256Digest: ContentIndex.Stored?] = [:]) throws -> ContentScan.Indexed {
        let path = NSTemporaryDirectory() + "/ferry-compressed-\(UUID().uuidString)"
        defer { unlink(path) }
        try Data(data).write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        return try ContentScan.index(fd, what: "test", compress: compress ? known : nil)
    }

    @Test func compressiblePiecesAreStoredAsFramesAndReadBack() throws {
        let data = Self.text(2 << 20, seed: 1)
        let indexed = try Self.index(data, compress: true)
        #expect(indexed.sha256 == SHA256Hasher.digest(of: data))
        let pieces = try Core.resolve(indexed)
        #expect(pieces.allSatisfy { $0.stored != nil && $0.detail == nil }, "every piece of text compresses")
        let stored = pieces.reduce(0) { $0 + $1.stored!.size }
        #expect(stored * 2 < data.count, "\(stored) bytes stored for \(data.count)")
        let compressor = Zstd.Compressor()
        for p in pieces.prefix(4) {
            let bytes = Array(data[Int(p.offset)..<(Int(p.offset) + p.length)])
            let frames = try #require(bytes.withUnsafeBytes {
                PieceCompression.frames(of: p, bytes: $0, using: compressor)
            })
            #expect(SHA256Hasher.digest(of: frames) == p.stored!.sha256, "named by the frames' bytes")
            // The frames of chunks 2 and 3 alone give those chunks' bytes, exactly.
            let plan = DeltaPlan(pieces: [p], local: []).pieces[0].frames!
            let from = p.chunks[0].length + p.chunks[1].length
            let to = from + p.chunks[2].length + p.chunks[3].length
            let range = try #require(plan.storedRange(of: from..<to))
            var out = [UInt8](repeating: 0, count: to - from)
            let done = Array(frames[range]).withUnsafeBytes { src in
                out.withUnsafeMutableBytes { Zstd.Decompressor().decompress(src, into: $0) }
            }
            #expect(done && out == Array(bytes[from..<to]))
            #expect(plan.storedRange(of: (from + 1)..<to) == nil, "a run is whole chunks or nothing")
        }
        // Random bytes do not compress: stored as they are, with a detail.
        let random = try Core.resolve(try Self.index(Core.bytes(1 << 20, seed: 2), compress: true))
        #expect(random.allSatisfy { $0.stored == nil && $0.detail != nil })
    }

    /// A piece the remote already stores keeps the form it is stored in (as it is, from a ferry
    /// that did not compress; or its frames), without being compressed again.
    @Test func aPieceStoredBeforeKeepsItsForm() throws {
        let data = Self.text(1 << 20, seed: 4)
        let first = try Core.resolve(try Self.index(data, compress: true))
        #expect(first.count >= 3 && first.allSatisfy { $0.stored != nil })
        let fake = ContentIndex.Stored(sha256: first[1].sha256, lengths: first[1].stored!.lengths)
        var known: [SHA256Digest: ContentIndex.Stored?] = [first[1].sha256: fake]
        known[first[0].sha256] = .some(nil)
        let again = try Core.resolve(try Self.index(data, compress: true, known: known))
        #expect(again[0].stored == nil && again[0].object == first[0].sha256, "stored as it is: kept so")
        #expect(again[1].stored == fake, "the form the published index names, not compressed again")
        #expect(Array(again.dropFirst(2).map(\.stored)) == Array(first.dropFirst(2).map(\.stored)))
    }

    @Test func aDecompressionGivesExactlyTheBytesAskedOrNothing() throws {
        let compressor = Zstd.Compressor()
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        let bomb = zeros.withUnsafeBytes { compressor.frame($0) }
        #expect(bomb.count < 1000, "a MiB of zeros in \(bomb.count) bytes")
        func decompresses(_ source: [UInt8], into count: Int) -> Bool {
            var out = [UInt8](repeating: 0, count: count)
            let decompressor = Zstd.Decompressor()
            return source.withUnsafeBytes { src in out.withUnsafeMutableBytes { decompressor.decompress(src, into: $0) } }
        }
        #expect(!decompresses(bomb, into: 4096), "more than asked for: refused, not written past")
        #expect(!decompresses(bomb, into: 2 << 20), "fewer than asked for: refused")
        #expect(decompresses(bomb, into: 1 << 20), "exactly what it holds")
        #expect(!decompresses(Core.bytes(3000, seed: 3), into: 4096), "not zstd's")
    }

    @Test func aHostileCompressedPieceIsRefusedWithItsReason() throws {
        func piece(flags: UInt8, frames: [Int]) -> (SHA256Digest, [UInt8]) {
            var out = ContentIndex.pieceMagic + [UInt8](repeating: 1, count: 32) + [flags]
            if flags & 2 != 0 { out += [UInt8](repeating: 2, count: 32) }
            ContentIndex.varint(UInt64(frames.count), into: &out)
            for f in frames {
                ContentIndex.varint(2000, into: &out)
                out += [1, 2, 3]
                ContentIndex.varint(UInt64(f), into: &out)
            }
            return (SHA256Hasher.digest(of: out), out)
        }
        func refusal(_ object: (SHA256Digest, [UInt8]), size: Int64) -> String {
            do {
                _ = try ContentIndex.resolve(ContentIndex.Reference(sha256: object.0, level: 0), size: size,
                                             source: "big.bin") { $0.map { $0 == object.0 ? object.1 : [] } }
                return "taken"
            } catch {
                return error.message
            }
        }
        #expect(refusal(piece(flags: 2, frames: [700]), size: 2000) == "taken")
        #expect(refusal(piece(flags: 2, frames: [0]), size: 2000).contains("an empty frame"))
        #expect(refusal(piece(flags: 2, frames: [2100]), size: 2000).contains("a frame's length"))
        #expect(refusal(piece(flags: 4, frames: []), size: 2000).contains("flags 4"))
    }
}

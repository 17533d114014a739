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

    /// A compressed piece's runs come a range a request: local chunks between two fetched runs are
    /// fetched too while the run that makes stays within the bound (in bytes of frames); a piece
    /// stored as it is, or a bound that the run would pass, keeps the plan as it was.
    @Test func localGapsBetweenFetchedRunsOfACompressedPieceAreFetchedWithinTheBound() throws {
        let pieces = try Core.resolve(try Self.index(Self.text(2 << 20, seed: 3), compress: true))
        let p = try #require(pieces.first { $0.stored != nil && $0.chunks.count >= 6 })
        // Chunks 1 and 3 are held locally (at their own place in file 0): fetched, held, fetched, held, fetched...
        var at = p.offset
        var local: [DeltaPlan.LocalChunk] = []
        for (i, c) in p.chunks.enumerated() {
            if i == 1 || i == 3 { local.append(DeltaPlan.LocalChunk(c, at: DeltaPlan.Location(file: 0, offset: at))) }
            at += Int64(c.length)
        }
        let plan = DeltaPlan(pieces: [p], local: local)
        #expect(plan.pieces[0].segments.map { $0.from == nil } == [true, false, true, false, true])
        let frames = try #require(plan.pieces[0].frames)
        let lengths = p.chunks.map(\.length)
        func stored(_ chunks: Range<Int>) -> Int {
            let from = lengths[..<chunks.lowerBound].reduce(0, +)
            return frames.storedRange(of: from..<from + lengths[chunks].reduce(0, +))!.count
        }
        let all = plan.bridgingGaps(upTo: stored(0..<p.chunks.count))
        #expect(all.pieces[0].segments.count == 1 && all.pieces[0].segments[0].from == nil)
        #expect(all.fetched == Int64(p.length) && all.reused == 0)
        // A bound that takes chunks 0-2 in one run, not 0-4: the second gap stays local.
        let first = plan.bridgingGaps(upTo: stored(0..<3))
        #expect(first.pieces[0].segments.map { $0.from == nil } == [true, false, true])
        #expect(first.reused == Int64(lengths[3]))
        #expect(plan.bridgingGaps(upTo: stored(0..<3) - 1).pieces[0].segments == plan.pieces[0].segments)
        // A piece stored as it is comes in ranges of several runs at once: left as it was.
        var plain = p
        plain.stored = nil
        let asIs = DeltaPlan(pieces: [plain], local: local)
        #expect(asIs.bridgingGaps(upTo: 1 << 30).pieces[0].segments == asIs.pieces[0].segments)
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

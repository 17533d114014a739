import Foundation
import Testing
@testable import FerryCore
@testable import FerryRuntime

/// Repeats in a content index are content (a file that holds the same bytes twice has the same
/// pieces twice): read once, bounded by the file's size and the chunker's rules, never by how
/// often an object is named; a plan takes a repeat from the piece before it.
struct DeltaRepeatsCoreTests {
    typealias Core = DeltaCoreTests

    /// An index of `data` read back with a loader that counts what it is asked for.
    static func read(_ indexed: ContentScan.Indexed,
                     asked: inout [SHA256Digest]) throws(FerryError) -> (pieces: [ContentIndex.Piece],
                                                                         objects: [SHA256Digest]) {
        let store = Dictionary(indexed.index!.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        var seen: [SHA256Digest] = []
        defer { asked = seen }
        return try ContentIndex.resolve(indexed.index!.reference, size: indexed.size, source: "test") { batch in
            seen += batch
            return batch.map { store[$0] ?? [] }
        }
    }

    @Test func anIndexNamingAPieceManyTimesIsReadWithEachObjectOnce() throws {
        let part = Core.bytes(700_000, seed: 3)
        let data = part + part + part + part
        let indexed = try Core.index(data)
        var asked: [SHA256Digest] = []
        let (pieces, objects) = try Self.read(indexed, asked: &asked)
        #expect(pieces.reduce(0) { $0 + $1.length } == data.count)
        let distinct = Set(pieces.map(\.sha256))
        #expect(distinct.count < pieces.count * 2 / 3,
                "most pieces repeat: \(distinct.count) distinct of \(pieces.count)")
        #expect(Set(asked).count == asked.count, "each object asked once: \(asked.count) asks")
        #expect(Set(objects).count == objects.count && objects.count == asked.count)
        for p in pieces {
            let bytes = Array(data[Int(p.offset)..<(Int(p.offset) + p.length)])
            #expect(SHA256Hasher.digest(of: bytes) == p.sha256, "a repeated piece stands where its bytes are")
        }
    }

    /// A piece object as the chunker could not have cut it: `count` chunks of `length` bytes.
    static func piece(chunks count: Int, length: Int) -> (SHA256Digest, [UInt8]) {
        var out = ContentIndex.pieceMagic + [UInt8](repeating: 7, count: 32) + [0]  // no detail
        ContentIndex.varint(UInt64(count), into: &out)
        for i in 0..<count {
            ContentIndex.varint(UInt64(length), into: &out)
            out += [UInt8(i), 0, 0]
        }
        return (SHA256Hasher.digest(of: out), out)
    }

    /// A level-1 node naming `child` (covering `covers` bytes each time) `times` times.
    static func node(_ child: SHA256Digest, covers: [Int64]) -> (SHA256Digest, [UInt8]) {
        var out = ContentIndex.nodeMagic + [1]
        ContentIndex.varint(UInt64(covers.count), into: &out)
        for n in covers {
            out += child.bytes
            ContentIndex.varint(UInt64(n), into: &out)
        }
        return (SHA256Hasher.digest(of: out), out)
    }

    static func refusal(_ objects: [(SHA256Digest, [UInt8])], top: SHA256Digest, level: Int = 1,
                        size: Int64) -> String {
        let store = Dictionary(objects, uniquingKeysWith: { a, _ in a })
        do {
            _ = try ContentIndex.resolve(ContentIndex.Reference(sha256: top, level: level), size: size,
                                         source: "big.bin") {
                $0.map { store[$0] ?? [] }
            }
            return "taken"
        } catch {
            return error.message
        }
    }

    /// Naming a small object many times could make a reader hold a place per byte of the file:
    /// what bounds it is the file's size over the least a piece holds (a piece before the last
    /// holds 8 chunks or more, a chunk before the file's last 1.5 KiB or more, both checked), and
    /// every place that names an object must say it covers the same bytes.
    @Test func repeatsCannotMultiplyWhatAReaderHolds() {
        let (tiny, tinyBytes) = Self.piece(chunks: 8, length: 100)
        let (top, topBytes) = Self.node(tiny, covers: Array(repeating: 800, count: 64))
        let many = Self.refusal([(tiny, tinyBytes), (top, topBytes)], top: top, size: 64 * 800)
        #expect(many.contains("it names 64 objects at level 0, more than a file of 51200 bytes holds"), "\(many)")
        let short = Self.refusal([(tiny, tinyBytes)], top: tiny, level: 0, size: 800)
        #expect(short.contains("a chunk of 100 bytes before the file's last, shorter than \(ContentChunker.minimum)"),
                "\(short)")

        let (few, fewBytes) = Self.piece(chunks: 2, length: ContentChunker.maximum)
        let (top2, top2Bytes) = Self.node(few, covers: [24_576, 24_576])
        let fewRefused = Self.refusal([(few, fewBytes), (top2, top2Bytes)], top: top2, size: 49_152)
        #expect(fewRefused.contains("a piece before the last holds 2 chunks"), "\(fewRefused)")

        let (good, goodBytes) = Self.piece(chunks: 8, length: 2000)
        let (top3, top3Bytes) = Self.node(good, covers: [16_000, 16_001])
        let disagree = Self.refusal([(good, goodBytes), (top3, top3Bytes)], top: top3, size: 32_001)
        #expect(disagree.contains("covering 16000 bytes in one place and 16001 in another"), "\(disagree)")

        // The same piece named 64 times, each a proper piece: a file of 64 equal parts, taken.
        let (top4, top4Bytes) = Self.node(good, covers: Array(repeating: 16_000, count: 64))
        #expect(Self.refusal([(good, goodBytes), (top4, top4Bytes)], top: top4, size: 64 * 16_000) == "taken")
    }

    /// A new version that repeats itself (one half twice) against an old one that holds neither:
    /// the first copy is fetched, the second taken from it, as the file after the local ones.
    @Test func aPlanTakesARepeatFromTheCopyBeforeIt() throws {
        let half = Core.bytes(900_000, seed: 8)
        let pieces = try Core.resolve(try Core.index(half + half))
        let plan = DeltaPlan(pieces: pieces, local: [], selfFile: 0)
        #expect(plan.size == Int64(2 * half.count))
        #expect(plan.fetched < Int64(half.count) + 300_000 && plan.reused > Int64(half.count) - 300_000,
                "one half fetched, the other taken from it: \(plan.fetched) fetched, \(plan.reused) reused")
        for piece in plan.pieces {
            for segment in piece.segments {
                guard let from = segment.from else { continue }
                #expect(from.file == 0 && from.offset + Int64(segment.length) <= piece.offset,
                        "only from bytes before the piece")
            }
        }
        let without = DeltaPlan(pieces: pieces, local: [])
        #expect(without.reused == 0, "without selfFile nothing is taken from the file itself")
    }

    /// Two places hold chunks of one name (24 bits of hash and a length: other bytes that share
    /// it, about twice per GiB): the plan takes the one that goes on from the bytes before it, or
    /// the chunk's own place, not whichever was found first; a piece built from the other would
    /// not verify and be fetched whole.
    @Test func aSharedChunkNameIsTakenWhereItsNeighboursAre() {
        let a = ContentIndex.Chunk(length: 4000, hash: 0xA1), b = ContentIndex.Chunk(length: 3000, hash: 0xB2)
        let c = ContentIndex.Chunk(length: 5000, hash: 0xC3), x = ContentIndex.Chunk(length: 6000, hash: 0xD4)
        let piece = ContentIndex.Piece(offset: 0, length: 12000, sha256: SHA256Hasher.digest(of: [1]), chunks: [a, b, c])
        let somewhere = DeltaPlan.Location(file: 0, offset: 900_000)
        // Another file's b first, then the file at the path: a, b, c in place.
        let held = [DeltaPlan.LocalChunk(x, at: DeltaPlan.Location(file: 0, offset: 800_000)),
                    DeltaPlan.LocalChunk(b, at: somewhere),
                    DeltaPlan.LocalChunk(a, at: DeltaPlan.Location(file: 0, offset: 0)),
                    DeltaPlan.LocalChunk(b, at: DeltaPlan.Location(file: 0, offset: 4000)),
                    DeltaPlan.LocalChunk(c, at: DeltaPlan.Location(file: 0, offset: 7000))]
        let plan = DeltaPlan(pieces: [piece], local: held)
        #expect(plan.pieces[0].segments == [DeltaPlan.Segment(length: 12000, from: DeltaPlan.Location(file: 0, offset: 0))],
                "\(plan.pieces[0].segments)")
        // Its own place when nothing before it is held; the one place there is when that is all.
        let second = ContentIndex.Piece(offset: 4000, length: 3000, sha256: SHA256Hasher.digest(of: [2]), chunks: [b])
        let alone = DeltaPlan(pieces: [second], local: held)
        #expect(alone.pieces[0].segments == [DeltaPlan.Segment(length: 3000, from: DeltaPlan.Location(file: 0, offset: 4000))])
        let moved = DeltaPlan(pieces: [second], local: [DeltaPlan.LocalChunk(b, at: somewhere)])
        #expect(moved.pieces[0].segments == [DeltaPlan.Segment(length: 3000, from: somewhere)])
    }
}

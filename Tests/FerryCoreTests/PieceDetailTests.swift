import Foundation
import Testing
@testable import FerryCore
@testable import FerryRuntime

/// A piece's detail (16 bits a block of 512 bytes) and the plan it makes finer: a 4 KiB write in
/// place costs about its own blocks, not the ~11 KiB of chunks around it; an insertion costs about
/// its own bytes; a detail that is not one is refused.
struct PieceDetailTests {
    typealias Core = DeltaCoreTests

    /// The chunks of `old` as a mirror that holds it as file 0 finds them.
    static func localChunks(_ old: [UInt8]) -> [DeltaPlan.LocalChunk] {
        var local: [DeltaPlan.LocalChunk] = []
        var offset = 0
        for length in old.withUnsafeBufferPointer({ ContentChunker.lengths(of: $0) }) {
            let digest = SHA256Hasher.digest(of: Array(old[offset..<(offset + length)]))
            local.append(DeltaPlan.LocalChunk(ContentIndex.Chunk(length: length, digest: digest),
                                              at: DeltaPlan.Location(file: 0, offset: Int64(offset))))
            offset += length
        }
        return local
    }

    /// The plan for `new` against `old`, made finer with the details `store` holds.
    static func refinedPlan(old: [UInt8], new: [UInt8]) throws -> (before: DeltaPlan, after: DeltaPlan) {
        let indexed = try Core.index(new)
        let store = Dictionary(indexed.index!.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        let pieces = try Core.resolve(indexed)
        #expect(pieces.allSatisfy { $0.detail != nil && store[$0.detail!] != nil }, "every piece names its detail")
        let before = DeltaPlan(pieces: pieces, local: localChunks(old), selfFile: 1)
        var after = before
        for i in before.detailsWanted(pieces, files: 1) {
            let hashes = try #require(PieceDetail.hashes(store[pieces[i].detail!]!, pieceLength: pieces[i].length))
            after.refine(i, hashes: hashes, files: 1) { at, count in
                at.file == 0 && at.offset >= 0 && Int(at.offset) + count <= old.count
                    ? Array(old[Int(at.offset)..<(Int(at.offset) + count)]) : nil
            }
        }
        return (before, after)
    }

    /// Every piece of `plan` assembled from `old` and `new` (fetched bytes) is the new version's.
    static func assembles(_ plan: DeltaPlan, old: [UInt8], new: [UInt8]) -> Bool {
        plan.pieces.allSatisfy { p in
            var bytes: [UInt8] = []
            var at = Int(p.offset)
            for s in p.segments {
                if let from = s.from {
                    bytes += from.file == 0 ? old[Int(from.offset)..<(Int(from.offset) + s.length)]
                        : new[Int(from.offset)..<(Int(from.offset) + s.length)]
                } else {
                    bytes += new[at..<(at + s.length)]
                }
                at += s.length
            }
            return SHA256Hasher.digest(of: bytes) == p.sha256
        }
    }

    @Test func scatteredWritesCostTheirOwnBlocks() throws {
        let old = Core.bytes(8 << 20, seed: 21)
        var new = old
        let writes = stride(from: 4096 * 37, to: new.count - 4096, by: 4096 * 97).prefix(20)
        for (k, at) in writes.enumerated() { new.replaceSubrange(at..<(at + 4096), with: Core.bytes(4096, seed: 100 + UInt64(k))) }
        let (before, after) = try Self.refinedPlan(old: old, new: new)
        #expect(before.fetched > 20 * 8192, "the chunks around each write: \(before.fetched)")
        // Each write: its 4 KiB and the two blocks of 512 at its ends it shares with unchanged bytes.
        #expect(after.fetched <= 20 * (4096 + 1024), "\(after.fetched) fetched after details")
        #expect(after.fetched >= 20 * 4096, "the writes themselves are fetched: \(after.fetched)")
        #expect(after.reused + after.fetched == after.size)
        #expect(Self.assembles(after, old: old, new: new))
    }

    /// Old bytes whose 16-bit hash matches a changed block by chance (once in 65,536 tries: about
    /// once per GiB of 100 KiB runs) are not taken when no neighbour backs them: a wrong guess
    /// costs the piece fetched whole and the rest of the request it came in.
    @Test func aBlockThatMatchesAloneIsFetched() throws {
        var old = Core.bytes(2 << 20, seed: 51)
        var new = old
        new.replaceSubrange(600_000..<700_000, with: Core.bytes(100_000, seed: 52))
        let pieces = try Core.resolve(try Core.index(new))
        let indexed = try Core.index(new)
        let store = Dictionary(indexed.index!.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        // A block in the middle of the change, and old bytes in its place that hash as it does.
        let piece = try #require(pieces.first { $0.offset <= 640_000 && $0.offset + Int64($0.length) > 660_000 })
        let size = PieceDetail.blockSize(forPieceOf: piece.length)
        let block = Int(640_000 - piece.offset) / size + 1
        let at = Int(piece.offset) + block * size
        let hashes = try #require(PieceDetail.hashes(store[piece.detail!]!, pieceLength: piece.length))
        var forged = Core.bytes(size, seed: 53)
        var tries: UInt64 = 0
        while PieceDetail.hash(forged) != hashes[block] {
            tries += 1
            withUnsafeBytes(of: tries) { forged.replaceSubrange(0..<8, with: $0) }
        }
        old.replaceSubrange(at..<(at + size), with: forged)
        let (_, after) = try Self.refinedPlan(old: old, new: new)
        let p = try #require(after.pieces.first { $0.offset == piece.offset })
        var offset = Int(p.offset)
        var taken: [Range<Int>] = []
        for s in p.segments {
            if s.from?.file == 0 && s.from?.offset == Int64(offset) { taken.append(offset..<(offset + s.length)) }
            offset += s.length
        }
        #expect(!taken.contains { $0.overlaps(at..<(at + size)) }, "the forged block is fetched, not taken: \(taken)")
        #expect(Self.assembles(after, old: old, new: new))
    }

    @Test func anInsertionCostsAboutItsOwnBytes() throws {
        let old = Core.bytes(2 << 20, seed: 31)
        var new = old
        new.insert(contentsOf: Core.bytes(1000, seed: 32), at: 1_234_567)
        let (before, after) = try Self.refinedPlan(old: old, new: new)
        #expect(before.fetched > 4000, "\(before.fetched)")
        // The bytes before it from where they were, the bytes after it from where they moved from.
        #expect(after.fetched <= 1000 + 2 * 512, "\(after.fetched) fetched after details")
        #expect(Self.assembles(after, old: old, new: new))
    }

    @Test func aPlanNeedsNoDetailWhereNothingBesideItIsHeld() throws {
        let new = Core.bytes(1 << 20, seed: 41)
        let pieces = try Core.resolve(try Core.index(new))
        let cold = DeltaPlan(pieces: pieces, local: [], selfFile: 0)
        #expect(cold.detailsWanted(pieces, files: 0).isEmpty, "a cold mirror fetches no detail")
        // A contiguous change of a whole piece and more: only the pieces at its edges want one.
        var changed = new
        changed.replaceSubrange(200_000..<700_000, with: Core.bytes(500_000, seed: 42))
        let (before, _) = try Self.refinedPlan(old: new, new: changed)
        let changedPieces = try Core.resolve(try Core.index(changed))
        let wanted = before.detailsWanted(changedPieces, files: 1)
        let inside = changedPieces.filter { $0.offset >= 200_000 && $0.offset + Int64($0.length) <= 700_000 }.count
        #expect(inside >= 2 && wanted.count <= changedPieces.count - inside, "\(wanted) of \(changedPieces.count)")
    }

    @Test func aDetailIsCheckedAndBlocksGrowWithThePiece() throws {
        #expect(PieceDetail.blockSize(forPieceOf: 145 << 10) == 512)
        #expect(PieceDetail.blockSize(forPieceOf: 3 << 20) == 2048)
        // A piece of 3 MiB: blocks of 2 KiB, each hashed as a reader of its bytes hashes it.
        let bytes = Core.bytes(3 << 20, seed: 51)
        var hasher = PieceDetail.Hasher()
        for at in stride(from: 0, to: bytes.count, by: 70_001) {
            bytes[at..<min(at + 70_001, bytes.count)].withUnsafeBufferPointer { hasher.update($0) }
        }
        let detail = hasher.finish()
        #expect(detail.count <= ContentIndex.maximumObjectSize)
        let hashes = try #require(PieceDetail.hashes(detail, pieceLength: bytes.count))
        #expect(hashes.count == 1536)
        #expect(hashes[7] == PieceDetail.hash(Array(bytes[7 * 2048..<8 * 2048])))
        // Not a detail of this piece: another length, another kind, bytes after its end.
        #expect(PieceDetail.hashes(detail, pieceLength: 1 << 20) == nil)
        #expect(PieceDetail.hashes(Array("fdC3".utf8) + detail.dropFirst(4), pieceLength: bytes.count) == nil)
        #expect(PieceDetail.hashes(detail + [0], pieceLength: bytes.count) == nil)
        // One byte changed changes its block's hash (and only its block's).
        var other = bytes
        other[7 * 2048 + 100] ^= 1
        #expect(PieceDetail.hash(Array(other[7 * 2048..<8 * 2048])) != hashes[7])
    }

    @Test func anIndexNamesItsDetailsForThePublisherAndAnOlderPieceStillReads() throws {
        let indexed = try Core.index(Core.bytes(2 << 20, seed: 61))
        let store = Dictionary(indexed.index!.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        let reference = indexed.index!.reference
        let mirror = ContentIndex.names(reference) { store[$0] }
        let publisher = ContentIndex.names(reference, details: true) { store[$0] }
        let details = Set(try Core.resolve(indexed).compactMap(\.detail))
        #expect(Set(publisher) == Set(store.keys), "the publisher keeps every object it wrote")
        let bundles = IndexBundle.lists(ofTop: store[reference.sha256]!)!.all.map(\.sha256)
        #expect(!bundles.isEmpty)
        #expect(Set(mirror) == Set(store.keys).subtracting(details).subtracting(bundles),
                "a mirror keeps no detail and no bundle")
        // A piece as an older ferry wrote it (`fdC2`, no detail) is read, without one.
        var old = Array("fdC2".utf8) + [UInt8](repeating: 3, count: 32)
        ContentIndex.varint(1, into: &old)
        ContentIndex.varint(2000, into: &old)
        old += [1, 2, 3]
        let top = SHA256Hasher.digest(of: old)
        let read = try ContentIndex.resolve(ContentIndex.Reference(sha256: top, level: 0), size: 2000,
                                            source: "old") { batch in batch.map { $0 == top ? old : [] } }
        #expect(read.pieces.count == 1 && read.pieces[0].detail == nil && read.pieces[0].chunks.count == 1)
    }
}

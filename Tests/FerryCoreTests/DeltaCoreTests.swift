import Foundation
import Testing
@testable import FerryCore
@testable import FerryRuntime

/// Delta's pure parts on their own: where chunks end, the content index built and read back (and
/// refused when hostile), and the plan that matches a new version against an old one.
struct DeltaCoreTests {
    /// Bytes from a fixed seed: the same in every run.
    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        var out = [UInt8](repeating: 0, count: count)
        var i = 0
        while i < count {
            state &+= 0x9e37_79b9_7f4a_7c15
            var z = state
            z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
            z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
            z ^= z >> 31
            for k in 0..<8 where i + k < count { out[i + k] = UInt8(truncatingIfNeeded: z >> (8 * UInt64(k))) }
            i += 8
        }
        return out
    }

    /// The chunk lengths of `data` fed in pieces of the sizes `slices` cycles through.
    static func lengths(_ data: [UInt8], slices: [Int]) -> [Int] {
        var chunker = ContentChunker()
        var out: [Int] = []
        var current = 0
        var at = 0
        var k = 0
        data.withUnsafeBufferPointer { all in
            while at < all.count {
                let end = min(all.count, at + slices[k % slices.count])
                k += 1
                let slice = UnsafeBufferPointer(rebasing: all[at..<end])
                var start = 0
                while let cut = chunker.cut(slice, from: start) {
                    current += cut - start
                    out.append(current)
                    current = 0
                    start = cut
                }
                current += slice.count - start
                at = end
            }
        }
        if current > 0 { out.append(current) }
        return out
    }

    /// The index of `data` as a publisher makes it (through a file, as `manifest build` reads it).
    static func index(_ data: [UInt8]) throws -> ContentScan.Indexed {
        let path = NSTemporaryDirectory() + "/ferry-delta-\(UUID().uuidString)"
        defer { unlink(path) }
        try Data(data).write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        return try ContentScan.index(fd, what: "test")
    }

    static func resolve(_ indexed: ContentScan.Indexed, replacing: [SHA256Digest: [UInt8]] = [:]) throws(FerryError) -> [ContentIndex.Piece] {
        let store = Dictionary(indexed.index!.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a }).merging(replacing) { $1 }
        return try ContentIndex.resolve(indexed.index!.reference, size: indexed.size, source: "test") { batch in batch.map { store[$0] ?? [] } }.pieces
    }

    @Test func chunksEndWhereTheContentSaysWhateverTheBuffers() {
        let data = Self.bytes(3 << 20, seed: 1)
        let whole = data.withUnsafeBufferPointer { ContentChunker.lengths(of: $0) }
        #expect(whole.reduce(0, +) == data.count)
        #expect(whole.dropLast().allSatisfy { $0 >= ContentChunker.minimum && $0 <= ContentChunker.maximum }, "within the bounds")
        let average = data.count / whole.count
        #expect(average > 3000 && average < 5000, "about 3.7 KiB on average: \(average)")
        #expect(Self.lengths(data, slices: [1]) == whole, "a byte at a time")
        #expect(Self.lengths(data, slices: [4095, 17, 1 << 20, 12288, 1536]) == whole, "uneven buffers")
    }

    @Test func anInsertionMovesTheCutsOnlyNearIt() {
        let data = Self.bytes(2 << 20, seed: 2)
        var changed = data
        changed.insert(contentsOf: Self.bytes(1000, seed: 3), at: 1 << 20)
        func ends(_ d: [UInt8]) -> [Int] {
            var at = 0
            return d.withUnsafeBufferPointer { ContentChunker.lengths(of: $0) }.map { at += $0; return at }
        }
        let before = Set(ends(data))
        let after = ends(changed).map { $0 > (1 << 20) ? $0 - 1000 : $0 }
        let moved = after.filter { !before.contains($0) }
        #expect(moved.count <= 4, "cuts that moved: \(moved)")
    }

    @Test func anIndexReadsBackAndAChangeRewritesLittleOfIt() throws {
        var data = Self.bytes(8 << 20, seed: 4)
        let indexed = try Self.index(data)
        #expect(indexed.sha256 == SHA256Hasher.digest(of: data))
        let pieces = try Self.resolve(indexed)
        #expect(pieces.reduce(0) { $0 + $1.length } == data.count)
        #expect(pieces.count > 16, "pieces of a few hundred KiB: \(pieces.count)")
        for p in pieces {
            let bytes = Array(data[Int(p.offset)..<(Int(p.offset) + p.length)])
            #expect(SHA256Hasher.digest(of: bytes) == p.sha256)
            #expect(p.chunks.reduce(0) { $0 + $1.length } == p.length)
        }
        // What a cold mirror reads (all but the details) is under 0.2% of the file; the details a
        // publisher stores beside it 2 bytes a block of 512. The bundles the top names hold the
        // same objects again, for a mirror that needs many of them.
        let details = Set(pieces.compactMap(\.detail))
        let objects = indexed.index!.objects
        let top = objects.first { $0.sha256 == indexed.index!.reference.sha256 }!.bytes
        let lists = try #require(IndexBundle.lists(ofTop: top))
        let bundles = Set(lists.all.map(\.sha256))
        let read = objects.filter { !details.contains($0.sha256) && !bundles.contains($0.sha256) }
            .reduce(0) { $0 + $1.bytes.count }
        let detailBytes = objects.filter { details.contains($0.sha256) }.reduce(0) { $0 + $1.bytes.count }
        #expect(lists.indexBytes < read + read / 50 && lists.detailBytes < detailBytes + detailBytes / 50,
                "bundles: \(lists.indexBytes) and \(lists.detailBytes) bytes")
        #expect(Double(read) / Double(data.count) < 0.002, "the index is under 0.2% of the file: \(read) bytes")
        #expect(Double(detailBytes) / Double(data.count) < 0.0041, "details: \(detailBytes) bytes")
        #expect(try Self.index(data).index!.objects.map(\.sha256) == indexed.index!.objects.map(\.sha256), "the same index every time")

        // 4 KiB overwritten in the middle: the piece that holds it and a node per level.
        data.replaceSubrange((4 << 20)..<((4 << 20) + 4096), with: Self.bytes(4096, seed: 5))
        let after = try Self.index(data)
        let old = Set(indexed.index!.objects.map(\.sha256))
        let newTop = after.index!.objects.first { $0.sha256 == after.index!.reference.sha256 }!.bytes
        let newBundles = Set(IndexBundle.lists(ofTop: newTop)!.all.map(\.sha256))
        let new = after.index!.objects.filter { !old.contains($0.sha256) && !newBundles.contains($0.sha256) }
        let newBytes = new.reduce(0) { $0 + $1.bytes.count }
        #expect(newBytes < 6000, "\(new.count) new objects, \(newBytes) bytes")
    }

    @Test func aHostileIndexIsRefusedWithItsReason() throws {
        let indexed = try Self.index(Self.bytes(2 << 20, seed: 6))
        let reference = indexed.index!.reference
        #expect(reference.level >= 1)
        let top = indexed.index!.objects.first { $0.sha256 == reference.sha256 }!.bytes
        func refusal(_ top: [UInt8], size: Int64? = nil) -> String {
            let store = Dictionary(indexed.index!.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a }).merging([reference.sha256: top]) { $1 }
            do {
                _ = try ContentIndex.resolve(reference, size: size ?? indexed.size, source: "big.bin") { batch in batch.map { store[$0] ?? [] } }
                return "taken"
            } catch {
                return error.message
            }
        }
        #expect(refusal(top) == "taken")
        #expect(refusal(top, size: indexed.size + 1).contains("not the \(indexed.size + 1) its parent says"), "\(refusal(top, size: indexed.size + 1))")
        #expect(refusal(top + [0]).contains("bytes after its last child"))
        var wrongLevel = top
        wrongLevel[4] = 7
        #expect(refusal(wrongLevel).contains("says it is at level 7"))
        var wrongKind = top
        wrongKind[2] = UInt8(ascii: "X")
        #expect(refusal(wrongKind).contains("is not an index node"))
        #expect(refusal(top).contains("taken"))

        // A piece of 1-byte chunks, or one that covers other bytes than its parent says.
        let objects = Dictionary(indexed.index!.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        var firstPiece = reference.sha256
        for _ in 0..<reference.level { firstPiece = ContentIndex.children(objects[firstPiece]!)[0] }
        var tiny = ContentIndex.pieceMagic + [UInt8](repeating: 0, count: 32) + [0]  // no detail
        ContentIndex.varint(3, into: &tiny)
        for _ in 0..<3 { tiny += [0, 1, 2, 3, 4] }
        tiny[38] = 0  // the first chunk is empty
        let tinyStore = [firstPiece: tiny]
        do {
            _ = try Self.resolve(indexed, replacing: tinyStore)
            Issue.record("an empty chunk was taken")
        } catch {
            #expect(error.message.contains("is refused: it holds an empty chunk"), "\(error.message)")
        }
    }

    @Test func aPlanTakesWhatTheOldVersionHolds() throws {
        let old = Self.bytes(4 << 20, seed: 7)
        var new = old
        new.replaceSubrange(1_000_000..<1_004_096, with: Self.bytes(4096, seed: 8))
        new.insert(contentsOf: Self.bytes(777, seed: 9), at: 3_000_000)
        let pieces = try Self.resolve(try Self.index(new))
        var local: [DeltaPlan.LocalChunk] = []
        var offset: Int64 = 0
        for length in old.withUnsafeBufferPointer({ ContentChunker.lengths(of: $0) }) {
            let bytes = Array(old[Int(offset)..<(Int(offset) + length)])
            local.append(DeltaPlan.LocalChunk(ContentIndex.Chunk(length: length, digest: SHA256Hasher.digest(of: bytes)), at: DeltaPlan.Location(file: 0, offset: offset)))
            offset += Int64(length)
        }
        var plan = DeltaPlan(pieces: pieces, local: local)
        #expect(plan.size == Int64(new.count))
        #expect(plan.fetched < 60_000, "about the two changes: \(plan.fetched)")
        #expect(plan.reused + plan.fetched == plan.size)
        #expect(plan.worthIt)
        // Assembled from the plan, every piece is the new version's.
        for p in plan.pieces {
            var assembled: [UInt8] = []
            var at = p.offset
            for s in p.segments {
                if let from = s.from { assembled += old[Int(from.offset)..<(Int(from.offset) + s.length)] } else { assembled += new[Int(at)..<(Int(at) + s.length)] }
                at += Int64(s.length)
            }
            #expect(SHA256Hasher.digest(of: assembled) == p.sha256)
        }
        // A piece fetched whole; nothing reused from nothing.
        let before = plan.fetched
        plan.fetchWhole(0)
        #expect(plan.pieces[0].segments == [DeltaPlan.Segment(length: plan.pieces[0].length, from: nil)])
        #expect(plan.fetched > before)
        #expect(!DeltaPlan(pieces: pieces, local: []).worthIt)
        #expect(plan.piece(at: 0) == 0 && plan.piece(at: plan.size) == plan.pieces.count)
        #expect(plan.piece(at: plan.pieces[3].offset) == 3 && plan.piece(at: plan.pieces[3].offset - 1) == 2)
    }

    /// A multipart body as a server writes it: each part a range of `data`, in `order`.
    static func multipart(_ data: [UInt8], _ parts: [(first: Int64, last: Int64)], boundary: String = "b0und",
                          header: (Int) -> String = { _ in "" }) -> [UInt8] {
        var out: [UInt8] = []
        for (k, p) in parts.enumerated() {
            out += Array("\r\n--\(boundary)\r\nContent-Type: application/octet-stream\r\n\(header(k))Content-Range: bytes \(p.first)-\(p.last)/\(data.count)\r\n\r\n".utf8)
            out += data[Int(p.first)...Int(p.last)]
        }
        return out + Array("\r\n--\(boundary)--\r\n".utf8)
    }

    /// Reads `body` in slices of `slice` bytes; the parts' bytes, or the refusal.
    static func read(_ body: [UInt8], asked: [(first: Int64, last: Int64)], total: Int, slice: Int) -> (parts: [[UInt8]], finished: Bool, problem: String?) {
        var reader = MultipartRanges(boundary: "b0und", ranges: asked, total: Int64(total))
        var parts = [[UInt8]](repeating: [], count: asked.count)
        do {
            var at = 0
            while at < body.count {
                let end = min(body.count, at + slice)
                _ = try body[at..<end].withUnsafeBytes { bytes in
                    try reader.feed(bytes) { index, data in
                        parts[index] += data
                        return true
                    }
                }
                at = end
            }
        } catch {
            return (parts, reader.finished, (error as? MultipartRanges.Problem)?.text ?? "\(error)")
        }
        return (parts, reader.finished, nil)
    }

    @Test func aMultipartAnswerIsReadPartByPartAndALieIsRefused() {
        let data = Self.bytes(100_000, seed: 12)
        let asked: [(first: Int64, last: Int64)] = [(10, 4095), (20_000, 20_000), (50_000, 99_999)]
        for slice in [1, 7, 4096, 1 << 20] {
            let read = Self.read(Self.multipart(data, asked), asked: asked, total: data.count, slice: slice)
            #expect(read.problem == nil && read.finished, "\(slice): \(read.problem ?? "")")
            #expect(read.parts == asked.map { Array(data[Int($0.first)...Int($0.last)]) }, "slices of \(slice)")
        }
        func refusal(_ body: [UInt8]) -> String { Self.read(body, asked: asked, total: data.count, slice: 13).problem ?? "taken" }
        #expect(refusal(Self.multipart(data, [asked[1], asked[0], asked[2]])).contains("part 1 is bytes 20000-20000/100000, where 10-4095/100000 was asked"))
        #expect(refusal(Self.multipart(data, Array(asked.prefix(2)))).contains("it ends after 2 of the 3 ranges asked"))
        #expect(refusal(Self.multipart(data, asked + [(0, 1)])).contains("more parts than the 3 ranges asked"))
        #expect(refusal(Self.multipart(data, asked, header: { $0 == 1 ? String(repeating: "X-Pad: y\r\n", count: 600) : "" })).contains("headers take more than 4096 bytes"))
        #expect(refusal(Array("\r\n--b0und\r\nContent-Type: x\r\n\r\nabc".utf8)).contains("part 1 has no Content-Range"))
        #expect(refusal([UInt8](repeating: 0x41, count: 2000)).contains("more than 1024 bytes come between its parts"))
        #expect(refusal(Array("\r\n--b0undXY".utf8) + [UInt8](repeating: 0x41, count: 10)).contains("followed by neither CRLF nor --"))
        #expect(refusal(Array("\r\n--b0und\r\nContent-Rangex: bytes 10-4095/100000\r\n\r\n".utf8)).contains("part 1 has no Content-Range"))
        let shouted = Self.multipart(data, asked).split(separator: 0x0A, omittingEmptySubsequences: false).map { line in
            line.starts(with: Array("Content-Range".utf8)) ? Array("cONTENT-rANGE".utf8) + line.dropFirst(13) : Array(line)
        }.joined(separator: [0x0A]).map { $0 }
        #expect(Self.read(shouted, asked: asked, total: data.count, slice: 5).parts == asked.map { Array(data[Int($0.first)...Int($0.last)]) },
                "a header name in any case")
        var cut = Self.multipart(data, asked)
        cut.removeLast(10)
        #expect(!Self.read(cut, asked: asked, total: data.count, slice: 100).finished, "no closing delimiter: not finished")
        #expect(MultipartRanges.boundary(ofContentType: "multipart/byteranges; boundary=00000000000000000001") == "00000000000000000001")
        #expect(MultipartRanges.boundary(ofContentType: "Multipart/Byteranges;boundary=\"a b\"") == "a b")
        #expect(MultipartRanges.boundary(ofContentType: "application/octet-stream") == nil)
        #expect(MultipartRanges.boundary(ofContentType: "multipart/byteranges; boundary=" + String(repeating: "x", count: 71)) == nil)
    }

    @Test func aLeafCarriesTheIndexOfAnEntry() throws {
        let reference = ContentIndex.Reference(sha256: [UInt8](repeating: 7, count: 32).withUnsafeBytes { SHA256Digest(bytes: $0) }, level: 2)
        let entries = [ManifestEntry(path: RelativePath(trusted: "a.bin"), size: 5 << 20, sha256: reference.sha256, index: reference),
                       ManifestEntry(path: RelativePath(trusted: "b.txt"), size: 5, sha256: reference.sha256)]
        let built = ManifestTree.build(entries, hash: ManifestTreeTests.digest)
        #expect(try ManifestTreeTests.resolve(built) == entries)
        // A million entries are held at once: the index costs an entry without one a pointer.
        #expect(MemoryLayout<ManifestEntry>.stride <= 96, "\(MemoryLayout<ManifestEntry>.stride) bytes an entry")
    }

    /// Whether a file is stored as its pieces is part of its entry (flag 8, only beside an index):
    /// it reads back, and differs from the same index without it; flag 8 alone is refused.
    @Test func aLeafSaysWhetherAFileIsStoredAsItsPieces() throws {
        let top = [UInt8](repeating: 7, count: 32).withUnsafeBytes { SHA256Digest(bytes: $0) }
        let pieces = ContentIndex.Reference(sha256: top, level: 1, storedAsPieces: true)
        #expect(pieces != pieces.stored(asPieces: false) && pieces.stored(asPieces: false).stored(asPieces: true) == pieces)
        let content = [UInt8](repeating: 9, count: 32).withUnsafeBytes { SHA256Digest(bytes: $0) }
        let entries = [ManifestEntry(path: RelativePath(trusted: "a.bin"), size: 5 << 20, sha256: content, index: pieces)]
        let built = ManifestTree.build(entries, hash: ManifestTreeTests.digest)
        let read = try ManifestTreeTests.resolve(built)
        #expect(read == entries && read[0].index?.storedAsPieces == true)

        // The flags byte follows the content's SHA-256 and the size (4 bytes of varint): 4 | 8.
        let leaf = try #require(built.objects.first { $0.sha256 == built.root.sha256 })
        let at = try #require((0...(leaf.bytes.count - 32)).first { Array(leaf.bytes[$0..<($0 + 32)]) == content.bytes }) + 32 + 4
        #expect(leaf.bytes[at] == 12)
        for flags: UInt8 in [8, 16 | 4] {
            var bytes = leaf.bytes
            bytes[at] = flags
            #expect(throws: FerryError.self, "flags \(flags)") {
                _ = try ManifestTree.resolve(built.root, source: "test", maximumBytes: 1 << 20) { batch in batch.map { _ in bytes } }
            }
        }
    }
}

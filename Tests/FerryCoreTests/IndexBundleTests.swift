import Foundation
import Testing
@testable import FerryCore
@testable import FerryRuntime

/// A content index's bundles (`IndexBundle`): what the top names holds every object below it
/// once, each bundle within its bound, and a bundle that lies yields nothing it was not made of.
struct IndexBundleTests {
    typealias Core = DeltaCoreTests
    static func hash(_ bytes: UnsafeRawBufferPointer) -> SHA256Digest { SHA256Hasher().digest(of: bytes) }
    /// The members of an index's bundle.
    static func members(_ bytes: [UInt8]) -> [SHA256Digest: [UInt8]]? {
        ObjectBundle.members(bytes, largest: ContentIndex.maximumObjectSize, hash: hash)
    }

    @Test func theTopNamesBundlesThatHoldEveryObjectBelowIt() throws {
        let indexed = try Core.index(Core.bytes(6 << 20, seed: 91))
        let index = try #require(indexed.index)
        let store = Dictionary(index.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        let lists = try #require(IndexBundle.lists(ofTop: store[index.reference.sha256]!))
        #expect(lists.index.count == 1 && lists.details.count == 1, "\(lists)")
        var members: [SHA256Digest: [UInt8]] = [:]
        var detailMembers: [SHA256Digest: [UInt8]] = [:]
        for bundle in lists.index {
            #expect(store[bundle.sha256]?.count == bundle.size)
            members.merge(try #require(Self.members(store[bundle.sha256]!))) { a, _ in a }
        }
        for bundle in lists.details {
            detailMembers.merge(try #require(Self.members(store[bundle.sha256]!))) { a, _ in a }
        }
        // The index bundles hold exactly what a mirror keeps but the top; the detail bundles the details.
        let mirror = Set(ContentIndex.names(index.reference) { store[$0] })
        #expect(Set(members.keys) == mirror.subtracting([index.reference.sha256]))
        let details = Set(try Core.resolve(indexed).compactMap(\.detail))
        #expect(Set(detailMembers.keys) == details && !details.isEmpty)
        for (name, bytes) in members.merging(detailMembers, uniquingKeysWith: { a, _ in a }) {
            #expect(store[name] == bytes)
        }
        // Read from the bundles alone (the top aside), the index is the same.
        let fromBundles = try ContentIndex.resolve(index.reference, size: indexed.size, source: "t") { batch in
            batch.map { $0 == index.reference.sha256 ? store[$0]! : members[$0] ?? [] }
        }
        #expect(fromBundles.pieces == (try Core.resolve(indexed)))
    }

    @Test func bundlesStayWithinTheirBoundAndKeepTheirOrder() throws {
        let members = (0..<700).map { i in Core.bytes(3000 + i % 1000, seed: UInt64(i)) }
        let packed = ObjectBundle.pack(members)
        #expect(packed.count == 3, "about 2.4 MB of members: \(packed.count) bundles")
        var again: [[UInt8]] = []
        for bundle in packed {
            #expect(bundle.count <= ObjectBundle.maximumSize)
            let read = try #require(Self.members(bundle))
            again += members.filter { m in read[SHA256Hasher.digest(of: m)] == m }
        }
        #expect(again.count == members.count)
    }

    /// What a hostile bundle can do: members that overrun it, a count it cannot hold, a member
    /// larger than any index object, bytes after its end: none is read at all.
    @Test func aBundleThatLiesYieldsNothing() throws {
        let members = [Core.bytes(500, seed: 1), Core.bytes(700, seed: 2)]
        let good = ObjectBundle.pack(members)[0]
        #expect(Self.members(good)?.count == 2)
        var overrun = ObjectBundle.magic
        ContentIndex.varint(2, into: &overrun)
        ContentIndex.varint(1300, into: &overrun)  // over the second member too, and past the end
        overrun += members[0]
        ContentIndex.varint(700, into: &overrun)
        overrun += members[1]
        #expect(Self.members(overrun) == nil)
        var bomb = ObjectBundle.magic
        ContentIndex.varint(1 << 40, into: &bomb)
        bomb += [1, 0]
        #expect(Self.members(bomb) == nil)
        var large = ObjectBundle.magic
        ContentIndex.varint(1, into: &large)
        ContentIndex.varint(UInt64(ContentIndex.maximumObjectSize + 1), into: &large)
        large += [UInt8](repeating: 7, count: ContentIndex.maximumObjectSize + 1)
        #expect(Self.members(large) == nil)
        #expect(Self.members(good + [0]) == nil)
        #expect(Self.members(Array("fdB2".utf8) + good.dropFirst(4)) == nil)
    }

    /// A top that names more bundle bytes than the file's index may take is refused as the index.
    @Test func aTopNamingTooMuchIsRefused() throws {
        let indexed = try Core.index(Core.bytes(2 << 20, seed: 92))
        let index = try #require(indexed.index)
        let store = Dictionary(index.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        let top = store[index.reference.sha256]!
        let lists = try #require(IndexBundle.lists(ofTop: top))
        var hostile = IndexBundle.topMagic + [UInt8(index.reference.level)]
        let many = IndexBundle.Lists(index: Array(repeating: lists.index[0], count: 200), details: lists.details)
        IndexBundle.write(many, into: &hostile)
        var clean = IndexBundle.topMagic + [UInt8(index.reference.level)]
        IndexBundle.write(lists, into: &clean)
        hostile += top.dropFirst(clean.count)
        let digest = SHA256Hasher.digest(of: hostile)
        do {
            _ = try ContentIndex.resolve(ContentIndex.Reference(sha256: digest, level: index.reference.level),
                                         size: indexed.size, source: "big.bin") { batch in
                batch.map { $0 == digest ? hostile : store[$0] ?? [] }
            }
            Issue.record("a top naming 200 bundles for a file of 2 MiB was taken")
        } catch {
            #expect(error.message.contains("index bundles take more than"), "\(error.message)")
        }
        // Below the top, a node may not name bundles.
        #expect(throws: ManifestTree.Problem.self) {
            try ContentIndex.readNode(top, level: index.reference.level, covers: indexed.size)
        }
    }
}

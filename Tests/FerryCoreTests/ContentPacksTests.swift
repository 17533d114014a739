import Testing
@testable import FerryCore
@testable import FerryRuntime

/// The packs of small contents (`ContentPacks`): which contents they hold follows from the
/// manifest alone, each pack stays within a bundle's bound, a change rewrites only the packs near
/// it, and a list that is not one of the manifest's is refused.
struct ContentPacksTests {
    typealias Core = DeltaCoreTests

    /// `count` files of 1–8 KiB, some of one content, a few too large or empty, in path order.
    static func entries(_ count: Int, seed: UInt64 = 1, change: Set<Int> = []) -> [ManifestEntry] {
        (0..<count).map { i in
            let size = i % 97 == 0 ? 70_000 : i % 89 == 0 ? 0 : 1024 + Int((UInt64(i) &* 2_654_435_761 &+ seed) % 7168)
            let content = i % 50 == 7 ? 7 : i
            let bytes = Core.bytes(16, seed: UInt64(content) &+ (change.contains(i) ? 1000 : 0))
            let name = "d\(1000 + i / 100)/f\(100_000 + i)"
            return ManifestEntry(path: RelativePath(trusted: name), size: Int64(size),
                                 sha256: SHA256Hasher.digest(of: bytes))
        }
    }

    @Test func membersAreEachSmallContentOnceInPathOrder() {
        let entries = Self.entries(2000)
        let members = ContentPacks.members(of: entries)
        #expect(Set(members.map(\.sha256)).count == members.count, "each content once")
        #expect(!members.contains { $0.size == 0 || $0.size > ContentPacks.defaultLargest }, "no empty or large content")
        let firstPlace = Dictionary(entries.enumerated().map { ($1.sha256, $0) }, uniquingKeysWith: { a, _ in a })
        let places = members.map { firstPlace[$0.sha256]! }
        #expect(places == places.sorted(), "in the order of each content's first file")
        let expected = Set(entries.filter { ($0.size ?? 0) > 0 && ($0.size ?? 0) <= Int64(ContentPacks.defaultLargest) }.map(\.sha256))
        #expect(Set(members.map(\.sha256)) == expected)
    }

    @Test func packsStayWithinTheBoundAndEndNearAChangeOnly() {
        let members = ContentPacks.members(of: Self.entries(6000))
        let groups = ContentPacks.groups(members)
        #expect(groups.count > 6, "\(groups.count) packs of about 27 MB")
        #expect(groups.first?.lowerBound == 0 && groups.last?.upperBound == members.count)
        for (a, b) in zip(groups, groups.dropFirst()) { #expect(a.upperBound == b.lowerBound, "contiguous") }
        for g in groups {
            let size = ContentPacks.layout(members[g].map(\.size)).size
            #expect(size <= ContentPacks.maximumSize, "\(size) bytes")
        }
        // One file changed in the middle: its pack is written again, and at most the one after.
        let changed = ContentPacks.members(of: Self.entries(6000, change: [3000]))
        let after = ContentPacks.groups(changed)
        let before = Set(groups.map { members[$0].map(\.sha256) })
        let rewritten = after.filter { !before.contains(changed[$0].map(\.sha256)) }
        #expect((1...2).contains(rewritten.count), "\(rewritten.count) packs rewritten")
    }

    @Test func aPackHoldsItsMembersWhereTheLayoutSays() {
        let contents = (0..<40).map { Core.bytes(100 + $0 * 37, seed: UInt64($0)) }
        let pack = ContentPacks.pack(contents)
        let (size, offsets) = ContentPacks.layout(contents.map(\.count))
        #expect(pack.count == size)
        for (c, at) in zip(contents, offsets) { #expect(Array(pack[at..<(at + c.count)]) == c) }
        // The bundle reader reads it as the same members.
        let read = ObjectBundle.members(pack, largest: 1 << 20) { SHA256Hasher().digest(of: $0) }
        #expect(read?.count == contents.count)
    }

    @Test func aListIsReadOnlyForTheEntriesItWasMadeFor() throws {
        let entries = Self.entries(1500)
        let members = ContentPacks.members(of: entries)
        let groups = ContentPacks.groups(members)
        let names: [SHA256Digest?] = groups.indices.map { $0 == 1 ? nil : SHA256Hasher.digest(of: [UInt8($0)]) }
        let list = ContentPacks.list(zip(names, groups).map { ($0, $1.count) })
        let read = try #require(ContentPacks.read(list: list, for: entries))
        #expect(read.packs.map(\.members) == groups && read.packs.map(\.name) == names, "a pack not made is named as none")
        #expect(read.packs.map(\.size) == groups.map { ContentPacks.layout(members[$0].map(\.size)).size })
        // Another manifest (a file more), counts that do not add up, a pack past the bound, trailing bytes.
        #expect(ContentPacks.read(list: list, for: Self.entries(1501)) == nil)
        let counted = zip(names, groups).map { (name: $0, count: $1.count) }
        #expect(ContentPacks.read(list: ContentPacks.list(Array(counted.dropLast())), for: entries) == nil, "a pack short")
        var fewer = counted
        fewer[0].count -= 1
        #expect(ContentPacks.read(list: ContentPacks.list(fewer), for: entries) == nil, "a member short")
        let oneHuge = ContentPacks.list([(SHA256Hasher.digest(of: [1]), members.count)])
        #expect(ContentPacks.read(list: oneHuge, for: entries) == nil, "a pack of every member is past the bound")
        #expect(ContentPacks.read(list: list + [0], for: entries) == nil)
        #expect(ContentPacks.read(list: Array(list.prefix(list.count - 3)), for: entries) == nil)
    }
}

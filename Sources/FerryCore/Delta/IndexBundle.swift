/// A content index's objects in few requests (design.md "Delta", "Bundles"). Each index object
/// is small (a piece's ~500 bytes) and is its own object, so an update fetches only those that
/// changed; but a mirror that needs many of them (a cold mirror, an update that touched most
/// pieces) would make a request each: 7,400 for a cold GiB. So the publisher also writes the
/// index's objects one after another in **bundles** of at most 1 MiB, two lists of them named by
/// the index's top (`fdN2`): the nodes and pieces below the top, and the pieces' details. A
/// reader that needs many objects fetches the bundles (a request each, all at once) instead.
///
/// A bundle (`fdB1`) holds its count of members, then each member's length and bytes. It proves
/// nothing by itself: a member is taken only as the object whose name its bytes hash to, when the
/// index names that object, so a bundle that lies (other bytes, members that overlap, fewer of
/// them) costs only the requests it was meant to save.
public enum IndexBundle {
    static let magic: [UInt8] = Array("fdB1".utf8)
    /// The top of an index that names its bundles.
    static let topMagic: [UInt8] = Array("fdN2".utf8)
    /// No bundle is larger (ferry's largest metadata object): a GiB's index takes about two.
    public static let maximumSize = ManifestTree.maximumObjectSize

    /// A bundle as a top names it: its name and its size (what a reader asks for, and no more).
    public struct Named: Sendable, Equatable {
        public let sha256: SHA256Digest
        public let size: Int
        public init(sha256: SHA256Digest, size: Int) {
            self.sha256 = sha256
            self.size = size
        }
    }

    /// What a top names: the bundles of the nodes and pieces below it, and those of the details.
    public struct Lists: Sendable, Equatable {
        public var index: [Named] = []
        public var details: [Named] = []
        public init(index: [Named] = [], details: [Named] = []) {
            self.index = index
            self.details = details
        }
        public var indexBytes: Int { index.reduce(0) { $0 + $1.size } }
        public var detailBytes: Int { details.reduce(0) { $0 + $1.size } }
        public var all: [Named] { index + details }
    }

    /// `members` in bundles of at most `maximumSize` bytes, in order.
    static func pack(_ members: [[UInt8]]) -> [[UInt8]] {
        var out: [[UInt8]] = []
        var group: [[UInt8]] = []
        var size = 0
        func close() {
            guard !group.isEmpty else { return }
            var bytes = magic
            ContentIndex.varint(UInt64(group.count), into: &bytes)
            for member in group {
                ContentIndex.varint(UInt64(member.count), into: &bytes)
                bytes += member
            }
            out.append(bytes)
            group = []
            size = 0
        }
        for member in members {
            // The magic, a count of up to 5 bytes, and each member's length (at most 2 bytes).
            if size + member.count + 2 > maximumSize - 9 { close() }
            group.append(member)
            size += member.count + 2
        }
        close()
        return out
    }

    /// The members of a bundle, by the name their bytes hash to; nil when the bytes are not a
    /// bundle (each member at most `ContentIndex.maximumObjectSize`).
    public static func members(_ bytes: [UInt8],
                               hash: (UnsafeRawBufferPointer) -> SHA256Digest) -> [SHA256Digest: [UInt8]]? {
        bytes.withUnsafeBufferPointer { b -> [SHA256Digest: [UInt8]]? in
            var r = ManifestTree.ObjectReader(b)
            guard (try? r.expect(magic, "")) != nil,
                  let count = try? r.varint(max: UInt64(b.count / 2), "") else { return nil }
            var out: [SHA256Digest: [UInt8]] = [:]
            for _ in 0..<count {
                guard let length = try? r.varint(max: UInt64(ContentIndex.maximumObjectSize), ""), length > 0,
                      let member = try? r.take(Int(length)) else { return nil }
                out[hash(UnsafeRawBufferPointer(member))] = Array(member)
            }
            return r.atEnd ? out : nil
        }
    }

    /// Writes the lists of a top (`fdN2`, after its level byte).
    static func write(_ lists: Lists, into out: inout [UInt8]) {
        for list in [lists.index, lists.details] {
            ContentIndex.varint(UInt64(list.count), into: &out)
            for named in list {
                out += named.sha256.bytes
                ContentIndex.varint(UInt64(named.size), into: &out)
            }
        }
    }

    /// Reads the lists of a top, each bundle within `maximumSize` and each list within `bound`
    /// bytes in all.
    static func read(_ r: inout ManifestTree.ObjectReader, bound: Int64) throws(ManifestTree.Problem) -> Lists {
        var lists = Lists()
        for kind in ["index", "detail"] {
            let count = Int(try r.varint(max: UInt64(bound / 5 + 1), "its count of \(kind) bundles"))
            var list: [Named] = []
            var sum: Int64 = 0
            for _ in 0..<count {
                let digest = try r.digest()
                let size = Int(try r.varint(max: UInt64(maximumSize), "the size of a bundle"))
                guard size >= magic.count + 1 else { throw ManifestTree.Problem(text: "it names a bundle of \(size) bytes") }
                sum += Int64(size)
                guard sum <= bound else {
                    throw ManifestTree.Problem(text: "its \(kind) bundles take more than \(bound) bytes")
                }
                list.append(Named(sha256: digest, size: size))
            }
            if kind == "index" { lists.index = list } else { lists.details = list }
        }
        return lists
    }

    /// The bundles a top names, read without checking the rest (nil: the top names none).
    public static func lists(ofTop bytes: [UInt8]) -> Lists? {
        bytes.withUnsafeBufferPointer { b -> Lists? in
            var r = ManifestTree.ObjectReader(b)
            guard (try? r.expect(topMagic, "")) != nil, (try? r.byte()) != nil else { return nil }
            return try? read(&r, bound: Int64.max / 2)
        }
    }
}

/// A content index's bundles (`ObjectBundle`; design.md "Delta", "Bundles"). Each index object is
/// small (a piece's ~500 bytes), so a mirror that needs most of them (a cold one, an update that
/// touched most pieces) would make a request each: 7,771 for a cold GiB. The index's top (`fdN2`)
/// names two lists of bundles: of the nodes and pieces below it, and of the pieces' details.
public enum IndexBundle {
    /// The top of an index that names its bundles.
    static let topMagic: [UInt8] = Array("fdN2".utf8)
    public typealias Named = ObjectBundle.Named

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
                let size = Int(try r.varint(max: UInt64(ObjectBundle.maximumSize), "the size of a bundle"))
                guard size >= ObjectBundle.magic.count + 1 else {
                    throw ManifestTree.Problem(text: "it names a bundle of \(size) bytes")
                }
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

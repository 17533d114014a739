/// Metadata objects in few requests (design.md "Bundles"): objects that are each their own
/// file, so an update fetches only those that changed, are also written one after another in
/// **bundles** of at most 1 MiB, for a reader that needs many of them at once (a cold mirror, an
/// update that touched most of them). A bundle (`fdB1`) holds its count of members, then each
/// member's length and bytes. It proves nothing by itself: a member is taken only as the object
/// whose name its bytes hash to, when what the reader reads names that object, so a bundle that
/// lies (other bytes, members that overlap, fewer of them) costs only the requests it was meant
/// to save. A content index's top names its bundles (`IndexBundle`); a format-2 root names the
/// list of its tree's (`ManifestTree.Built.bundled`).
public enum ObjectBundle {
    static let magic: [UInt8] = Array("fdB1".utf8)
    /// No bundle is larger (ferry's largest metadata object).
    public static let maximumSize = ManifestTree.maximumObjectSize

    /// A bundle as it is named: its name and its size (what a reader asks for, and no more).
    public struct Named: Sendable, Equatable {
        public let sha256: SHA256Digest
        public let size: Int
        public init(sha256: SHA256Digest, size: Int) {
            self.sha256 = sha256
            self.size = size
        }
    }

    /// Whether a reader that lacks `missing` of the `batch` objects it reads next, whose bundles
    /// take `bundleBytes`, should fetch the bundles: when it lacks every one of several (a cold
    /// mirror), or more than a request is worth (8, or one per 32 KiB of bundle: at 50 ms and
    /// 100 Mbit/s a round trip of 8 requests carries about 600 KB).
    public static func worthFetching(missing: Int, of batch: Int, bundleBytes: Int) -> Bool {
        (missing == batch && missing > 1) || worthFetching(missing: missing, bundleBytes: bundleBytes)
    }

    /// Whether `missing` objects are more than a request is worth, against bundles of
    /// `bundleBytes` (8, or one per 32 KiB of bundle), however many the reader has.
    public static func worthFetching(missing: Int, bundleBytes: Int) -> Bool {
        missing > max(8, bundleBytes / (32 << 10))
    }

    /// `members` in bundles of at most `maximumSize` bytes, in order. With `atLeast`, a bundle
    /// also ends after a member whose `cut` is true once it holds that many bytes: where bundles
    /// end then depends on what they hold, not on positions, so a change rewrites the bundle that
    /// holds it and an insertion moves ends only near it.
    static func pack(_ members: [(bytes: [UInt8], cut: Bool)], atLeast: Int = .max) -> [[UInt8]] {
        var out: [[UInt8]] = []
        var group: [[UInt8]] = []
        var size = 0
        func close() {
            guard !group.isEmpty else { return }
            out.append(encode(group))
            group = []
            size = 0
        }
        for member in members {
            // The magic, a count of up to 5 bytes, and each member's length (at most 3 bytes).
            if size + member.bytes.count + 3 > maximumSize - 9 { close() }
            group.append(member.bytes)
            size += member.bytes.count + 3
            if member.cut && size >= atLeast { close() }
        }
        close()
        return out
    }

    /// `members` in bundles of at most `maximumSize` bytes, in order.
    static func pack(_ members: [[UInt8]]) -> [[UInt8]] { pack(members.map { ($0, false) }) }

    /// One bundle of `members`, in order: the magic, their count, then each one's length and bytes.
    static func encode(_ members: [[UInt8]]) -> [UInt8] {
        var bytes = magic
        ContentIndex.varint(UInt64(members.count), into: &bytes)
        for member in members {
            ContentIndex.varint(UInt64(member.count), into: &bytes)
            bytes += member
        }
        return bytes
    }

    /// The members of a bundle, by the name their bytes hash to; nil when the bytes are not a
    /// bundle of members of at most `largest` bytes each.
    public static func members(_ bytes: [UInt8], largest: Int,
                               hash: (UnsafeRawBufferPointer) -> SHA256Digest) -> [SHA256Digest: [UInt8]]? {
        bytes.withUnsafeBufferPointer { b -> [SHA256Digest: [UInt8]]? in
            var r = ManifestTree.ObjectReader(b)
            guard (try? r.expect(magic, "")) != nil,
                  let count = try? r.varint(max: UInt64(b.count / 2), "") else { return nil }
            var out: [SHA256Digest: [UInt8]] = [:]
            for _ in 0..<count {
                guard let length = try? r.varint(max: UInt64(largest), ""), length > 0,
                      let member = try? r.take(Int(length)) else { return nil }
                out[hash(UnsafeRawBufferPointer(member))] = Array(member)
            }
            return r.atEnd ? out : nil
        }
    }
}

/// A format-2 tree's objects in few requests (`ObjectBundle`; design.md "Format 2", "Bundles"):
/// a cold mirror of 100,000 files needs about 8,000 leaves, a request each. So the publisher also
/// writes every object below the top in bundles, and the root names the list of them (`fm2B`: a
/// count, then each bundle's name and size) with its size (`"bundles"`). A bundle ends after an
/// object whose name's 9th byte is 0 mod 16 once it holds 256 KiB, and at 1 MiB: where it ends
/// depends on what it holds, so a changed file rewrites the bundle that holds its leaf and those
/// that hold the nodes above it, and the list; an update of a few files reads none of them.
extension ManifestTree {
    static let bundleListMagic: [UInt8] = Array("fm2B".utf8)
    static let bundleAtLeast = 256 << 10
}

extension ManifestTree.Built {
    /// The tree with the bundles of its objects below the top, and their list (none for a tree
    /// of one object).
    func bundled(hash: (UnsafeRawBufferPointer) -> SHA256Digest) -> ManifestTree.Built {
        let below = objects.filter { $0.sha256 != root.sha256 }
        guard !below.isEmpty else { return self }
        var out = self
        var list = ManifestTree.bundleListMagic
        let packed = ObjectBundle.pack(below.map { ($0.bytes, $0.sha256.bytes[8] % 16 == 0) },
                                       atLeast: ManifestTree.bundleAtLeast)
        ContentIndex.varint(UInt64(packed.count), into: &list)
        for bundle in packed {
            let digest = bundle.withUnsafeBytes { hash($0) }
            out.objects.append((digest, bundle))
            list += digest.bytes
            ContentIndex.varint(UInt64(bundle.count), into: &list)
        }
        let digest = list.withUnsafeBytes { hash($0) }
        out.objects.append((digest, list))
        out.bundles = ObjectBundle.Named(sha256: digest, size: list.count)
        return out
    }
}

extension ObjectBundle {
    /// The bundles a tree's list names (`fm2B`), each within `maximumSize` and all within `bound`
    /// bytes; nil when the bytes are not such a list.
    public static func treeList(_ bytes: [UInt8], bound: Int64) -> [Named]? {
        bytes.withUnsafeBufferPointer { b -> [Named]? in
            var r = ManifestTree.ObjectReader(b)
            guard (try? r.expect(ManifestTree.bundleListMagic, "")) != nil,
                  let count = try? r.varint(max: UInt64(b.count / 33), "") else { return nil }
            var out: [Named] = []
            var sum: Int64 = 0
            for _ in 0..<count {
                guard let digest = try? r.digest(), let size = try? r.varint(max: UInt64(maximumSize), ""),
                      size > UInt64(magic.count) else { return nil }
                sum += Int64(size)
                guard sum <= bound else { return nil }
                out.append(Named(sha256: digest, size: Int(size)))
            }
            return r.atEnd ? out : nil
        }
    }
}

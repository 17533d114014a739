import FerryCore

/// How a format-2 tree's objects are loaded (design.md "Format 2", "Bundles"): from the
/// session's cache, else fetched one by one; but a batch of which the cache lacks every object
/// (a cold mirror), or more than a request is worth (`ManifestTree.worthBundles`), takes the
/// bundles the root's list names instead: the list, then every bundle, all at once. A member is
/// taken only as the object its bytes hash to, when the tree asks for that object; a list or a
/// bundle that cannot be had, or lies, costs the requests it was to save, said once a run.
final class TreeLoader {
    let objects: ManifestObjects
    /// The list of bundles the root names (nil: none).
    let list: ObjectBundle.Named?
    let source: String
    /// What the tree may take in all (`max-manifest-size`): the bundles too.
    let bound: Int64
    private var members: [SHA256Digest: [UInt8]] = [:]
    private var tried = false

    init(objects: ManifestObjects, list: ObjectBundle.Named?, source: String, bound: Int64) {
        self.objects = objects
        self.list = list
        self.source = source
        self.bound = bound
    }

    /// Each object of `batch`, from the bundles when many are missing; what came from them is
    /// cached as if fetched alone.
    func load(_ batch: [SHA256Digest]) throws(FerryError) -> [[UInt8]] {
        if list != nil, !tried {
            let missing = batch.count { !objects.has($0) }
            // The bundles' size is known once their list is read: more than 8 missing, or all.
            if ManifestTree.worthBundles(missing: missing, of: batch.count, bundleBytes: 0) {
                tried = true
                take(missing: missing, of: batch.count)
            }
        }
        var out = [[UInt8]](repeating: [], count: batch.count)
        var rest: [Int] = []
        for (i, digest) in batch.enumerated() {
            if let bytes = members.removeValue(forKey: digest) {
                out[i] = bytes
                objects.keep(digest, bytes)
            } else {
                rest.append(i)
            }
        }
        guard !rest.isEmpty else { return out }
        let loaded = try objects.load(rest.map { batch[$0] }, source: source)
        for (i, bytes) in zip(rest, loaded) { out[i] = bytes }
        return out
    }

    /// Fetches the list, then (when still worth it for its size) every bundle it names.
    private func take(missing: Int, of batch: Int) {
        guard let list else { return }
        let what = "the tree of manifest \(source)"
        do throws(FerryError) {
            guard let listBytes = try objects.fetchUncached([list.sha256], source: source, maximumSize: list.size).first,
                  let bundles = ObjectBundle.treeList(listBytes, bound: bound) else {
                throw FerryError(.manifest, "its list of bundles \(list.sha256.hex) is not one")
            }
            let size = bundles.reduce(0) { $0 + $1.size }
            guard ManifestTree.worthBundles(missing: missing, of: batch, bundleBytes: size) else { return }
            let fetched = try objects.fetchUncached(bundles.map(\.sha256), source: source,
                                                    maximumSize: bundles.map(\.size).max() ?? 0)
            let hasher = SHA256Hasher()
            for bytes in fetched {
                guard let read = ObjectBundle.members(bytes, largest: ManifestTree.maximumObjectSize,
                                                      hash: { hasher.digest(of: $0) }) else {
                    throw FerryError(.manifest, "a bundle it names is not one")
                }
                members.merge(read) { a, _ in a }
            }
        } catch {
            objects.bundlesUnread(of: what, error)
        }
    }
}

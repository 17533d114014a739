import FerryCore

/// How a format-2 tree's objects are loaded (design.md "Format 2", "Bundles"): from the
/// session's cache, else fetched one by one; but a batch of which the cache lacks every object
/// (a cold mirror), or more than a request is worth (`ObjectBundle.worthFetching`), takes the
/// bundles the root's list names instead: the list, then every bundle, all at once
/// (`BundleMembers`, which says once a run what could not be had).
final class TreeLoader {
    let objects: ManifestObjects
    /// The list of bundles the root names (nil: none).
    let list: ObjectBundle.Named?
    let source: String
    /// What the tree may take in all (`max-manifest-size`): the bundles too.
    let bound: Int64
    private let members: BundleMembers
    private var tried = false

    init(objects: ManifestObjects, list: ObjectBundle.Named?, source: String, bound: Int64) {
        self.objects = objects
        self.list = list
        self.source = source
        self.bound = bound
        members = BundleMembers(objects: objects, source: source, what: "the tree of manifest \(source)",
                                largest: ManifestTree.maximumObjectSize)
    }

    /// Each object of `batch`, from the bundles when many are missing; what came from them is
    /// cached as if fetched alone.
    func load(_ batch: [SHA256Digest]) throws(FerryError) -> [[UInt8]] {
        if let list, !tried {
            let missing = batch.count { !objects.has($0) }
            // The bundles' size is known once their list is read: more than 8 missing, or all.
            if ObjectBundle.worthFetching(missing: missing, of: batch.count, bundleBytes: 0) {
                tried = true
                if let bundles = bundles(listed: list),
                   ObjectBundle.worthFetching(missing: missing, of: batch.count,
                                              bundleBytes: bundles.reduce(0) { $0 + $1.size }) {
                    members.take(bundles)
                }
            }
        }
        return try members.gather(batch, keep: true, maximumSize: ManifestTree.maximumObjectSize, index: false)
    }

    /// The bundles `list` names (nil, said once a run, when it cannot be had or read).
    private func bundles(listed list: ObjectBundle.Named) -> [ObjectBundle.Named]? {
        do throws(FerryError) {
            guard let bytes = try objects.fetchUncached([list.sha256], source: source, maximumSize: list.size).first,
                  let bundles = ObjectBundle.treeList(bytes, bound: bound) else {
                throw FerryError(.manifest, "its list of bundles \(list.sha256.hex) is not one")
            }
            return bundles
        } catch {
            objects.bundlesUnread(of: members.what, error)
            return nil
        }
    }
}

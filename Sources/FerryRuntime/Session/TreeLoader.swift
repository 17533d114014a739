import FerryCore

/// How a format-2 tree's objects are loaded (design.md "Format 2", "Bundles"): from the
/// session's cache, else fetched one by one; but a batch of which the cache lacks more objects
/// than a request is worth against all the bundles (`ObjectBundle.worthFetching`), or of which
/// it lacks every one when it held no object at all before the run (a cold mirror), takes the
/// bundles the root's list names instead: the list, then every bundle, all at once
/// (`BundleMembers`, which says once a run what could not be had). A batch that lacks every
/// object is not enough on a mirror that has a tree: scattered changes rewrite every node of an
/// upper level, and taking the bundles there fetched 100 changes of 100,000 files as the whole
/// tree (5.5 MB, not 0.13 MB).
final class TreeLoader {
    let objects: ManifestObjects
    /// The list of bundles the root names (nil: none).
    let list: ObjectBundle.Named?
    let source: String
    /// What the tree may take in all (`max-manifest-size`): the bundles too.
    let bound: Int64
    private let members: BundleMembers
    /// The bundles the list names, once read (empty: it could not be); whether they were taken.
    private var listed: [ObjectBundle.Named]?
    private var taken = false
    /// The cache held no object when the run began.
    private let cold: Bool

    init(objects: ManifestObjects, list: ObjectBundle.Named?, source: String, bound: Int64) {
        self.objects = objects
        self.list = list
        self.source = source
        self.bound = bound
        members = BundleMembers(objects: objects, source: source, what: "the tree of manifest \(source)",
                                largest: ManifestTree.maximumObjectSize)
        cold = list != nil && objects.holdsNothing()
    }

    /// Each object of `batch`, from the bundles when many are missing; what came from them is
    /// cached as if fetched alone.
    func load(_ batch: [SHA256Digest]) throws(FerryError) -> [[UInt8]] {
        if let list, !taken {
            let missing = batch.count { !objects.has($0) }
            let all = cold && missing == batch.count && missing > 1
            // The bundles' size is known once their list is read (once a run): more than 8 missing first.
            if all || ObjectBundle.worthFetching(missing: missing, bundleBytes: 0) {
                if listed == nil { listed = bundles(listed: list) ?? [] }
                if let bundles = listed, !bundles.isEmpty,
                   all || ObjectBundle.worthFetching(missing: missing, bundleBytes: bundles.reduce(0) { $0 + $1.size }) {
                    taken = true
                    members.take(bundles)
                }
            }
        }
        return try members.gather(batch, keep: true, maximumSize: ManifestTree.maximumObjectSize, index: false)
    }

    /// The bundles `list` names (nil, said once a run, when it cannot be had or read).
    private func bundles(listed list: ObjectBundle.Named) -> [ObjectBundle.Named]? {
        do throws(FerryError) {
            guard let bytes = try objects.fetchUncached([list], source: source).first,
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

import FerryCore

/// How a pull loads one content index's objects (design.md "Delta", "Bundles"): from the
/// session's cache, else fetched. Where a read needs many objects the cache lacks, it fetches the
/// bundles the index's top names (`IndexBundle`, through `BundleMembers`) and takes them from
/// there; otherwise each object is its own request, so an update of a few pieces fetches only
/// those. The members the index is made of and its details go into the cache as if fetched one
/// by one; the bundles themselves do not.
final class IndexLoader {
    let top: SHA256Digest
    /// What the top names, once it was read (nil before; empty lists for a top without bundles).
    private var lists: IndexBundle.Lists?
    private let members: BundleMembers
    private var tried = (index: false, details: false)

    /// `source`: the manifest, for errors; `what`: the index, for what the run says.
    init(objects: ManifestObjects, top: SHA256Digest, source: String, what: String) {
        self.top = top
        members = BundleMembers(objects: objects, source: source, what: what, largest: ContentIndex.maximumObjectSize)
    }

    /// Each object of `batch`, for `ContentIndex.resolve`. A batch of which the cache holds
    /// nothing (a cold mirror), or too many missing to fetch one by one, takes the bundles.
    func load(_ batch: [SHA256Digest]) throws(FerryError) -> [[UInt8]] {
        if let lists, !tried.index, !lists.index.isEmpty {
            let missing = batch.count { !members.holds($0) && !members.objects.has($0) }
            if ObjectBundle.worthFetching(missing: missing, of: batch.count, bundleBytes: lists.indexBytes) {
                tried.index = true
                members.take(lists.index)
            }
        }
        let out = try members.gather(batch, keep: true, maximumSize: ContentIndex.maximumObjectSize, index: true)
        if lists == nil, let i = batch.firstIndex(of: top) {
            lists = IndexBundle.lists(ofTop: out[i]) ?? IndexBundle.Lists()
        }
        return out
    }

    /// Before details are loaded: `names` are wanted; when many of them are not in the cache, the
    /// detail bundles are fetched (a wish, not a batch: that alone is not many).
    func expectDetails(_ names: Set<SHA256Digest>) {
        guard let lists, !tried.details, !lists.details.isEmpty else { return }
        let missing = names.count { !members.holds($0) && !members.objects.has($0) }
        guard ObjectBundle.worthFetching(missing: missing, of: 0, bundleBytes: lists.detailBytes) else { return }
        tried.details = true
        members.take(lists.details)
    }

    /// The details read (`details`), which the run's cache keeps.
    private(set) var detailNames: [SHA256Digest] = []

    /// The details `names`. The cache keeps them through this run (`detailNames`) and drops them
    /// at the sweep of the next run that does not read them, so a run killed or stopped while it
    /// fetches the pieces does not fetch them again.
    func details(_ names: [SHA256Digest]) throws(FerryError) -> [[UInt8]] {
        let out = try members.gather(names, keep: true, retain: true, maximumSize: ContentIndex.maximumObjectSize, index: true)
        detailNames += names
        return out
    }
}

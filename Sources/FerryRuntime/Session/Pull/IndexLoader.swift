import FerryCore

/// How a pull loads one content index's objects (design.md "Delta", "Bundles"): from the
/// session's cache, else fetched. Where a read needs many objects the cache lacks, it fetches the
/// bundles the index's top names (`IndexBundle`: at most 1 MiB each, all at once) and takes them
/// from there; otherwise each object is its own request, so an update of a few pieces fetches
/// only those. A member is taken only as the object its bytes hash to, and only when the index
/// asks for that object: a bundle that is missing, damaged or lies costs the requests it was to
/// save, and the objects then come one by one. The members the index is made of go into the
/// cache (`keep`) as if fetched one by one; details and the bundles themselves do not.
final class IndexLoader {
    let objects: ManifestObjects
    let top: SHA256Digest
    /// The manifest, for errors.
    let source: String
    /// What the top names, once it was read (nil before; empty lists for a top without bundles).
    private var lists: IndexBundle.Lists?
    private var members: [SHA256Digest: [UInt8]] = [:]
    private var tried = (index: false, details: false)

    /// What the index is, for what the run says when its bundles cannot be had.
    let what: String

    init(objects: ManifestObjects, top: SHA256Digest, source: String, what: String) {
        self.objects = objects
        self.top = top
        self.source = source
        self.what = what
    }

    /// Each object of `batch`, for `ContentIndex.resolve`. A batch of which the cache holds
    /// nothing (a cold mirror), or too many missing to fetch one by one, takes the bundles.
    func load(_ batch: [SHA256Digest]) throws(FerryError) -> [[UInt8]] {
        if let lists, !tried.index, !lists.index.isEmpty {
            let missing = batch.count { members[$0] == nil && !objects.has($0) }
            if ManifestTree.worthBundles(missing: missing, of: batch.count, bundleBytes: lists.indexBytes) {
                tried.index = true
                take(lists.index)
            }
        }
        let out = try gather(batch, keep: true)
        if lists == nil, let i = batch.firstIndex(of: top) { lists = IndexBundle.lists(ofTop: out[i]) ?? IndexBundle.Lists() }
        return out
    }

    /// Before details are loaded: `count` of them are wanted; when that is many, the detail
    /// bundles are fetched (a wish, not a batch: none of it is cached, and that alone is not many).
    func expectDetails(_ count: Int) {
        guard let lists, !tried.details, !lists.details.isEmpty,
              ManifestTree.worthBundles(missing: count, of: 0, bundleBytes: lists.detailBytes) else { return }
        tried.details = true
        take(lists.details)
    }

    /// The details `names` (the cache does not keep them: a detail serves one update).
    func details(_ names: [SHA256Digest]) throws(FerryError) -> [[UInt8]] { try gather(names, keep: false) }

    private func gather(_ batch: [SHA256Digest], keep: Bool) throws(FerryError) -> [[UInt8]] {
        var out = [[UInt8]](repeating: [], count: batch.count)
        var rest: [Int] = []
        for (i, digest) in batch.enumerated() {
            if let bytes = members[digest] {
                out[i] = bytes
                if keep { objects.keep(digest, bytes) }
            } else {
                rest.append(i)
            }
        }
        guard !rest.isEmpty else { return out }
        let loaded = try objects.load(rest.map { batch[$0] }, source: source, maximumSize: ContentIndex.maximumObjectSize,
                                      index: true)
        for (i, bytes) in zip(rest, loaded) { out[i] = bytes }
        return out
    }

    /// Fetches `bundles` (each within the size the top gives) and takes their members; one
    /// that cannot be had or read adds nothing.
    private func take(_ bundles: [IndexBundle.Named]) {
        let largest = bundles.map(\.size).max() ?? 0
        let fetched: [[UInt8]]
        do throws(FerryError) {
            fetched = try objects.fetchUncached(bundles.map(\.sha256), source: source, maximumSize: largest)
        } catch {
            objects.bundlesUnread(of: what, error)
            return
        }
        let hasher = SHA256Hasher()
        for bytes in fetched {
            guard let read = ObjectBundle.members(bytes, largest: ContentIndex.maximumObjectSize,
                                                  hash: { hasher.digest(of: $0) }) else { continue }
            members.merge(read) { a, _ in a }
        }
    }
}

import FerryCore

/// What a loader took from bundles (`ObjectBundle`, design.md "Bundles"), for a format-2 tree
/// (`TreeLoader`) or a content index (`IndexLoader`): the bundles are fetched whole and not cached,
/// each checked against its name; a member is taken only as the object its bytes hash to, when
/// the reader asks for that object. Bundles that cannot be had or read add nothing (the others
/// still do) and are said once a run (`ManifestObjects.bundlesUnread`; other bytes than their names say are remembered
/// as any damaged object): the objects then come one by one.
final class BundleMembers {
    let objects: ManifestObjects
    /// The manifest, for errors.
    let source: String
    /// What the bundles are of, for what the run says when they cannot be had.
    let what: String
    /// The largest member a bundle of these may hold.
    let largest: Int
    private var members: [SHA256Digest: [UInt8]] = [:]

    init(objects: ManifestObjects, source: String, what: String, largest: Int) {
        self.objects = objects
        self.source = source
        self.what = what
        self.largest = largest
    }

    /// Fetches `bundles` (each within the size it is named with, all at once) and takes their members.
    func take(_ bundles: [ObjectBundle.Named]) {
        do throws(FerryError) {
            let fetched = try objects.fetchUncached(bundles, source: source)
            let hasher = SHA256Hasher()
            var unread = 0
            for bytes in fetched {
                guard let read = ObjectBundle.members(bytes, largest: largest, hash: { hasher.digest(of: $0) }) else {
                    unread += 1
                    continue
                }
                members.merge(read) { a, _ in a }
            }
            if unread > 0 { throw FerryError(.manifest, "\(unread) of the bundles \(what) names are not bundles") }
        } catch {
            objects.bundlesUnread(of: what, error)
        }
    }

    /// Whether a bundle gave `digest`.
    func holds(_ digest: SHA256Digest) -> Bool { members[digest] != nil }

    /// Each object of `batch`: a member where a bundle gave it, else from the cache or the remote
    /// (`ManifestObjects.load`). With `keep`, a member goes into the cache as if fetched alone,
    /// and from memory (the cache has it now) unless `retain` (a detail, which a plan may ask for
    /// again while the cache is still being written).
    func gather(_ batch: [SHA256Digest], keep: Bool, retain: Bool = false, maximumSize: Int,
                index: Bool) throws(FerryError) -> [[UInt8]] {
        var out = [[UInt8]](repeating: [], count: batch.count)
        var rest: [Int] = []
        for (i, digest) in batch.enumerated() {
            if let bytes = keep && !retain ? members.removeValue(forKey: digest) : members[digest] {
                out[i] = bytes
                if keep { objects.keep(digest, bytes) }
            } else {
                rest.append(i)
            }
        }
        if keep { objects.writeKept() }
        guard !rest.isEmpty else { return out }
        let loaded = try objects.load(rest.map { batch[$0] }, source: source, maximumSize: maximumSize, index: index)
        for (i, bytes) in zip(rest, loaded) { out[i] = bytes }
        return out
    }
}

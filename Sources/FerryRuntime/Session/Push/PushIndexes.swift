import Glibc
import FerryCore

/// The content indexes a push publishes (design.md "Delta"): every listed file from
/// `delta-min-size` gets one, so mirrors that hold an older version fetch only what changed. A
/// file whose content was published with an index keeps it (its objects are on the remote and in
/// the session's cache); another is read once more for its index, which is kept only if the file
/// still holds the content that was sent.
extension PushSync {
    struct Indexes {
        /// The entries to publish, with their indexes.
        var entries: [ManifestEntry]
        /// Index objects the remote does not hold yet, to send with the tree's.
        var new: [(sha256: SHA256Digest, bytes: [UInt8])] = []
        /// Every index object the publication names (what collection keeps).
        var names: [SHA256Digest] = []
    }

    ///
    /// With `remote-layout = objects`, a content stored as its pieces keeps the index that says so
    /// whatever `delta-min-size` says now (`pieces`: those sent this run; else the index it was
    /// published with): it is the only way to its bytes. Any other index says the file is one
    /// content object (always, with the tree layout).
    func indexed(_ entries: [ManifestEntry], published: Manifest?, pieces: [SHA256Digest: PieceUpload], objects: ManifestObjects,
                 root: LocalRoot) -> Indexes {
        let layout = session.remoteLayout
        // No entry names an index the publication does not name (collection would take its
        // objects): below delta-min-size, or with it off, an index kept from the last publication
        // (a failed file's entry, a file kept on the remote) goes.
        func with(_ e: ManifestEntry, _ index: ContentIndex.Reference?) -> ManifestEntry {
            e.index == index ? e : ManifestEntry(path: e.path, size: e.size, sha256: e.sha256, mtime: e.mtime, mode: e.mode, index: index)
        }
        var known: [SHA256Digest: ContentIndex.Reference] = [:]
        for e in published?.entries ?? [] { if let index = e.index { known[e.sha256] = index } }
        var out = Indexes(entries: [])
        out.entries.reserveCapacity(entries.count)
        // What the session's cache holds, listed once (not a lookup per object of every index).
        let cached = Set(objects.names())
        var named = Set<SHA256Digest>()
        // Each content is indexed once a run, whatever number of paths hold it.
        var scanned: [SHA256Digest: ContentIndex.Reference?] = [:]
        var sent = Set<SHA256Digest>()
        for entry in entries {
            if layout == .objects {
                // Stored as pieces: sent so this run, or published so before.
                if let upload = pieces[entry.sha256] {
                    out.entries.append(with(entry, upload.reference))
                    for object in upload.objects {
                        named.insert(object.sha256)
                        if !cached.contains(object.sha256.hex) && sent.insert(object.sha256).inserted { out.new.append(object) }
                    }
                    continue
                }
                if let kept = entry.index ?? known[entry.sha256], kept.storedAsPieces, let names = cachedNames(kept, objects, cached: cached) {
                    out.entries.append(with(entry, kept))
                    named.formUnion(names)
                    continue
                }
            }
            guard let minimum = session.deltaMinimum, let size = entry.size, size >= minimum else {
                out.entries.append(with(entry, nil))
                continue
            }
            var index: ContentIndex.Reference?
            // Kept (a failed file's last published entry), or published before with this content:
            // its objects are named from the cache.
            if let kept = (entry.index ?? known[entry.sha256])?.stored(asPieces: false), let names = cachedNames(kept, objects, cached: cached) {
                index = kept
                named.formUnion(names)
            } else if let done = scanned[entry.sha256] {
                index = done
            } else if let made = scan(entry, root: root) {
                index = made.reference
                scanned[entry.sha256] = made.reference
                for object in made.objects {
                    named.insert(object.sha256)
                    if !cached.contains(object.sha256.hex) { out.new.append(object) }
                }
            } else {
                scanned[entry.sha256] = .some(nil)
            }
            out.entries.append(with(entry, index))
        }
        out.names = Array(named)
        return out
    }

    /// The names of an index's objects when the session's cache holds every one of them (the
    /// remote then holds them too: the cache holds what this session placed); nil otherwise.
    func cachedNames(_ index: ContentIndex.Reference, _ objects: ManifestObjects, cached: Set<String>) -> [SHA256Digest]? {
        let names = ContentIndex.names(index, details: true) { objects.bytes(of: $0) }
        // The walk stops at a node the cache lacks: every name it found must be there.
        return names.allSatisfy { cached.contains($0.hex) } ? names : nil
    }

    /// The index of the local file `entry` lists, when it still holds that content.
    private func scan(_ entry: ManifestEntry, root: LocalRoot) -> (reference: ContentIndex.Reference, objects: [(sha256: SHA256Digest, bytes: [UInt8])])? {
        guard let fd = try? root.open(entry.path, for: "to index it") else { return nil }
        defer { close(fd) }
        guard let scanned = try? ContentScan.index(fd, what: root.display(entry.path)), scanned.sha256 == entry.sha256, scanned.size == entry.size else { return nil }
        return scanned.index
    }
}

import Glibc
import FerryCore

/// The observe stage's look at the local tree of a push.
extension PushSync {
    /// Stands for the hash of a file hashed while it is sent; never published (the upload's digest replaces it).
    static let unknownHash = SHA256Digest(hex: String(repeating: "0", count: 64))!

    /// What a push scan found: the local tree as manifest entries, the stat each was taken at,
    /// and what it could not use.
    struct LocalScan {
        let root: LocalRoot
        var entries: [ManifestEntry] = []
        var stats: [RelativePath: LocalEntry] = [:]
        var hashed = 0
        /// Hashed as they are sent (see `Upload.hashKnown`).
        var unhashed = Set<RelativePath>()
        /// Files that could not be read, and why: each fails alone.
        var unreadable: [(path: RelativePath, error: String)] = []
        /// Entries no manifest can list (symlinks, special files, names a manifest cannot carry).
        var skipped = 0
    }

    /// The files of the local tree as manifest entries. A file the hash cache does not vouch for is
    /// hashed now when the remote lists its path at its size (the hash decides whether it
    /// changed); otherwise it is an upload whatever its hash, and its hash is taken as it is sent,
    /// so its bytes are read once. What cannot be published (symlinks, special files, names a
    /// manifest cannot carry, and the session's own manifest name and `.ferry/`) is skipped with a
    /// warning said once per path, again only when the entry changes.
    func scanLocal(store: StateStore, published: Manifest?, hashingEverything: Bool) throws(FerryError) -> LocalScan {
        let root = try LocalRoot(path: session.local, create: false)
        var scan = try root.scan(expecting: try store.hashCacheCount(session: session.name))
        try store.loadHashes(session: session.name, into: &scan.tree)
        var out = LocalScan(root: root)
        var notices: [(key: String, signature: String, message: String)] = scan.warnings.map { ($0, "", $0) }
        var (files, skipped) = scan.tree.publishable()
        let filter = session.filter
        if !filter.isEmpty {
            files = files.filter { filter.admits($0.path) }
            skipped = skipped.filter { filter.admits($0.item.path, isDirectory: $0.item.entry.kind == .directory) }
        }
        for s in skipped {
            notices.append((s.item.path.string, "\(s.item.entry.kind.rawValue):\(s.item.entry.inode):\(s.item.entry.mtime.rfc3339)", s.message))
        }
        // The session's manifest is the remote's: a file of that name in the source is not content,
        // and neither is a `.ferry/` there (a pull mirror's partial files).
        let manifestPath = RelativePath(trusted: session.manifest)
        if root.stat(RelativePath(trusted: RelativePath.reservedTopLevel)) != nil {
            notices.append((RelativePath.reservedTopLevel, "", "skipped \(RelativePath.reservedTopLevel)/: it is ferry's own directory, never published"))
        }
        var fresh: [(RelativePath, CachedHash)] = []
        for item in files {
            if item.path == manifestPath {
                notices.append((item.path.string, "manifest", "skipped \(Printable.name(item.path.string)): it is this session's manifest name, which ferry publishes itself"))
                continue
            }
            var entry = item.entry
            var sha = item.verified
            if sha == nil, !hashingEverything,
               published.flatMap({ m in m.index(of: item.path).map { m.entries[$0].size } }).map({ $0 == nil || $0 == entry.size }) != true {
                sha = PushSync.unknownHash
                out.unhashed.insert(item.path)
            }
            if sha == nil {
                let hashed: CachedHash
                do { hashed = try root.hash(item.path) } catch {
                    out.unreadable.append((item.path, error.message))
                    continue
                }
                fresh.append((item.path, hashed))
                sha = hashed.sha256
                entry = LocalEntry(kind: .file, size: hashed.size, mtime: hashed.mtime, ctime: hashed.ctime, inode: hashed.inode, mode: entry.mode)
            }
            out.entries.append(ManifestEntry(path: item.path, size: entry.size, sha256: sha!, mtime: entry.mtime, mode: entry.mode & 0o777))
            out.stats[item.path] = entry
        }
        try store.saveHashes(session: session.name, fresh)
        out.hashed = fresh.count
        out.skipped = notices.count
        let unsaid = try store.unsaidNotices(session: session.name, kind: "push-skipped", notices.map { ($0.key, $0.signature) })
        let shown = notices.filter { unsaid.contains($0.key) }
        for notice in shown.prefix(20) { emit(.warning(message: notice.message)) }
        if shown.count > 20 { emit(.warning(message: "and \(shown.count - 20) more entries skipped; each is said once, again only when it changes")) }
        return out
    }
}

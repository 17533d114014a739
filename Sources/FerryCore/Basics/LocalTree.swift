/// The local root as one scan saw it, every path in byte order (`RelativePath.<`): the order of
/// the hash cache's primary key and of the manifests ferry writes. The Reconciler merges a
/// manifest with it in one pass, and the hash cache joins it in one pass, instead of looking a
/// million paths up in hash tables (which at that size costs more than the scan itself, and
/// three times the memory).
///
/// A file carries the hash ferry last verified for it, but only while that hash is valid for the
/// file's stat (`CachedHash.isValid`): a file edited since has none and is hashed again.
public struct LocalTree: Sendable {
    public struct Item: Sendable {
        public let path: RelativePath
        public let entry: LocalEntry
        /// The SHA-256 ferry verified for this file, still valid for `entry`.
        public fileprivate(set) var verified: SHA256Digest?

        public init(path: RelativePath, entry: LocalEntry) {
            self.path = path
            self.entry = entry
        }
    }

    public private(set) var items: [Item]
    /// `CachedHash.wantedMtime` of the verified files that have one (rare: a filesystem that
    /// could not store the manifest's mtime), kept beside the items so an item takes 104 bytes,
    /// not 120 (a scan of 1,000,000 files holds one each).
    private var wantedMtimes: [RelativePath: Timestamp] = [:]

    /// See `CachedHash.wantedMtime`: for a verified file only.
    public func wantedMtime(_ path: RelativePath) -> Timestamp? { wantedMtimes.isEmpty ? nil : wantedMtimes[path] }

    /// `items` must be in byte order with no path twice (a scan emits them so).
    public init(sorted items: [Item]) {
        precondition(zip(items, items.dropFirst()).allSatisfy { $0.path < $1.path }, "LocalTree items out of order")
        self.items = items
    }

    /// From a map of paths (tests, small trees), with the hashes of `known` that are valid.
    public init(_ entries: [RelativePath: LocalEntry], known: [RelativePath: CachedHash] = [:]) {
        items = entries.map { Item(path: $0.key, entry: $0.value) }.sorted { $0.path < $1.path }
        for i in items.indices {
            if let hash = known[items[i].path] { remember(hash, at: i) }
        }
    }

    public static let empty = LocalTree(sorted: [])

    /// Files, symlinks and special files (not directories): what a session manages.
    public var fileCount: Int { items.count(where: { $0.entry.kind != .directory }) }

    /// The position of `path`, by binary search.
    public func index(of path: RelativePath) -> Int? {
        RelativePath.index(of: path, count: items.count) { items[$0].path }
    }

    public subscript(path: RelativePath) -> LocalEntry? { index(of: path).map { items[$0].entry } }

    /// Keeps `hash` for the file at `index` if it is valid for what the scan saw there.
    public mutating func remember(_ hash: CachedHash, at index: Int, ignoringCtime: Bool = false) {
        guard hash.isValid(for: items[index].entry, ignoringCtime: ignoringCtime) else { return }
        items[index].verified = hash.sha256
        if let wanted = hash.wantedMtime {
            wantedMtimes[items[index].path] = wanted
        } else if !wantedMtimes.isEmpty {
            wantedMtimes[items[index].path] = nil
        }
    }

    /// Joins hash-cache rows that arrive in byte order (`compare(row, item path)`): one pass, no
    /// lookups. `next()` returns false when the rows are done; `path` is the current row's path
    /// as bytes; `hash()` decodes the current row (nil: the row vouches for nothing). `stale()` is
    /// called on each row that names no file of the tree (the file is gone, or is something else
    /// now), so the cache can drop it.
    public mutating func join<Failure: Error>(next: () throws(Failure) -> Bool, path: () -> UnsafeRawBufferPointer,
                                              hash: () -> CachedHash?, ignoringCtime: Bool = false, stale: () -> Void = {}) throws(Failure) {
        var i = 0
        while try next() {
            let rowPath = path()
            var c = 1
            while i < items.count {
                c = items[i].path.withBytes { RelativePath.compare($0, rowPath) }
                if c >= 0 { break }
                i += 1
            }
            guard c == 0, items[i].entry.kind == .file else {
                stale()
                continue
            }
            if let h = hash() { remember(h, at: i, ignoringCtime: ignoringCtime) }
            i += 1
        }
    }
}

extension LocalTree {
    /// This tree as another directory holds it once `place` has put each item there (a hard link,
    /// a new directory): `place` returns what stat shows there now, or nil for an item left out.
    /// A verified hash carries over to an item whose inode, size and mtime are those it was
    /// verified at (a hard link moves only the ctime); any other loses it.
    public func carried<Failure: Error>(by place: (Item) throws(Failure) -> LocalEntry?) throws(Failure) -> LocalTree {
        var out: [Item] = []
        out.reserveCapacity(items.count)
        var wanted: [RelativePath: Timestamp] = [:]
        for item in items {
            guard let now = try place(item) else { continue }
            var moved = Item(path: item.path, entry: now)
            let same = now.inode == item.entry.inode && now.size == item.entry.size && now.mtime == item.entry.mtime
            if same, now.kind == .file {
                moved.verified = item.verified
                wanted[item.path] = wantedMtime(item.path)
            }
            out.append(moved)
        }
        var tree = LocalTree(sorted: out)
        tree.wantedMtimes = wanted
        return tree
    }

    /// An entry no manifest can list, and why.
    public struct Skipped: Sendable {
        public let item: Item
        public let message: String
    }

    /// The items a manifest can list — regular files whose names a manifest can carry — and a
    /// warning for each other entry but directories. One rule for `ferry manifest build` and push.
    public func publishable() -> (files: [Item], skipped: [Skipped]) {
        var files: [Item] = []
        var skipped: [Skipped] = []
        for item in items {
            let name = Printable.name(item.path.string)
            switch item.entry.kind {
            case .directory: continue
            case .symlink: skipped.append(Skipped(item: item, message: "skipped symlink \(name): manifests list regular files only"))
            case .other: skipped.append(Skipped(item: item, message: "skipped \(name): not a regular file"))
            case .file:
                do {
                    _ = try RelativePath(validating: item.path.string)
                    files.append(item)
                } catch {
                    skipped.append(Skipped(item: item, message: "skipped \(name): \(error)"))
                }
            }
        }
        return (files, skipped)
    }
}

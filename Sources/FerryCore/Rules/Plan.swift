/// What one pull run must do to make the local root match the manifest. Built by `Reconciler`.
public struct Plan: Sendable {
    public enum Reason: String, Sendable {
        /// Nothing is at the path.
        case missing
        /// A regular file is there with other content (size or hash differ).
        case changed
        /// A symlink or special file is where the manifest wants a file.
        case notAFile = "not-a-file"
        /// A directory is where the manifest wants a file; it is removed when the file is placed.
        case directoryInTheWay = "directory-in-the-way"
    }

    public struct Download: Sendable {
        public let entry: ManifestEntry
        public let reason: Reason
    }

    /// Why a listed file cannot be placed this run.
    public enum Blocked: Sendable, Equatable {
        /// A directory holding `files` files is in the way, and `delete = no` keeps them.
        case directoryKept(files: Int)
        /// A directory holding `files` files is in the way, and deleting them would pass `max-delete`.
        case directoryOverCap(files: Int)
        /// A directory in the way holds `files` files that `exclude`/`include` protect.
        case directoryHoldsExcluded(files: Int)
    }

    /// Deletions the `max-delete` cap refused: how many, and out of how many files the mirror held.
    public struct RefusedDeletions: Sendable, Equatable {
        /// Files that would have gone: deletions, and what directories in the way hold.
        public let count: Int
        public let managed: Int
        public let limit: Int
        /// The deletions refused (files inside directories in the way are in `blocked`).
        public let paths: [RelativePath]
    }

    public var downloads: [Download] = []
    /// Content matches; mode or mtime must be set again.
    public var metadataFixes: [ManifestEntry] = []
    /// Files and symlinks the manifest no longer lists (only when the session deletes).
    public var deletions: [RelativePath] = []
    /// Directories that hold no manifest file, deepest first; removed only if empty after deletions.
    public var directoryRemovals: [RelativePath] = []
    /// Files, symlinks and special files where the manifest needs a directory. The manifest is the
    /// authority over the paths it lists: each is replaced by a directory when a file under it is
    /// placed, whatever `delete` says (like a changed file is replaced).
    public var replacedByDirectory: [RelativePath] = []
    /// Directories in the way of a listed file that may go (what they hold may be deleted, and is
    /// counted against `max-delete`): each is removed when its file is placed. Value: the files it holds.
    public var directoriesToReplace: [RelativePath: [RelativePath]] = [:]
    /// Listed files that cannot be placed this run, and why.
    public var blocked: [(path: RelativePath, reason: Blocked)] = []
    /// Set when `max-delete` refused this run's deletions (then `deletions` is empty).
    public var refusedDeletions: RefusedDeletions?
    /// Local files the manifest does not list, kept because the session does not delete.
    public var extrasKept = 0
    public var upToDate = 0
    /// Local files that may hold a listed file but whose hash is not known for their current stat
    /// (`Reconciler.needsHash`): planned as changed. Hash them and plan again to know.
    public var unhashed: [RelativePath] = []
    /// Files (not directories) the local root held when it was scanned: the files the session
    /// manages, which a `max-delete` percentage counts.
    public var localFiles = 0

    public var downloadBytes: Int64 { downloads.reduce(0) { $0 + ($1.entry.size ?? 0) } }
    /// Files that go from the mirror this run: deletions plus what replaced directories held.
    public var filesRemoved: Int { deletions.count + directoriesToReplace.values.reduce(0) { $0 + $1.count } }
    public var isEmpty: Bool {
        downloads.isEmpty && metadataFixes.isEmpty && deletions.isEmpty && blocked.isEmpty && replacedByDirectory.isEmpty
    }
}

/// What a session may delete: whether it deletes at all (`delete`), and how many per run (`max-delete`).
public struct DeletionRules: Sendable {
    public var delete: Bool
    public var cap: DeletionCap

    public init(delete: Bool, cap: DeletionCap) {
        self.delete = delete
        self.cap = cap
    }
}

/// Reconcile: remote (manifest) × local (scan) × last known (hash cache) → `Plan`. Pure.
/// "Does this path need a transfer?" is decided here and nowhere else, and so is what may be
/// removed to make room for what the manifest lists.
public enum Reconciler {
    /// True when the local file could match the entry but ferry holds no hash for it that is valid
    /// for its current stat, so the runtime must hash it before planning. Files of another size
    /// never need hashing.
    public static func needsHash(_ entry: ManifestEntry, local: LocalTree.Item) -> Bool {
        guard local.entry.kind == .file else { return false }
        if let size = entry.size, size != local.entry.size { return false }
        return local.verified == nil
    }

    /// For maps of paths (tests, small trees): `known` holds hashes of local files, cached or just
    /// computed; one counts only while it is valid for the file's current stat.
    public static func plan(manifest: Manifest, local: [RelativePath: LocalEntry], known: [RelativePath: CachedHash],
                            rules: DeletionRules, modeMask: UInt32 = 0o022, filter: PathFilter = PathFilter()) -> Plan {
        plan(manifest: manifest, local: LocalTree(local, known: known), rules: rules, modeMask: modeMask, filter: filter)
    }

    /// One merge of the manifest's entries with the local tree, both in byte order. `modeMask`
    /// clears permission bits a manifest may not set. What `filter` does not admit is left out on
    /// both sides: never downloaded, never deleted, not counted among the files the session manages.
    public static func plan(manifest: Manifest, local: LocalTree, rules: DeletionRules, modeMask: UInt32 = 0o022,
                            filter: PathFilter = PathFilter()) -> Plan {
        var plan = Plan()
        let listedEntries = filter.isEmpty ? manifest.entries : manifest.entries.filter { filter.admits($0.path) }
        let neededDirectories = directories(of: listedEntries)
        let (directoriesInTheWay, unlisted) = merge(listedEntries, with: local, modeMask: modeMask, into: &plan)
        for dir in neededDirectories {
            if let here = local[dir], here.kind != .directory { plan.replacedByDirectory.append(dir) }
        }
        plan.localFiles = local.fileCount
        var extras = Extras(inTheWay: directoriesInTheWay)
        extras.classify(unlisted, of: local.items, needed: neededDirectories, rules: rules, filter: filter, into: &plan)
        decideRemovals(extras, directoriesInTheWay: directoriesInTheWay, rules: rules, into: &plan)
        plan.downloads.sort { $0.entry.path < $1.entry.path }
        plan.replacedByDirectory.sort()
        plan.blocked.sort { $0.path < $1.path }
        return plan
    }

    /// The directories the listed entries need: every ancestor of each.
    private static func directories(of listedEntries: [ManifestEntry]) -> Set<RelativePath> {
        var neededDirectories = Set<RelativePath>()
        var lastParent: RelativePath?
        for listed in listedEntries {
            // Siblings come together in byte order: their parent's ancestors were added already.
            let parent = listed.path.parent
            if parent == lastParent { continue }
            lastParent = parent
            for a in listed.path.ancestors where !neededDirectories.insert(a).inserted { break }
        }
        return neededDirectories
    }

    /// What each listed file needs (into `plan`); returns the directories in its way and the local items no entry lists.
    private static func merge(_ listedEntries: [ManifestEntry], with local: LocalTree, modeMask: UInt32,
                              into plan: inout Plan) -> (directoriesInTheWay: [RelativePath: ManifestEntry], unlisted: [Int]) {
        var directoriesInTheWay: [RelativePath: ManifestEntry] = [:]
        var unlisted: [Int] = []
        let items = local.items
        var next = 0
        for listed in listedEntries {
            var here: LocalTree.Item?
            while next < items.count {
                let c = items[next].path.compare(listed.path)
                if c > 0 { break }
                if c == 0 { here = items[next] } else { unlisted.append(next) }
                next += 1
                if c == 0 { break }
            }
            var entry = listed
            if let mode = entry.mode, mode & modeMask != 0 {
                entry = ManifestEntry(path: entry.path, size: entry.size, sha256: entry.sha256, mtime: entry.mtime, mode: mode & ~modeMask)
            }
            guard let here else {
                plan.downloads.append(Plan.Download(entry: entry, reason: .missing))
                continue
            }
            switch here.entry.kind {
            case .directory:
                directoriesInTheWay[entry.path] = entry
            case .symlink, .other:
                plan.downloads.append(Plan.Download(entry: entry, reason: .notAFile))
            case .file:
                compare(entry, with: here, in: local, into: &plan)
            }
        }
        unlisted.append(contentsOf: next..<items.count)
        return (directoriesInTheWay, unlisted)
    }

    /// A listed file against the local file at its path: a download, a metadata fix, or up to date.
    private static func compare(_ entry: ManifestEntry, with here: LocalTree.Item, in local: LocalTree, into plan: inout Plan) {
        if needsHash(entry, local: here) { plan.unhashed.append(entry.path) }
        let sameSize = entry.size.map { $0 == here.entry.size } ?? true
        guard sameSize, here.verified == entry.sha256 else {
            plan.downloads.append(Plan.Download(entry: entry, reason: .changed))
            return
        }
        let modeDiffers = entry.mode.map { $0 != here.entry.mode & 0o777 } ?? false
        let mtimeDiffers = entry.mtime.map { $0 != here.entry.mtime && $0 != local.wantedMtime(entry.path) } ?? false
        if modeDiffers || mtimeDiffers {
            plan.metadataFixes.append(entry)
        } else {
            plan.upToDate += 1
        }
    }

    /// What is not listed: extras to delete or keep, and what directories in the way hold.
    private struct Extras {
        var inTheWay: [RelativePath: [RelativePath]] = [:]
        var extraDirectories: [RelativePath] = []
        var deletions: [RelativePath] = []
        /// Files in a directory in the way that the filter protects, by that directory.
        var protectedInTheWay: [RelativePath: Int] = [:]

        init(inTheWay directories: [RelativePath: ManifestEntry]) {
            for path in directories.keys { inTheWay[path] = [] }
        }

        /// Each unlisted item: filtered out, held by a directory in the way, an extra directory, a deletion, or kept.
        mutating func classify(_ unlisted: [Int], of items: [LocalTree.Item], needed neededDirectories: Set<RelativePath>, rules: DeletionRules,
                               filter: PathFilter, into plan: inout Plan) {
            for index in unlisted {
                let path = items[index].path, entry = items[index].entry
                if !filter.isEmpty, !filter.admits(path, isDirectory: entry.kind == .directory) {
                    if entry.kind != .directory { plan.localFiles -= 1 }
                    if !inTheWay.isEmpty, let owner = path.ancestors.first(where: { inTheWay[$0] != nil }), entry.kind != .directory {
                        protectedInTheWay[owner, default: 0] += 1
                    }
                    continue
                }
                // A listed file cannot also be a directory of listed files, so at most one ancestor is in the way.
                if !inTheWay.isEmpty, let owner = path.ancestors.first(where: { inTheWay[$0] != nil }) {
                    if entry.kind != .directory { inTheWay[owner]!.append(path) }
                    continue
                }
                if entry.kind == .directory {
                    if !neededDirectories.contains(path) { extraDirectories.append(path) }
                    continue
                }
                if neededDirectories.contains(path) { continue }  // replaced by a directory (above)
                if rules.delete { deletions.append(path) } else { plan.extrasKept += 1 }
            }
        }
    }

    /// What may go under `delete` and `max-delete`: deletions, directories in the way replaced or blocked, extra directories.
    private static func decideRemovals(_ extras: Extras, directoriesInTheWay: [RelativePath: ManifestEntry], rules: DeletionRules,
                                       into plan: inout Plan) {
        var deletions = extras.deletions
        // The cap counts every file that would go (deletions and what replaced directories hold)
        // against what the mirror holds before the run. Not against what the manifest adds: a
        // manifest that adds as many files as a directory of unrelated files holds must not make
        // deleting all of those look like half of the session's files.
        let inTheWayFiles = rules.delete ? extras.inTheWay.values.reduce(0) { $0 + $1.count } : 0
        let limit = rules.cap.limit(managed: plan.localFiles)
        let overCap = rules.delete && deletions.count + inTheWayFiles > limit
        if overCap {
            plan.refusedDeletions = Plan.RefusedDeletions(count: deletions.count + inTheWayFiles, managed: plan.localFiles, limit: limit,
                                                          paths: deletions.sorted())
            deletions = []
        }
        for (path, files) in extras.inTheWay {
            if let kept = extras.protectedInTheWay[path] {
                plan.blocked.append((path, .directoryHoldsExcluded(files: kept)))
            } else if files.isEmpty || (rules.delete && !overCap) {
                plan.directoriesToReplace[path] = files.sorted()
                plan.downloads.append(Plan.Download(entry: directoriesInTheWay[path]!, reason: .directoryInTheWay))
            } else {
                plan.blocked.append((path, rules.delete ? .directoryOverCap(files: files.count) : .directoryKept(files: files.count)))
            }
        }
        plan.deletions = deletions.sorted()
        if rules.delete && !overCap {
            // Deepest first, so children go before parents.
            plan.directoryRemovals = extras.extraDirectories.sorted {
                let a = $0.string.utf8.count(where: { $0 == UInt8(ascii: "/") })
                let b = $1.string.utf8.count(where: { $0 == UInt8(ascii: "/") })
                return a != b ? a > b : $0 < $1
            }
        }
    }
}

/// What one pull run must do to make the local root match the manifest. Built by `Reconciler`.
public struct Plan: Sendable {
    public enum Reason: String, Sendable {
        /// Nothing is at the path.
        case missing
        /// A regular file is there with other content (size or hash differ).
        case changed
        /// A symlink or special file is where the manifest wants a file.
        case notAFile = "not-a-file"
    }

    public struct Download: Sendable {
        public let entry: ManifestEntry
        public let reason: Reason
    }

    public var downloads: [Download] = []
    /// Content matches; mode or mtime must be set again.
    public var metadataFixes: [ManifestEntry] = []
    /// Files and symlinks the manifest no longer lists (only when the session deletes).
    public var deletions: [RelativePath] = []
    /// Directories that hold no manifest file, deepest first; removed only if empty after deletions.
    public var directoryRemovals: [RelativePath] = []
    /// Manifest paths where a local directory is in the way of a file.
    public var blocked: [RelativePath] = []
    /// Local files the manifest does not list, kept because the session does not delete.
    public var extrasKept = 0
    public var upToDate = 0

    public var downloadBytes: Int64 { downloads.reduce(0) { $0 + ($1.entry.size ?? 0) } }
    public var isEmpty: Bool { downloads.isEmpty && metadataFixes.isEmpty && deletions.isEmpty && blocked.isEmpty }
}

/// Reconcile: remote (manifest) × local (scan) × last known (hash cache) → `Plan`. Pure.
/// "Does this path need a transfer?" is decided here and nowhere else.
public enum Reconciler {
    /// True when the local file could match the entry but its hash is not known for its current
    /// state, so the runtime must hash it before planning. Files of another size never need hashing.
    public static func needsHash(_ entry: ManifestEntry, local: LocalEntry?, cached: CachedHash?) -> Bool {
        guard let local, local.kind == .file else { return false }
        if let size = entry.size, size != local.size { return false }
        return !(cached?.isValid(for: local) ?? false)
    }

    /// `hashes` holds the SHA-256 of every local file whose content is known for its current stat.
    public static func plan(manifest: Manifest, local: [RelativePath: LocalEntry], hashes: [RelativePath: String],
                            deleteExtras: Bool) -> Plan {
        var plan = Plan()
        var wanted = Set<RelativePath>(minimumCapacity: manifest.entries.count)
        var neededDirectories = Set<RelativePath>()
        for entry in manifest.entries {
            wanted.insert(entry.path)
            for a in entry.path.ancestors where !neededDirectories.insert(a).inserted { break }
            guard let here = local[entry.path] else {
                plan.downloads.append(Plan.Download(entry: entry, reason: .missing))
                continue
            }
            switch here.kind {
            case .directory:
                plan.blocked.append(entry.path)
            case .symlink, .other:
                plan.downloads.append(Plan.Download(entry: entry, reason: .notAFile))
            case .file:
                let sameSize = entry.size.map { $0 == here.size } ?? true
                guard sameSize, let hash = hashes[entry.path], hash == entry.sha256 else {
                    plan.downloads.append(Plan.Download(entry: entry, reason: .changed))
                    continue
                }
                let modeDiffers = entry.mode.map { $0 != here.mode & 0o777 } ?? false
                let mtimeDiffers = entry.mtime.map { $0 != here.mtime } ?? false
                if modeDiffers || mtimeDiffers {
                    plan.metadataFixes.append(entry)
                } else {
                    plan.upToDate += 1
                }
            }
        }
        var extraDirectories: [RelativePath] = []
        for (path, entry) in local where !wanted.contains(path) {
            if entry.kind == .directory {
                if !neededDirectories.contains(path) { extraDirectories.append(path) }
                continue
            }
            if deleteExtras { plan.deletions.append(path) } else { plan.extrasKept += 1 }
        }
        plan.deletions.sort()
        if deleteExtras {
            // Deepest first, so children go before parents.
            plan.directoryRemovals = extraDirectories.sorted {
                let a = $0.string.utf8.count(where: { $0 == UInt8(ascii: "/") })
                let b = $1.string.utf8.count(where: { $0 == UInt8(ascii: "/") })
                return a != b ? a > b : $0 < $1
            }
        }
        plan.downloads.sort { $0.entry.path < $1.entry.path }
        return plan
    }
}

import Glibc
import FerryCore

/// `ferry check`: the local tree hashed again, every file, whatever the hash cache says, against the
/// manifest the session last applied. It reports what the next sync would change, and the files
/// whose bytes changed while size, mtime, ctime and inode did not (bit rot, or a tool that wrote
/// in place and put the times back), which a sync cannot see because it trusts the cache.
public struct CheckReport: Sendable {
    public struct Item: Sendable {
        public let path: RelativePath
        /// What the next sync does about it: `download`, `replace`, `fix-metadata`, `delete`, `blocked`.
        public let action: String
        public let reason: String
    }
    public let session: String
    public let manifestVersion: Int64?
    /// Files the manifest lists.
    public let listed: Int
    /// Files hashed for the check.
    public let hashed: Int
    public let items: [Item]
    /// Files whose content differs from what the hash cache vouched for at the same stat.
    public let unnoticed: Int
}

public enum SessionCheck {
    /// Checks one session under its lock (a sync cannot change the tree meanwhile). With `record`,
    /// the hashes just taken replace the cache's, so the next sync acts on the truth (what
    /// `--repair` wants before it syncs); without, the check changes nothing.
    public static func run(session: SessionConfig, agent: AgentConfig, record: Bool, clock: any Clock,
                           progress: (_ done: Int, _ total: Int) -> Void = { _, _ in }) throws(FerryError) -> CheckReport {
        guard session.direction == .pull else {
            throw .usage("session '\(session.name)' is a push session; ferry check compares pull mirrors with their manifest")
        }
        let store = try StateStore(directory: agent.state, clock: clock)
        let lock = try SessionLock(stateDirectory: agent.state, session: session.name)
        defer { withExtendedLifetime(lock) {} }
        guard let manifest = try ManifestSource(session: session, state: agent.state).cached(record: store.session(session.name)) else {
            throw .usage("session '\(session.name)' has not applied a manifest from \(session.manifestURL) yet: there is nothing to check against",
                         hint: "run ferry sync now --session \(session.name) first")
        }

        var tree = LocalTree.empty
        var cached = LocalTree.empty
        var root: LocalRoot?
        if FileSystem.exists(session.local) {
            let opened = try LocalRoot(path: session.local, create: false)
            root = opened
            tree = try opened.scan().tree
            cached = tree
            try store.loadHashes(session: session.name, into: &cached)
        }
        let rules = DeletionRules(delete: session.delete, cap: session.maxDelete)
        // With no hash known, the plan names every file that could hold a listed one: hash them all.
        let candidates = Reconciler.plan(manifest: manifest, local: tree, rules: rules, modeMask: session.modeMask, filter: session.filter).unhashed
        var fresh: [(RelativePath, CachedHash)] = []
        var unnoticed = Set<RelativePath>()
        for (i, file) in candidates.enumerated() {
            guard let root, let index = tree.index(of: file) else { continue }
            let hash = try root.hash(file)
            tree.remember(hash, at: index)
            fresh.append((file, hash))
            if let vouched = cached.items[index].verified, let now = tree.items[index].verified, vouched != now { unnoticed.insert(file) }
            progress(i + 1, candidates.count)
        }
        if record { try store.saveHashes(session: session.name, fresh) }
        let plan = Reconciler.plan(manifest: manifest, local: tree, rules: rules, modeMask: session.modeMask, filter: session.filter)

        var items: [CheckReport.Item] = []
        for d in plan.downloads {
            let reason: String
            switch d.reason {
            case .missing: reason = "missing"
            case .changed: reason = unnoticed.contains(d.entry.path)
                ? "content changed while size, mtime, ctime and inode did not (the hash cache still vouched for the old bytes)"
                : "content differs from the manifest"
            case .notAFile: reason = "not a regular file"
            case .directoryInTheWay: reason = "a directory is where the manifest has a file"
            }
            items.append(.init(path: d.entry.path, action: d.reason == .directoryInTheWay ? "replace" : "download", reason: reason))
        }
        for p in plan.replacedByDirectory { items.append(.init(path: p, action: "replace", reason: "not a directory where the manifest needs one")) }
        for e in plan.metadataFixes { items.append(.init(path: e.path, action: "fix-metadata", reason: "mode or mtime differs from the manifest")) }
        for p in plan.deletions { items.append(.init(path: p, action: "delete", reason: "not in the manifest")) }
        for p in plan.refusedDeletions?.paths ?? [] { items.append(.init(path: p, action: "delete", reason: "not in the manifest (over max-delete)")) }
        for (p, _) in plan.blocked { items.append(.init(path: p, action: "blocked", reason: "a directory of kept files is where the manifest has a file")) }
        items.sort { $0.path < $1.path }
        return CheckReport(session: session.name, manifestVersion: manifest.version, listed: manifest.entries.count,
                           hashed: fresh.count, items: items, unnoticed: unnoticed.count)
    }
}

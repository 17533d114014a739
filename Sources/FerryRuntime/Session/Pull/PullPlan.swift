import FerryCore

/// What plan hands on: the plan for the tree the run writes (the local root, or with `layout =
/// generations` the generation it builds), and how many files were hashed for it.
struct Planned {
    let mirror: Mirror
    let fetched: FetchedManifest
    let manifest: Manifest
    let locate: (ManifestEntry) -> RelativePath
    let local: LocalSide
    let plan: Plan
    let hashed: Int
}

/// Plan: `Reconciler.plan` of the manifest taken against the tree the scan saw, with the hashes
/// the cache vouches for; files it cannot vouch for are hashed, join the cache, and the plan is
/// made again (`PullRun.plan`). While a build is pending, the cache rows of the paths it replaced
/// are its files', not the current generation's: those are not hashed again on every run (the
/// build is planned on its own, in `BuildStage`).
struct PlanStage {
    let pull: PullRun

    func run(_ released: Released) throws(FerryError) -> Onward<Planned> {
        let local = released.local
        let (plan, hashed) = try pull.plan(released.manifest, local: local,
                                           hashing: released.mirror.building == nil ? local.root : nil)
        return .go(Planned(mirror: released.mirror, fetched: released.fetched, manifest: released.manifest,
                           locate: released.locate,
                           local: local, plan: plan, hashed: hashed))
    }
}

/// Build: the tree this run writes. In place, the local root, created now if it is missing (it is
/// empty, unless someone just filled it: then planned again). With `layout = generations`, the
/// generation built beside the current one (`buildGeneration`: hard links, but for what the plan
/// replaces or deletes), planned on its own. Then the plan is said, and a plan that takes the
/// release before a rollout is refused if that release cannot be had (`refuseUnfetchable`).
struct BuildStage {
    let pull: PullRun

    func run(_ planned: Planned) throws(FerryError) -> Onward<Planned> {
        var (mirror, local, plan, hashed) = (planned.mirror, planned.local, planned.plan, planned.hashed)
        if let g = mirror.generations {
            if let built = try pull.buildGeneration(g, mirror: &mirror, from: local.root, tree: local.tree,
                                                    plan: plan) {
                local = LocalSide(root: built.root, tree: built.tree, warnings: [])
                let again = try pull.plan(planned.manifest, local: local, hashing: built.root)
                (plan, hashed) = (again.plan, hashed + again.hashed)
            }
        } else if local.root == nil {
            local = try pull.scan(LocalRoot(path: pull.session.local, create: true), expecting: 0)
            for w in local.warnings { pull.emit(.warning(message: w)) }
            if !local.tree.items.isEmpty {
                let again = try pull.plan(planned.manifest, local: local, hashing: local.root)
                (plan, hashed) = (again.plan, hashed + again.hashed)
            }
        }
        pull.sayPlanned(plan, hashed: hashed)
        try pull.refuseUnfetchable(plan, taking: planned.manifest, root: planned.fetched.manifest)
        let built = Planned(mirror: mirror, fetched: planned.fetched, manifest: planned.manifest,
                            locate: planned.locate, local: local,
                            plan: plan, hashed: hashed)
        guard local.root != nil else { return .end(DryRunReport(pull: pull).report(built)) }
        return .go(built)
    }
}

extension PullRun {
    /// The plan for `local`'s tree, with the files the hash cache cannot vouch for hashed first
    /// in `hashing` (they join the cache, and the plan is made again; the tree learns their
    /// hashes in place). With `layout = generations` this is what keeps an edit in the current
    /// generation out of the next one: a file whose stat moved is hashed, and if its bytes are not
    /// the manifest's it is planned as a download, so never linked. Returns how many were hashed.
    func plan(_ manifest: Manifest, local: LocalSide,
              hashing root: LocalRoot?) throws(FerryError) -> (plan: Plan, hashed: Int) {
        let rules = DeletionRules(delete: session.delete, cap: session.maxDelete)
        let plan = Reconciler.plan(manifest: manifest, local: local.tree, rules: rules, modeMask: session.modeMask,
                                   filter: session.filter)
        guard let root, !plan.unhashed.isEmpty else { return (plan, 0) }
        var fresh: [(RelativePath, CachedHash)] = []
        for path in plan.unhashed {
            guard let index = local.tree.index(of: path) else { continue }
            if let reason = options.stop.reason {
                throw FerryError(.stopped, "\(reason) while hashing local files; nothing was changed")
            }
            let h = try root.hash(path)
            local.tree.remember(h, at: index)
            fresh.append((path, h))
        }
        guard !fresh.isEmpty else { return (plan, 0) }
        try state.saveHashes(fresh)
        return (Reconciler.plan(manifest: manifest, local: local.tree, rules: rules, modeMask: session.modeMask,
                                filter: session.filter),
                fresh.count)
    }

    /// Says what the plan will do (`planned`).
    func sayPlanned(_ plan: Plan, hashed: Int) {
        emit(.planned(PlanSummary(transfers: plan.downloads.count, bytes: plan.downloadBytes,
                                  unknownSizes: plan.downloads.filter { $0.entry.size == nil }.count,
                                  metadataFixes: plan.metadataFixes.count,
                                  deletions: plan.deletions.count, upToDate: plan.upToDate, hashed: hashed,
                                  extrasKept: plan.extrasKept)))
    }

    /// Why a listed file cannot be placed, and what to do about it.
    func blockedMessage(_ path: RelativePath, _ why: Plan.Blocked, plan: Plan) -> String {
        let shown = Printable.name(session.local + "/" + path.string)
        switch why {
        case let .directoryKept(files):
            return "\(shown) is a directory holding \(Plural.count(files, "file")) where the manifest has a file; "
                   + "delete = no keeps them: move them away, or set delete = yes"
        case let .directoryOverCap(files):
            let cap = plan.refusedDeletions.map { " (\(Plural.count($0.count, "deletion")) in all, \($0.limit) "
                                                  + "allowed)" } ?? ""
            return "\(shown) is a directory holding \(Plural.count(files, "file")) where the manifest has a file; "
                   + "removing them would pass max-delete = \(session.maxDelete)\(cap): raise max-delete, or move the "
                   + "directory away"
        case let .directoryHoldsExcluded(files):
            return "\(shown) is a directory where the manifest has a file, and it holds \(Plural.count(files, "file")) "
                   + "that \(session.filter) keeps from being deleted: move them away, or change the patterns"
        }
    }
}

/// A dry run's last stage: the plan said, item by item, and a summary; nothing was changed.
struct DryRunReport {
    let pull: PullRun

    func run(_ planned: Planned) throws(FerryError) -> SyncResult {
        pull.sayPlanned(planned.plan, hashed: planned.hashed)
        try pull.refuseUnfetchable(planned.plan, taking: planned.manifest, root: planned.fetched.manifest)
        return report(planned)
    }

    func report(_ planned: Planned) -> SyncResult {
        let (plan, session) = (planned.plan, pull.session)
        sayItems(plan, tree: planned.local.tree)
        var parts: [String] = []
        let replaced = plan.directoriesToReplace.count + plan.replacedByDirectory.count
        let downloads = plan.downloads.count - plan.directoriesToReplace.count
        if downloads > 0 {
            let unknown = plan.downloads.filter { $0.entry.size == nil }.count
            let size = unknown == plan.downloads.count ? "size unknown"
                : Units.formatBytes(plan.downloadBytes) + (unknown > 0 ? " and \(unknown) of unknown size" : "")
            parts.append("download \(Plural.count(downloads, "file")) (\(size))")
        }
        if replaced > 0 { parts.append("replace \(replaced)") }
        if !plan.metadataFixes.isEmpty { parts.append("fix the mode or mtime of \(plan.metadataFixes.count)") }
        if plan.filesRemoved > 0 { parts.append("delete \(plan.filesRemoved)") }
        if !plan.blocked.isEmpty { parts.append("fail \(plan.blocked.count) (blocked)") }
        var text = parts.isEmpty ? "dry run: already in sync" : "dry run: would " + parts.joined(separator: ", ")
        if let refused = plan.refusedDeletions {
            text += "; max-delete = \(session.maxDelete) would refuse \(Plural.count(refused.count, "deletion")) "
                    + "(\(refused.limit) of \(Plural.count(refused.managed, "file")) allowed)"
        }
        return pull.result(message: text + "; nothing was changed")
    }

    private func sayItems(_ plan: Plan, tree: LocalTree) {
        for d in plan.downloads {
            if d.reason == .directoryInTheWay {
                let files = plan.directoriesToReplace[d.entry.path]?.count ?? 0
                pull.emit(.planItem(action: "replace", path: d.entry.path, reason: "a directory holding "
                                                                                   + "\(Plural.count(files, "file")) "
                                                                                   + "is where the manifest has a file",
                                   size: d.entry.size))
            } else {
                pull.emit(.planItem(action: "download", path: d.entry.path, reason: d.reason.rawValue,
                                    size: d.entry.size))
            }
        }
        for p in plan.replacedByDirectory {
            let kind = tree[p]?.kind.rawValue ?? "file"
            pull.emit(.planItem(action: "replace", path: p, reason: "a \(kind) is where the manifest needs a "
                                                                    + "directory", size: nil))
        }
        for e in plan.metadataFixes {
            pull.emit(.planItem(action: "fix-metadata", path: e.path, reason: nil, size: nil))
        }
        for (p, why) in plan.blocked {
            pull.emit(.planItem(action: "blocked", path: p, reason: pull.blockedMessage(p, why, plan: plan), size: nil))
        }
        for p in plan.deletions { pull.emit(.planItem(action: "delete", path: p, reason: nil, size: nil)) }
        if let refused = plan.refusedDeletions {
            for p in refused.paths {
                pull.emit(.planItem(action: "refused-delete", path: p, reason: "max-delete = "
                                                                               + "\(pull.session.maxDelete)",
                                                                               size: nil))
            }
        }
    }
}

import FerryCore

/// What prepare hands on: the run's downloads recorded as tasks (`tasks`, in the plan's order),
/// the deltas they take (`deltas`), and what fixing metadata did.
struct Prepared {
    let mirror: Mirror
    let manifest: Manifest
    let locate: (ManifestEntry) -> RelativePath
    let root: LocalRoot
    let tree: LocalTree
    let plan: Plan
    let tasks: [TransferTask]
    let preparation: DeltaPreparation
    let deltas: DeltaPreparation.Prepared
    /// The files whose manifest mtime the filesystem could not store.
    let unstorableMtimes: [(RelativePath, CachedHash)]
    /// Files that failed or were removed before any byte moved.
    let counts: TransferCounts
}

/// Prepare: the tasks recorded before any byte moves (`queue`); what moves no bytes done first
/// (the mode and mtime of files whose bytes are right, the files a path in the way blocks fail);
/// and the deltas of large files planned (`DeltaPreparation`: their content indexes read, the
/// bytes the mirror holds found). From here on, the session's caches keep what the run names.
struct PrepareStage {
    let pull: PullRun

    func run(_ planned: Planned) throws(FerryError) -> Onward<Prepared> {
        let (plan, manifest, mirror) = (planned.plan, planned.manifest, planned.mirror)
        let root = planned.local.root!
        let tasks = try queue(plan, manifest: manifest, locate: planned.locate, root: root)
        let (unstorable, counts) = try fixMetadata(plan, root: root)
        let tree = planned.local.tree
        let mapPath = pull.manifests.path + ".index-map"
        var preparation = DeltaPreparation(session: pull.session, root: root, objects: planned.fetched.objects,
                                           remote: pull.remote,
                                           emit: { pull.emit($0) }, fallback: { pull.fallbacks.say($0, $1, $2) },
                                           localHash: { tree.index(of: $0).flatMap { tree.items[$0].verified } },
                                           mapPath: mapPath)
        preparation.deletions = plan.deletions
        // While a generation is built, the version readers see is in the current one.
        if mirror.building != nil, let current = mirror.current {
            preparation.current = try? LocalRoot(path: current, create: false, role: .remote)
        }
        let deltas = preparation.prepare(plan.downloads, manifest: manifest)
        planned.fetched.objects.finishCaching()
        pull.sayWhatObjectsFound(planned.fetched.objects)
        pull.caches.arm(planned.fetched.objects, entries: manifest.entries, mapPath: mapPath)
        pull.caches.keep(deltas.keep)
        return .go(Prepared(mirror: mirror, manifest: manifest, locate: planned.locate, root: root, tree: tree,
                            plan: plan, tasks: tasks,
                            preparation: preparation, deltas: deltas, unstorableMtimes: unstorable, counts: counts))
    }

    /// The tasks recorded before any byte moves, and the state of paths no longer listed dropped;
    /// the rows of files already in place are done, whatever a killed run left them as. Returns
    /// the task of each download, in the plan's order.
    private func queue(_ plan: Plan, manifest: Manifest, locate: @escaping (ManifestEntry) -> RelativePath,
                       root: LocalRoot) throws(FerryError) -> [TransferTask] {
        let (session, store) = (pull.session, pull.store)
        let filter = session.filter
        for gone in try store.pruneTasks(session: session.name,
                                         keeping: { manifest.lists($0) && filter.admits($0) }) where gone.delayed {
            pull.emit(.delayedDue(path: gone.path, disposition: .cancel,
                                 reason: manifest.lists(gone.path) ? "\(filter) leaves the file out"
                                                                   : "the file is no longer in the manifest"))
        }
        try store.settleTasks(session: session.name,
                              transferring: Set(plan.downloads.map(\.entry.path) + plan.blocked.map(\.path)))
        let notBefore = (pull.options.notBefore ?? session.earliestBegin)?.time(from: pull.clock.now())
        let queued = try store.queueDownloads(session: session.name, entries: plan.downloads.map(\.entry),
                                              urlFor: { session.remote.url(for: locate($0)) }, notBefore: notBefore)
        for due in queued.due {
            pull.emit(.delayedDue(path: due.path, disposition: due.disposition, reason: due.reason))
        }
        for t in try store.dropDueDelayedTasks(session: session.name, keeping: Set(plan.downloads.map(\.entry.path))) {
            pull.emit(.delayedDue(path: t.path, disposition: .cancel, reason: "the file is already in place"))
        }
        root.removePartials(keeping: try store.unfinishedTaskIDs(session: session.name))
        root.replaceableDirectories = plan.directoriesToReplace.mapValues { Set($0) }
        return queued.tasks
    }

    /// What moves no bytes goes first: the mode and mtime of files whose bytes are right; the
    /// files a path in the way blocks fail. Returns the files whose mtime the filesystem could
    /// not store, and what failed or was removed.
    private func fixMetadata(_ plan: Plan, root: LocalRoot) throws(FerryError) -> ([(RelativePath, CachedHash)],
                                                                                   TransferCounts) {
        var unstorableMtimes: [(RelativePath, CachedHash)] = []
        var counts = TransferCounts()
        for entry in plan.metadataFixes {
            do {
                let now = try root.setMetadata(entry.path, mode: entry.mode, mtime: entry.mtime)
                let cache = CachedHash(now, sha256: entry.sha256, wanted: entry.mtime)
                if cache.wantedMtime != nil { unstorableMtimes.append((entry.path, cache)) }
                try pull.state.saveHashes([(entry.path, cache)])
                pull.emit(.metadataFixed(path: entry.path))
            } catch {
                counts.failed += 1
                pull.emit(.fileFailed(path: entry.path, error: error.message))
            }
        }
        for (path, why) in plan.blocked {
            counts.failed += 1
            pull.emit(.fileFailed(path: path, error: pull.blockedMessage(path, why, plan: plan)))
        }
        counts.deleted += try PullTransfers.report(root.takeChanges(), session: pull.session.name, store: pull.store,
                                                   emit: { pull.emit($0) })
        return (unstorableMtimes, counts)
    }
}

import Glibc
import FerryCore

/// One pull cycle for one session, in named stages (`cycle` calls them in turn, each hands the
/// next a value; only the store and the transfer engine hold state):
/// 1. **observe**: the manifest (a conditional GET), and meanwhile the local scan with the hash
///    cache joined to it; with `layout = generations` the mirror as the last run left it
///    (`prepareMirror`);
/// 2. **accept**: the manifest checked against what the mirror holds (`ManifestAcceptance`), and
///    only then remembered;
/// 3. **plan**: `Reconciler.plan`, with what the cache cannot vouch for hashed first; with
///    generations, the generation this run builds (`buildGeneration`) planned on its own;
/// 4. **transfer**: tasks recorded (`queue`), metadata fixed, downloads through the engine
///    (`PullTransfers`: partial file, checkpoints, verify, rename, state);
/// 5. **commit**: deletions once every transfer succeeded, capped; with generations, the switch;
/// 6. **report**: the outcome, its exit code and every reason it is not in sync.
final class PullSync: SessionWork {
    /// The remote and the session's mirrors (`PullSources`), opened when first needed: a poll that
    /// finds nothing new opens no mirror.
    private var opened: PullSources?
    /// The key sets this session trusts (`KeyChain`), read from the state when first needed.
    var chain: KeyChain?
    func sources(_ remote: Remote) -> PullSources {
        if let opened { return opened }
        let sources = PullSources(session: session, remote: remote, clock: clock, stop: options.stop)
        for (url, why) in sources.unopened { emit(.warning(message: "mirror \(url) cannot be used this run: \(why); its files come from the next source")) }
        opened = sources
        return sources
    }

    func cycle(store: StateStore, result: inout SyncResult) throws(FerryError) {
        let remote = try Remotes.open(session, clock: clock, stop: options.stop)
        var record = try store.session(session.name)
        if !options.dryRun, let failed = try finishSwitchCheck(record, store: store) {
            // A run killed during on-switch-check: that check ran now, and failed.
            result.exitCode = .someFilesFailed
            result.message = failed
            return
        }
        if record?.switchCheck != nil { record = try store.session(session.name) }
        var mirror = try prepareMirror(store: store)
        guard var observed = try observe(remote: remote, record: record, mirror: mirror, store: store) else { return }
        let fetched = observed.fetched
        // A new manifest waits in its staging file until it is accepted; one refused leaves no copy.
        var staged = fetched.staged
        defer { if let staged { unlink(staged) } }
        var (root, tree) = try takeLocal(&observed.local, mirror: mirror, store: store)
        var locate = try accept(fetched, record: record, localFiles: tree.fileCount, staged: &staged, remote: remote, store: store)
        // A phased rollout that leaves this machine out: the release before is what it takes.
        var names = fetched.names
        let manifest = try release(of: fetched.manifest, objects: fetched.objects, names: &names, store: store)
        if manifest.version != fetched.manifest.version { locate = try contentLocator(manifest) }
        if session.onSwitchCheck != nil, let version = manifest.version, version == record?.rejectedVersion {
            // Rolled back here by its check: the generation before stays until a newer version.
            result.message = "version \(version) failed on-switch-check on this machine (\(record?.rejectedReason ?? "")) and was rolled back: \(Printable.name(session.local)) stays on the generation before until a newer version is published"
            return
        }
        // The objects of the tree taken stay cached; those of trees before it go when the run
        // ends, whichever way it ends (not before: the objects just fetched are being written into
        // the cache meanwhile, on a thread of their own).
        // With them, the content indexes of the files it lists (`DeltaPreparation`): a run that
        // ends before it knows them sweeps nothing (the next one does).
        var indexObjects: [SHA256Digest]?
        let indexMap = manifests.path + ".index-map"
        defer {
            if !options.dryRun, let indexObjects {
                fetched.objects.sweep(keeping: names + indexObjects)
                IndexMap.write(indexMap, manifest.entries)
            }
        }
        let plan = try self.plan(manifest, mirror: &mirror, root: &root, tree: &tree, store: store, result: &result)
        try refuseUnfetchable(plan, taking: manifest, root: fetched.manifest)
        guard !options.dryRun, let root else { return reportDryRun(plan, scan: tree, result: &result) }

        let tasks = try queue(plan, manifest: manifest, locate: locate, root: root, store: store)
        var unstorableMtimes = try fixMetadata(plan, root: root, store: store, result: &result)
        let hashes = tree
        var preparation = DeltaPreparation(session: session, root: root, objects: fetched.objects, remote: remote, emit: { [unowned self] in self.emit($0) },
                                           localHash: { path in hashes.index(of: path).flatMap { hashes.items[$0].verified } }, mapPath: indexMap)
        preparation.deletions = plan.deletions
        // While a generation is built, the version readers see is in the current one.
        if mirror.building != nil, let current = mirror.current { preparation.current = try? LocalRoot(path: current, create: false, role: .remote) }
        let deltas = preparation.prepare(plan.downloads, manifest: manifest)
        countServed(fetched.objects, remote: remote)
        indexObjects = deltas.keep
        var localIOError: String?
        let stopped = try transfer(plan: plan, tasks: tasks, root: root, store: store, remote: remote, locate: locate, deltas: deltas,
                                   result: &result, localIOError: &localIOError, unstorableMtimes: &unstorableMtimes)
        sayUnstorable(unstorableMtimes)
        if stopped == nil { indexObjects? += preparation.cacheIndexes(plan.downloads, skipping: deltas) }

        try commitDeletions(plan, root: root, stopped: stopped, store: store, result: &result)
        let outcome = RunOutcome(localIOFailed: localIOError != nil, counts: result.counts, deletionsRefused: plan.refusedDeletions != nil,
                                 stopped: stopped != nil)
        result.exitCode = outcome.exitCode
        let unswitched = try commitGeneration(mirror, root: root, tree: tree, plan: plan, version: manifest.version, store: store, result: &result)
        report(plan, outcome: outcome, generation: unswitched, stopped: stopped, localIOError: localIOError, result: &result)
    }

    // MARK: observe

    /// What the observe stage found: the manifest, and the local side scanned meanwhile.
    struct Observed {
        let fetched: Fetched
        var local: LocalSide
    }

    /// Observe: the manifest is fetched and parsed while the local root is scanned, and the hash
    /// cache joined to the scan, on a second thread: on a large tree each takes seconds, and
    /// neither needs the other. The store is that thread's until it is joined. nil when the run
    /// ends here: the agent knows nothing under the root changed since a run left it in sync, and
    /// the remote's answer is 304 (no scan, no parse, no plan: cheap at rest).
    private func observe(remote: Remote, record: SessionRecord?, mirror: Mirror, store: StateStore) throws(FerryError) -> Observed? {
        let url = session.manifestURL
        var early: ManifestFetch?
        // Unless the manifest last taken is no longer one this session would take (trusted-keys
        // changed, or it expired): then it is read and checked again.
        if options.localUnchanged && stillTrusted(record) && mirror.settled {
            let answer = try requestManifest(record: record, remote: remote)
            if case .unchanged = answer {
                // A state from before migration 8 has no count yet: the hash cache stands for it.
                var files = record?.manifestFiles ?? 0
                if record?.manifestFiles == nil { files = try store.hashCacheCount(session: session.name) }
                emit(.manifestFetched(url: url, version: record?.manifestVersion, files: files, unchanged: true,
                                      signedBy: Self.named(record?.manifestSigners ?? [])))
                return nil
            }
            early = answer
        }
        let expected = try store.hashCacheCount(session: session.name)
        // Without a thread to be had, the scan runs after the fetch, on this one.
        let current = mirror.current
        let renewing = renewalPending
        let reading = try? BackgroundWork(name: "ferry-scan") { () throws(FerryError) -> LocalSide in
            try self.scanLocal(current, expecting: expected, store: store, renewing: renewing)
        }
        let fetched: Fetched
        do throws(FerryError) {
            let answer: ManifestFetch
            if let early { answer = early } else { answer = try requestManifest(record: record, remote: remote) }
            fetched = try readManifest(answer, record: record, remote: remote)
        } catch {
            _ = try? reading?.wait()
            throw error
        }
        let local: LocalSide
        if let reading { local = try reading.wait() } else { local = try scanLocal(current, expecting: expected, store: store, renewing: renewing) }
        return Observed(fetched: fetched, local: local)
    }

    /// The root and tree the later stages take, moved out of `local` (so the tree has one owner
    /// and is changed in place). The root is created only now that the manifest arrived (it is
    /// empty, unless someone just filled it): never by a dry run, nor with generations.
    private func takeLocal(_ local: inout LocalSide, mirror: Mirror, store: StateStore) throws(FerryError) -> (LocalRoot?, LocalTree) {
        if local.root == nil && !options.dryRun && mirror.generations == nil {
            local = try scan(LocalRoot(path: session.local, create: true), expecting: 0, store: store)
        }
        let tree = local.scan.tree
        local.scan.tree = .empty
        for w in local.scan.warnings { emit(.warning(message: w)) }
        return (local.root, tree)
    }

    /// Accept: the manifest is checked only now, against what the mirror holds (`localFiles`),
    /// and only then remembered; a refused manifest changes nothing. Returns where the bytes of
    /// each file it lists are under the remote.
    private func accept(_ fetched: Fetched, record: SessionRecord?, localFiles: Int, staged: inout String?, remote: Remote,
                        store: StateStore) throws(FerryError) -> (ManifestEntry) -> RelativePath {
        let (url, manifest) = (session.manifestURL, fetched.manifest)
        let locate = try contentLocator(manifest)
        try followKeys(of: manifest, remote: remote)
        let acceptance = acceptance(record, localFiles: localFiles)
        try acceptance.check(manifest, source: url)
        if let accepted = staged {
            try manifests.commit(staged: accepted)
            staged = nil
            try store.saveManifest(session: session.name, url: url, etag: fetched.etag, lastModified: fetched.lastModified, version: manifest.version,
                                  files: manifest.entries.count, signers: manifest.signers(trusting: trust.keys), expires: manifest.expires,
                                  trustFloor: acceptance.raisedFloor(taking: manifest))
        }
        emit(.manifestFetched(url: url, version: manifest.version, files: manifest.entries.count, unchanged: !fetched.changed,
                              signedBy: Self.named(manifest.signers(trusting: trust.keys)), metadataBytes: fetched.metadataBytes,
                              redirectedTo: fetched.redirectedTo))
        return locate
    }

    // MARK: plan

    /// Plan with the hashes the cache vouches for; files it cannot vouch for are hashed, join the
    /// cache, and the plan is made again (a hash counts only while it is valid for the file's
    /// stat). While a build is pending, the cache rows of the paths it replaced are its files',
    /// not the current generation's: those are not hashed again on every run (the build is
    /// planned on its own, and becomes `root` and `tree`).
    private func plan(_ manifest: Manifest, mirror: inout Mirror, root: inout LocalRoot?, tree: inout LocalTree, store: StateStore,
                      result: inout SyncResult) throws(FerryError) -> Plan {
        var plan = try planHashing(manifest, tree: &tree, root: mirror.building == nil ? root : nil, store: store, result: &result)
        if let g = mirror.generations, !options.dryRun,
           let built = try buildGeneration(g, mirror: &mirror, from: root, tree: tree, plan: plan, store: store) {
            root = built.root
            tree = built.tree
            plan = try planHashing(manifest, tree: &tree, root: root, store: store, result: &result)
        }
        result.plan = plan
        emit(.planned(PlanSummary(transfers: plan.downloads.count, bytes: plan.downloadBytes,
                                  unknownSizes: plan.downloads.filter { $0.entry.size == nil }.count, metadataFixes: plan.metadataFixes.count,
                                  deletions: plan.deletions.count, upToDate: plan.upToDate, hashed: result.hashed, extrasKept: plan.extrasKept)))
        return plan
    }

    // MARK: transfer

    /// The tasks recorded before any byte moves, and the state of paths no longer listed dropped;
    /// the rows of files already in place are done, whatever a killed run left them as. Returns
    /// the task of each download, in the plan's order.
    private func queue(_ plan: Plan, manifest: Manifest, locate: @escaping (ManifestEntry) -> RelativePath, root: LocalRoot,
                       store: StateStore) throws(FerryError) -> [TransferTask] {
        let filter = session.filter
        for gone in try store.pruneTasks(session: session.name, keeping: { manifest.lists($0) && filter.admits($0) }) where gone.delayed {
            emit(.delayedDue(path: gone.path, disposition: .cancel,
                             reason: manifest.lists(gone.path) ? "\(filter) leaves the file out" : "the file is no longer in the manifest"))
        }
        try store.settleTasks(session: session.name, transferring: Set(plan.downloads.map(\.entry.path) + plan.blocked.map(\.path)))
        let notBefore = (options.notBefore ?? session.earliestBegin)?.time(from: clock.now())
        let queued = try store.queueDownloads(session: session.name, entries: plan.downloads.map(\.entry),
                                              urlFor: { self.session.remote.url(for: locate($0)) }, notBefore: notBefore)
        for due in queued.due { emit(.delayedDue(path: due.path, disposition: due.disposition, reason: due.reason)) }
        for t in try store.dropDueDelayedTasks(session: session.name, keeping: Set(plan.downloads.map(\.entry.path))) {
            emit(.delayedDue(path: t.path, disposition: .cancel, reason: "the file is already in place"))
        }
        let tasks = queued.tasks
        root.removePartials(keeping: try store.unfinishedTaskIDs(session: session.name))
        root.replaceableDirectories = plan.directoriesToReplace.mapValues { Set($0) }
        return tasks
    }

    /// What moves no bytes goes first: the mode and mtime of files whose bytes are right; the
    /// files a path in the way blocks fail. Returns the files whose mtime the filesystem could not
    /// store.
    private func fixMetadata(_ plan: Plan, root: LocalRoot, store: StateStore, result: inout SyncResult) throws(FerryError) -> [(RelativePath, CachedHash)] {
        var unstorableMtimes: [(RelativePath, CachedHash)] = []
        for entry in plan.metadataFixes {
            do {
                let now = try root.setMetadata(entry.path, mode: entry.mode, mtime: entry.mtime)
                let cache = CachedHash(now, sha256: entry.sha256, wanted: entry.mtime)
                if cache.wantedMtime != nil { unstorableMtimes.append((entry.path, cache)) }
                try store.saveHashes(session: session.name, [(entry.path, cache)])
                emit(.metadataFixed(path: entry.path))
            } catch {
                result.counts.failed += 1
                emit(.fileFailed(path: entry.path, error: error.message))
            }
        }
        for (path, why) in plan.blocked {
            result.counts.failed += 1
            emit(.fileFailed(path: path, error: blockedMessage(path, why, plan: plan)))
        }
        result.counts.deleted += try PullTransfers.report(root.takeChanges(), session: session.name, store: store, emit: emit)
        return unstorableMtimes
    }

    /// Transfer: the downloads through the engine (`PullTransfers`; `tasks`: the task of each, in
    /// the same order), their counts added to the run's; returns why it stopped early, if it did.
    private func transfer(plan: Plan, tasks: [TransferTask], root: LocalRoot, store: StateStore, remote: Remote,
                          locate: @escaping (ManifestEntry) -> RelativePath, deltas: DeltaPreparation.Prepared, result: inout SyncResult, localIOError: inout String?,
                          unstorableMtimes: inout [(RelativePath, CachedHash)]) throws(FerryError) -> String? {
        guard !plan.downloads.isEmpty else { return options.stop.reason }
        let sources = sources(remote)
        let transfers = PullTransfers(session: session, root: root, store: store, sources: sources, locate: locate, deltas: deltas,
                                      observer: observer, emit: { [unowned self] in self.emit($0) }, plan: plan, stop: options.stop,
                                      gate: DiscretionGate(session: session, agent: agent, clock: clock))
        transfers.runLimits = options.limits
        transfers.run(plan.downloads, tasks: tasks, engine: engine)
        result.counts += transfers.counts
        if sources.hasMirrors {
            // What each source served, and its share of the bytes: what the mirrors saved the origin.
            result.sources = sources.summary
            let total = max(1, result.sources.reduce(0) { $0 + $1.bytes })
            for s in result.sources {
                emit(.sourceServed(source: s.source, bytes: s.bytes, requests: s.requests, share: Double(s.bytes) / Double(total), demoted: s.demoted))
            }
        }
        unstorableMtimes += transfers.unstorableMtimes
        if let error = transfers.localIOError { localIOError = localIOError ?? error }
        if let error = transfers.storeError { throw error }
        if let error = transfers.abort { throw error }
        if transfers.stopped == nil && transfers.unfinished > 0 {
            // Never report "in sync" with work left undone, whatever the reason.
            return "\(Plural.count(transfers.unfinished, "download")) did not finish"
        }
        return transfers.stopped
    }

    /// Said once a run: the mtimes the manifest gives that the filesystem could not store.
    private func sayUnstorable(_ unstorableMtimes: [(RelativePath, CachedHash)]) {
        if let (path, cache) = unstorableMtimes.first, let wanted = cache.wantedMtime {
            let others = unstorableMtimes.count > 1 ? " (and \(Plural.count(unstorableMtimes.count - 1, "more file")))" : ""
            emit(.warning(message: "this filesystem cannot store the mtime the manifest gives \(Printable.name(path.string))\(others): "
                + "it asked for \(wanted.rfc3339) and the filesystem stored \(cache.mtime.rfc3339); ferry keeps what was stored and does not set it again"))
        }
    }

    // MARK: commit and report

    /// Commit: deletions only after every transfer succeeded (data-safety rule 7), and capped (`max-delete`:
    /// a refusal is said, and `result` says why and what to do).
    private func commitDeletions(_ plan: Plan, root: LocalRoot, stopped: String?, store: StateStore, result: inout SyncResult) throws(FerryError) {
        let unfinished = result.counts.failed + result.counts.notDone
        if let refused = plan.refusedDeletions {
            result.message = "refused to delete \(Plural.count(refused.count, "file")): more than max-delete = \(session.maxDelete) allows (\(refused.limit) of the \(Plural.count(refused.managed, "file")) in \(Printable.name(session.local))); nothing was deleted"
            result.hint = "if this is intended, raise max-delete for session '\(session.name)' (a count like \(refused.count), or a percentage like 100%)"
            emit(.warning(message: result.message!))
        } else if !plan.deletions.isEmpty || !plan.directoryRemovals.isEmpty {
            if let stopped {
                if !plan.deletions.isEmpty { emit(.warning(message: "\(Plural.count(plan.deletions.count, "deletion")) postponed: \(stopped)")) }
            } else if unfinished > 0 {
                if !plan.deletions.isEmpty {
                    emit(.warning(message: "\(Plural.count(plan.deletions.count, "deletion")) postponed because \(Plural.count(unfinished, "file")) did not arrive"))
                }
            } else {
                for path in plan.deletions {
                    do {
                        try root.delete(path)
                        result.counts.deleted += 1
                        emit(.fileDeleted(path: path))
                    } catch {
                        result.counts.failed += 1
                        emit(.fileFailed(path: path, error: error.message))
                    }
                }
                try store.forgetHashes(session: session.name, plan.deletions)
                for dir in plan.directoryRemovals { root.removeDirectoryIfEmpty(dir) }
                try root.syncDirectories()
            }
        }
    }

    /// Commit, with `layout = generations`: the generation built becomes current once the run is
    /// otherwise in sync (`switchGeneration`). Returns why it did not, if it did not.
    private func commitGeneration(_ mirror: Mirror, root: LocalRoot, tree: LocalTree, plan: Plan, version: Int64?, store: StateStore,
                                  result: inout SyncResult) throws(FerryError) -> String? {
        guard let g = mirror.generations, let number = mirror.building else { return nil }
        guard result.exitCode == .inSync else {
            return "generation \(g.name(number)) is not complete, so \(Printable.name(session.local)) still shows the one before; the next run goes on with it"
        }
        var checkFailed: String?
        guard let moved = try switchGeneration(g, to: number, mirror: mirror, root: root, tree: tree, plan: plan, version: version, store: store,
                                               checkFailed: &checkFailed) else {
            if checkFailed != nil { result.exitCode = .someFilesFailed }
            return checkFailed
        }
        result.exitCode = .incomplete
        return "\(Plural.count(moved, "file")) of the current generation changed while generation \(g.name(number)) was built from it (edited in place?), so it was not switched to; the next run hashes \(moved == 1 ? "it" : "them") and goes on with it"
    }

    /// Report: every condition present is named, the one that decided the exit code (`outcome`)
    /// first.
    private func report(_ plan: Plan, outcome: RunOutcome, generation: String?, stopped: String?, localIOError: String?, result: inout SyncResult) {
        let attempted = plan.downloads.count + plan.metadataFixes.count + plan.blocked.count
        var reasons: [String] = []
        if let generation { reasons.append(generation) }
        if let localIOError { reasons.append(localIOError) }
        if result.counts.failed > 0 { reasons.append("\(result.counts.failed) of \(Plural.count(attempted, "file")) failed") }
        if let refusal = result.message { reasons.append(refusal) }
        let waiting = result.counts.waiting
        if waiting > 0 {
            let text = "the remote could not be reached for \(Plural.count(waiting, "file")); \(waiting == 1 ? "it waits" : "they wait") for connectivity and the next run tries again"
            if outcome.exitCode == .remoteOrManifest { reasons.insert(text, at: 0) } else { reasons.append(text) }
        }
        if let stopped { reasons.append("\(stopped); the next run resumes where this one stopped") }
        reasons += result.leftForLater("file")
        result.message = reasons.isEmpty ? nil : reasons.joined(separator: "; ")
    }

    /// Why a listed file cannot be placed, and what to do about it.
    private func blockedMessage(_ path: RelativePath, _ why: Plan.Blocked, plan: Plan) -> String {
        let shown = Printable.name(session.local + "/" + path.string)
        switch why {
        case let .directoryKept(files):
            return "\(shown) is a directory holding \(Plural.count(files, "file")) where the manifest has a file; delete = no keeps them: move them away, or set delete = yes"
        case let .directoryOverCap(files):
            let cap = plan.refusedDeletions.map { " (\(Plural.count($0.count, "deletion")) in all, \($0.limit) allowed)" } ?? ""
            return "\(shown) is a directory holding \(Plural.count(files, "file")) where the manifest has a file; removing them would pass max-delete = \(session.maxDelete)\(cap): raise max-delete, or move the directory away"
        case let .directoryHoldsExcluded(files):
            return "\(shown) is a directory where the manifest has a file, and it holds \(Plural.count(files, "file")) that \(session.filter) keeps from being deleted: move them away, or change the patterns"
        }
    }

    /// A dry run shows the plan, item by item, and a summary; it changes nothing.
    private func reportDryRun(_ plan: Plan, scan: LocalTree, result: inout SyncResult) {
        for d in plan.downloads {
            if d.reason == .directoryInTheWay {
                let files = plan.directoriesToReplace[d.entry.path]?.count ?? 0
                emit(.planItem(action: "replace", path: d.entry.path, reason: "a directory holding \(Plural.count(files, "file")) is where the manifest has a file", size: d.entry.size))
            } else {
                emit(.planItem(action: "download", path: d.entry.path, reason: d.reason.rawValue, size: d.entry.size))
            }
        }
        for p in plan.replacedByDirectory {
            let kind = scan[p]?.kind.rawValue ?? "file"
            emit(.planItem(action: "replace", path: p, reason: "a \(kind) is where the manifest needs a directory", size: nil))
        }
        for e in plan.metadataFixes { emit(.planItem(action: "fix-metadata", path: e.path, reason: nil, size: nil)) }
        for (p, why) in plan.blocked { emit(.planItem(action: "blocked", path: p, reason: blockedMessage(p, why, plan: plan), size: nil)) }
        for p in plan.deletions { emit(.planItem(action: "delete", path: p, reason: nil, size: nil)) }
        if let refused = plan.refusedDeletions {
            for p in refused.paths { emit(.planItem(action: "refused-delete", path: p, reason: "max-delete = \(session.maxDelete)", size: nil)) }
        }
        var parts: [String] = []
        let replaced = plan.directoriesToReplace.count + plan.replacedByDirectory.count
        let downloads = plan.downloads.count - plan.directoriesToReplace.count
        if downloads > 0 {
            let unknown = plan.downloads.filter { $0.entry.size == nil }.count
            let size = unknown == plan.downloads.count ? "size unknown" : Units.formatBytes(plan.downloadBytes) + (unknown > 0 ? " and \(unknown) of unknown size" : "")
            parts.append("download \(Plural.count(downloads, "file")) (\(size))")
        }
        if replaced > 0 { parts.append("replace \(replaced)") }
        if !plan.metadataFixes.isEmpty { parts.append("fix the mode or mtime of \(plan.metadataFixes.count)") }
        if plan.filesRemoved > 0 { parts.append("delete \(plan.filesRemoved)") }
        if !plan.blocked.isEmpty { parts.append("fail \(plan.blocked.count) (blocked)") }
        var text = parts.isEmpty ? "dry run: already in sync" : "dry run: would " + parts.joined(separator: ", ")
        if let refused = plan.refusedDeletions {
            text += "; max-delete = \(session.maxDelete) would refuse \(Plural.count(refused.count, "deletion")) (\(refused.limit) of \(Plural.count(refused.managed, "file")) allowed)"
        }
        result.message = text + "; nothing was changed"
    }

    // MARK: the local tree

    /// The local side of a cycle: the root when it exists (it is created only once a manifest is
    /// accepted, and never by a dry run), and what a scan of it sees.
    struct LocalSide {
        var root: LocalRoot?
        var scan: (tree: LocalTree, warnings: [String])
    }

    /// The scan of the directory readers see now (`Mirror.current`; nil: there is none yet).
    private func scanLocal(_ current: String?, expecting: Int, store: StateStore, renewing: Bool) throws(FerryError) -> LocalSide {
        guard let current, FileSystem.exists(current) else { return LocalSide(root: nil, scan: (.empty, [])) }
        return try scan(LocalRoot(path: current, create: false), expecting: expecting, store: store, renewing: renewing)
    }

    /// The plan for `tree`, with the files the hash cache cannot vouch for hashed first (they
    /// join the cache, and the plan is made again). With `layout = generations` this is what keeps
    /// an edit in the current generation out of the next one: a file whose stat moved is hashed,
    /// and if its bytes are not the manifest's it is planned as a download, so never linked.
    private func planHashing(_ manifest: Manifest, tree: inout LocalTree, root: LocalRoot?, store: StateStore,
                             result: inout SyncResult) throws(FerryError) -> Plan {
        let rules = DeletionRules(delete: session.delete, cap: session.maxDelete)
        let plan = Reconciler.plan(manifest: manifest, local: tree, rules: rules, modeMask: session.modeMask, filter: session.filter)
        guard let root, !plan.unhashed.isEmpty else { return plan }
        var fresh: [(RelativePath, CachedHash)] = []
        for path in plan.unhashed {
            guard let index = tree.index(of: path) else { continue }
            if let reason = options.stop.reason { throw FerryError(.stopped, "\(reason) while hashing local files; nothing was changed") }
            let h = try root.hash(path)
            tree.remember(h, at: index)
            fresh.append((path, h))
        }
        guard !fresh.isEmpty else { return plan }
        result.hashed += fresh.count
        if !options.dryRun { try store.saveHashes(session: session.name, fresh) }
        return Reconciler.plan(manifest: manifest, local: tree, rules: rules, modeMask: session.modeMask, filter: session.filter)
    }

    /// The root's tree with the hash cache joined to it. `renewing` (`expectCtimeMoves`): a row
    /// that differs from its file in ctime alone still vouches for it, and is written again.
    func scan(_ root: LocalRoot, expecting: Int, store: StateStore, renewing: Bool = false) throws(FerryError) -> LocalSide {
        var scan = try root.scan(expecting: expecting)
        try store.loadHashes(session: session.name, into: &scan.tree, ignoringCtime: renewing)
        if renewing && !options.dryRun {
            var rows: [(RelativePath, CachedHash)] = []
            for item in scan.tree.items {
                guard let sha = item.verified else { continue }
                rows.append((item.path, CachedHash(item.entry, sha256: sha, wanted: scan.tree.wantedMtime(item.path))))
                if rows.count >= 8192 {
                    try store.saveHashes(session: session.name, rows)
                    rows.removeAll(keepingCapacity: true)
                }
            }
            try store.saveHashes(session: session.name, rows)
            renewed()
        }
        return LocalSide(root: root, scan: scan)
    }
}

import Glibc
import FerryCore

/// One pull cycle for one session: manifest fetch (conditional GET) → local scan → the manifest
/// accepted (or refused) → hash what is unknown → plan → tasks recorded → transfers (partial file,
/// checkpoints) → verify → rename → state → deletions → events. A straight line: each stage hands
/// the next a value; only the store and the transfer engine hold state.
final class PullSync: SessionWork {
    func cycle(store: StateStore, result: inout SyncResult) throws(FerryError) {
        let remote = try Remotes.open(session)
        let url = session.manifestURL
        let record = try store.session(session.name)
        var mirror = try prepareMirror(store: store)
        // The local root is scanned, and the hash cache joined to the scan, on a second thread
        // while the manifest is fetched and parsed: on a large tree each takes seconds, and
        // neither needs the other. The store is that thread's until it is joined.
        // The agent knows nothing under the root changed since a run left it in sync: a 304 then
        // needs no scan, no parse and no plan (cheap at rest).
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
                                      signedBy: record?.manifestSigner?.description))
                return
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
        var local: LocalSide
        if let reading { local = try reading.wait() } else { local = try scanLocal(current, expecting: expected, store: store, renewing: renewing) }
        let manifest = fetched.manifest
        // A new manifest waits in its staging file until it is accepted; one refused leaves no copy.
        var staged = fetched.staged
        defer { if let staged { unlink(staged) } }
        if local.root == nil && !options.dryRun && mirror.generations == nil {
            // Created only now that the manifest arrived (it is empty, unless someone just filled it).
            local = try scan(LocalRoot(path: session.local, create: true), expecting: 0, store: store)
        }
        var root = local.root
        var tree = local.scan.tree
        local.scan.tree = .empty
        for w in local.scan.warnings { emit(.warning(message: w)) }

        // Accepted only now, against what the mirror holds; only then remembered. A refused
        // manifest changes nothing.
        let locate = try contentLocator(manifest)
        try acceptance(record, localFiles: tree.fileCount).check(manifest, source: url)
        if let accepted = staged {
            try manifests.commit(staged: accepted)
            staged = nil
            try store.saveManifest(session: session.name, url: url, etag: fetched.etag, lastModified: fetched.lastModified, version: manifest.version,
                                  files: manifest.entries.count, signer: manifest.signer(trusting: session.trustedKeys), expires: manifest.expires)
        }
        // The objects of the tree taken stay cached; those of trees before it go when the run
        // ends, whichever way it ends (not before: the objects just fetched are being written into
        // the cache meanwhile, on a thread of their own).
        defer { if !options.dryRun { fetched.objects.sweep(keeping: fetched.names) } }
        emit(.manifestFetched(url: url, version: manifest.version, files: manifest.entries.count, unchanged: !fetched.changed,
                              signedBy: manifest.signer(trusting: session.trustedKeys)?.description, metadataBytes: fetched.metadataBytes,
                              redirectedTo: fetched.redirectedTo))

        // Plan with the hashes the cache vouches for; files it cannot vouch for are hashed, join
        // the cache, and the plan is made again (a hash counts only while it is valid for the
        // file's stat).
        // While a build is pending, the cache rows of the paths it replaced are its files', not
        // the current generation's: those are not hashed again on every run (the build is
        // planned on its own below).
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
        guard !options.dryRun, let root else {
            reportDryRun(plan, scan: tree, result: &result)
            return
        }

        // Record the tasks before any byte moves, and drop state of paths no longer listed; the rows
        // of files already in place are done, whatever a killed run left them as.
        let filter = session.filter
        for gone in try store.pruneTasks(session: session.name, keeping: { manifest.lists($0) && filter.admits($0) }) where gone.delayed {
            emit(.delayedDue(path: gone.path, disposition: .cancel,
                             reason: manifest.lists(gone.path) ? "\(filter) leaves the file out" : "the file is no longer in the manifest"))
        }
        try store.settleTasks(session: session.name, transferring: Set(plan.downloads.map(\.entry.path) + plan.blocked.map(\.path)))
        let notBefore = (options.notBefore ?? session.earliestBegin)?.time(from: Timestamp.now())
        let queued = try store.queueDownloads(session: session.name, entries: plan.downloads.map(\.entry),
                                              urlFor: { self.session.remote.url(for: locate($0)) }, notBefore: notBefore)
        for due in queued.due { emit(.delayedDue(path: due.path, disposition: due.disposition, reason: due.reason)) }
        for t in try store.dropDueDelayedTasks(session: session.name, keeping: Set(plan.downloads.map(\.entry.path))) {
            emit(.delayedDue(path: t.path, disposition: .cancel, reason: "the file is already in place"))
        }
        let tasks = queued.tasks
        root.removePartials(keeping: try store.unfinishedTaskIDs(session: session.name))
        root.replaceableDirectories = plan.directoriesToReplace.mapValues { Set($0) }

        var localIOError: String?
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

        let stopped = try transfer(plan: plan, tasks: tasks, root: root, store: store, remote: remote, locate: locate, result: &result,
                                   localIOError: &localIOError, unstorableMtimes: &unstorableMtimes)
        if let (path, cache) = unstorableMtimes.first, let wanted = cache.wantedMtime {
            let others = unstorableMtimes.count > 1 ? " (and \(Plural.count(unstorableMtimes.count - 1, "more file")))" : ""
            emit(.warning(message: "this filesystem cannot store the mtime the manifest gives \(Printable.name(path.string))\(others): "
                + "it asked for \(wanted.rfc3339) and the filesystem stored \(cache.mtime.rfc3339); ferry keeps what was stored and does not set it again"))
        }

        // Deletions only after every transfer succeeded (rule 7), and capped.
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

        let attempted = plan.downloads.count + plan.metadataFixes.count + plan.blocked.count
        let outcome = RunOutcome(localIOFailed: localIOError != nil, counts: result.counts, deletionsRefused: plan.refusedDeletions != nil,
                                 stopped: stopped != nil)
        result.exitCode = outcome.exitCode
        // Every condition present is named, the one that decided the exit code first.
        var reasons: [String] = []
        if let g = mirror.generations, let number = mirror.building {
            if outcome.exitCode == .inSync {
                if let moved = try switchGeneration(g, to: number, mirror: mirror, root: root, tree: tree, plan: plan, store: store) {
                    result.exitCode = .incomplete
                    reasons.append("\(Plural.count(moved, "file")) of the current generation changed while generation \(g.name(number)) was built from it (edited in place?), so it was not switched to; the next run hashes \(moved == 1 ? "it" : "them") and goes on with it")
                }
            } else {
                reasons.append("generation \(g.name(number)) is not complete, so \(Printable.name(session.local)) still shows the one before; the next run goes on with it")
            }
        }
        if let localIOError { reasons.append(localIOError) }
        if result.counts.failed > 0 { reasons.append("\(result.counts.failed) of \(Plural.count(attempted, "file")) failed") }
        if let refusal = result.message { reasons.append(refusal) }
        if result.counts.waiting > 0 {
            let text = "the remote could not be reached for \(Plural.count(result.counts.waiting, "file")); \(result.counts.waiting == 1 ? "it waits" : "they wait") for connectivity and the next run tries again"
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

    /// The local side of a cycle: the root when it exists (it is created only once a manifest is
    /// accepted, and never by a dry run), and what a scan of it sees.
    private struct LocalSide {
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

    // MARK: layout = generations

    /// Where this cycle finds the version readers see, and, with `layout = generations`, the
    /// generation it builds.
    private struct Mirror {
        /// The directory readers see now; nil when there is none yet.
        var current: String?
        var generations: Generations?
        var at: Generations.Current = .none
        /// The generation being built: one an interrupted run left, or (once needed) this run's.
        var building: Int?
        /// Files of an interrupted build that are new or differ from the current generation.
        var changedEarlier: [GenerationFile] = []

        /// Nothing to convert: in place, or the symlink to a generation that is there.
        var settled: Bool {
            guard generations != nil else { return true }
            if case .generation = at { return current != nil }
            return false
        }

        var number: Int? {
            if case let .generation(n) = at { return n }
            return nil
        }
    }

    /// Finds the mirror as the last run left it and makes it what `layout` says: a symlink to
    /// ferry's generations turned back into a directory (`in-place`), and for `generations` what
    /// an interrupted run left cleared away, but for the build it goes on with. A dry run changes
    /// nothing.
    private func prepareMirror(store: StateStore) throws(FerryError) -> Mirror {
        let g = Generations(local: session.local)
        let at = g.current()
        guard session.layout == .generations else {
            guard !options.dryRun else { return Mirror(current: session.local) }
            if case let .generation(n) = at, FileSystem.exists(g.path(n)) {
                try g.makeInPlace(current: n)
                emit(.warning(message: "\(Printable.name(session.local)) was a symlink to generation g\(n) (layout = generations); it is the directory again, and the other generations are removed"))
            }
            // The other generations go (also what a conversion cut short left); that moves the
            // ctime of every file they share with this one: this run's scan renews their rows.
            if g.current() == .directory && FileSystem.exists(g.directory) && g.holdsOnlyGenerations() {
                try expectCtimeMoves()
                try g.removeAll()
            }
            return Mirror(current: session.local)
        }
        var mirror = Mirror(generations: g, at: at)
        switch at {
        case let .foreign(what):
            throw .localIO("local = \(session.local) is \(what), which layout = generations would replace with a symlink to its versions: nothing was changed",
                           hint: "point local at a path ferry may create, or at a directory it keeps; or set layout = in-place")
        case .none: break
        case .directory: mirror.current = session.local
        case let .generation(n): mirror.current = FileSystem.exists(g.path(n)) ? g.path(n) : nil
        }
        guard !options.dryRun else { return mirror }
        if g.untidy(current: mirror.number) { try expectCtimeMoves() }
        mirror.building = try g.tidy(current: mirror.number)
        return mirror
    }

    /// The generation this run builds beside the current one: hard links to the current one's
    /// files, but for those the plan replaces (a file edited in the current one among them, once
    /// its hash shows it) or deletes, then the plan for it. An interrupted build is gone on with (what it holds stays, and
    /// it is scanned again). nil when the current generation already is what the manifest lists:
    /// an interrupted build is then dropped.
    private func buildGeneration(_ g: Generations, mirror: inout Mirror, from current: LocalRoot?, tree: LocalTree, plan: Plan,
                                 store: StateStore) throws(FerryError) -> (root: LocalRoot, tree: LocalTree)? {
        guard !plan.isEmpty || !plan.directoryRemovals.isEmpty || !mirror.settled || mirror.building != nil else { return nil }
        if plan.isEmpty && plan.directoryRemovals.isEmpty && mirror.settled, let stale = mirror.building, let current {
            // The manifest went back to what the current generation holds.
            try expectCtimeMoves()
            try g.discard(stale)
            mirror.building = nil
            try renewHashes(tree, in: current, store: store)
            return nil
        }
        // Generations that will be past keep-generations once this one is current go first:
        // removing a hard link moves the ctime of the file its other names share, which must
        // happen before the links are made and their cache rows written, not after.
        if let n = mirror.number, session.keepGenerations > 0, !g.prunable(current: n, keep: session.keepGenerations - 1).isEmpty {
            try expectCtimeMoves()
            try g.prune(current: n, keep: session.keepGenerations - 1)
        }
        let resumed = mirror.building != nil
        let number: Int
        if let going = mirror.building { number = going } else { number = try g.startBuild(above: mirror.number, leavingRoomBelow: mirror.at == .directory) }
        mirror.building = number
        let root = try LocalRoot(path: g.path(number), create: false)
        root.sharesInodes = true
        var built = LocalTree.empty
        if let current {
            let replaced = Set(plan.downloads.map(\.entry.path)).union(plan.deletions)
            var linker = TreeLinker(source: current.rootFD, target: root.rootFD, shownTarget: g.path(number))
            var rows: [(RelativePath, CachedHash)] = []
            built = try linker.link(tree, skip: { replaced.contains($0.path) }) { path, hash throws(FerryError) in
                rows.append((path, hash))
                if rows.count >= 8192 {
                    try store.saveHashes(session: session.name, rows)
                    rows.removeAll(keepingCapacity: true)
                }
            }
            try store.saveHashes(session: session.name, rows)
            // The paths the build leaves out are gone from the next generation: their rows go,
            // as an in-place pull's deletions' do (the current one's files need none: no
            // manifest entry asks for them).
            try store.forgetHashes(session: session.name, plan.deletions)
            renewed()
        }
        if resumed {
            built = try scan(root, expecting: tree.items.count, store: store).scan.tree
            // What the interrupted runs placed in it: new, or another file than the current
            // generation's with other bytes (a copy made to change a mode is not new).
            mirror.changedEarlier = built.items.compactMap { item in
                guard item.entry.kind == .file else { return nil }
                if let i = tree.index(of: item.path) {
                    let before = tree.items[i]
                    if before.entry.inode == item.entry.inode || (item.verified != nil && before.verified == item.verified) { return nil }
                }
                return GenerationFile(path: item.path, size: item.entry.size)
            }
        }
        return (root, built)
    }

    /// Makes the finished generation current (`Generations.switchTo`), says so with the files it
    /// made new (for hooks), and removes generations beyond `keep-generations`. Not when a file
    /// it linked changed since (an edit in place in the current generation reaches the build
    /// through the shared inode): returns how many, and the next run sees to them.
    private func switchGeneration(_ g: Generations, to number: Int, mirror: Mirror, root: LocalRoot, tree: LocalTree, plan: Plan,
                                  store: StateStore) throws(FerryError) -> Int? {
        var touched = Set(plan.downloads.map(\.entry.path)).union(plan.metadataFixes.map(\.path)).union(plan.deletions).union(plan.replacedByDirectory)
        for files in plan.directoriesToReplace.values { touched.formUnion(files) }
        var moved = 0
        for item in tree.items where item.entry.kind == .file && item.verified != nil && !touched.contains(item.path) {
            if let now = root.stat(item.path), now == item.entry { continue }
            moved += 1
        }
        if moved > 0 { return moved }
        try root.syncDirectories()
        try g.switchTo(number, from: mirror.at)
        let deleted = Set(plan.deletions)
        var files = mirror.changedEarlier.filter { !deleted.contains($0.path) && root.stat($0.path) != nil }
        let earlier = Set(files.map(\.path))
        for d in plan.downloads where !earlier.contains(d.entry.path) {
            files.append(GenerationFile(path: d.entry.path, size: root.stat(d.entry.path)?.size ?? d.entry.size ?? 0))
        }
        files.sort { $0.path < $1.path }
        emit(.generationSwitched(generation: g.name(number), directory: g.path(number), previous: mirror.current == nil ? nil : mirror.number.map(g.name),
                                 changed: files.count, files: files))
        // Only with keep-generations = 0, or after builds that did not finish: the files the
        // removed ones shared with this one have new ctimes, and their cache rows are renewed.
        if !g.prunable(current: number, keep: session.keepGenerations).isEmpty {
            try expectCtimeMoves()
            try g.prune(current: number, keep: session.keepGenerations)
            try renewHashes(tree, in: root, store: store)
        }
        return nil
    }

    /// Marks, durably, that ferry is about to move the ctime of files whose rows the hash cache
    /// holds (removing hard links they share with the current generation): if the run is cut
    /// short before it writes their rows again, the next scan takes rows that differ from the
    /// file in ctime alone (`renewing`), and writes them again, instead of hashing every file.
    private func expectCtimeMoves() throws(FerryError) {
        guard !renewalPending else { return }
        // The manifests directory may not be there yet: a state directory replaced whole (a
        // damaged database) meets old generations before any manifest was kept.
        try FileSystem.makePrivateDirectory(manifests.directory)
        try FileSystem.writeAtomically(renewalMarker, bytes: [])
    }

    /// The rows are written again: what `expectCtimeMoves` marked is done.
    private func renewed() {
        if renewalPending {
            unlink(renewalMarker)
            FileSystem.syncDirectory(containing: renewalMarker)
        }
    }

    private var renewalMarker: String { manifests.path + ".renew-hashes" }
    private var renewalPending: Bool { FileSystem.exists(renewalMarker) }

    /// Renews the cache rows of the files of `tree` whose hash was valid when it was scanned or
    /// linked and whose inode, size and mtime are still those: ferry's own removal of another
    /// name of the same file moved only their ctime.
    private func renewHashes(_ tree: LocalTree, in root: LocalRoot, store: StateStore) throws(FerryError) {
        var rows: [(RelativePath, CachedHash)] = []
        for item in tree.items where item.entry.kind == .file {
            guard let sha = item.verified, let now = root.stat(item.path), now.inode == item.entry.inode, now.size == item.entry.size,
                  now.mtime == item.entry.mtime, now.ctime != item.entry.ctime else { continue }
            rows.append((item.path, CachedHash(now, sha256: sha, wanted: tree.wantedMtime(item.path))))
            if rows.count >= 8192 {
                try store.saveHashes(session: session.name, rows)
                rows.removeAll(keepingCapacity: true)
            }
        }
        try store.saveHashes(session: session.name, rows)
        renewed()
    }

    /// The root's tree with the hash cache joined to it. `renewing` (`expectCtimeMoves`): a row
    /// that differs from its file in ctime alone still vouches for it, and is written again.
    private func scan(_ root: LocalRoot, expecting: Int, store: StateStore, renewing: Bool = false) throws(FerryError) -> LocalSide {
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



    /// A manifest read from the remote, or from the cache when the remote says it is unchanged.
    private struct Fetched {
        let manifest: Manifest
        /// The remote sent new bytes (not a 304).
        let changed: Bool
        /// Where the new bytes wait to become the cached manifest once it is accepted (nil: unchanged, or a dry run).
        let staged: String?
        let etag: String?
        let lastModified: String?
        /// The session's metadata objects, and the hashes of those of this manifest's tree (format 2).
        let objects: ManifestObjects
        let names: [SHA256Digest]
        /// What came over the network for it: the manifest (not for a 304) and the objects not cached.
        let metadataBytes: Int64
        /// Where the manifest's bytes came from, when a redirect took the request elsewhere.
        var redirectedTo: String? = nil
    }

    /// The rules a manifest must pass for this session (`localFiles`: what the mirror holds).
    private func acceptance(_ record: SessionRecord?, localFiles: Int) -> ManifestAcceptance {
        ManifestAcceptance(session: session.name, now: Timestamp.now(),
                           appliedVersion: record?.manifestURL == session.manifestURL ? record?.manifestVersion : nil,
                           localFiles: localFiles, allowRollback: session.allowRollback, allowEmpty: session.allowEmpty,
                           trustedKeys: session.trustedKeys, requireExpiry: session.requireExpiry)
    }

    /// Whether the manifest last taken (as the state records it) would still be taken as it is:
    /// signed by a key `trusted-keys` still lists (when it lists any), with an expiry when the
    /// session requires one, and not expired.
    private func stillTrusted(_ record: SessionRecord?) -> Bool {
        if let expires = record?.manifestExpires, expires < Timestamp.now() { return false }
        guard !session.trustedKeys.isEmpty else { return true }
        if session.requireExpiry && record?.manifestExpires == nil { return false }
        return record?.manifestSigner.map(session.trustedKeys.contains) ?? false
    }

    /// Asks the remote for the manifest, conditionally when the cache holds the last one.
    private func requestManifest(record: SessionRecord?, remote: Remote) throws(FerryError) -> ManifestFetch {
        let manifests = self.manifests
        return try manifests.fetch(from: remote, record: record, cached: record?.manifestURL == session.manifestURL && FileSystem.exists(manifests.path),
                                   options: options, emit: { [unowned self] in self.emit($0) }).required()
    }

    /// The manifest an answer stands for, parsed (the cached one for a 304), with the tree of a
    /// format-2 root read: its objects from the cache, or fetched. A root this session would
    /// refuse (unsigned, rolled back, expired) is refused before any object is fetched; the
    /// caller checks the whole manifest against the mirror before anything is recorded.
    private func readManifest(_ fetched: ManifestFetch, record: SessionRecord?, remote: Remote) throws(FerryError) -> Fetched {
        let url = session.manifestURL
        let objects = manifests.objects(remote: remote, keeps: !options.dryRun)
        func resolved(_ root: Manifest) throws(FerryError) -> (Manifest, [SHA256Digest]) {
            guard root.tree != nil else { return (root, []) }
            try acceptance(record, localFiles: 0).check(root, source: url)
            let read = try objects.resolve(root, source: url, maximumSize: session.maxManifestSize)
            if objects.damaged > 0 {
                emit(.warning(message: "\(Plural.count(objects.damaged, "cached metadata object")) of session '\(session.name)' did not match \(objects.damaged == 1 ? "its" : "their") hash (damaged on this machine's disk): fetched again"))
            }
            return read
        }
        switch fetched {
        case .unchanged:
            let bytes = try FileSystem.readFile(manifests.path, limit: Int(session.maxManifestSize))
            let (manifest, names) = try resolved(try Manifests.parse(bytes, source: url))
            return Fetched(manifest: manifest, changed: false, staged: nil, etag: nil, lastModified: nil, objects: objects, names: names,
                           metadataBytes: objects.fetchedBytes)
        case let .missing(error):
            throw error
        case let .fetched(bytes, etag, lastModified, redirectedTo):
            // Staged on disk before parsing, so the bytes are freed as soon as they are parsed.
            let staged = options.dryRun ? nil : try manifests.stage(bytes)
            do {
                let (manifest, names) = try resolved(try Manifests.parse(bytes, source: url))
                return Fetched(manifest: manifest, changed: true, staged: staged, etag: etag, lastModified: lastModified, objects: objects,
                               names: names, metadataBytes: Int64(bytes.count) + objects.fetchedBytes, redirectedTo: redirectedTo)
            } catch {
                if let staged { unlink(staged) }
                throw error
            }
        }
    }

    /// Where the bytes of each file `manifest` lists are under the remote (`RemoteLayout`): at its
    /// path, or (`"layout": "objects"`) in the content objects beside the manifest, which must
    /// then be under the remote.
    private func contentLocator(_ manifest: Manifest) throws(FerryError) -> (ManifestEntry) -> RelativePath {
        let layout = manifest.layout
        guard layout != .tree else { return { $0.path } }
        guard let beside = session.manifestPath else {
            throw .manifest("manifest \(session.manifestURL) says its files are stored as objects beside it (layout \(layout.rawValue)), but it is not under the remote \(session.remote.url): refused, nothing was changed",
                            hint: "name the manifest relative to the remote (manifest = PATH), or set remote to the directory that holds it")
        }
        return { layout.location(of: $0, manifest: beside) }
    }

    /// Runs the downloads (`tasks`: the task of each, in the same order); returns why it stopped
    /// early, if it did.
    private func transfer(plan: Plan, tasks: [TransferTask], root: LocalRoot, store: StateStore, remote: Remote,
                          locate: @escaping (ManifestEntry) -> RelativePath, result: inout SyncResult, localIOError: inout String?,
                          unstorableMtimes: inout [(RelativePath, CachedHash)]) throws(FerryError) -> String? {
        guard !plan.downloads.isEmpty else { return options.stop.reason }
        let transfers = PullTransfers(session: session, root: root, store: store, remote: remote, locate: locate,
                                      observer: observer, emit: { [unowned self] in self.emit($0) }, plan: plan, stop: options.stop,
                                      gate: DiscretionGate(session: session, agent: agent))
        transfers.runLimits = options.limits
        transfers.run(plan.downloads, tasks: tasks, engine: engine)
        result.counts += transfers.counts
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
}

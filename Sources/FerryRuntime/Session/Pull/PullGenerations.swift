import Glibc
import FerryCore

/// `layout = generations` for a pull: the mirror as the last run left it, the generation a run
/// builds beside the current one (hard links, then the plan's changes), and the switch to it once
/// the run is in sync; the hash cache kept valid for the files the generations share.
extension PullRun {
    /// The generation this run builds beside the current one: hard links to the current one's
    /// files, but for those the plan replaces (a file edited in the current one among them, once
    /// its hash shows it) or deletes, then the plan for it. An interrupted build is gone on with
    /// (what it holds stays, and it is scanned again). nil when the current generation already is
    /// what the manifest lists: an interrupted build is then dropped.
    func buildGeneration(_ g: Generations, mirror: inout Mirror, from current: LocalRoot?, tree: LocalTree,
                         plan: Plan) throws(FerryError) -> (root: LocalRoot, tree: LocalTree)? {
        guard !plan.isEmpty || !plan.directoryRemovals.isEmpty || !mirror.settled || mirror.building != nil else {
            return nil
        }
        if plan.isEmpty && plan.directoryRemovals.isEmpty && mirror.settled, let stale = mirror.building, let current {
            // The manifest went back to what the current generation holds.
            try state.expectCtimeMoves()
            try g.discard(stale)
            mirror.building = nil
            try renewHashes(tree, in: current)
            return nil
        }
        // Generations that will be past keep-generations once this one is current go first:
        // removing a hard link moves the ctime of the file its other names share, which must
        // happen before the links are made and their cache rows written, not after.
        if let n = mirror.number, session.keepGenerations > 0, !g.prunable(current: n,
                                                                           keep: session.keepGenerations - 1).isEmpty {
            try state.expectCtimeMoves()
            try g.prune(current: n, keep: session.keepGenerations - 1)
        }
        let resumed = mirror.building != nil
        let number: Int
        if let going = mirror.building {
            number = going
        } else {
            number = try g.startBuild(above: mirror.number, leavingRoomBelow: mirror.at == .directory)
        }
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
                    try state.saveHashes(rows)
                    rows.removeAll(keepingCapacity: true)
                }
            }
            try state.saveHashes(rows)
            // The paths the build leaves out are gone from the next generation: their rows go,
            // as an in-place pull's deletions' do (the current one's files need none: no
            // manifest entry asks for them).
            try store.forgetHashes(session: session.name, plan.deletions)
            state.ctimesRenewed()
        }
        if resumed {
            built = try scan(root, expecting: tree.items.count).tree
            // What the interrupted runs placed in it: new, or another file than the current
            // generation's with other bytes (a copy made to change a mode is not new).
            mirror.changedEarlier = built.items.compactMap { item in
                guard item.entry.kind == .file else { return nil }
                if let i = tree.index(of: item.path) {
                    let before = tree.items[i]
                    let same = before.entry.inode == item.entry.inode
                        || (item.verified != nil && before.verified == item.verified)
                    if same {
                        return nil
                    }
                }
                return GenerationFile(path: item.path, size: item.entry.size)
            }
        }
        return (root, built)
    }

    /// Makes the finished generation current (`Generations.switchTo`), runs `on-switch-check`
    /// (`runSwitchCheck`: a failure switches back and is said in `checkFailed`), says so with the
    /// files it made new (for hooks), and removes generations beyond `keep-generations`. Not when a
    /// file it linked changed since (an edit in place in the current generation reaches the build
    /// through the shared inode): returns how many, and the next run sees to them.
    func switchGeneration(_ g: Generations, to number: Int, mirror: Mirror, root: LocalRoot, tree: LocalTree,
                          plan: Plan, version: Int64?,
                          checkFailed: inout String?) throws(FerryError) -> Int? {
        var touched = Set(plan.downloads.map(\.entry.path)).union(plan.metadataFixes.map(\.path))
            .union(plan.deletions).union(plan.replacedByDirectory)
        for files in plan.directoriesToReplace.values { touched.formUnion(files) }
        var moved = 0
        for item in tree.items where item.entry.kind == .file && item.verified != nil && !touched.contains(item.path) {
            if let now = root.stat(item.path), now == item.entry { continue }
            moved += 1
        }
        if moved > 0 { return moved }
        try root.syncDirectories()
        // Where a failed check returns to: the current generation, or the directory a conversion
        // moves to the number below.
        let previous = mirror.at == .directory ? number - 1 : mirror.current == nil ? nil : mirror.number
        let check = session.onSwitchCheck.map { _ in
            SwitchCheck(generation: number, previous: previous, version: version)
        }
        if let check { try store.recordSwitchCheck(session: session.name, check) }
        try g.switchTo(number, from: mirror.at)
        if let check, let failure = try runSwitchCheck(check, g) {
            checkFailed = failure
            return nil
        }
        let deleted = Set(plan.deletions)
        var files = mirror.changedEarlier.filter { !deleted.contains($0.path) && root.stat($0.path) != nil }
        let earlier = Set(files.map(\.path))
        for d in plan.downloads where !earlier.contains(d.entry.path) {
            files.append(GenerationFile(path: d.entry.path, size: root.stat(d.entry.path)?.size ?? d.entry.size ?? 0))
        }
        files.sort { $0.path < $1.path }
        emit(.generationSwitched(generation: g.name(number), directory: g.path(number),
                                 previous: mirror.current == nil ? nil : mirror.number.map(g.name),
                                 changed: files.count, files: files))
        // Only with keep-generations = 0, or after builds that did not finish: the files the
        // removed ones shared with this one have new ctimes, and their cache rows are renewed.
        if !g.prunable(current: number, keep: session.keepGenerations).isEmpty {
            try state.expectCtimeMoves()
            try g.prune(current: number, keep: session.keepGenerations)
            try renewHashes(tree, in: root)
        }
        return nil
    }

    /// Renews the cache rows of the files of `tree` whose hash was valid when it was scanned or
    /// linked and whose inode, size and mtime are still those: ferry's own removal of another
    /// name of the same file moved only their ctime.
    func renewHashes(_ tree: LocalTree, in root: LocalRoot) throws(FerryError) {
        var rows: [(RelativePath, CachedHash)] = []
        for item in tree.items where item.entry.kind == .file {
            guard let sha = item.verified, let now = root.stat(item.path), now.inode == item.entry.inode,
                  now.size == item.entry.size,
                  now.mtime == item.entry.mtime, now.ctime != item.entry.ctime else { continue }
            rows.append((item.path, CachedHash(now, sha256: sha, wanted: tree.wantedMtime(item.path))))
            if rows.count >= 8192 {
                try state.saveHashes(rows)
                rows.removeAll(keepingCapacity: true)
            }
        }
        try state.saveHashes(rows)
        state.ctimesRenewed()
    }
}

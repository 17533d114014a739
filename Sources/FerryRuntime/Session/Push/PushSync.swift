import Glibc
import FerryCore

/// One push cycle for one session, in named stages (`cycle` calls them in turn, each hands the
/// next a value):
/// 1. **observe**: the manifest ferry last published on the remote, and what another writer
///    changed in it (`remoteState`); the local tree through the hash cache (`scanLocal`); what this
///    session placed on the remote, and with `remote-layout = objects` the content it stores;
/// 2. **plan**: `PushPlanner` (FerryCore) decides uploads, removals of remote paths that changed
///    type, capped deletions and the manifest to publish;
/// 3. **resolve**: the files the plan changes are checked on the remote (someone else's edits,
///    `editedOnRemote`); what changed there is decided by `conflict` (`PushPlanner.resolve`) and
///    planned again;
/// 4. **transfer**: the task table settled (`settleTasks`); what is in the way removed; uploads to
///    temporary names under the remote's `.ferry/upload/` through the engine, each moved to its
///    final name and checked there (`PushTransfers`);
/// 5. **commit** and **publish**: deletions, and the directories they emptied; the new manifest,
///    last, under a temporary name and moved into place; objects no manifest names collected;
/// 6. **report**: the outcome, its exit code and why (also when a stage ends the run early).
///
/// A reader never sees a partial file under a final name. With the tree layout the manifest does
/// not move with the files, though: during a push (or after an interrupted one) a reader may find
/// new bytes under the last manifest's hash, which its hash check refuses (exit 1, never a mixed
/// tree with exit 0) until the push completes. A file that fails fails alone: the manifest goes on
/// listing what the remote holds at its path.
///
/// Plain WebDAV cannot continue a PUT: an interrupted upload starts again from zero.
final class PushSync: SessionWork {
    /// `sign-key`, read at the start of each cycle.
    var signingKeys: [SigningKey] = []
    /// The remote's manifest as this run read it (`remoteState`), to publish over only that.
    var seen: Seen?
    /// How the metadata objects this run wrote were verified.
    var objectVerifications: [UploadVerification: Int] = [:]

    /// The session's state: for a dry run, `DryRun`, which keeps nothing.
    private(set) var state: SessionState!

    func cycle(state: SessionState, result: inout SyncResult) throws(FerryError) {
        self.state = state
        let store = state.store
        let (remote, writer) = try openRemote()
        // One publisher of a remote at a time (`SessionState.lockPublisher`), held for the cycle.
        let publishing = try state.lockPublisher()
        defer { withExtendedLifetime(publishing) {} }
        // The key that signs what this run publishes: read before anything is sent, so a key that
        // cannot be read stops the run at once.
        signingKeys = try session.signKeys.map { (file) throws(FerryError) -> SigningKey in
            try SigningKey(file: file, use: SigningKey.use(in: session))
        }
        guard let observed = try observe(remote: remote, writer: writer, store: store, result: &result) else { return }
        let first = plan(observed, keeping: observed.unreadable, repairing: [], unlisting: [])
        guard let plan = try resolve(first, observed, store: store, result: &result) else { return }
        if options.dryRun { return reportDryRun(plan) }
        let present = Set(observed.scan.entries.map(\.path))
        try settleTasks(plan, present: present, writer: writer, store: store)
        if plan.isEmpty && observed.reissue == nil { return endUnchanged(plan, observed, store: store, result: &result) }
        // Numbered before anything is sent: past the largest version nothing can be published,
        // so nothing is uploaded for it either.
        let version = try ManifestVersion.following(observed.published?.version, now: clock.now(), manifest: "the remote's manifest \(session.manifestURL)")
        if plan.isEmpty, let reissue = observed.reissue {
            emit(.warning(message: "nothing changed, but the published manifest \(reissue): publishing version \(version)"))
        }
        let sent = try transfer(plan, observed, present: present, store: store, result: &result)
        if let refusal = refuseDeletions(plan, result: &result) { result.message = refusal }
        guard sent.complete else { return reportUnpublished(plan, observed, sent, result: &result) }
        let deletionsFailed = try commitDeletions(plan, writer: writer, store: store, result: &result)
        guard let entries = try listedEntries(plan, observed, sent, version: version, store: store, result: &result),
              try publish(entries, version: version, observed, sent, store: store, result: &result) else { return }
        report(plan, observed, sent, version: version, deletionsFailed: deletionsFailed, result: &result)
    }

    /// The session's remote, which a push must be able to write, with the manifest on it.
    private func openRemote() throws(FerryError) -> (Remote, RemoteWriting) {
        guard !session.manifest.contains("://") else {
            throw .usage("session '\(session.name)' pushes, so its manifest must live on its remote: manifest = \(session.manifest) is another URL",
                         hint: "set manifest to a name relative to the remote, like manifest.json")
        }
        let remote = try Remotes.open(session, clock: clock, stop: options.stop)
        guard let writer = remote as? RemoteWriting else {
            throw .usage("the remote of session '\(session.name)' cannot be written to")
        }
        return (remote, writer)
    }

    // MARK: observe

    /// What the observe stage found, handed to every later stage.
    struct Observed {
        let remote: Remote
        let writer: RemoteWriting
        /// Why the published manifest must be published again though nothing changed (`reissueReason`).
        let reissue: String?
        /// The remote's manifest now; the paths it says differently from the one this session last
        /// published (another writer's); and that version (nil: none was published by this session).
        let published: Manifest?
        let changedOnRemote: [RelativePath]
        let lastVersion: Int64?
        let scan: LocalScan
        /// What this session placed on the remote: files at their paths (the tree layout), and
        /// content objects.
        let placedFiles: [RelativePath: PlacedFile]
        let placedObjects: [RelativePath: (digest: SHA256Digest, record: PlacedFile)]
        /// Everything placed is checked this run (`verify-interval`), as of `checkedAt`.
        let checkAll: Bool
        let checkedAt: Timestamp
        /// `remote-layout = objects`: the content the remote stores, by SHA-256 (`storedContent`).
        let stored: Set<SHA256Digest>
        /// The pieces of the published files stored as their pieces (`storedPieces`), read once a
        /// run from the session's cache (before collection sweeps it).
        let publishedPieces: [SHA256Digest: [SHA256Digest]]
        /// How those pieces are stored (`storedForms`), from the same read.
        let storedForms: [SHA256Digest: ContentIndex.Stored?]

        /// Files that could not be read: the remote keeps (and the manifest lists) what it has.
        var unreadable: Set<RelativePath> { Set(scan.unreadable.map(\.path)) }
    }

    /// Observe: the remote's manifest, the local tree, and what this session placed on the remote.
    /// nil when the run ends here: the agent knows nothing under the root changed since a run
    /// published it all, and the remote still holds what was published.
    private func observe(remote: Remote, writer: RemoteWriting, store: StateStore, result: inout SyncResult) throws(FerryError) -> Observed? {
        let record = try store.session(session.name)
        let reissue = reissueReason(record)
        // When the remote still holds what was published (304), there is nothing to parse, scan or send.
        guard let (published, changedOnRemote, lastVersion) = try remoteState(remote, record: record, store: store,
                                                                             unchangedEnds: options.localUnchanged && reissue == nil) else {
            // Unchanged (304): what the state recorded of the manifest still holds.
            emit(.manifestFetched(url: session.manifestURL, version: record?.manifestVersion, files: record?.manifestFiles ?? 0, unchanged: true))
            return nil
        }
        let remoteUnchanged = changedOnRemote.isEmpty && lastVersion != nil
        emit(.manifestFetched(url: session.manifestURL, version: published?.version, files: published?.entries.count ?? 0,
                              unchanged: remoteUnchanged))
        if options.localUnchanged && remoteUnchanged && reissue == nil { return nil }

        // Content objects are named by their hash: every file's is known before it is sent.
        let layout = session.remoteLayout
        let scan = try scanLocal(store: store, published: published, hashingEverything: session.remote.backend.abilities.contains(.hashesBeforeSending) || layout == .objects)
        // A file that cannot be read fails alone: the remote keeps (and the manifest lists) what it has.
        for (path, error) in scan.unreadable { emit(.fileFailed(path: path, error: error)) }
        result.counts.failed += scan.unreadable.count

        // What the remote says differently from what this session placed there, whether another
        // writer published a manifest or someone changed a file: never overwritten blindly.
        // What this session placed: files at their paths (the tree layout) and content objects.
        var placed = try store.placedFiles(session: session.name)
        var placedObjects: [RelativePath: (digest: SHA256Digest, record: PlacedFile)] = [:]
        for (path, record) in placed {
            if let digest = RemoteLayout.contentHash(at: path, beside: session.manifest) { placedObjects[path] = (digest, record) }
        }
        placed = placed.filter { placedObjects[$0.key] == nil }
        // Everything placed is checked on a local directory (cheap), and over HTTP once
        // `verify-interval` passed since the last such check.
        let checkedAt = clock.now()
        let lastCheck = try store.remoteChecked(session: session.name)
        let checkAll = session.remote.backend.abilities.contains(.cheapInspection) || lastCheck.map { checkedAt.timeInterval - $0.timeInterval >= session.verifyInterval } ?? true
        let pieceLists = published.map { $0.layout == .objects ? self.publishedPieces(of: $0.entries, objects: manifests.objects(remote: remote)) : [:] } ?? [:]
        let publishedPieces = pieceLists.mapValues { $0.map(\.object) }
        let stored = layout == .objects ? try storedContent(published: published, pieces: publishedPieces, placed: placedObjects, checking: checkAll,
                                                            writer: writer, store: store) : []
        return Observed(remote: remote, writer: writer, reissue: reissue, published: published, changedOnRemote: changedOnRemote,
                        lastVersion: lastVersion, scan: scan, placedFiles: placed, placedObjects: placedObjects, checkAll: checkAll,
                        checkedAt: checkedAt, stored: stored, publishedPieces: publishedPieces,
                        storedForms: PushSync.storedForms(pieceLists))
    }

    // MARK: plan and resolve

    /// Plan: the local tree against what was published: `keeping` paths keep their published
    /// entry, `repairing` ones are sent again whatever the manifest says, `unlisting` ones leave
    /// the manifest and the remote keeps them.
    /// With `remote-layout = objects` a file is sent when the remote does not store its content
    /// (`stored`); with the tree layout over a manifest of the objects layout, every file is sent
    /// (nothing is at its path yet).
    private func plan(_ observed: Observed, keeping: Set<RelativePath>, repairing: Set<RelativePath>, unlisting: Set<RelativePath>) -> PushPlan {
        let (scan, published) = (observed.scan, observed.published)
        let layout = session.remoteLayout
        let changesLayout = published.map { $0.layout != layout } ?? false
        let repairing = layout == .tree && changesLayout ? repairing.union(scan.entries.map(\.path)) : repairing
        // What the filter leaves out and an earlier run published stays on the remote, unlisted:
        // never deleted (as pull never deletes it), no longer published.
        let filter = session.filter
        let unlisting = filter.isEmpty ? unlisting
            : unlisting.union((published?.entries ?? []).lazy.filter { !filter.admits($0.path) }.map(\.path))
        var plan = PushPlanner.plan(local: scan.entries, remote: published, rules: DeletionRules(delete: session.delete, cap: session.maxDelete),
                                    keepingRemote: keeping, repairing: repairing, unlisting: unlisting)
        if layout == .objects {
            plan = PushPlanner.storing(plan, local: Set(scan.entries.map(\.path)), stored: observed.stored, changesLayout: changesLayout)
        } else {
            plan.changesLayout = changesLayout
        }
        return plan
    }

    /// Resolve: the files `plan` would replace or delete (every placed file, when `checkAll`) are
    /// checked on the remote; what the remote holds otherwise than this session published or
    /// placed it is decided by `conflict` (`PushPlanner.resolve`), and planned again around that.
    /// Then the rule that an empty local tree does not empty the remote. nil when `conflict = fail`
    /// ends the run: nothing was uploaded or deleted.
    private func resolve(_ plan: PushPlan, _ observed: Observed, store: StateStore, result: inout SyncResult) throws(FerryError) -> PushPlan? {
        let (published, writer) = (observed.published, observed.writer)
        let edited = try editedOnRemote(plan: plan, placed: observed.placedFiles, everything: observed.checkAll, writer: writer, store: store)
        // The published tree's metadata objects are read back on the same schedule; that check
        // starts the clock too, or a push that placed nothing (its state new, the tree already
        // there) would read them all back on every poll.
        let repairs = observed.checkAll && state.repairsRemote && published?.tree != nil
        if repairs { try repairObjects(manifests.objects(remote: observed.remote), writer: writer) }
        if observed.checkAll && (repairs || !(observed.placedFiles.isEmpty && observed.placedObjects.isEmpty)) {
            try state.recordRemoteChecked(at: observed.checkedAt)
        }
        let resolution = PushPlanner.resolve(session.conflict, changedByAnotherWriter: observed.changedOnRemote, editedOnRemote: Set(edited.keys))
        var plan = plan
        var keeping = observed.unreadable
        if !resolution.conflicts.isEmpty {
            guard sayConflicts(resolution, observed, edited: edited, result: &result) else { return nil }
            keeping.formUnion(resolution.keepingRemote)
            plan = self.plan(observed, keeping: keeping, repairing: resolution.repairing, unlisting: resolution.unlisting)
        }
        try PushPlanner.refuseEmptying(localFiles: observed.scan.entries.count,
                                       remoteFiles: (published?.entries ?? []).filter { !keeping.contains($0.path) }.count, session: session)
        emit(.planned(PlanSummary(transfers: plan.uploads.count, bytes: plan.uploadBytes, metadataFixes: plan.metadataChanges,
                                  deletions: plan.deletions.count + plan.replacements.count, upToDate: plan.upToDate, hashed: observed.scan.hashed,
                                  extrasKept: plan.extrasKept, skipped: observed.scan.skipped)))
        return plan
    }

    /// Says what `conflict` decided; false when it refused the run (`conflict = fail`): each path
    /// fails, and `result` says why and what to set instead.
    private func sayConflicts(_ resolution: ConflictResolution, _ observed: Observed, edited: [RelativePath: String],
                              result: inout SyncResult) -> Bool {
        let conflicts = resolution.conflicts
        let since = observed.lastVersion.map { "since ferry published version \($0)" } ?? "since ferry placed them"
        let byAnotherWriter = Set(observed.changedOnRemote)
        func describe(_ path: RelativePath) -> String {
            byAnotherWriter.contains(path) ? "changed on the remote \(since)" : edited[path] ?? "changed on the remote \(since)"
        }
        guard !resolution.refused else {
            for path in conflicts { emit(.fileFailed(path: path, error: "conflict: " + describe(path))) }
            result.counts.failed += conflicts.count
            result.exitCode = .someFilesFailed
            result.message = "\(Plural.count(conflicts.count, "path")) changed on the remote \(since) (another writer, or an edit there); nothing was uploaded or deleted, on either side"
            result.hint = "set conflict = local-wins in [session \(session.name)] to replace them with the local tree, or remote-wins to keep the remote's versions"
            return false
        }
        let wins = session.conflict == .remoteWins ? "conflict = remote-wins: they keep the remote's versions" : "conflict = local-wins: the local tree replaces them"
        emit(.warning(message: "\(Plural.count(conflicts.count, "path")) changed on the remote \(since); \(wins)"))
        // remote-wins: a file edited in place has no entry that vouches for its bytes.
        let unlisting = resolution.unlisting
        if !unlisting.isEmpty {
            emit(.warning(message: "\(Plural.count(unlisting.count, "file")) edited on the remote stay there unlisted (ferry cannot vouch for their bytes), for example \(Printable.name(unlisting.sorted()[0].string))"))
        }
        return true
    }

    /// A dry run says what the plan would change, item by item, and changes nothing.
    private func reportDryRun(_ plan: PushPlan) {
        for u in plan.uploads { emit(.planItem(action: "upload", path: u.entry.path, reason: u.reason.rawValue, size: u.entry.size)) }
        for p in plan.replacements { emit(.planItem(action: "replace", path: p, reason: "the local tree has another type here", size: nil)) }
        for p in plan.deletions { emit(.planItem(action: "delete", path: p, reason: nil, size: nil)) }
        for p in plan.refusedDeletions?.paths ?? [] { emit(.planItem(action: "refused-delete", path: p, reason: nil, size: nil)) }
    }

    // MARK: transfer

    /// The task table before anything is sent. A run that died mid-upload (kill -9, power) left
    /// its tasks running and maybe a partial temporary upload: the task row names it, and it goes
    /// before anything is sent again. Uploads in parts the task table records resume, unless their
    /// file is no longer to be sent as it was then (gone, changed, or now as the remote has it):
    /// those are given up. Tasks of files the local tree no longer has (`present`) go.
    private func settleTasks(_ plan: PushPlan, present: Set<RelativePath>, writer: RemoteWriting, store: StateStore) throws(FerryError) {
        let journaled = try store.journaledUploads(session: session.name)
        writer.removeLeftovers(tasks: try store.tasks(session: session.name).map(placing), journaled: journaled.map(placing))
        let sending = Dictionary(plan.uploads.map { ($0.entry.path, $0.entry.sha256) }, uniquingKeysWith: { a, _ in a })
        for upload in journaled where !(sending[upload.path].map(upload.sends) ?? false) {
            writer.abandon(placing(upload))
            try store.clearJournaledUpload(task: upload.task)
        }
        // Their leftovers were just removed.
        _ = try store.pruneTasks(session: session.name, keeping: { present.contains($0) })
        try store.settleTasks(session: session.name, transferring: Set(plan.uploads.map(\.entry.path)))
    }

    /// What the transfer stage did, for the stages after it.
    struct Sent {
        let transfers: PushTransfers
        /// The plan's uploads but those a path in the way blocked; the blocked ones, and why.
        let uploads: [PushPlan.Upload]
        let blocked: [RelativePath: String]
        /// Why the run stopped before its uploads ended, if it did.
        let stopped: String?
        /// Uploads left for a later run (`TransferCounts.notDone`), and those plus any that did not
        /// end though nothing stopped the run (`unfinished`).
        let notDone: Int
        let unfinished: Int
        /// Files stored as their pieces (`PushPieces`): their indexes, by content; and the contents
        /// whose every piece the remote already stored (not sent).
        let pieces: [SHA256Digest: PieceUpload]
        let storedAsPieces: Set<SHA256Digest>

        /// Nothing is left for later: the manifest may be published (a file that failed for good
        /// does not hold it back).
        var complete: Bool { stopped == nil && unfinished == 0 }
    }

    /// Transfer: what is in the way of the uploads removed (`clearTheWay`), the uploads recorded as
    /// tasks and run through the engine (`PushTransfers`), their counts added to the run's.
    private func transfer(_ plan: PushPlan, _ observed: Observed, present: Set<RelativePath>, store: StateStore,
                          result: inout SyncResult) throws(FerryError) -> Sent {
        let (writer, scan, layout) = (observed.writer, observed.scan, session.remoteLayout)
        let gate = DiscretionGate(session: session, agent: agent, clock: clock)
        let blocked = try clearTheWay(plan, local: present, writer: writer, store: store, held: !plan.uploads.isEmpty && gate?.waitsFor() != nil,
                                      result: &result)
        var uploads = plan.uploads.filter { blocked[$0.entry.path] == nil }
        for (path, error) in blocked { emit(.fileFailed(path: path, error: error)) }
        result.counts.failed += blocked.count
        // Large files go as the pieces the remote lacks; one whose every piece it stores needs nothing.
        let (pieces, storedAsPieces) = indexForPieces(uploads, stored: observed.stored, forms: observed.storedForms,
                                                      root: scan.root)
        uploads.removeAll { storedAsPieces.contains($0.entry.sha256) }

        let notBefore = (options.notBefore ?? session.earliestBegin)?.time(from: clock.now())
        let tasks = try store.queueUploads(session: session.name, entries: uploads.map(\.entry), notBefore: notBefore)
        if layout == .objects && !uploads.isEmpty {
            // Listed as retired before they go: objects of a version never published are
            // collected like any other no manifest names.
            var retired = RetiredObjects(path: retiredContentPath)
            retired.retire(uploads.map(\.entry.sha256.hex) + pieces.values.flatMap { $0.pieces.map(\.sha256.hex) }, now: clock.now())
            try retired.save()
        }
        if !uploads.isEmpty { try writer.prepareToWrite() }
        let transfers = PushTransfers(session: session, store: store, writer: writer, root: scan.root,
                                      destination: { [session] in layout.location(of: $0, manifest: session.manifest) }, observer: observer,
                                      emit: { [unowned self] in self.emit($0) }, stop: options.stop, gate: gate)
        transfers.runLimits = options.limits
        transfers.run(uploads.compactMap { u in
            tasks[u.entry.path].flatMap { task in
                scan.stats[u.entry.path].map {
                    PushTransfers.Item(entry: u.entry, task: task, stat: $0, hashKnown: !scan.unhashed.contains(u.entry.path), pieces: pieces[u.entry.sha256]?.pieces)
                }
            }
        }, localRoot: session.local, engine: engine)
        result.counts += transfers.counts
        if let error = transfers.storeError { throw error }
        if let error = transfers.abort { throw error }
        let stopped = transfers.stopped ?? options.stop.reason

        // Work left for later holds the manifest back; a file that failed for good does not.
        let notDone = transfers.counts.notDone
        var unfinished = notDone
        let ended = transfers.counts.transferred + transfers.vanished.count + transfers.counts.failed
        if stopped == nil && unfinished == 0 && ended < uploads.count { unfinished = uploads.count - ended }
        return Sent(transfers: transfers, uploads: uploads, blocked: blocked, stopped: stopped, notDone: notDone, unfinished: unfinished,
                    pieces: pieces, storedAsPieces: storedAsPieces)
    }

    // MARK: commit and publish

    /// Commit: the deletions of files the local tree no longer has, and (the tree layout) the
    /// directories they and the replaced paths emptied; returns how many deletions failed. With
    /// `remote-layout = objects` nothing is at a path on the remote: a file the local tree no
    /// longer has leaves the manifest, and its content is collected once no recent manifest names it.
    private func commitDeletions(_ plan: PushPlan, writer: RemoteWriting, store: StateStore, result: inout SyncResult) throws(FerryError) -> Int {
        guard session.remoteLayout == .tree else {
            for path in plan.deletions { emit(.fileDeleted(path: path)) }
            result.counts.deleted += plan.deletions.count
            return 0
        }
        let failed = try delete(plan.deletions, writer: writer, store: store, result: &result)
        try removeEmptiedDirectories(plan.deletions + plan.replacements, listed: plan.manifest, writer: writer)
        return failed
    }

    /// The entries of the manifest to publish. It never names a file the remote does not hold as
    /// it says (a file that changed while it was sent went again, and the manifest lists what
    /// went). A file gone before it was sent, or that failed (its final name untouched, or not
    /// holding what was sent), keeps its last published entry (or none). nil when, with
    /// `remote-layout = objects`, a file the remote lists could not be stored: not published.
    private func listedEntries(_ plan: PushPlan, _ observed: Observed, _ sent: Sent, version: Int64, store: StateStore,
                               result: inout SyncResult) throws(FerryError) -> [ManifestEntry]? {
        let (published, transfers) = (observed.published, sent.transfers)
        let before = Dictionary((published?.entries ?? []).map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        let asPublished = transfers.vanished.union(transfers.failedPaths).union(sent.blocked.keys)
        let entries = plan.manifest.compactMap { asPublished.contains($0.path) ? before[$0.path] : transfers.rehashed[$0.path] ?? $0 }
        if !transfers.vanished.isEmpty {
            // Their uploads in parts, if any, go with them.
            for upload in try store.journaledUploads(session: session.name) where transfers.vanished.contains(upload.path) {
                observed.writer.abandon(placing(upload))
            }
            _ = try store.pruneTasks(session: session.name, keeping: { !transfers.vanished.contains($0) })
        }
        guard session.remoteLayout == .objects else { return entries }
        // Each entry names content the remote stores, or the file keeps its last published entry.
        let placedNow = transfers.placedContent
        let (listable, lost) = PushPlanner.listable(entries, published: published) {
            observed.stored.contains($0) || placedNow.contains($0) || sent.storedAsPieces.contains($0)
        }
        guard lost.isEmpty else {
            result.exitCode = .someFilesFailed
            result.message = "\(Plural.count(lost.count, "file")) the remote lists could not be stored as objects (\(Printable.name(lost[0].string)) and others): version \(version) was not published, so readers keep version \(published?.version.map(String.init) ?? "none")"
            result.hint = "the next run sends them again; see the errors above for why they failed"
            return nil
        }
        return listable
    }

    /// Publish: the manifest listing `entries` as `version`, after the objects of its tree (format
    /// 2: those the remote does not hold yet; the cache holds what this session placed there), the
    /// root that names them last; then the objects no recent manifest names are collected. false
    /// when another writer published while this run uploaded: not overwritten, and the run fails.
    private func publish(_ entries: [ManifestEntry], version: Int64, _ observed: Observed, _ sent: Sent, store: StateStore,
                         result: inout SyncResult) throws(FerryError) -> Bool {
        let (remote, writer, published, layout) = (observed.remote, observed.writer, observed.published, session.remoteLayout)
        let objects = manifests.objects(remote: remote)
        let indexes = indexed(entries, published: published, pieces: sent.pieces, objects: objects, root: observed.scan.root)
        let entries = indexes.entries
        let keySet = try sendKeySets(writer: writer, remote: remote)
        let phased = try phasedRollout(published: published, objects: objects)
        let packs = layout == .objects ? try sendPacks(entries, published: published, objects: objects, writer: writer, root: observed.scan.root) : nil
        let (text, expires, tree) = try Manifests.publishable(version: version, entries: entries, lifetime: session.expires, keys: signingKeys, keySet: keySet,
                                                              rollout: phased.rollout, layout: layout, packs: packs?.list, now: clock.now())
        if let tree { try sendObjects(tree.objects + indexes.new, objects: objects, writer: writer) }
        sayVerified(sent.transfers.verifications.merging(objectVerifications, uniquingKeysWith: +))
        // Another writer that published while this run uploaded is not overwritten: the files this
        // run placed are on the remote, but readers go on seeing the other writer's manifest (a file
        // of both, if any, fails their hash check, never a mixed tree with exit 0), and the next run
        // compares and applies `conflict`. A remote that writes conditionally refuses the write
        // itself; on the others the manifest is compared just before.
        var written = false
        let changed = session.remote.backend.abilities.contains(.conditionalWrites) ? false : try changedSinceRead(remote)
        if !changed {
            written = try writeManifest(text, version: version, files: entries.count, signers: signingKeys.map(\.publicKey), expires: expires,
                                        writer: writer, remote: remote, store: store)
        }
        if !written {
            result.counts.failed += 1
            result.exitCode = .someFilesFailed
            result.message = "the remote's manifest changed while this run uploaded (another writer?): version \(version) was not published"
            result.hint = "the next run compares the remote with what this session last published and applies conflict = \(session.conflict.rawValue)"
            emit(.warning(message: result.message!))
            return false
        }
        if let tree {
            collectObjects(naming: tree.objects.map(\.sha256) + indexes.names + phased.metadata + (packs?.names ?? []), objects: objects,
                           writer: writer)
        }
        // What this session placed: the objects recorded before this run, and this run's uploads
        // (content objects only in this layout).
        var placedContent = Set(observed.placedObjects.values.map(\.digest))
        if layout == .objects { placedContent.formUnion(sent.transfers.placedContent) }
        let naming = layout == .objects ? Set(entries.map(\.sha256)).union(storedPieces(of: entries, objects: objects).values.joined()) : []
        collectContent(publishing: Set(naming.map(\.hex)).union(phased.content), placed: placedContent, previous: previousContent(observed), writer: writer, store: store)
        if layout == .objects, let published, published.layout == .tree, !published.entries.isEmpty {
            removeTreeFiles(of: published, writer: writer, store: store)
        }
        emit(.manifestBuilt(output: session.manifestURL, version: version, files: entries.count,
                            bytes: entries.reduce(0) { $0 + ($1.size ?? 0) },
                            signedBy: TrustStage.named(signingKeys.map(\.publicKey))))
        return true
    }

    /// The content objects the manifest on the remote names (`contentNames`), by name.
    private func previousContent(_ observed: Observed) -> Set<String> {
        Set((observed.published.map { contentNames($0, pieces: observed.publishedPieces) } ?? []).map(\.hex))
    }

    // MARK: report

    /// Report, after a publication: the outcome, and every file that failed named as such.
    private func report(_ plan: PushPlan, _ observed: Observed, _ sent: Sent, version: Int64, deletionsFailed: Int, result: inout SyncResult) {
        result.exitCode = RunOutcome(counts: result.counts, deletionsRefused: plan.refusedDeletions != nil).exitCode
        var reasons: [String] = []
        let failedFiles = sent.transfers.counts.failed + sent.blocked.count + observed.scan.unreadable.count
        if failedFiles > 0 {
            reasons.append("\(Plural.count(failedFiles, "file")) failed; version \(version) lists what the remote holds at their paths, and the next run tries them again")
        }
        if deletionsFailed > 0 { reasons.append("\(Plural.count(deletionsFailed, "deletion")) on the remote failed") }
        if let refusal = result.message { reasons.append(refusal) }
        result.message = reasons.isEmpty ? nil : reasons.joined(separator: "; ")
    }

    /// Report, when there was nothing to publish: objects whose time is up still go. The only
    /// changes were files that could not be read, or deletions max-delete refuses: the run is not
    /// in sync, and the next one (the agent's too, through its exit code) tries again.
    private func endUnchanged(_ plan: PushPlan, _ observed: Observed, store: StateStore, result: inout SyncResult) {
        collectContent(publishing: nil, placed: [], previous: previousContent(observed), writer: observed.writer, store: store)
        var reasons: [String] = []
        let failed = result.counts.failed
        if failed > 0 {
            reasons.append("\(Plural.count(failed, "file")) failed; the remote keeps what it holds at \(failed == 1 ? "its path" : "their paths"), and the next run tries again")
        }
        if let refusal = refuseDeletions(plan, result: &result) { reasons.append(refusal) }
        result.exitCode = RunOutcome(counts: result.counts, deletionsRefused: plan.refusedDeletions != nil).exitCode
        if !reasons.isEmpty { result.message = reasons.joined(separator: "; ") }
    }

    /// Report, when work was left for later: the manifest was not published.
    private func reportUnpublished(_ plan: PushPlan, _ observed: Observed, _ sent: Sent, result: inout SyncResult) {
        sayVerified(sent.transfers.verifications)
        let outcome = RunOutcome(counts: result.counts, deletionsRefused: plan.refusedDeletions != nil, stopped: sent.stopped != nil || sent.notDone < sent.unfinished)
        result.exitCode = outcome.exitCode
        var reasons: [String] = []
        let counts = sent.transfers.counts
        if counts.failed > 0 { reasons.append("\(counts.failed) of \(Plural.count(sent.uploads.count, "upload")) failed") }
        if counts.waiting > 0 { reasons.append("the remote could not be reached for \(Plural.count(counts.waiting, "upload"))") }
        reasons += result.leftForLater("upload")
        if let stopped = sent.stopped { reasons.append("\(stopped); the next run uploads what is left") }
        reasons.append("the manifest was not published, so readers of the remote still see version \(observed.published?.version.map(String.init) ?? "none")")
        result.message = reasons.joined(separator: "; ")
    }

    /// The deletions `max-delete` refused, said as a warning, with the hint that goes with it;
    /// nil when there were none.
    private func refuseDeletions(_ plan: PushPlan, result: inout SyncResult) -> String? {
        guard let refused = plan.refusedDeletions else { return nil }
        let message = "refused to delete \(Plural.count(refused.count, "file")) on the remote: more than max-delete = \(session.maxDelete) allows (\(refused.limit) of the \(Plural.count(refused.managed, "file")) published); nothing was deleted"
        result.hint = "if this is intended, raise max-delete for session '\(session.name)'"
        emit(.warning(message: message))
        return message
    }

    /// The `uploads-verified` event of what this run placed, if it placed anything.
    private func sayVerified(_ counts: [UploadVerification: Int]) {
        guard !counts.isEmpty else { return }
        emit(.uploadsVerified(storeChecksum: counts[.storeChecksum] ?? 0, readBack: counts[.readBack] ?? 0, sizeOnly: counts[.sizeOnly] ?? 0))
    }
}

import Glibc
import FerryCore

/// One push cycle for one session: the manifest ferry last published on the remote → local scan
/// (with the hash cache) → `PushPlanner` → the files the plan changes checked on the remote
/// (someone else's edits are conflicts) → tasks recorded → removals of remote paths that changed
/// type → uploads to temporary names under the remote's `.ferry/upload/` through the engine, each
/// moved to its final name and checked there (`PushTransfers`) → deletions, and the directories
/// they emptied → the new manifest, last, under a temporary name and moved into place.
///
/// A reader never sees a partial file under a final name. With the tree layout the manifest does
/// not move with the files, though: during a push (or after an interrupted one) a reader may find
/// new bytes under the last manifest's hash, which its hash check refuses (exit 1, never a mixed
/// tree with exit 0) until the push completes. A file that fails fails alone: the manifest goes on
/// listing what the remote holds at its path.
///
/// Plain WebDAV cannot continue a PUT: an interrupted upload starts again from zero.
final class PushSync: SessionWork {
    /// Stands for the hash of a file hashed while it is sent; never published (the upload's digest replaces it).
    static let unknownHash = SHA256Digest(hex: String(repeating: "0", count: 64))!
    /// `sign-key`, read at the start of each cycle.
    private var signingKey: SigningKey?

    /// Why the manifest this session last published must be published again though nothing
    /// changed (nil: it need not): it is signed by another key than `sign-key` (a rotation), or it
    /// expires within half of `expires` (or says no expiry when the session wants one).
    private func reissueReason(_ record: SessionRecord?) -> String? {
        guard let record, record.manifestVersion != nil else { return nil }
        if record.manifestSigner != signingKey?.publicKey {
            return signingKey.map { "is not signed by sign-key (\($0.publicKey))" } ?? "is signed, and the session no longer signs"
        }
        if let lifetime = session.expires {
            guard let at = record.manifestExpires else { return "carries no expiry" }
            if Double(at.seconds - Timestamp.now().seconds) < lifetime / 2 { return "expires at \(at.rfc3339)" }
        }
        return nil
    }

    func cycle(store: StateStore, result: inout SyncResult) throws(FerryError) {
        guard !session.manifest.contains("://") else {
            throw .usage("session '\(session.name)' pushes, so its manifest must live on its remote: manifest = \(session.manifest) is another URL",
                         hint: "set manifest to a name relative to the remote, like manifest.json")
        }
        let remote = try Remotes.open(session)
        guard let writer = remote as? RemoteWriting else {
            throw .usage("the remote of session '\(session.name)' cannot be written to")
        }
        // One publisher of a remote at a time: among the sessions of this state directory, and for
        // a file:// remote, with any other process that publishes that directory (manifest build,
        // a push from another state directory). Publishers on other machines are kept apart by
        // the conditional manifest write and the grace period before objects are collected.
        var publishing: [SessionLock] = []
        if !options.dryRun {
            publishing.append(try SessionLock.publisher(stateDirectory: agent.state, remote: session.remote.url, manifest: session.manifest,
                                                        session: "session '\(session.name)'"))
            if session.remote.scheme == .file, let directory = session.remote.filePath, FileSystem.exists(directory) {
                publishing.append(try SessionLock.publisher(directory: directory, what: "ferry push of session '\(session.name)'"))
            }
        }
        defer { withExtendedLifetime(publishing) {} }
        // The key that signs what this run publishes: read before anything is sent, so a key that
        // cannot be read stops the run at once.
        signingKey = try session.signKey.map { (file) throws(FerryError) -> SigningKey in
            try SigningKey(file: file, use: SigningKey.use(in: session))
        }
        let record = try store.session(session.name)
        let reissue = reissueReason(record)
        // The agent knows nothing under the root changed since a run published it all: when the
        // remote still holds what was published (304), there is nothing to parse, scan or send.
        guard let (published, changedOnRemote, lastVersion) = try remoteState(remote, record: record, store: store,
                                                                             unchangedEnds: options.localUnchanged && reissue == nil) else {
            // Unchanged (304): what the state recorded of the manifest still holds.
            emit(.manifestFetched(url: session.manifestURL, version: record?.manifestVersion, files: record?.manifestFiles ?? 0, unchanged: true))
            return
        }
        let remoteUnchanged = changedOnRemote.isEmpty && lastVersion != nil
        emit(.manifestFetched(url: session.manifestURL, version: published?.version, files: published?.entries.count ?? 0,
                              unchanged: remoteUnchanged))
        if options.localUnchanged && remoteUnchanged && reissue == nil { return }

        // Content objects are named by their hash: every file's is known before it is sent.
        let layout = session.remoteLayout
        let scan = try scanLocal(store: store, published: published, hashingEverything: writer.hashesBeforeSending || layout == .objects)
        result.hashed = scan.hashed
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
        let checkedAt = Timestamp.now()
        let lastCheck = try store.remoteChecked(session: session.name)
        let checkAll = session.remote.scheme == .file || lastCheck.map { checkedAt.timeInterval - $0.timeInterval >= session.verifyInterval } ?? true
        let stored = layout == .objects ? try storedContent(published: published, placed: placedObjects, checking: checkAll, writer: writer, store: store) : []
        func planned(keeping: Set<RelativePath>, repairing: Set<RelativePath>, unlisting: Set<RelativePath>) -> PushPlan {
            self.planned(scan, published: published, keeping: keeping, repairing: repairing, unlisting: unlisting, stored: stored)
        }
        var plan = planned(keeping: Set(scan.unreadable.map(\.path)), repairing: [], unlisting: [])
        let edited = try editedOnRemote(plan: plan, placed: placed, everything: checkAll, writer: writer, store: store)
        if checkAll && !options.dryRun, published?.tree != nil { try repairObjects(manifests.objects(remote: remote), writer: writer) }
        if checkAll && !options.dryRun && !(placed.isEmpty && placedObjects.isEmpty) { try store.recordRemoteChecked(session: session.name, at: checkedAt) }
        let conflicts = Set(changedOnRemote).union(edited.keys)
        var repairing = Set<RelativePath>(), unlisting = Set<RelativePath>(), keeping = Set(scan.unreadable.map(\.path))
        if !conflicts.isEmpty {
            let since = lastVersion.map { "since ferry published version \($0)" } ?? "since ferry placed them"
            let byAnotherWriter = Set(changedOnRemote)
            func describe(_ path: RelativePath) -> String {
                byAnotherWriter.contains(path) ? "changed on the remote \(since)" : edited[path] ?? "changed on the remote \(since)"
            }
            switch session.conflict {
            case .fail:
                for path in conflicts.sorted() { emit(.fileFailed(path: path, error: "conflict: " + describe(path))) }
                result.counts.failed += conflicts.count
                result.exitCode = .someFilesFailed
                result.message = "\(Plural.count(conflicts.count, "path")) changed on the remote \(since) (another writer, or an edit there); nothing was uploaded or deleted, on either side"
                result.hint = "set conflict = local-wins in [session \(session.name)] to replace them with the local tree, or remote-wins to keep the remote's versions"
                return
            case .localWins:
                emit(.warning(message: "\(Plural.count(conflicts.count, "path")) changed on the remote \(since); conflict = local-wins: the local tree replaces them"))
                repairing = Set(edited.keys)
            case .remoteWins:
                emit(.warning(message: "\(Plural.count(conflicts.count, "path")) changed on the remote \(since); conflict = remote-wins: they keep the remote's versions"))
                keeping.formUnion(changedOnRemote)
                // A file edited in place has no entry that vouches for its bytes: it stays on the
                // remote and leaves the manifest.
                unlisting = Set(edited.keys).subtracting(changedOnRemote)
                if !unlisting.isEmpty {
                    emit(.warning(message: "\(Plural.count(unlisting.count, "file")) edited on the remote stay there unlisted (ferry cannot vouch for their bytes), for example \(Printable.name(unlisting.sorted()[0].string))"))
                }
            }
            plan = planned(keeping: keeping, repairing: repairing, unlisting: unlisting)
        }
        try PushPlanner.refuseEmptying(localFiles: scan.entries.count,
                                       remoteFiles: (published?.entries ?? []).filter { !keeping.contains($0.path) }.count, session: session)
        emit(.planned(PlanSummary(transfers: plan.uploads.count, bytes: plan.uploadBytes, metadataFixes: plan.metadataChanges,
                                  deletions: plan.deletions.count + plan.replacements.count, upToDate: plan.upToDate, hashed: scan.hashed,
                                  extrasKept: plan.extrasKept, skipped: scan.skipped)))
        if options.dryRun {
            for u in plan.uploads { emit(.planItem(action: "upload", path: u.entry.path, reason: u.reason.rawValue, size: u.entry.size)) }
            for p in plan.replacements { emit(.planItem(action: "replace", path: p, reason: "the local tree has another type here", size: nil)) }
            for p in plan.deletions { emit(.planItem(action: "delete", path: p, reason: nil, size: nil)) }
            for p in plan.refusedDeletions?.paths ?? [] { emit(.planItem(action: "refused-delete", path: p, reason: nil, size: nil)) }
            return
        }
        // A run that died mid-upload (kill -9, power) left its tasks running and maybe a partial
        // temporary upload: the task row names it, and it goes before anything is sent again.
        // Uploads in parts the task table records resume, unless their file is no longer to be
        // sent as it was then (gone, changed, or now as the remote has it): those are given up.
        let journaled = try store.journaledUploads(session: session.name)
        writer.removeLeftovers(tasks: try store.tasks(session: session.name).map(placing), journaled: journaled.map(placing))
        let sending = Dictionary(plan.uploads.map { ($0.entry.path, $0.entry.sha256) }, uniquingKeysWith: { a, _ in a })
        for upload in journaled where !(sending[upload.path].map(upload.sends) ?? false) {
            writer.abandon(placing(upload))
            try store.clearJournaledUpload(task: upload.task)
        }
        // Tasks of files the local tree no longer has go (their leftovers were just removed).
        let present = Set(scan.entries.map(\.path))
        _ = try store.pruneTasks(session: session.name, keeping: { present.contains($0) })
        try store.settleTasks(session: session.name, transferring: Set(plan.uploads.map(\.entry.path)))
        if plan.isEmpty && unlisting.isEmpty {
            guard reissue != nil else {
                // Nothing to publish; objects whose time is up still go.
                collectContent(publishing: nil, placed: [], previous: published, writer: writer, store: store)
                // The only changes were files that could not be read, or deletions max-delete
                // refuses: the run is not in sync, and the next one (the agent's too, through
                // its exit code) tries again.
                var reasons: [String] = []
                if result.counts.failed > 0 {
                    reasons.append("\(Plural.count(result.counts.failed, "file")) failed; the remote keeps what it holds at \(result.counts.failed == 1 ? "its path" : "their paths"), and the next run tries again")
                }
                if let refusal = refuseDeletions(plan, result: &result) { reasons.append(refusal) }
                result.exitCode = RunOutcome(counts: result.counts, deletionsRefused: plan.refusedDeletions != nil).exitCode
                if !reasons.isEmpty { result.message = reasons.joined(separator: "; ") }
                return
            }
        }
        // Numbered before anything is sent: past the largest version nothing can be published,
        // so nothing is uploaded for it either.
        let version = try ManifestVersion.following(published?.version, now: Timestamp.now(), manifest: "the remote's manifest \(session.manifestURL)")
        if plan.isEmpty && unlisting.isEmpty, let reissue {
            emit(.warning(message: "nothing changed, but the published manifest \(reissue): publishing version \(version)"))
        }

        let gate = DiscretionGate(session: session, agent: agent)
        let blocked = try clearTheWay(plan, local: present, writer: writer, store: store, held: !plan.uploads.isEmpty && gate?.waitsFor() != nil,
                                      result: &result)
        let uploads = plan.uploads.filter { blocked[$0.entry.path] == nil }
        for (path, error) in blocked { emit(.fileFailed(path: path, error: error)) }
        result.counts.failed += blocked.count

        let notBefore = (options.notBefore ?? session.earliestBegin)?.time(from: Timestamp.now())
        let tasks = try store.queueUploads(session: session.name, entries: uploads.map(\.entry), notBefore: notBefore)
        if layout == .objects && !uploads.isEmpty {
            // Listed as retired before they go: objects of a version never published are
            // collected like any other no manifest names.
            var retired = RetiredObjects(path: retiredContentPath)
            retired.retire(uploads.map(\.entry.sha256.hex), now: Timestamp.now())
            try retired.save()
        }
        let transfers = PushTransfers(session: session, store: store, writer: writer, root: scan.root,
                                      destination: { [session] in layout.location(of: $0, manifest: session.manifest) }, observer: observer,
                                      emit: { [unowned self] in self.emit($0) }, stop: options.stop, gate: gate)
        transfers.runLimits = options.limits
        transfers.run(uploads.compactMap { u in
            tasks[u.entry.path].flatMap { task in
                scan.stats[u.entry.path].map { PushTransfers.Item(entry: u.entry, task: task, stat: $0, hashKnown: !scan.unhashed.contains(u.entry.path)) }
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
        if let refusal = refuseDeletions(plan, result: &result) { result.message = refusal }
        guard stopped == nil && unfinished == 0 else {
            sayVerified(transfers.verifications)
            let outcome = RunOutcome(counts: result.counts, deletionsRefused: plan.refusedDeletions != nil, stopped: stopped != nil || notDone < unfinished)
            result.exitCode = outcome.exitCode
            var reasons: [String] = []
            if transfers.counts.failed > 0 { reasons.append("\(transfers.counts.failed) of \(Plural.count(uploads.count, "upload")) failed") }
            if transfers.counts.waiting > 0 { reasons.append("the remote could not be reached for \(Plural.count(transfers.counts.waiting, "upload"))") }
            reasons += result.leftForLater("upload")
            if let stopped { reasons.append("\(stopped); the next run uploads what is left") }
            reasons.append("the manifest was not published, so readers of the remote still see version \(published?.version.map(String.init) ?? "none")")
            result.message = reasons.joined(separator: "; ")
            return
        }

        var deletionsFailed = 0
        if layout == .objects {
            // Nothing is at a path on the remote: a file the local tree no longer has leaves the
            // manifest, and its content is collected once no recent manifest names it.
            for path in plan.deletions { emit(.fileDeleted(path: path)) }
            result.counts.deleted += plan.deletions.count
        } else {
            deletionsFailed = try delete(plan.deletions, writer: writer, store: store, result: &result)
            try removeEmptiedDirectories(plan.deletions + plan.replacements, listed: plan.manifest, writer: writer)
        }
        // The manifest last: it never names a file the remote does not hold as it says (a file that
        // changed while it was sent went again, and the manifest lists what went). A file gone
        // before it was sent, or that failed (its final name untouched, or not holding what was
        // sent), keeps its last published entry (or none).
        let before = Dictionary((published?.entries ?? []).map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        let asPublished = transfers.vanished.union(transfers.failedPaths).union(blocked.keys)
        plan.manifest = plan.manifest.compactMap { asPublished.contains($0.path) ? before[$0.path] : transfers.rehashed[$0.path] ?? $0 }
        if !transfers.vanished.isEmpty {
            // Their uploads in parts, if any, go with them.
            for upload in try store.journaledUploads(session: session.name) where transfers.vanished.contains(upload.path) {
                writer.abandon(placing(upload))
            }
            _ = try store.pruneTasks(session: session.name, keeping: { !transfers.vanished.contains($0) })
        }
        if layout == .objects {
            // Each entry names content the remote stores, or the file keeps its last published entry.
            let placedNow = transfers.placedContent
            let (entries, lost) = PushPlanner.listable(plan.manifest, published: published) { stored.contains($0) || placedNow.contains($0) }
            plan.manifest = entries
            if !lost.isEmpty {
                result.exitCode = .someFilesFailed
                result.message = "\(Plural.count(lost.count, "file")) the remote lists could not be stored as objects (\(Printable.name(lost[0].string)) and others): version \(version) was not published, so readers keep version \(published?.version.map(String.init) ?? "none")"
                result.hint = "the next run sends them again; see the errors above for why they failed"
                return
            }
        }
        let (text, expires, tree) = try Manifests.publishable(version: version, entries: plan.manifest, lifetime: session.expires, key: signingKey,
                                                              layout: layout)
        // Format 2: the objects of the tree go first, those the remote does not hold yet (the
        // cache holds what this session placed there); the root that names them goes last.
        let objects = manifests.objects(remote: remote)
        if let tree { try sendObjects(tree, objects: objects, writer: writer) }
        sayVerified(transfers.verifications.merging(objectVerifications, uniquingKeysWith: +))
        // Another writer that published while this run uploaded is not overwritten: the files this
        // run placed are on the remote, but readers go on seeing the other writer's manifest (a file
        // of both, if any, fails their hash check, never a mixed tree with exit 0), and the next run
        // compares and applies `conflict`. A remote that writes conditionally refuses the write
        // itself; on the others the manifest is compared just before.
        var written = false
        let changed = writer.writesConditionally ? false : try changedSinceRead(remote)
        if !changed {
            written = try publish(text, version: version, files: plan.manifest.count, signer: signingKey?.publicKey, expires: expires,
                                  writer: writer, remote: remote, store: store)
        }
        if !written {
            result.counts.failed += 1
            result.exitCode = .someFilesFailed
            result.message = "the remote's manifest changed while this run uploaded (another writer?): version \(version) was not published"
            result.hint = "the next run compares the remote with what this session last published and applies conflict = \(session.conflict.rawValue)"
            emit(.warning(message: result.message!))
            return
        }
        if let tree { collectObjects(tree, objects: objects, writer: writer) }
        // What this session placed: the objects recorded before this run, and this run's uploads
        // (content objects only in this layout).
        var placedContent = Set(placedObjects.values.map(\.digest))
        if layout == .objects { placedContent.formUnion(transfers.placedContent) }
        collectContent(publishing: layout == .objects ? Set(plan.manifest.map(\.sha256.hex)) : [], placed: placedContent, previous: published,
                       writer: writer, store: store)
        if layout == .objects, let published, published.layout == .tree, !published.entries.isEmpty {
            removeTreeFiles(of: published, writer: writer, store: store)
        }
        emit(.manifestBuilt(output: session.manifestURL, version: version, files: plan.manifest.count,
                            bytes: plan.manifest.reduce(0) { $0 + ($1.size ?? 0) }, signedBy: signingKey?.publicKey.description))
        let outcome = RunOutcome(counts: result.counts, deletionsRefused: plan.refusedDeletions != nil)
        result.exitCode = outcome.exitCode
        var reasons: [String] = []
        let failedFiles = transfers.counts.failed + blocked.count + scan.unreadable.count
        if failedFiles > 0 {
            reasons.append("\(Plural.count(failedFiles, "file")) failed; version \(version) lists what the remote holds at their paths, and the next run tries them again")
        }
        if deletionsFailed > 0 { reasons.append("\(Plural.count(deletionsFailed, "deletion")) on the remote failed") }
        if let refusal = result.message { reasons.append(refusal) }
        result.message = reasons.isEmpty ? nil : reasons.joined(separator: "; ")
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

    /// Where metadata object `digest` goes on the remote: `.ferry/meta/` beside the manifest.
    private func objectPath(_ digest: String) -> RelativePath {
        RelativePath(trusted: ManifestTree.objectDirectory(beside: session.manifest) + "/" + digest)
    }

    /// Sends the objects of `tree` the remote does not hold. Each is listed as retired before it
    /// goes (`RetiredObjects`): if the root that names it is never published, it is collected
    /// after the grace period like any other object no root names.
    private func sendObjects(_ tree: ManifestTree.Built, objects: ManifestObjects, writer: RemoteWriting) throws(FerryError) {
        let missing = tree.objects.filter { !objects.has($0.sha256) }
        guard !missing.isEmpty else { return }
        var retired = RetiredObjects(path: manifests.path + ".retired")
        retired.retire(missing.map(\.sha256.hex), now: Timestamp.now())
        try retired.save()
        // Up to 8 at once: each is a small request that waits on the server.
        let stop = options.stop
        let paths = missing.map { objectPath($0.sha256.hex) }
        let (sent, error) = Lanes.run(missing.count, lanes: 8, name: "ferry-meta") { i throws(FerryError) -> Bool in
            if let reason = stop.reason { throw FerryError(.stopped, "\(reason) while sending metadata objects; the manifest was not published") }
            return try writer.writeObject(missing[i].bytes, at: paths[i])
        }
        if let error { throw error }
        // Each is verified before the root that names it goes: the store's own checksum, else read
        // back as a mirror reads it (whatever verify-uploads says: an object is small, and a
        // mirror refuses the whole publication for one that is wrong).
        let readBack = missing.indices.filter { session.verifyUploads == .readBack || sent[$0] != true }.map { missing[$0] }
        try verifyObjects(readBack.map { ($0.sha256, $0.bytes) }, objects: objects, writer: writer)
        objectVerifications[.storeChecksum, default: 0] += missing.count - readBack.count
        objectVerifications[.readBack, default: 0] += readBack.count
        for object in missing { objects.keep(object.sha256, object.bytes) }
    }

    /// How the metadata objects this run wrote were verified.
    private var objectVerifications: [UploadVerification: Int] = [:]

    /// The `uploads-verified` event of what this run placed, if it placed anything.
    private func sayVerified(_ counts: [UploadVerification: Int]) {
        guard !counts.isEmpty else { return }
        emit(.uploadsVerified(storeChecksum: counts[.storeChecksum] ?? 0, readBack: counts[.readBack] ?? 0, sizeOnly: counts[.sizeOnly] ?? 0))
    }

    /// Reads `written` back from the remote; one it does not hold as named is written once more
    /// and read again, and one still wrong stops the publication.
    private func verifyObjects(_ written: [(digest: SHA256Digest, bytes: [UInt8])], objects: ManifestObjects, writer: RemoteWriting) throws(FerryError) {
        var wrong = try objects.notHeld(written.map(\.digest))
        guard !wrong.isEmpty else { return }
        let bytes = Dictionary(written.map { ($0.digest, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        for digest in wrong { _ = try writer.writeObject(bytes[digest]!, at: objectPath(digest.hex)) }
        wrong = try objects.notHeld(wrong)
        guard let first = wrong.first else { return }
        throw FerryError(.remote, "the remote does not hold the metadata object \(Printable.name(objectPath(first.hex).string))\(wrong.count > 1 ? " and \(wrong.count - 1) more" : "") as written, even when written again: the manifest was not published",
                         hint: "the store keeps other bytes than it was sent; check it (its disk, a proxy in front of it), then run again")
    }

    /// The metadata objects of the tree last published (those the session's cache holds), each read
    /// back: one the remote lost or holds damaged is written again from the cache, so mirrors that
    /// refused the publication take it at their next poll. Run when the push verifies what it
    /// placed (`verify-interval`; every run on `file://`).
    private func repairObjects(_ objects: ManifestObjects, writer: RemoteWriting) throws(FerryError) {
        let names = objects.names().compactMap(SHA256Digest.init(hex:))
        let wrong = try objects.notHeld(names)
        guard !wrong.isEmpty else { return }
        var written: [(digest: SHA256Digest, bytes: [UInt8])] = []
        for digest in wrong {
            guard let bytes = objects.bytes(of: digest) else { continue }
            _ = try writer.writeObject(bytes, at: objectPath(digest.hex))
            written.append((digest, bytes))
        }
        try verifyObjects(written, objects: objects, writer: writer)
        emit(.warning(message: "\(Plural.count(written.count, "metadata object")) of the published manifest \(written.count == 1 ? "was" : "were") missing or damaged on the remote (\(Printable.name(objectPath(wrong[0].hex).string))\(wrong.count > 1 ? " and others" : "")): written again"))
    }

    /// After `tree` was published: every object this session placed that it does not name is
    /// retired now (unless it was already), and those no manifest of the last `keep-versions`
    /// names, retired for `object-grace`, are removed
    /// from the remote. A failure leaves objects behind for the next run, never removes one the
    /// published root names.
    private func collectObjects(_ tree: ManifestTree.Built, objects: ManifestObjects, writer: RemoteWriting) {
        let now = Timestamp.now()
        var retired = RetiredObjects(path: manifests.path + ".retired")
        retired.update(present: objects.names(), current: Set(tree.objects.map(\.sha256.hex)), now: now)
        for name in retired.expired(now: now, grace: session.objectGrace, versions: session.keepVersions) {
            guard (try? writer.remove(objectPath(name))) != nil else { break }
            retired.removed(name)
        }
        do { try retired.save() } catch { emit(.warning(message: "cannot keep the list of retired metadata objects: \(error.message)")) }
        objects.sweep(keeping: tree.objects.map(\.sha256))
    }

    /// The plan for the local tree against what was published: `keeping` paths keep their
    /// published entry, `repairing` ones are sent again whatever the manifest says, `unlisting`
    /// ones leave the manifest and the remote keeps them.
    /// With `remote-layout = objects` a file is sent when the remote does not store its content
    /// (`stored`); with the tree layout over a manifest of the objects layout, every file is sent
    /// (nothing is at its path yet).
    private func planned(_ scan: LocalScan, published: Manifest?, keeping: Set<RelativePath>, repairing: Set<RelativePath>,
                         unlisting: Set<RelativePath>, stored: Set<SHA256Digest>) -> PushPlan {
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
            plan = PushPlanner.storing(plan, local: Set(scan.entries.map(\.path)), stored: stored, changesLayout: changesLayout)
        } else {
            plan.changesLayout = changesLayout
        }
        return plan
    }

    // MARK: content objects (remote-layout = objects)

    /// The list of content objects no published manifest names (`RetiredObjects`).
    private var retiredContentPath: String { manifests.path + ".retired-content" }

    /// A task as the remote knows it: at its destination (with `remote-layout = objects`, its
    /// content object), so what a killed run left there is found by that name.
    private func placing(_ task: TransferTask) -> TransferTask {
        guard session.remoteLayout == .objects, let digest = SHA256Digest(hex: task.sha256) else { return task }
        var task = task
        task.path = RemoteLayout.contentPath(digest, beside: session.manifest)
        return task
    }

    private func placing(_ upload: JournaledUpload) -> JournaledUpload {
        guard session.remoteLayout == .objects, let digest = SHA256Digest(hex: String(upload.content.prefix(64))) else { return upload }
        var upload = upload
        upload.path = RemoteLayout.contentPath(digest, beside: session.manifest)
        return upload
    }

    /// The content the remote stores, by SHA-256: what the manifest last published names (when it
    /// is of the objects layout) and the objects this session placed. With `checking`, the placed
    /// objects are asked after, as placed files are: one changed or gone on the remote is no
    /// longer counted (and no longer recorded as placed), so it is sent again.
    private func storedContent(published: Manifest?, placed: [RelativePath: (digest: SHA256Digest, record: PlacedFile)], checking: Bool,
                               writer: RemoteWriting, store: StateStore) throws(FerryError) -> Set<SHA256Digest> {
        var stored = Set(placed.values.map(\.digest))
        if let published, published.layout == .objects { for e in published.entries { stored.insert(e.sha256) } }
        guard checking, !placed.isEmpty else { return stored }
        let states = try RemoteProbes.run(placed.keys.sorted(), writer: writer, session: session, engine: engine)
        // Changed, gone, or holding other bytes by the store's own checksum.
        let damaged = placed.filter { path, object in
            states[path].map { !$0.matches(object.record) || ($0.sha256 != nil && $0.sha256 != object.digest) } ?? false
        }.keys.sorted()
        guard !damaged.isEmpty else { return stored }
        emit(.warning(message: "\(Plural.count(damaged.count, "stored object")) changed or vanished on the remote since ferry placed \(damaged.count == 1 ? "it" : "them") (\(Printable.name(damaged[0].string))\(damaged.count > 1 ? " and others" : "")): sent again"))
        for path in damaged { stored.remove(placed[path]!.digest) }
        if !options.dryRun { try store.forgetPlaced(session: session.name, damaged) }
        return stored
    }

    /// Collects content objects. After a manifest naming `publishing` was published (nil: none was
    /// this run), the objects this session placed (`placed`), and those `previous` named, that it
    /// does not name are retired (`RetiredObjects`); those no manifest of the last `keep-versions`
    /// names, retired for `object-grace`, are removed. Never one the new manifest names: it left the
    /// list just now. A failure leaves objects for a later run: a warning at most.
    private func collectContent(publishing: Set<String>?, placed: Set<SHA256Digest>, previous: Manifest?, writer: RemoteWriting, store: StateStore) {
        let now = Timestamp.now()
        var retired = RetiredObjects(path: retiredContentPath)
        if let publishing {
            var present = Set(placed.map(\.hex))
            if let previous, previous.layout == .objects { present.formUnion(previous.entries.map(\.sha256.hex)) }
            retired.update(present: present, current: publishing, now: now)
        }
        // Never one the manifest on the remote names (on a run that published nothing it may be
        // another publisher's, read this run): it is named again.
        let named = previous.map { $0.layout == .objects ? Set($0.entries.map(\.sha256.hex)) : [] } ?? []
        for name in retired.expired(now: now, grace: session.objectGrace, versions: session.keepVersions) {
            if publishing == nil && named.contains(name) {
                retired.removed(name)
                continue
            }
            guard let digest = SHA256Digest(hex: name) else { continue }
            let path = RemoteLayout.contentPath(digest, beside: session.manifest)
            // Forgotten first, as a removed file is (`removeFiles`).
            guard (try? store.forgetPlaced(session: session.name, [path])) != nil, (try? writer.remove(path)) != nil else { break }
            retired.removed(name)
        }
        do { try retired.save() } catch { emit(.warning(message: "cannot keep the list of retired content objects: \(error.message)")) }
    }

    /// After the first manifest of the objects layout was published over one of the tree layout:
    /// the files the tree layout kept at their paths go (with `delete = yes`; otherwise they stay,
    /// said once), and the directories they leave empty.
    private func removeTreeFiles(of previous: Manifest, writer: RemoteWriting, store: StateStore) {
        let paths = previous.entries.map(\.path)
        guard session.delete else {
            emit(.warning(message: "remote-layout = objects: the \(Plural.count(paths.count, "file")) the tree layout kept at their paths stay on the remote (delete = no); readers no longer use them"))
            return
        }
        var failed: [(RelativePath, String)] = []
        _ = try? store.forgetPlaced(session: session.name, paths)
        for path in paths {
            do throws(FerryError) { try writer.remove(path) } catch { failed.append((path, error.message)) }
        }
        try? removeEmptiedDirectories(paths, listed: [], writer: writer)
        if let (path, error) = failed.first {
            emit(.warning(message: "remote-layout = objects: \(Plural.count(failed.count, "file")) of the tree layout could not be removed from the remote (\(Printable.name(path.string)): \(error)); readers no longer use them"))
        }
    }

    // MARK: what the remote holds

    /// The files this run would replace or delete that are not what ferry placed there (someone
    /// edited, replaced or removed them on the remote), with what is wrong with each. Every placed
    /// file is checked when the remote is a local directory (cheap), and over HTTP once
    /// `verify-interval` has passed since the last such check (a file left alone by the local tree
    /// but changed on the remote is found too).
    private func editedOnRemote(plan: PushPlan, placed: [RelativePath: PlacedFile], everything: Bool, writer: RemoteWriting,
                                store: StateStore) throws(FerryError) -> [RelativePath: String] {
        guard !placed.isEmpty else { return [:] }
        var paths: [RelativePath]
        if everything {
            paths = Array(placed.keys)
        } else {
            let changing = plan.uploads.filter { $0.reason == .changed }.map(\.entry.path) + plan.deletions + plan.replacements
            paths = changing.filter { placed[$0] != nil }
        }
        guard !paths.isEmpty else { return [:] }
        paths.sort()
        let states = try RemoteProbes.run(paths, writer: writer, session: session, engine: engine)
        // A run killed between moving a file into place and recording it left the remote holding
        // that upload: the file is this session's, not someone else's change.
        var interrupted: [RelativePath: TransferTask] = [:]
        for task in try store.tasks(session: session.name) where task.state != .done { interrupted[task.path] = task }
        func mine(_ state: RemoteFileState, _ path: RelativePath) -> Bool {
            guard let task = interrupted[path], state.exists, state.size == task.size else { return false }
            return state.sha256.map { $0.hex == task.sha256 } ?? true
        }
        var edited: [RelativePath: String] = [:]
        for path in paths {
            guard let record = placed[path], let state = states[path], !state.matches(record), !mine(state, path) else { continue }
            edited[path] = state.exists
                ? "changed on the remote since ferry placed it (\(state.size.map { "\($0) bytes" } ?? "size unknown") now, \(record.size) placed)"
                : "gone from the remote since ferry placed it"
        }
        return edited
    }

    /// Removes what is in the way of the uploads (paths that changed type): remote files where the
    /// local tree now has a directory, and directories (holding only files ferry published, which
    /// go first) where it now has a file. A directory that holds anything else, or a removal the
    /// remote refuses, blocks the one upload that needs the place; the rest goes on. Not while the
    /// session's conditions hold its uploads back: the remote keeps them meanwhile. Returns the
    /// blocked paths and why.
    private func clearTheWay(_ plan: PushPlan, local: Set<RelativePath>, writer: RemoteWriting, store: StateStore, held: Bool,
                             result: inout SyncResult) throws(FerryError) -> [RelativePath: String] {
        guard !held, !plan.replacements.isEmpty else { return [:] }
        var blocked: [RelativePath: String] = [:]
        try removeFiles(plan.replacements, writer: writer, store: store, result: &result) { path, error throws(FerryError) in
            if error.retryClass == .connectivity { throw error }
            for upload in [path] + path.ancestors where local.contains(upload) {
                blocked[upload] = "cannot remove \(Printable.name(path.string)) from the remote, which is in its way: \(error.message)"
            }
        }
        // The directories that now have to be files, and the ones in them the removals emptied,
        // deepest first.
        let directories = Set(plan.replacements.flatMap(\.ancestors)).filter { d in
            local.contains(d) || d.ancestors.contains(where: local.contains)
        }
        for directory in directories.sorted(by: >) {
            let needed = [directory] + directory.ancestors
            guard let file = needed.first(where: local.contains), blocked[file] == nil else { continue }
            do throws(FerryError) {
                if try !writer.removeDirectoryIfEmpty(directory) {
                    blocked[file] = "\(Printable.name(directory.string)) is a directory on the remote that still holds files ferry did not publish (or the server cannot list it); nothing in it was removed"
                }
            } catch {
                if error.retryClass == .connectivity { throw error }
                blocked[file] = "cannot remove the directory \(Printable.name(directory.string)) from the remote, which is in its way: \(error.message)"
            }
        }
        return blocked
    }

    /// Deletes remote files the local tree no longer has; returns how many failed.
    private func delete(_ paths: [RelativePath], writer: RemoteWriting, store: StateStore, result: inout SyncResult) throws(FerryError) -> Int {
        var failed = 0
        try removeFiles(paths, writer: writer, store: store, result: &result) { path, error in
            failed += 1
            emit(.fileFailed(path: path, error: error.message))
        }
        result.counts.failed += failed
        return failed
    }

    /// Removes files from the remote, each said and no longer recorded as placed; `failure`
    /// decides about one the remote would not remove.
    private func removeFiles(_ paths: [RelativePath], writer: RemoteWriting, store: StateStore, result: inout SyncResult,
                             failure: (RelativePath, FerryError) throws(FerryError) -> Void) throws(FerryError) {
        // Forgotten first: a run killed after a removal must not find the record of a file that is
        // gone and take it for someone else's removal.
        try store.forgetPlaced(session: session.name, paths)
        for path in paths {
            do throws(FerryError) {
                try writer.remove(path)
                result.counts.deleted += 1
                emit(.fileDeleted(path: path))
            } catch {
                try failure(path, error)
            }
        }
    }

    /// Removes the directories that held files the old manifest listed and hold none the new one
    /// lists, deepest first, each only if it is empty now (a directory someone else keeps files in
    /// stays).
    private func removeEmptiedDirectories(_ gone: [RelativePath], listed entries: [ManifestEntry], writer: RemoteWriting) throws(FerryError) {
        guard !gone.isEmpty else { return }
        var listed = Set<RelativePath>()
        for entry in entries { listed.formUnion(entry.path.ancestors) }
        let candidates = Set(gone.flatMap(\.ancestors)).subtracting(listed).filter { $0.string != RelativePath.reservedTopLevel }
        for directory in candidates.sorted(by: >) {
            do throws(FerryError) { _ = try writer.removeDirectoryIfEmpty(directory) } catch {
                if error.retryClass == .connectivity { throw error }
                emit(.warning(message: "the emptied directory \(Printable.name(directory.string)) stays on the remote: \(error.message)"))
            }
        }
    }

    // MARK: the manifest

    /// The remote's manifest as this run read it: its validators and bytes (nil: there was none).
    private struct Seen {
        var etag: String?
        var lastModified: String?
        var bytes: [UInt8]?
    }
    private var seen: Seen?

    /// Whether the remote's manifest is another than this run read at its start: another writer
    /// published meanwhile. Asked with the validators read then, just before this run publishes.
    private func changedSinceRead(_ remote: Remote) throws(FerryError) -> Bool {
        guard let seen else { return false }
        let known = seen.bytes != nil
        switch try manifests.fetchOnce(from: remote, etag: known ? seen.etag : nil, lastModified: known ? seen.lastModified : nil) {
        case .unchanged: return false
        case let .fetched(bytes, _, _, _): return bytes != seen.bytes
        case .missing: return seen.bytes != nil
        }
    }

    /// What the remote must still hold for this run to publish over it: the manifest it read (by
    /// its ETag), or nothing when there was none.
    private var publishCondition: WriteCondition {
        guard let seen else { return .none }
        guard seen.bytes != nil else { return .absent }
        return seen.etag.map { .matches($0) } ?? .none
    }

    /// Publishes `bytes` as the remote's manifest and remembers it; false when the remote no longer
    /// holds the manifest this run read (`publishCondition`). When the write fails, the remote is
    /// asked once: holding these very bytes, it was published (the answer was lost).
    private func publish(_ bytes: [UInt8], version: Int64, files: Int, signer: PublicKey?, expires: Timestamp?, writer: RemoteWriting,
                         remote: Remote, store: StateStore) throws(FerryError) -> Bool {
        let manifests = self.manifests
        try manifests.beginPublishing(bytes)
        do throws(FerryError) {
            if try writer.write(bytes, at: RelativePath(trusted: session.manifest), condition: publishCondition) == .preconditionFailed {
                manifests.endPublishing()
                return false
            }
        } catch {
            guard case let .fetched(now, _, _, _)? = manifests.now(from: remote), now == bytes else { throw error }
            emit(.warning(message: "publishing version \(version) got no answer (\(error.message)), but the remote holds it: published"))
        }
        try remember(published: bytes, version: version, files: files, signer: signer, expires: expires, remote: remote, store: store)
        return true
    }

    /// Keeps what was just published, and the remote's validators for it, so the next run can
    /// tell whether someone else changed the remote meanwhile.
    private func remember(published bytes: [UInt8], version: Int64?, files: Int, signer: PublicKey?, expires: Timestamp?, remote: Remote,
                          store: StateStore) throws(FerryError) {
        let manifests = self.manifests
        try manifests.keep(bytes)
        manifests.endPublishing()
        var etag: String?, lastModified: String?
        if case let .fetched(now, e, l, _)? = manifests.now(from: remote) {
            if now == bytes {
                (etag, lastModified) = (e, l)
            } else {
                emit(.warning(message: "the remote's manifest changed again right after this run published version \(version.map(String.init) ?? "?"): another writer? The next run compares"))
            }
        }
        try store.saveManifest(session: session.name, url: session.manifestURL, etag: etag, lastModified: lastModified, version: version, files: files,
                               signer: signer, expires: expires)
    }

    /// The remote's manifest now; the paths it says differently from the manifest this session
    /// last published there (someone else changed them); and that version. With nothing
    /// published by this session yet (or its state lost), the remote's manifest is taken as it is;
    /// one this session was publishing when it lost the answer is recognized as its own.
    /// nil when the remote says its manifest is still the one published and `unchangedEnds` (the
    /// agent's poll of an untouched tree): then nothing is parsed.
    private func remoteState(_ remote: Remote, record: SessionRecord?, store: StateStore, unchangedEnds: Bool, useCache: Bool = true) throws(FerryError)
        -> (Manifest?, [RelativePath], Int64?)? {
        let url = session.manifestURL
        let manifests = self.manifests
        let cached = useCache ? manifests.cachedBytes(record: record) : nil
        let objects = manifests.objects(remote: remote)
        /// The manifest last published, parsed (and its tree read) only when it is needed.
        func published() -> Manifest? { cached.flatMap { try? manifests.read($0, source: manifests.path, objects: objects).manifest } }
        var now: Manifest?
        var last: Manifest?
        switch try manifests.fetch(from: remote, record: record, cached: cached != nil, options: options, emit: { [unowned self] in self.emit($0) }) {
        case .missing:
            // Nothing published there (yet, or any more).
            seen = Seen(etag: nil, lastModified: nil, bytes: nil)
            last = published()
        case .unchanged:
            if unchangedEnds { return nil }
            // A cache that no longer parses cannot stand for the remote: ask again without it.
            guard let manifest = published() else { return try remoteState(remote, record: record, store: store, unchangedEnds: false, useCache: false) }
            seen = Seen(etag: record?.manifestETag, lastModified: record?.manifestLastModified, bytes: cached)
            return (manifest, [], manifest.version)
        case let .fetched(bytes, etag, lastModified, _):
            seen = Seen(etag: etag, lastModified: lastModified, bytes: bytes)
            if let pending = manifests.pendingPublish {
                if pending == bytes, let mine = try? manifests.read(bytes, source: url, objects: objects).manifest {
                    // This session published it; the answer was lost (a reset, kill -9).
                    emit(.warning(message: "the remote holds version \(mine.version.map(String.init) ?? "?") that an earlier run published without learning it had: taken as published"))
                    try remember(published: bytes, version: mine.version, files: mine.entries.count, signer: mine.signer(trusting: signingKey.map { [$0.publicKey] } ?? []), expires: mine.expires,
                                 remote: remote, store: store)
                    return (mine, [], mine.version)
                }
                manifests.endPublishing()
            }
            last = published()
            if let last, bytes == cached {
                // What was published, asked for in full (its validators did not hold then):
                // the validators of this answer serve the next poll.
                if etag != record?.manifestETag || lastModified != record?.manifestLastModified {
                    try store.saveManifestValidators(session: session.name, etag: etag, lastModified: lastModified)
                }
                return (last, [], last.version)
            }
            do throws(FerryError) {
                now = try manifests.read(bytes, source: url, objects: objects).manifest
            } catch {
                // Someone else wrote something there that is not a manifest: it says nothing
                // of what the remote holds.
                guard session.conflict == .localWins else {
                    throw FerryError(.manifest, "the remote's manifest does not parse (\(error.message)): something other than this session wrote it; nothing was uploaded or deleted",
                                     hint: "fix or remove \(url) on the remote, or set conflict = local-wins in [session \(session.name)] to publish the whole local tree over it")
                }
                emit(.warning(message: "the remote's manifest does not parse (\(error.message)); conflict = local-wins: the whole local tree is published over it"))
                // As a remote that lists nothing, every path changed (the manifest too): the
                // version goes on from the last one published.
                let empty = Manifest(format: .ferry, version: last?.version, generated: nil, expires: nil, entries: [])
                return (empty, (last?.entries.map(\.path) ?? []) + [RelativePath(trusted: session.manifest)], last?.version)
            }
        }
        guard let last else { return (now, [], nil) }
        return (now, ConflictPolicy.changedOnRemote(published: last, now: now), last.version)
    }

    // MARK: the local tree

    /// What a push scan found: the local tree as manifest entries, the stat each was taken at,
    /// and what it could not use.
    private struct LocalScan {
        let root: LocalRoot
        var entries: [ManifestEntry] = []
        var stats: [RelativePath: LocalEntry] = [:]
        var hashed = 0
        /// Hashed as they are sent (see `Upload.hashKnown`).
        var unhashed = Set<RelativePath>()
        /// Files that could not be read, and why: each fails alone.
        var unreadable: [(path: RelativePath, error: String)] = []
        /// Entries no manifest can list (symlinks, special files, names a manifest cannot carry).
        var skipped = 0
    }

    /// The files of the local tree as manifest entries. A file the hash cache does not vouch for is
    /// hashed now when the remote lists its path at its size (the hash decides whether it
    /// changed); otherwise it is an upload whatever its hash, and its hash is taken as it is sent,
    /// so its bytes are read once. What cannot be published (symlinks, special files, names a
    /// manifest cannot carry, and the session's own manifest name and `.ferry/`) is skipped with a
    /// warning said once per path, again only when the entry changes.
    private func scanLocal(store: StateStore, published: Manifest?, hashingEverything: Bool) throws(FerryError) -> LocalScan {
        let root = try LocalRoot(path: session.local, create: false)
        var scan = try root.scan(expecting: try store.hashCacheCount(session: session.name))
        try store.loadHashes(session: session.name, into: &scan.tree)
        var out = LocalScan(root: root)
        var notices: [(key: String, signature: String, message: String)] = scan.warnings.map { ($0, "", $0) }
        var (files, skipped) = scan.tree.publishable()
        let filter = session.filter
        if !filter.isEmpty {
            files = files.filter { filter.admits($0.path) }
            skipped = skipped.filter { filter.admits($0.item.path, isDirectory: $0.item.entry.kind == .directory) }
        }
        for s in skipped {
            notices.append((s.item.path.string, "\(s.item.entry.kind.rawValue):\(s.item.entry.inode):\(s.item.entry.mtime.rfc3339)", s.message))
        }
        // The session's manifest is the remote's: a file of that name in the source is not content,
        // and neither is a `.ferry/` there (a pull mirror's partial files).
        let manifestPath = RelativePath(trusted: session.manifest)
        if root.stat(RelativePath(trusted: RelativePath.reservedTopLevel)) != nil {
            notices.append((RelativePath.reservedTopLevel, "", "skipped \(RelativePath.reservedTopLevel)/: it is ferry's own directory, never published"))
        }
        var fresh: [(RelativePath, CachedHash)] = []
        for item in files {
            if item.path == manifestPath {
                notices.append((item.path.string, "manifest", "skipped \(Printable.name(item.path.string)): it is this session's manifest name, which ferry publishes itself"))
                continue
            }
            var entry = item.entry
            var sha = item.verified
            if sha == nil, !hashingEverything,
               published.flatMap({ m in m.index(of: item.path).map { m.entries[$0].size } }).map({ $0 == nil || $0 == entry.size }) != true {
                sha = PushSync.unknownHash
                out.unhashed.insert(item.path)
            }
            if sha == nil {
                let hashed: CachedHash
                do { hashed = try root.hash(item.path) } catch {
                    out.unreadable.append((item.path, error.message))
                    continue
                }
                fresh.append((item.path, hashed))
                sha = hashed.sha256
                entry = LocalEntry(kind: .file, size: hashed.size, mtime: hashed.mtime, ctime: hashed.ctime, inode: hashed.inode, mode: entry.mode)
            }
            out.entries.append(ManifestEntry(path: item.path, size: entry.size, sha256: sha!, mtime: entry.mtime, mode: entry.mode & 0o777))
            out.stats[item.path] = entry
        }
        try store.saveHashes(session: session.name, fresh)
        out.hashed = fresh.count
        out.skipped = notices.count
        let unsaid = try store.unsaidNotices(session: session.name, kind: "push-skipped", notices.map { ($0.key, $0.signature) })
        let shown = notices.filter { unsaid.contains($0.key) }
        for notice in shown.prefix(20) { emit(.warning(message: notice.message)) }
        if shown.count > 20 { emit(.warning(message: "and \(shown.count - 20) more entries skipped; each is said once, again only when it changes")) }
        return out
    }
}

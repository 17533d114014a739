import Glibc
import FerryCore

/// The objects a push writes beside its manifest: the metadata objects of a format-2 tree
/// (`.ferry/meta/`), and with `remote-layout = objects` the content objects; each verified as
/// written, repaired when the remote lost one, and collected once no recent manifest names it.
extension PushSync {
    // MARK: metadata objects (format 2)

    /// Where metadata object `digest` goes on the remote: `.ferry/meta/` beside the manifest.
    /// `keys-dir`: each key-set document in it the remote does not hold as it is goes to
    /// `.ferry/keys/<N>.json` beside the manifest, before the manifest that names the newest
    /// (returned); the signing keys must satisfy that set, or nothing is published.
    func sendKeySets(writer: RemoteWriting, remote: Remote) throws(FerryError) -> Int64? {
        guard let directory = session.keysDirectory, let newest = try KeySets.newest(in: directory) else { return nil }
        try KeySets.check(signers: signingKeys, against: newest, what: "session '\(session.name)': the manifest")
        for version in 2...newest.version {
            let bytes = try FileSystem.readFile(directory + "/\(version).json", limit: KeySet.maximumSize)
            if case let .fetched(held, _, _, _)? = try? remote.fetchManifest(url: ManifestTree.beside(session.manifestURL, KeySet.path(version)), etag: nil,
                                                                            lastModified: nil, maximumSize: Int64(KeySet.maximumSize)), held == bytes { continue }
            _ = try writer.writeObject(bytes, at: RelativePath(trusted: ManifestTree.beside(session.manifest, KeySet.path(version))))
        }
        return newest.version
    }

    func objectPath(_ digest: String) -> RelativePath {
        RelativePath(trusted: ManifestTree.objectDirectory(beside: session.manifest) + "/" + digest)
    }

    /// Sends the objects of a publication (its tree's, its content indexes') the remote does not
    /// hold. Each is listed as retired before it goes (`RetiredObjects`): if the root that names it
    /// is never published, it is collected after the grace period like any other object no root names.
    func sendObjects(_ all: [(sha256: SHA256Digest, bytes: [UInt8])], objects: ManifestObjects, writer: RemoteWriting) throws(FerryError) {
        var seen = Set<SHA256Digest>()
        let missing = all.filter { !objects.has($0.sha256) && seen.insert($0.sha256).inserted }
        guard !missing.isEmpty else { return }
        var retired = RetiredObjects(path: manifests.path + ".retired")
        retired.retire(missing.map(\.sha256.hex), now: clock.now())
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

    /// Reads `written` back from the remote; one it does not hold as named is written once more
    /// and read again, and one still wrong stops the publication.
    func verifyObjects(_ written: [(digest: SHA256Digest, bytes: [UInt8])], objects: ManifestObjects, writer: RemoteWriting) throws(FerryError) {
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
    func repairObjects(_ objects: ManifestObjects, writer: RemoteWriting) throws(FerryError) {
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

    /// After a publication whose tree and indexes are the objects `naming`: every object this
    /// session placed that it does not name is retired now (unless it was already), and those no
    /// manifest of the last `keep-versions` names, retired for `object-grace`, are removed from
    /// the remote. A failure leaves objects behind for the next run, never removes one the
    /// published root names.
    func collectObjects(naming: [SHA256Digest], objects: ManifestObjects, writer: RemoteWriting) {
        let now = clock.now()
        var retired = RetiredObjects(path: manifests.path + ".retired")
        retired.update(present: objects.names(), current: Set(naming.map(\.hex)), now: now)
        for name in retired.expired(now: now, grace: session.objectGrace, versions: session.keepVersions) {
            guard (try? writer.remove(objectPath(name))) != nil else { break }
            retired.removed(name)
        }
        do { try retired.save() } catch { emit(.warning(message: "cannot keep the list of retired metadata objects: \(error.message)")) }
        objects.sweep(keeping: naming)
    }

    // MARK: content objects (remote-layout = objects)

    /// The list of content objects no published manifest names (`RetiredObjects`).
    var retiredContentPath: String { manifests.path + ".retired-content" }

    /// A task as the remote knows it: at its destination (with `remote-layout = objects`, its
    /// content object), so what a killed run left there is found by that name.
    func placing(_ task: TransferTask) -> TransferTask {
        guard session.remoteLayout == .objects, let digest = SHA256Digest(hex: task.sha256) else { return task }
        var task = task
        task.path = RemoteLayout.contentPath(digest, beside: session.manifest)
        return task
    }

    func placing(_ upload: JournaledUpload) -> JournaledUpload {
        guard session.remoteLayout == .objects, let digest = SHA256Digest(hex: String(upload.content.prefix(64))) else { return upload }
        var upload = upload
        upload.path = RemoteLayout.contentPath(digest, beside: session.manifest)
        return upload
    }

    /// The content the remote stores, by SHA-256: what the manifest last published names (when it
    /// is of the objects layout) and the objects this session placed. With `checking`, the placed
    /// objects are asked after, as placed files are: one changed or gone on the remote is no
    /// longer counted (and no longer recorded as placed), so it is sent again.
    func storedContent(published: Manifest?, pieces: [SHA256Digest: [SHA256Digest]], placed: [RelativePath: (digest: SHA256Digest, record: PlacedFile)],
                       checking: Bool, writer: RemoteWriting, store: StateStore) throws(FerryError) -> Set<SHA256Digest> {
        var stored = Set(placed.values.map(\.digest))
        if let published { stored.formUnion(contentNames(published, pieces: pieces)) }
        guard checking, !placed.isEmpty else { return stored }
        var states = try RemoteProbes.run(placed.keys.sorted(), writer: writer, session: session, engine: engine)
        try readBackUnproven(placed, &states, writer: writer, store: store)
        // Changed, gone, or holding other bytes by the store's own checksum or ferry's reading.
        let damaged = placed.filter { path, object in
            states[path].map { !$0.matches(object.record) || ($0.sha256 != nil && $0.sha256 != object.digest) } ?? false
        }.keys.sorted()
        guard !damaged.isEmpty else { return stored }
        emit(.warning(message: "\(Plural.count(damaged.count, "stored object")) changed or vanished on the remote since ferry placed \(damaged.count == 1 ? "it" : "them") (\(Printable.name(damaged[0].string))\(damaged.count > 1 ? " and others" : "")): sent again"))
        for path in damaged { stored.remove(placed[path]!.digest) }
        // A file stored as its pieces is stored only while all of them are.
        let lost = Set(damaged.map { placed[$0]!.digest })
        for (content, its) in pieces where its.contains(where: lost.contains) { stored.remove(content) }
        try state.forgetPlaced(damaged)
        return stored
    }

    /// A record an older ferry made says nothing of how the object was verified, and it may stand
    /// for damaged bytes a HEAD cannot tell from the right ones (on a store that computes no
    /// checksum). Each such object whose HEAD (`states`) matched its record without a checksum is
    /// read back once, and its state becomes what the reading found (`storedContent` then judges
    /// it); one that holds its content is recorded again as read back, and not read again.
    private func readBackUnproven(_ placed: [RelativePath: (digest: SHA256Digest, record: PlacedFile)], _ states: inout [RelativePath: RemoteFileState],
                                  writer: RemoteWriting, store: StateStore) throws(FerryError) {
        let unproven = placed.filter { path, object in
            object.record.verified == nil && states[path].map { $0.matches(object.record) && $0.sha256 == nil } == true
        }
        guard !unproven.isEmpty else { return }
        let limits = unproven.mapValues { $0.record.size >= 0 ? $0.record.size : Int64.max }
        let read = try RemoteProbes.run(unproven.keys.sorted(), writer: writer, session: session, engine: engine, readingBack: limits)
        var proven: [(RelativePath, PlacedFile)] = []
        for (path, object) in unproven {
            guard let state = read[path] else { continue }
            states[path] = state
            if state.exists && state.sha256 == object.digest {
                proven.append((path, PlacedFile(size: object.record.size, validator: object.record.validator, verified: .readBack)))
            }
        }
        try store.recordPlaced(session: session.name, proven)
    }

    /// The content objects a manifest of the objects layout names: each file's, or for a file
    /// stored as its pieces, each piece's and its own SHA-256 (what counts as stored), as `pieces`
    /// (`storedPieces` of its entries) knows them; a file whose pieces it does not know counts for
    /// nothing. None for the tree layout.
    func contentNames(_ manifest: Manifest, pieces: [SHA256Digest: [SHA256Digest]]) -> Set<SHA256Digest> {
        guard manifest.layout == .objects else { return [] }
        var names = Set(manifest.entries.lazy.filter { $0.index?.storedAsPieces != true }.map(\.sha256))
        for (content, its) in pieces {
            names.insert(content)
            names.formUnion(its)
        }
        return names
    }

    /// Collects content objects. After a manifest naming `publishing` was published (nil: none was
    /// this run), the objects this session placed (`placed`), and those `previous` named, that it
    /// does not name are retired (`RetiredObjects`); those no manifest of the last `keep-versions`
    /// names, retired for `object-grace`, are removed. Never one the new manifest names: it left the
    /// list just now. A failure leaves objects for a later run: a warning at most.
    func collectContent(publishing: Set<String>?, placed: Set<SHA256Digest>, previous: Set<String>, writer: RemoteWriting, store: StateStore) {
        let now = clock.now()
        var retired = RetiredObjects(path: retiredContentPath)
        if let publishing {
            retired.update(present: Set(placed.map(\.hex)).union(previous), current: publishing, now: now)
        }
        // Never one the manifest on the remote names (on a run that published nothing it may be
        // another publisher's, read this run): it is named again.
        let named = publishing == nil ? previous : []
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
    func removeTreeFiles(of previous: Manifest, writer: RemoteWriting, store: StateStore) {
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
}

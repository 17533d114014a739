import Glibc
import FerryCore

/// The manifest of a push: the one this session last published, read back from the remote (and
/// what another writer changed in it), and the new one written over it only if the remote still
/// holds what this run read.
extension PushSync {
    /// Why the manifest this session last published must be published again though nothing
    /// changed (nil: it need not): it is signed by other keys than `sign-key` (a rotation), names
    /// another key set than the newest in `keys-dir` or another share than `rollout`, or it expires
    /// within half of `expires` (or says no expiry when the session wants one).
    func reissueReason(_ record: SessionRecord?) -> String? {
        guard let record, record.manifestVersion != nil else { return nil }
        let keys = signingKeys.map(\.publicKey)
        if record.manifestSigners != keys {
            return keys.isEmpty ? "is signed, and the session no longer signs" : "is not signed by sign-key (\(keys.map(\.description).joined(separator: ", ")))"
        }
        // What the published root says (a push publishes a format-2 root: a small file).
        if let cached = try? FileSystem.readFile(manifests.path, limit: Int(session.maxManifestSize)),
           let published = try? Manifests.parse(cached, source: manifests.path) {
            if let directory = session.keysDirectory, let newest = try? KeySets.newest(in: directory)?.version, published.keySet != newest {
                return "names key set \(published.keySet ?? 1), and keys-dir holds key set \(newest)"
            }
            if (published.rollout?.percent ?? 100) != session.rollout {
                return "goes to \(published.rollout?.percent ?? 100)% of machines, and rollout = \(session.rollout)%"
            }
        }
        if let lifetime = session.expires {
            guard let at = record.manifestExpires else { return "carries no expiry" }
            if Double(at.seconds - clock.now().seconds) < lifetime / 2 { return "expires at \(at.rfc3339)" }
        }
        return nil
    }

    /// The remote's manifest as this run read it: its validators and bytes (nil: there was none).
    struct Seen {
        var etag: String?
        var lastModified: String?
        var bytes: [UInt8]?
    }

    /// Whether the remote's manifest is another than this run read at its start: another writer
    /// published meanwhile. Asked with the validators read then, just before this run publishes.
    func changedSinceRead(_ remote: Remote) throws(FerryError) -> Bool {
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
    var publishCondition: WriteCondition {
        guard let seen else { return .none }
        guard seen.bytes != nil else { return .absent }
        return seen.etag.map { .matches($0) } ?? .none
    }

    /// Writes `bytes` as the remote's manifest and remembers it; false when the remote no longer
    /// holds the manifest this run read (`publishCondition`). When the write fails, the remote is
    /// asked once: holding these very bytes, it was published (the answer was lost).
    func writeManifest(_ bytes: [UInt8], version: Int64, files: Int, signers: [PublicKey], expires: Timestamp?, writer: RemoteWriting,
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
        try remember(published: bytes, version: version, files: files, signers: signers, expires: expires, remote: remote, store: store)
        return true
    }

    /// Keeps what was just published, and the remote's validators for it, so the next run can
    /// tell whether someone else changed the remote meanwhile.
    func remember(published bytes: [UInt8], version: Int64?, files: Int, signers: [PublicKey], expires: Timestamp?, remote: Remote,
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
                               signers: signers, expires: expires)
    }

    /// The remote's manifest now; the paths it says differently from the manifest this session
    /// last published there (someone else changed them); and that version. With nothing
    /// published by this session yet (or its state lost), the remote's manifest is taken as it is;
    /// one this session was publishing when it lost the answer is recognized as its own.
    /// nil when the remote says its manifest is still the one published and `unchangedEnds` (the
    /// agent's poll of an untouched tree): then nothing is parsed.
    func remoteState(_ remote: Remote, record: SessionRecord?, store: StateStore, unchangedEnds: Bool, useCache: Bool = true) throws(FerryError)
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
                    try remember(published: bytes, version: mine.version, files: mine.entries.count, signers: mine.signers(trusting: signingKeys.map(\.publicKey)), expires: mine.expires,
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
}

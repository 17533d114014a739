import Glibc
import FerryCore

/// The manifest of a pull: asked for conditionally, read (with the tree of a format-2 root), and
/// the rules it must pass to be taken.
extension PullSync {
    /// A manifest read from the remote, or from the cache when the remote says it is unchanged.
    struct Fetched {
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
    func acceptance(_ record: SessionRecord?, localFiles: Int) -> ManifestAcceptance {
        ManifestAcceptance(session: session.name, now: clock.now(),
                           appliedVersion: record?.manifestURL == session.manifestURL ? record?.manifestVersion : nil,
                           localFiles: localFiles, allowRollback: session.allowRollback, allowEmpty: session.allowEmpty,
                           trustedKeys: trust.keys, threshold: trust.threshold,
                           floor: record?.manifestURL == session.manifestURL ? record?.trustFloor : nil, requireExpiry: session.requireExpiry)
    }

    /// Whether the manifest last taken (as the state records it) would still be taken as it is:
    /// signed by as many keys `trusted-keys` still lists as `trust-threshold` asks (when it lists
    /// any), with an expiry when the session requires one, and not expired.
    func stillTrusted(_ record: SessionRecord?) -> Bool {
        if let expires = record?.manifestExpires, expires < acceptance(record, localFiles: 0).judgedNow { return false }
        guard !session.trustedKeys.isEmpty else { return true }
        if session.requireExpiry && record?.manifestExpires == nil { return false }
        return (record?.manifestSigners ?? []).filter(trust.keys.contains).count >= trust.threshold
    }

    /// The key set this session trusts now: the config's, or the last one it took (`KeyChain`).
    var trust: KeySet {
        if chain == nil { chain = KeyChain(session: session, state: agent.state, keeps: !options.dryRun) }
        return chain!.current
    }

    /// Follows the key sets from the one trusted to the one `manifest` says it is signed under,
    /// each fetched from beside the remote's manifest (or a mirror's: each is checked against the
    /// one before) and kept; a manifest under an older set is refused. Said once per set taken.
    func followKeys(of manifest: Manifest, remote: Remote) throws(FerryError) {
        guard !session.trustedKeys.isEmpty else { return }
        let target = manifest.keySet ?? 1
        guard target != trust.version else { return }
        let sources = sources(remote)
        let places = [(sources.all[sources.originIndex].remote, session.manifestURL)] + sources.all.dropLast().filter { $0.demoted == nil }.map { ($0.remote, $0.manifestURL) }
        let taken = try chain!.advance(to: target, source: session.manifestURL, session: session.name) { (version) throws(FerryError) -> [UInt8] in
            var reasons: [String] = []
            for (remote, manifestURL) in places {
                let url = ManifestTree.beside(manifestURL, KeySet.path(version))
                do throws(FerryError) {
                    if case let .fetched(bytes, _, _, _) = try remote.fetchManifest(url: url, etag: nil, lastModified: nil, maximumSize: Int64(KeySet.maximumSize)) {
                        return bytes
                    }
                    reasons.append("\(url): not there")
                } catch {
                    reasons.append("\(url): \(error.message)")
                }
            }
            throw .manifest("key set \(version), which manifest \(self.session.manifestURL) is signed under, cannot be had (\(reasons.joined(separator: "; "))): refused, nothing was changed",
                            hint: "the publisher must publish \(KeySet.path(version)) beside the manifest (ferry key set writes it; a push uploads keys-dir)")
        }
        for version in taken {
            emit(.warning(message: "took key set \(version): session '\(session.name)' now trusts \(trust.keys.map(\.description).joined(separator: ", ")) (\(trust.threshold) of them must sign); keys it no longer lists sign nothing"))
        }
    }

    /// Keys as events name them: separated by spaces (nil: none).
    static func named(_ keys: [PublicKey]) -> String? { keys.isEmpty ? nil : keys.map(\.description).joined(separator: " ") }

    /// Asks the remote for the manifest, conditionally when the cache holds the last one. When the
    /// remote cannot be had for a reason that may pass (unreachable, a server error) and the
    /// session trusts only signed manifests (`trusted-keys`), a mirror's copy is taken instead:
    /// it is checked as the remote's would be (its signature, no rollback, expiry), so a site
    /// goes on with its origin down. Its validators are not kept (they are the mirror's).
    func requestManifest(record: SessionRecord?, remote: Remote) throws(FerryError) -> ManifestFetch {
        let manifests = self.manifests
        do {
            return try manifests.fetch(from: remote, record: record, cached: record?.manifestURL == session.manifestURL && FileSystem.exists(manifests.path),
                                       options: options, emit: { [unowned self] in self.emit($0) }).required()
        } catch {
            guard !session.trustedKeys.isEmpty, !session.mirrors.isEmpty, error.retryClass != .never else { throw error }
            for mirror in sources(remote).all.dropLast() where mirror.demoted == nil {
                guard case let .fetched(bytes, _, _, _)? = try? mirror.remote.fetchManifest(url: mirror.manifestURL, etag: nil, lastModified: nil,
                                                                                          maximumSize: session.maxManifestSize) else { continue }
                emit(.warning(message: "the remote's manifest cannot be had (\(error.message)); taken from mirror \(mirror.name), as signed by a trusted key"))
                return .fetched(bytes: bytes, etag: nil, lastModified: nil, redirectedTo: nil)
            }
            throw error
        }
    }

    /// What each source served of the metadata objects fetched since the last call counts with the
    /// files it serves; a mirror that sent a wrong one is demoted for the files too, said once.
    func countServed(_ objects: ManifestObjects, remote: Remote) {
        for (k, served) in objects.takeServed().sorted(by: { $0.key < $1.key }) {
            sources(remote).count(k, bytes: served.bytes, requests: served.requests)
            if let why = served.demoted, sources(remote).demote(k, why: why) {
                emit(.warning(message: "mirror \(sources(remote).all[k].name) \(why): not used again this run; what it would serve comes from the next source"))
            }
        }
    }

    /// The manifest an answer stands for, parsed (the cached one for a 304), with the tree of a
    /// format-2 root read: its objects from the cache, or fetched. A root this session would
    /// refuse (unsigned, rolled back, expired) is refused before any object is fetched; the
    /// caller checks the whole manifest against the mirror before anything is recorded.
    func readManifest(_ fetched: ManifestFetch, record: SessionRecord?, remote: Remote) throws(FerryError) -> Fetched {
        let url = session.manifestURL
        // Objects not cached come from the mirrors first, if the session has any.
        let objects = manifests.objects(remote: remote, keeps: !options.dryRun, mirrors: { [unowned self] in self.sources(remote).mirrorObjects })
        func resolved(_ root: Manifest) throws(FerryError) -> (Manifest, [SHA256Digest]) {
            guard root.tree != nil else { return (root, []) }
            try followKeys(of: root, remote: remote)
            try acceptance(record, localFiles: 0).check(root, source: url)
            let read = try objects.resolve(root, source: url, maximumSize: session.maxManifestSize)
            countServed(objects, remote: remote)
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
    func contentLocator(_ manifest: Manifest) throws(FerryError) -> (ManifestEntry) -> RelativePath {
        let layout = manifest.layout
        guard layout != .tree else { return { $0.path } }
        guard let beside = session.manifestPath else {
            throw .manifest("manifest \(session.manifestURL) says its files are stored as objects beside it (layout \(layout.rawValue)), but it is not under the remote \(session.remote.url): refused, nothing was changed",
                            hint: "name the manifest relative to the remote (manifest = PATH), or set remote to the directory that holds it")
        }
        return { layout.location(of: $0, manifest: beside) }
    }
}

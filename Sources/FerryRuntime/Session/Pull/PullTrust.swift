import Glibc
import FerryCore

/// What trust hands on: the manifest taken, where the bytes of each file it lists are under the
/// remote, and the local side it was checked against.
struct Trusted {
    let record: SessionRecord?
    let mirror: Mirror
    let fetched: FetchedManifest
    let local: LocalSide
    let locate: (ManifestEntry) -> RelativePath
}

/// Trust: the one place where a pull decides whether it takes a manifest. A manifest is taken
/// only when the session's rules (`ManifestAcceptance`) pass: its signatures by enough keys of the
/// key set trusted (`trust-threshold`), that key set followed from the one the config names
/// (`KeyChain`, each set fetched from beside the manifest or a mirror's), its expiry (judged by
/// the later of the clock and the time floor), no rollback before the version or the newest
/// signed time taken, no emptying the mirror. Only then is it remembered (the staged bytes become
/// the cached manifest, and the state records its validators, signers, expiry and the raised time
/// floor); one refused changes nothing. The same rules answer the 304 shortcut (`stillTrusted`:
/// would the manifest last taken still be taken?) and the format-2 pre-check (`precheck`: a root
/// refused before any of its objects is fetched).
struct TrustStage {
    let pull: PullRun

    func run(_ observed: Observed) throws(FerryError) -> Onward<Trusted> {
        let fetched = observed.fetched
        // A new manifest waits in its staging file until it is accepted; one refused leaves no copy.
        do throws(FerryError) {
            for w in observed.local.warnings { pull.emit(.warning(message: w)) }
            let locate = try pull.contentLocator(fetched.manifest)
            let acceptance = try check(fetched.manifest, record: observed.record,
                                       localFiles: observed.local.tree.fileCount)
            try remember(fetched, floor: acceptance.raisedFloor(taking: fetched.manifest))
            return .go(Trusted(record: observed.record, mirror: observed.mirror, fetched: fetched,
                               local: observed.local, locate: locate))
        } catch {
            if let staged = fetched.staged { unlink(staged) }
            throw error
        }
    }

    /// The key set this session trusts now: the config's, or the last one it took (`KeyChain`).
    var keys: KeySet { pull.keys.current }

    /// The rules a manifest must pass for this session (`localFiles`: what the mirror holds).
    func acceptance(_ record: SessionRecord?, localFiles: Int) -> ManifestAcceptance {
        let same = record?.manifestURL == pull.session.manifestURL
        return ManifestAcceptance(session: pull.session.name, now: pull.clock.now(),
                                  appliedVersion: same ? record?.manifestVersion : nil,
                                  localFiles: localFiles, allowRollback: pull.session.allowRollback,
                                  allowEmpty: pull.session.allowEmpty,
                                  trustedKeys: keys.keys, threshold: keys.threshold,
                                  floor: same ? record?.trustFloor : nil,
                                  requireExpiry: pull.session.requireExpiry)
    }

    /// The whole check: the key sets followed to the one `manifest` is signed under, then the
    /// rules; returns the rules it passed.
    @discardableResult
    func check(_ manifest: Manifest, record: SessionRecord?, localFiles: Int) throws(FerryError) -> ManifestAcceptance {
        try followKeys(of: manifest)
        let acceptance = acceptance(record, localFiles: localFiles)
        try acceptance.check(manifest, source: pull.sources.rootSource)
        return acceptance
    }

    /// A format-2 root, before any object of its tree is fetched (what the mirror holds is not
    /// known yet: emptiness is judged with the whole manifest).
    func precheck(_ root: Manifest, record: SessionRecord?) throws(FerryError) {
        try check(root, record: record, localFiles: 0)
    }

    /// Whether the manifest last taken (as the state records it) would still be taken as it is:
    /// signed by as many keys `trusted-keys` still lists as `trust-threshold` asks (when it lists
    /// any), with an expiry when the session requires one, and not expired.
    func stillTrusted(_ record: SessionRecord?) -> Bool {
        if let expires = record?.manifestExpires, expires < acceptance(record, localFiles: 0).judgedNow { return false }
        guard !pull.session.trustedKeys.isEmpty else { return true }
        if pull.session.requireExpiry && record?.manifestExpires == nil { return false }
        return (record?.manifestSigners ?? []).filter(keys.keys.contains).count >= keys.threshold
    }

    /// Follows the key sets from the one trusted to the one `manifest` says it is signed under,
    /// each fetched from beside the remote's manifest (or a mirror's: each is checked against the
    /// one before) and kept; a manifest under an older set is refused. Said once per set taken.
    private func followKeys(of manifest: Manifest) throws(FerryError) {
        let session = pull.session
        guard !session.trustedKeys.isEmpty else { return }
        let target = manifest.keySet ?? 1
        guard target != keys.version else { return }
        let places = pull.sources.keySetPlaces
        let taken = try pull.keys.advance(to: target, source: session.manifestURL,
                                          session: session.name) { (version) throws(FerryError) -> [UInt8] in
            var reasons: [String] = []
            for (remote, manifestURL) in places {
                let url = ManifestTree.beside(manifestURL, KeySet.path(version))
                do throws(FerryError) {
                    let answer = try remote.fetchManifest(url: url, etag: nil, lastModified: nil,
                                                          maximumSize: Int64(KeySet.maximumSize))
                    if case let .fetched(bytes, _, _, _) = answer { return bytes }
                    reasons.append("\(url): not there")
                } catch {
                    reasons.append("\(url): \(error.message)")
                }
            }
            throw .manifest("key set \(version), which manifest \(session.manifestURL) is signed under, cannot be had "
                            + "(\(reasons.joined(separator: "; "))): refused, nothing was changed",
                            hint: "the publisher must publish \(KeySet.path(version)) beside the manifest (ferry key "
                                  + "set writes it; a push uploads keys-dir)")
        }
        for version in taken {
            pull.emit(.warning(message: "took key set \(version): session '\(session.name)' now trusts "
                                        + "\(keys.keys.map(\.description).joined(separator: ", ")) (\(keys.threshold) "
                                        + "of them must sign); keys it no longer lists sign nothing"))
        }
    }

    /// A manifest taken is remembered: its staged bytes become the cached one, and the state
    /// records what the next run's checks need. Said once (`manifest-fetched`).
    private func remember(_ fetched: FetchedManifest, floor: Timestamp?) throws(FerryError) {
        let (url, manifest) = (pull.session.manifestURL, fetched.manifest)
        let signers = manifest.signers(trusting: keys.keys)
        if let staged = fetched.staged {
            try pull.manifests.commit(staged: staged)
            try pull.store.saveManifest(session: pull.session.name, url: url, etag: fetched.etag,
                                        lastModified: fetched.lastModified,
                                       version: manifest.version, files: manifest.entries.count, signers: signers,
                                       expires: manifest.expires,
                                       trustFloor: floor)
        }
        pull.sources.sayRootTaken()
        if fetched.changed { pull.sources.keepRootAtMirrors() }
        // Metadata counts against the machine's byte budget, which never holds it back.
        pull.engine.budget?.charge(Int(clamping: fetched.metadataBytes))
        pull.emit(.manifestFetched(url: pull.sources.rootSource, version: manifest.version, files: manifest.entries.count,
                                   unchanged: !fetched.changed,
                                  signedBy: TrustStage.named(signers), metadataBytes: fetched.metadataBytes,
                                  redirectedTo: fetched.redirectedTo))
    }

    /// Keys as events name them: separated by spaces (nil: none).
    static func named(_ keys: [PublicKey]) -> String? {
        keys.isEmpty ? nil : keys.map(\.description).joined(separator: " ")
    }
}

extension PullRun {
    /// Where the bytes of each file `manifest` lists are under the remote (`RemoteLayout`): at its
    /// path, or (`"layout": "objects"`) in the content objects beside the manifest, which must
    /// then be under the remote.
    func contentLocator(_ manifest: Manifest) throws(FerryError) -> (ManifestEntry) -> RelativePath {
        let layout = manifest.layout
        guard layout != .tree else { return { $0.path } }
        guard let beside = session.manifestPath else {
            throw .manifest("manifest \(session.manifestURL) says its files are stored as objects beside it (layout "
                            + "\(layout.rawValue)), but it is not under the remote \(session.remote.url): refused, "
                            + "nothing was changed",
                            hint: "name the manifest relative to the remote (manifest = PATH), or set remote to the "
                                  + "directory that holds it")
        }
        return { layout.location(of: $0, manifest: beside) }
    }
}

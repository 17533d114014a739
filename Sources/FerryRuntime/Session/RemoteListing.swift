import FerryCore

/// `ferry ls`: what a session's remote manifest lists now, read as a pull would read it (format 2
/// objects fetched, signatures checked against `trusted-keys`, expiry), without syncing and
/// without changing the state: the manifest is asked unconditionally, objects fetched for it are
/// kept in memory only.
public struct RemoteListing: Sendable {
    public let session: String
    public let url: String
    public let version: Int64?
    public let generated: Timestamp?
    public let signer: PublicKey?
    /// Files the manifest lists in all.
    public let listed: Int
    /// The entries at or under the path asked for, in path order.
    public let entries: [ManifestEntry]

    /// Reads session `session`'s manifest; `under`: only the file at that path or the files under
    /// that directory (nil: all). Its expiry is judged at `clock`'s time.
    public static func read(session: SessionConfig, agent: AgentConfig, under: RelativePath?, clock: any Clock) throws(FerryError) -> RemoteListing {
        let remote = try Remotes.open(session, clock: clock)
        let source = ManifestSource(session: session, state: agent.state)
        let url = session.manifestURL
        guard case let .fetched(bytes, _, _, _) = try source.fetchOnce(from: remote, etag: nil, lastModified: nil).required() else {
            throw .manifest("manifest \(url) answered without content to an unconditional request")
        }
        let root = try Manifests.parse(bytes, source: url)
        // The rules a pull applies before it reads a format-2 tree: trust and expiry (not the
        // version against the last applied one, which only a sync decides on).
        let trusted = session.direction == .pull ? session.trustedKeys : []
        try ManifestAcceptance(session: session.name, now: clock.now(), appliedVersion: nil, localFiles: 0, allowRollback: true,
                               allowEmpty: true, trustedKeys: trusted, requireExpiry: session.requireExpiry).check(root, source: url)
        let manifest = try source.read(bytes, source: url, objects: source.objects(remote: remote, keeps: false)).manifest
        var entries = manifest.entries
        if let under {
            let prefix = under.string + "/"
            entries = entries.filter { $0.path == under || $0.path.string.hasPrefix(prefix) }
        }
        return RemoteListing(session: session.name, url: url, version: manifest.version, generated: manifest.generated,
                             signer: manifest.signer(trusting: trusted), listed: manifest.entries.count, entries: entries)
    }
}

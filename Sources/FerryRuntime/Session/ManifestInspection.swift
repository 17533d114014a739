import FerryCore

/// `ferry manifest show`: what a published manifest says — version, times, format, every signer
/// and whether this session trusts it, key set, rollout — read as a pull reads it (a format-2
/// tree's objects fetched and each checked against its name, so the counts are the tree's), but
/// judged, not refused: an expired or untrusted manifest is shown as such. Nothing is kept: the
/// objects stay in memory and the state is not written.
public struct ManifestInspection: Sendable {
    public let url: String
    /// The manifest with its tree read.
    public let manifest: Manifest
    /// The keys the session trusts (empty: none configured, signatures vouch for nothing).
    public let trusted: [PublicKey]
    /// When it was read, for the expiry.
    public let now: Timestamp

    public var bytes: Int64 { manifest.entries.reduce(0) { $0 + ($1.size ?? 0) } }
    /// Files described by a content index, for deltas.
    public var indexed: Int { manifest.entries.count { $0.index != nil } }
    public var expired: Bool { manifest.expires.map { $0 < now } ?? false }

    /// Each signature's key, once, and whether it verified and is trusted here.
    public var signers: [(key: PublicKey, valid: Bool, trusted: Bool)] {
        var out: [(key: PublicKey, valid: Bool, trusted: Bool)] = []
        for s in manifest.signatures where !out.contains(where: { $0.key == s.key }) {
            out.append((s.key, s.check == .valid, trusted.contains(s.key)))
        }
        return out
    }

    /// Reads `session`'s manifest from its remote, with its tree.
    public static func read(session: SessionConfig, agent: AgentConfig, clock: any Clock) throws(FerryError) -> ManifestInspection {
        let remote = try Remotes.open(session, clock: clock)
        let source = ManifestSource(session: session, state: agent.state)
        let url = session.manifestURL
        guard case let .fetched(bytes, _, _, _) = try source.fetchOnce(from: remote, etag: nil, lastModified: nil).required() else {
            throw .manifest("manifest \(url) answered without content to an unconditional request")
        }
        let manifest = try source.read(bytes, source: url, objects: source.objects(remote: remote, keeps: false)).manifest
        return ManifestInspection(url: url, manifest: manifest, trusted: session.trustedKeys, now: clock.now())
    }
}

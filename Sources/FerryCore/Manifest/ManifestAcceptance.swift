/// Whether a session takes a manifest that parsed: the rules that keep a publishing mistake, a
/// replayed old manifest or a stale one from changing a mirror (docs/design.md, data-safety rules 7
/// and 8). Checked on every run, for a fetched manifest and for an unchanged (304) one alike,
/// before anything is recorded or changed; a refusal exits 4. Pure.
public struct ManifestAcceptance: Sendable {
    public var session: String
    public var now: Timestamp
    /// The version this session last applied from the same manifest URL, if any.
    public var appliedVersion: Int64?
    /// Files (not directories) the local root holds now.
    public var localFiles: Int
    public var allowRollback: Bool
    public var allowEmpty: Bool
    /// `trusted-keys`: when any, only a manifest with a valid signature by one of them is taken.
    public var trustedKeys: [PublicKey]
    /// `require-expiry`: with `trusted-keys`, a manifest without `expires` is refused.
    public var requireExpiry: Bool
    /// `trust-threshold`: how many of `trustedKeys` must have signed (each counted once).
    public var threshold: Int
    /// With `trustedKeys`: the newest signed `generated` time this session took from the same
    /// manifest URL (`raisedFloor`). An older manifest is refused (a replay, a stale mirror), and
    /// expiry is judged by the later of `now` and it, so a clock set back does not revive an
    /// expired manifest.
    public var floor: Timestamp?

    public init(session: String, now: Timestamp, appliedVersion: Int64?, localFiles: Int, allowRollback: Bool, allowEmpty: Bool,
                trustedKeys: [PublicKey] = [], threshold: Int = 1, floor: Timestamp? = nil, requireExpiry: Bool = true) {
        self.trustedKeys = trustedKeys
        self.floor = trustedKeys.isEmpty ? nil : floor
        self.threshold = threshold
        self.requireExpiry = requireExpiry
        self.session = session
        self.now = now
        self.appliedVersion = appliedVersion
        self.localFiles = localFiles
        self.allowRollback = allowRollback
        self.allowEmpty = allowEmpty
    }

    public func check(_ manifest: Manifest, source: String) throws(FerryError) {
        // Trust first: what an untrusted manifest says (its version, its expiry) means nothing.
        try checkSignature(manifest, source: source)
        if !trustedKeys.isEmpty && requireExpiry && manifest.expires == nil {
            throw .manifest("manifest \(source) carries no \"expires\", and session '\(session)' takes only signed manifests that do (a server stuck on one would otherwise go unnoticed): refused, nothing was changed",
                            hint: "publish it with an expiry (ferry manifest build --sign KEY sets one of 7d unless --expires says otherwise; a push session with sign-key too, unless expires = never), or set require-expiry = no for session '\(session)'")
        }
        if let floor, manifest.generated.map({ $0 < floor }) ?? true {
            throw .manifest("manifest \(source) was generated \(manifest.generated.map { "at \($0.rfc3339)" } ?? "at no time it says"), before \(floor.rfc3339), when the newest manifest session '\(session)' took was: refused as a replay of an older one (a stale mirror or cache, or someone serving an old signed manifest); nothing was changed",
                            hint: "a fresh manifest from the publisher is taken (a push publishes one when anything changes, and re-issues it before it expires; or run ferry manifest build --sign again)")
        }
        if let expires = manifest.expires, expires < judgedNow {
            let clock = judgedNow == now ? "" : " (this machine's clock says \(now.rfc3339), but a manifest signed at \(judgedNow.rfc3339) was taken: the clock was set back)"
            throw .manifest("manifest \(source) expired at \(expires.rfc3339)\(clock): refused, nothing was changed",
                            hint: "the publisher must publish a fresh one (a push session re-issues it before it expires; ferry manifest build --expires D sets a new expiry)")
        }
        if let old = appliedVersion, let new = manifest.version, new < old, !allowRollback {
            throw .manifest("manifest \(source) has version \(new), lower than version \(old) already applied: refused as a rollback",
                            hint: "if the rollback is intended, set allow-rollback = yes for session '\(session)'; if not, the publisher must publish a version above \(old) (ferry manifest build gives one by default; an older ferry or --version gave this one)")
        }
        if manifest.fileCount == 0 && localFiles > 0 && !allowEmpty {
            throw .manifest("manifest \(source) lists no files, and the mirror holds \(localFiles): refused, so that a publishing mistake cannot empty it; nothing was changed",
                            hint: "if the remote is meant to be empty, set allow-empty = yes for session '\(session)' (deletions stay capped by max-delete)")
        }
    }

    /// The time expiry is judged by: the later of `now` and `floor`.
    public var judgedNow: Timestamp { floor.map { $0 > now ? $0 : now } ?? now }

    /// The floor once `manifest` is taken: raised to its signed `generated` time, but never past
    /// `now` (a publisher whose clock runs ahead would otherwise lock out its own next manifests)
    /// and never lowered. Nil without `trustedKeys`.
    public func raisedFloor(taking manifest: Manifest) -> Timestamp? {
        guard !trustedKeys.isEmpty else { return nil }
        var raised = floor
        if let generated = manifest.generated {
            let capped = generated < now ? generated : now
            if raised == nil || raised! < capped { raised = capped }
        }
        return raised
    }

    /// With `trusted-keys`, a manifest is taken only with signatures by `threshold` of them (one
    /// by default) that verify over the signed bytes (design.md, "Signed manifests"); without,
    /// signatures are informational.
    public func checkSignature(_ manifest: Manifest, source: String) throws(FerryError) {
        guard !trustedKeys.isEmpty else { return }
        let trusted = Set(trustedKeys)
        let keys = "'\(session)' trusts \(trustedKeys.map(\.description).joined(separator: ", "))"
        let signers = manifest.signers(trusting: trustedKeys)
        if signers.count >= threshold { return }
        if !signers.isEmpty {
            throw .manifest("manifest \(source) carries \(Plural.count(signers.count, "valid signature")) by a trusted key (\(signers.map(\.description).joined(separator: ", "))), and session '\(session)' takes only manifests signed by \(threshold) of its \(trustedKeys.count) trusted keys: refused, nothing was changed",
                            hint: "the publisher must sign it with \(threshold - signers.count) more of them (ferry manifest build --sign A --sign B, or several sign-key files in the push session), or lower trust-threshold of session '\(session)'")
        }
        if manifest.signatures.isEmpty {
            throw .manifest("manifest \(source) is not signed, and session \(keys): refused, nothing was changed",
                            hint: "sign it where it is published (ferry manifest build --sign KEY, or sign-key in the push session), or remove trusted-keys from session '\(session)'")
        }
        if let broken = manifest.signatures.first(where: { trusted.contains($0.key) }) {
            throw .manifest("manifest \(source) carries a signature by the trusted key \(broken.key) that does not match its content: it was changed after it was signed (or damaged on the way); refused, nothing was changed",
                            hint: "publish it again from the publisher that holds the key; if it keeps failing, someone between the publisher and this machine is altering it")
        }
        let others = manifest.signatures.map(\.key.description).joined(separator: ", ")
        throw .manifest("manifest \(source) is signed by \(others), which session \(keys) does not trust: refused, nothing was changed",
                        hint: "if the publisher moved to a new key, add it to trusted-keys of session '\(session)' (keep the old one until every publisher signs with the new); if not, the manifest is not your publisher's")
    }
}

/// Whether a session takes a manifest that parsed: the rules that keep a publishing mistake, a
/// replayed old manifest or a stale one from changing a mirror (product.md §6 rule 7). Checked on
/// every run, for a fetched manifest and for an unchanged (304) one alike, before anything is
/// recorded or changed; a refusal exits 4. Pure.
public struct ManifestAcceptance: Sendable {
    public var session: String
    public var now: Timestamp
    /// The version this session last applied from the same manifest URL, if any.
    public var appliedVersion: Int64?
    /// Files (not directories) the local root holds now.
    public var localFiles: Int
    public var allowRollback: Bool
    public var allowEmpty: Bool

    public init(session: String, now: Timestamp, appliedVersion: Int64?, localFiles: Int, allowRollback: Bool, allowEmpty: Bool) {
        self.session = session
        self.now = now
        self.appliedVersion = appliedVersion
        self.localFiles = localFiles
        self.allowRollback = allowRollback
        self.allowEmpty = allowEmpty
    }

    public func check(_ manifest: Manifest, source: String) throws(FerryError) {
        if let expires = manifest.expires, expires < now {
            throw .manifest("manifest \(source) expired at \(expires.rfc3339)", hint: "publish a fresh manifest on the remote")
        }
        if let old = appliedVersion, let new = manifest.version, new < old, !allowRollback {
            throw .manifest("manifest \(source) has version \(new), lower than version \(old) already applied: refused as a rollback",
                            hint: "if the rollback is intended, set allow-rollback = yes for session '\(session)'; if not, the publisher must publish a version above \(old) (ferry manifest build gives one by default; an older ferry or --version gave this one)")
        }
        if manifest.entries.isEmpty && localFiles > 0 && !allowEmpty {
            throw .manifest("manifest \(source) lists no files, and the mirror holds \(localFiles): refused, so that a publishing mistake cannot empty it; nothing was changed",
                            hint: "if the remote is meant to be empty, set allow-empty = yes for session '\(session)' (deletions stay capped by max-delete)")
        }
    }
}

/// The version `ferry manifest build` gives a manifest (docs/design.md, data-safety rule 8):
/// versions never go backwards for a mirror, so a build must never produce one lower than what
/// mirrors already applied. Without `--version` it is one more than the manifest already at the
/// output path, and never less than the current Unix time in seconds: a fresh checkout (as in CI),
/// which has no earlier manifest, still builds a version above every one built before it. An
/// explicit version lower than the existing one is refused unless the caller allows the rollback,
/// and then it is said.
public enum ManifestVersion {
    /// The version after `previous` (nil: none yet) when none is asked for, for `manifest build` and
    /// push alike: one more, never less than the Unix time in seconds (so a wiped remote or a fresh
    /// checkout still goes above what mirrors applied), never above the largest a manifest may carry.
    /// After the largest there is none: new content under the same version would let a mirror be
    /// handed either manifest, the old one replayed included, so that is refused (`manifest` names
    /// the manifest that holds `previous`).
    public static func following(_ previous: Int64?, now: Timestamp, manifest: String) throws(FerryError) -> Int64 {
        guard let previous else { return min(Manifest.maximumVersion, max(1, now.seconds)) }
        guard previous < Manifest.maximumVersion else {
            throw .manifest("\(manifest) has version \(previous), the largest a manifest may carry (2^53 − 1): no later version exists, and publishing new content under the same one would let mirrors be handed either; nothing was published",
                            hint: "a version that high was given by hand (--version) or by someone else writing there; to go on, publish a lower version on purpose (ferry manifest build --version N --allow-rollback, or remove the remote's manifest before the push) and set allow-rollback = yes on each mirror until it took that version")
        }
        return min(Manifest.maximumVersion, max(previous + 1, now.seconds))
    }

    /// The version to write, and a warning to show with it.
    public static func next(previous: Int64?, explicit: Int64?, now: Timestamp, allowRollback: Bool,
                            output: String) throws(FerryError) -> (version: Int64, warning: String?) {
        guard let explicit else { return (try following(previous, now: now, manifest: "the manifest already at \(Printable.name(output))"), nil) }
        guard explicit >= 0, explicit <= Manifest.maximumVersion else {
            throw .usage("ferry manifest build: --version \(explicit) is out of range (0 to \(Manifest.maximumVersion))")
        }
        guard let previous, explicit < previous else { return (explicit, nil) }
        let effect = "mirrors that applied version \(previous) refuse version \(explicit) as a rollback unless their session sets allow-rollback = yes"
        guard allowRollback else {
            throw .usage("ferry manifest build: --version \(explicit) is lower than version \(previous) of the manifest already at \(Printable.name(output)); \(effect)",
                         hint: "give a version above \(previous) (or leave --version out: the default keeps rising), or pass --allow-rollback if the rollback is intended")
        }
        return (explicit, "version \(explicit) is lower than version \(previous), which it replaces: \(effect)")
    }
}

import Glibc
import FerryCore

/// A phased rollout on the pulling side (`Rollout`): the machine decides by its identity whether
/// it takes the release the root names or the one before, whose tree the root names by hash.
extension PullSync {
    /// This machine's identity for rollouts: `[agent] machine-id`, else /etc/machine-id.
    func machineID() throws(FerryError) -> String {
        if let id = agent.machineID { return id }
        if let bytes = try? FileSystem.readFile("/etc/machine-id", limit: 4096) {
            let id = String(decoding: bytes.filter { $0 > 0x20 }, as: UTF8.self)
            if !id.isEmpty { return id }
        }
        throw .manifest("manifest \(session.manifestURL) is rolled out to a share of machines, and this machine has no identity to decide by: nothing was changed",
                        hint: "set machine-id in [agent] (any name unique to this machine), or create /etc/machine-id (systemd-machine-id-setup)")
    }

    /// The manifest this machine takes from `root`: the root itself, or, when a rollout leaves
    /// this machine out, the release before (its tree read as the root's is, and its objects
    /// added to `names` so they stay cached). Said once a run and kept for status.
    func release(of root: Manifest, objects: ManifestObjects, names: inout [SHA256Digest], store: StateStore) throws(FerryError) -> Manifest {
        guard let rollout = root.rollout, let tree = root.tree, let version = root.version else {
            if !options.dryRun { try store.recordRollout(session: session.name, nil) }
            return root
        }
        let inside = rollout.takes(machineID: try machineID(), release: tree.sha256) { SHA256Hasher.digest(of: $0) }
        let taking = inside ? version : rollout.previous.version
        emit(.rollout(version: version, percent: rollout.percent, inside: inside, taking: taking))
        if !options.dryRun { try store.recordRollout(session: session.name, RolloutStanding(version: version, percent: rollout.percent, inside: inside, taking: taking)) }
        guard !inside, let previous = root.previousRelease() else { return root }
        let read = try objects.resolve(previous, source: "\(session.manifestURL) (version \(taking), the release before the rollout)",
                                       maximumSize: session.maxManifestSize)
        names += read.objects
        return read.manifest
    }

    /// Outside a rollout, the release before is taken; in the tree layout the remote holds only
    /// the newest content at each path, so a file of it that changed since cannot be had: the run
    /// is refused, naming it, before anything is fetched.
    func refuseUnfetchable(_ plan: Plan, taking manifest: Manifest, root: Manifest) throws(FerryError) {
        guard let rollout = root.rollout, manifest.version != root.version, manifest.layout == .tree else { return }
        let gone = plan.downloads.filter { d in root.index(of: d.entry.path).map { root.entries[$0].sha256 != d.entry.sha256 } ?? true }
        guard let first = gone.first else { return }
        throw .manifest("this machine is outside the rollout of version \(root.version ?? 0) (\(rollout.percent)%) and takes version \(manifest.version ?? 0), but \(Printable.name(first.entry.path.string))\(gone.count > 1 ? " and \(gone.count - 1) more" : "") of it \(gone.count > 1 ? "are" : "is") no longer on the remote: the tree layout keeps only the newest content at each path; nothing was changed",
                        hint: "the publisher keeps both versions with remote-layout = objects (a push session); or raise the rollout to 100%")
    }
}

import FerryCore

/// What release hands on: the manifest this machine takes (the root's release, or the one before
/// it when a rollout leaves the machine out) and where its files' bytes are.
struct Released {
    let mirror: Mirror
    let fetched: FetchedManifest
    let local: LocalSide
    let manifest: Manifest
    let locate: (ManifestEntry) -> RelativePath
}

/// Release: which release this machine takes. A phased rollout (`Rollout`) decides by the
/// machine's identity whether it takes the release the root names or the one before, whose tree
/// the root names by hash (its objects stay cached); said once a run and kept for status. A
/// version this machine rolled back after its `on-switch-check` failed is not taken again: the
/// run ends, in sync on the generation before, until a newer version is published.
struct ReleaseStage {
    let pull: PullRun

    func run(_ trusted: Trusted) throws(FerryError) -> Onward<Released> {
        let (fetched, session) = (trusted.fetched, pull.session)
        // The objects of the tree taken stay cached; those of trees before it go when the run ends.
        pull.caches.keep(fetched.names)
        let manifest = try release(of: fetched.manifest, objects: fetched.objects)
        let locate = manifest.version == fetched.manifest.version ? trusted.locate : try pull.contentLocator(manifest)
        if session.onSwitchCheck != nil, let version = manifest.version, version == trusted.record?.rejectedVersion {
            // Rolled back here by its check: the generation before stays until a newer version.
            return .end(pull.result(message: "version \(version) failed on-switch-check on this machine "
                                             + "(\(trusted.record?.rejectedReason ?? "")) and was rolled back: "
                                             + "\(Printable.name(session.local)) stays on the generation before until "
                                             + "a newer version is published"))
        }
        return .go(Released(mirror: trusted.mirror, fetched: fetched, local: trusted.local, manifest: manifest,
                            locate: locate))
    }

    /// This machine's identity for rollouts: `[agent] machine-id`, else /etc/machine-id.
    private func machineID() throws(FerryError) -> String {
        if let id = HostProbe.machineID(configured: pull.agent.machineID) { return id }
        throw .manifest("manifest \(pull.session.manifestURL) is rolled out to a share of machines, and this machine "
                        + "has no identity to decide by: nothing was changed",
                        hint: "set machine-id in [agent] (any name unique to this machine), or create /etc/machine-id "
                              + "(systemd-machine-id-setup)")
    }

    /// The manifest this machine takes from `root`: the root itself, or, when a rollout leaves
    /// this machine out, the release before (its tree read as the root's is, its objects kept).
    private func release(of root: Manifest, objects: ManifestObjects) throws(FerryError) -> Manifest {
        guard let rollout = root.rollout, let tree = root.tree, let version = root.version else {
            try pull.state.recordRollout(nil)
            return root
        }
        let inside = rollout.takes(machineID: try machineID(), release: tree.sha256) { SHA256Hasher.digest(of: $0) }
        let taking = inside ? version : rollout.previous.version
        pull.emit(.rollout(version: version, percent: rollout.percent, inside: inside, taking: taking))
        try pull.state.recordRollout(RolloutStanding(version: version, percent: rollout.percent, inside: inside,
                                                     taking: taking))
        guard !inside, let previous = root.previousRelease() else { return root }
        let read = try objects.resolve(previous, source: "\(pull.session.manifestURL) (version \(taking), the release "
                                                         + "before the rollout)",
                                       maximumSize: pull.session.maxManifestSize)
        pull.caches.keep(read.objects)
        return read.manifest
    }
}

extension PullRun {
    /// Outside a rollout, the release before is taken; in the tree layout the remote holds only
    /// the newest content at each path, so a file of it that changed since cannot be had: the run
    /// is refused, naming it, before anything is fetched.
    func refuseUnfetchable(_ plan: Plan, taking manifest: Manifest, root: Manifest) throws(FerryError) {
        guard let rollout = root.rollout, manifest.version != root.version, manifest.layout == .tree else { return }
        let gone = plan.downloads.filter { d in
            root.index(of: d.entry.path).map { root.entries[$0].sha256 != d.entry.sha256 } ?? true
        }
        guard let first = gone.first else { return }
        let more = gone.count > 1 ? " and \(gone.count - 1) more" : ""
        let name = Printable.name(first.entry.path.string)
        throw .manifest("this machine is outside the rollout of version \(root.version ?? 0) (\(rollout.percent)%) and "
                        + "takes version \(manifest.version ?? 0), but \(name)\(more) of it "
                        + "\(gone.count > 1 ? "are" : "is") "
                        + "no longer on the remote: the tree layout keeps only the newest content at each path; "
                        + "nothing was changed",
                        hint: "the publisher keeps both versions with remote-layout = objects (a push session); or "
                              + "raise the rollout to 100%")
    }
}

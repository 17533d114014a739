import FerryCore

/// `rollout = P%` on the publishing side (`Rollout`): the root names the release the other
/// machines stay on, and everything that release needs stays on the remote while a root names it.
extension PushSync {
    /// The rollout of this publication, with the metadata objects and the content (objects and
    /// pieces) of the release before, which collection must keep. Needs the objects layout: the
    /// release before keeps its files beside the new ones only there.
    func phasedRollout(published: Manifest?, objects: ManifestObjects) throws(FerryError) -> (rollout: Rollout?, metadata: [SHA256Digest], content: Set<String>) {
        guard session.rollout < 100 else { return (nil, [], []) }
        guard let previous = Rollout.previous(replacing: published) else {
            throw .manifest("rollout = \(session.rollout)% of session '\(session.name)': nothing was published before, so there is no release for the other machines to stay on; nothing was published",
                            hint: "publish the first release to every machine (rollout = 100%)")
        }
        guard previous.layout == .objects else {
            throw .manifest("rollout = \(session.rollout)% of session '\(session.name)': the release before (version \(previous.version)) is in the tree layout, whose files this release replaces at their paths, so machines outside the rollout could not be given it; nothing was published",
                            hint: "publish one release to every machine with remote-layout = objects first, then roll out the next")
        }
        let source = "\(session.manifestURL) (version \(previous.version), the release before the rollout)"
        let read = try ManifestTree.resolve(previous.tree, source: source, maximumBytes: session.maxManifestSize) { (batch) throws(FerryError) -> [[UInt8]] in
            try objects.load(batch, source: source)
        }
        var metadata = read.objects
        let cached = Set(objects.names())
        for entry in read.entries {
            if let index = entry.index, let names = cachedNames(index, objects, cached: cached) { metadata += names }
        }
        var content = Set(read.entries.map(\.sha256.hex))
        for pieces in storedPieces(of: read.entries, objects: objects).values { content.formUnion(pieces.map(\.hex)) }
        return (Rollout(percent: session.rollout, previous: previous), metadata, content)
    }
}

import Glibc
import FerryCore

/// The packs of what a push publishes with `remote-layout = objects` (`ContentPacks`, design.md
/// "Packs"): sent as metadata objects (verified, kept and collected as the tree's are) before
/// the root that names their list.
extension PushSync {
    /// Packs sent at once, at most (each up to 4 MiB, held in memory until sent).
    static let packBatch = 8

    /// Sends the packs of `entries`' small contents and their list; returns the list as the root
    /// names it and every object it names (for collection), or nil when there is nothing to pack.
    /// A pack of the version last published that holds the same members is named again unread;
    /// the others are made from the local files, and one whose file no longer holds its content
    /// is left out (its members come one by one).
    func sendPacks(_ entries: [ManifestEntry], published: Manifest?, objects: ManifestObjects, writer: RemoteWriting,
                   root: LocalRoot) throws(FerryError) -> (list: ObjectBundle.Named, names: [SHA256Digest])? {
        let members = ContentPacks.members(of: entries)
        guard members.count > 1 else { return nil }
        let known = publishedPacks(published, objects: objects)
        let paths = Dictionary(entries.map { ($0.sha256, $0.path) }, uniquingKeysWith: { a, _ in a })
        let hasher = SHA256Hasher()
        var listed: [(name: SHA256Digest?, count: Int)] = []
        var names: [SHA256Digest] = []
        var batch: [(sha256: SHA256Digest, bytes: [UInt8])] = []
        for group in ContentPacks.groups(members) {
            let held = Array(members[group])
            var name = known[held.map(\.sha256)]
            if name == nil, let bytes = makePack(held, paths: paths, root: root, hasher: hasher) {
                let digest = bytes.withUnsafeBytes { hasher.digest(of: $0) }
                batch.append((digest, bytes))
                name = digest
                if batch.count == PushSync.packBatch {
                    try sendObjects(batch, objects: objects, writer: writer)
                    batch = []
                }
            }
            if let name { names.append(name) }
            listed.append((name, held.count))
        }
        let list = ContentPacks.list(listed)
        let digest = list.withUnsafeBytes { hasher.digest(of: $0) }
        try sendObjects(batch + [(digest, list)], objects: objects, writer: writer)
        return (ObjectBundle.Named(sha256: digest, size: list.count), names + [digest])
    }

    /// The packs the version last published names, by their members.
    private func publishedPacks(_ published: Manifest?, objects: ManifestObjects) -> [[SHA256Digest]: SHA256Digest] {
        guard let published, let named = published.packs,
              let bytes = try? objects.load([named.sha256], source: session.manifestURL, maximumSize: named.size).first,
              let (packs, members) = ContentPacks.read(list: bytes, for: published.entries) else { return [:] }
        var known: [[SHA256Digest]: SHA256Digest] = [:]
        for pack in packs {
            if let name = pack.name { known[members[pack.members].map(\.sha256)] = name }
        }
        return known
    }

    /// A pack of `members`, read from the local files that hold them; nil when one cannot be read
    /// or no longer holds its content.
    private func makePack(_ members: [ContentPacks.Member], paths: [SHA256Digest: RelativePath], root: LocalRoot,
                          hasher: SHA256Hasher) -> [UInt8]? {
        var contents: [[UInt8]] = []
        contents.reserveCapacity(members.count)
        for m in members {
            guard let path = paths[m.sha256], let fd = try? root.open(path, for: "to pack it") else { return nil }
            defer { close(fd) }
            guard let bytes = try? FileSystem.read(fd: fd, limit: m.size, shown: root.display(path)),
                  bytes.count == m.size, bytes.withUnsafeBytes({ hasher.digest(of: $0) }) == m.sha256 else { return nil }
            contents.append(bytes)
        }
        return ContentPacks.pack(contents)
    }
}

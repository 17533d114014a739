/// Where a published manifest's files keep their bytes on the remote (design.md "Remote layouts").
/// `tree`: each file at its own path, as the local tree has it. `objects`: each content once, named
/// by its SHA-256, under `.ferry/data/` beside the manifest (the metadata objects of format 2 are
/// under `.ferry/meta/` there), written once and never rewritten; a published version is then
/// whole from the moment its manifest is, and stays whole while a later push runs. The manifest
/// says which (`"layout": "objects"`); a pull follows it, whatever its session says. In the
/// objects layout a large file may be stored as its pieces instead
/// (`ContentIndex.Reference.storedAsPieces`), each piece a content object named by its SHA-256.
public enum RemoteLayout: String, Sendable, CaseIterable {
    case tree
    case objects

    /// Content objects, relative to the directory that holds the manifest.
    public static let contentDirectory = ".ferry/data"

    /// The path under the remote of the content object `sha256`, for the manifest at `manifest`
    /// (relative to the remote): `.ferry/data/<first two hex digits>/<64 hex digits>` beside it.
    /// The two-digit fan-out keeps any one directory of a `file://` or WebDAV remote near 1/256 of
    /// the objects.
    public static func contentPath(_ sha256: SHA256Digest, beside manifest: String) -> RelativePath {
        let hex = sha256.hex
        return RelativePath(trusted: ManifestTree.beside(manifest, contentDirectory + "/" + hex.prefix(2) + "/" + hex))
    }

    /// The content object's hash that `path` names, when it is one (`contentPath`).
    public static func contentHash(at path: RelativePath, beside manifest: String) -> SHA256Digest? {
        let name = path.string
        guard let slash = name.lastIndex(of: "/") else { return nil }
        let digest = SHA256Digest(hex: String(name[name.index(after: slash)...]))
        return digest.flatMap { contentPath($0, beside: manifest) == path ? $0 : nil }
    }

    /// Where the bytes of `entry` are under the remote, for a manifest at `manifest` (relative to
    /// the remote) in this layout.
    public func location(of entry: ManifestEntry, manifest: String) -> RelativePath {
        switch self {
        case .tree: return entry.path
        case .objects: return RemoteLayout.contentPath(entry.sha256, beside: manifest)
        }
    }
}

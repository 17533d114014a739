import Foundation
@testable import FerryRuntime
import FerryCore

/// The manifest published at `directory/name` as a reader sees it: a format-2 root with its tree
/// read from `.ferry/meta/` beside it, each object checked against its name.
func readPublished(_ directory: String, name: String = "manifest.json") throws -> Manifest {
    try publishedTree(directory, name: name).manifest
}

/// The published manifest as `readPublished` reads it, and the hashes of every object its tree names.
func publishedTree(_ directory: String, name: String = "manifest.json") throws -> (manifest: Manifest, objects: Set<String>) {
    let bytes = FileManager.default.contents(atPath: directory + "/" + name) ?? Data()
    return try publishedTree(root: bytes, name: name) { FileManager.default.contents(atPath: directory + "/.ferry/meta/" + $0) }
}

/// The manifest whose root is `root`, with its tree's objects read by `object` (given an
/// object's name, its bytes in `.ferry/meta/` wherever the remote keeps them), each checked
/// against its name: what a reader of any store sees.
func publishedTree(root bytes: Data, name: String, object: (String) -> Data?) throws -> (manifest: Manifest, objects: Set<String>) {
    let root = try Manifests.parse(Array(bytes), source: name)
    guard let tree = root.tree else { return (root, []) }
    let (entries, names) = try ManifestTree.resolve(tree, source: name, maximumBytes: 1 << 30) { (batch) throws(FerryError) -> [[UInt8]] in
        var out: [[UInt8]] = []
        for digest in batch {
            let object = Array(object(digest.hex) ?? Data())
            guard SHA256Hasher.digest(of: object) == digest else { throw .manifest("object \(digest.hex) does not match its name") }
            out.append(object)
        }
        return out
    }
    return (try root.resolving(entries, source: name), Set(names.map(\.hex)))
}

/// What the manifest published in `directory` names besides its tree: the list of the tree's
/// bundles and the bundles it names (empty without).
func publishedBundles(_ directory: String) throws -> Set<String> {
    let root = try Manifests.parse(Array(FileManager.default.contents(atPath: directory + "/manifest.json") ?? Data()),
                                   source: "manifest.json")
    guard let list = root.treeBundles,
          let bytes = FileManager.default.contents(atPath: directory + "/.ferry/meta/" + list.sha256.hex),
          let bundles = ObjectBundle.treeList(Array(bytes), bound: 1 << 30) else { return [] }
    return Set([list.sha256.hex] + bundles.map(\.sha256.hex))
}

/// The kind of each metadata object in `directory` (its first 4 bytes: `fm2L`, `fdC3`, `fdB1`,
/// ...), by name: a publisher's `.ferry/meta`, or a session's cache.
func metadataKinds(_ directory: String) throws -> [String: String] {
    var out: [String: String] = [:]
    for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
        let head = (FileManager.default.contents(atPath: directory + "/" + name) ?? Data()).prefix(4)
        out[name] = String(decoding: head, as: UTF8.self)
    }
    return out
}

/// The metadata objects under `directory/.ferry/meta/`.
func publishedObjects(_ directory: String) -> Set<String> {
    Set((try? FileManager.default.contentsOfDirectory(atPath: directory + "/.ferry/meta")) ?? [])
}

/// The paths the manifest published in `directory` lists, one per line ("" when it cannot be read).
func publishedListing(_ directory: String, name: String = "manifest.json") -> String {
    ((try? readPublished(directory, name: name))?.entries.map(\.path.string) ?? []).joined(separator: "\n")
}

import Glibc
import FerryCore

/// `ferry manifest build`: hashes every regular file under a directory and writes a
/// `ferry-manifest/1` manifest. It never lists its own output, `.ferry/`, or anything that is not
/// a regular file (symlinks are reported and skipped).
public struct ManifestBuilder {
    public struct Result {
        public let output: String
        public let version: Int64
        public let files: Int
        public let bytes: Int64
        public let warnings: [String]
    }

    public init() {}

    /// `signingKey`: sign the manifest (`ManifestEnvelope`); `expires`: seconds from now it stays valid.
    public func build(directory: String, output: String?, version explicitVersion: Int64?, allowRollback: Bool = false,
                      signingKey: SigningKey? = nil, expires: Double? = nil,
                      progress: (Int, Int) -> Void = { _, _ in }) throws(FerryError) -> Result {
        let outputPath = output ?? directory + "/manifest.json"
        let root = try LocalRoot(path: directory, create: false)
        let scan = try root.scan()
        var warnings = scan.warnings
        let excluded = relativePath(of: outputPath, under: directory)
        let (publishable, skipped) = scan.tree.publishable()
        warnings += skipped.map(\.message)
        // Its own output, and the temporary file another build is writing beside it, are not content.
        let temporaryPrefix = excluded.map { e in (e.parent.map { $0.string + "/" } ?? "") + "." + e.name + ".tmp-" }
        let files = publishable.filter { item in
            item.path != excluded && !(temporaryPrefix.map { item.path.string.hasPrefix($0) } ?? false)
        }.map { ($0.path, $0.entry) }

        var previous: Int64?
        if FileSystem.exists(outputPath) {
            let bytes = try FileSystem.readFile(outputPath, limit: 1 << 30)
            do {
                previous = try Manifests.parse(bytes, source: outputPath).version
            } catch {
                guard explicitVersion != nil else {
                    throw .usage("cannot read the version of the existing manifest \(outputPath): \(error.message)",
                                 hint: "pass --version N, or remove the old manifest")
                }
            }
        }
        let (version, versionWarning) = try ManifestVersion.next(previous: previous, explicit: explicitVersion, now: Timestamp.now(),
                                                                 allowRollback: allowRollback, output: outputPath)
        if let versionWarning { warnings.append(versionWarning) }

        var entries: [ManifestEntry] = []
        entries.reserveCapacity(files.count)
        var total: Int64 = 0
        for (i, (path, entry)) in files.enumerated() {
            let hashed = try root.hash(path)
            entries.append(ManifestEntry(path: path, size: hashed.size, sha256: hashed.sha256, mtime: entry.mtime, mode: entry.mode & 0o777))
            total += hashed.size
            progress(i + 1, files.count)
        }
        let manifest = try Manifests.publishable(version: version, entries: entries, lifetime: expires, key: signingKey)
        try FileSystem.writeAtomically(outputPath, bytes: manifest.bytes)
        return Result(output: outputPath, version: version, files: entries.count, bytes: total, warnings: warnings)
    }

    private func relativePath(of file: String, under directory: String) -> RelativePath? {
        let absFile = ConfigParser.resolve(file, against: ConfigLoader.currentDirectory())
        let absDir = ConfigParser.resolve(directory, against: ConfigLoader.currentDirectory())
        let prefix = absDir.hasSuffix("/") ? absDir : absDir + "/"
        guard absFile.hasPrefix(prefix) else { return nil }
        return RelativePath(trusted: String(absFile.dropFirst(prefix.count)))
    }
}

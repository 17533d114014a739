import Glibc
import FerryCore

/// `ferry manifest build`: hashes every regular file under a directory and writes its manifest:
/// format 2 (a root naming a tree of objects written to `.ferry/meta/` beside it) unless format 1
/// (one flat file) is asked for. It never lists its own output, `.ferry/`, or anything that is
/// not a regular file (symlinks are reported and skipped). Objects no root names any more are
/// removed once they have been unnamed for `grace` seconds (`RetiredObjects`).
public struct ManifestBuilder {
    public struct Result {
        public let output: String
        public let version: Int64
        public let files: Int
        public let bytes: Int64
        public let warnings: [String]
        /// Format 2: metadata objects written, and removed as no longer named.
        public let objectsWritten: Int
        public let objectsRemoved: Int
        /// The `SHA256SUMS` written beside the manifest (`sha256sums`).
        public let sha256sums: String?
    }

    /// How long an object no root names stays, by default: readers that took the last root a
    /// moment ago (or a CDN that still serves it) still find what it names.
    public static let defaultGrace: Double = 86_400
    /// Files from this size get a content index (format 2), for delta transfers.
    public static let defaultDeltaMinimum: Int64 = 1 << 20

    /// Where the manifest's times (its version, generated, expires) and the objects' retirement come from.
    public let clock: any Clock

    public init(clock: any Clock) { self.clock = clock }

    /// `signingKeys`: each signs the manifest (`ManifestEnvelope`); `expires`: seconds from now it stays valid.
    public func build(directory: String, output: String?, version explicitVersion: Int64?, allowRollback: Bool = false,
                      signingKeys: [SigningKey] = [], expires: Double? = nil, format: Int = 2, grace: Double = ManifestBuilder.defaultGrace,
                      sha256sums: Bool = false, filter: PathFilter = PathFilter(), deltaMinimum: Int64? = ManifestBuilder.defaultDeltaMinimum,
                      rollout percent: Int = 100, progress: (Int, Int) -> Void = { _, _ in }) throws(FerryError) -> Result {
        let outputPath = output ?? directory + "/manifest.json"
        // One build of a directory at a time (two cron jobs): each would remove objects the other's root names.
        let lock = try SessionLock.publisher(directory: ConfigParser.directoryName(of: outputPath), what: "ferry manifest build")
        defer { withExtendedLifetime(lock) {} }
        let sumsPath = ConfigParser.directoryName(of: outputPath) + "/SHA256SUMS"
        let root = try LocalRoot(path: directory, create: false)
        var (files, warnings) = try contentFiles(root, directory: directory, output: outputPath,
                                                 sums: sha256sums ? sumsPath : nil, filter: filter)
        let existing = try existingManifest(outputPath, explicitVersion: explicitVersion)
        let (version, versionWarning) = try ManifestVersion.next(previous: existing?.version, explicit: explicitVersion,
                                                                 now: clock.now(), allowRollback: allowRollback,
                                                                 output: outputPath)
        if let versionWarning { warnings.append(versionWarning) }
        // A large file is read once for its hash and its content index (format 2 only).
        let (entries, total, indexObjects) = try describe(files, in: root, indexFrom: format == 2 ? deltaMinimum : nil,
                                                          progress: progress)
        // A key set beside the manifest (`ferry key set`): the root names the newest, whose keys must sign it.
        let keySet = try KeySets.newest(in: ConfigParser.directoryName(of: outputPath) + "/.ferry/keys")
        if let keySet {
            try KeySets.check(signers: signingKeys, against: keySet, what: "ferry manifest build: the manifest")
        }
        let objects = ManifestTree.objectDirectory(beside: outputPath)
        let (rollout, previousObjects) = try phasedRollout(percent, replacing: existing, format: format, objects: objects,
                                                           output: outputPath)
        if let rollout {
            let before = rollout.previous.version
            warnings.append("version \(version) goes to \(rollout.percent)% of machines; the others stay on version \(before). "
                            + "A machine outside it that does not hold version \(before) cannot get the files that changed "
                            + "since (the directory holds only the new ones); a push with remote-layout = objects keeps both")
        }
        let manifest = try Manifests.publishable(version: version, entries: entries, lifetime: expires, keys: signingKeys,
                                                 keySet: keySet?.version, rollout: rollout, format: format, now: clock.now())
        var written = 0
        if let tree = manifest.tree {
            // Every object is in place, and on disk, before the root that names them: the tree's
            // and the content indexes' (named by the tree's entries).
            written = try writeObjects(tree.objects + indexObjects, into: objects)
        }
        if sha256sums { try FileSystem.writeAtomically(sumsPath, bytes: ManifestBuilder.sha256sums(entries)) }
        try FileSystem.writeAtomically(outputPath, bytes: manifest.bytes)
        // The release a rollout keeps the other machines on stays readable as long as a root names it.
        let named = (manifest.tree?.objects ?? []) + indexObjects
            + previousObjects.map { (sha256: $0, bytes: [UInt8]()) }
        let removed = collect(named: Set(named.map(\.sha256.hex)), in: objects, grace: grace, warnings: &warnings)
        return Result(output: outputPath, version: version, files: entries.count, bytes: total, warnings: warnings,
                      objectsWritten: written, objectsRemoved: removed, sha256sums: sha256sums ? sumsPath : nil)
    }

    /// The files of `directory` a manifest lists: what can be published (`LocalTree.publishable`;
    /// what cannot is a warning) and the filter admits, but for the build's own output beside them
    /// (the manifest, SHA256SUMS, their temporary files, and the objects beside the manifest).
    private func contentFiles(_ root: LocalRoot, directory: String, output outputPath: String, sums sumsPath: String?,
                              filter: PathFilter) throws(FerryError) -> ([(RelativePath, LocalEntry)], [String]) {
        let scan = try root.scan()
        var warnings = scan.warnings
        let excluded = relativePath(of: outputPath, under: directory)
        let sumsExcluded = sumsPath.flatMap { relativePath(of: $0, under: directory) }
        var (publishable, skipped) = scan.tree.publishable()
        if !filter.isEmpty {
            publishable = publishable.filter { filter.admits($0.path) }
            skipped = skipped.filter { filter.admits($0.item.path, isDirectory: $0.item.entry.kind == .directory) }
        }
        warnings += skipped.map(\.message)
        // Its own output, and the temporary file another build is writing beside it, are not content.
        // So are the objects and the list of retired ones beside it (`.ferry/` in a subdirectory).
        let temporaryPrefix = excluded.map { e in (e.parent.map { $0.string + "/" } ?? "") + "." + e.name + ".tmp-" }
        let ownPrefix = excluded.flatMap(\.parent).map { $0.string + "/" + RelativePath.reservedTopLevel + "/" }
        let sumsTemporary = sumsExcluded.map { e in (e.parent.map { $0.string + "/" } ?? "") + "." + e.name + ".tmp-" }
        let files = publishable.filter { item in
            item.path != excluded && item.path != sumsExcluded && !(temporaryPrefix.map { item.path.string.hasPrefix($0) } ?? false)
                && !(sumsTemporary.map { item.path.string.hasPrefix($0) } ?? false)
                && !(ownPrefix.map { item.path.string.hasPrefix($0) } ?? false)
        }.map { ($0.path, $0.entry) }
        return (files, warnings)
    }

    /// The manifest already at the output path, if any: the next version follows its. One that
    /// cannot be read stops the build unless `--version` says which version comes next.
    private func existingManifest(_ outputPath: String, explicitVersion: Int64?) throws(FerryError) -> Manifest? {
        guard FileSystem.exists(outputPath) else { return nil }
        let bytes = try FileSystem.readFile(outputPath, limit: 1 << 30)
        do {
            return try Manifests.parse(bytes, source: outputPath)
        } catch {
            guard explicitVersion != nil else {
                throw .usage("cannot read the version of the existing manifest \(outputPath): \(error.message)",
                             hint: "pass --version N, or remove the old manifest")
            }
            return nil
        }
    }

    /// Each file's entry: its hash, and from `indexFrom` its content index (one read gives both),
    /// with the index's objects; and the bytes in all.
    private func describe(_ files: [(RelativePath, LocalEntry)], in root: LocalRoot, indexFrom: Int64?,
                          progress: (Int, Int) -> Void) throws(FerryError)
        -> ([ManifestEntry], Int64, [(sha256: SHA256Digest, bytes: [UInt8])]) {
        var entries: [ManifestEntry] = []
        entries.reserveCapacity(files.count)
        var total: Int64 = 0
        var indexObjects: [(sha256: SHA256Digest, bytes: [UInt8])] = []
        for (i, (path, entry)) in files.enumerated() {
            let (size, sha256, index): (Int64, SHA256Digest, ContentIndex.Reference?)
            if let indexFrom, entry.size >= indexFrom {
                let fd = try root.open(path, for: "to index it")
                defer { close(fd) }
                let scanned = try ContentScan.index(fd, what: root.display(path))
                (size, sha256, index) = (scanned.size, scanned.sha256, scanned.index?.reference)
                indexObjects += scanned.index?.objects ?? []
            } else {
                let hashed = try root.hash(path)
                (size, sha256, index) = (hashed.size, hashed.sha256, nil)
            }
            entries.append(ManifestEntry(path: path, size: size, sha256: sha256, mtime: entry.mtime, mode: entry.mode & 0o777, index: index))
            total += size
            progress(i + 1, files.count)
        }
        return (entries, total, indexObjects)
    }

    /// The entries as coreutils `sha256sum` writes them (`HASH  PATH`, paths relative to the
    /// directory built), so `sha256sum -c SHA256SUMS` checks a tree without ferry. A name with a
    /// backslash is escaped as sha256sum escapes it (the line starts with `\`).
    static func sha256sums(_ entries: [ManifestEntry]) -> [UInt8] {
        let backslash = UInt8(ascii: "\\")
        var out: [UInt8] = []
        for e in entries {
            let name = Array(e.path.string.utf8)
            let escaped = name.contains(backslash)
            if escaped { out.append(backslash) }
            out += Array(e.sha256.hex.utf8)
            out += [0x20, 0x20]
            for byte in name {
                if escaped && byte == backslash { out.append(backslash) }
                out.append(byte)
            }
            out.append(0x0A)
        }
        return out
    }

    /// `--rollout P`: the release before (the manifest at the output, or the one its own rollout
    /// kept the others on) and the metadata objects of its tree, which must still be there.
    private func phasedRollout(_ percent: Int, replacing existing: Manifest?, format: Int, objects: String,
                               output: String) throws(FerryError) -> (Rollout?, [SHA256Digest]) {
        guard percent < 100 else { return (nil, []) }
        guard format == 2 else { throw .usage("ferry manifest build: --rollout needs format 2, whose root names the release before by the hash of its tree") }
        guard let previous = Rollout.previous(replacing: existing) else {
            throw .usage("ferry manifest build: --rollout \(percent)%: nothing was published at \(Printable.name(output)) before, so there is no release for the other machines to stay on",
                         hint: "publish the first release to every machine (no --rollout)")
        }
        do throws(FerryError) {
            let read = try ManifestTree.resolve(previous.tree, source: output, maximumBytes: 1 << 40) { (batch) throws(FerryError) -> [[UInt8]] in
                var out: [[UInt8]] = []
                for digest in batch { out.append(try FileSystem.readFile(objects + "/" + digest.hex, limit: ManifestTree.maximumObjectSize)) }
                return out
            }
            return (Rollout(percent: percent, previous: previous), read.objects)
        } catch {
            throw .usage("ferry manifest build: --rollout: the tree of version \(previous.version), the release before, cannot be read from \(Printable.name(objects)) (\(error.message))",
                         hint: "its objects were removed after the grace period; publish to every machine (no --rollout)")
        }
    }

    /// Writes the objects the directory lacks (or holds damaged), then syncs the filesystem once.
    private func writeObjects(_ objects: [(sha256: SHA256Digest, bytes: [UInt8])], into directory: String) throws(FerryError) -> Int {
        try FileSystem.makeDirectories(directory)
        var written = 0
        for (digest, bytes) in objects {
            let path = directory + "/" + digest.hex
            if let existing = try? FileSystem.readFile(path, limit: ManifestTree.maximumObjectSize), existing == bytes { continue }
            try FileSystem.writeAtomically(path, bytes: bytes, mode: 0o644, synced: false)
            written += 1
        }
        if written > 0 { FileSystem.syncEverything(then: directory) }
        return written
    }

    /// Retires every object the new root does not name (`named`: its tree's and its files'
    /// indexes'; the previous root's, what a failed build left), and removes what has been retired
    /// for `grace`. Returns how many went. A failure here leaves objects behind, never takes one
    /// the new root names: it is a warning.
    private func collect(named: Set<String>, in directory: String, grace: Double,
                         warnings: inout [String]) -> Int {
        guard FileSystem.exists(directory) else { return 0 }
        let now = clock.now()
        // `.ferry/retired`, beside `.ferry/meta` (`directory` always ends in `/meta`).
        var retired = RetiredObjects(path: String(directory[..<directory.lastIndex(of: "/")!]) + "/retired")
        retired.update(present: FileSystem.names(in: directory), current: named, now: now)
        var removed = 0
        for name in retired.expired(now: now, grace: grace, versions: 1) {
            if unlink(directory + "/" + name) == 0 || errno == ENOENT {
                retired.removed(name)
                removed += 1
            }
        }
        do { try retired.save() } catch { warnings.append("cannot keep the list of retired metadata objects: \(error.message)") }
        return removed
    }

    private func relativePath(of file: String, under directory: String) -> RelativePath? {
        let absFile = ConfigParser.resolve(file, against: ConfigLoader.currentDirectory())
        let absDir = ConfigParser.resolve(directory, against: ConfigLoader.currentDirectory())
        let prefix = absDir.hasSuffix("/") ? absDir : absDir + "/"
        guard absFile.hasPrefix(prefix) else { return nil }
        return RelativePath(trusted: String(absFile.dropFirst(prefix.count)))
    }
}

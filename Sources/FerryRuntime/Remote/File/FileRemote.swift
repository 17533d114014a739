import CCurl
import Glibc
import FerryCore

/// A `file://` remote: a local directory (a mount, a staging tree). Others may write it too, so it
/// is walked as ferry walks a session's local directory (`LocalRoot`, in its `.remote` role):
/// every path is opened one name at a time from the remote's directory, never through a symlink,
/// files without blocking, and anything but a regular file is refused (docs/design.md, data-safety
/// rule 6). A symlink planted in the remote can neither redirect a write nor serve a read from
/// outside it.
///
/// The manifest is read with its size, mtime and inode as the validator; files are read with
/// pread, a piece at a time, by the engine (no libcurl), and verified like any download. A push
/// writes each upload to a temporary file in the remote's `.ferry/upload/` (created exclusively,
/// under a name no one can guess), gives it the mode and mtime the manifest lists, syncs it and
/// renames it into place.
struct FileRemote: Remote {
    let base: RemoteLocation
    let tree: RemoteTree
    let clock: any Clock

    init(base: RemoteLocation, clock: any Clock) {
        self.base = base
        self.clock = clock
        tree = RemoteTree(path: base.localDirectory ?? "/nonexistent")
    }

    func fetchRange(url: String, range: Range<Int64>) throws(FerryError) -> [UInt8]? {
        guard let relative = relativePath(of: url) else { return nil }
        let fd = try tree.withRoot(create: false) { root throws(FerryError) in try root.open(relative, for: "to read a range of it") }
        defer { close(fd) }
        let bytes = FileSystem.read(fd: fd, at: range.lowerBound, count: Int64(range.count))
        return bytes.count == range.count ? bytes : nil
    }

    func fetchManifest(url: String, etag: String?, lastModified: String?, maximumSize: Int64) throws(FerryError) -> ManifestFetch {
        let fd: Int32
        if let relative = relativePath(of: url) {
            do {
                fd = try tree.withRoot(create: false) { root throws(FerryError) in try root.open(relative, for: "as the manifest") }
            } catch {
                let failure = FerryError(.remote, "cannot read the manifest \(url): \(error.message)",
                                         hint: "check 'remote =' and 'manifest =' in the config, and that the manifest was published",
                                         cause: error.cause ?? .local(errno: ENOENT))
                if failure.cause == .local(errno: ENOENT) { return .missing(failure) }
                throw failure
            }
        } else {
            // A manifest named by an absolute URL outside the remote: the config's own path.
            guard let path = FileBackend.directory(of: url) else { throw .remote("cannot read the manifest \(url): not a valid file URL") }
            do { fd = try FileSystem.openRegularFile(path) } catch {
                let failure = FerryError(.remote, "cannot read the manifest \(url): \(error.message)",
                                         hint: "check 'remote =' and 'manifest =' in the config, and that the manifest was published", cause: error.cause)
                if failure.cause == .local(errno: ENOENT) { return .missing(failure) }
                throw failure
            }
        }
        defer { close(fd) }
        var st = stat()
        fstat(fd, &st)
        let validator = "file:\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec):\(st.st_ino)"
        if validator == etag { return .unchanged }
        if Int64(st.st_size) > maximumSize { throw Remotes.tooLarge(url, maximumSize: maximumSize, announced: Int64(st.st_size)) }
        let bytes: [UInt8]
        do { bytes = try FileSystem.read(fd: fd, limit: Int(maximumSize), shown: url) } catch {
            throw .remote("cannot read the manifest \(url): \(error.message)")
        }
        return .fetched(bytes: bytes, etag: validator, lastModified: nil)
    }

    func origin(of source: RelativePath) -> Download.Origin { .stepped(FileSource(tree: tree, path: source)) }

    /// The path under the remote that `url` names, or nil when it names a file elsewhere.
    private func relativePath(of url: String) -> RelativePath? {
        guard url.hasPrefix(base.url), let decoded = String(url.dropFirst(base.url.count)).removingPercentEncoding() else { return nil }
        return try? RelativePath(validating: decoded)
    }
}

extension FileRemote: RemoteWriting {

    func placement(for file: LocalUpload, journal: UploadJournal) throws(FerryError) -> Placement {
        let (fd, name) = try tree.withRoot(create: true) { root throws(FerryError) in try root.createUpload(owner: String(file.task.id)) }
        let upload = Upload(task: file.task, entry: file.entry, stat: file.stat, expecting: file.hashKnown ? file.entry.sha256 : nil,
                            file: file.file, range: file.range, destination: .file(fd: fd, staged: name))
        let (entry, destination) = (file.entry, file.destination)
        return SinglePlacement(upload: upload, file: file.file, finish: { [tree] _ throws(FerryError) -> Transfer? in
            _ = try tree.withRoot(create: true) { root throws(FerryError) -> LocalEntry in
                let placed = try root.commit(partialFD: fd, staged: name, to: destination, mode: entry.mode, mtime: entry.mtime, lost: {})
                try root.syncDirectories()
                return placed
            }
            return nil
        }, cleanup: { [tree] in
            try? tree.withRoot(create: false) { root throws(FerryError) in root.removeUploads(owner: String(file.task.id)) }
        }, vouch: { _ in .readBack })
    }

    func removeLeftovers(tasks: [TransferTask], journaled: [JournaledUpload]) {
        // Every upload has a name of its own: one a run made just before it died, whatever its
        // task's state, would stay for good.
        try? tree.withRoot(create: false) { root throws(FerryError) in
            root.removeUploads(owners: Set(tasks.map { String($0.id) }).union(["manifest"]))
        }
    }

    func abandon(_ upload: JournaledUpload) {}

    /// How old another writer's temporary file is when it is taken as abandoned (seconds).
    static let abandonedAfter: Double = 3600

    func write(_ bytes: [UInt8], at path: RelativePath, condition: WriteCondition) throws(FerryError) -> WriteOutcome {
        try tree.withRoot(create: true) { root throws(FerryError) in
            let (fd, name) = try root.createUpload(owner: "manifest")
            defer { close(fd) }
            do throws(FerryError) {
                try FileSystem.write(fd: fd, bytes: bytes, shown: root.path + "/" + LocalRoot.uploadPath + "/" + name)
                let written = try root.commit(partialFD: fd, staged: name, to: path, mode: 0o644, mtime: nil, lost: {})
                try root.syncDirectories()
                // A writer killed mid-write leaves its temporary file, and in a directory many
                // machines write (a report location) no push clears it (`removeLeftovers`): one
                // written an hour before this write is a killed writer's, never one under way.
                root.removeUploads(owners: ["manifest"], writtenBefore: written.mtime.timeInterval - FileRemote.abandonedAfter)
            } catch {
                root.removeUpload(named: name)
                throw FerryError(.remote, "cannot publish \(Printable.name(root.path + "/" + path.string)): \(error.message)", hint: error.hint, cause: error.cause)
            }
        }
        return .written
    }

    func remove(_ path: RelativePath) throws(FerryError) {
        try tree.withRoot(create: false) { root throws(FerryError) in
            do throws(FerryError) {
                try root.delete(path)
                try root.syncDirectories()
            } catch {
                // A file where a directory of the path should be: nothing is at this path any more.
                // A symlink there is another matter: whoever serves the remote may follow it, so
                // the path may still be served; nothing is followed to remove it, and it is not
                // said to be deleted.
                if error.category == .transfer && error.cause != .local(errno: ELOOP) { return }
                throw FerryError(error.category == .transfer ? .transfer : .remote, error.message, hint: error.hint, cause: error.cause)
            }
        }
    }

    func removeDirectoryIfEmpty(_ path: RelativePath) throws(FerryError) -> Bool {
        try tree.withRoot(create: false) { root throws(FerryError) -> Bool in
            let gone = root.removeDirectoryIfEmpty(path)
            try root.syncDirectories()
            return gone || root.stat(path) == nil
        }
    }

    func inspect(_ path: RelativePath) -> RemoteInspection {
        let entry = try? tree.withRoot(create: false) { root throws(FerryError) -> LocalEntry? in root.stat(path) }
        guard let entry = entry ?? nil, entry.kind == .file else { return .now(.absent) }
        return .now(RemoteFileState(exists: true, size: entry.size, validator: FileRemote.validator(entry), sha256: nil))
    }

    /// The file opened from the remote's directory (never through a symlink) and hashed by the
    /// engine a few MiB a step: a local directory computes no checksum.
    func readBack(_ path: RelativePath, limit: Int64) -> RemoteInspection {
        let (fd, error) = tree.openForReading(path)
        guard fd >= 0 else {
            if let error, LocalRoot.isGone(error.cause) { return .now(.absent) }
            return .failed(error ?? .remote("cannot read \(Printable.name(path.string)) back from the remote"))
        }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let code = errno
            close(fd)
            return .failed(FerryError(.remote, "cannot read \(Printable.name(path.string)) back: \(FileSystem.errorText(code))", cause: .local(errno: code)))
        }
        let entry = FileSystem.entry(from: st)
        guard entry.size <= limit else {
            close(fd)
            return .now(RemoteFileState(exists: true, size: entry.size, validator: FileRemote.validator(entry), sha256: nil))
        }
        return .probe(FileReadBack(path: path, fd: fd, entry: entry))
    }

    /// A local directory's validator for a file: size, mtime to the nanosecond, inode.
    static func validator(_ entry: LocalEntry) -> String {
        "file:\(entry.size):\(entry.mtime.seconds).\(entry.mtime.nanoseconds):\(entry.inode)"
    }
}

/// A `file://` remote's file read back: hashed in steps by the engine (`RangeHash`), its size and
/// validator from the descriptor it was opened as.
final class FileReadBack: StateProbe {
    let path: RelativePath
    private let hash: RangeHash
    private let entry: LocalEntry
    private(set) var state: RemoteFileState?
    var cancelRequested = false
    var throttle: Throttle?

    init(path: RelativePath, fd: Int32, entry: LocalEntry) {
        self.path = path
        self.entry = entry
        hash = RangeHash(fd: fd, range: 0..<entry.size)
    }

    deinit { close(hash.fd) }

    var mode: TransferMode { .steps }
    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {}
    func finish(code: CURLcode, errorText: String?) -> TransferOutcome { .succeeded }

    func step() -> TransferOutcome? {
        guard let outcome = hash.step() else { return nil }
        if case .succeeded = outcome {
            state = RemoteFileState(exists: true, size: entry.size, validator: FileRemote.validator(entry), sha256: hash.digest, verified: .readBack)
        }
        return outcome
    }
}

/// A file of a `file://` remote as a download's source: opened through the remote's tree (never
/// through a symlink) and read with pread, from any offset.
final class FileSource: SteppedSource {
    let tree: RemoteTree
    let path: RelativePath
    private var fd: Int32 = -1

    init(tree: RemoteTree, path: RelativePath) {
        self.tree = tree
        self.path = path
    }

    var checksValidator: Bool { false }
    var waitingOn: (fd: Int32, events: Int16)? { nil }

    func open() -> SteppedOpen {
        let (fd, error) = tree.openForReading(path)
        guard fd >= 0 else {
            return .failed(TransferFailure(message: error?.message ?? "cannot open it", keepPartial: true, cause: error?.cause ?? .local(errno: EIO)))
        }
        self.fd = fd
        return .ready(validator: nil, size: nil)
    }

    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) -> SteppedRead {
        let n = pread(fd, buffer, count, off_t(offset))
        if n > 0 { return .bytes(n) }
        if n == 0 { return .end }
        let code = errno
        if code == EINTR { return .bytes(0) }
        return .failed(TransferFailure(message: "cannot read \(Printable.name(tree.path + "/" + path.string)): \(FileSystem.errorText(code))",
                                       keepPartial: true, cause: .local(errno: code)))
    }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }
}

extension FileRemote: RemoteDirectory {
    /// Plain names of the directory (what is read from each is opened as any remote file is:
    /// without following a symlink out of the tree).
    func entries(limit: Int) throws(FerryError) -> [DirectoryEntry] {
        guard let directory = base.localDirectory, FileSystem.exists(directory) else {
            throw FerryError(.remote, "cannot list \(base.url): no such directory", hint: "check the report location's URL", cause: .local(errno: ENOENT))
        }
        var out: [DirectoryEntry] = []
        FileSystem.forEachName(in: directory) { name in
            guard out.count < limit && !name.hasPrefix(".") else { return }
            var st = stat()
            let stamp = lstat(directory + "/" + name, &st) == 0
                ? "\(st.st_size)-\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)-\(st.st_ino)" : nil
            out.append(DirectoryEntry(name: name, stamp: stamp))
        }
        return out
    }
}

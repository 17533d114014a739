import CCurl
import Glibc
import FerryCore

/// Push to an `sftp://` remote. A file goes to a temporary name in the remote's `.ferry/upload/`,
/// created exclusively under a name no one can guess (nothing planted there is written through),
/// its WRITEs pipelined; it gets the manifest's mode and mtime, is synced (`fsync@openssh.com`)
/// and closed, and only once the upload verified what it read is it renamed over its final name
/// with `posix-rename@openssh.com`, the one atomic replace SFTP has (plain RENAME refuses an
/// existing name). A server without it is refused before anything is sent. Every directory on
/// the way is looked at (LSTAT) before it is used: a symlink is refused, never followed. The
/// server computes no checksum, so a placed file is read back and hashed by ferry. The manifest
/// goes the same way (owner `manifest`); SFTP has no conditional write, so the session compares
/// the manifest just before it publishes.
extension SFTPRemote: RemoteWriting {
    func placement(for file: LocalUpload, journal: UploadJournal) throws(FerryError) -> Placement {
        let sink = SFTPUpload(remote: self, owner: String(file.task.id), destination: file.destination, mode: file.entry.mode,
                              mtime: file.entry.mtime?.seconds)
        let upload = Upload(task: file.task, entry: file.entry, stat: file.stat, expecting: file.hashKnown ? file.entry.sha256 : nil,
                            file: file.file, range: file.range, destination: .stepped(sink))
        return SinglePlacement(upload: upload, file: file.file, cleanup: { sink.discard() }, vouch: { _ in .readBack })
    }

    /// What every write needs, once, before the first file is sent: `posix-rename@openssh.com`,
    /// and the remote's directory and its `.ferry/upload/` as directories (none a symlink, but
    /// the remote's own directory may be one).
    func prepareToWrite() throws(FerryError) {
        try connections.with(self) { connection throws(FerryError) in
            guard connection.extensions.contains(SFTPUpload.rename) else { throw SFTPErrors.noAtomicRename(endpoint) }
            let calls = SFTPCalls(remote: self, connection: connection)
            for path in sharedDirectories { try calls.makeSureOfDirectory(path) }
        }
    }

    func write(_ bytes: [UInt8], at path: RelativePath, condition: WriteCondition) throws(FerryError) -> WriteOutcome {
        let sink = SFTPUpload(remote: self, owner: "manifest", destination: path, mode: nil, mtime: nil)
        defer { sink.discard() }
        var failure: FerryError?
        bytes.withUnsafeBytes { all in
            var at = 0
            do throws(FerryError) {
                try drive(sink) {
                    sink.send { max in
                        let n = min(max, all.count - at)
                        defer { at += n }
                        return UnsafeRawBufferPointer(rebasing: all[at..<at + n])
                    }
                }
            } catch { failure = error }
        }
        if let failure { throw failure }
        try drive(sink) { sink.place() }
        return .written
    }

    /// Runs a sink's steps on the calling thread (the session's), waiting on its socket between them.
    private func drive(_ sink: SFTPUpload, _ step: () -> SteppedWrite) throws(FerryError) {
        while true {
            switch step() {
            case .done: return
            case let .failed(failure): throw FerryError(.remote, failure.message, cause: failure.cause)
            case .wait:
                if let reason = stop?.reason {
                    throw FerryError(.stopped, "\(reason) while writing to \(endpoint.shown)", hint: "the next run starts again from there")
                }
                guard let (fd, events) = sink.waitingOn else { continue }
                var pfd = pollfd(fd: fd, events: events, revents: 0)
                _ = poll(&pfd, 1, 100)
            }
        }
    }

    func remove(_ path: RelativePath) throws(FerryError) {
        try connections.with(self) { connection throws(FerryError) in
            let calls = SFTPCalls(remote: self, connection: connection)
            // A file where a directory of the path should be: nothing is at this path any more.
            guard try calls.directoriesHold(path.string) else { return }
            let full = serverPath(path)
            let reply = try calls.call(.remove) { $0.string(full) }
            if case .status(_, .noSuchFile, _, _) = reply { return }
            try calls.requireOK(reply, "remove", full)
        }
    }

    func removeDirectoryIfEmpty(_ path: RelativePath) throws(FerryError) -> Bool {
        try connections.with(self) { connection throws(FerryError) -> Bool in
            let calls = SFTPCalls(remote: self, connection: connection)
            guard try calls.directoriesHold(path.string) else { return true }
            let full = serverPath(path)
            guard let attributes = try calls.lstatIfPresent(full, for: "look at") else { return true }
            // A symlink or a file at the name is not a directory ferry made: left as it is.
            guard attributes.isDirectory else { return false }
            switch try calls.call(.rmdir, { $0.string(full) }) {
            case .status(_, .ok, _, _), .status(_, .noSuchFile, _, _):
                directories.forget(full)
                return true
            case .status: return false
            case let reply: throw calls.unexpected(reply, "RMDIR")
            }
        }
    }

    /// An LSTAT of the name, on the calling thread: SFTP gives size and mtime in one round trip.
    func inspect(_ path: RelativePath) -> RemoteInspection {
        do {
            return .now(try connections.with(self) { connection throws(FerryError) -> RemoteFileState in
                let calls = SFTPCalls(remote: self, connection: connection)
                guard try calls.directoriesHold(path.string), let attributes = try calls.lstatIfPresent(serverPath(path), for: "look at"),
                      attributes.isRegularFile else { return .absent }
                return RemoteFileState(exists: true, size: attributes.size, validator: attributes.validator, sha256: nil)
            })
        } catch {
            return .failed(error)
        }
    }

    func readBack(_ path: RelativePath, limit: Int64) -> RemoteInspection {
        .probe(SFTPReadBack(remote: self, path: path, limit: limit))
    }

    /// Every temporary upload of the session's tasks, and a manifest being written: names in
    /// `.ferry/upload/` start with their owner (`<task id>-<random>`), so no record of the name is
    /// needed, and one a run made just before it died is found too.
    func removeLeftovers(tasks: [TransferTask], journaled: [JournaledUpload]) {
        let owners = Set(tasks.map { String($0.id) }).union(["manifest"])
        let staging = directory + LocalRoot.uploadPath
        try? connections.with(self) { connection throws(FerryError) in
            let calls = SFTPCalls(remote: self, connection: connection)
            // .ferry and .ferry/upload must be directories (not symlinks) for anything to be removed there.
            guard try calls.directoriesHold(LocalRoot.uploadPath + "/x") else { return }
            for name in try calls.names(in: staging) {
                let owner = name.firstIndex(of: "-").map { String(name[..<$0]) } ?? name
                // A REMOVE of a symlink removes the link, never what it names.
                if owners.contains(owner) { _ = try calls.call(.remove) { $0.string(staging + "/" + name) } }
            }
        }
    }

    func abandon(_ upload: JournaledUpload) {}
}

/// A file of an `sftp://` remote read back and hashed by the engine's steps (`SFTPFileSource`,
/// which refuses a symlink): the check of a placed file, SFTP computing no checksum. A file larger
/// than `limit` is not read: its size alone says it is not what was sent.
final class SFTPReadBack: StateProbe {
    let path: RelativePath
    private let source: SFTPFileSource
    private let limit: Int64
    private let hasher = SHA256Hasher()
    private var validator: String??
    private var count: Int64 = 0
    private(set) var state: RemoteFileState?
    var cancelRequested = false
    var throttle: Throttle?
    private let buffer = UnsafeMutableRawPointer.allocate(byteCount: Download.stepSize, alignment: 16)

    init(remote: SFTPRemote, path: RelativePath, limit: Int64) {
        self.path = path
        self.limit = limit
        source = SFTPFileSource(remote: remote, path: path)
    }

    deinit {
        source.close()
        buffer.deallocate()
    }

    var mode: TransferMode { .steps }
    var waitingOn: (fd: Int32, events: Int16)? { source.waitingOn }
    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {}
    func finish(code: CURLcode, errorText: String?) -> TransferOutcome { .succeeded }

    func step() -> TransferOutcome? {
        if validator == nil {
            switch source.open() {
            case .wait: return nil
            case let .failed(failure):
                guard failure.cause == .local(errno: ENOENT) else { return .failed(failure) }
                state = .absent
                return .succeeded
            case let .ready(validator, size):
                self.validator = validator
                if let size, size > limit {
                    state = RemoteFileState(exists: true, size: size, validator: validator, sha256: nil)
                    return .succeeded
                }
            }
        }
        switch source.read(into: buffer, count: Download.stepSize, at: count) {
        case .wait: return nil
        case let .failed(failure): return .failed(failure)
        case .end:
            state = RemoteFileState(exists: true, size: count, validator: validator ?? nil, sha256: hasher.finalize(), verified: .readBack)
            return .succeeded
        case let .bytes(n):
            hasher.update(buffer, count: n)
            count += Int64(n)
            throttle?.take(n)
            return nil
        }
    }
}

import CCurl
import Glibc
import Synchronization
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
                            file: file.file, destination: .stepped(sink))
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
            guard try calls.directoriesHold(LocalRoot.uploadPath + "/x"),
                  let attributes = try calls.lstatIfPresent(staging, for: "look at"), attributes.isDirectory else { return }
            for name in try calls.names(in: staging) {
                let owner = name.firstIndex(of: "-").map { String(name[..<$0]) } ?? name
                // A REMOVE of a symlink removes the link, never what it names.
                if owners.contains(owner) { _ = try calls.call(.remove) { $0.string(staging + "/" + name) } }
            }
        }
    }

    func abandon(_ upload: JournaledUpload) {}
}

/// The directories of an `sftp://` remote seen to be directories (not symlinks), or made, by
/// this run: each is looked at once. Shared by the threads of a run.
final class SFTPDirectories: Sendable {
    private let known = Mutex(Set<String>())

    func contains(_ path: String) -> Bool { known.withLock { $0.contains(path) } }
    func insert(_ path: String) { _ = known.withLock { $0.insert(path) } }
    /// A directory removed: it and everything under it are looked at again.
    func forget(_ path: String) { known.withLock { $0 = $0.filter { $0 != path && !$0.hasPrefix(path + "/") } } }
}

extension SFTPRemote {
    /// The server paths of the directories `path` (relative to the remote) lies in, outermost first.
    func parents(of path: String) -> [String] {
        let parts = path.split(separator: "/")
        return (1..<max(parts.count, 1)).map { directory + parts[..<$0].joined(separator: "/") }
    }

    /// The directories every upload goes through: the remote's own, `.ferry`, `.ferry/upload`.
    var sharedDirectories: [String] { (ownDirectory.map { [$0] } ?? []) + parents(of: LocalRoot.uploadPath + "/x") }

    /// The remote's own directory, which may be a symlink (the operator's choice, like the
    /// directory a `file://` remote names): nil for the login directory.
    var ownDirectory: String? {
        let own = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        return own.isEmpty ? nil : own
    }
}

/// Makes sure a directory of the remote is one, a request at a time: looks at it (STAT for the
/// remote's own directory, which may be a symlink to one, the operator's choice; LSTAT under it,
/// where a symlink is refused), makes it when it is missing, and looks again when making it
/// failed (another upload may have made it first; if it is still missing, the MKDIR's failure
/// is the error).
struct SFTPDirectoryCheck {
    let path: String
    private let follow: Bool
    private enum Look { case look, make, again(FerryError) }
    private var look = Look.look

    init(_ path: String, _ remote: SFTPRemote) {
        self.path = path
        follow = path == remote.ownDirectory
    }

    /// The next request's kind and fields.
    var kind: SFTP.Kind {
        if case .make = look { return .mkdir }
        return follow ? .stat : .lstat
    }

    func fields(_ packet: inout SFTP.Packet) {
        packet.string(path)
        if case .make = look { packet.attributes(SFTP.Attributes(permissions: 0o755)) }
    }

    /// Takes the reply to the last request: true once the directory is one; false when another
    /// request is due (`kind`, `fields`).
    mutating func take(_ reply: SFTP.Reply, _ calls: SFTPCalls) throws(FerryError) -> Bool {
        switch (look, reply) {
        case (.make, .status(_, .ok, _, _)):
            return true
        case (.make, _):
            do throws(FerryError) { try calls.requireOK(reply, "make the directory", path) } catch {
                look = .again(error)
            }
            return false
        case let (_, .attrs(_, attributes)):
            guard attributes.isDirectory else { throw SFTPErrors.notADirectory(calls.endpoint, path, attributes) }
            return true
        case let (.again(failure), .status(_, .noSuchFile, _, _)):
            throw failure
        case (.look, .status(_, .noSuchFile, _, _)):
            look = .make
            return false
        default:
            try calls.requireOK(reply, "look at", path)
            throw calls.unexpected(reply, "LSTAT")
        }
    }
}

extension SFTPCalls {
    /// Makes sure `path` is a directory (`SFTPDirectoryCheck`), on the calling thread.
    func makeSureOfDirectory(_ path: String) throws(FerryError) {
        guard !remote.directories.contains(path) else { return }
        var check = SFTPDirectoryCheck(path, remote)
        while try !check.take(call(check.kind, check.fields), self) {}
        remote.directories.insert(path)
    }

    /// LSTAT, nil when nothing is at the name.
    func lstatIfPresent(_ full: String, for what: String) throws(FerryError) -> SFTP.Attributes? {
        let reply = try call(.lstat) { $0.string(full) }
        if case let .attrs(_, attributes) = reply { return attributes }
        if case .status(_, .noSuchFile, _, _) = reply { return nil }
        try requireOK(reply, what, full)
        throw unexpected(reply, "LSTAT")
    }

    /// Whether the directories `path` lies in are all there; a symlink among them is refused (a
    /// write or a removal through it would reach outside the remote).
    func directoriesHold(_ path: String) throws(FerryError) -> Bool {
        for parent in remote.parents(of: path) where !remote.directories.contains(parent) {
            guard let attributes = try lstatIfPresent(parent, for: "look at") else { return false }
            guard attributes.isDirectory else {
                if attributes.isSymlink { throw SFTPErrors.notADirectory(endpoint, parent, attributes) }
                return false
            }
            remote.directories.insert(parent)
        }
        return true
    }

    /// The names in a directory (OPENDIR, READDIR to its end), at most `limit`: each a counted
    /// string from the server, those that are not a plain name (empty, `.`, `..`, with `/` or NUL) left out.
    func names(in full: String, limit: Int = 1_000_000) throws(FerryError) -> [String] {
        let opened = try call(.opendir) { $0.string(full) }
        guard case let .handle(_, handle) = opened else {
            try requireOK(opened, "list", full)
            throw unexpected(opened, "OPENDIR")
        }
        var names: [String] = []
        var failure: FerryError?
        listing: while names.count < limit {
            let reply = try call(.readdir) { $0.string(handle) }
            switch reply {
            case let .name(_, entries):
                for (raw, _) in entries where !raw.isEmpty && raw != [0x2e] && raw != [0x2e, 0x2e] && !raw.contains(0x2f) && !raw.contains(0) {
                    names.append(String(decoding: raw, as: UTF8.self))
                }
            case .status(_, .eof, _, _): break listing
            case let .status(_, status, code, message):
                failure = SFTPErrors.status(endpoint, status, code: code, message: message, "list", full)
                break listing
            default:
                failure = unexpected(reply, "READDIR")
                break listing
            }
        }
        try close(handle, full)
        if let failure { throw failure }
        return names
    }
}

/// One file's bytes on their way to an `sftp://` remote, and then to their final name, in the
/// steps of an upload on the engine's thread (or driven on the session's thread for the
/// manifest), never blocking: a pooled connection (or a new one, set up a step at a time); each
/// directory on the way looked at, made where missing; OPEN of a new temporary name with
/// CREAT|EXCL (another random name if it is taken, up to 8); WRITEs, `window` in flight; FSETSTAT
/// (mode, mtime), `fsync@openssh.com`, CLOSE; then, when asked to place it, `posix-rename@openssh.com`.
/// A server that answers nothing for `stall-timeout` fails the attempt.
final class SFTPUpload: SteppedSink {
    let remote: SFTPRemote
    private let owner: String
    private let final: String
    private var temporary = ""
    private let attributes: SFTP.Attributes
    /// Directories to look at (and make) before the file is opened, outermost first.
    private var directories: [String]
    private var connection: SSHConnection?
    private enum Phase { case connecting, directory(SFTPDirectoryCheck), open(tries: Int), writing, attributes, sync, closing, sent, renaming, placed }
    private var phase = Phase.connecting
    /// The request the phase waits on (outside `.writing`).
    private var asked: UInt32?
    private var handle: [UInt8] = []
    private var writes: Set<UInt32> = []
    private var offset: Int64 = 0
    private var ended = false
    private var lastProgress: Double
    private(set) var waitingOn: (fd: Int32, events: Int16)?
    /// Set once an attempt failed in a way that leaves the connection unfit (a stall, a reply out
    /// of turn): it is closed, not given back. An SFTP status leaves it fit.
    private var unfit = false
    /// WRITEs in flight at most: 2 MiB, as many as a download's reads.
    static let window = SFTPFileSource.window
    static let rename = "posix-rename@openssh.com", fsync = "fsync@openssh.com"

    /// `mode` nil: 0644; `mtime` nil: the server's clock.
    init(remote: SFTPRemote, owner: String, destination: RelativePath, mode: UInt32?, mtime: Int64?) {
        self.remote = remote
        self.owner = owner
        final = remote.serverPath(destination)
        attributes = SFTP.Attributes(permissions: (mode ?? 0o644) & 0o7777, mtime: mtime)
        var wanted = remote.sharedDirectories
        for parent in remote.parents(of: destination.string) where !wanted.contains(parent) { wanted.append(parent) }
        directories = wanted.filter { !remote.directories.contains($0) }
        lastProgress = remote.clock.monotonic()
    }

    private var endpoint: SSHEndpoint { remote.endpoint }

    func send(_ next: (Int) -> UnsafeRawBufferPointer?) -> SteppedWrite { run(next) }

    func place() -> SteppedWrite {
        if case .sent = phase, let connection {
            phase = .renaming
            asked = connection.request(.extended) { $0.string(Self.rename); $0.string(temporary); $0.string(final) }
        }
        return run { _ in nil }
    }

    private func run(_ next: (Int) -> UnsafeRawBufferPointer?) -> SteppedWrite {
        do throws(FerryError) {
            if connection == nil {
                guard case .connecting = phase else { return .failed(TransferFailure(message: "not connected", keepPartial: false, cause: .unusable)) }
                connection = try remote.connections.borrow(endpoint)
                lastProgress = remote.clock.monotonic()
            }
            let connection = connection!
            // A bounded piece of work per call: the engine thread serves every other transfer too.
            for _ in 0..<32 {
                var held = false
                switch phase {
                case .connecting:
                    guard try connection.advance() else { return try waiting(connection, "connecting", limit: remote.connectTimeout) }
                    lastProgress = remote.clock.monotonic()
                    guard connection.extensions.contains(Self.rename) else { throw SFTPErrors.noAtomicRename(endpoint) }
                    nextDirectory(connection)
                case .sent, .placed:
                    waitingOn = nil
                    return .done
                case .writing:
                    held = fill(connection, next)
                default:
                    break
                }
                let replies = try connection.exchange()
                if replies.isEmpty {
                    if held {
                        // Held by a bandwidth limit: not the server's stall. The engine steps it once it may go on.
                        lastProgress = remote.clock.monotonic()
                        waitingOn = nil
                        return .wait
                    }
                    if connection.waitingOn == nil { continue }
                    return try waiting(connection, "an answer", limit: remote.stallTimeout)
                }
                lastProgress = remote.clock.monotonic()
                for reply in replies { try take(reply, connection) }
            }
            waitingOn = nil
            return .wait
        } catch {
            if case .local = error.cause {} else { unfit = true }
            return .failed(TransferFailure(message: error.message, keepPartial: false, cause: error.cause ?? .unusable))
        }
    }

    /// Sends WRITEs until `window` are in flight or the bytes end; true when `next` had none for now.
    private func fill(_ connection: SSHConnection, _ next: (Int) -> UnsafeRawBufferPointer?) -> Bool {
        while !ended && writes.count < Self.window {
            guard let chunk = next(SFTP.readSize) else { return true }
            if chunk.isEmpty { ended = true; break }
            writes.insert(connection.request(.write) { $0.write(handle, at: offset, chunk) })
            offset += Int64(chunk.count)
        }
        finishWriting(connection)
        return false
    }

    /// Every byte written and acknowledged: the file's mode and mtime come next.
    private func finishWriting(_ connection: SSHConnection) {
        guard ended, writes.isEmpty, case .writing = phase else { return }
        phase = .attributes
        asked = connection.request(.fsetstat) { $0.string(handle); $0.attributes(attributes) }
    }

    private func take(_ reply: SFTP.Reply, _ connection: SSHConnection) throws(FerryError) {
        let calls = SFTPCalls(remote: remote, connection: connection)
        if case .writing = phase {
            guard writes.remove(reply.id) != nil else { throw unasked(reply) }
            try calls.requireOK(reply, "write the temporary upload", temporary)
            return finishWriting(connection)
        }
        guard reply.id == asked else { throw unasked(reply) }
        asked = nil
        switch phase {
        case var .directory(check):
            guard try check.take(reply, calls) else {
                phase = .directory(check)
                asked = connection.request(check.kind, check.fields)
                return
            }
            remote.directories.insert(directories.removeFirst())
            nextDirectory(connection)
        case let .open(tries):
            if case let .handle(_, handle) = reply {
                self.handle = handle
                phase = .writing
            } else if case .status(_, .failure, _, _) = reply, tries < 8 {
                // The name is taken (OpenSSH says only "failure" for EEXIST): another one.
                open(connection, tries: tries + 1)
            } else {
                try calls.requireOK(reply, "create the temporary upload", temporary)
                throw calls.unexpected(reply, "OPEN")
            }
        case .attributes:
            try calls.requireOK(reply, "set the mode and mtime of", temporary)
            if connection.extensions.contains(Self.fsync) {
                phase = .sync
                asked = connection.request(.extended) { $0.string(Self.fsync); $0.string(handle) }
            } else {
                closeFile(connection)
            }
        case .sync:
            try calls.requireOK(reply, "sync", temporary)
            closeFile(connection)
        case .closing:
            // A CLOSE that fails may have lost data: the upload fails.
            try calls.requireOK(reply, "close", temporary)
            handle = []
            phase = .sent
        case .renaming:
            try calls.requireOK(reply, "rename into place", final)
            phase = .placed
            self.connection = nil
            waitingOn = nil
            remote.connections.giveBack(connection)
        default:
            throw unasked(reply)
        }
    }

    private func nextDirectory(_ connection: SSHConnection) {
        guard let path = directories.first else { return open(connection, tries: 1) }
        let check = SFTPDirectoryCheck(path, remote)
        phase = .directory(check)
        asked = connection.request(check.kind, check.fields)
    }

    private func open(_ connection: SSHConnection, tries: Int) {
        let name = owner + "-" + String(UInt64.random(in: 0...UInt64.max), radix: 16) + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        temporary = remote.directory + LocalRoot.uploadPath + "/" + name
        phase = .open(tries: tries)
        asked = connection.request(.open) { $0.open(temporary, [.write, .create, .exclusive], mode: 0o600) }
    }

    private func closeFile(_ connection: SSHConnection) {
        phase = .closing
        asked = connection.request(.close) { $0.string(handle) }
    }

    private func unasked(_ reply: SFTP.Reply) -> FerryError {
        SFTPErrors.malformed(endpoint, SFTP.Malformed(what: "a reply to request \(reply.id), which was not asked"))
    }

    /// Waiting on the socket: `.wait`, or a failure once nothing came for `limit` seconds.
    private func waiting(_ connection: SSHConnection, _ what: String, limit: Double) throws(FerryError) -> SteppedWrite {
        waitingOn = connection.waitingOn
        if remote.clock.monotonic() - lastProgress >= limit { throw SFTPErrors.timedOut(endpoint, what) }
        return .wait
    }

    /// The temporary name goes (REMOVE, its reply dropped) and the connection is given back, if
    /// it is fit; else it is closed and the next run's `removeLeftovers` removes the name.
    func discard() {
        guard let connection else { return }
        self.connection = nil
        waitingOn = nil
        // An OPEN in flight may still give a handle: the connection goes with it.
        if case .open = phase { return connection.close() }
        guard !unfit, connection.isReady else { return connection.close() }
        for id in writes { connection.ignore(id) }
        writes.removeAll()
        if let asked { connection.ignore(asked) }
        if !handle.isEmpty { connection.ignore(connection.request(.close) { $0.string(handle) }) }
        if !temporary.isEmpty { connection.ignore(connection.request(.remove) { $0.string(temporary) }) }
        // Sent now, not when the connection is next used.
        _ = try? connection.exchange()
        remote.connections.giveBack(connection)
    }
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

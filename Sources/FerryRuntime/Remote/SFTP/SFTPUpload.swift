import Glibc
import FerryCore

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

    /// The temporary name goes and the connection is given back, if it is fit (the REMOVE's answer
    /// is waited for, at most `discardWait` seconds: what is left behind once the upload ended is
    /// gone, not merely asked to go); else it is closed and the next run's `removeLeftovers`
    /// removes the name.
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
        if !temporary.isEmpty {
            let name = temporary
            // A server that does not answer soon keeps the engine's thread no longer.
            guard (try? connection.call(.remove, within: Self.discardWait, clock: remote.clock, stop: nil, { $0.string(name) })) != nil else {
                return connection.close()
            }
        }
        remote.connections.giveBack(connection)
    }

    static let discardWait = 5.0
}

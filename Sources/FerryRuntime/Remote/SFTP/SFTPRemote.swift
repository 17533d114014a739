import Glibc
import Synchronization
import FerryCore

/// An `sftp://` remote: a directory on an SSH server, read over SFTP (`SSHConnection`, `SFTP`).
/// The manifest is read whole on the session's thread, its validator the SHA-256 of its bytes (an
/// SFTP server gives mtimes in seconds and no clock of its own, so nothing cheaper is exact). A
/// file is read by the engine's steps, several reads in flight, resumed from an offset only while
/// its size and mtime are those the partial was fetched under; the whole is verified by its hash.
/// A name that is a symlink or anything but a regular file on the server is refused. A push writes
/// through `SFTPWriting.swift`.
struct SFTPRemote: Remote {
    let base: RemoteLocation
    let endpoint: SSHEndpoint
    /// The remote's directory on the server, ending in `/` (empty: the login directory).
    let directory: String
    let connections: SSHConnections
    let clock: any Clock
    let stop: StopCondition?
    let connectTimeout: Double
    let stallTimeout: Double
    /// Directories a push looked at (or made) this run.
    let directories = SFTPDirectories()

    /// The server's path of `path` under the remote.
    func serverPath(_ path: RelativePath) -> String { directory + path.string }

    /// The server's path of a URL under the remote (percent-decoded; a manifest, or a metadata
    /// object under `.ferry/`), or nil for a URL elsewhere or one that climbs out.
    func serverPath(ofURL url: String) -> String? {
        guard url.hasPrefix(base.url), let decoded = String(url.dropFirst(base.url.count)).removingPercentEncoding(),
              !decoded.isEmpty, !decoded.hasPrefix("/"), !decoded.contains("\0"),
              !decoded.split(separator: "/", omittingEmptySubsequences: false).contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else { return nil }
        return directory + decoded
    }

    func fetchManifest(url: String, etag: String?, lastModified: String?, maximumSize: Int64) throws(FerryError) -> ManifestFetch {
        guard let full = serverPath(ofURL: url) else {
            throw FerryError(.usage, "\(Printable.name(url)) is not a file under the remote \(base.url)",
                             hint: "name the manifest relative to 'remote =' (like manifest.json)")
        }
        return try connections.with(self) { connection throws(FerryError) -> ManifestFetch in
            let reader = SFTPCalls(remote: self, connection: connection)
            let attributes: SFTP.Attributes
            do throws(FerryError) { attributes = try reader.lstat(full, for: "read the manifest") } catch {
                if error.cause == .local(errno: ENOENT) { return .missing(error) }
                throw error
            }
            try reader.requireRegularFile(attributes, full, "as the manifest")
            if let size = attributes.size, size > maximumSize { throw Remotes.tooLarge(url, maximumSize: maximumSize, announced: size) }
            let bytes = try reader.readWhole(full, limit: maximumSize, url: url)
            let validator = "sha256:" + SHA256Hasher.digest(of: bytes).hex
            if validator == etag { return .unchanged }
            return .fetched(bytes: bytes, etag: validator, lastModified: nil)
        }
    }

    func origin(of source: RelativePath) -> Download.Origin { .stepped(SFTPFileSource(remote: self, path: source)) }
}

/// The idle connections of a remote, reused by its next request or transfer (a new SSH login
/// costs a handshake, ~0.2 s on a busy machine): a borrower owns its connection alone, and gives
/// it back only when it ended cleanly. The address is resolved once.
final class SSHConnections: Sendable {
    private struct Idle: @unchecked Sendable {
        var connections: [SSHConnection] = []
        var addresses: [SocketAddress]?
    }
    private let idle = Mutex(Idle())
    /// Idle connections kept at most.
    let keep: Int

    init(keep: Int) { self.keep = keep }

    /// An idle connection to `endpoint`, or a new one (not yet connected: `SSHConnection.advance`).
    func borrow(_ endpoint: SSHEndpoint) throws(FerryError) -> SSHConnection {
        if let connection = idle.withLock({ $0.connections.popLast() }) { return connection }
        let known = idle.withLock { $0.addresses }
        let addresses: [SocketAddress]
        if let known { addresses = known } else {
            addresses = try SocketAddress.resolve(endpoint)
            idle.withLock { $0.addresses = addresses }
        }
        return SSHConnection(endpoint, addresses: addresses)
    }

    /// Takes a connection back: kept for the next borrower if it is sound, else closed.
    func giveBack(_ connection: SSHConnection) {
        guard connection.isReady else { return connection.close() }
        let kept = idle.withLock { idle -> Bool in
            guard idle.connections.count < keep else { return false }
            idle.connections.append(connection)
            return true
        }
        if !kept { connection.close() }
    }

    /// Runs `body` with a connection, set up on the calling thread; a connection that failed is
    /// not given back.
    func with<T>(_ remote: SFTPRemote, _ body: (SSHConnection) throws(FerryError) -> T) throws(FerryError) -> T {
        let connection = try borrow(remote.endpoint)
        do {
            try connection.establish(within: remote.connectTimeout, clock: remote.clock, stop: remote.stop)
            let result = try body(connection)
            giveBack(connection)
            return result
        } catch {
            connection.close()
            throw error
        }
    }
}

/// Requests made one at a time on a session's thread, each waiting for its reply.
struct SFTPCalls {
    let remote: SFTPRemote
    let connection: SSHConnection
    var endpoint: SSHEndpoint { remote.endpoint }

    func call(_ kind: SFTP.Kind, _ fields: (inout SFTP.Packet) -> Void) throws(FerryError) -> SFTP.Reply {
        try connection.call(kind, within: remote.stallTimeout, clock: remote.clock, stop: remote.stop, fields)
    }

    /// What the server says of the name itself (a symlink is not followed).
    func lstat(_ full: String, for what: String) throws(FerryError) -> SFTP.Attributes {
        let reply = try call(.lstat) { $0.string(full) }
        switch reply {
        case let .attrs(_, attributes): return attributes
        case let .status(_, status, code, message): throw SFTPErrors.status(endpoint, status, code: code, message: message, what, full)
        default: throw unexpected(reply, "LSTAT")
        }
    }

    func requireRegularFile(_ attributes: SFTP.Attributes, _ full: String, _ role: String) throws(FerryError) {
        guard !attributes.isRegularFile else { return }
        throw SFTPErrors.notAFile(endpoint, full, attributes, role)
    }

    /// The whole of a file, at most `limit` bytes (more is refused). A server that answers with
    /// nothing, or with less than asked more than `SFTPFileSource.shortReads` times, is refused:
    /// either would keep the read going for ever.
    func readWhole(_ full: String, limit: Int64, url: String) throws(FerryError) -> [UInt8] {
        let handle = try open(full, .read, for: "read")
        var bytes: [UInt8] = []
        var failure: FerryError?
        var short = 0
        while true {
            let offset = Int64(bytes.count)
            let reply = try call(.read) { $0.read(handle, at: offset, length: SFTP.readSize) }
            if case let .data(_, data) = reply {
                guard data.count <= SFTP.readSize, !data.isEmpty else { failure = SFTPErrors.tooMuch(endpoint, full); break }
                if data.count < SFTP.readSize {
                    short += 1
                    guard short <= SFTPFileSource.shortReads else { failure = SFTPErrors.dribbles(endpoint, full); break }
                }
                bytes += data
                if Int64(bytes.count) > limit {
                    failure = Remotes.tooLarge(url, maximumSize: limit, announced: nil)
                    break
                }
                continue
            }
            if case .status(_, .eof, _, _) = reply { break }
            if case let .status(_, status, code, message) = reply { failure = SFTPErrors.status(endpoint, status, code: code, message: message, "read", full) }
            else { failure = unexpected(reply, "READ") }
            break
        }
        try close(handle, full)
        if let failure { throw failure }
        return bytes
    }

    func open(_ full: String, _ flags: SFTP.OpenFlags, for what: String, mode: UInt32? = nil) throws(FerryError) -> [UInt8] {
        let reply = try call(.open) { $0.open(full, flags, mode: mode) }
        switch reply {
        case let .handle(_, handle): return handle
        case let .status(_, status, code, message): throw SFTPErrors.status(endpoint, status, code: code, message: message, what, full)
        default: throw unexpected(reply, "OPEN")
        }
    }

    func close(_ handle: [UInt8], _ full: String) throws(FerryError) {
        let reply = try call(.close) { $0.string(handle) }
        try requireOK(reply, "close", full)
    }

    func requireOK(_ reply: SFTP.Reply, _ what: String, _ full: String) throws(FerryError) {
        guard case let .status(_, status, code, message) = reply else { throw unexpected(reply, what) }
        if status != .ok { throw SFTPErrors.status(endpoint, status, code: code, message: message, what, full) }
    }

    func unexpected(_ reply: SFTP.Reply, _ what: String) -> FerryError {
        SFTPErrors.malformed(endpoint, SFTP.Malformed(what: "an answer to \(what) of the wrong kind"))
    }
}

extension SFTPRemote: RemoteDirectory {
    func entries(limit: Int) throws(FerryError) -> [DirectoryEntry] {
        try connections.with(self) { connection throws(FerryError) -> [String] in
            try SFTPCalls(remote: self, connection: connection).names(in: directory.isEmpty ? "." : directory, limit: limit).filter { !$0.hasPrefix(".") }
        }.map { DirectoryEntry(name: $0, stamp: nil) }
    }
}

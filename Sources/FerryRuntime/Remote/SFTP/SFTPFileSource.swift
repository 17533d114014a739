import Glibc
import FerryCore

/// A file read over SFTP by a download's steps, on the engine's thread, never blocking: a pooled
/// connection (or a new one, set up a step at a time), LSTAT (a symlink or anything but a regular
/// file is refused), OPEN, FSTAT (the size and mtime of what was opened, the validator a resume
/// must match), then reads from the asked offset with up to `window` requests in flight. A server
/// that answers nothing for `stall-timeout` fails the attempt; what was written stays as resume data.
final class SFTPFileSource: SteppedSource {
    let remote: SFTPRemote
    let path: RelativePath
    private let full: String
    private var connection: SSHConnection?
    private enum Phase { case connecting, lstat(UInt32), open(UInt32), fstat(UInt32), reading }
    private var phase = Phase.connecting
    private var named = SFTP.Attributes()
    private var handle: [UInt8] = []
    private var size: Int64 = 0
    /// Reads in flight, by request id: where they start and how much they ask.
    private var inFlight: [UInt32: (offset: Int64, length: Int)] = [:]
    /// Bytes that came and were not taken yet, by offset.
    private var chunks: [Int64: [UInt8]] = [:]
    /// The offset the next READ asks from, the one the next `read` is expected at, and where the file ended.
    private var nextOffset: Int64 = 0
    /// Where read-ahead stops (`limitReadAhead`): a delta's range; nil: the file's end.
    private var readLimit: Int64?

    func limitReadAhead(to end: Int64) { readLimit = end }
    private var position: Int64 = -1
    private var end: Int64?
    private var lastProgress: Double
    private(set) var waitingOn: (fd: Int32, events: Int16)?
    /// Reads in flight (and answers not taken) at most: 2 MiB, enough to fill a link whose round trip is 50 ms at 40 MB/s.
    static let window = 16
    /// Answers shorter than asked (not at the end) a file may take: OpenSSH answers each read
    /// whole, and a server that dribbles would keep a read going for ever.
    static let shortReads = 64
    private var short = 0
    /// Set once an attempt failed for any reason: its connection is not given back.
    private var failed = false

    init(remote: SFTPRemote, path: RelativePath) {
        self.remote = remote
        self.path = path
        full = remote.serverPath(path)
        lastProgress = remote.clock.monotonic()
    }

    var checksValidator: Bool { true }
    private var endpoint: SSHEndpoint { remote.endpoint }

    func open() -> SteppedOpen {
        do throws(FerryError) {
            if connection == nil {
                connection = try remote.connections.borrow(endpoint)
                lastProgress = remote.clock.monotonic()
            }
            let connection = connection!
            while true {
                if case .connecting = phase {
                    guard try connection.advance() else { return try waiting(connection, "connecting", limit: remote.connectTimeout) }
                    lastProgress = remote.clock.monotonic()
                    phase = .lstat(connection.request(.lstat) { $0.string(full) })
                }
                if case .reading = phase {
                    waitingOn = nil
                    return .ready(validator: named.validator, size: size)
                }
                let replies = try connection.exchange()
                if replies.isEmpty {
                    if connection.waitingOn == nil { continue }
                    return try waiting(connection, "an answer", limit: remote.stallTimeout)
                }
                lastProgress = remote.clock.monotonic()
                for reply in replies { try take(reply, connection) }
            }
        } catch {
            failed = true
            return .failed(TransferFailure(message: error.message, keepPartial: true, cause: error.cause ?? .unusable))
        }
    }

    /// A reply while the file is being opened.
    private func take(_ reply: SFTP.Reply, _ connection: SSHConnection) throws(FerryError) {
        let calls = SFTPCalls(remote: remote, connection: connection)
        switch (phase, reply) {
        case let (.lstat(id), .attrs(replyID, attributes)) where id == replyID:
            try calls.requireRegularFile(attributes, full, "as a download's source")
            named = attributes
            phase = .open(connection.request(.open) { $0.open(full, .read) })
        case let (.open(id), .handle(replyID, handle)) where id == replyID:
            self.handle = handle
            phase = .fstat(connection.request(.fstat) { $0.string(handle) })
        case let (.fstat(id), .attrs(replyID, attributes)) where id == replyID:
            // What was opened must be what was looked at: a swap in between (a symlink put there)
            // is refused, as SFTP has no O_NOFOLLOW.
            guard attributes.isRegularFile, attributes.size == named.size, attributes.mtime == named.mtime, let size = attributes.size else {
                throw FerryError(.remote, "\(Printable.name(full)) on \(endpoint.shown) changed while it was being opened",
                                 hint: "the next try reads it again", cause: .rangeNotHonoured)
            }
            self.size = size
            phase = .reading
        case let (_, .status(_, status, code, message)):
            throw SFTPErrors.status(endpoint, status, code: code, message: message, "read", full)
        default:
            throw calls.unexpected(reply, "opening a file")
        }
    }

    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) -> SteppedRead {
        guard let connection else { return .failed(TransferFailure(message: "not open", keepPartial: true, cause: .unusable)) }
        if offset != position { restart(at: offset, connection) }
        do throws(FerryError) {
            // A bounded piece of work per call: the engine thread serves every other transfer too.
            for _ in 0..<32 {
                if let chunk = chunks.removeValue(forKey: offset) {
                    let n = min(count, chunk.count)
                    chunk.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress!, byteCount: n) }
                    if n < chunk.count { chunks[offset + Int64(n)] = Array(chunk[n...]) }
                    position = offset + Int64(n)
                    waitingOn = nil
                    // Time spent held by a bandwidth limit is not the server's stall.
                    lastProgress = remote.clock.monotonic()
                    return .bytes(n)
                }
                if let end, offset >= end {
                    waitingOn = nil
                    release()
                    return .end
                }
                // Up to the file's end (a read there answers EOF), or short of a delta's range end.
                if let limit = readLimit, limit > offset, limit < size {
                    while inFlight.count + chunks.count < Self.window && nextOffset < limit {
                        let length = Int(min(Int64(SFTP.readSize), limit - nextOffset))
                        ask(connection, at: nextOffset, length: length)
                        nextOffset += Int64(length)
                    }
                } else {
                    while inFlight.count + chunks.count < Self.window && nextOffset <= size {
                        ask(connection, at: nextOffset, length: SFTP.readSize)
                        nextOffset += Int64(SFTP.readSize)
                    }
                }
                let replies = try connection.exchange()
                if replies.isEmpty {
                    if connection.waitingOn == nil { continue }
                    _ = try waiting(connection, "data", limit: remote.stallTimeout)
                    return .wait
                }
                lastProgress = remote.clock.monotonic()
                for reply in replies { try take(reply, reading: connection) }
            }
            // Replies kept coming and none was at this offset yet: the engine steps again at once.
            waitingOn = nil
            return .wait
        } catch {
            failed = true
            return .failed(TransferFailure(message: error.message, keepPartial: true, cause: error.cause ?? .unusable))
        }
    }

    /// A reply to a read.
    private func take(_ reply: SFTP.Reply, reading connection: SSHConnection) throws(FerryError) {
        guard let (offset, length) = inFlight.removeValue(forKey: reply.id) else {
            throw SFTPErrors.malformed(endpoint, SFTP.Malformed(what: "a reply to request \(reply.id), which was not asked"))
        }
        switch reply {
        case let .data(_, bytes):
            guard bytes.count <= length, !bytes.isEmpty else { throw SFTPErrors.tooMuch(endpoint, full) }
            chunks[offset] = bytes
            if bytes.count < length {
                // A short read that is not the end: the rest is asked again.
                short += 1
                guard short <= Self.shortReads else { throw SFTPErrors.dribbles(endpoint, full) }
                ask(connection, at: offset + Int64(bytes.count), length: length - bytes.count)
            }
        case .status(_, .eof, _, _):
            end = min(end ?? offset, offset)
        case let .status(_, status, code, message):
            throw SFTPErrors.status(endpoint, status, code: code, message: message, "read", full)
        default:
            throw SFTPCalls(remote: remote, connection: connection).unexpected(reply, "READ")
        }
    }

    /// Sends a READ of `length` bytes at `offset`, kept in flight until its reply comes.
    private func ask(_ connection: SSHConnection, at offset: Int64, length: Int) {
        inFlight[connection.request(.read) { $0.read(handle, at: offset, length: length) }] = (offset, length)
    }

    /// Reads asked from elsewhere than where the download now reads (it started over): their
    /// answers are dropped as they come.
    private func restart(at offset: Int64, _ connection: SSHConnection) {
        for id in inFlight.keys { connection.ignore(id) }
        inFlight.removeAll()
        chunks.removeAll()
        nextOffset = offset
        position = offset
        end = nil
    }

    /// Waiting on the socket: `.wait`, or a failure once nothing came for `limit` seconds.
    private func waiting(_ connection: SSHConnection, _ what: String, limit: Double) throws(FerryError) -> SteppedOpen {
        waitingOn = connection.waitingOn
        if remote.clock.monotonic() - lastProgress >= limit { throw SFTPErrors.timedOut(endpoint, what) }
        return .wait
    }

    func close() { release() }

    /// Done with the connection: given back for the next file once every request is accounted for
    /// (between reads; replies still to come are dropped by id) and nothing failed, else closed.
    /// At the file's end it goes back at once, not when the download is committed.
    private func release() {
        guard let connection else { return }
        self.connection = nil
        guard case .reading = phase, connection.isReady, !failed else { return connection.close() }
        for id in inFlight.keys { connection.ignore(id) }
        inFlight.removeAll()
        connection.ignore(connection.request(.close) { $0.string(handle) })
        remote.connections.giveBack(connection)
    }
}

import CCurl
import CSSH2
import Glibc
import FerryCore

/// Where and as whom an `sftp://` remote logs in.
struct SSHEndpoint: Hashable, Sendable {
    /// As the URL names it (an IPv6 address without its brackets).
    let host: String
    let port: Int
    let user: String
    /// The private key (`sftp-key`) and the known hosts it is checked against (`sftp-known-hosts`).
    let key: String
    let knownHosts: String

    /// `user@host:port`, as messages name it.
    var shown: String { "\(user)@\(host.contains(":") ? "[\(host)]" : host):\(port)" }
}

/// One SSH connection carrying one SFTP channel, never blocking: TCP, libssh2's handshake, the
/// host key against `sftp-known-hosts`, the key's login, the `sftp` subsystem and SFTP's
/// INIT/VERSION, then packets both ways. Each call does what it can without waiting and says
/// what it waits for (`waitingOn`): the engine polls that in its loop (a download's steps), a
/// session's thread polls it itself (`wait`), under a deadline and the run's stop.
///
/// libssh2 does SSH only (transport, keys, channel); the SFTP packets are `SFTP`'s. A connection
/// is used by one thread at a time (`SSHConnections` hands it out).
final class SSHConnection {
    let endpoint: SSHEndpoint
    private let addresses: [SocketAddress]
    private var addressIndex = 0
    private enum Phase { case connect, connecting, handshake, authenticate, channel, quietStderr, subsystem, version, ready }
    private var phase = Phase.connect
    private(set) var fd: Int32 = -1
    private var session: OpaquePointer?
    private var channel: OpaquePointer?
    private var outbound: [UInt8] = []
    private var sent = 0
    private var inbound: [UInt8] = []
    private var parsed = 0
    /// What one channel read takes in.
    private static let scratchSize = 256 << 10
    private let scratch = UnsafeMutablePointer<CChar>.allocate(capacity: scratchSize)
    private var nextID: UInt32 = 1
    /// The SFTP extensions the server names in its VERSION (`posix-rename@openssh.com`...).
    private(set) var extensions: Set<String> = []
    /// What the last call waits for before anything more can happen; nil: call again at once.
    private(set) var waitingOn: (fd: Int32, events: Int16)?
    /// Set once the connection failed: every later call throws it.
    private(set) var broken: FerryError?
    var isReady: Bool { phase == .ready && broken == nil }

    init(_ endpoint: SSHEndpoint, addresses: [SocketAddress]) {
        _ = SSHConnection.library
        self.endpoint = endpoint
        self.addresses = addresses
    }

    /// libssh2's global set-up, done once before the first session (its own lazy one is not
    /// thread-safe, and two sessions may connect at once).
    private static let library: Void = { _ = libssh2_init(0) }()

    /// Channel writes in a row that took nothing: a server that confirmed a channel with no room
    /// (a maximum packet of 0) would have them go on for ever.
    private var emptyWrites = 0

    deinit {
        close()
        scratch.deallocate()
    }

    /// Ends the connection (the socket first, so nothing libssh2 still sends reaches a reused descriptor).
    func close() {
        if broken == nil { broken = SFTPErrors.lost(endpoint, "the connection was closed") }
        if fd >= 0 { shutdown(fd, Int32(SHUT_RDWR)) }
        if let channel { libssh2_channel_free(channel) }
        if let session { libssh2_session_free(session) }
        channel = nil
        session = nil
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    // MARK: Setting up

    /// Goes as far as it can towards a connection ready for SFTP; true once it is.
    func advance() throws(FerryError) -> Bool {
        if let broken { throw broken }
        do throws(FerryError) {
            while phase != .ready {
                guard try advancePhase() else { return false }
            }
            return true
        } catch {
            broken = error
            close()
            throw error
        }
    }

    /// Advances one phase; false when it must wait.
    private func advancePhase() throws(FerryError) -> Bool {
        waitingOn = nil
        switch phase {
        case .connect:
            try startConnect()
            return true
        case .connecting:
            // A connect that fails wakes the poll with an error, which reads as readable too.
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            guard poll(&pfd, 1, 0) > 0 else { waitingOn = (fd, Int16(POLLOUT | POLLIN)); return false }
            var code: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length)
            if code != 0 {
                Glibc.close(fd)
                fd = -1
                addressIndex += 1
                guard addressIndex < addresses.count else { throw SFTPErrors.connect(endpoint, errno: code) }
                phase = .connect
                return true
            }
            guard let session = ferry_ssh_session_init() else { throw SFTPErrors.connect(endpoint, errno: ENOMEM) }
            self.session = session
            libssh2_session_set_blocking(session, 0)
            HostKeys.prefer(session, endpoint)
            phase = .handshake
            return true
        case .handshake:
            let rc = libssh2_session_handshake(session, fd)
            guard try done(rc, "the SSH handshake") else { return false }
            try HostKeys.check(session!, endpoint)
            phase = .authenticate
            return true
        case .authenticate:
            let rc = ferry_ssh_userauth_publickey_fromfile(session, endpoint.user, endpoint.key)
            if rc == LIBSSH2_ERROR_EAGAIN { return wait() }
            // A connection that broke while logging in is not a refused key (which is never retried).
            if [LIBSSH2_ERROR_SOCKET_SEND, LIBSSH2_ERROR_SOCKET_RECV, LIBSSH2_ERROR_SOCKET_DISCONNECT, LIBSSH2_ERROR_TIMEOUT].contains(rc) {
                throw SFTPErrors.lost(endpoint, "logging in: " + lastError)
            }
            if rc != 0 { throw SFTPErrors.login(endpoint, libssh2: lastError) }
            phase = .channel
            return true
        case .channel:
            guard let opened = ferry_ssh_channel_open_session(session) else {
                guard libssh2_session_last_errno(session) == LIBSSH2_ERROR_EAGAIN else { throw SFTPErrors.lost(endpoint, "opening a channel: " + lastError) }
                return wait()
            }
            channel = opened
            phase = .quietStderr
            return true
        case .quietStderr:
            // What the server writes on the channel's stderr is dropped as it comes, and its room in
            // the channel's window given back: kept, it would fill the window and stall the replies.
            let rc = libssh2_channel_handle_extended_data2(channel, LIBSSH2_CHANNEL_EXTENDED_DATA_IGNORE)
            guard try done(rc, "setting up the channel") else { return false }
            phase = .subsystem
            return true
        case .subsystem:
            let rc = ferry_ssh_channel_subsystem(channel, "sftp")
            guard try done(rc, "starting SFTP (the server's sftp subsystem)") else { return false }
            var hello = SFTP.Packet(.initialize, id: nil)
            hello.u32(3)
            send(hello)
            phase = .version
            return true
        case .version:
            try flush()
            guard let body = try receivePacket() else { return false }
            do throws(SFTP.Malformed) {
                let (version, extensions) = try SFTP.parseVersion(body)
                guard version == 3 else { throw SFTP.Malformed(what: "SFTP version \(version), where 3 was asked") }
                self.extensions = extensions
            } catch { throw SFTPErrors.malformed(endpoint, error) }
            phase = .ready
            return true
        case .ready:
            return true
        }
    }

    private func startConnect() throws(FerryError) {
        guard addressIndex < addresses.count else { throw SFTPErrors.connect(endpoint, errno: EHOSTUNREACH) }
        let address = addresses[addressIndex]
        fd = socket(Int32(address.family), Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SFTPErrors.connect(endpoint, errno: errno) }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let rc = address.withSockaddr { connect(fd, $0, $1) }
        if rc != 0 && errno != EINPROGRESS {
            let code = errno
            Glibc.close(fd)
            fd = -1
            addressIndex += 1
            guard addressIndex < addresses.count else { throw SFTPErrors.connect(endpoint, errno: code) }
            return
        }
        phase = .connecting
    }

    /// libssh2's answer to a call that may have to wait: true when done, false when it waits.
    private func done(_ rc: Int32, _ what: String) throws(FerryError) -> Bool {
        if rc == LIBSSH2_ERROR_EAGAIN { return wait() }
        if rc != 0 { throw SFTPErrors.lost(endpoint, what + ": " + lastError) }
        return true
    }

    /// Records what to wait for (libssh2 read or wrote as far as the socket let it): whatever the
    /// server sends next, and room to send when libssh2 holds bytes it could not write.
    private func wait() -> Bool {
        let directions = session.map { libssh2_session_block_directions($0) } ?? 0
        var events = Int16(POLLIN)
        if directions & LIBSSH2_SESSION_BLOCK_OUTBOUND != 0 { events |= Int16(POLLOUT) }
        waitingOn = (fd, events)
        return false
    }

    var lastError: String {
        guard let session else { return "no session" }
        var message: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        libssh2_session_last_error(session, &message, &length, 0)
        return message.map { Printable.text(String(cString: $0)) } ?? "unknown error"
    }

    // MARK: Packets

    /// Requests whose replies are dropped when they come (a transfer that ended with reads in
    /// flight, a CLOSE sent on its way out).
    private var ignored = Set<UInt32>()

    /// Drops the reply to `id` when it comes.
    func ignore(_ id: UInt32) { ignored.insert(id) }

    /// Queues a request; returns its id.
    @discardableResult
    func request(_ kind: SFTP.Kind, _ fields: (inout SFTP.Packet) -> Void) -> UInt32 {
        let id = nextID
        nextID &+= 1
        var packet = SFTP.Packet(kind, id: id)
        fields(&packet)
        send(packet)
        return id
    }

    private func send(_ packet: SFTP.Packet) {
        if sent == outbound.count {
            outbound.removeAll(keepingCapacity: true)
            sent = 0
        }
        outbound += packet.finished
    }

    /// Bytes queued and not yet taken by the channel.
    var unsent: Int { outbound.count - sent }

    /// Sends what is queued and reads what has come, at most about `budget` bytes; returns the
    /// replies complete now. `waitingOn` is set when the socket has nothing more for now: always
    /// readable (an answer, or the window the server opens for what is still queued), writable
    /// too when libssh2 waits to send.
    func exchange(budget: Int = 4 << 20) throws(FerryError) -> [SFTP.Reply] {
        if let broken { throw broken }
        do throws(FerryError) {
            var replies: [SFTP.Reply] = []
            var taken = 0
            /// Reads whole packets until the socket has nothing more or the budget is spent; how
            /// many came, and whether the socket was read to its end.
            func receive() throws(FerryError) -> (count: Int, drained: Bool) {
                var count = 0
                while taken < budget {
                    guard let body = try receivePacket() else { return (count, true) }
                    taken += body.count
                    count += 1
                    let reply: SFTP.Reply
                    do { reply = try SFTP.parse(body) } catch { throw SFTPErrors.malformed(endpoint, error) }
                    if ignored.remove(reply.id) == nil { replies.append(reply) }
                }
                return (count, false)
            }
            waitingOn = nil
            try flush()
            while true {
                guard try receive().drained else { waitingOn = nil; return replies }
                // What came in may have opened the channel's window for what is still queued.
                guard unsent > 0 else { break }
                let before = sent
                try flush()
                if sent == before {
                    // The channel took nothing. Trying to write, libssh2 may have read replies off
                    // the socket into its own queue, where a wait on the socket would not see them:
                    // read once more, and wait only once a read found nothing.
                    let (count, drained) = try receive()
                    guard drained else { waitingOn = nil; return replies }
                    if count == 0 { break }
                }
            }
            // The last call was a read that found the socket empty: waiting on it is sound.
            _ = wait()
            return replies
        } catch {
            broken = error
            close()
            throw error
        }
    }

    private func flush() throws(FerryError) {
        while sent < outbound.count {
            let n = outbound.withUnsafeBufferPointer { buffer in
                buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                    ferry_ssh_channel_write(channel, $0 + sent, outbound.count - sent)
                }
            }
            if n == Int(LIBSSH2_ERROR_EAGAIN) { return }
            if n < 0 { throw SFTPErrors.lost(endpoint, "sending: " + lastError) }
            if n == 0 {
                emptyWrites += 1
                guard emptyWrites < 64 else { throw SFTPErrors.malformed(endpoint, SFTP.Malformed(what: "a channel that takes no bytes")) }
                return
            }
            emptyWrites = 0
            sent += n
        }
    }

    /// The body of the next whole packet, or nil (with `waitingOn` set) when none has come yet.
    private func receivePacket() throws(FerryError) -> ArraySlice<UInt8>? {
        while true {
            let available = inbound.count - parsed
            if available >= 4 {
                let length = Int(inbound[parsed]) << 24 | Int(inbound[parsed + 1]) << 16 | Int(inbound[parsed + 2]) << 8 | Int(inbound[parsed + 3])
                guard length > 0, length <= SFTP.maximumPacket + 1024 else {
                    throw SFTPErrors.malformed(endpoint, SFTP.Malformed(what: "a packet of \(length) bytes"))
                }
                if available >= 4 + length {
                    let body = inbound[(parsed + 4)..<(parsed + 4 + length)]
                    parsed += 4 + length
                    return body
                }
            }
            if parsed > 0 && parsed * 2 >= inbound.count {
                inbound.removeFirst(parsed)
                parsed = 0
            }
            let n = ferry_ssh_channel_read(channel, scratch, SSHConnection.scratchSize)
            if n > 0 { inbound.append(contentsOf: UnsafeRawBufferPointer(start: scratch, count: n)) }
            if n == Int(LIBSSH2_ERROR_EAGAIN) { _ = wait(); return nil }
            if n < 0 { throw SFTPErrors.lost(endpoint, "receiving: " + lastError) }
            if n == 0 { throw SFTPErrors.lost(endpoint, "the server closed the connection") }
        }
    }

    // MARK: Waiting on a thread of its own

    /// Waits (on the calling thread) for what `waitingOn` names, until `deadline` (monotonic
    /// seconds) or the run's stop.
    func wait(until deadline: Double, clock: any Clock, stop: StopCondition?, doing what: String) throws(FerryError) {
        guard let (fd, events) = waitingOn else { return }
        while true {
            if let reason = stop?.reason {
                throw FerryError(.stopped, "\(reason) while waiting for \(endpoint.shown) (\(what))", hint: "the next run starts again from there")
            }
            let left = deadline - clock.monotonic()
            guard left > 0 else { throw SFTPErrors.timedOut(endpoint, what) }
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            if poll(&pfd, 1, Int32(min(left, 0.1) * 1000) + 1) != 0 { return }
        }
    }

    /// Sets the connection up on the calling thread, within `seconds`.
    func establish(within seconds: Double, clock: any Clock, stop: StopCondition?) throws(FerryError) {
        let deadline = clock.monotonic() + seconds
        while try !advance() { try wait(until: deadline, clock: clock, stop: stop, doing: "connecting") }
    }

    /// Sends one request and waits for its reply on the calling thread; no answer for `seconds` fails.
    func call(_ kind: SFTP.Kind, within seconds: Double, clock: any Clock, stop: StopCondition?,
              _ fields: (inout SFTP.Packet) -> Void) throws(FerryError) -> SFTP.Reply {
        let id = request(kind, fields)
        var deadline = clock.monotonic() + seconds
        while true {
            let replies = try exchange()
            for reply in replies {
                guard reply.id == id else {
                    broken = SFTPErrors.malformed(endpoint, SFTP.Malformed(what: "a reply to request \(reply.id), which was not asked"))
                    close()
                    throw broken!
                }
                return reply
            }
            if waitingOn == nil { deadline = clock.monotonic() + seconds; continue }
            try wait(until: deadline, clock: clock, stop: stop, doing: "an answer")
        }
    }
}

/// A resolved address to connect to.
struct SocketAddress: Sendable {
    let family: Int32
    let storage: sockaddr_storage
    let length: socklen_t

    func withSockaddr<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        withUnsafePointer(to: storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) } }
    }

    /// The TCP addresses of `host` (getaddrinfo: a name blocks the calling thread while it resolves).
    static func resolve(_ endpoint: SSHEndpoint) throws(FerryError) -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(endpoint.host, String(endpoint.port), &hints, &list)
        guard rc == 0, let list else {
            throw FerryError(.remote, "cannot resolve \(Printable.name(endpoint.host)): \(String(cString: gai_strerror(rc)))",
                             hint: "check the host in 'remote =' and this machine's DNS", cause: .network(curlCode: Int32(CURLE_COULDNT_RESOLVE_HOST.rawValue)))
        }
        defer { freeaddrinfo(list) }
        var out: [SocketAddress] = []
        var at: UnsafeMutablePointer<addrinfo>? = list
        while let entry = at {
            if let address = entry.pointee.ai_addr, Int(entry.pointee.ai_addrlen) <= MemoryLayout<sockaddr_storage>.size {
                var storage = sockaddr_storage()
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: address, count: Int(entry.pointee.ai_addrlen))) }
                out.append(SocketAddress(family: entry.pointee.ai_family, storage: storage, length: entry.pointee.ai_addrlen))
            }
            at = entry.pointee.ai_next
        }
        return out
    }
}

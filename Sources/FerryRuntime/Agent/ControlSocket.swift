import Dispatch
import Glibc
import Synchronization
import FerryCore

/// The agent's control socket, `<state>/agent.sock`: a Unix stream socket of mode 0600 through
/// which `ferry sync now` (and `ferry resume`) hand their work to a running agent instead of
/// transferring beside it. A client's peer credentials are checked: only the agent's own user
/// and root are served.
///
/// The protocol is JSON lines. The client sends one request,
///     {"command":"sync","sessions":"a,b","not_before":"30m","bwlimit":"512K","transfers":2,"progress":true}
/// (no sessions: all of the agent's; every member but `command` may be left out). `bwlimit` and
/// `transfers` are `sync now --bwlimit --transfers`: the cycles started for this client go at
/// them instead of `[agent]`'s (`RunLimits`), and the sessions' next cycles at the config's again.
/// `progress` asks for the cycles' progress too (a client that draws progress bars). The agent
/// answers
///     {"event":"handover","pid":N,"accepted":"a,b","unknown":"c","bwlimit":"512K","transfers":2}
/// (`bwlimit` and `transfers` echo the limits it took; an agent older than them leaves them out),
/// then the events of the one cycle it starts for each accepted session (as soon as the session
/// is free), in their `--json` form, with `progress` lines among them when asked
/// (`SyncProgress.controlLine`; dropped while the client is behind), and last
///     {"event":"handover-done","exit_code":N}
/// with the worst exit code of those cycles. `{"command":"reload"}` asks it to re-read its config
/// (`ControlRequest.reload` says the answer). Events reach a connection through a queue of its
/// own, so a slow client never holds up a transfer.
///
/// Each connection is served by one thread, and at most `maxConnections` at once: the next
/// clients wait in the listen queue until one ends (a flood of connections cannot use up the
/// machine's threads), and a thread that cannot be had refuses that client, never the agent.
public final class ControlServer: @unchecked Sendable {
    public static let maxConnections = 32
    public let path: String
    private let fd: Int32
    private let handler: @Sendable (ControlRequest, ControlConnection) -> Void
    /// One permit per connection that may be served at once.
    private let permits = DispatchSemaphore(value: ControlServer.maxConnections)

    /// Starts listening; `handler` gets each valid request on the connection's own thread.
    public init(state: String, handler: @escaping @Sendable (ControlRequest, ControlConnection) -> Void) throws(FerryError) {
        path = ControlServer.socketPath(state: state)
        self.handler = handler
        var address = sockaddr_un()
        guard ControlServer.fill(&address, path: path) else {
            throw .localIO("the control socket path \(path) is longer than a Unix socket allows (107 bytes)",
                           hint: "use a shorter [agent] state path")
        }
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .localIO("cannot create the control socket: \(FileSystem.errorText())") }
        // The agent holds the state directory's agent lock: a socket file left here is stale.
        unlink(path)
        let old = umask(0o177)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(old)
        guard rc == 0, chmod(path, 0o600) == 0, listen(fd, 16) == 0 else {
            let text = FileSystem.errorText()
            close(fd)
            throw .localIO("cannot listen on the control socket \(path): \(text)")
        }
        do throws(FerryError) { try Threads.start(name: "ferry-control") { [self] in acceptLoop() } } catch {
            close(fd)
            unlink(path)
            throw error
        }
    }

    /// Removes the socket file and stops accepting (the agent is stopping): a client still in
    /// the listen queue sees the link close instead of waiting for an answer that never comes;
    /// connections already open finish.
    public func remove() {
        unlink(path)
        // Wakes the thread blocked in accept (close alone would not), which then ends.
        shutdown(fd, Int32(SHUT_RDWR))
    }

    public static func socketPath(state: String) -> String { state + "/agent.sock" }

    static func fill(_ address: inout sockaddr_un, path: String) -> Bool {
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
            raw[bytes.count] = 0
        }
        return true
    }

    private func acceptLoop() {
        while true {
            permits.wait()
            let client = accept(fd, nil, nil)
            if client < 0 {
                permits.signal()
                if errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS {
                    usleep(10_000)
                    continue
                }
                return
            }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            do throws(FerryError) {
                try Threads.start(name: "ferry-control-client") { [self] in
                    serve(client)
                    permits.signal()
                }
            } catch {
                // No thread for this client: it is refused (it sees the connection close, and its
                // `sync now` says the agent did not answer); the agent goes on. Its request is
                // read first, or the close would reset the connection before it was sent.
                var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
                setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                _ = ControlConnection.readLine(client, limit: 64 << 10)
                close(client)
                permits.signal()
                usleep(10_000)
            }
        }
    }

    /// Reads the client's request and hands it on, then sends the client what is queued for it
    /// until the exchange ends; all on the connection's one thread.
    private func serve(_ client: Int32) {
        let connection = ControlConnection(fd: client)
        defer { connection.writeUntilFinished() }
        // The request is read first, even from a client about to be refused: closing a socket
        // with unread data resets it, and the client would lose the refusal.
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let line = ControlConnection.readLine(client, limit: 64 << 10)
        // Only the agent's own user, and root.
        var credentials = PeerCredentials()
        var length = socklen_t(MemoryLayout<PeerCredentials>.size)
        guard getsockopt(client, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0,
              credentials.uid == geteuid() || credentials.uid == 0 else {
            connection.send("{\"event\":\"handover-refused\",\"message\":\"the agent serves only its own user and root\"}")
            connection.finish()
            return
        }
        guard let line,
              let request = (try? JSONReader.flatFields(line)).flatMap(ControlRequest.init(fields:)) else {
            connection.send("{\"event\":\"handover-refused\",\"message\":\"not a request ferry understands\"}")
            connection.finish()
            return
        }
        handler(request, connection)
    }

    /// `struct ucred` of <sys/socket.h>.
    private struct PeerCredentials {
        var pid: pid_t = 0
        var uid: uid_t = 0
        var gid: gid_t = 0
    }
}

/// What a client asks of the agent.
public struct ControlRequest: Sendable {
    public let command: String
    /// Empty: every session of the agent.
    public let sessions: [String]
    /// `--not-before` for the cycles it starts.
    public let notBefore: EarliestBegin?
    /// `--bwlimit` and `--transfers` for the cycles it starts; nil: the agent's own.
    public let limits: RunLimits?
    /// The client draws progress bars: it is sent the cycles' progress.
    public let progress: Bool

    public init(command: String, sessions: [String], notBefore: String?, limits: RunLimits? = nil, progress: Bool = false) {
        self.command = command
        self.sessions = sessions
        self.notBefore = notBefore.flatMap(EarliestBegin.init(parsing:))
        notBeforeText = notBefore
        self.limits = limits?.isEmpty == true ? nil : limits
        self.progress = progress
    }

    private let notBeforeText: String?

    /// `ferry reload`: re-read the config. The agent answers `{"event":"reloaded","sessions":"a,b"}`
    /// once the new config applies, or `{"event":"reload-refused","message":…,"hint":…}` and goes
    /// on with the config it has.
    public static let reload = "reload"

    init?(fields f: [String: String]) {
        if f["command"] == ControlRequest.reload {
            self.init(command: ControlRequest.reload, sessions: [], notBefore: nil)
            return
        }
        guard f["command"] == "sync" else { return nil }
        let sessions = (f["sessions"] ?? "").split(separator: ",").map(String.init)
        if let nb = f["not_before"], EarliestBegin(parsing: nb) == nil { return nil }
        var limits = RunLimits()
        if let text = f["bwlimit"] {
            guard let schedule = try? BandwidthSchedule(parsing: text) else { return nil }
            limits.bandwidth = schedule
        }
        if let text = f["transfers"] {
            guard let n = try? RunLimits.transfers(parsing: text) else { return nil }
            limits.transfers = n
        }
        self.init(command: "sync", sessions: sessions, notBefore: f["not_before"], limits: limits, progress: f["progress"] == "true")
    }

    var json: String {
        var out = "{\"command\":\(JSONText.quote(command)),\"sessions\":\(JSONText.quote(sessions.joined(separator: ",")))"
        if let notBeforeText { out += ",\"not_before\":\(JSONText.quote(notBeforeText))" }
        if let limits { out += limits.controlFields }
        if progress { out += ",\"progress\":true" }
        return out + "}"
    }
}

extension RunLimits {
    /// The members that carry the limits in a request and in the agent's `handover` answer:
    /// `,"bwlimit":"512K","transfers":2`, each only when given.
    public var controlFields: String {
        var out = ""
        if let bandwidth { out += ",\"bwlimit\":\(JSONText.quote(bandwidth.description))" }
        if let transfers { out += ",\"transfers\":\(transfers)" }
        return out
    }
}

/// One client of the control socket, seen from the agent: lines go out through a queue that the
/// connection's thread empties (`writeUntilFinished`), so whoever sends never waits for the
/// client. A client that stops reading is cut off once `maxQueued` lines wait.
public final class ControlConnection: @unchecked Sendable {
    static let maxQueued = 100_000
    private let fd: Int32
    private struct Outbox {
        var lines: [String] = []
        var finished = false
        var broken = false
    }
    private let outbox = Mutex(Outbox())
    private let ready = DispatchSemaphore(value: 0)

    init(fd: Int32) { self.fd = fd }

    /// Lines waiting to be sent: a client that is behind is sent no progress until it catches up.
    public var queued: Int { outbox.withLock { $0.lines.count } }

    public func send(_ line: String) {
        let accepted = outbox.withLock { o -> Bool in
            guard !o.finished, !o.broken else { return false }
            if o.lines.count >= ControlConnection.maxQueued { o.broken = true; return true }
            o.lines.append(line)
            return true
        }
        if accepted { ready.signal() }
    }

    /// Sends what is queued, then closes.
    public func finish() {
        outbox.withLock { $0.finished = true }
        ready.signal()
    }

    /// Sends queued lines as they come, until `finish` and all is sent (or the client is gone);
    /// then closes the connection.
    func writeUntilFinished() {
        while true {
            ready.wait()
            let (lines, finished, broken) = outbox.withLock { o in
                defer { o.lines.removeAll() }
                return (o.lines, o.finished, o.broken)
            }
            if broken { break }
            var text = lines.map { $0 + "\n" }.joined()
            let ok = text.withUTF8 { buffer -> Bool in
                var offset = 0
                while offset < buffer.count {
                    let n = Glibc.send(fd, buffer.baseAddress! + offset, buffer.count - offset, Int32(MSG_NOSIGNAL))
                    if n < 0 {
                        if errno == EINTR { continue }
                        return false
                    }
                    offset += n
                }
                return true
            }
            if !ok {
                outbox.withLock { $0.broken = true }
                break
            }
            if finished && outbox.withLock({ $0.lines.isEmpty }) { break }
        }
        close(fd)
    }

    /// Reads up to a newline (not included); nil at end of stream, an error, a timeout or `limit`.
    static func readLine(_ fd: Int32, limit: Int) -> [UInt8]? {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while line.count < limit {
            let n = read(fd, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            guard n == 1 else { return nil }
            if byte == UInt8(ascii: "\n") { return line }
            line.append(byte)
        }
        return nil
    }
}

/// A client's link to a running agent: `ferry sync now` and `ferry resume` hand their work over
/// through it.
public final class AgentLink {
    private let fd: Int32
    private var buffer: [UInt8] = []

    /// Connects to the agent of `state`; nil when none listens (no socket, or a stale one left by
    /// an agent that died).
    public init?(state: String) {
        var address = sockaddr_un()
        guard ControlServer.fill(&address, path: ControlServer.socketPath(state: state)) else { return nil }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else {
            close(fd)
            return nil
        }
        self.fd = fd
    }

    deinit { close(fd) }

    public func send(_ request: ControlRequest) -> Bool {
        var text = request.json + "\n"
        return text.withUTF8 { buffer in
            Glibc.send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL)) == buffer.count
        }
    }

    /// The next line from the agent; nil when the agent closed the link. Waits at most `timeout`
    /// seconds for it (`.timedOut`), so the caller can look at its stop condition.
    public enum Received {
        case line([UInt8])
        case timedOut
        case closed
    }

    public func receive(timeout: Double) -> Received {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return .line(line)
            }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(timeout * 1000))
            if ready < 0 && errno == EINTR { continue }
            if ready == 0 { return .timedOut }
            var chunk = [UInt8](repeating: 0, count: 64 << 10)
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return .closed }
            buffer += chunk[0..<n]
        }
    }
}

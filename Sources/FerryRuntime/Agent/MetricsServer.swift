import Dispatch
import Glibc
import Synchronization
import FerryCore

/// `[agent] metrics-listen = ADDRESS:PORT`: the agent's metrics over HTTP, for Prometheus to
/// scrape. Two endpoints and nothing else:
/// - `GET /metrics`: the series of the textfile (`Metrics.render`), in Prometheus' text format;
/// - `GET /healthz`: 200 while the agent's scheduler ticks, 503 once it has not ticked for as long
///   as systemd's watchdog allows (`WatchdogSec`, else 60 s): when the watchdog would fire.
///
/// Hostile clients are expected (the address may be reachable from elsewhere): each is served on
/// its own thread with a 5-second deadline for the whole request. At most `maxConnections` wait
/// for their request at once: a new client pushes out the one that has waited longest, so
/// clients that connect and send nothing (or trickle) cannot keep a scrape or a health check
/// from being answered; at most `maxThreads` connections are open at once. A request is at most
/// 8 KiB; anything else is answered 400, 404 or 405 and closed. Nothing a client sends reaches
/// the agent.
public final class MetricsServer: @unchecked Sendable {
    public static let maxConnections = 8
    /// Connections open at once, reading or answering (an answer is small and quick).
    static let maxThreads = 32
    /// The name of the threads that serve a client (what /proc/PID/task/TID/comm shows).
    public static let clientThreadName = "ferry-scrape"
    public let address: ListenAddress
    private let fd: Int32
    private let permits = DispatchSemaphore(value: MetricsServer.maxThreads)
    /// The clients still sending their request, and when each came. A client's descriptor is
    /// taken out (by its thread, or by `admit` pushing it out) before it is closed, under the
    /// lock, so a descriptor shut down here is never one reused by a later client.
    private let reading = Mutex<[Int32: Double]>([:])
    private let metrics: @Sendable () -> String
    private let healthy: @Sendable () -> (ok: Bool, detail: String)
    /// The clients' deadlines and waits go by it.
    private let clock: any Clock

    /// Binds and listens; `metrics` renders the page, `healthy` says whether the scheduler ticks.
    public init(address: ListenAddress, clock: any Clock, metrics: @escaping @Sendable () -> String,
                healthy: @escaping @Sendable () -> (ok: Bool, detail: String)) throws(FerryError) {
        self.address = address
        self.clock = clock
        self.metrics = metrics
        self.healthy = healthy
        let family = address.isIPv6 ? AF_INET6 : AF_INET
        fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .localIO("metrics-listen = \(address): cannot create a socket: \(FileSystem.errorText())") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var rc: Int32 = -1
        if address.isIPv6 {
            var sa = sockaddr_in6()
            sa.sin6_family = sa_family_t(AF_INET6)
            sa.sin6_port = address.port.bigEndian
            guard inet_pton(AF_INET6, address.host, &sa.sin6_addr) == 1 else {
                close(fd)
                throw .usage("metrics-listen = \(address): '\(address.host)' is not an IPv6 address")
            }
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
            rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        } else {
            var sa = sockaddr_in()
            sa.sin_family = sa_family_t(AF_INET)
            sa.sin_port = address.port.bigEndian
            guard inet_pton(AF_INET, address.host, &sa.sin_addr) == 1 else {
                close(fd)
                throw .usage("metrics-listen = \(address): '\(address.host)' is not an IPv4 address")
            }
            rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        guard rc == 0, listen(fd, 16) == 0 else {
            let code = errno, text = FileSystem.errorText()
            close(fd)
            throw .localIO("metrics-listen = \(address): cannot listen there: \(text)",
                           hint: code == EADDRINUSE ? "another program (or another ferry agent) uses that port: choose another in [agent] metrics-listen"
                                                    : "check that the address is one of this machine's (127.0.0.1 for loopback)")
        }
        do throws(FerryError) { try Threads.start(name: "ferry-metrics") { [self] in acceptLoop() } } catch {
            close(fd)
            throw error
        }
    }

    private func acceptLoop() {
        while true {
            permits.wait()
            let client = accept(fd, nil, nil)
            if client < 0 {
                permits.signal()
                if errno == EBADF || errno == EINVAL {
                    close(fd)  // stopped (`stop` shut it down): closed here, where no accept can race it
                    return
                }
                usleep(10_000)  // EMFILE and the like: let the moment pass
                continue
            }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            admit(client)
            do throws(FerryError) {
                try Threads.start(name: MetricsServer.clientThreadName) { [self] in
                    serve(client)
                    doneReading(client)
                    close(client)
                    permits.signal()
                }
            } catch {
                doneReading(client)
                close(client)
                permits.signal()
                usleep(10_000)
            }
        }
    }

    /// Counts `client` among those sending their request; with `maxConnections` of them already,
    /// the one that has waited longest is shut down (its thread's read ends) to make room.
    private func admit(_ client: Int32) {
        reading.withLock { waiting in
            if waiting.count >= MetricsServer.maxConnections, let oldest = waiting.min(by: { $0.value < $1.value })?.key {
                waiting[oldest] = nil
                shutdown(oldest, Int32(SHUT_RDWR))
            }
            waiting[client] = clock.monotonic()
        }
    }

    /// `client`'s request is read (or given up): it no longer counts, and can no longer be shut down here.
    private func doneReading(_ client: Int32) {
        _ = reading.withLock { $0.removeValue(forKey: client) }
    }

    /// One request, one answer, closed.
    private func serve(_ client: Int32) {
        let deadline = clock.monotonic() + 5
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 2048)
        while !MetricsServer.headersEnd(request) {
            let left = deadline - clock.monotonic()
            guard left > 0, request.count < 8192 else { return respond(client, 400, "request too large or too slow\n") }
            var timeout = timeval(tv_sec: Int(left), tv_usec: Int((left - left.rounded(.down)) * 1e6))
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let n = read(client, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            request += buffer[0..<n]
        }
        doneReading(client)
        let (status, type, body, head) = MetricsServer.answer(request, metrics: metrics, healthy: healthy)
        respond(client, status, body, type: type, headOnly: head)
    }

    static func headersEnd(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 4 else { return false }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 { return true }
        for i in 0...(bytes.count - 2) where bytes[i] == 10 && bytes[i + 1] == 10 { return true }
        return false
    }

    /// The answer to a request's bytes: status, content type, body, and whether only the head goes.
    static func answer(_ request: [UInt8], metrics: () -> String, healthy: () -> (ok: Bool, detail: String))
        -> (Int, String, String, Bool) {
        let firstLine = request.prefix { $0 != 13 && $0 != 10 }
        let parts = firstLine.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else { return (400, "text/plain", "not an HTTP/1 request\n", false) }
        let head = parts[0] == "HEAD"
        guard parts[0] == "GET" || head else { return (405, "text/plain", "only GET and HEAD\n", false) }
        let path = parts[1].prefix { $0 != "?" }
        switch path {
        case "/metrics":
            return (200, "text/plain; version=0.0.4; charset=utf-8", metrics(), head)
        case "/healthz":
            let (ok, detail) = healthy()
            return (ok ? 200 : 503, "text/plain; charset=utf-8", detail + "\n", head)
        default:
            return (404, "text/plain", "ferry serves /metrics and /healthz only\n", head)
        }
    }

    private func respond(_ client: Int32, _ status: Int, _ body: String, type: String = "text/plain", headOnly: Bool = false) {
        let reason = [200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"][status] ?? "Error"
        var text = "HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(type)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n"
        if status == 405 { text += "Allow: GET, HEAD\r\n" }
        text += "\r\n"
        if !headOnly { text += body }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            bytes = bytes.dropFirst(n)
        }
        shutdown(client, Int32(SHUT_WR))
    }

    /// Stops accepting (the agent is stopping); the accept thread closes the socket.
    public func stop() { shutdown(fd, Int32(SHUT_RDWR)) }
}

/// When the agent's scheduler last went round its loop (monotonic seconds), read by `/healthz`.
final class Heartbeat: Sendable {
    let last: Atomic<Double>
    init(_ now: Double) { last = Atomic(now) }
}

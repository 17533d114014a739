import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// `[agent] metrics-listen` (issue 22 §4): `/metrics` and `/healthz` over HTTP, nothing else, for
/// a bounded number of clients at once.
@Suite(.serialized)
struct MetricsEndpointTests {
    /// One HTTP exchange on 127.0.0.1:`port`: the raw request, the status and the body.
    static func exchange(_ port: UInt16, _ request: String, timeout: Double = 10) -> (status: Int, body: String)? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var tv = timeval(tv_sec: Int(timeout), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        guard toLoopback(fd, port, connect) == 0 else { return nil }
        _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            data += buffer[0..<n]
        }
        let text = String(decoding: data, as: UTF8.self)
        guard let status = text.split(separator: " ").dropFirst().first.flatMap({ Int($0) }),
              let split = text.range(of: "\r\n\r\n") else { return nil }
        return (status, String(text[split.upperBound...]))
    }

    static func get(_ port: UInt16, _ path: String, timeout: Double = 10) -> (status: Int, body: String)? {
        exchange(port, "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout: timeout)
    }

    /// The value of one series in a page (`name{labels}`), if present.
    static func value(_ page: String, _ series: String) -> Double? {
        page.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last!) }
    }

    @Test func servesTheTextfileSeriesWithCountersAtZeroFromTheStart() throws {
        let box = Sandbox("metrics-listen")
        box.publish("a.txt", "alpha\n")
        box.buildManifest()
        let (ports, agent) = try startListening("agent", ports: 1) { given in
            try """
                [agent]
                state = \(box.state)
                metrics = \(box.directory)/ferry.prom
                metrics-listen = 127.0.0.1:\(given[0])
                [session test]
                remote = file://\(box.published)
                local = \(box.local)
                poll = 1h
                [session down]
                remote = http://127.0.0.1:1/
                local = \(box.directory)/down
                poll = 1h
                retry-delay = 1h
                """.writeReplacing(box.config)
            return (try Child(Harness.ferryBinary, ["agent", "--config", box.config], stdout: box.directory + "/out", stderr: box.directory + "/out"),
                    [box.directory + "/out"])
        }
        let port = ports[0]
        defer { agent.stop() }
        let health = try #require(Self.get(port, "/healthz"))
        #expect(health.status == 200 && health.body.hasPrefix("ok"), "\(health)")
        // The unreachable session has moved nothing: its counters are there, at 0.
        var page = ""
        #expect(eventually {
            page = Self.get(port, "/metrics")?.body ?? ""
            return Self.value(page, "ferry_transferred_files_total{session=\"test\",direction=\"pull\"}") == 1
                && Self.value(page, "ferry_polls_total{session=\"down\"}") == 1
        }, "\(page)")
        for zero in ["ferry_transferred_files_total{session=\"down\",direction=\"pull\"}", "ferry_transferred_bytes_total{session=\"down\",direction=\"pull\",source=\"origin\"}",
                     "ferry_failed_files_total{session=\"down\"}", "ferry_errors_total{session=\"test\",kind=\"file\"}"] {
            #expect(Self.value(page, zero) == 0, "\(zero) at 0: \(page)")
        }
        #expect(Self.value(page, "ferry_session_waiting{session=\"down\"}") == 1)
        let version = ferry(["--version"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "ferry ", with: "")
        #expect(Self.value(page, "ferry_build_info{version=\"\(version)\"}") == 1, "\(page)")
        // The same series as the textfile.
        func names(_ text: String) -> Set<String> { Set(text.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { String($0.split(separator: " ")[2]) }) }
        #expect(eventually { FileManager.default.fileExists(atPath: box.directory + "/ferry.prom") })
        #expect(names(page) == names(fileContents(box.directory + "/ferry.prom") ?? ""), "\(page)")
        // Nothing else is served.
        #expect(Self.get(port, "/")?.status == 404 && Self.get(port, "/metrics/../state")?.status == 404)
        #expect(Self.exchange(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")?.status == 405)
        #expect(Self.exchange(port, "HEAD /healthz HTTP/1.1\r\n\r\n")?.status == 200)
        #expect(Self.exchange(port, "hello\r\n\r\n")?.status == 400)
        #expect(Self.exchange(port, "GET /metrics HTTP/1.1\r\nX: " + String(repeating: "a", count: 10_000) + "\r\n\r\n")?.status == 400)
    }

    /// Idle clients (a slowloris: they connect and send nothing) cannot keep a scrape from being
    /// answered: a new client pushes out the one that waited longest, so with eight idle clients
    /// held open — and sixteen more later — every /healthz is answered at once (it once waited
    /// for their 5-second deadlines and failed 8 scrapes in 15), and the threads stay bounded.
    @Test func idleClientsCannotKeepHealthzFromAnswering() throws {
        let box = Sandbox("metrics-flood")
        box.publish("a.txt", "alpha\n")
        box.buildManifest()
        let (ports, agent) = try startListening("agent", ports: 1) { given in
            box.configure(remote: "file://" + box.published, session: ["poll = 1h"], agent: ["metrics-listen = 127.0.0.1:\(given[0])"])
            return (try Child(Harness.ferryBinary, ["agent", "--config", box.config], stdout: box.directory + "/out", stderr: box.directory + "/out"),
                    [box.directory + "/out"])
        }
        let port = ports[0]
        defer { agent.stop() }
        #expect(Self.get(port, "/healthz")?.status == 200)
        // The threads serving clients, by the name ferry gives them.
        func serving() -> Int {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(agent.pid)/task")) ?? []
            return tasks.filter { fileContents("/proc/\(agent.pid)/task/\($0)/comm")?.hasPrefix(MetricsServer.clientThreadName) == true }.count
        }
        var idle: [Int32] = []
        defer { for fd in idle { close(fd) } }
        func connectIdle(_ count: Int) {
            for _ in 0..<count {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                var addr = sockaddr_in()
                addr.sin_family = sa_family_t(AF_INET)
                addr.sin_addr.s_addr = inet_addr("127.0.0.1")
                addr.sin_port = port.bigEndian
                _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
                idle.append(fd)
            }
        }
        connectIdle(MetricsServer.maxConnections)
        #expect(eventually(10) { serving() >= MetricsServer.maxConnections }, "the idle clients are being served: \(serving())")
        // 15 scrapes while they hold their places, each answered within 2 s (the idle ones'
        // deadline is 5 s): none waits for them.
        var answered = 0
        for _ in 0..<15 where Self.get(port, "/healthz", timeout: 2)?.status == 200 { answered += 1 }
        #expect(answered == 15, "\(answered) of 15 scrapes answered")
        // Sixteen more idle clients: the threads stay bounded, and a scrape is still answered.
        connectIdle(2 * MetricsServer.maxConnections)
        var most = 0
        let until = Date().addingTimeInterval(1)
        while Date() < until { most = max(most, serving()); usleep(20_000) }
        #expect(most <= MetricsServer.maxThreads, "at most \(MetricsServer.maxThreads) threads: saw \(most)")
        #expect(Self.get(port, "/metrics", timeout: 2)?.status == 200)
        // And the agent went on meanwhile.
        #expect(box.status().stdout.contains("idle"), "\(box.status().stdout)")
    }

    @Test func aPortInUseStopsTheAgentWithTheReason() throws {
        let box = Sandbox("metrics-busy")
        let (port, holder) = try listeningPort()
        defer { close(holder) }
        box.configure(remote: "file://" + box.published, agent: ["metrics-listen = 127.0.0.1:\(port)"])
        let run = ferry(["agent", "--config", box.config], timeout: 20)
        #expect(run.exitCode == 5 && run.stderr.contains("metrics-listen = 127.0.0.1:\(port): cannot listen there") && run.stderr.contains("hint:"), "\(run.output)")
        box.configure(remote: "file://" + box.published, agent: ["metrics-listen = localhost:9469"])
        let name = ferry(["config", "check", "--config", box.config])
        #expect(name.exitCode == 2 && name.stderr.contains("is not an IP address"), "\(name.output)")
    }

    /// `/healthz` says what systemd's watchdog would do: 503 once the scheduler has not gone round
    /// its loop for WatchdogSec, 200 again when it does.
    @Test func healthzFailsWhenTheSchedulerStopsTicking() throws {
        let box = Sandbox("metrics-healthz")
        box.publish("a.txt", "alpha\n")
        box.buildManifest()
        let port = freePort()
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"], agent: ["metrics-listen = 127.0.0.1:\(port)"])
        let config = try ConfigParser.parse(try String(contentsOfFile: box.config, encoding: .utf8), path: box.config)
        // WatchdogSec=1s: WATCHDOG=1 every 0.5 s, so a scheduler quiet for 1 s is what the watchdog kills.
        let notifier = SystemdNotifier(environment: { $0 == "WATCHDOG_USEC" ? "1000000" : nil })
        let agent = try Agent(config: config, sinks: [], hooks: nil, notifier: notifier, clock: SystemClock())
        try agent.serveMetrics()
        #expect(waitForPort(port))
        // Not running its loop: after the watchdog's time, unhealthy.
        var answer: (status: Int, body: String)?
        #expect(eventually(10) { answer = Self.get(port, "/healthz"); return answer?.status == 503 }, "\(String(describing: answer))")
        #expect(answer?.body.contains("has not ticked for") == true)
        let stop = StopToken()
        let done = DispatchSemaphore(value: 0)
        let thread = Thread { _ = agent.run(stop: stop); done.signal() }
        thread.start()
        #expect(eventually(10) { Self.get(port, "/healthz")?.status == 200 }, "healthy once the loop runs")
        stop.request("test over")
        agent.wakeUp()
        #expect(done.wait(timeout: .now() + 20) == .success)
    }
}

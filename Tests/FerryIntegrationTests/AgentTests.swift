import Foundation
import Synchronization
import Testing

/// `ferry agent` as a long-running process against real servers: it mirrors, follows manifest
/// changes within its poll, rides out the remote going away and coming back, reloads its config
/// on SIGHUP (and refuses a broken one), and stops on SIGTERM within the stop timeout with exit 0.
@Suite(.serialized)
struct AgentTests {
    /// A running agent whose output lands in files of the sandbox.
    final class RunningAgent {
        let child: Child
        let out: String
        let err: String

        init(_ box: Sandbox, environment: [String: String] = [:]) throws {
            out = box.directory + "/agent.out"
            err = box.directory + "/agent.err"
            var env = TestEnvironment.variables
            for (k, v) in environment { env[k] = v }
            child = try Child(Harness.ferryBinary, ["agent", "--config", box.config], environment: env, stdout: out, stderr: err)
        }

        var output: String { (fileContents(out) ?? "") + (fileContents(err) ?? "") }

        deinit { child.stop() }
    }

    @Test func mirrorsFollowsChangesAndStopsOnSigterm() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("agent-follow", published: server.root)
        box.publish("a.txt", "first\n")
        box.buildManifest()
        box.configure(remote: server.url, session: ["poll = 2s", "delete = yes"], agent: ["stop-timeout = 3s"])
        let agent = try RunningAgent(box)
        #expect(eventually { fileContents(box.localPath("a.txt")) == "first\n" }, "mirrored: \(agent.output)")
        let idle = box.waitForStatus(containing: "agent      pid \(agent.child.pid), next poll ")
        #expect(idle.hasPrefix("test  pull  idle\n") && idle.contains(" (in "), "\(idle)")

        // A manifest change is applied within one poll interval (2 s) of the last poll.
        box.publish("b.txt", "second\n")
        box.publish("a.txt", "first, changed\n")
        box.buildManifest()
        let published = Date()
        #expect(eventually { fileContents(box.localPath("b.txt")) == "second\n" && fileContents(box.localPath("a.txt")) == "first, changed\n" },
                "followed: \(agent.output)")
        #expect(Date().timeIntervalSince(published) < 8, "applied within the poll (plus the run itself)")
        box.unpublish("b.txt")
        box.buildManifest()
        #expect(eventually { !FileManager.default.fileExists(atPath: box.localPath("b.txt")) }, "deletion followed: \(agent.output) \(fileContents(box.state + "/events/test.jsonl") ?? "")")

        // At rest the agent polls with conditional GETs: 304s, and no file is fetched again.
        server.clearLog()
        #expect(eventually { server.requests().count >= 2 }, "it went on polling")
        let requests = server.requests()
        #expect(requests.count >= 1 && requests.allSatisfy { $0.path == "/manifest.json" && $0.status == 304 }, "\(requests)")

        let stopped = Date()
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0, "exit 0 on SIGTERM: \(agent.output)")
        #expect(Date().timeIntervalSince(stopped) < 4, "within stop-timeout")
        #expect(agent.output.contains("stopped by SIGTERM"))
        let status = box.status()
        #expect(!status.stdout.contains("  agent "), "no agent claims the session once stopped: \(status.stdout)")
        #expect(box.sync().exitCode == 0, "the state is intact: a sync after it finds the mirror in sync")

        // The event log holds what the agent did.
        let events = ferry(["events", "--config", box.config, "--json"])
        #expect(events.exitCode == 0)
        #expect(events.events(named: "file-done").count >= 3)
        #expect(events.events(named: "agent").contains { $0["action"] as? String == "stopping" })
        #expect(events.events(named: "file-deleted").first?["path"] as? String == "b.txt")
    }

    @Test func ridesOutTheRemoteGoingAwayAndComingBack() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("agent-outage", published: server.root)
        box.publish("a.txt", "one\n")
        box.buildManifest()
        box.configure(remote: server.url, session: ["poll = 2s", "retry-delay = 1s"])
        let agent = try RunningAgent(box)
        #expect(eventually { fileContents(box.localPath("a.txt")) == "one\n" }, "\(agent.output)")

        server.goAway()
        let waiting = box.waitForStatus(containing: "waiting for connectivity", timeout: 15)
        #expect(waiting.contains("state      waiting for connectivity") && waiting.contains("  agent      pid \(agent.child.pid)"), "\(waiting)")
        #expect(agent.child.isRunning, "the agent rides it out")
        box.publish("b.txt", "two\n")
        box.buildManifest()
        try server.comeBack()
        #expect(eventually { fileContents(box.localPath("b.txt")) == "two\n" }, "recovered by itself: \(agent.output)")
        #expect(box.waitForStatus(containing: "test  pull  idle\n  agent      pid ").contains("next poll"))
        #expect(agent.output.contains("waiting for connectivity"), "the journal says so")
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    @Test func reloadsOnSighupAndRefusesABrokenConfig() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("agent-reload", published: server.root)
        box.publish("one/a.txt", "a\n")
        box.publish("two/b.txt", "b\n")
        _ = ferry(["manifest", "build", server.root + "/one"])
        _ = ferry(["manifest", "build", server.root + "/two"])
        let base = "[agent]\nstate = \(box.state)\n\n[session one]\nremote = \(server.url)one/\nlocal = \(box.directory)/one\npoll = 2s\n"
        try base.writeReplacing(box.config)
        let agent = try RunningAgent(box)
        #expect(eventually { fileContents(box.directory + "/one/a.txt") == "a\n" }, "\(agent.output)")

        // A new session starts on SIGHUP.
        try (base + "\n[session two]\nremote = \(server.url)two/\nlocal = \(box.directory)/two\npoll = 2s\n").writeReplacing(box.config)
        agent.child.signal(SIGHUP)
        #expect(eventually { fileContents(box.directory + "/two/b.txt") == "b\n" }, "session two started: \(agent.output)")

        // A broken config is refused with file, line and key; the agent goes on with the old one.
        try (base + "\n[session two]\nremote = \(server.url)two/\nlocal = \(box.directory)/two\npoll = soon\n").writeReplacing(box.config)
        agent.child.signal(SIGHUP)
        #expect(eventually { agent.output.contains("poll") && agent.output.contains("goes on with the config it has") })
        #expect(agent.output.contains("\(box.config):12: [session two] key 'poll'"), "\(agent.output)")
        #expect(agent.child.isRunning)
        box.publish("two/c.txt", "c\n")
        _ = ferry(["manifest", "build", server.root + "/two"])
        #expect(eventually { fileContents(box.directory + "/two/c.txt") == "c\n" }, "still running session two: \(agent.output)")

        // A removed session stops; its state stays.
        try base.writeReplacing(box.config)
        agent.child.signal(SIGHUP)
        #expect(eventually { agent.output.contains("stopped two") }, "\(agent.output)")
        box.publish("two/d.txt", "d\n")
        _ = ferry(["manifest", "build", server.root + "/two"])
        // Session one (the same 2 s poll) polls twice more meanwhile: two would have too.
        func polls(_ name: String) -> Int { (fileContents(box.state + "/events/\(name).jsonl") ?? "").components(separatedBy: "\"event\":\"sync-finished\"").count - 1 }
        let (one, two) = (polls("one"), polls("two"))
        #expect(eventually(15) { polls("one") >= one + 2 }, "session one goes on: \(agent.output)")
        #expect(polls("two") == two && !FileManager.default.fileExists(atPath: box.directory + "/two/d.txt"), "a removed session is no longer polled")
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    @Test func sigtermMidTransferKeepsResumeDataAndTheNextAgentResumes() throws {
        let box = Sandbox("agent-term")
        let content = randomData(6_000_000, seed: 21)
        box.publish("slow.bin", content)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/slow.bin": ["rate": 1_000_000]])
        box.configure(remote: server.url, session: ["poll = 1h"], agent: ["stop-timeout = 3s"])
        let first = try RunningAgent(box)
        server.waitForRequest("/slow.bin")
        #expect(eventually { box.partialBytes() >= 500_000 }, "the transfer got going")
        let stopped = Date()
        first.child.signal(SIGTERM)
        #expect(first.child.wait(timeout: 10) == 0, "\(first.output)")
        #expect(Date().timeIntervalSince(stopped) < 4)
        #expect(!FileManager.default.fileExists(atPath: box.localPath("slow.bin")), "nothing partial at the final path")
        let kept = try #require(box.statusTasks().first { $0["path"] as? String == "slow.bin" }?["bytes_done"] as? Int)
        #expect(kept > 0 && kept < content.count, "resume data kept: \(kept)")

        // A new agent reattaches on start: it resumes at the offset kept, not from zero.
        server.setFaults([:])
        server.clearLog()
        let second = try RunningAgent(box)
        #expect(eventually { (try? Data(contentsOf: URL(fileURLWithPath: box.localPath("slow.bin")))) == content }, "\(second.output)")
        let request = try #require(server.requests().first { $0["path"] as? String == "/slow.bin" })
        #expect(request["range"] as? String == "bytes=\(kept)-")
        second.child.signal(SIGTERM)
        #expect(second.child.wait(timeout: 10) == 0)
        let resumed = ferry(["events", "--config", box.config, "--json", "--session", "test"]).events(named: "file-resumed")
        #expect(resumed.first?["offset"] as? Int == kept)
    }

    @Test func aSecondAgentOnTheSameStateIsRefused() throws {
        let box = Sandbox("agent-twice")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"])
        let first = try RunningAgent(box)
        #expect(eventually { fileContents(box.localPath("a.txt")) == "a\n" })
        let second = ferry(["agent", "--config", box.config], timeout: 20)
        #expect(second.exitCode == 6, "\(second.output)")
        #expect(second.stderr.contains("already runs") && second.stderr.contains("pid \(first.child.pid)"))
        first.child.signal(SIGTERM)
        #expect(first.child.wait(timeout: 10) == 0)
    }

    @Test func syncNowHandsOverToTheAgentInsteadOfTransferringBesideIt() throws {
        let box = Sandbox("agent-handover")
        let content = randomData(4_000_000, seed: 31)
        box.publish("slow.bin", content)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/slow.bin": ["rate": 1_000_000]])
        box.configure(remote: server.url, session: ["poll = 1h"])
        let agent = try RunningAgent(box)
        server.waitForRequest("/slow.bin")
        let first = box.statusText()
        #expect(first.hasPrefix("test  pull  running\n  agent      pid \(agent.child.pid), running the session now\n"),
                "the agent is known from its first cycle on: \(first)")
        var st = stat()
        #expect(lstat(box.state + "/agent.sock", &st) == 0 && st.st_mode & S_IFMT == S_IFSOCK && st.st_mode & 0o777 == 0o600)

        // The agent is transferring: a sync now waits for the agent's cycle and its own (no exit 6).
        let during = box.sync(["--json"], timeout: 60)
        #expect(during.exitCode == 0, "\(during.output)")
        #expect((try? Data(contentsOf: URL(fileURLWithPath: box.localPath("slow.bin")))) == content)
        #expect(during.events(named: "sync-finished").count == 1, "it followed one cycle of the agent: \(during.stdout)")
        #expect(during.events(named: "manifest-fetched").count == 1)

        // Between polls (poll = 1h), a sync now makes the agent poll at once and shows its events.
        server.setFaults([:])
        box.publish("new.txt", "new\n")
        box.buildManifest()
        let human = box.sync()
        #expect(human.exitCode == 0, "\(human.output)")
        #expect(human.stdout.contains("handing test over to the running agent (pid \(agent.child.pid))"), "\(human.stdout)")
        #expect(human.stdout.contains("test: in sync — 1 downloaded"), "\(human.stdout)")
        #expect(fileContents(box.localPath("new.txt")) == "new\n")
        let logged = ferry(["events", "--config", box.config, "--json"]).events(named: "file-done").compactMap { $0["path"] as? String }
        #expect(logged == ["slow.bin", "new.txt"], "the agent did the work, once each: \(logged)")

        // Exit codes come through: a manifest the agent refuses is exit 4 here.
        try box.writeManifest("")
        #expect(box.sync().exitCode == 4)
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    @Test func theControlSocketServesOnlyItsOwnUserAndAStaleOneIsIgnored() throws {
        let box = Sandbox("agent-socket")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"])
        let agent = try RunningAgent(box)
        #expect(eventually { fileContents(box.localPath("a.txt")) == "a\n" })
        let socketPath = box.state + "/agent.sock"
        // Open the file mode to everyone: the peer credentials still turn another user away.
        chmod(socketPath, 0o666)
        chmod(box.state, 0o755)
        let client = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[1])
            s.sendall(b'{"command":"sync","sessions":""}\\n')
            print(s.makefile().readline().strip())
            """
        let other = runProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", client, socketPath])
        #expect(other.stdout.contains("handover-refused") && other.stdout.contains("only its own user"), "\(other.output)")
        let same = runProcess("/usr/bin/python3", ["-c", client, socketPath])
        #expect(same.stdout.contains("\"event\":\"handover\""), "\(same.output)")

        // An agent killed with -9 leaves its socket behind: sync now runs by itself.
        agent.child.signal(SIGKILL)
        agent.child.wait(timeout: 10)
        #expect(FileManager.default.fileExists(atPath: socketPath))
        box.publish("b.txt", "b\n")
        box.buildManifest()
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(!run.stdout.contains("handing"))
        #expect(fileContents(box.localPath("b.txt")) == "b\n")
    }

    @Test func writesPrometheusMetrics() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("agent-metrics", published: server.root)
        box.publish("a.txt", "12345\n")
        box.publish("b.txt", "abc\n")
        box.buildManifest(["--version", "7"])
        let metrics = box.directory + "/ferry.prom"
        box.configure(remote: server.url, session: ["poll = 2s", "retry-delay = 1s"], agent: ["metrics = \(metrics)"])
        let agent = try RunningAgent(box)
        #expect(eventually { (fileContents(metrics) ?? "").contains("ferry_transferred_files_total{session=\"test\",direction=\"pull\"} 2") }, "\(agent.output)")
        let text = fileContents(metrics) ?? ""
        for line in ["# TYPE ferry_transferred_bytes_total counter", "ferry_transferred_bytes_total{session=\"test\",direction=\"pull\",source=\"origin\"} 10",
                     "ferry_manifest_version{session=\"test\"} 7", "# TYPE ferry_reused_bytes_total counter", "ferry_reused_bytes_total{session=\"test\"} 0", "ferry_tasks{session=\"test\",state=\"queued\"} 0",
                     "ferry_session_waiting{session=\"test\"} 0", "ferry_last_successful_poll_timestamp_seconds{session=\"test\"} "] {
            #expect(text.contains(line), "missing \(line) in:\n\(text)")
        }
        var st = stat()
        #expect(stat(metrics, &st) == 0 && st.st_mode & 0o777 == 0o644)

        // The remote goes away: the error is counted and the session shows as waiting.
        server.goAway()
        #expect(eventually { (fileContents(metrics) ?? "").contains("ferry_session_waiting{session=\"test\"} 1") })
        #expect((fileContents(metrics) ?? "").contains("ferry_errors_total{session=\"test\",kind=\"remote-or-manifest\"}"))
        // Written atomically: no temporary file is left beside it.
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: box.directory).filter { $0.hasPrefix("ferry.prom.") }
        #expect(leftovers.isEmpty, "\(leftovers)")
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    @Test func atRestAnUnchangedPollSkipsTheScanAndInotifyNoticesLocalEdits() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("agent-rest", published: server.root)
        box.publish("d/a.txt", "original\n")
        box.publish("b.txt", "bee\n")
        box.buildManifest()
        box.configure(remote: server.url, session: ["poll = 1s"])
        let agent = try RunningAgent(box)
        let log = box.state + "/events/test.jsonl"
        func planned() -> Int { (fileContents(log) ?? "").components(separatedBy: "\"event\":\"planned\"").count - 1 }
        func finished() -> Int { (fileContents(log) ?? "").components(separatedBy: "\"event\":\"sync-finished\"").count - 1 }
        #expect(eventually { fileContents(box.localPath("d/a.txt")) == "original\n" && finished() >= 3 }, "\(agent.output)")
        // Settled: polls go on (304s) without a scan or a plan.
        let (p0, f0) = (planned(), finished())
        #expect(eventually { finished() >= f0 + 2 }, "it kept polling")
        #expect(planned() == p0, "no scan while nothing changed: \(planned()) vs \(p0)")

        // An edit behind ferry's back, even in a subdirectory, is noticed and repaired by the next poll.
        try "tampered\n".writeReplacing(box.localPath("d/a.txt"))
        #expect(eventually(10) { fileContents(box.localPath("d/a.txt")) == "original\n" }, "repaired: \(agent.output)")
        // The event log may land a moment after the file did.
        #expect(eventually { planned() > p0 })
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)

        // verify-interval: with it short, the tree is scanned again although nothing changed.
        box.configure(remote: server.url, session: ["poll = 1s", "verify-interval = 2s"])
        let again = try RunningAgent(box)
        #expect(eventually { finished() >= f0 + 8 })
        let p1 = planned()
        #expect(eventually(10) { planned() >= p1 + 1 }, "scanned again although nothing changed")
        again.child.signal(SIGTERM)
        #expect(again.child.wait(timeout: 10) == 0)
    }

    @Test func speaksSdNotify() throws {
        let box = Sandbox("agent-notify")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"])
        let socketPath = box.directory + "/notify.sock"
        let listener = try DatagramListener(path: socketPath)
        let agent = try RunningAgent(box, environment: ["NOTIFY_SOCKET": socketPath, "WATCHDOG_USEC": "1000000"])
        #expect(eventually { listener.received().contains { $0.contains("READY=1") } }, "\(agent.output)")
        #expect(eventually { listener.received().contains { $0 == "WATCHDOG=1" } })
        #expect(listener.received().contains { $0.contains("STATUS=1 session") && !$0.contains("STATUS=1 sessions") }, "the plural is right")
        agent.child.signal(SIGHUP)
        #expect(eventually { listener.received().contains { $0.hasPrefix("RELOADING=1\nMONOTONIC_USEC=") } })
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0, "\(listener.received()) \(agent.output)")
        // Sent before the agent exited, so in the socket's queue; the listener's thread may take it a moment later.
        #expect(eventually { listener.received().contains { $0.hasPrefix("STOPPING=1") } }, "\(listener.received())")
    }

    /// A reload (SIGHUP) or stop (SIGTERM) sent the moment the agent says READY=1, as systemd may,
    /// is never lost: the signals are blocked from the start and taken by one thread.
    @Test func signalsSentRightAfterReadyAreNeverLost() throws {
        let box = Sandbox("agent-early-signals")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"], agent: ["stop-timeout = 60s"])
        for round in 0..<10 {
            let socketPath = box.directory + "/notify-\(round).sock"
            let listener = try DatagramListener(path: socketPath)
            let agent = try RunningAgent(box, environment: ["NOTIFY_SOCKET": socketPath])
            #expect(eventually { listener.received().contains { $0.hasPrefix("READY=1") } }, "\(agent.output)")
            agent.child.signal(SIGHUP)
            #expect(eventually(10) { listener.received().contains { $0.hasPrefix("RELOADING=1") } }, "round \(round): \(agent.output)")
            agent.child.signal(SIGTERM)
            #expect(agent.child.wait(timeout: 10) == 0, "round \(round): \(agent.output)")
        }
    }

    /// A notify socket whose reader stopped reading (its queue full of WATCHDOG=1) never stalls the
    /// agent: it goes on and stops at once on SIGTERM, in order, not at the stop-timeout.
    @Test func aNotifySocketNobodyReadsNeverStallsTheAgent() throws {
        let box = Sandbox("agent-notify-full")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"], agent: ["stop-timeout = 60s"])
        let socketPath = box.directory + "/notify.sock"
        let listener = try DatagramListener(path: socketPath, reading: false)
        // Every 0.05 s a WATCHDOG=1: the queue (10 datagrams) is full within a second.
        let agent = try RunningAgent(box, environment: ["NOTIFY_SOCKET": socketPath, "WATCHDOG_USEC": "100000"])
        #expect(eventually { fileContents(box.localPath("a.txt")) == "a\n" }, "\(agent.output)")
        #expect(eventually { listener.isFull() }, "the notify socket's queue filled up")
        let stopped = Date()
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0, "\(agent.output)")
        #expect(Date().timeIntervalSince(stopped) < 10, "stopped in order, not at the 60 s stop-timeout")
        #expect(agent.output.contains("starting nothing new"), "\(agent.output)")
        _ = listener
    }
}

/// A Unix datagram socket that collects what is sent to it (standing in for systemd's notify socket).
final class DatagramListener: Sendable {
    /// What the reading thread collected, and whether the listener is gone.
    private final class Inbox: Sendable {
        let messages = Mutex<[String]>([])
        let closed = Atomic<Bool>(false)
    }
    private let fd: Int32
    private let inbox = Inbox()
    private let reading: Bool

    /// `reading`: a thread of its own takes every datagram as it comes, so that the socket's small
    /// queue (`net.unix.max_dgram_qlen`) never fills while a test waits on something else; false:
    /// nothing reads, as a stalled supervisor would.
    init(path: String, reading: Bool = true) throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        self.reading = reading
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in path.utf8.enumerated() { raw[i] = b }
        }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else { throw TestFailure("cannot bind \(path)") }
        _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        guard reading else { return }
        let socketFD = fd, box = inbox
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !box.closed.load(ordering: .relaxed) {
                var ready = pollfd(fd: socketFD, events: Int16(POLLIN), revents: 0)
                _ = poll(&ready, 1, 100)
                while true {
                    let n = recv(socketFD, &buffer, buffer.count, 0)
                    guard n > 0 else { break }
                    let text = String(decoding: buffer[0..<n], as: UTF8.self)
                    box.messages.withLock { $0.append(text) }
                }
            }
            close(socketFD)
        }
    }

    deinit {
        if reading { inbox.closed.store(true, ordering: .relaxed) } else { close(fd) }
    }

    /// Every datagram received so far.
    func received() -> [String] { inbox.messages.withLock { $0 } }

    /// Whether the socket's queue is full (a listener that does not read): a datagram of the
    /// test's own cannot be queued without waiting. Each one that can be queued fills it further.
    func isFull() -> Bool {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let name = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard name == 0 else { return false }
        let probe = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(probe) }
        let sent = withUnsafePointer(to: &address) { a in
            a.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(probe, "probe", 5, Int32(MSG_DONTWAIT), $0, length) }
        }
        return sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
    }
}


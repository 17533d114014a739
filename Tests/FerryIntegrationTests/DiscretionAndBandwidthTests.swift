import Foundation
import Testing

/// Discretionary sessions and bandwidth limits against real servers, with the machine's state
/// injected: `FERRY_HOST_ROOT` gives ferry a fake `/sys/class/power_supply`, `/proc/loadavg` and
/// `/run/NetworkManager` (with a fake `busctl` on PATH), and `TZ=UTC` makes a window computed here
/// the window ferry sees.
@Suite(.serialized)
struct DiscretionAndBandwidthTests {
    /// A fake host: power supplies, load, NetworkManager, flipped by the test as it runs.
    final class FakeHost {
        let root: String
        init(_ box: Sandbox) { root = box.directory + "/host" }

        func power(mains online: Bool, battery: String = "Discharging") {
            write("sys/class/power_supply/AC/type", "Mains\n")
            write("sys/class/power_supply/AC/online", online ? "1\n" : "0\n")
            write("sys/class/power_supply/BAT0/type", "Battery\n")
            write("sys/class/power_supply/BAT0/status", battery + "\n")
        }

        func load(_ value: String) { write("proc/loadavg", "\(value) 0.50 0.40 1/123 4567\n") }

        /// NetworkManager "runs" and `busctl` answers its Metered property with `value`.
        func networkManager(metered value: Int) -> [String: String] {
            try! FileManager.default.createDirectory(atPath: root + "/run/NetworkManager", withIntermediateDirectories: true)
            write("bin/busctl", "#!/bin/sh\necho \"u \(value)\"\n", mode: 0o755)
            return ["FERRY_HOST_ROOT": root, "PATH": root + "/bin:" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")]
        }

        var environment: [String: String] { ["FERRY_HOST_ROOT": root, "TZ": "UTC"] }

        private func write(_ path: String, _ text: String, mode: mode_t = 0o644) {
            let full = root + "/" + path
            try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try! text.writeReplacing(full, mode: mode)
        }
    }

    /// `HH:MM:SS` in UTC, `offset` seconds from now.
    func utc(_ offset: Int) -> String {
        let t = (Int(time(nil)) + offset) % 86_400
        return String(format: "%02d:%02d:%02d", t / 3600, t / 60 % 60, t % 60)
    }

    @Test func theAgentHoldsWorkUntilTheWindowOpens() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("window", published: server.root)
        for i in 0..<3 { box.publish("f\(i).txt", "file \(i)\n") }
        box.buildManifest()
        let host = FakeHost(box)
        // Not on a whole minute: ferry shows 19:28:00 as 19:28, and the checks below match the text.
        let opens = utc(8).hasSuffix(":00") ? utc(9) : utc(8)
        let prom = box.directory + "/ferry.prom"
        box.configure(remote: server.url, session: ["poll = 1h", "discretionary = yes", "window = \(opens)-\(utc(3600))"],
                      agent: ["metrics = \(prom)"])
        let agent = try AgentTests.RunningAgent(box, environment: host.environment)

        let held = box.waitForStatus(containing: "held:")
        #expect(held.contains("held: 3 files wait for the time window \(opens)-"), "\(held)\n\(agent.output)")
        let tasks = box.status(["-v"]).stdout
        #expect(tasks.split(separator: "\n").filter { $0.contains("waits for the time window \(opens)") }.count == 3, "each task says what it waits for: \(tasks)")
        let json = box.status(["--json", "-v"]).stdout
        #expect(json.contains("\"waits_for\":\"the time window \(opens)-"), "\(json)")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("f0.txt")), "nothing transferred before the window")
        #expect(server.requests().allSatisfy { $0.path == "/manifest.json" || $0.path.hasPrefix("/.ferry/meta/") }, "only the manifest (and its metadata objects) was fetched")
        #expect(eventually { fileContents(prom)?.contains("ferry_session_held{session=\"test\"} 1") == true }, "\(fileContents(prom) ?? "")")
        #expect(fileContents(prom)?.contains("ferry_tasks{session=\"test\",state=\"queued\"} 3") == true, "queue depth: \(fileContents(prom) ?? "")")

        // The window opens: the agent starts the held work itself, long before its 1-hour poll.
        #expect(eventually(30) { (0..<3).allSatisfy { fileContents(box.localPath("f\($0).txt")) == "file \($0)\n" } }, "\(agent.output)")
        #expect(box.waitForStatus(containing: "test  pull  idle\n  agent      pid ").contains("next poll"))
        #expect(eventually { fileContents(prom)?.contains("ferry_session_held{session=\"test\"} 0") == true })
        let events = ferry(["events", "--config", box.config, "--json"])
        #expect(events.events(named: "session-held").first?["files"] as? Int == 3)
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    /// Losing AC power mid-transfer checkpoints the running download; power back, the agent resumes
    /// it from the offset kept.
    @Test func losingACPowerPausesARunningTransferAndPowerBackResumesIt() throws {
        let box = Sandbox("power")
        let content = randomData(6_000_000, seed: 5)
        box.publish("big.bin", content)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/big.bin": ["rate": 1_000_000]])
        let host = FakeHost(box)
        host.power(mains: true)
        box.configure(remote: server.url, session: ["poll = 1h", "discretionary = yes"])
        let agent = try AgentTests.RunningAgent(box, environment: host.environment)
        server.waitForRequest("/big.bin")
        #expect(eventually { box.partialBytes() >= 500_000 }, "the transfer got going")

        host.power(mains: false)
        // The agent says how many files wait once the held cycle has ended (the run records the hold a moment before).
        let held = box.waitForStatus(containing: "held: 1 file waits for AC power", timeout: 15)
        #expect(held.contains("held: 1 file waits for AC power (the machine runs on battery)"), "\(held)\n\(agent.output)")
        let task = try #require(box.statusTasks().first { $0["path"] as? String == "big.bin" })
        let kept = try #require(task["bytes_done"] as? Int)
        #expect(kept > 0 && kept < content.count, "the running transfer checkpointed: \(kept)")
        #expect(task["state"] as? String == "queued", "its task is back in line: \(task)")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("big.bin")))

        server.setFaults([:])
        server.clearLog()
        host.power(mains: true, battery: "Charging")
        #expect(eventually(30) { (try? Data(contentsOf: URL(fileURLWithPath: box.localPath("big.bin")))) == content }, "\(agent.output)")
        let request = try #require(server.requests().first { $0["path"] as? String == "/big.bin" })
        #expect(request["range"] as? String == "bytes=\(kept)-", "resumed, not restarted")
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    /// `sync now` on a discretionary session whose conditions do not hold transfers nothing, exits 3
    /// and names each condition; metered (NetworkManager or the config), load and free space.
    @Test func syncNowNamesEachConditionThatHoldsWorkBack() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("conditions", published: server.root)
        box.publish("a.txt", "a\n")
        box.buildManifest()
        let host = FakeHost(box)
        host.load("0.10")
        let nm = host.networkManager(metered: 1)
        box.configure(remote: server.url, session: ["discretionary = yes"])

        var run = box.sync(environment: nm)
        #expect(run.exitCode == 3, "\(run.output)")
        #expect(run.output.contains("1 file waits for the session's discretionary conditions: an unmetered network (NetworkManager says the network is metered)"),
                "\(run.output)")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("a.txt")))
        #expect(box.statusText().contains("held: waits for an unmetered network"), "\(box.statusText())")

        // NetworkManager says unmetered (2 = NM_METERED_NO), but the load is too high and the disk too full.
        host.load("9.50")
        _ = host.networkManager(metered: 2)
        box.configure(remote: server.url, session: ["discretionary = yes", "max-load = 2", "min-free-space = 1000T"])
        run = box.sync(environment: nm)
        #expect(run.exitCode == 3, "\(run.output)")
        #expect(run.output.contains("a load below 2.00 (the 1-minute load is 9.50)"), "\(run.output)")
        #expect(run.output.contains("1000.0 TiB free on the local filesystem"), "\(run.output)")
        #expect(!run.output.contains("unmetered"), "\(run.output)")

        // The config's network-metered overrides NetworkManager; with every condition met the file arrives.
        host.load("0.20")
        box.configure(remote: server.url, session: ["discretionary = yes", "max-load = 2", "min-free-space = 1%"], agent: ["network-metered = yes"])
        run = box.sync(environment: nm)
        #expect(run.exitCode == 3 && run.output.contains("an unmetered network (network-metered = yes says the network is metered)"), "\(run.output)")
        box.configure(remote: server.url, session: ["discretionary = yes", "max-load = 2", "min-free-space = 1%"], agent: ["network-metered = no"])
        run = box.sync(environment: nm)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(fileContents(box.localPath("a.txt")) == "a\n")
        let status = box.status().stdout
        #expect(!status.contains("held"), "the hold is cleared once the work went: \(status)")
    }

    /// A session's bwlimit and the global one both hold: the bytes take at least as long as the rate allows.
    @Test func bandwidthLimitsHoldPerSessionAndAcrossSessions() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("bwlimit", published: server.root)
        let content = randomData(1 << 20, seed: 9)
        box.publish("one.bin", content)
        box.buildManifest()
        box.configure(remote: server.url, session: ["bwlimit = 256K"])
        var started = Date()
        var run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        // 1 MiB at 256 KiB/s, less the bucket's first 64 KiB: at least 3.75 s.
        #expect(Date().timeIntervalSince(started) >= 3.5, "took \(Date().timeIntervalSince(started))s")
        #expect((try? Data(contentsOf: URL(fileURLWithPath: box.localPath("one.bin")))) == content)

        // Two sessions of 512 KiB each share a global 256 KiB/s.
        box.publish("a/x.bin", randomData(512 << 10, seed: 10))
        box.publish("b/y.bin", randomData(512 << 10, seed: 11))
        _ = ferry(["manifest", "build", server.root + "/a"])
        _ = ferry(["manifest", "build", server.root + "/b"])
        try """
            [agent]
            state = \(box.state)
            bwlimit = 00:00,256K
            [session a]
            remote = \(server.url)a/
            local = \(box.directory)/a
            [session b]
            remote = \(server.url)b/
            local = \(box.directory)/b
            """.writeReplacing(box.config)
        started = Date()
        run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(Date().timeIntervalSince(started) >= 3.5, "took \(Date().timeIntervalSince(started))s")
        #expect(FileManager.default.fileExists(atPath: box.directory + "/a/x.bin") && FileManager.default.fileExists(atPath: box.directory + "/b/y.bin"))
    }

    /// A reload that lifts the global limit speeds up the running transfer: it is not restarted.
    @Test func aReloadChangesTheLimitOfARunningTransfer() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("bwreload", published: server.root)
        let content = randomData(4 << 20, seed: 12)
        box.publish("big.bin", content)
        box.buildManifest()
        box.configure(remote: server.url, session: ["poll = 1h", "min-speed = 1K"], agent: ["bwlimit = 64K"])
        let agent = try AgentTests.RunningAgent(box)
        #expect(box.waitForRunningTask(), "\(agent.output)")
        #expect(eventually { box.partialBytes() > 0 }, "bytes are coming, slowly")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("big.bin")), "4 MiB at 64 KiB/s takes a minute")

        box.configure(remote: server.url, session: ["poll = 1h", "min-speed = 1K"])
        agent.child.signal(SIGHUP)
        // At 64 KiB/s what is left would take about a minute; lifted, it is done in moments.
        #expect(eventually(25) { (try? Data(contentsOf: URL(fileURLWithPath: box.localPath("big.bin")))) == content }, "\(agent.output)")
        let events = ferry(["events", "--config", box.config, "--json", "--session", "test"])
        #expect(events.events(named: "file-started").count == 1)
        #expect(events.events(named: "file-resumed").isEmpty && events.events(named: "file-restarted").isEmpty, "the transfer went on as it was")
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }
}

import Foundation
import Testing

/// One engine for every session: `sync now` runs its sessions at the same time, under the global
/// `transfers` limit.
struct ConcurrentSessionTests {
    /// Two sessions, one slow file each, from one server that notes whether bodies overlapped.
    func twoSessions(_ label: String, transfers: Int) throws -> (Sandbox, PythonServer, [String: Data]) {
        let box = Sandbox(label)
        var contents: [String: Data] = [:]
        for (i, name) in ["one", "two"].enumerated() {
            contents[name] = randomData(600_000, seed: UInt64(40 + i))
            box.publish("\(name)/\(name).bin", contents[name]!)
            #expect(ferry(["manifest", "build", box.published + "/" + name]).exitCode == 0)
        }
        let server = try PythonServer(directory: box.published)
        server.setFaults(["*": ["rate": 400_000, "log_overlap": ".bin"]])
        let config = ["[agent]", "state = \(box.state)", "transfers = \(transfers)", "",
                      "[session one]", "remote = \(server.url)one/", "local = \(box.directory)/one", "",
                      "[session two]", "remote = \(server.url)two/", "local = \(box.directory)/two"]
        try (config.joined(separator: "\n") + "\n").writeReplacing(box.config)
        return (box, server, contents)
    }

    /// The server notes a body once its last byte is written, which can be just after ferry exits.
    func bodies(_ server: PythonServer) -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(5)
        while true {
            let sent = server.requests().filter { $0["method"] as? String == "BODY" && ($0["path"] as? String)?.hasSuffix(".bin") == true }
            if sent.count >= 2 || Date() > deadline { return sent }
            usleep(20_000)
        }
    }

    /// With room (`transfers = 8`) both sessions' files are sent at once; with `transfers = 1`, one
    /// body at a time.
    @Test(arguments: [(8, true), (1, false)])
    func sessionsShareTheGlobalLimit(transfers: Int, overlapped: Bool) throws {
        let (box, server, contents) = try twoSessions("concurrent-\(transfers)", transfers: transfers)
        defer { server.stop() }
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (name, data) in contents {
            #expect(try Data(contentsOf: URL(fileURLWithPath: "\(box.directory)/\(name)/\(name).bin")) == data)
        }
        let sent = bodies(server)
        #expect(sent.count == 2 && sent.allSatisfy { $0["overlapped"] as? Bool == overlapped }, "overlapped \(overlapped): \(sent)")
        #expect(run.events(named: "sync-finished").count == 2)
    }

    /// `session-transfers` limits one session within the global limit.
    @Test func aSessionLimitHoldsWithinTheGlobalOne() throws {
        let box = Sandbox("session-limit")
        for name in ["a", "b"] { box.publish("\(name).bin", randomData(400_000, seed: name == "a" ? 1 : 2)) }
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["*": ["rate": 400_000, "log_overlap": ".bin"]])
        box.configure(remote: server.url, session: ["session-transfers = 1"])
        #expect(box.sync().exitCode == 0)
        let sent = bodies(server)
        #expect(sent.count == 2 && sent.allSatisfy { $0["overlapped"] as? Bool == false }, "one at a time: \(sent)")
    }

    /// Each session keeps its own outcome, and the command's exit code is the one rule across them.
    @Test func eachSessionEndsOnItsOwn() throws {
        let (box, server, contents) = try twoSessions("mixed", transfers: 8)
        defer { server.stop() }
        server.setFaults(["/two/two.bin": ["statuses": [404]]])
        let config = ["[agent]", "state = \(box.state)", "", "[session one]", "remote = \(server.url)one/", "local = \(box.directory)/one",
                      "", "[session two]", "remote = \(server.url)two/", "local = \(box.directory)/two", "retries = 0"]
        try (config.joined(separator: "\n") + "\n").writeReplacing(box.config)
        let run = box.sync(["--json"])
        #expect(run.exitCode == 1, "\(run.output)")
        let finished = run.events(named: "sync-finished")
        #expect(finished.first { $0["session"] as? String == "one" }?["exit_code"] as? Int == 0)
        #expect(finished.first { $0["session"] as? String == "two" }?["exit_code"] as? Int == 1)
        #expect(try Data(contentsOf: URL(fileURLWithPath: "\(box.directory)/one/one.bin")) == contents["one"])
    }

    /// A remote whose answers hang cannot take every slot: its session started first and holds
    /// what it can of `transfers = 4` with bodies that never come, yet the other session (whose
    /// manifest comes slowly, so it asks last) gets its share at once and is in sync long before
    /// the hanging transfers are given up.
    @Test func aRemoteThatHangsLeavesTheOtherSessionsTheirShare() throws {
        let box = Sandbox("fair-share")
        for i in 0..<6 { box.publish("stuck/s\(i).bin", randomData(50_000, seed: UInt64(60 + i))) }
        for i in 0..<10 { box.publish("fine/f\(i).bin", randomData(20_000, seed: UInt64(80 + i))) }
        for name in ["stuck", "fine"] { #expect(ferry(["manifest", "build", box.published + "/" + name]).exitCode == 0) }
        let stuck = try PythonServer(directory: box.published + "/stuck")
        defer { stuck.stop() }
        let fine = try PythonServer(directory: box.published + "/fine")
        defer { fine.stop() }
        stuck.setFaults(Dictionary(uniqueKeysWithValues: (0..<6).map { ("/s\($0).bin", ["stall_after": 0] as [String: Any]) }))
        fine.setFaults(["/manifest.json": ["rate": 100]])
        let config = ["[agent]", "state = \(box.state)", "transfers = 4", "",
                      "[session stuck]", "remote = \(stuck.url)", "local = \(box.directory)/stuck", "min-speed = 0", "stall-timeout = 60s", "",
                      "[session fine]", "remote = \(fine.url)", "local = \(box.directory)/fine"]
        try (config.joined(separator: "\n") + "\n").writeReplacing(box.config)
        let run = box.sync(["--json", "--max-duration", "25s"])
        let events = run.events
        let fineDone = events.firstIndex { $0["event"] as? String == "sync-finished" && $0["session"] as? String == "fine" }
        #expect(fineDone != nil && events[fineDone!]["exit_code"] as? Int == 0, "\(run.output)")
        let stuckGaveUp = events.firstIndex { $0["session"] as? String == "stuck" && ["file-retrying", "file-failed", "file-done"].contains($0["event"] as? String ?? "") }
        #expect(stuckGaveUp.map { gaveUp in fineDone.map { $0 < gaveUp } ?? false } ?? true,
                "the healthy session finished while the hanging one still held its transfers: \(run.stdout)")
        #expect(run.exitCode == 3, "the hanging session is stopped by the deadline: \(run.output)")
        #expect(stuck.requests().filter { ($0["path"] as? String ?? "").hasSuffix(".bin") }.count >= 2, "the hanging session started transfers first")
    }
}

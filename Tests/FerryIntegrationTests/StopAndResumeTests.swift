import Foundation
import Testing

/// Deadlines, signals and resume data: a stopped run exits 3 having kept what it fetched, and the
/// next run continues from there with Range + If-Range.
@Suite(.serialized)
struct StopAndResumeTests {
    /// A slow server and a 6 MB file: long enough to stop in the middle.
    func slowSetup(_ label: String) throws -> (Sandbox, PythonServer, Data) {
        let box = Sandbox(label)
        let content = randomData(6_000_000, seed: 11)
        box.publish("slow.bin", content)
        box.publish("small.txt", "small\n")
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        server.setFaults(["/slow.bin": ["rate": 1_500_000]])
        box.configure(remote: server.url)
        return (box, server, content)
    }

    @Test func deadlineStopsWithExitThreeAndTheNextRunResumes() throws {
        let (box, server, content) = try slowSetup("deadline")
        defer { server.stop() }
        let started = Date()
        let stopped = box.sync(["--max-duration", "1s", "--json"])
        #expect(stopped.exitCode == 3, "\(stopped.output)")
        #expect(Date().timeIntervalSince(started) < 10, "stopped near the deadline")
        let interrupted = try #require(stopped.events(named: "file-interrupted").first, "\(stopped.output)")
        let kept = try #require(interrupted["offset"] as? Int)
        #expect(kept > 0 && kept < content.count)
        #expect(!FileManager.default.fileExists(atPath: box.localPath("slow.bin")), "no partial bytes at the final path")
        #expect(stopped.events(named: "sync-finished").first?["message"] as? String != nil)
        let status = box.status(["--json", "--files"])
        #expect(status.stdout.contains("\"bytes_done\":\(kept)"), "resume data recorded: \(status.stdout)")

        server.setFaults([:])
        server.clearLog()
        let resumed = box.sync(["--json"])
        #expect(resumed.exitCode == 0, "\(resumed.output)")
        let event = try #require(resumed.events(named: "file-resumed").first)
        #expect(event["offset"] as? Int == kept)
        let done = try #require(resumed.events(named: "file-done").first { $0["path"] as? String == "slow.bin" })
        #expect(done["fetched"] as? Int == content.count - kept, "only the rest was fetched")
        let request = try #require(server.requests().first { $0["path"] as? String == "/slow.bin" })
        #expect(request["range"] as? String == "bytes=\(kept)-")
        #expect((request["if_range"] as? String)?.hasPrefix("\"") == true, "a strong ETag guards the range")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("slow.bin"))) == content)
    }

    @Test(arguments: [SIGTERM, SIGINT])
    func signalStopsWithinTheStopTimeoutAndKeepsResumeData(signal: Int32) throws {
        let (box, server, content) = try slowSetup("signal")
        defer { server.stop() }
        let out = box.directory + "/out.jsonl"
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--json"], stdout: out, stderr: box.directory + "/err")
        let deadline = Date().addingTimeInterval(20)
        while box.partialBytes() < 500_000 && Date() < deadline { usleep(20_000) }
        #expect(box.partialBytes() >= 500_000, "the transfer got going")
        let sent = Date()
        child.signal(signal)
        let status = child.wait(timeout: 15)
        #expect(status == 3)
        #expect(Date().timeIntervalSince(sent) < 6, "within stop-timeout (5s)")
        let events = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        #expect(events.contains("\"event\":\"file-interrupted\""))
        #expect(!FileManager.default.fileExists(atPath: box.localPath("slow.bin")))
        // The summary counts what came over the network, kept for the next run; the task is back in
        // line, not "running" with no process alive.
        let finished = events.split(separator: "\n").first { $0.contains("\"event\":\"sync-finished\"") }.map(String.init) ?? ""
        let bytes = Int(finished.firstMatch(of: /"bytes":(\d+)/)?.1 ?? "") ?? 0
        #expect(bytes >= 500_000, "\(finished)")
        let tasks = box.status(["--json", "--files"]).stdout
        #expect(tasks.contains("\"state\":\"queued\"") && !tasks.contains("\"state\":\"running\""), "\(tasks)")

        server.setFaults([:])
        let resumed = box.sync(["--json"])
        #expect(resumed.exitCode == 0, "\(resumed.output)")
        #expect((resumed.events(named: "file-resumed").first?["offset"] as? Int ?? 0) > 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("slow.bin"))) == content)
    }

    @Test func statusShowsTheRunningProcessAndItsTimeLeft() throws {
        let (box, server, _) = try slowSetup("timeleft")
        defer { server.stop() }
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--max-duration", "5m", "--quiet"])
        defer { child.stop() }
        let seen = box.waitForStatus(containing: "  process    pid \(child.pid), stops by ", timeout: 15)
        #expect(seen.hasPrefix("test  pull  running\n"), "\(seen)")
        #expect(seen.contains(" (4m") || seen.contains(" (5m00s left)"), "\(seen)")
        #expect(seen.contains("s left)"))
        child.signal(SIGTERM)
        #expect(child.wait(timeout: 10) == 3)
    }

    @Test func cancelSuspendsARunningTransferAndResumeContinuesIt() throws {
        let (box, server, content) = try slowSetup("cancel")
        defer { server.stop() }
        let out = box.directory + "/out.jsonl"
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--json"], stdout: out, stderr: box.directory + "/err")
        defer { child.stop() }
        let deadline = Date().addingTimeInterval(20)
        while box.partialBytes() < 500_000 && Date() < deadline { usleep(20_000) }
        let cancel = ferry(["cancel", "--config", box.config, "--session", "test"])
        #expect(cancel.exitCode == 0, "\(cancel.output)")
        #expect(cancel.stdout == "suspended 1 task of session test (resume data kept for 1)\n", "one line for the session: \(cancel.stdout)")
        // The running ferry honours it within a second or so, and ends with work left (exit 3).
        #expect(child.wait(timeout: 15) == 3)
        let events = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        #expect(events.contains("\"event\":\"file-suspended\""), "\(events)")
        #expect(fileContents(box.localPath("small.txt")) == "small\n", "other files went on")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("slow.bin")))

        // Suspended stays suspended: a plain sync skips it.
        server.setFaults([:])
        let skipped = box.sync()
        #expect(skipped.exitCode == 3)
        #expect(skipped.output.contains("suspended by ferry cancel"))
        let status = box.status()
        #expect(status.stdout.contains("1 suspended"), "\(status.stdout)")
        let taskID = try #require(box.taskID("slow.bin"))

        let resumed = ferry(["resume", "--config", box.config, taskID, "--json"])
        #expect(resumed.exitCode == 0, "\(resumed.output)")
        #expect((resumed.events(named: "file-resumed").first?["offset"] as? Int ?? 0) > 0, "continued from the kept offset")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("slow.bin"))) == content)
    }

    /// `ferry resume` while another ferry runs the session: that run takes the resumed task back
    /// and finishes it, rather than leaving it to a next run.
    @Test func aRunningSyncTakesBackWhatResumeMakesRunnable() throws {
        let box = Sandbox("resume-busy")
        let long = randomData(2_400_000, seed: 12), short = randomData(1_200_000, seed: 13)
        box.publish("long.bin", long)
        box.publish("short.bin", short)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/long.bin": ["rate": 300_000], "/short.bin": ["rate": 300_000]])
        box.configure(remote: server.url)
        let out = box.directory + "/out.jsonl"
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--json"], stdout: out, stderr: box.directory + "/err")
        defer { child.stop() }
        server.waitForRequest("/short.bin")
        let taskID = try #require(box.taskID("short.bin"), "\(box.status(["--files"]).output)")

        let cancel = ferry(["cancel", "--config", box.config, taskID])
        #expect(cancel.exitCode == 0 && cancel.stdout.contains("suspended task"), "\(cancel.output)")
        let resumed = ferry(["resume", "--config", box.config, taskID])
        #expect(resumed.exitCode == 0, "\(resumed.output)")
        #expect(resumed.stdout.contains("the ferry running it takes the resumed tasks back"), "\(resumed.output)")

        let code = child.wait(timeout: 30)
        let events = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        #expect(code == 0, "the running sync finished the resumed file: \(events)")
        #expect(events.contains("\"event\":\"file-suspended\""), "\(events)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("short.bin"))) == short)
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("long.bin"))) == long)
        #expect(!box.status().stdout.contains("suspended"))
    }

    /// `ferry resume` runs the session like `sync now`: it stops at the session's max-duration (or
    /// its own --max-duration) with exit 3, keeping what it fetched.
    @Test func resumeHonoursMaxDuration() throws {
        let (box, server, content) = try slowSetup("resume-deadline")
        defer { server.stop() }
        #expect(box.sync(["--max-duration", "1s"]).exitCode == 3)
        #expect(ferry(["cancel", "--config", box.config, "--session", "test"]).stdout.contains("suspended 1 task of session test"))

        box.configure(remote: server.url, session: ["max-duration = 1s"])
        let started = Date()
        let resumed = ferry(["resume", "--config", box.config, "--session", "test", "--json"])
        #expect(resumed.exitCode == 3, "\(resumed.output)")
        #expect(Date().timeIntervalSince(started) < 10, "stopped near the deadline")
        #expect(!resumed.events(named: "file-interrupted").isEmpty, "\(resumed.output)")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("slow.bin")))

        box.configure(remote: server.url)
        let flagged = ferry(["resume", "--config", box.config, "--session", "test", "--max-duration", "1s"])
        #expect(flagged.exitCode == 3, "\(flagged.output)")

        server.setFaults([:])
        #expect(box.sync().exitCode == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("slow.bin"))) == content)
    }

    @Test func cancelAndResumeRefuseWhatTheyCannotDo() throws {
        let box = Sandbox("cancelusage")
        box.configure(remote: "file://" + box.published)
        #expect(ferry(["cancel", "--config", box.config]).stderr.contains("name the tasks"))
        let unknown = ferry(["cancel", "--config", box.config, "999"])
        #expect(unknown.exitCode == 2)
        #expect(unknown.stderr.contains("there is no task 999"))
        #expect(ferry(["resume", "--config", box.config, "--session", "test", "12"]).exitCode == 2)
        #expect(ferry(["cancel", "--config", box.config, "abc"]).stderr.contains("'abc' is not a task id"))
        let none = ferry(["cancel", "--config", box.config, "--session", "test"])
        #expect(none.exitCode == 0)
        #expect(none.stdout.contains("nothing to suspend"))
    }

    /// A run killed between placing files and recording them (kill -9) leaves their rows running or
    /// queued: the next run finds the files in place and settles the rows, so status says the
    /// session is in sync and nothing stays "running" through restarts.
    @Test func rowsAKilledRunLeftAreSettledByTheNextRun() throws {
        let box = Sandbox("settle-rows")
        for name in ["a", "b", "c"] { box.publish("\(name).txt", "\(name)\n") }
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        #expect(box.sync().exitCode == 0)
        let script = """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.execute("UPDATE tasks SET state = 'running' WHERE path IN ('a.txt', 'b.txt')")
            db.execute("UPDATE tasks SET state = 'queued' WHERE path = 'c.txt'")
            db.commit()
            """
        #expect(runProcess("python3", ["-c", script, box.state + "/ferry.db"]).exitCode == 0)
        #expect(box.status(["--json"]).stdout.contains("\"running\":2"), "the killed run's rows: \(box.status(["--json"]).stdout)")
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        let status = box.status(["--json"]).stdout
        #expect(status.contains("\"running\":0") && status.contains("\"queued\":0"), "settled: \(status)")
        let cancel = ferry(["cancel", "--config", box.config, "--session", "test", "-v"])
        #expect(cancel.stdout.contains("nothing to suspend") && !cancel.stdout.contains("not started"), "\(cancel.output)")
    }
}

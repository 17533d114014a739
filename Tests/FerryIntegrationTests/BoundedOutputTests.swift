import Foundation
import Testing
import FerryCore

/// What ferry prints does not grow with the tree (issue 38 item 5): `status` is a summary per
/// session within 80 columns (or a narrower terminal), `status --json` is bounded, `cancel` and
/// `resume` say one line per session; each task only on request. A `sync now` handed to a running
/// agent draws the same progress bars as a run of its own, and its `--bwlimit` holds for the
/// agent's cycle.
@Suite(.serialized)
struct BoundedOutputTests {
    static let files = 2_000

    /// The lines of a status output, each checked for its width.
    func expectNarrow(_ text: String, _ width: Int = 80, sourceLocation: SourceLocation = #_sourceLocation) {
        let wide = text.split(separator: "\n").filter { $0.count > width }
        #expect(wide.isEmpty, "lines wider than \(width): \(wide)", sourceLocation: sourceLocation)
    }

    /// The task counts of the one session, from `status --json`, which must stay small.
    func counts(_ box: Sandbox, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Int] {
        let json = box.status(["--json"]).stdout
        #expect(json.utf8.count < 16_384, "status --json is bounded: \(json.utf8.count) bytes", sourceLocation: sourceLocation)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], sourceLocation: sourceLocation)
        let session = try #require((object["sessions"] as? [[String: Any]])?.first, sourceLocation: sourceLocation)
        #expect(session["tasks"] == nil, "tasks only when asked", sourceLocation: sourceLocation)
        #expect(((session["running_tasks"] as? [Any])?.count ?? 0) <= 10, sourceLocation: sourceLocation)
        return try #require(session["task_counts"] as? [String: Int], sourceLocation: sourceLocation)
    }

    /// A 2,000-file session synced by the agent, handed over with a tiny --bwlimit so that it is
    /// caught mid-sync: status stays a short summary in 80 columns (and in a 60-column terminal),
    /// --json stays small and counts right, --files and -v list the tasks, cancel and resume say
    /// one line each with the right counts; and the same once every file is done.
    @Test func statusCancelAndResumeStaySmallForTwoThousandFiles() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("bounded", published: server.root)
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: server.url, session: ["poll = 1h"])
        let agent = try AgentTests.RunningAgent(box)
        #expect(eventually { fileContents(box.localPath("a.txt")) == "a\n" }, "\(agent.output)")

        // Long names, to be shortened; 512 bytes each, 1 MiB in all: at 16 KiB/s about a minute.
        func name(_ i: Int) -> String { "a-directory-with-a-long-name/part-\(i % 10)/and-a-file-name-that-goes-on-for-a-while-\(i).txt" }
        for i in 0..<Self.files { box.publish(name(i), randomData(512, seed: UInt64(i + 1))) }
        box.buildManifest()
        let out = box.directory + "/handed.jsonl"
        let handed = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--bwlimit", "16K", "--json"],
                               stdout: out, stderr: box.directory + "/handed.err")
        defer { handed.stop() }
        var mid: [String: Int] = [:]
        #expect(eventually(30) {
            mid = (try? counts(box)) ?? [:]
            return (mid["done"] ?? 0) >= 50 && (mid["queued"] ?? 0) >= 1_000
        }, "caught mid-sync: \(mid)\n\(agent.output)")
        #expect(mid.values.reduce(0, +) == Self.files + 1, "every file has its task: \(mid)")
        #expect((fileContents(out) ?? "").contains("\"action\":\"run-limits\""), "the agent runs the cycle at --bwlimit: \(fileContents(out) ?? "")")

        let status = box.status()
        #expect(status.exitCode == 0)
        #expect(status.stdout.split(separator: "\n").count < 25, "a summary, not a line per file: \(status.stdout)")
        expectNarrow(status.stdout)
        #expect(status.stdout.hasPrefix("test  pull  running\n") && status.stdout.contains("  agent      pid \(agent.child.pid), running the session now"),
                "\(status.stdout)")
        #expect(status.stdout.contains(" queued, ") && status.stdout.contains(" done"), "\(status.stdout)")
        // A terminal narrower than 80 columns: its width holds.
        let narrow = runProcess("/usr/bin/script", ["-q", "-e", "-c", "stty cols 60 rows 30; '\(Harness.ferryBinary)' status --config '\(box.config)'", "/dev/null"])
        let shown = narrow.stdout.replacingOccurrences(of: "\r", with: "")
        #expect(narrow.exitCode == 0 && shown.contains("test  pull  running"), "\(narrow.output)")
        #expect(shown.split(separator: "\n").count < 25)
        expectNarrow(shown, 60)
        let listed = box.status(["-v"]).stdout
        expectNarrow(listed)
        #expect(listed.split(separator: "\n").filter { $0.contains(" queued ") }.count >= 800, "-v lists each task not done")
        #expect(listed.contains(".txt\n") && listed.contains("…"), "long names shortened in the middle, keeping their end: \(listed.prefix(2_000))")
        #expect(box.statusTasks().count == Self.files + 1, "--files lists every task")

        // Cancel: one line for the session, whatever the number of tasks.
        let cancel = ferry(["cancel", "--config", box.config, "--session", "test"])
        #expect(cancel.exitCode == 0, "\(cancel.output)")
        let said = cancel.stdout.split(separator: "\n")
        let suspended = try #require(said.first?.firstMatch(of: /^suspended ([\d,]+) tasks of session test( \(resume data kept for [\d,]+\))?$/),
                                     "\(cancel.stdout)")
        let n = Int(suspended.1.replacingOccurrences(of: ",", with: ""))!
        #expect(n >= 500 && said.count <= 2, "one line (and one for any committed before the cancel reached them): \(cancel.stdout)")
        #expect(handed.wait(timeout: 30) == 3, "the handed-over run ends with work left: \(fileContents(box.directory + "/handed.err") ?? "")")
        #expect(try counts(box)["suspended"] == n, "the count said is the count suspended")

        // Resume: one line, then the agent's cycle (at the config's settings again) finishes.
        let resume = ferry(["resume", "--config", box.config, "--session", "test"])
        #expect(resume.exitCode == 0, "\(resume.output)")
        // The offsets kept are said when there are any: under load the cancel may come before any
        // task has written a byte.
        let resumed = try #require(resume.stdout.split(separator: "\n").first?
                                       .firstMatch(of: /^resuming ([\d,]+) tasks of session test( \([\d,]+ from (its|their) kept offsets?\))?$/),
                                   "\(resume.stdout)")
        #expect(resumed.1 == Units.formatCount(n), "\(resume.stdout)")
        #expect(!resume.stdout.contains("resuming task"), "no line per task: \(resume.stdout)")
        let limits = ferry(["events", "--config", box.config, "--json"]).events(named: "agent").filter { $0["action"] as? String == "run-limits" }
        #expect(limits.count == 1, "only the cycle handed over with --bwlimit had it: \(limits)")

        try expectSmallOnceDone(box)
    }

    /// After: every file done, the same small summary; --files and a PATH list the tasks.
    func expectSmallOnceDone(_ box: Sandbox) throws {
        let after = try counts(box)
        #expect(after["done"] == Self.files + 1 && after.filter { $0.key != "done" }.values.allSatisfy { $0 == 0 }, "\(after)")
        let done = box.status()
        #expect(done.stdout.split(separator: "\n").count < 25 && done.stdout.contains("tasks      2,001 done"), "\(done.stdout)")
        expectNarrow(done.stdout)
        #expect(box.statusTasks().count == Self.files + 1)
        let files = box.status(["--files"]).stdout
        expectNarrow(files)
        #expect(files.split(separator: "\n").filter { $0.contains(" done ") }.count == Self.files + 1, "--files: a line per task")
        let part = box.status(["a-directory-with-a-long-name/part-3/"]).stdout
        expectNarrow(part)
        #expect(part.split(separator: "\n").filter { $0.contains(" done ") }.count == Self.files / 10, "PATH: the tasks under it: \(part)")
        let absolute = box.status([box.localPath("a.txt")]).stdout
        #expect(absolute.split(separator: "\n").filter { $0.contains(" done ") }.count == 1 && absolute.contains("a.txt"), "\(absolute)")
    }

    /// Limits no run could have are refused by the agent's control socket, the agent untouched.
    func expectLimitsRefused(_ box: Sandbox) {
        let refuse = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            s.connect(sys.argv[1])
            s.sendall(sys.argv[2].encode() + b'\\n')
            print(s.makefile().readline().strip())
            """
        for bad in [#"{"command":"sync","sessions":"test","transfers":999}"#,
                    #"{"command":"sync","sessions":"test","bwlimit":"fast"}"#] {
            let answer = runProcess("/usr/bin/python3", ["-c", refuse, box.state + "/agent.sock", bad])
            #expect(answer.stdout.contains("handover-refused") && answer.stdout.contains("not a request ferry understands"),
                    "\(bad): \(answer.output)")
        }
    }

    /// The control protocol as the agent speaks it: a client that asks for a bwlimit, a number of
    /// transfers and progress gets the limits echoed, the agent's word that the cycle goes at
    /// them, and progress lines: one file in flight of three (the config allows 4), and twenty
    /// lines (the engine sends at most ten a second) still show most of 6 MiB to come, which an
    /// unlimited transfer over loopback finishes long before. The next cycle goes at the config's
    /// settings again.
    @Test func theAgentRunsAHandedOverCycleAtItsBwlimitAndSendsItsProgress() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("handover-limits", published: server.root)
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: server.url, session: ["poll = 1h"])
        let agent = try AgentTests.RunningAgent(box)
        #expect(eventually { fileContents(box.localPath("a.txt")) == "a\n" }, "\(agent.output)")
        let content = randomData(4 << 20, seed: 38)
        box.publish("big.bin", content)
        for name in ["c.bin", "d.bin"] { box.publish(name, randomData(1 << 20, seed: UInt64(name.utf8.first!))) }
        box.buildManifest()
        let total = (4 << 20) + (2 << 20)

        expectLimitsRefused(box)

        let client = """
            import json, socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(60)
            s.connect(sys.argv[1])
            s.sendall(b'{"command":"sync","sessions":"test","bwlimit":"64K","transfers":1,"progress":true}\\n')
            seen = 0
            for line in s.makefile():
                print(line.strip(), flush=True)
                event = json.loads(line)
                if event.get("event") == "progress" and event.get("active"):
                    seen += 1
                    if seen == 20:
                        break
                if event.get("event") == "handover-done":
                    break
            """
        let run = runProcess("/usr/bin/python3", ["-c", client, box.state + "/agent.sock"], timeout: 90)
        #expect(run.exitCode == 0, "\(run.output)")
        let lines = run.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(lines.first?["event"] as? String == "handover" && lines.first?["accepted"] as? String == "test", "\(run.stdout)")
        #expect(lines.first?["bwlimit"] as? String == "64K" && lines.first?["transfers"] as? Int == 1, "the limits taken are echoed: \(run.stdout)")
        let limitAt = lines.firstIndex { $0["event"] as? String == "agent" && $0["action"] as? String == "run-limits" }
        let progress = lines.filter { $0["event"] as? String == "progress" }
        let firstProgress = lines.firstIndex { $0["event"] as? String == "progress" }
        #expect(limitAt != nil && firstProgress != nil && limitAt! < firstProgress!, "the agent says the cycle's limit first: \(run.stdout)")
        #expect((lines[limitAt ?? 0]["message"] as? String)?.contains("bwlimit 64K and 1 transfer,") == true, "\(run.stdout)")
        let moving = progress.filter { ($0["active"] as? [[String: Any]])?.isEmpty == false }
        #expect(moving.count == 20, "twenty progress lines with the file in flight: \(run.stdout)")
        let last = try #require(moving.last)
        let active = try #require((last["active"] as? [[String: Any]])?.first)
        #expect(active["path"] as? String == "big.bin" && active["size"] as? Int == content.count && last["active_count"] as? Int == 1, "\(last)")
        #expect(last["session"] as? String == "test" && (last["bytes_total"] as? Int ?? 0) == total, "\(last)")
        #expect(moving.allSatisfy { $0["active_count"] as? Int == 1 }, "one transfer at a time: \(moving.map { $0["active_count"] ?? "-" })")
        let done = moving.compactMap { $0["bytes_done"] as? Int }
        #expect(done == done.sorted() && done.last! > 0, "bytes only grow: \(done)")
        #expect(done.last! < total / 2, "held to 64 KiB/s: \(done.last!) of \(total) after 20 progress lines")

        // The client went; the agent goes on at the limit. Status says so, in its summary.
        let status = box.statusText()
        #expect(status.contains("running the session now") && status.contains("big.bin") && status.contains("/4.00 MiB"), "\(status)")
        let cancel = ferry(["cancel", "--config", box.config, "--session", "test"])
        #expect(cancel.stdout == "suspended 3 tasks of session test (resume data kept for 1)\n", "\(cancel.output)")
        let resume = ferry(["resume", "--config", box.config, "--session", "test"])
        #expect(resume.exitCode == 0, "\(resume.output)")
        #expect(resume.stdout.hasPrefix("resuming 3 tasks of session test (1 from its kept offset)\n"), "\(resume.stdout)")
        #expect(!resume.stdout.contains("this cycle goes at"), "the next cycle goes at the config's settings: \(resume.stdout)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("big.bin"))) == content)
        let events = ferry(["events", "--config", box.config, "--json"])
        #expect(events.events(named: "agent").filter { $0["action"] as? String == "run-limits" }.count == 1, "\(events.stdout)")
        #expect(events.events(named: "file-resumed").contains { $0["path"] as? String == "big.bin" }, "resumed from the kept offset")
    }

    /// `ferry sync now --bwlimit` handed to the agent, on a terminal: the same progress bars as a
    /// run of its own (overall and the file), within the terminal's width, the agent's word that
    /// the cycle goes at the limit, and the run's summary.
    @Test func aHandedOverSyncNowDrawsProgressBars() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("handover-tty", published: server.root)
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: server.url, session: ["poll = 1h"])
        let agent = try AgentTests.RunningAgent(box)
        #expect(eventually { fileContents(box.localPath("a.txt")) == "a\n" }, "\(agent.output)")
        let content = randomData(1_500_000, seed: 39)
        box.publish("big.bin", content)
        box.buildManifest()

        let command = "stty cols 80 rows 30; TERM=xterm '\(Harness.ferryBinary)' sync now --config '\(box.config)' --bwlimit 512K"
        let run = runProcess("/usr/bin/script", ["-q", "-e", "-c", command, "/dev/null"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stdout.contains("handing test over to the running agent (pid \(agent.child.pid))"), "\(run.stdout.debugDescription)")
        #expect(run.stdout.contains("ferry agent: test: this cycle goes at bwlimit 512K"), "\(run.stdout.debugDescription)")
        #expect(run.stdout.contains("\u{1B}[2K"), "progress bars were drawn: \(run.stdout.debugDescription)")
        let plain = run.stdout.replacing(/\x1B\[[0-9;]*[A-Za-z]/, with: "")
        let lines = plain.components(separatedBy: CharacterSet.newlines).filter { !$0.isEmpty }
        let bars = lines.filter { $0.contains("[#") || $0.contains("[-") }
        #expect(bars.contains { $0.hasPrefix("test [") && $0.contains("files 0/1") }, "the run's bar: \(lines)")
        #expect(bars.contains { $0.hasPrefix("  [") && $0.hasSuffix("big.bin") }, "the file's bar: \(lines)")
        #expect(bars.allSatisfy { $0.count <= 79 }, "within the terminal: \(bars.filter { $0.count > 79 })")
        #expect(plain.contains("test: in sync — 1 downloaded"), "\(plain)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("big.bin"))) == content)
    }
}

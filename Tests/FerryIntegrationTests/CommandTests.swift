import Foundation
import Testing
import FerryCore

/// The command line itself: help for every command, manifest build, config check, status, and
/// one writer per session.
@Suite(.serialized)
struct CommandTests {
    @Test(arguments: [["help"], ["--help"], ["help", "sync", "now"], ["sync", "now", "--help"], ["help", "status"],
                      ["help", "manifest", "build"], ["config", "check", "--help"], ["help", "help"]])
    func everyCommandHasHelp(arguments: [String]) {
        let run = ferry(arguments)
        #expect(run.exitCode == 0)
        #expect(run.stdout.contains("usage: ferry"))
    }

    @Test func usageErrorsExitTwoWithAHint() {
        let unknown = ferry(["frobnicate"])
        #expect(unknown.exitCode == 2)
        #expect(unknown.stderr.contains("unknown command 'frobnicate'"))
        #expect(unknown.stderr.contains("hint: see: ferry help"))
        let option = ferry(["sync", "now", "--bogus"])
        #expect(option.exitCode == 2)
        #expect(option.stderr.contains("unknown option '--bogus'"))
        let partial = ferry(["sync"])
        #expect(partial.exitCode == 2)
        #expect(partial.stderr.contains("did you mean: ferry sync now?"))
        #expect(ferry(["--version"]).stdout.hasPrefix("ferry "))
        let missing = ferry(["sync", "now", "--config", "/nonexistent/ferry.conf"])
        #expect(missing.exitCode == 2)
        #expect(missing.stderr.contains("cannot read the config file /nonexistent/ferry.conf"))
        let env = ferry(["status"], environment: ["FERRY_CONFIG": "/nonexistent/env.conf"])
        #expect(env.stderr.contains("/nonexistent/env.conf"), "FERRY_CONFIG is honoured")
    }

    @Test func configCheckNamesFileLineAndKey() throws {
        let box = Sandbox("configcheck")
        try "[agent]\nstate = s\n\n[session a]\nremote = https://h/\nlocal = l\npoll = soon\n".writeReplacing(box.config)
        let bad = ferry(["config", "check", "--config", box.config])
        #expect(bad.exitCode == 2)
        #expect(bad.stderr.contains("\(box.config):7: [session a] key 'poll': 'soon' is not a duration"))
        #expect(bad.stderr.contains("hint: write durations like 90s, 15m, 2h or 7d"))
        let sync = box.sync()
        #expect(sync.exitCode == 2, "sync refuses the same config")
        box.configure(remote: "https://mirror.example.net/a/")
        let good = ferry(["config", "check", "--config", box.config])
        #expect(good.exitCode == 0, "\(good.output)")
        #expect(good.stdout.contains("[session test] pull https://mirror.example.net/a/manifest.json"))
    }

    /// config/ferry.conf documents every key the parser knows, and is itself a valid config.
    @Test func shippedConfigDocumentsEveryKey() throws {
        let text = try String(contentsOfFile: Harness.packageRoot + "/config/ferry.conf", encoding: .utf8)
        let keys = ConfigParser.allKeys
        #expect(keys.count >= 25)
        for key in keys { #expect(text.contains("\n\(key) =") || text.contains("# \(key) ="), "config/ferry.conf documents \(key)") }
        // Checked with a state of its own: where a ferry package is installed (or was removed without
        // purge) /var/lib/ferry is the package's, and config check runs as its owner.
        let box = Sandbox("shipped-config")
        guard let line = text.split(separator: "\n", omittingEmptySubsequences: false).first(where: { $0.hasPrefix("state = ") }) else {
            Issue.record("config/ferry.conf sets no state")
            return
        }
        try text.replacingOccurrences(of: line + "\n", with: "state = \(box.state)\n").writeReplacing(box.config)
        let check = ferry(["config", "check", "--config", box.config])
        #expect(check.exitCode == 0, "\(check.output)")
    }

    /// A state database that cannot be opened stops every run: config check finds it, with the fix,
    /// and does not say OK.
    @Test func configCheckOpensTheStateDatabase() throws {
        let box = Sandbox("configcheck-state")
        box.configure(remote: "https://mirror.example.net/a/")
        try FileManager.default.createDirectory(atPath: box.state, withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 8192).write(to: URL(fileURLWithPath: box.state + "/ferry.db"))
        let check = ferry(["config", "check", "--config", box.config])
        #expect(check.exitCode == 2 && !check.stdout.contains("OK"), "\(check.output)")
        #expect(check.stderr.contains("[agent] state = \(box.state): the state database cannot be opened as ") && check.stderr.contains("moved aside"),
                "\(check.output)")
        let sync = box.sync()
        #expect(sync.exitCode != 0, "the run meets the same: \(sync.output)")
        try FileManager.default.removeItem(atPath: box.state + "/ferry.db")
        #expect(ferry(["config", "check", "--config", box.config]).exitCode == 0)
    }

    @Test func manifestBuildListsFilesOnlyAndCountsVersions() throws {
        let box = Sandbox("build")
        box.publish("a.txt", "a")
        box.publish("d/b.txt", "bb", mode: 0o600)
        box.publish(".ferry/partial/9.part", "partial junk")
        try FileManager.default.createSymbolicLink(atPath: box.published + "/link", withDestinationPath: "a.txt")
        let before = Int(time(nil))
        let first = ferry(["manifest", "build", box.published, "--format", "1", "--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        // A first build (a fresh checkout) gets the Unix time, so it rises above any earlier build.
        let v1 = first.events(named: "manifest-built").first?["version"] as? Int ?? 0
        #expect(v1 >= before && v1 <= Int(time(nil)), "\(v1)")
        #expect(first.events(named: "warning").contains { ($0["message"] as? String)?.contains("symlink link") == true })
        let data = try Data(contentsOf: URL(fileURLWithPath: box.published + "/manifest.json"))
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(json["format"] as? String == "ferry-manifest/1")
        let files = try #require(json["files"] as? [[String: Any]])
        #expect(files.map { $0["path"] as? String } == ["a.txt", "d/b.txt"])
        #expect(files[0]["sha256"] as? String == "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb")
        #expect(files[1]["mode"] as? String == "0600")
        #expect(files[1]["size"] as? Int == 2)

        let v2 = ferry(["manifest", "build", box.published, "--json"]).events(named: "manifest-built").first?["version"] as? Int ?? 0
        #expect(v2 > v1, "the next build rises: \(v1) → \(v2)")
        // A lower version is refused (mirrors would refuse it as a rollback) unless allowed, and then said.
        let lower = ferry(["manifest", "build", box.published, "--version", "40"])
        #expect(lower.exitCode == 2 && lower.stderr.contains("lower than version \(v2)") && lower.stderr.contains("--allow-rollback"), "\(lower.output)")
        let allowed = ferry(["manifest", "build", box.published, "--version", "40", "--allow-rollback", "--json"])
        #expect(allowed.events(named: "manifest-built").first?["version"] as? Int == 40)
        #expect(allowed.events(named: "warning").contains { ($0["message"] as? String)?.contains("rollback") == true }, "\(allowed.output)")
        #expect(ferry(["manifest", "build", box.published, "--version", "41", "--json"]).events(named: "manifest-built").first?["version"] as? Int == 41)
        let elsewhere = box.directory + "/out.json"
        let out = ferry(["manifest", "build", box.published, "--output", elsewhere, "--json"])
        #expect(out.events(named: "manifest-built").first?["files"] as? Int == 3, "manifest.json in DIR is listed when the output is elsewhere")
        let noDir = ferry(["manifest", "build"])
        #expect(noDir.exitCode == 2)
        #expect(noDir.stderr.contains("missing the directory to describe"))
    }

    @Test func oneWriterPerSessionAndALeftoverLockIsRecovered() throws {
        let box = Sandbox("busy")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        #expect(box.sync().exitCode == 0)
        // Another process holds the session's lock, as a running ferry would.
        let lock = box.state + "/locks/test.lock"
        let holderScript = """
            import fcntl, os, sys, time
            f = open(sys.argv[1], "r+")
            fcntl.flock(f, fcntl.LOCK_EX)
            f.truncate(0); f.write(str(os.getpid()) + "\\n"); f.flush()
            open(sys.argv[2], "w").write("locked")
            time.sleep(60)
            """
        let ready = box.directory + "/ready"
        let holder = try Child("python3", ["-c", holderScript, lock, ready])
        defer { holder.stop() }
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: ready) && Date() < deadline { usleep(10_000) }
        let busy = box.sync()
        #expect(busy.exitCode == 6, "\(busy.output)")
        #expect(busy.stderr.contains("session 'test' is busy: ferry (pid \(holder.pid))"))
        // The holder dies without unlocking (kill -9): the next run takes over.
        holder.signal(SIGKILL)
        holder.wait(timeout: 5)
        let after = box.sync()
        #expect(after.exitCode == 0, "\(after.output)")
    }

    @Test func statusShowsSessionsAndTasks() throws {
        let box = Sandbox("status")
        box.publish("a.txt", "a\n")
        box.publish("b.txt", "b\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        let never = box.status()
        #expect(never.exitCode == 0)
        #expect(never.stdout.contains("never run"))
        #expect(box.sync().exitCode == 0)
        let table = box.status()
        #expect(table.stdout.hasPrefix("test  pull  idle\n"), "\(table.stdout)")
        #expect(table.stdout.contains("tasks      2 done"), "\(table.stdout)")
        let json = box.status(["--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let sessions = try #require(object["sessions"] as? [[String: Any]])
        #expect(sessions.first?["name"] as? String == "test")
        #expect((sessions.first?["task_counts"] as? [String: Int])?["done"] == 2)
        #expect(sessions.first?["tasks"] == nil, "tasks are listed only when asked: \(json.stdout)")
        #expect((box.statusSessions(["--files"]).first?["tasks"] as? [[String: Any]])?.count == 2)
        #expect(sessions.first?["last_exit_code"] as? Int == 0)
        let unknown = box.status(["--session", "nope"])
        #expect(unknown.exitCode == 2)
        #expect(unknown.stderr.contains("no session 'nope'"))
    }

    /// Two ferry processes opening a state directory that does not exist yet both succeed (creating
    /// the database and switching it to WAL must not fail with "database is locked").
    @Test func concurrentFirstOpensOfTheStateSucceed() throws {
        let box = Sandbox("firstopen")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        for round in 0..<10 {
            try? FileManager.default.removeItem(atPath: box.state)
            try? FileManager.default.removeItem(atPath: box.local)
            let sync = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--quiet"],
                                 stderr: box.directory + "/sync\(round).err")
            let status = box.status()
            #expect(status.exitCode == 0, "round \(round): \(status.stderr)")
            #expect(sync.wait(timeout: 30) == 0, "round \(round): \(fileContents(box.directory + "/sync\(round).err") ?? "")")
        }
    }

    /// A session named twice runs once (it never locks itself out).
    @Test func aSessionNamedTwiceRunsOnce() throws {
        let box = Sandbox("twice")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        let run = box.sync(["--session", "test", "--session", "test", "--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "sync-finished").count == 1)
    }
}

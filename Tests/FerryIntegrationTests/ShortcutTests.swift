import Foundation
import Testing

/// What an rclone or aria2 user reaches for (issue 22, part of §3): short forms of the common
/// options, local times where a time is asked for, a window on the event log, and a SHA256SUMS
/// for consumers without ferry.
@Suite(.serialized)
struct ShortcutTests {
    @Test func shortFormsAreTheLongOptions() throws {
        let box = Sandbox("short-forms")
        box.publish("a.txt", "alpha\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        let dry = box.sync(["-n"])
        #expect(dry.exitCode == 0 && dry.stdout.contains("dry run: would download 1 file"), "\(dry.output)")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("a.txt")), "-n changed nothing")
        let quiet = ferry(["-q", "sync", "now", "--config", box.config])
        #expect(quiet.exitCode == 0 && quiet.stdout.isEmpty && quiet.stderr.isEmpty, "\(quiet.output)")
        #expect(fileContents(box.localPath("a.txt")) == "alpha\n")
        // Only where the command has the long option.
        let status = box.status(["-n"])
        #expect(status.exitCode == 2 && status.stderr.contains("unknown option '-n'"), "\(status.output)")
        #expect(ferry(["help", "sync", "now"]).stdout.contains("(-n)"))
    }

    @Test func notBeforeTakesALocalTimeInTheMachinesZone() throws {
        for (zone, expected) in [("UTC0", "2099-01-01T02:00:00Z"), ("JST-9", "2098-12-31T17:00:00Z")] {
            let box = Sandbox("local-time")
            box.publish("a.txt", "alpha\n")
            box.buildManifest()
            box.configure(remote: "file://" + box.published)
            let run = box.sync(["--not-before", "2099-01-01 02:00", "--json"], environment: ["TZ": zone])
            #expect(run.exitCode == 3, "\(run.output)")
            #expect(run.events(named: "file-delayed").first?["not_before"] as? String == expected, "TZ=\(zone): \(run.output)")
        }
        let box = Sandbox("local-time-bad")
        box.configure(remote: "file://" + box.published)
        for bad in ["2099-02-30 02:00", "2099-01-01 24:00", "2099-1-1 02:00", "tomorrow"] {
            let run = box.sync(["--not-before", bad])
            #expect(run.exitCode == 2 && run.stderr.contains("a local time (2026-11-24 02:00)"), "\(bad): \(run.output)")
        }
    }

    @Test func eventsSinceAndLast() throws {
        let box = Sandbox("events-window")
        box.publish("a.txt", "alpha\n")
        box.publish("b.txt", "bravo\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        #expect(box.sync().exitCode == 0)
        let all = ferry(["events", "--config", box.config, "--session", "test", "--json"])
        #expect(all.exitCode == 0 && all.events.count >= 6, "\(all.output)")
        let last = ferry(["events", "--config", box.config, "--session", "test", "--json", "-n", "2"])
        #expect(last.events.count == 2 && last.events.last?["event"] as? String == "sync-finished", "\(last.output)")
        #expect(last.events.map { $0["time"] as? String } == all.events.suffix(2).map { $0["time"] as? String })
        let recent = ferry(["events", "--config", box.config, "--session", "test", "--json", "--since", "1h"])
        #expect(recent.events.count == all.events.count, "\(recent.output)")
        let future = ferry(["events", "--config", box.config, "--session", "test", "--since", "2099-01-01 00:00"])
        #expect(future.exitCode == 0 && future.stdout.isEmpty, "\(future.output)")
        let bad = ferry(["events", "--config", box.config, "--since", "yesterday"])
        #expect(bad.exitCode == 2 && bad.stderr.contains("--since wants a duration"), "\(bad.output)")

        // --type: only those names, -n counting among them; a name ferry never writes is refused.
        let typed = ferry(["events", "--config", box.config, "--json", "--type", "file-done,sync-finished"])
        let names = typed.events.compactMap { $0["event"] as? String }
        #expect(typed.exitCode == 0 && names.filter { $0 == "file-done" }.count == 2 && names.last == "sync-finished"
                && Set(names) == ["file-done", "sync-finished"], "\(typed.output)")
        let lastDone = ferry(["events", "--config", box.config, "--json", "--type", "file-done", "-n", "1"])
        #expect(lastDone.events.count == 1 && lastDone.events[0]["event"] as? String == "file-done", "\(lastDone.output)")
        let text = ferry(["events", "--config", box.config, "--type", "sync-finished"])
        #expect(text.exitCode == 0 && text.stdout.split(separator: "\n").count == 1 && text.stdout.contains(" test sync-finished "), "\(text.output)")
        let unknown = ferry(["events", "--config", box.config, "--type", "file-done,rolledback"])
        #expect(unknown.exitCode == 2 && unknown.stderr.contains("no event is named 'rolledback'") && unknown.stderr.contains("rolled-back"),
                "\(unknown.output)")
    }

    @Test func manifestBuildWritesSHA256SUMSThatSha256sumChecks() throws {
        let box = Sandbox("sha256sums")
        box.publish("a.txt", "alpha\n")
        box.publish("dir/with space.txt", "space\n")
        box.publish("back\\slash.txt", "backslash\n")
        let run = ferry(["manifest", "build", box.published, "--sha256sums", "--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        let sums = box.published + "/SHA256SUMS"
        #expect(run.events(named: "manifest-built").first?["sha256sums"] as? String == sums)
        let check = runProcess("/bin/sh", ["-c", "cd \"$1\" && sha256sum -c --strict SHA256SUMS", "sh", box.published])
        #expect(check.exitCode == 0 && check.stdout.components(separatedBy: ": OK").count == 4, "\(check.output)")
        // It is not content: a build again lists the same three files.
        let again = ferry(["manifest", "build", box.published, "--sha256sums", "--json"])
        #expect(again.events(named: "manifest-built").first?["files"] as? Int == 3, "\(again.output)")
        #expect(!(fileContents(sums) ?? "").contains("SHA256SUMS") && !(fileContents(sums) ?? "").contains("manifest.json"))
        // And a change shows: sha256sum finds the file that no longer matches.
        try "ALPHA\n".writeReplacing(box.published + "/a.txt")
        #expect(runProcess("/bin/sh", ["-c", "cd \"$1\" && sha256sum -c --quiet SHA256SUMS", "sh", box.published]).exitCode == 1)
    }
}

/// Per-run overrides on `sync now` (issue 22 §3): `--bwlimit` and `--transfers` replace the
/// agent's settings for one run. The bytes take at least as long as the rates allow.
@Suite(.serialized)
struct RunOverrideTests {
    @Test func bwlimitAndTransfersHoldForOneRun() throws {
        let box = Sandbox("overrides")
        box.publish("one.bin", randomData(768 << 10, seed: 3))
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        box.configure(remote: server.url, agent: ["bwlimit = off"])
        // 768 KiB at 256 KiB/s, less the bucket's first 64 KiB: at least 2.75 s.
        var started = Date()
        var run = box.sync(["--bwlimit", "256K"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(Date().timeIntervalSince(started) >= 2.5, "took \(Date().timeIntervalSince(started))s")

        // Three files served at 400 KB/s per connection: one at a time takes three times one.
        for name in ["a", "b", "c"] { box.publish("\(name).bin", randomData(400_000, seed: UInt64(name.utf8.first!))) }
        box.buildManifest()
        server.setFaults(["*": ["rate": 400_000]])
        started = Date()
        run = box.sync(["--transfers", "1"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(Date().timeIntervalSince(started) >= 2.7, "one at a time: took \(Date().timeIntervalSince(started))s")
        expectIdentical(box.published, box.local)

        for bad in [["--transfers", "0"], ["--transfers", "x"], ["--bwlimit", "fast"]] {
            let refused = box.sync(bad)
            #expect(refused.exitCode == 2 && refused.stderr.contains(bad[0]), "\(bad): \(refused.output)")
        }
    }
}

/// `-v` and the agent's `--log-level` / `[agent] log-level` (issue 22 §3).
@Suite(.serialized)
struct VerbosityTests {
    @Test func verboseSaysEachFileAndPlainDoesNot() throws {
        let box = Sandbox("verbose")
        box.publish("a.txt", "alpha\n")
        box.publish("b.txt", "bravo\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        let verbose = box.sync(["-v"])
        #expect(verbose.exitCode == 0, "\(verbose.output)")
        for name in ["a.txt", "b.txt"] {
            #expect(verbose.stdout.contains("test: downloading \(name) (6 B, missing)") && verbose.stdout.contains("test: done \(name) (6 B)"), "\(verbose.output)")
        }
        box.publish("c.txt", "charlie\n")
        box.buildManifest()
        let plain = box.sync()
        #expect(plain.exitCode == 0 && !plain.stdout.contains("c.txt") && plain.stdout.contains("in sync — 1 downloaded"), "\(plain.output)")
        #expect(ferry(["sync", "now", "-v", "-q", "--config", box.config]).stdout.isEmpty, "-q wins: errors only")
    }

    /// One cycle of an agent at `level`: one file arrives, one fails its hash. Returns its output.
    func agentCycle(_ label: String, flag: [String], configured: String?) throws -> String {
        let box = Sandbox(label)
        box.publish("good.txt", "good\n")
        box.publish("bad.txt", "bad!\n")
        box.buildManifest()
        try "BAD!\n".writeReplacing(box.published + "/bad.txt")  // same size, other bytes: fails verification
        box.configure(remote: "file://" + box.published, session: ["retries = 0", "poll = 1h"],
                      agent: configured.map { ["log-level = \($0)"] } ?? [])
        let out = box.directory + "/agent.out"
        let child = try Child(Harness.ferryBinary, ["agent", "--config", box.config] + flag, stdout: out, stderr: out)
        defer { child.stop() }
        #expect(eventually {
            ferry(["events", "--config", box.config, "--session", "test", "--json"]).events(named: "sync-finished").count == 1
        }, "a cycle ran: \(fileContents(out) ?? "")")
        child.signal(SIGTERM)
        #expect(child.wait(timeout: 20) == 0)
        #expect(fileContents(box.localPath("good.txt")) == "good\n")
        // The event log keeps everything whatever the level.
        #expect(ferry(["events", "--config", box.config, "--session", "test", "--json"]).events(named: "file-started").count == 2)
        return fileContents(out) ?? ""
    }

    @Test func theAgentsLogLevelChoosesWhatReachesItsOutput() throws {
        let errors = try agentCycle("log-error", flag: ["--log-level", "error"], configured: "debug")
        #expect(errors.contains("bad.txt") && !errors.contains("good.txt") && !errors.contains("manifest version"), "--log-level wins over the config: \(errors)")
        let info = try agentCycle("log-info", flag: [], configured: nil)
        #expect(info.contains("bad.txt") && info.contains("manifest version") && !info.contains("downloading good.txt"), "\(info)")
        let debug = try agentCycle("log-debug", flag: [], configured: "debug")
        #expect(debug.contains("downloading good.txt") && debug.contains("done good.txt"), "\(debug)")
        let json = try agentCycle("log-json", flag: ["--json", "--log-level", "warning"], configured: nil)
        let names = json.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["event"] as? String
        }
        #expect(!names.isEmpty && Set(names).isSubset(of: ["file-failed", "sync-finished", "session-state", "warning", "agent"]), "\(names)")
        #expect(names.contains("file-failed") && !names.contains("file-done"), "\(names)")
        let bad = ferry(["agent", "--config", "/nonexistent", "--log-level", "loud"])
        #expect(bad.exitCode == 2 && bad.stderr.contains("--log-level is error, warning, info or debug"), "\(bad.output)")
    }
}

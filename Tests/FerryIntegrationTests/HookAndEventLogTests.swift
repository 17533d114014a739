import Foundation
import Testing

/// Hooks run with safe arguments (names reach them only through the environment) and never hold
/// up transfers; every run's events land in the session's bounded event log for `ferry events`.
@Suite(.serialized)
struct HookAndEventLogTests {
    /// A hook script that appends its arguments and FERRY_* environment to `record`, one line per run.
    func recorder(_ box: Sandbox) throws -> (script: String, record: String) {
        let script = box.directory + "/hook.sh"
        let record = box.directory + "/hook.log"
        try """
            #!/bin/sh
            printf 'args=%s|%s session=%s path=%s local=%s bytes=%s result=%s\\n' "$1" "$2" "$FERRY_SESSION" "$FERRY_PATH" "$FERRY_LOCAL" "$FERRY_BYTES" "$FERRY_RESULT" >> '\(record)'
            """.writeReplacing(script, mode: 0o755)
        return (script, record)
    }

    @Test func hooksGetNamesThroughTheEnvironmentNeverAShell() throws {
        let box = Sandbox("hooks")
        let (script, record) = try recorder(box)
        let hostile = "$(touch PWNED); `touch PWNED2` 'q\".txt"
        box.publish(hostile, "evil name\n")
        box.publish("plain.txt", "plain\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published,
                      session: ["on-file-done = \(script) 'two words' $HOME", "on-session-done = \(script) session-done"])
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        let lines = (fileContents(record) ?? "").split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "two files and the session: \(lines)\n\(run.output)")
        #expect(lines.contains("args=two words|$HOME session=test path=\(hostile) local=\(box.local)/\(hostile) bytes=10 result=done"), "\(lines)")
        #expect(lines.contains("args=two words|$HOME session=test path=plain.txt local=\(box.local)/plain.txt bytes=6 result=done"))
        #expect(lines.last == "args=session-done| session=test path= local=\(box.local) bytes=16 result=in-sync", "\(lines)")
        for dir in [box.directory, box.local, FileManager.default.currentDirectoryPath] {
            #expect(!FileManager.default.fileExists(atPath: dir + "/PWNED") && !FileManager.default.fileExists(atPath: dir + "/PWNED2"))
        }
        // Nothing to do next time: no hook runs.
        #expect(box.sync().exitCode == 0)
        #expect((fileContents(record) ?? "").split(separator: "\n").count == 3)
    }

    /// A hook gets ferry's environment but none of its secrets: no AWS keys or tokens, no
    /// systemd credentials directory; what is not a secret (PATH, the operator's own) is kept.
    @Test func hooksGetNoSecretFromFerrysEnvironment() throws {
        let box = Sandbox("hooks-env")
        let dump = box.directory + "/hook.env"
        let script = box.directory + "/env.sh"
        try "#!/bin/sh\nenv > '\(dump)'\n".writeReplacing(script, mode: 0o755)
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["on-session-done = \(script)"])
        let secrets = ["AWS_ACCESS_KEY_ID": "AKIAHOOKTESTEXAMPLE", "AWS_SECRET_ACCESS_KEY": "hook-test-secret-key",
                       "AWS_SESSION_TOKEN": "hook-test-session-token", "AWS_CONTAINER_AUTHORIZATION_TOKEN": "hook-test-container-token",
                       "AWS_PROFILE": "hook-test-profile", "CREDENTIALS_DIRECTORY": "/run/credentials/ferry.service"]
        let run = box.sync(environment: secrets.merging(["HOOK_TEST_KEPT": "kept"]) { a, _ in a })
        #expect(run.exitCode == 0, "\(run.output)")
        let env = try #require(fileContents(dump), "the hook ran: \(run.output)")
        for (name, value) in secrets {
            #expect(!env.contains(name + "=") && !env.contains(value), "\(name) reached the hook: \(env)")
        }
        #expect(env.contains("HOOK_TEST_KEPT=kept\n") && env.contains("PATH=") && env.contains("FERRY_SESSION=test\n"), "\(env)")
    }

    @Test func aFailingOrHangingHookIsReportedAndNeverBlocksTransfers() throws {
        let box = Sandbox("hooks-bad")
        for i in 0..<3 { box.publish("f\(i).txt", "file \(i)\n") }
        box.buildManifest()
        box.configure(remote: "file://" + box.published,
                      session: ["on-file-done = /bin/sh -c 'exit 7'", "on-session-done = /bin/sleep 30", "hook-timeout = 1s"])
        let started = Date()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "a hook's failure is not the sync's: \(run.output)")
        #expect(Date().timeIntervalSince(started) < 15, "the hanging hook was stopped at its timeout")
        for i in 0..<3 { #expect(fileContents(box.localPath("f\(i).txt")) == "file \(i)\n") }
        let warnings = run.events(named: "warning").compactMap { $0["message"] as? String }
        #expect(warnings.filter { $0.contains("hook on-file-done (/bin/sh)") && $0.contains("exited with status 7") }.count == 3, "\(warnings)")
        #expect(warnings.contains { $0.contains("hook on-session-done (/bin/sleep) ran longer than hook-timeout = 1s") }, "\(warnings)")

        box.configure(remote: "file://" + box.published, session: ["on-session-done = /no/such/program"])
        box.publish("f3.txt", "more\n")
        box.buildManifest()
        let missing = box.sync()
        #expect(missing.exitCode == 0)
        #expect(missing.stderr.contains("hook on-session-done (/no/such/program) could not start"), "\(missing.output)")
    }

    @Test func aHookWithAnUnclosedQuoteIsAConfigError() throws {
        let box = Sandbox("hooks-config")
        box.configure(remote: "file://" + box.published, session: ["on-file-done = /bin/echo 'unclosed"])
        let run = ferry(["config", "check", "--config", box.config])
        #expect(run.exitCode == 2)
        #expect(run.stderr.contains("ferry.conf:8: [session test] key 'on-file-done': a ' quote is not closed"), "\(run.stderr)")
    }

    @Test func eventsShowsTheLogAndFollowsIt() throws {
        let box = Sandbox("events")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        #expect(box.sync().exitCode == 0)
        let human = ferry(["events", "--config", box.config])
        #expect(human.exitCode == 0)
        #expect(human.stdout.contains(" test file-done path=a.txt size=2 fetched=2"), "\(human.stdout)")
        #expect(human.stdout.contains(" test sync-finished exit_code=0"))
        let dry = box.sync(["--dry-run"])
        #expect(dry.exitCode == 0)
        #expect(ferry(["events", "--config", box.config, "--json"]).events(named: "sync-started").count == 1, "a dry run logs nothing")

        // --follow prints what comes next, until interrupted.
        let out = box.directory + "/follow.out"
        let follow = try Child(Harness.ferryBinary, ["events", "--config", box.config, "--follow", "--json"], stdout: out)
        #expect(eventually { (fileContents(out) ?? "").contains("\"path\":\"a.txt\"") }, "the log so far was read; new events follow")
        box.publish("b.txt", "b\n")
        box.buildManifest()
        #expect(box.sync().exitCode == 0)
        let deadline = Date().addingTimeInterval(10)
        while !(fileContents(out) ?? "").contains("\"path\":\"b.txt\"") && Date() < deadline { usleep(50_000) }
        follow.signal(SIGINT)
        #expect(follow.wait(timeout: 10) == 0)
        let followed = FerryRun(exitCode: 0, stdout: fileContents(out) ?? "", stderr: "")
        #expect(followed.events(named: "file-done").map { $0["path"] as? String } == ["a.txt", "b.txt"], "\(followed.stdout)")
    }

    @Test func theLogIsBounded() throws {
        let box = Sandbox("events-bound")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        #expect(box.sync().exitCode == 0)
        let log = box.state + "/events/test.jsonl"
        /// Fills the current file to just under the bound with old events marked `marker`.
        func fill(_ marker: String) throws {
            let line = "{\"time\":\"2000-01-01T00:00:00Z\",\"session\":\"test\",\"event\":\"warning\",\"message\":\"\(marker)\"}\n"
            var st = stat()
            stat(log, &st)
            let count = (4 << 20 - Int(st.st_size) - 100) / line.utf8.count
            let handle = try #require(FileHandle(forWritingAtPath: log))
            handle.seekToEndOfFile()
            handle.write(Data(String(repeating: line, count: count).utf8))
            handle.closeFile()
        }
        func resync() {
            try? FileManager.default.removeItem(atPath: box.localPath("a.txt"))
            #expect(box.sync().exitCode == 0)
        }
        try fill("old-1")
        resync()
        #expect(FileManager.default.fileExists(atPath: log + ".1"), "the full file was set aside")
        try fill("old-2")
        resync()
        for path in [log, log + ".1"] {
            var st = stat()
            #expect(stat(path, &st) == 0 && st.st_size <= 4 << 20 && st.st_mode & 0o777 == 0o600)
        }
        let all = ferry(["events", "--config", box.config, "--json"])
        let messages = all.events(named: "warning").compactMap { $0["message"] as? String }
        #expect(!messages.contains("old-1"), "the oldest events were dropped")
        #expect(messages.contains("old-2"))
        #expect(all.events(named: "sync-finished").count == 2, "the first of three runs went with old-1")
        #expect(all.events.last?["event"] as? String == "sync-finished")
    }
}

import Foundation
import Testing
import FerryCore

/// What a new user meets in their first hour: a config check that finds what would fail, errors
/// that name a mistaken scheme, one error per cause instead of one per file, a `~` or quotes in the
/// config, and a SHA256SUMS manifest's unknown sizes.
@Suite(.serialized)
struct FirstHourTests {
    /// `config check` finds, without the network, everything that would make a run fail: a state
    /// path that is a file, a local directory that cannot be made, a missing ca-file, a hook program
    /// that does not exist, a missing metrics directory. All of them, each named with its key.
    @Test func configCheckFindsWhatWouldFail() throws {
        let box = Sandbox("config-check")
        try "not a directory\n".writeReplacing(box.directory + "/statefile")
        try """
            [agent]
            state = \(box.directory)/statefile
            metrics = \(box.directory)/no-such-dir/ferry.prom
            [session a]
            remote = https://127.0.0.1:1/
            local = /etc/hostname/mirror
            ca-file = \(box.directory)/missing-ca.pem
            on-file-done = /nonexistent/reindex --one
            """.writeReplacing(box.config)
        let check = ferry(["config", "check", "--config", box.config])
        #expect(check.exitCode == 2, "\(check.output)")
        for expected in ["state = \(box.directory)/statefile: it is a file", "metrics = \(box.directory)/no-such-dir/ferry.prom: the directory",
                         "local = /etc/hostname/mirror: /etc/hostname is a file", "ca-file = \(box.directory)/missing-ca.pem",
                         "on-file-done: the program /nonexistent/reindex cannot be run", "5 problems"] {
            #expect(check.stderr.contains(expected), "\(expected): \(check.stderr)")
        }
        #expect(!check.stdout.contains("OK"))

        // At run time a missing ca-file is named as missing, not taken for an untrusted server.
        try """
            [agent]
            state = \(box.state)
            [session a]
            remote = https://127.0.0.1:1/
            local = \(box.local)
            ca-file = \(box.directory)/missing-ca.pem
            """.writeReplacing(box.config)
        let run = box.sync()
        #expect(run.exitCode == 2, "\(run.output)")
        #expect(run.stderr.contains("missing-ca.pem") && run.stderr.contains("No such file"), "\(run.stderr)")
        #expect(!run.stderr.contains("if the server uses a private CA"), "\(run.stderr)")
    }

    /// A local directory its user cannot write is found by `config check` (as `nobody`: root writes
    /// anywhere), and a run into it says so once, with a hint, instead of once per file.
    @Test func anUnwritableLocalDirectoryIsOneError() throws {
        let box = Sandbox("unwritable-local")
        for i in 0..<8 { box.publish("f\(i).txt", "\(i)\n") }
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        _ = runProcess("/bin/chown", ["-R", "65534:65534", box.directory])
        chmod(box.directory, 0o755)
        try FileManager.default.createDirectory(atPath: box.local, withIntermediateDirectories: true)
        chown(box.local, 0, 0)
        chmod(box.local, 0o755)
        func asNobody(_ arguments: [String]) -> FerryRun {
            runProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", Harness.ferryBinary] + arguments)
        }
        let check = asNobody(["config", "check", "--config", box.config])
        #expect(check.exitCode == 2 && check.stderr.contains("local = \(box.local): cannot write there"), "\(check.output)")
        let run = asNobody(["sync", "now", "--config", box.config])
        #expect(run.exitCode == 5, "\(run.output)")
        let errors = run.stderr.split(separator: "\n").filter { $0.hasPrefix("ferry: error") || $0.contains("Permission denied") }
        #expect(errors.count == 1, "one error for the one cause: \(run.stderr)")
        #expect(run.stderr.contains("hint:"), "\(run.stderr)")
    }

    /// A push to a server that takes no WebDAV writes is one error, with the hint, not one per
    /// file; the agent calls it failed, not waiting for connectivity.
    @Test(arguments: [true, false])
    func aServerWithoutWebDAVIsOneError(plain: Bool) throws {
        let box = Sandbox("no-webdav")
        let remoteDir = box.directory + "/remote"
        try FileManager.default.createDirectory(atPath: remoteDir, withIntermediateDirectories: true)
        let server = try PythonServer(directory: remoteDir, plain: plain)
        defer { server.stop() }
        try FileManager.default.createDirectory(atPath: box.directory + "/src", withIntermediateDirectories: true)
        for i in 0..<6 { try "\(i)\n".writeReplacing(box.directory + "/src/f\(i).txt") }
        try """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = \(server.url)
            local = \(box.directory)/src
            """.writeReplacing(box.config)
        let run = box.sync(["--session", "up"])
        #expect(run.exitCode == 4, "\(run.output)")
        let lines = run.stderr.split(separator: "\n").filter { $0.contains("HTTP 405") || $0.contains("HTTP 501") }
        #expect(lines.count == 1, "one error: \(run.stderr)")
        #expect(run.stderr.contains("does not accept WebDAV writes"), "\(run.stderr)")
    }

    /// `https://` to a port that speaks plain HTTP, and `http://` to one that speaks TLS, are
    /// mistakes no retry cures: said at once, with a hint that names the scheme.
    @Test func aMistakenSchemeIsNamedAndNotRetried() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("wrong-scheme", published: nginx.root)
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "https://127.0.0.1:\(nginx.port)/", session: ["retries = 3", "retry-delay = 2s"])
        let started = Date()
        let tls = box.sync(["--json"])
        #expect(tls.exitCode == 4, "\(tls.output)")
        #expect(tls.events(named: "manifest-retrying").isEmpty, "not retried: \(tls.output)")
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(tls.stdout.contains("use http://"), "\(tls.output)")
        box.configure(remote: "http://127.0.0.1:\(nginx.tlsPort)/")
        let plain = box.sync()
        #expect(plain.exitCode == 4, "\(plain.output)")
        #expect(plain.stderr.contains("use https://"), "\(plain.stderr)")
    }

    /// `~` is not expanded (a service may run with another HOME): refused with the absolute path
    /// to write instead. A value in quotes means what is inside them.
    @Test func aTildeIsRefusedAndQuotesAreUnderstood() throws {
        let box = Sandbox("tilde-quotes")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        try "[agent]\nstate = \(box.state)\n[session t]\nremote = file://\(box.published)\nlocal = ~/mirror\n".writeReplacing(box.config)
        let tilde = ferry(["config", "check", "--config", box.config])
        #expect(tilde.exitCode == 2 && tilde.stderr.contains("starts with ~") && tilde.stderr.contains("/home/you/mirror"), "\(tilde.output)")
        try "[agent]\nstate = \"\(box.state)\"\n[session t]\nremote = \"file://\(box.published)\"\nlocal = '\(box.local)'\n".writeReplacing(box.config)
        let quoted = box.sync()
        #expect(quoted.exitCode == 0, "\(quoted.output)")
        #expect(fileContents(box.localPath("a.txt")) == "a\n")
    }

    /// A SHA256SUMS manifest gives no sizes: the plan says the size is unknown, not 0 B.
    @Test func sizesASHA256SUMSManifestDoesNotGiveAreUnknown() throws {
        let box = Sandbox("sums-size")
        box.publish("a.txt", "a\n")
        box.publish("b.txt", "b\n")
        #expect(runProcess("/bin/sh", ["-c", "cd '\(box.published)' && sha256sum a.txt b.txt > SHA256SUMS"]).exitCode == 0)
        box.markRepublished("SHA256SUMS")
        box.configure(remote: "file://" + box.published, session: ["manifest = SHA256SUMS"])
        let run = box.sync(["--dry-run"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stdout.contains("2 to download (size unknown"), "\(run.stdout)")
        #expect(!run.stdout.contains("(0 B)"), "\(run.stdout)")
    }

    /// Global options come before the command too, `ferry help version` and `version --json`
    /// work, and counted nouns are singular for one.
    @Test func commandLineConventions() throws {
        let box = Sandbox("cli")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        let before = ferry(["--config", box.config, "status"])
        #expect(before.exitCode == 0 && before.stdout.hasPrefix("test  pull  idle") && before.stdout.contains("never run"), "\(before.output)")
        let json = ferry(["--json", "--config", box.config, "sync", "now"])
        #expect(json.exitCode == 0 && !json.events(named: "sync-finished").isEmpty, "\(json.output)")
        #expect(ferry(["help", "version"]).stdout.contains("usage: ferry version"))
        let version = ferry(["version", "--json"])
        #expect(version.exitCode == 0 && (try? JSONSerialization.jsonObject(with: Data(version.stdout.utf8)) as? [String: Any])?["version"] != nil,
                "\(version.output)")
        box.publish("b.txt", "b\n")
        box.buildManifest()
        let one = box.sync()
        #expect(one.stdout.contains("1 to download") && one.stdout.contains("2 files from"), "\(one.stdout)")
        #expect(!one.output.contains("1 files"), "\(one.output)")
    }

    /// `status` stays within 80 columns (a failing session's long error wraps under its label,
    /// cut short unless -v), says times in the local time zone to the second, and `status
    /// --json` gives the state as fields, its times in RFC 3339 UTC.
    @Test func statusIsNarrowAndStructured() throws {
        let box = Sandbox("status-narrow")
        box.configure(remote: "http://127.0.0.1:1/" + String(repeating: "very-long-path-segment/", count: 10), session: ["retries = 0"])
        let failed = box.sync()
        #expect(failed.exitCode == 4)
        // UTC+05:30 (POSIX writes the offset west of UTC): not the zone of the machine running this.
        let zone = ["TZ": "XYZ-5:30"]
        let status = ferry(["status", "--config", box.config], environment: zone)
        let lines = status.stdout.split(separator: "\n")
        #expect(lines.allSatisfy { $0.count <= 80 }, "narrow: \(status.stdout)")
        #expect(lines.contains { $0.hasSuffix("…") } && status.stdout.contains("(cut short: -v says all of it"), "cut, and says so: \(status.stdout)")
        let whole = ferry(["status", "--config", box.config, "-v"], environment: zone).stdout
        #expect(whole.split(separator: "\n").allSatisfy { $0.count <= 80 }, "-v wraps, still narrow: \(whole)")
        let unwrapped = whole.replacingOccurrences(of: "\n" + String(repeating: " ", count: 13), with: " ")
        #expect(unwrapped.contains(", exit 4: cannot fetch the manifest") && unwrapped.contains("very-long-path-segment/manifest.json"),
                "the why, in full: \(whole)")
        let json = try JSONSerialization.jsonObject(with: Data(box.status(["--json"]).stdout.utf8)) as? [String: Any]
        let session = (json?["sessions"] as? [[String: Any]])?.first ?? [:]
        #expect(session["state"] as? String == "idle" && session.keys.contains("running_pid") && session.keys.contains("state_detail"), "\(session)")
        // The run's end, as --json says it (UTC), is what the human line says in the local zone.
        let finished = try #require((session["last_run_finished"] as? String).flatMap(Timestamp.init(rfc3339:)))
        #expect(session["last_run_finished"] as? String == finished.rfc3339 && finished.rfc3339.hasSuffix("Z"))
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(secondsFromGMT: 5 * 3600 + 1800)
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        let local = formatter.string(from: Date(timeIntervalSince1970: Double(finished.seconds)))
        #expect(status.stdout.contains("last run   \(local), exit 4"), "local time, to the second: \(local) in \(status.stdout)")
        #expect(status.stdout.firstMatch(of: /\d\d:\d\d:\d\d(\.\d+)?Z/) == nil, "no UTC times for people: \(status.stdout)")
    }

    /// `check --json` ends each session with a `check-finished` event of its own (never a
    /// sync's), also when the session cannot be checked.
    @Test func checkHasItsOwnEvents() throws {
        let box = Sandbox("check-events")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        let never = ferry(["check", "--config", box.config, "--json"])
        #expect(never.exitCode == 2, "\(never.output)")
        #expect(never.events(named: "sync-finished").isEmpty && never.events(named: "check-finished").first?["exit_code"] as? Int == 2, "\(never.stdout)")
        #expect(box.sync().exitCode == 0)
        let fine = ferry(["check", "--config", box.config, "--json"])
        #expect(fine.events(named: "check-finished").first?["exit_code"] as? Int == 0, "\(fine.stdout)")
    }

    /// Under systemd, stderr is the journal (`JOURNAL_STREAM` names it): `sync now` prefixes its
    /// lines with priorities, so `journalctl -p err` finds its errors.
    @Test func syncNowSpeaksToTheJournalWithPriorities() throws {
        let box = Sandbox("journal")
        box.configure(remote: "file://" + box.published + "/missing", session: ["retries = 0"])
        let err = box.directory + "/journal"
        try "".writeReplacing(err)
        var st = stat()
        #expect(stat(err, &st) == 0)
        let script = "exec \"$0\" sync now --config \"$1\" 2>> \"$2\""
        let run = runProcess("/bin/sh", ["-c", script, Harness.ferryBinary, box.config, err],
                             environment: ["JOURNAL_STREAM": "\(st.st_dev):\(st.st_ino)"])
        #expect(run.exitCode == 4)
        let journal = fileContents(err) ?? ""
        #expect(journal.split(separator: "\n").contains { $0.hasPrefix("<3>ferry: error") }, "\(journal)")
    }
}

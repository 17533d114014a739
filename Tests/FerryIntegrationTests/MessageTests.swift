import Foundation
import Testing

/// Messages that say what happened: a failed run says so and why, once; a dry run shows its plan
/// and never claims to be in sync; a run refused as busy leaves the running one's status alone;
/// help lists a group's commands; a mistyped option gets a suggestion.
@Suite(.serialized)
struct MessageTests {
    func count(_ needle: String, in haystack: String) -> Int { haystack.components(separatedBy: needle).count - 1 }

    @Test func aFailedRunSaysSoOnce() throws {
        let box = Sandbox("failed-once")
        box.configure(remote: "http://127.0.0.1:\(freePort())/", session: ["connect-timeout = 2s", "retries = 0"])
        let run = box.sync()
        #expect(run.exitCode == 4)
        #expect(count("cannot fetch the manifest", in: run.output) == 1, "\(run.output)")
        #expect(run.stderr.contains("ferry: error: test: failed: cannot fetch the manifest"), "\(run.stderr)")
        #expect(count("hint: check that the remote is up", in: run.output) == 1)
        #expect(!run.output.contains("nothing to transfer") && !run.output.contains("in sync"), "\(run.output)")
        let quiet = box.sync(["--quiet"])
        #expect(quiet.stdout.isEmpty)
        #expect(count("cannot fetch the manifest", in: quiet.stderr) == 1, "--quiet still says why: \(quiet.stderr)")
        let json = box.sync(["--json"])
        let finished = json.events(named: "sync-finished").first
        #expect(finished?["exit_code"] as? Int == 4)
        #expect((finished?["message"] as? String)?.contains("cannot fetch the manifest") == true)
        #expect((finished?["hint"] as? String)?.contains("check that the remote is up") == true)
    }

    @Test func aDryRunPrintsThePlanAndChangesNothing() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("dry-run", published: nginx.root + "/site")
        for i in 0..<4 { box.publish("f\(i).txt", "\(i)\n") }
        box.publish("a/x", "a file\n")
        box.publish("changed.txt", "old\n")
        box.buildManifest()
        box.configure(remote: nginx.url + "site/", session: ["delete = yes"])
        #expect(box.sync().exitCode == 0)
        box.publish("new.txt", "new\n")
        box.publish("changed.txt", "new content\n")
        box.unpublish("a/x")
        box.publish("a/x/inside.txt", "now a directory\n")
        box.unpublish("f0.txt")
        box.buildManifest()
        let before = treeSnapshot(box.local)

        let run = box.sync(["--dry-run"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stdout.contains("would download new.txt (4 B, missing)"), "\(run.stdout)")
        #expect(run.stdout.contains("would download changed.txt (12 B, changed)"))
        #expect(run.stdout.contains("would replace a/x (a file is where the manifest needs a directory)"))
        #expect(run.stdout.contains("would delete f0.txt"))
        #expect(run.stdout.contains("dry run: would download 3 files"), "\(run.stdout)")
        #expect(run.stdout.contains("replace 1") && run.stdout.contains("delete 1") && run.stdout.contains("nothing was changed"))
        #expect(!run.stdout.contains("in sync"), "\(run.stdout)")
        #expect(treeSnapshot(box.local) == before)

        // What a cap would refuse is in the plan too.
        for i in 1..<4 { box.unpublish("f\(i).txt") }
        box.buildManifest()
        box.configure(remote: nginx.url + "site/", session: ["delete = yes", "max-delete = 40%"])
        let capped = box.sync(["--dry-run"])
        #expect(capped.stdout.contains("would keep (deleting it is refused by max-delete) f1.txt"), "\(capped.stdout)")
        #expect(capped.stdout.contains("max-delete = 40% would refuse 4 deletions (2 of 6 files allowed)"), "\(capped.stdout)")
        let json = box.sync(["--dry-run", "--json"])
        let items = json.events(named: "plan-item")
        #expect(items.contains { $0["action"] as? String == "download" && $0["path"] as? String == "new.txt" && $0["size"] as? Int == 4 })
        #expect(items.contains { $0["action"] as? String == "refused-delete" && $0["path"] as? String == "f0.txt" })
        #expect(json.events(named: "sync-finished").first?["dry_run"] as? Bool == true)
        #expect(treeSnapshot(box.local) == before)
    }

    /// A second ferry for a busy session exits 6 and leaves the first one's status as it was.
    @Test func aBusyRunLeavesTheStatusAlone() throws {
        let box = Sandbox("busy-status")
        box.publish("slow.bin", randomData(3_000_000, seed: 9))
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/slow.bin": ["rate": 400_000]])
        box.configure(remote: server.url)
        let first = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config])
        defer { first.stop() }
        box.waitForStatus(containing: "  process    pid \(first.pid)")
        let busy = box.sync()
        #expect(busy.exitCode == 6, "\(busy.output)")
        #expect(busy.stderr.contains("pid \(first.pid)"), "names the holder: \(busy.stderr)")
        let status = box.status(["--json"])
        #expect(status.stdout.contains("\"state\":\"running\"") && status.stdout.contains("\"running_pid\":\(first.pid)"), "structured: \(status.stdout)")
        #expect(status.stdout.contains("\"last_exit_code\":null"), "the busy run recorded nothing: \(status.stdout)")
        first.signal(SIGTERM)
        #expect(first.wait(timeout: 20) == 3)
    }

    @Test(arguments: [(["help", "sync"], "sync now"), (["help", "manifest"], "manifest build"), (["help", "config"], "config check"),
                      (["sync", "--help"], "sync now"), (["manifest", "-h"], "manifest build")])
    func helpListsAGroupsCommands(arguments: [String], command: String) {
        let run = ferry(arguments)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stdout.contains("usage: ferry \(arguments.first == "help" ? arguments[1] : arguments[0]) COMMAND"), "\(run.stdout)")
        #expect(run.stdout.contains("  \(command) "), "\(run.stdout)")
    }

    @Test func mistypedOptionsAndCommandsGetASuggestion() {
        let option = ferry(["sync", "now", "--dryrun"])
        #expect(option.exitCode == 2)
        #expect(option.stderr.contains("unknown option '--dryrun'") && option.stderr.contains("did you mean '--dry-run'?"), "\(option.stderr)")
        let session = ferry(["status", "--sesion", "x"])
        #expect(session.stderr.contains("did you mean '--session'?"), "\(session.stderr)")
        let command = ferry(["stauts"])
        #expect(command.exitCode == 2)
        #expect(command.stderr.contains("did you mean 'status'?"), "\(command.stderr)")
        let sub = ferry(["sync", "later"])
        #expect(sub.stderr.contains("'ferry sync' has no subcommand 'later'") && sub.stderr.contains("ferry sync now"), "\(sub.stderr)")
    }
}

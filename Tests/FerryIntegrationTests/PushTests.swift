import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Push (issue 9): a local tree published to nginx WebDAV (and to a file:// directory), then pulled
/// by a second session into another directory, byte for byte; the next run publishes adds,
/// changes and deletes; the manifest comes last, and nothing is left under .ferry/ on the remote.
@Suite(.serialized)
struct PushTests {
    /// Files with names that need care, an empty file, and two larger ones: hashed as they are
    /// sent in 1 MiB pieces, on the engine's thread (below 8 MiB) and on a hashing thread.
    static let files: [(String, Data)] = [
        ("index.html", Data("<h1>hello</h1>\n".utf8)),
        ("empty", Data()),
        ("with space/ümlaut #1.txt", Data("unicode and a hash sign\n".utf8)),
        ("deep/a/b/c/quote'and\"double.txt", Data("quotes\n".utf8)),
        ("mid.bin", randomData(3_000_000, seed: 31)),
        ("big.bin", randomData(9_000_000, seed: 32)),
    ]

    func write(_ root: String, _ path: String, _ data: Data) {
        let full = root + "/" + path
        try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try! data.write(to: URL(fileURLWithPath: full))
    }

    /// Every regular file under `root` (outside .ferry/), by relative path.
    func tree(_ root: String) -> [String: Data] {
        var out: [String: Data] = [:]
        let e = FileManager.default.enumerator(atPath: root)!
        while let p = e.nextObject() as? String {
            if p == ".ferry" || p.hasPrefix(".ferry/") { continue }
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: root + "/" + p, isDirectory: &isDir), !isDir.boolValue {
                out[p] = FileManager.default.contents(atPath: root + "/" + p)
            }
        }
        return out
    }

    func config(_ box: Sandbox, remote: String, agent: String = "", up: String = "") throws {
        try """
            [agent]
            state = \(box.state)
            \(agent)
            [session up]
            \(up)
            direction = push
            remote = \(remote)
            local = \(box.directory)/src
            delete = yes
            [session down]
            remote = \(remote)
            local = \(box.directory)/dst
            delete = yes
            """.writeReplacing(box.config)
    }

    /// `ferry sync now --session up` in the background, its stdout in push.out and stderr in push.err.
    func startPush(_ box: Sandbox, _ extra: [String] = []) throws -> Child {
        try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--session", "up"] + extra,
                  stdout: box.directory + "/push.out", stderr: box.directory + "/push.err")
    }

    /// What the background push printed: stdout, then stderr.
    func pushOutput(_ box: Sandbox) -> String {
        (fileContents(box.directory + "/push.out") ?? "") + (fileContents(box.directory + "/push.err") ?? "")
    }

    func pushThenPull(_ box: Sandbox, remoteRoot: String) {
        let src = box.directory + "/src", dst = box.directory + "/dst"
        let up = box.sync(["--session", "up"])
        #expect(up.exitCode == 0, "\(up.output)")
        #expect(up.output.contains("uploaded"), "\(up.output)")
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "\(down.output)")
        #expect(tree(dst) == tree(src), "the pull mirrors what was pushed, byte for byte")
        #expect(tree(remoteRoot).keys.sorted() == (tree(src).keys + ["manifest.json"]).sorted(), "the remote holds the files and the manifest, nothing else")
        let leftovers = (try? FileManager.default.contentsOfDirectory(atPath: remoteRoot + "/.ferry/upload")) ?? []
        #expect(leftovers.isEmpty, "no temporary upload is left: \(leftovers)")
    }

    func publishesAndFollows(remote: String, remoteRoot: String, label: String) throws {
        let box = Sandbox(label)
        let src = box.directory + "/src"
        for (path, data) in Self.files { write(src, path, data) }
        try config(box, remote: remote)
        let started = unixSeconds()
        pushThenPull(box, remoteRoot: remoteRoot)
        let v1 = try #require(manifestVersion(remoteRoot + "/manifest.json"))
        #expect(v1 >= started, "a first push's version is not below the clock (a wiped remote must not restart at 1)")
        let summary = box.statusText(["--session", "up"])
        #expect(summary.hasPrefix("up  push  ") && summary.contains("manifest   v\(v1)") && summary.contains(", exit 0"),
                "status shows the direction and the version published: \(summary)")
        // Every done upload's task row holds the hash of what was sent (hashed as it went, not before).
        let status = try JSONSerialization.jsonObject(with: Data(box.status(["--json", "--files"]).stdout.utf8)) as? [String: Any]
        let up = (status?["sessions"] as? [[String: Any]])?.first { $0["name"] as? String == "up" }
        let rows = up?["tasks"] as? [[String: Any]] ?? []
        #expect(rows.count == Self.files.count)
        for (path, data) in Self.files {
            let row = rows.first { $0["path"] as? String == path }
            #expect(row?["state"] as? String == "done" && row?["sha256"] as? String == sha256(of: data).hex, "\(path): \(row ?? [:])")
        }

        // Adds, changes and deletes reach the remote with the next run, as a higher version.
        write(src, "index.html", Data("<h1>changed</h1>\n".utf8))
        write(src, "new/file.txt", Data("new\n".utf8))
        try FileManager.default.removeItem(atPath: src + "/deep")
        pushThenPull(box, remoteRoot: remoteRoot)
        let v2 = try #require(manifestVersion(remoteRoot + "/manifest.json"))
        #expect(v2 > v1)
        #expect(!FileManager.default.fileExists(atPath: box.directory + "/dst/deep/a/b/c/quote'and\"double.txt"))
        let taskPaths = (box.status(["--json", "--files"]).stdout.matches(of: /"path":"([^"]*)"/)).map { String($0.1) }
        #expect(!taskPaths.contains { $0.hasPrefix("deep/") } && taskPaths.contains("new/file.txt"), "tasks of deleted files go: \(taskPaths)")

        // Nothing changed: nothing is sent and no new manifest is published.
        let again = box.sync(["--session", "up"])
        #expect(again.exitCode == 0 && again.output.contains("nothing to transfer"), "\(again.output)")
        #expect(manifestVersion(remoteRoot + "/manifest.json") == v2)

        // What a manifest cannot list is skipped with a warning (names escaped), never published.
        try FileManager.default.createSymbolicLink(atPath: src + "/link", withDestinationPath: "index.html")
        write(src, "bad\nname", Data("x".utf8))
        let skipping = box.sync(["--session", "up"])
        #expect(skipping.exitCode == 0, "\(skipping.output)")
        #expect(skipping.output.contains("skipped symlink link") && skipping.output.contains("skipped bad\\nname"), "\(skipping.output)")
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/link") && !FileManager.default.fileExists(atPath: remoteRoot + "/bad\nname"))
    }

    /// A remote to push to: nginx's DAV module, Apache mod_dav, or a local directory.
    final class PushRemote {
        let url: String
        let root: String
        private let nginx: NginxServer?
        private let apache: ApacheServer?

        init(_ kind: String) throws {
            switch kind {
            case "nginx":
                nginx = try NginxServer()
                apache = nil
                root = nginx!.root + "/site"
                try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
                url = nginx!.url + "site/"
            case "apache":
                apache = try ApacheServer()
                nginx = nil
                try apache!.makeDirectory("site")
                root = apache!.root + "/site"
                url = apache!.url + "site/"
            default:
                nginx = nil
                apache = nil
                root = Harness.temporaryDirectory("push-file-remote")
                url = "file://" + root + "/"
            }
        }

        deinit {
            nginx?.stop()
            apache?.stop()
            if nginx == nil && apache == nil { Harness.remove(root) }
        }
    }

    @Test(arguments: ["nginx", "apache", "file"])
    func publishesALocalTreeThatAPullMirrors(kind: String) throws {
        let remote = try PushRemote(kind)
        try publishesAndFollows(remote: remote.url, remoteRoot: remote.root, label: "push-\(kind)")
    }

    /// kill -9 in the middle of an upload: nothing partial is ever under a final name, the next run
    /// completes the push, and the temporary upload the killed run left is removed.
    @Test(arguments: ["nginx", "apache", "file"])
    func aPushKilledMidUploadLeavesNoPartialFileAndTheNextRunCompletes(kind: String) throws {
        let pushRemote = try PushRemote(kind)
        let remoteRoot = pushRemote.root
        let remote = pushRemote.url
        let box = Sandbox("push-kill-\(kind)")
        let src = box.directory + "/src"
        let big = randomData(6_000_000, seed: 41)
        write(src, "small.txt", Data("small\n".utf8))
        write(src, "big.bin", big)
        // Slowed down so the kill lands mid-upload: 6 MB at 1 MiB/s.
        try config(box, remote: remote, agent: "bwlimit = 1M")
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--session", "up"],
                              stdout: box.directory + "/out", stderr: box.directory + "/err")
        #expect(box.waitForRunningTask(session: "up"), "the upload began: \(fileContents(box.directory + "/err") ?? "")")
        if kind == "file" {
            #expect(eventually { ((try? FileManager.default.contentsOfDirectory(atPath: remoteRoot + "/.ferry/upload")) ?? []).contains { name in
                var st = stat()
                return lstat(remoteRoot + "/.ferry/upload/" + name, &st) == 0 && st.st_size > 0
            } }, "bytes reached the temporary upload")
        }
        #expect(child.isRunning, "still uploading: \(fileContents(box.directory + "/err") ?? "")")
        child.signal(SIGKILL)
        _ = child.wait(timeout: 10)
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/big.bin"), "no partial upload under its final name")
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/manifest.json"), "no manifest before every upload is done")
        #expect(box.status().stdout.contains("running"), "the task table knows the upload was in flight: \(box.status().stdout)")
        if kind == "file" {
            // file:// keeps what was written of the temporary upload; the next run removes it.
            let partial = (try? FileManager.default.contentsOfDirectory(atPath: remoteRoot + "/.ferry/upload")) ?? []
            #expect(!partial.isEmpty, "the killed run left its temporary upload")
        }

        try config(box, remote: remote)
        pushThenPull(box, remoteRoot: remoteRoot)
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/big.bin") == big)
    }

    /// A pull that runs while a push is in progress reads the old manifest: a file already moved
    /// into place with new bytes fails its hash check, so the pull never exits 0 on a mixed tree
    /// and never places a file that does not match the manifest it read.
    @Test func aPullDuringAPushNeverExitsZeroOnAMixedTree() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let remoteRoot = server.root + "/site"
        try FileManager.default.createDirectory(atPath: remoteRoot, withIntermediateDirectories: true)
        let box = Sandbox("push-during")
        let src = box.directory + "/src"
        write(src, "a.txt", Data("a, version 1\n".utf8))
        write(src, "big.bin", randomData(3_000_000, seed: 51))
        try config(box, remote: server.url + "site/")
        pushThenPull(box, remoteRoot: remoteRoot)

        // Version 2: a small change that lands at once, and a large one held back by bwlimit.
        write(src, "a.txt", Data("a, version 2\n".utf8))
        let big2 = randomData(5_000_000, seed: 52)
        write(src, "big.bin", big2)
        try config(box, remote: server.url + "site/", up: "bwlimit = 1M")
        let push = try startPush(box)
        #expect(eventually(10) { fileContents(remoteRoot + "/a.txt") == "a, version 2\n" }, "a.txt was moved into place first")
        #expect(push.isRunning, "big.bin is still on its way")

        // A fresh pull now reads manifest version 1 with a.txt's new bytes on the remote.
        try (fileContents(box.config)! + "\n[session fresh]\nremote = \(server.url)site/\nlocal = \(box.directory)/fresh\n").writeReplacing(box.config)
        let during = box.sync(["--session", "fresh"])
        #expect(during.exitCode != 0, "a mixed tree is never in sync: \(during.output)")
        #expect(fileContents(box.directory + "/fresh/a.txt") == nil, "a file that does not match the manifest read is never placed")

        #expect(push.wait(timeout: 30) == 0, "\(fileContents(box.directory + "/push.err") ?? "")")
        let after = box.sync(["--session", "fresh"])
        #expect(after.exitCode == 0, "\(after.output)")
        #expect(fileContents(box.directory + "/fresh/a.txt") == "a, version 2\n")
        #expect(FileManager.default.contents(atPath: box.directory + "/fresh/big.bin") == big2)
    }

    /// The hash cache holds rows for the files the source has: the rows of deleted files go at
    /// the next scan (a state that grew with every file ever pushed slowed every scan), even when
    /// `max-delete` refuses their deletion on the remote — which a run with nothing else to do
    /// says, with exit 1, as any other run does.
    @Test func theHashCacheForgetsDeletedFiles() throws {
        let remoteRoot = Harness.temporaryDirectory("push-cache-rows-remote")
        defer { Harness.remove(remoteRoot) }
        let box = Sandbox("push-cache-rows")
        let src = box.directory + "/src"
        for i in 0..<6 { write(src, "d/f\(i).txt", Data("file \(i)\n".utf8)) }
        try config(box, remote: "file://" + remoteRoot)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        func rows() throws -> Int { try StateStore(directory: box.state, clock: SystemClock()).hashCacheCount(session: "up") }
        #expect(try rows() == 6)
        for i in 0..<4 { try FileManager.default.removeItem(atPath: src + "/d/f\(i).txt") }
        let refused = box.sync(["--session", "up"])
        #expect(refused.exitCode == 1 && refused.output.contains("refused to delete 4 files on the remote"), "\(refused.output)")
        #expect(FileManager.default.fileExists(atPath: remoteRoot + "/d/f0.txt"))
        #expect(try rows() == 2, "the rows of the 4 deleted files are gone")
        try config(box, remote: "file://" + remoteRoot, up: "max-delete = 100%")
        let run = box.sync(["--session", "up"])
        #expect(run.exitCode == 0 && run.output.contains("4 deleted"), "\(run.output)")
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/d/f0.txt"))
        #expect(try rows() == 2)
    }

    /// A running agent polls a push session like a pull session: a local change is published
    /// within its poll.
    @Test func aRunningAgentPublishesLocalChanges() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let remoteRoot = server.root + "/site"
        try FileManager.default.createDirectory(atPath: remoteRoot, withIntermediateDirectories: true)
        let box = Sandbox("push-agent")
        let src = box.directory + "/src"
        write(src, "a.txt", Data("one\n".utf8))
        let prom = box.directory + "/ferry.prom"
        try config(box, remote: server.url + "site/", agent: "metrics = \(prom)", up: "poll = 1s")
        let agent = try AgentTests.RunningAgent(box)
        #expect(eventually { fileContents(remoteRoot + "/a.txt") == "one\n" }, "\(agent.output)")
        #expect(eventually { fileContents(prom)?.contains("ferry_transferred_files_total{session=\"up\",direction=\"push\"} 1") == true },
                "uploads are counted as such: \(fileContents(prom) ?? "")")
        // Settled: the agent polls the remote's manifest, but neither scans nor plans.
        let log = box.state + "/events/up.jsonl"
        func count(_ event: String) -> Int { (fileContents(log) ?? "").components(separatedBy: "\"event\":\"\(event)\"").count - 1 }
        #expect(eventually { count("sync-finished") >= 2 }, "\(agent.output)")
        let (planned, finished) = (count("planned"), count("sync-finished"))
        #expect(eventually { count("sync-finished") >= finished + 2 }, "it kept polling")
        #expect(count("planned") == planned, "no scan while nothing changed: \(count("planned")) vs \(planned)")

        let first = try #require(manifestVersion(remoteRoot + "/manifest.json"))
        write(src, "b/c.txt", Data("two\n".utf8))
        _ = eventually { fileContents(remoteRoot + "/manifest.json")?.contains("b/c.txt") == true }
        #expect(fileContents(remoteRoot + "/b/c.txt") == "two\n", "\(agent.output)")
        #expect((manifestVersion(remoteRoot + "/manifest.json") ?? 0) > first)
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    /// Uploads draw the same progress bars as downloads on a terminal, and hooks and the event
    /// log see the same events (file-started, file-done, sync-finished) for the push session. The
    /// remote's directory (site/) does not exist yet: the push makes it, as a file:// push does.
    @Test func uploadsShowProgressAndReachHooks() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("push-tty")
        write(box.directory + "/src", "big.bin", randomData(3_000_000, seed: 81))
        let hookLog = box.directory + "/hook.log"
        try config(box, remote: server.url + "site/", up: "on-file-done = /bin/sh -c 'echo \"$FERRY_PATH\" >> \(hookLog)'")
        let command = "\(Harness.ferryBinary) sync now --config \(box.config) --session up"
        let run = runProcess("/usr/bin/script", ["-qec", command, "/dev/null"], environment: ["TERM": "xterm"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stdout.contains("[#") && run.stdout.contains("100%") && run.stdout.contains("ETA"), "a progress bar was drawn: \(run.stdout)")
        #expect(run.stdout.contains("1 uploaded"), "\(run.stdout)")
        #expect(fileContents(hookLog) == "big.bin\n", "the file hook ran for the upload: \(fileContents(hookLog) ?? "nothing")")
    }

    /// A push session follows the same scheduling rules as a pull session: discretionary
    /// conditions hold its uploads (exit 3, nothing published), and `--not-before` /
    /// `earliest-begin` delay new uploads to their time.
    @Test func discretionaryAndDelayedUploadsWaitForTheirTime() throws {
        let remoteRoot = Harness.temporaryDirectory("push-held-remote")
        defer { Harness.remove(remoteRoot) }
        let box = Sandbox("push-held")
        let src = box.directory + "/src"
        write(src, "a.txt", Data("a\n".utf8))
        let t = (Int(time(nil)) + 7200) % 86_400
        let window = String(format: "%02d:%02d-%02d:%02d", t / 3600, t / 60 % 60, (t / 3600 + 1) % 24, t / 60 % 60)
        try config(box, remote: "file://" + remoteRoot, up: "discretionary = yes\nrequire-ac-power = no\nrequire-unmetered = no\nwindow = \(window)")
        let host = ["TZ": "UTC", "FERRY_HOST_ROOT": box.directory + "/host"]
        let held = box.sync(["--session", "up"], environment: host)
        #expect(held.exitCode == 3, "\(held.output)")
        #expect(held.output.contains("1 upload waits for the session's discretionary conditions: the time window \(window)"), "\(held.output)")
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/manifest.json") && !FileManager.default.fileExists(atPath: remoteRoot + "/a.txt"))
        #expect(box.status().stdout.contains("held"), "\(box.status().stdout)")

        try config(box, remote: "file://" + remoteRoot)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        #expect(fileContents(remoteRoot + "/a.txt") == "a\n")
        let v1 = try #require(manifestVersion(remoteRoot + "/manifest.json"))

        write(src, "b.txt", Data("b\n".utf8))
        let delayed = box.sync(["--session", "up", "--not-before", "2s"])
        #expect(delayed.exitCode == 3 && delayed.output.contains("1 upload is delayed"), "\(delayed.output)")
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/b.txt"))
        #expect(manifestVersion(remoteRoot + "/manifest.json") == v1, "nothing published before its time")
        let early = box.sync(["--session", "up"])
        #expect(early.exitCode == 3, "the task keeps its time in the next run: \(early.output)")
        box.waitUntilDelayedTasksAreDue()
        let due = box.sync(["--session", "up"])
        #expect(due.exitCode == 0, "\(due.output)")
        #expect(fileContents(remoteRoot + "/b.txt") == "b\n" && (manifestVersion(remoteRoot + "/manifest.json") ?? 0) > v1)

        // A path that changed type stays on the remote while the uploads that replace it are held.
        try FileManager.default.removeItem(atPath: src + "/a.txt")
        write(src, "a.txt/inner", Data("now a directory\n".utf8))
        try config(box, remote: "file://" + remoteRoot, up: "discretionary = yes\nrequire-ac-power = no\nrequire-unmetered = no\nwindow = \(window)")
        let heldAgain = box.sync(["--session", "up"], environment: host)
        #expect(heldAgain.exitCode == 3, "\(heldAgain.output)")
        #expect(fileContents(remoteRoot + "/a.txt") == "a\n", "the remote keeps a.txt while the uploads wait")
        try config(box, remote: "file://" + remoteRoot)
        let replaced = box.sync(["--session", "up"])
        #expect(replaced.exitCode == 0, "\(replaced.output)")
        #expect(fileContents(remoteRoot + "/a.txt/inner") == "now a directory\n")
    }

    /// `ferry resume` while the push that suspended the upload still runs: that push takes it back,
    /// sends it and publishes both files (as a running pull does).
    @Test func aRunningPushTakesBackWhatResumeMakesRunnable() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let remoteRoot = server.root + "/site"
        let box = Sandbox("push-resume-busy")
        let long = randomData(2_400_000, seed: 93), short = randomData(1_200_000, seed: 94)
        write(box.directory + "/src", "long.bin", long)
        write(box.directory + "/src", "short.bin", short)
        try config(box, remote: server.url + "site/", up: "bwlimit = 600K")
        let push = try startPush(box, ["--json"])
        defer { push.stop() }
        var taskID: String?
        #expect(eventually(10) {
            taskID = (box.statusTasks().first { $0["path"] as? String == "short.bin" && $0["state"] as? String == "running" }?["id"] as? Int)
                .map(String.init)
            return taskID != nil
        }, "short.bin never ran: \(box.status(["-v"]).output)")
        let id = try #require(taskID)

        let cancel = ferry(["cancel", "--config", box.config, id])
        #expect(cancel.exitCode == 0 && cancel.stdout.contains("suspended task"), "\(cancel.output)")
        let resumed = ferry(["resume", "--config", box.config, id])
        #expect(resumed.exitCode == 0 && resumed.stdout.contains("the ferry running it takes the resumed tasks back"), "\(resumed.output)")

        #expect(push.wait(timeout: 30) == 0, "the running push finished the resumed upload: \(pushOutput(box))")
        #expect(pushOutput(box).contains("\"event\":\"file-suspended\""), "\(pushOutput(box))")
        #expect(FileManager.default.contents(atPath: remoteRoot + "/short.bin") == short)
        #expect(FileManager.default.contents(atPath: remoteRoot + "/long.bin") == long)
        let manifest = publishedListing(remoteRoot)
        #expect(manifest.contains("short.bin") && manifest.contains("long.bin"), "\(manifest)")
        #expect(!box.status().stdout.contains("suspended"))
    }

    /// `ferry cancel` stops an upload in flight (nothing reaches a final name, no manifest is
    /// published) and later runs skip it; `ferry resume` sends it and publishes.
    @Test func cancelSuspendsAnUploadAndResumeFinishesIt() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let remoteRoot = server.root + "/site"
        let box = Sandbox("push-cancel")
        let big = randomData(4_000_000, seed: 91)
        write(box.directory + "/src", "big.bin", big)
        try config(box, remote: server.url + "site/", up: "bwlimit = 1M")
        let push = try startPush(box)
        #expect(box.waitForRunningTask(session: "up"), "the upload began")
        let cancel = ferry(["cancel", "--config", box.config, "--session", "up"])
        #expect(cancel.stdout == "suspended 1 task of session up\n", "\(cancel.output)")
        #expect(push.wait(timeout: 20) == 3, "\(fileContents(box.directory + "/push.err") ?? "")")
        let said = pushOutput(box)
        #expect(said.contains("1 upload is suspended by ferry cancel"), "\(said)")
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/big.bin") && !FileManager.default.fileExists(atPath: remoteRoot + "/manifest.json"))
        let skipped = box.sync(["--session", "up"])
        #expect(skipped.exitCode == 3 && !FileManager.default.fileExists(atPath: remoteRoot + "/big.bin"), "a later run skips it: \(skipped.output)")

        try config(box, remote: server.url + "site/")
        let resumed = ferry(["resume", "--config", box.config, "--session", "up"])
        #expect(resumed.exitCode == 0, "\(resumed.output)")
        #expect(FileManager.default.contents(atPath: remoteRoot + "/big.bin") == big)
        #expect(publishedListing(remoteRoot).contains("big.bin"))
    }
}

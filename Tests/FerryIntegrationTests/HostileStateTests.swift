import Foundation
import Testing

/// Hostile remotes and damaged local state: each gets a clear message, loses nothing, and the next
/// run converges.
@Suite(.serialized)
struct HostileStateTests {
    func count(_ needle: String, in haystack: String) -> Int { haystack.components(separatedBy: needle).count - 1 }

    /// Rewrites fields of files in a published ferry manifest (to give it values `manifest build`
    /// would never write).
    func editManifest(_ box: Sandbox, _ edit: (inout [String: Any]) -> Void) throws {
        let path = box.published + "/manifest.json"
        var object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as! [String: Any]
        var files = object["files"] as! [[String: Any]]
        for i in files.indices { edit(&files[i]) }
        object["files"] = files
        object["version"] = (object["version"] as! Int) + 1
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: path))
        box.markRepublished()
    }

    /// SQLite's temporary data (what a statement of many rows keeps to undo itself, written out
    /// past 64 KiB) stays in memory: a cold pull of 10,000 files creates no file in SQLite's
    /// temporary directory, so a full or read-only /var/tmp fails nothing, and no row of the state
    /// leaves its directory. (Before, this pull wrote ~150 pages to a temporary file there.)
    @Test func theStateWritesNoTemporaryFileOutsideItsDirectory() throws {
        let box = Sandbox("state-temporary")
        for i in 0..<10_000 { box.publish("d\(i % 20)/f\(i).txt", "content \(i)\n") }
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        let temporary = box.directory + "/sqlite-temporary"
        try FileManager.default.createDirectory(atPath: temporary, withIntermediateDirectories: true)
        let watch = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        try #require(watch >= 0)
        defer { close(watch) }
        try #require(inotify_add_watch(watch, temporary, UInt32(IN_CREATE)) >= 0)
        let run = box.sync(environment: ["SQLITE_TMPDIR": temporary, "TMPDIR": temporary])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(try FileManager.default.subpathsOfDirectory(atPath: box.local).filter { $0.hasSuffix(".txt") }.count == 10_000)
        var events = [UInt8](repeating: 0, count: 4096)
        let got = read(watch, &events, events.count)
        #expect(got < 0 && errno == EAGAIN, "a file was created in SQLite's temporary directory (\(got) bytes of inotify events)")
    }

    @Test func aHugeResponseHeaderIsNamedAsSuch() throws {
        let box = Sandbox("huge-header")
        box.publish("a.txt", "a\n")
        box.publish("b.txt", "b\n")
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        box.configure(remote: server.url, session: ["retry-delay = 0.05s"])
        server.setFaults(["/manifest.json": ["header_bytes": 1_000_000]])
        let manifest = box.sync()
        #expect(manifest.exitCode == 4, "\(manifest.output)")
        #expect(manifest.stderr.contains("cannot fetch the manifest \(server.url)manifest.json: the server sent a response header larger than libcurl accepts (100 KiB)"),
                "\(manifest.stderr)")
        #expect(!manifest.stderr.contains("Out of memory"))
        server.setFaults(["/b.txt": ["header_bytes": 1_000_000]])
        let file = box.sync(["--json"])
        #expect(file.exitCode == 1, "\(file.output)")
        #expect(file.events(named: "file-failed").first?["error"] as? String == "the server sent a response header larger than libcurl accepts (100 KiB); refused")
        #expect(file.events(named: "file-retrying").isEmpty, "the same server would send it again")
        #expect(fileContents(box.localPath("a.txt")) == "a\n")
    }

    @Test func aHugePathIsShortenedInMessages() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("huge-path", published: nginx.root + "/site")
        let path = String(repeating: "p", count: 1 << 20)
        box.publish("manifest.json", "{\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": [{\"path\": \"\(path)\", \"size\": 1, \"sha256\": \"\(String(repeating: "a", count: 64))\"}]}")
        box.configure(remote: nginx.url + "site/")
        let run = box.sync()
        #expect(run.exitCode == 4)
        #expect(run.output.utf8.count < 2000, "\(run.output.utf8.count) bytes of output")
        #expect(count("(1048576 bytes)", in: run.output) == 1, "\(run.output)")
        #expect(run.stderr.contains("path is longer than the filesystem allows"))
    }

    /// A filesystem that cannot hold an mtime (ext4 keeps 1901–2446) stores what it can; ferry
    /// records that as applied, says so once, and neither fixes nor re-hashes the file again.
    @Test func anMtimeTheFilesystemCannotStoreIsAppliedOnce() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("mtime", published: nginx.root + "/site")
        guard let mounted = clampingLocalRoot(box) else { return }
        defer { if mounted { runProcess("/bin/umount", ["-l", box.local]) } }
        box.publish("old.txt", "old\n")
        box.publish("future.txt", "future\n")
        box.buildManifest(["--format", "1"])  // editManifest edits the flat file
        try editManifest(box) { file in
            file["mtime"] = file["path"] as? String == "old.txt" ? "0001-01-01T00:00:00Z" : "9999-12-31T23:59:59Z"
        }
        box.configure(remote: nginx.url + "site/")
        let first = box.sync()
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(count("this filesystem cannot store the mtime", in: first.stderr) == 1, "said once: \(first.stderr)")
        #expect(first.stderr.contains("(and 1 more file)"))
        for _ in 0..<2 {
            let again = box.sync(["--json"])
            #expect(again.exitCode == 0, "\(again.output)")
            let planned = again.events(named: "planned").first
            #expect(planned?["metadata_fixes"] as? Int == 0, "not fixed again: \(again.stdout)")
            #expect(planned?["hashed"] as? Int == 0, "the hash cache holds: \(again.stdout)")
            #expect(planned?["up_to_date"] as? Int == 2)
            #expect(again.events(named: "warning").isEmpty)
        }
    }

    /// Puts the local root on a filesystem that clamps timestamps: where it is if that one does
    /// (ext4), else on a small ext4 image mounted there. Returns whether it mounted one, or nil if
    /// neither is possible here.
    func clampingLocalRoot(_ box: Sandbox) -> Bool? {
        let probe = box.directory + "/probe"
        try? Data().write(to: URL(fileURLWithPath: probe))
        var times = [timespec(tv_sec: -62135596800, tv_nsec: 0), timespec(tv_sec: -62135596800, tv_nsec: 0)]
        utimensat(AT_FDCWD, probe, &times, 0)
        var st = stat()
        stat(probe, &st)
        if st.st_mtim.tv_sec != -62135596800 { return false }
        let image = box.directory + "/ext4.img"
        let made = runProcess("/bin/sh", ["-c", "truncate -s 16M '\(image)' && mkfs.ext4 -q '\(image)' && mkdir -p '\(box.local)' && mount -o loop '\(image)' '\(box.local)'"])
        if made.exitCode == 0 { return true }
        Issue.record("no filesystem here clamps timestamps, and an ext4 image could not be mounted (\(made.output)): nothing to test against")
        return nil
    }

    /// A manifest mode of 7777 never makes a file world-writable or setuid: `mode-mask` (022 by
    /// default) clears bits, and setuid/setgid/sticky are always stripped.
    @Test func modesAreMasked() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("mode-mask", published: nginx.root + "/site")
        box.publish("tool.sh", "#!/bin/sh\n")
        box.publish("data.txt", "d\n")
        box.buildManifest(["--format", "1"])  // editManifest edits the flat file
        try editManifest(box) { file in file["mode"] = file["path"] as? String == "tool.sh" ? "7777" : "0666" }
        box.configure(remote: nginx.url + "site/")
        #expect(box.sync().exitCode == 0)
        func mode(_ p: String) -> Int { var st = stat(); stat(box.localPath(p), &st); return Int(st.st_mode & 0o7777) }
        #expect(mode("tool.sh") == 0o755)
        #expect(mode("data.txt") == 0o644)
        let again = box.sync(["--json"])
        #expect(again.events(named: "planned").first?["metadata_fixes"] as? Int == 0, "masked modes are up to date")
        box.configure(remote: nginx.url + "site/", session: ["mode-mask = 077"])
        #expect(box.sync().exitCode == 0)
        #expect(mode("tool.sh") == 0o700)
        #expect(mode("data.txt") == 0o600)
    }

    /// A partial file replaced by a symlink, a FIFO or a directory is removed (never followed) and
    /// that file starts again; the session does not fail on every run.
    @Test(arguments: ["symlink", "fifo", "directory"])
    func aStrayEntryInThePartialDirectoryIsRemoved(kind: String) throws {
        let box = Sandbox("stray-\(kind)")
        let content = randomData(2_000_000, seed: 12)
        box.publish("big.bin", content)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/big.bin": ["rate": 500_000]])
        box.configure(remote: server.url)
        let stopped = box.sync(["--max-duration", "1s"])
        #expect(stopped.exitCode == 3, "\(stopped.output)")
        let partials = try FileManager.default.contentsOfDirectory(atPath: box.localPath(".ferry/partial"))
        #expect(partials.count == 1)
        let partial = box.localPath(".ferry/partial/" + partials[0])
        let outside = box.directory + "/outside.txt"
        try "not ferry's\n".writeReplacing(outside)
        try FileManager.default.removeItem(atPath: partial)
        switch kind {
        case "symlink": try FileManager.default.createSymbolicLink(atPath: partial, withDestinationPath: outside)
        case "fifo": #expect(mkfifo(partial, 0o600) == 0)
        default:
            try FileManager.default.createDirectory(atPath: partial + "/inner", withIntermediateDirectories: true)
            try "x\n".writeReplacing(partial + "/inner/file")
        }
        server.setFaults([:])
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stderr.contains("its partial file in .ferry/partial was a \(kind == "fifo" ? "other" : kind), not a file; removed it (not followed)"),
                "\(run.stderr)")
        #expect(fileContents(outside) == "not ferry's\n", "never followed")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("big.bin"))) == content)
        #expect(box.sync().exitCode == 0)
    }

    /// `ferry cancel` racing with a file's commit reports what really happened: "already finished"
    /// exactly when the file is in place, "suspended" with its resume data otherwise.
    @Test func cancelReportsWhatReallyHappened() throws {
        for delay in [0.4, 1.2, 1.4] {
            let box = Sandbox("cancel-race")
            box.publish("f.bin", randomData(600_000, seed: 21))
            box.buildManifest()
            let server = try PythonServer(directory: box.published)
            defer { server.stop() }
            server.setFaults(["/f.bin": ["rate": 400_000]])
            box.configure(remote: server.url)
            let runner = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config])
            defer { runner.stop() }
            server.waitForRequest("/f.bin")
            usleep(UInt32(delay * 1_000_000))
            let cancel = ferry(["cancel", "--config", box.config, "--session", "test"])
            #expect(cancel.exitCode == 0, "\(cancel.output)")
            _ = runner.wait(timeout: 30)
            let placed = FileManager.default.fileExists(atPath: box.localPath("f.bin"))
            let status = box.status(["--json", "--files"]).stdout
            if cancel.stdout.contains("nothing to suspend") {
                #expect(placed, "nothing left to cancel means the file was done: \(cancel.stdout)")
            } else if cancel.stdout.contains("1 task of session test had already finished: committed before the cancel reached it") {
                #expect(placed, "\(cancel.stdout)")
                #expect(status.contains("\"state\":\"done\""))
            } else {
                #expect(cancel.stdout.contains("suspended 1 task of session test"), "\(cancel.stdout)")
                #expect(!placed, "reported suspended, so the file must not be in place: \(cancel.stdout)")
                #expect(status.contains("\"state\":\"suspended\""), "\(status)")
                let kept = cancel.stdout.contains("resume data kept")
                let bytes = Int(status.components(separatedBy: "\"bytes_done\":").dropFirst().first?.prefix { $0.isNumber } ?? "") ?? -1
                #expect(kept == (bytes > 0), "the reported resume data is what the state holds: \(cancel.stdout) \(status)")
            }
        }
    }

    /// A transfer waiting out a long backoff (Retry-After: 30) still hears `ferry cancel` at once.
    @Test func cancelIsHeardDuringABackoff() throws {
        let box = Sandbox("cancel-backoff")
        box.publish("f.txt", "f\n")
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/f.txt": ["statuses": [503, 503, 503], "retry_after": 30]])
        box.configure(remote: server.url)
        let runner = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config])
        defer { runner.stop() }
        server.waitForRequest("/f.txt")
        let cancel = ferry(["cancel", "--config", box.config, "--session", "test"])
        #expect(cancel.stdout.contains("suspended 1 task of session test"), "\(cancel.stdout)")
        #expect(!cancel.stdout.contains("not confirmed"), "the runner answered: \(cancel.stdout)")
        #expect(runner.wait(timeout: 15) == 3, "the run ends, its only task suspended")
        #expect(server.requests().filter { $0["path"] as? String == "/f.txt" }.count == 1, "no retry after the cancel")
    }

    /// A state database that is not a database: a clear error with what to do. Moving it aside is
    /// safe: the next run re-hashes the tree and downloads nothing that is already right.
    @Test func aDamagedStateDatabaseSaysWhatToDo() throws {
        let w = try SyncedMirror("bad-state", session: ["delete = yes"],
                                 files: Dictionary(uniqueKeysWithValues: (0..<5).map { ("f\($0).txt", "file \($0)\n") }))
        let (box, nginx, before) = (w.box, w.nginx, w.before)
        let db = box.state + "/ferry.db"
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: db + suffix) }
        try String(repeating: "this is not a database\n", count: 400).writeReplacing(db)

        let run = box.sync()
        #expect(run.exitCode == 5, "\(run.output)")
        #expect(run.stderr.contains("the state database \(db) is damaged or not a SQLite database (file is not a database)"), "\(run.stderr)")
        #expect(run.stderr.contains("hint: move it aside: mv \(db) \(db).broken"))
        #expect(run.stderr.contains("downloads nothing that is already right"))
        #expect(treeSnapshot(box.local) == before)
        let status = box.status()
        #expect(status.exitCode == 5 && status.stderr.contains("move it aside"), "\(status.output)")

        try FileManager.default.moveItem(atPath: db, toPath: db + ".broken")
        nginx.clearLog()
        let fresh = box.sync(["--json"])
        #expect(fresh.exitCode == 0, "\(fresh.output)")
        let planned = fresh.events(named: "planned").first
        #expect(planned?["downloads"] as? Int == 0)
        #expect(planned?["hashed"] as? Int == 5)
        #expect(nginx.requests().map(\.path) == ["/site/manifest.json"], "only the manifest was fetched: \(nginx.requests())")
        #expect(treeSnapshot(box.local) == before)
    }
}

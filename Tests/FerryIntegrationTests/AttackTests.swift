import Foundation
import Testing
@testable import FerryRuntime

/// Attacks from whoever can write a `file://` remote or a directory ferry writes into, and from a
/// local user who swaps a file for a FIFO: each case is the attack itself, and each checks that
/// nothing is read, written or deleted outside its place and that no thread hangs
/// (docs/design.md, data-safety rules 6, 12 and 13).
@Suite(.serialized)
struct AttackTests {
    func write(_ path: String, _ text: String) {
        try! FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try! text.writeReplacing(path)
    }

    func pushConfig(_ box: Sandbox, remote: String, pull: Bool = false) throws {
        var text = """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = \(remote)
            local = \(box.directory)/src
            delete = yes
            conflict = local-wins

            """
        if pull { text += "[session down]\nremote = \(remote)\nlocal = \(box.directory)/dst\n" }
        try text.writeReplacing(box.config)
    }

    /// A `file://` push never follows a symlink that someone planted in the remote: a new file under
    /// a directory replaced by a symlink does not land where the symlink points, and a deletion under
    /// it does not delete the other directory's file. The run says why (exit 1) and publishes the rest.
    @Test func aFilePushNeverWritesOrDeletesThroughASymlinkInTheRemote() throws {
        let box = Sandbox("attack-push-symlink")
        let remote = box.directory + "/remote", other = box.directory + "/other", src = box.directory + "/src"
        write(src + "/sub/keep.txt", "keep\n")
        write(src + "/top.txt", "top\n")
        try pushConfig(box, remote: "file://" + remote)
        let first = box.sync(["--session", "up"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(fileContents(remote + "/sub/keep.txt") == "keep\n")

        // The remote's `sub` becomes a symlink to another directory; a new local file goes under sub/.
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        try FileManager.default.removeItem(atPath: remote + "/sub")
        try FileManager.default.createSymbolicLink(atPath: remote + "/sub", withDestinationPath: other)
        write(src + "/sub/new.txt", "new\n")
        write(src + "/top.txt", "top, changed\n")
        let second = box.sync(["--session", "up"])
        #expect(second.exitCode == 1, "\(second.output)")
        #expect(second.output.contains("symlink"), "the run names the symlink: \(second.output)")
        #expect(!FileManager.default.fileExists(atPath: other + "/new.txt"), "nothing was written through the symlink")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: other)) == [], "the other directory is untouched")
        #expect(fileContents(remote + "/top.txt") == "top, changed\n", "the rest was published")

        // The symlink now points at a directory holding a file of the same name; the local file goes.
        write(other + "/keep.txt", "not ferry's\n")
        try FileManager.default.removeItem(atPath: src + "/sub/keep.txt")
        _ = box.sync(["--session", "up"])
        #expect(fileContents(other + "/keep.txt") == "not ferry's\n", "nothing was deleted through the symlink")
        var st = stat()
        #expect(lstat(remote + "/sub", &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK, "the symlink itself is left as it is")
    }

    /// A `.ferry` directory that someone replaced by a symlink in a `file://` remote is ferry's
    /// reserved name: the symlink is removed (never followed) and the uploads go to a real directory.
    @Test func aFilePushRemovesASymlinkPlantedAsItsOwnDirectory() throws {
        let box = Sandbox("attack-push-ferry-dir")
        let remote = box.directory + "/remote", other = box.directory + "/other", src = box.directory + "/src"
        write(src + "/a.txt", "a\n")
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: other + "/upload", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: remote + "/.ferry", withDestinationPath: other)
        try pushConfig(box, remote: "file://" + remote)
        let run = box.sync(["--session", "up"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: other + "/upload")) == [], "nothing was written through the planted .ferry")
        var st = stat()
        #expect(lstat(remote + "/.ferry", &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR)
        #expect(fileContents(remote + "/a.txt") == "a\n")
    }

    /// A pull from a `file://` remote never reads a file through a symlink in the remote: a listed
    /// file whose directory was replaced by a symlink to a directory holding a file of the same name
    /// fails (exit 1) instead of mirroring the other directory's bytes.
    @Test func aFilePullNeverReadsThroughASymlinkInTheRemote() throws {
        let box = Sandbox("attack-pull-symlink")
        box.publish("sub/secret.txt", "published\n")
        box.publish("plain.txt", "plain\n")
        box.buildManifest()
        // The manifest lists sub/secret.txt with the bytes the outside file holds (as a hostile
        // remote would): only the path decides, and the path goes through a symlink.
        let outside = box.directory + "/outside"
        write(outside + "/secret.txt", "published\n")
        try FileManager.default.removeItem(atPath: box.published + "/sub")
        try FileManager.default.createSymbolicLink(atPath: box.published + "/sub", withDestinationPath: outside)
        box.configure(remote: "file://" + box.published)
        let run = box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.output.contains("symlink"), "\(run.output)")
        #expect(!FileManager.default.fileExists(atPath: box.local + "/sub/secret.txt"), "nothing was read through the symlink")
        #expect(fileContents(box.local + "/plain.txt") == "plain\n")

        // A listed file that is itself a symlink is refused too.
        try FileManager.default.removeItem(atPath: box.published + "/plain.txt")
        try FileManager.default.createSymbolicLink(atPath: box.published + "/plain.txt", withDestinationPath: outside + "/secret.txt")
        try FileManager.default.removeItem(atPath: box.local + "/plain.txt")
        let again = box.sync()
        #expect(again.exitCode == 1, "\(again.output)")
        #expect(!FileManager.default.fileExists(atPath: box.local + "/plain.txt"))
    }

    /// A FIFO where a remote file was never holds the engine: a pull from a `file://` remote whose
    /// listed file became a FIFO fails that file at once, and the run ends.
    @Test func aFIFOInAFileRemoteFailsAtOnce() throws {
        let box = Sandbox("attack-fifo-pull")
        box.publish("pipe", "was a file\n")
        box.publish("fine.txt", "fine\n")
        box.buildManifest()
        try FileManager.default.removeItem(atPath: box.published + "/pipe")
        #expect(mkfifo(box.published + "/pipe", 0o644) == 0)
        box.configure(remote: "file://" + box.published)
        let run = box.sync(timeout: 30)
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.output.contains("not a regular file"), "\(run.output)")
        #expect(fileContents(box.local + "/fine.txt") == "fine\n")
    }

    /// A local file replaced by a FIFO after the push scanned it never holds the engine: its
    /// upload sees it is no longer a regular file, the file leaves the run with a warning, and the
    /// rest is published.
    @Test func aFIFOInThePushSourceNeverHoldsTheEngine() throws {
        let box = Sandbox("attack-fifo-push")
        let remote = box.directory + "/remote", src = box.directory + "/src"
        // A slow first upload (one transfer at a time, 200 KiB/s) leaves time to swap the second file.
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try randomData(600_000, seed: 5).write(to: URL(fileURLWithPath: src + "/a-slow.bin"))
        write(src + "/b-pipe", "a file when scanned\n")
        try """
            [agent]
            state = \(box.state)
            transfers = 1
            [session up]
            direction = push
            remote = file://\(remote)
            local = \(src)
            bwlimit = 200K
            """.writeReplacing(box.config)
        let push = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--session", "up"],
                             stdout: box.directory + "/out", stderr: box.directory + "/err")
        #expect(eventually(20) { ((try? FileManager.default.contentsOfDirectory(atPath: remote + "/.ferry/upload")) ?? []).count > 0 },
                "the first upload began")
        try FileManager.default.removeItem(atPath: src + "/b-pipe")
        #expect(mkfifo(src + "/b-pipe", 0o644) == 0)
        let status = push.wait(timeout: 30)
        if status == nil { push.signal(SIGKILL); push.wait(timeout: 5) }
        let output = (fileContents(box.directory + "/out") ?? "") + (fileContents(box.directory + "/err") ?? "")
        #expect(status == 0, "the push ends: \(output)")
        #expect(output.contains("b-pipe"), "\(output)")
        #expect(FileManager.default.contents(atPath: remote + "/a-slow.bin") == randomData(600_000, seed: 5))
        #expect(!FileManager.default.fileExists(atPath: remote + "/b-pipe"))
    }

    /// Files a `file://` push publishes carry the mode the manifest lists (not the 0600 of ferry's
    /// temporary upload), so a web server or a pull running as another user can read them.
    @Test func aFilePushPublishesTheManifestsModes() throws {
        let box = Sandbox("push-modes")
        let remote = box.directory + "/remote", src = box.directory + "/src"
        write(src + "/page.html", "page\n")
        write(src + "/bin/tool", "#!/bin/sh\n")
        chmod(src + "/page.html", 0o644)
        chmod(src + "/bin/tool", 0o755)
        try pushConfig(box, remote: "file://" + remote)
        let run = box.sync(["--session", "up"])
        #expect(run.exitCode == 0, "\(run.output)")
        var st = stat()
        #expect(stat(remote + "/page.html", &st) == 0 && st.st_mode & 0o777 == 0o644, "mode \(String(st.st_mode & 0o777, radix: 8))")
        #expect(stat(remote + "/bin/tool", &st) == 0 && st.st_mode & 0o777 == 0o755, "mode \(String(st.st_mode & 0o777, radix: 8))")
        #expect(stat(remote + "/manifest.json", &st) == 0 && st.st_mode & 0o777 == 0o644)
    }

    /// A user who can write the metrics directory plants symlinks at every temporary name an
    /// earlier ferry would have used (`<metrics>.tmp-<pid>`, for the next pids) and at the metrics
    /// file itself: the agent writes its metrics without following any of them, and the files they
    /// point to are untouched.
    @Test func theMetricsFileNeverFollowsASymlinkPlantedBesideIt() throws {
        let box = Sandbox("attack-metrics")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        let directory = box.directory + "/textfile", metrics = directory + "/ferry.prom"
        let victim = box.directory + "/victim", finalVictim = box.directory + "/final-victim"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try "precious\n".writeReplacing(victim)
        try "precious too\n".writeReplacing(finalVictim)
        let next = Int((fileContents("/proc/sys/kernel/ns_last_pid") ?? "").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 1000
        for pid in next...(next + 300) {
            try? FileManager.default.createSymbolicLink(atPath: metrics + ".tmp-\(pid)", withDestinationPath: victim)
        }
        try FileManager.default.createSymbolicLink(atPath: metrics, withDestinationPath: finalVictim)
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"], agent: ["metrics = \(metrics)"])
        let agent = try Child(Harness.ferryBinary, ["agent", "--config", box.config],
                              stdout: box.directory + "/agent.out", stderr: box.directory + "/agent.err")
        defer { agent.stop() }
        var st = stat()
        #expect(eventually { lstat(metrics, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG && (fileContents(metrics) ?? "").contains("ferry_polls_total") },
                "the metrics file is a file of its own: \(fileContents(box.directory + "/agent.err") ?? "")")
        #expect(fileContents(victim) == "precious\n", "a planted temporary name was not written through")
        #expect(fileContents(finalVictim) == "precious too\n", "the symlink at the metrics path was replaced, not followed")
        #expect(st.st_mode & 0o777 == 0o644, "readable by node_exporter")
    }

    /// ferry's state is private to its owner whatever the umask: the state directory and every
    /// directory in it 0700, every file 0600 (the database and its WAL, cached manifests, locks,
    /// event logs, the control socket), and a state an earlier ferry left readable is made private.
    @Test func stateIsPrivateWhateverTheUmask() throws {
        let box = Sandbox("state-private")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"])
        // An earlier ferry's state, readable by everyone.
        try FileManager.default.createDirectory(atPath: box.state, withIntermediateDirectories: true)
        chmod(box.state, 0o755)
        try "".writeReplacing(box.state + "/ferry.db")
        chmod(box.state + "/ferry.db", 0o644)
        let wide = ["umask": "000"]
        let run = runProcess("/bin/sh", ["-c", "umask 000; exec \"$0\" sync now --config \"$1\"", Harness.ferryBinary, box.config], environment: wide)
        #expect(run.exitCode == 0, "\(run.output)")
        let agent = try Child("/bin/sh", ["-c", "umask 000; exec \"$0\" agent --config \"$1\"", Harness.ferryBinary, box.config],
                              stdout: box.directory + "/agent.out", stderr: box.directory + "/agent.err")
        #expect(eventually { FileManager.default.fileExists(atPath: box.state + "/agent.sock") && FileManager.default.fileExists(atPath: box.state + "/events") })
        defer { agent.stop() }
        var wrong: [String] = []
        var seen = 0
        func check(_ path: String) {
            var st = stat()
            guard lstat(path, &st) == 0 else { return }
            seen += 1
            let mode = st.st_mode & 0o777
            let kind = st.st_mode & S_IFMT
            let expected: mode_t = kind == S_IFDIR ? 0o700 : 0o600
            if mode != expected { wrong.append("\(path): \(String(mode, radix: 8))") }
            if kind == S_IFDIR {
                for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] { check(path + "/" + name) }
            }
        }
        check(box.state)
        #expect(seen >= 8, "the state holds the database, its WAL, a manifest, locks, events and the socket")
        #expect(wrong.isEmpty, "\(wrong)")
    }

    /// A hook holds nothing of ferry's but stdin, stdout and stderr: not the connections to the
    /// remote (alive while files transfer), not libcurl's socketpair, not the state database.
    @Test func hooksInheritNoDescriptorButTheStandardThree() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("hook-fds", published: server.root)
        for i in 0..<4 { box.publish("f\(i).bin", randomData(400_000, seed: UInt64(i))) }
        box.buildManifest()
        let out = box.directory + "/fds"
        let script = box.directory + "/hook.py"
        // Lists what it holds beyond 0, 1 and 2 (but the directory it reads to list them).
        try """
            #!/usr/bin/env python3
            import os
            held = []
            for name in os.listdir("/proc/self/fd"):
                try:
                    target = os.readlink("/proc/self/fd/" + name)
                except OSError:
                    continue
                if int(name) > 2 and not target.startswith("/proc/"):
                    held.append(name + " " + target)
            with open("\(out)", "a") as f:
                f.write("\\n".join(held + ["--"]) + "\\n")
            """.writeReplacing(script, mode: 0o755)
        box.configure(remote: server.url, session: ["on-file-done = \(script)"])
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(eventually { (fileContents(out) ?? "").components(separatedBy: "--").count > 4 }, "the hook ran for every file")
        let inherited = (fileContents(out) ?? "").split(separator: "\n").filter { line in
            line.contains("socket:") || line.contains("pipe:") || line.contains("anon_inode") || line.contains("ferry.db") || line.contains(box.state)
        }
        #expect(inherited.isEmpty, "descriptors a hook must not hold: \(inherited)")
    }

    /// From the moment ferry holds a secret it is not dumpable: a crash leaves no core with the
    /// password in it, and its memory cannot be read through /proc by its user. The kernel shows
    /// it by giving the files in a non-dumpable process's /proc directory to root: ferry runs here as `nobody`,
    /// and its /proc/PID/status belongs to root once it read a credentials file (and to nobody in
    /// the same run without one, which shows the test can tell the two apart).
    @Test func aProcessHoldingASecretIsNotDumpable() throws {
        let box = Sandbox("not-dumpable")
        box.publish("slow.bin", randomData(2_000_000))
        box.buildManifest()
        try "alice:hunter2\n".writeReplacing(box.directory + "/basic", mode: 0o600)
        let nobody: uid_t = 65534
        /// Runs a pull as `nobody` from `server` and returns the owner of its /proc directory
        /// while its transfer runs.
        func procOwner(_ server: PythonServer, settings: [String]) throws -> uid_t? {
            server.setFaults(["*": ["rate": 100_000]])
            Harness.remove(box.state)
            Harness.remove(box.local)
            box.configure(remote: server.url, session: settings)
            _ = runProcess("/bin/chown", ["-R", "\(nobody):\(nobody)", box.directory])
            chmod(box.directory, 0o755)
            let child = try Child("/usr/bin/setpriv", ["--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups",
                                                       Harness.ferryBinary, "sync", "now", "--config", box.config],
                                  stdout: box.directory + "/out", stderr: box.directory + "/err")
            defer { child.stop() }
            guard eventually(20, { server.requests().contains { $0["path"] as? String == "/slow.bin" && $0["status"] as? Int == 200 } }) else {
                Issue.record("the transfer did not begin: \(fileContents(box.directory + "/err") ?? "")")
                return nil
            }
            var st = Glibc.stat()
            guard lstat("/proc/\(child.pid)/status", &st) == 0 else { return nil }
            return st.st_uid
        }
        let guarded = try PythonServer(directory: box.published, extra: ["--require-basic", "alice:hunter2"])
        defer { guarded.stop() }
        #expect(try procOwner(guarded, settings: ["basic-auth-file = \(box.directory)/basic"]) == 0, "holding a secret: not dumpable")
        let open = try PythonServer(directory: box.published)
        defer { open.stop() }
        #expect(try procOwner(open, settings: []) == nobody, "without a secret: dumpable, as any process")
    }

    /// Starts `ferry ARGS` as `nobody`, allowed at most `threads` threads and processes for that
    /// user (RLIMIT_NPROC): the machine running out of threads, in a form a test can make.
    func asNobody(_ box: Sandbox, threads: Int, _ arguments: [String], name: String) throws -> Child {
        _ = runProcess("/bin/chown", ["-R", "65534:65534", box.directory])
        chmod(box.directory, 0o755)
        return try Child("/usr/bin/prlimit", ["--nproc=\(threads):\(threads)", "/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                              "--clear-groups", Harness.ferryBinary] + arguments,
                         stdout: box.directory + "/\(name).out", stderr: box.directory + "/\(name).err")
    }

    /// Thousands of connections to the control socket never use up the agent's threads: at most
    /// `ControlServer.maxConnections` are served at once, the rest wait, and the agent (allowed
    /// 64 threads here) keeps running and takes a handed-over sync once they are gone.
    @Test func aFloodOfControlConnectionsNeverEndsTheAgent() throws {
        let box = Sandbox("attack-control-flood")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"])
        let agent = try asNobody(box, threads: 64, ["agent", "--config", box.config], name: "agent")
        defer { agent.stop() }
        let socket = box.state + "/agent.sock"
        #expect(eventually { FileManager.default.fileExists(atPath: socket) && fileContents(box.localPath("a.txt")) == "a\n" })
        var clients: [Int32] = []
        defer { for fd in clients { close(fd) } }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in socket.utf8.enumerated() { raw[i] = b }
        }
        // As many as the agent takes in (it serves some, the listen queue holds more), for up to 5 s.
        let deadline = Date().addingTimeInterval(5)
        while clients.count < 400 && Date() < deadline {
            let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
            let rc = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            if rc == 0 {
                clients.append(fd)
            } else {
                close(fd)
                if clients.count >= ControlServer.maxConnections + 16 { break }
                usleep(10_000)
            }
        }
        #expect(clients.count >= 40, "connections were made: \(clients.count)")
        // The agent takes them in: its threads would run out here if each took its own (two,
        // before). Its thread count shows it serving as many as it will (or the process is gone).
        func threads() -> Int {
            let status = fileContents("/proc/\(agent.pid)/status") ?? ""
            return Int(status.firstMatch(of: /Threads:\s+(\d+)/)?.1 ?? "") ?? 0
        }
        #expect(eventually(10) { !agent.isRunning || threads() >= ControlServer.maxConnections }, "the agent serves the connections")
        #expect(agent.isRunning, "the agent is alive: \(fileContents(box.directory + "/agent.err") ?? "")")
        for fd in clients { close(fd) }
        clients = []
        let handed = try asNobody(box, threads: 64, ["sync", "now", "--config", box.config], name: "sync")
        #expect(handed.wait(timeout: 30) == 0, "\(fileContents(box.directory + "/sync.err") ?? "")")
        #expect((fileContents(box.directory + "/sync.out") ?? "").contains("agent"), "handed over to the agent: \(fileContents(box.directory + "/sync.out") ?? "")")
        #expect(agent.isRunning)
    }

    /// Another process using up the user's threads never ends a healthy agent: a cycle that gets
    /// no thread is reported and tried again, and once threads are free the agent syncs.
    @Test func runningOutOfThreadsIsReportedAndRetried() throws {
        let box = Sandbox("attack-threads")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["poll = 1s", "retry-delay = 1s"])
        let agent = try asNobody(box, threads: 64, ["agent", "--config", box.config], name: "agent")
        defer { agent.stop() }
        #expect(eventually { fileContents(box.localPath("a.txt")) == "a\n" }, "\(fileContents(box.directory + "/agent.err") ?? "")")
        // A process of the same user forks until no more can be had, and holds them.
        let full = box.directory + "/full"
        let hog = try Child("/usr/bin/prlimit", ["--nproc=64:64", "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                                 "/usr/bin/python3", "-c", """
            import os, signal, sys
            while True:
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    signal.pause()
                    os._exit(0)
            open(sys.argv[1], "w").write("full")
            signal.pause()
            """, full])
        defer {
            kill(-hog.pid, SIGKILL)
            hog.wait(timeout: 10)
        }
        #expect(eventually { FileManager.default.fileExists(atPath: full) }, "the user's threads are used up")
        box.publish("b.txt", "b\n")
        box.buildManifest()
        #expect(eventually { (fileContents(box.directory + "/agent.err") ?? "").contains("cannot start a thread") },
                "the failure is reported: \(fileContents(box.directory + "/agent.err") ?? "")")
        #expect(agent.isRunning, "the agent is alive")
        kill(-hog.pid, SIGKILL)
        hog.wait(timeout: 10)
        #expect(eventually(30) { fileContents(box.localPath("b.txt")) == "b\n" }, "once threads are free the agent syncs: \(fileContents(box.directory + "/agent.err") ?? "")")
        #expect(agent.isRunning)
    }

    /// A remote's numbers never crash ferry: a manifest whose version is the largest 64-bit number
    /// (one more would overflow when a push plans the next version) is refused naming it, by a
    /// push and by a pull, and an agent running both keeps running its other sessions.
    @Test func aManifestVersionAtTheLimitIsRefusedNotACrash() throws {
        let box = Sandbox("attack-version")
        let remote = box.directory + "/remote", src = box.directory + "/src"
        write(src + "/a.txt", "a\n")
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        try "{\"format\": \"ferry-manifest/1\", \"version\": 9223372036854775807, \"files\": []}".writeReplacing(remote + "/manifest.json")
        box.publish("b.txt", "b\n")
        box.buildManifest()
        try """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = file://\(remote)
            local = \(src)
            conflict = local-wins
            poll = 1h
            [session down]
            remote = file://\(box.published)
            local = \(box.local)
            poll = 1h
            [session hostile]
            remote = file://\(remote)
            local = \(box.directory)/hostile
            poll = 1h
            """.writeReplacing(box.config)
        let pull = box.sync(["--session", "hostile"])
        #expect(pull.exitCode == 4 && pull.stderr.contains("9223372036854775807"), "\(pull.output)")
        let agent = try Child(Harness.ferryBinary, ["agent", "--config", box.config], stdout: box.directory + "/agent.out", stderr: box.directory + "/agent.err")
        defer { agent.stop() }
        #expect(eventually { fileContents(box.localPath("b.txt")) == "b\n" }, "the other sessions run: \(fileContents(box.directory + "/agent.err") ?? "")")
        #expect(eventually { (fileContents(box.directory + "/agent.err") ?? "").contains("9223372036854775807") }, "the refusal names the number")
        #expect(agent.isRunning, "no crash")
    }

    /// No wait depends on a remote's clock: a remote whose manifest's Last-Modified lies 5,000 s
    /// ahead (a server clock ahead; before, a push slept until then, and past about 72 minutes
    /// crashed converting the wait) is published to at once.
    @Test func aRemoteClockAheadNeverStallsAPush() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("attack-clock")
        let remote = nginx.root + "/site", src = box.directory + "/src"
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        write(src + "/a.txt", "one\n")
        try pushConfig(box, remote: nginx.url + "site/")
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        var times = [timespec(tv_sec: time(nil) + 5000, tv_nsec: 0), timespec(tv_sec: time(nil) + 5000, tv_nsec: 0)]
        utimensat(AT_FDCWD, remote + "/manifest.json", &times, 0)
        write(src + "/a.txt", "two\n")
        let started = Date()
        let run = box.sync(["--session", "up"], timeout: 60)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(Date().timeIntervalSince(started) < 30, "no wait on the remote's clock")
        #expect(fileContents(remote + "/a.txt") == "two\n")
    }
}

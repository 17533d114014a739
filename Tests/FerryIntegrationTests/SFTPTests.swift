import Foundation
import Testing

/// `sftp://` end to end, through the ferry binary, against OpenSSH's sshd (`SSHServer`): a pull
/// that `kill -9` interrupts at random moments never leaves a wrong byte at a final path and
/// resumes; a server whose host key is not the one known, or that is not known at all, or that
/// refuses the key, is refused with an error of its own, once; a symlink on the server is never
/// followed. A push that `kill -9` interrupts never leaves part of a file at a final name; a symlink
/// planted on the server is never written or removed through; a server that cannot rename
/// atomically is refused once, before anything is sent.
@Suite(.serialized)
struct SFTPTests {
    /// A sandbox whose published tree is the server's, and a config that reaches it.
    static func world(_ label: String, _ server: SSHServer, knownHosts: String? = nil, key: String? = nil, session: [String] = [],
                      agent: [String] = []) -> Sandbox {
        let box = Sandbox(label, published: server.root)
        box.configure(remote: server.url, session: ["sftp-key = \(key ?? server.clientKey)", "sftp-known-hosts = \(knownHosts ?? server.knownHosts)"] + session,
                      agent: agent)
        return box
    }

    @Test func killNineDuringASFTPPullNeverLeavesABadFileAndResumes() throws {
        let env = ProcessInfo.processInfo.environment
        let kills = Int(env["FERRY_KILLS"] ?? "") ?? (env["FERRY_SOAK"] != nil ? 40 : 8)
        let seed = UInt64(env["FERRY_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970 * 1000)
        var random = CrashTests.SeededRandom(state: seed)
        let server = try SSHServer()
        defer { server.stop() }
        // The bandwidth limit makes the transfers last (about 5 s in all) long enough for kills to
        // land mid-file after a checkpoint, even on a loaded machine where a start takes long.
        let box = Self.world("sftp-kill9", server, agent: ["bwlimit = 3M"])
        let publish = CrashTests.Published(box)
        publish("big/one.bin", randomData(8_000_000, seed: seed &+ 1))
        publish("big/two.bin", randomData(6_000_000, seed: seed &+ 2))
        for i in 0..<60 { publish("small/d\(i % 6)/s\(i).txt", randomData(1500 + i * 17, seed: seed &+ 100 &+ UInt64(i))) }
        box.buildManifest()

        var outputs: [String] = []
        for i in 0..<kills {
            let out = box.directory + "/run\(i).jsonl"
            outputs.append(out)
            let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--json"], stdout: out, stderr: box.directory + "/err\(i)")
            let (status, moment) = CrashTests.kill(child, within: 0.3...2.0, using: &random)
            CrashTests.expectVersions(under: box.local, publish.versions, "after kill \(i + 1) \(moment): %@ holds bytes the server never published (seed \(seed))")
            if status == 0 {
                publish("big/two.bin", randomData(6_000_000, seed: seed &+ 1000 &+ UInt64(i)))
                box.buildManifest()
            }
        }
        _ = CrashTests.finishAndCheckResumes(box, outputs: outputs, seed: seed, timeout: 300)
    }

    @Test func aServerThatIsNotTheKnownOneIsRefusedBeforeAnythingIsSent() throws {
        let server = try SSHServer()
        defer { server.stop() }
        let probe = Sandbox("sftp-probe", published: server.root)
        probe.publish("a.txt", "hello\n")
        probe.buildManifest()
        let empty = server.directory + "/empty_known_hosts"
        try "".writeReplacing(empty)

        let cases: [(String, Sandbox, [String])] = [
            ("another host key", Self.world("sftp-other", server, knownHosts: server.otherKnownHosts), ["is not the one", "SHA256:", "refused, nothing was sent"]),
            ("no host key", Self.world("sftp-unknown", server, knownHosts: empty), ["holds no key", "ssh-keyscan -p \(server.port) 127.0.0.1"]),
            ("a key the server refuses", Self.world("sftp-badkey", server, key: server.directory + "/other_host_key"), ["refused the key", "sftp-key"]),
        ]
        for (what, box, words) in cases {
            let run = box.sync([])
            #expect(run.exitCode != 0, "\(what): \(run.output)")
            for word in words { #expect(run.stderr.contains(word), "\(what): '\(word)' in \(run.stderr)") }
            #expect(run.stderr.components(separatedBy: "error:").count <= 2, "\(what): one error, not one per file: \(run.stderr)")
            #expect(!FileManager.default.fileExists(atPath: box.local + "/a.txt"), "\(what)")
        }
        let missing = Self.world("sftp-nofile", server, knownHosts: server.directory + "/no-such-file")
        let run = missing.sync([])
        #expect(run.exitCode == 2 && run.stderr.contains("sftp-known-hosts"), "\(run.output)")
    }

    /// A server that takes the connection and never says a word (the kernel completes the TCP
    /// handshake of a socket that listens and never accepts) is given up after connect-timeout,
    /// with an error that says so, once (the manifest is tried once here: each retry would wait as long).
    @Test func aServerThatNeverAnswersIsGivenUpAfterTheConnectTimeout() throws {
        let server = try SSHServer()
        defer { server.stop() }
        let silent = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(silent) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p -> Bool in
            bind(silent, p, length) == 0 && listen(silent, 8) == 0 && getsockname(silent, p, &length) == 0
        } }
        #expect(bound)
        let port = UInt16(bigEndian: address.sin_port)
        let box = Sandbox("sftp-silent")
        box.configure(remote: "sftp://\(server.user)@127.0.0.1:\(port)/srv/",
                      session: ["sftp-key = \(server.clientKey)", "sftp-known-hosts = \(server.knownHosts)", "connect-timeout = 2s", "retries = 1"])
        let run = box.sync([], timeout: 60)
        #expect(run.exitCode != 0, "\(run.output)")
        #expect(run.stderr.contains("did not answer in time (connecting)"), "\(run.stderr)")
        #expect(run.stderr.components(separatedBy: "error:").count == 2, "one error: \(run.stderr)")
    }

    /// `sftp-key` as OpenSSH takes a key: a FIFO (which used to hang the run), a file too large to be
    /// a key (never read) and a key others may read are refused at once, by the run and by `config check`, with the fix; a missing
    /// `sftp-known-hosts` is found by `config check`. Fixed, the run goes.
    @Test func aKeyFileThatIsNotAPrivateRegularFileIsRefused() throws {
        let server = try SSHServer()
        defer { server.stop() }
        let box = Sandbox("sftp-key-file", published: server.root)
        box.publish("a.txt", "hello\n")
        box.buildManifest()
        let fifo = box.directory + "/fifo_key"
        #expect(mkfifo(fifo, 0o600) == 0)
        box.configure(remote: server.url, session: ["sftp-key = \(fifo)", "sftp-known-hosts = \(server.knownHosts)"])
        var run = box.sync([], timeout: 60)
        #expect(run.exitCode == 2 && run.stderr.contains("\(fifo) (sftp-key) is not a regular file"), "\(run.output)")
        var check = ferry(["config", "check", "--config", box.config])
        #expect(check.exitCode == 2 && check.output.contains("(sftp-key) is not a regular file"), "\(check.output)")

        // A file far larger than any key is not read at all.
        let huge = box.directory + "/huge_key"
        #expect(FileManager.default.createFile(atPath: huge, contents: nil, attributes: [.posixPermissions: 0o600]) && truncate(huge, 1 << 30) == 0)
        box.configure(remote: server.url, session: ["sftp-key = \(huge)", "sftp-known-hosts = \(server.knownHosts)"])
        run = box.sync([], timeout: 60)
        #expect(run.exitCode == 2 && run.stderr.contains("(sftp-key) is 1073741824 bytes, more than a private key's 64 KiB"), "\(run.output)")

        let open = box.directory + "/open_key"
        try FileManager.default.copyItem(atPath: server.clientKey, toPath: open)
        chmod(open, 0o644)
        box.configure(remote: server.url, session: ["sftp-key = \(open)", "sftp-known-hosts = \(box.directory)/none"])
        run = box.sync([], timeout: 60)
        #expect(run.exitCode == 2 && run.stderr.contains("may be read by others (mode 0644): OpenSSH refuses such a key"), "\(run.output)")
        #expect(run.stderr.contains("chmod 600 \(open)"), "\(run.output)")
        check = ferry(["config", "check", "--config", box.config])
        #expect(check.exitCode == 2 && check.output.contains("may be read by others") && check.output.contains("sftp-known-hosts = \(box.directory)/none"),
                "\(check.output)")

        // A key with a passphrase is said to be one, not "refused by the server".
        let locked = box.directory + "/locked_key"
        let made = runProcess("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "a passphrase", "-f", locked])
        #expect(made.exitCode == 0, "\(made.output)")
        box.configure(remote: server.url, session: ["sftp-key = \(locked)", "sftp-known-hosts = \(server.knownHosts)"])
        run = box.sync([], timeout: 60)
        #expect(run.exitCode == 2 && run.stderr.contains("(sftp-key) is protected by a passphrase"), "\(run.output)")

        chmod(open, 0o600)
        box.configure(remote: server.url, session: ["sftp-key = \(open)", "sftp-known-hosts = \(server.knownHosts)"])
        run = box.sync([], timeout: 60)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(fileContents(box.localPath("a.txt")) == "hello\n")
    }

    /// A server that answers every read with nothing, or a byte at a time, cannot keep a run
    /// going: the manifest's read is refused with words that say what the server did.
    @Test(arguments: [("empty", "an empty answer"), ("dribble", "a little at a time")])
    func aServerThatAnswersReadsWithNothingOrDribblesIsRefused(mode: String, words: String) throws {
        let server = try SSHServer(sftpSubsystem: "/usr/bin/python3 \(Harness.packageRoot)/scripts/sftpfaults.py \(mode)")
        defer { server.stop() }
        let box = Self.world("sftp-hostile", server, session: ["retries = 1"])
        let run = box.sync([], timeout: 60)
        #expect(run.exitCode != 0, "\(run.output)")
        #expect(run.stderr.contains(words), "\(run.stderr)")
    }

    /// A name the manifest lists that is a symlink on the server (to a file outside the remote,
    /// or inside it) is refused: its bytes are never read, the local file never written.
    @Test func aSymlinkOnTheServerIsNeverFollowed() throws {
        let server = try SSHServer()
        defer { server.stop() }
        let box = Self.world("sftp-symlink", server)
        let secret = server.directory + "/outside-secret.txt"
        try "secret\n".writeReplacing(secret)
        box.publish("plain.txt", "plain\n")
        box.publish("link.txt", "secret\n")
        box.buildManifest()
        unlink(server.root + "/link.txt")
        symlink(secret, server.root + "/link.txt")
        let run = box.sync([])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.stderr.contains("is a symlink"), "\(run.stderr)")
        #expect(FileManager.default.contents(atPath: box.local + "/plain.txt") == Data("plain\n".utf8))
        #expect(!FileManager.default.fileExists(atPath: box.local + "/link.txt"))
    }

    // MARK: push

    /// The push kill loop (`CrashTests.pushKillLoop`) against sshd: after every kill each file at a
    /// final name holds a version the local tree had, never part of an upload; at the end one run
    /// completes, nothing is left in `.ferry/upload`, and a pull of the remote is byte-identical.
    @Test func killNineDuringASFTPPushNeverLeavesAPartialFileAndTheNextRunCompletes() throws {
        let server = try SSHServer()
        defer { server.stop() }
        try CrashTests.pushKillLoop("sftp-push-kill9", remote: server.url, keys: ["sftp-key = \(server.clientKey)", "sftp-known-hosts = \(server.knownHosts)"],
                                    remoteRoot: server.root)
    }

    /// `remote-layout = objects` over SFTP: each file's bytes go to one object per content under
    /// `.ferry/data/` (the large one's as its pieces), the metadata under `.ferry/meta/`; a pull of the published manifest
    /// (another session, through the same server) is byte-identical, and a second push of the
    /// unchanged tree uploads nothing.
    @Test func aPushOfContentObjectsRoundTripsThroughAPull() throws {
        let server = try SSHServer()
        defer { server.stop() }
        let box = Sandbox("sftp-objects")
        let src = box.directory + "/src"
        for (i, size) in [0, 1, 70_000, 1_300_000].enumerated() {
            try FileManager.default.createDirectory(atPath: src + "/d\(i % 2)", withIntermediateDirectories: true)
            try randomData(size, seed: UInt64(40 + i)).write(to: URL(fileURLWithPath: src + "/d\(i % 2)/f\(i).bin"))
        }
        let keys = "sftp-key = \(server.clientKey)\nsftp-known-hosts = \(server.knownHosts)\n"
        try """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = \(server.url)
            local = \(src)
            remote-layout = objects
            \(keys)[session down]
            remote = \(server.url)
            local = \(box.directory)/dst
            \(keys)
            """.writeReplacing(box.config)
        let up = box.sync(["--session", "up"])
        #expect(up.exitCode == 0, "\(up.output)")
        let objects = try FileManager.default.subpathsOfDirectory(atPath: server.root + "/.ferry/data")
        #expect(objects.count >= 4, "content objects under .ferry/data: \(objects)")
        // From delta-min-size (1 MiB) a file is stored as its pieces, each an object of its own.
        let large = sha256(of: randomData(1_300_000, seed: 43)).hex
        #expect(!objects.contains { $0.hasSuffix(large) } && objects.filter { $0.count > 3 }.count > 5, "the large file went as pieces: \(objects)")
        #expect(!FileManager.default.fileExists(atPath: server.root + "/d1/f3.bin"), "no file at its path in the objects layout")
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "\(down.output)")
        expectIdentical(src, box.directory + "/dst")
        let again = box.sync(["--session", "up", "--json"])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(!again.stdout.contains("\"file-started\""), "nothing uploaded again: \(again.stdout.prefix(2000))")
    }

    /// A symlink planted on the server, where a directory on a file's way or the remote's
    /// `.ferry` should be, and pointing outside the remote: the push is refused with words that
    /// say so, and nothing outside the remote is written or removed (a deletion through it neither).
    @Test func aPushNeverWritesOrRemovesThroughASymlinkOnTheServer() throws {
        let server = try SSHServer()
        defer { server.stop() }
        let box = Self.world("sftp-push-symlink", server, session: ["direction = push", "delete = yes", "retries = 1"])
        box.publish("unused", "")
        let fm = FileManager.default
        func put(_ path: String, _ text: String) {
            try! fm.createDirectory(atPath: ((box.local + "/" + path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try! text.writeReplacing(box.local + "/" + path)
        }
        put("sub/victim.txt", "mine\n")
        put("top.txt", "top\n")
        let first = box.sync([])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(fm.contents(atPath: server.root + "/sub/victim.txt") == Data("mine\n".utf8))

        let outside = server.directory + "/outside"
        try fm.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try "theirs\n".writeReplacing(outside + "/victim.txt")
        try fm.removeItem(atPath: server.root + "/sub")
        symlink(outside, server.root + "/sub")
        try fm.removeItem(atPath: box.local + "/sub/victim.txt")
        put("sub/new.txt", "new\n")
        let second = box.sync([])
        #expect(second.exitCode != 0, "\(second.output)")
        #expect(second.stderr.contains("is a symlink"), "\(second.stderr)")
        #expect(fm.contents(atPath: outside + "/victim.txt") == Data("theirs\n".utf8), "nothing removed through the symlink")
        #expect(!fm.fileExists(atPath: outside + "/new.txt"), "nothing written through the symlink")

        unlink(server.root + "/sub")
        try fm.removeItem(atPath: server.root + "/.ferry")
        symlink(outside, server.root + "/.ferry")
        put("top.txt", "top, again\n")
        put("more/one.txt", "one\n")
        put("more/two.txt", "two\n")
        let third = box.sync([])
        #expect(third.exitCode != 0, "\(third.output)")
        #expect(third.stderr.contains("is a symlink"), "\(third.stderr)")
        #expect(third.stderr.components(separatedBy: "is a symlink").count == 2, "said once, for the run: \(third.stderr)")
        #expect(try fm.contentsOfDirectory(atPath: outside) == ["victim.txt"], "no upload made through .ferry")
        #expect(fm.contents(atPath: server.root + "/top.txt") == Data("top\n".utf8))
    }

    /// A server without `posix-rename@openssh.com` cannot replace a file atomically: the push is
    /// refused before any byte is sent, with one error that names what is missing (not one per file).
    @Test func aPushToAServerWithoutAtomicRenameIsRefused() throws {
        let server = try SSHServer(sftpSubsystem: "/usr/bin/python3 \(Harness.packageRoot)/scripts/sftpfaults.py missing")
        defer { server.stop() }
        let box = Self.world("sftp-no-rename", server, session: ["direction = push", "retries = 1"])
        try FileManager.default.createDirectory(atPath: box.local, withIntermediateDirectories: true)
        for name in ["a", "b", "c"] { try "data \(name)\n".writeReplacing(box.local + "/\(name).txt") }
        let run = box.sync([], timeout: 60)
        #expect(run.exitCode != 0, "\(run.output)")
        #expect(run.stderr.contains("lacks posix-rename@openssh.com"), "\(run.stderr)")
        #expect(run.stderr.components(separatedBy: "lacks posix-rename").count == 2, "said once, not once per file: \(run.stderr)")
    }
}

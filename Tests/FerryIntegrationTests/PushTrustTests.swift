import Foundation
import Testing

/// Push against remotes that get in the way or do not do what they answer: a directory that
/// became a file, a source that holds a file named like the manifest, an answer lost after the
/// manifest moved, servers that store other bytes than were sent or move nothing, files edited on
/// the remote, directories a push emptied, a file no one can read, a path longer than PATH_MAX.
/// Each case fails on the code before it, and here ends with a remote that holds what its manifest
/// says.
@Suite(.serialized)
struct PushTrustTests {
    let p = PushTests()

    /// Two sessions, one pushing `src` to `url`, one pulling it into `dst`, with `extra` lines for the push.
    func configure(_ box: Sandbox, url: String, push extra: [String] = []) throws {
        try p.config(box, remote: url, up: extra.joined(separator: "\n"))
    }

    /// A directory that becomes a file is replaced on the remote (WebDAV collections are deleted
    /// as collections, once they are empty), and a push that deletes every file of a directory
    /// removes the directory too. Nothing wedges: the next runs are in sync.
    @Test(arguments: ["nginx", "apache", "file"])
    func aDirectoryThatBecomesAFileAndDirectoriesAPushEmptied(kind: String) throws {
        let remote = try PushTests.PushRemote(kind)
        let box = Sandbox("push-dir-file-\(kind)")
        let src = box.directory + "/src"
        p.write(src, "x/a", Data("a\n".utf8))
        p.write(src, "x/sub/b", Data("b\n".utf8))
        for i in 0..<4 { p.write(src, "keep/c\(i)", Data("c\n".utf8)) }
        p.write(src, "gone/deep/d", Data("d\n".utf8))
        try configure(box, url: remote.url)
        p.pushThenPull(box, remoteRoot: remote.root)

        try FileManager.default.removeItem(atPath: src + "/x")
        p.write(src, "x", Data("x is a file now\n".utf8))
        try FileManager.default.removeItem(atPath: src + "/gone")
        let run = box.sync(["--session", "up"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(fileContents(remote.root + "/x") == "x is a file now\n")
        #expect(!FileManager.default.fileExists(atPath: remote.root + "/gone"), "the emptied directories are gone")
        #expect(FileManager.default.fileExists(atPath: remote.root + "/keep/c0"))
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "\(down.output)")
        #expect(p.tree(box.directory + "/dst") == p.tree(src))
        let again = box.sync(["--session", "up"])
        #expect(again.exitCode == 0 && again.output.contains("nothing to transfer"), "\(again.output)")
    }

    /// A file that someone else left in a directory that must become a file keeps the directory:
    /// that one path fails with a clear error (never "waiting for connectivity"), the rest is
    /// published, and the file in the way is not deleted.
    @Test(arguments: ["nginx", "file"])
    func aDirectoryHoldingSomeoneElsesFileIsNotRemoved(kind: String) throws {
        let remote = try PushTests.PushRemote(kind)
        let box = Sandbox("push-dir-foreign-\(kind)")
        let src = box.directory + "/src"
        p.write(src, "x/a", Data("a\n".utf8))
        p.write(src, "y", Data("y\n".utf8))
        try configure(box, url: remote.url)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        try "not ferry's\n".writeReplacing(remote.root + "/x/theirs")
        try FileManager.default.removeItem(atPath: src + "/x")
        p.write(src, "x", Data("x\n".utf8))
        p.write(src, "y", Data("y, changed\n".utf8))
        let run = box.sync(["--session", "up"])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.output.contains("still holds files ferry did not publish"), "\(run.output)")
        #expect(fileContents(remote.root + "/x/theirs") == "not ferry's\n")
        #expect(fileContents(remote.root + "/y") == "y, changed\n", "the rest was published")
        #expect(!box.status().stdout.contains("waiting for connectivity"))
    }

    /// The session's manifest name and `.ferry/` in a push source are not content: skipped with one
    /// warning, never published, and every pull of the remote works.
    @Test func aSourceHoldingAManifestOfItsOwnIsPublishedWithoutIt() throws {
        let remote = try PushTests.PushRemote("nginx")
        let box = Sandbox("push-own-manifest")
        let src = box.directory + "/src"
        p.write(src, "a.txt", Data("a\n".utf8))
        p.write(src, "manifest.json", Data("{\"not\": \"ferry's\"}\n".utf8))
        p.write(src, ".ferry/partial/1.part", Data("leftover\n".utf8))
        try configure(box, url: remote.url)
        let first = box.sync(["--session", "up"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(first.output.contains("skipped manifest.json") && first.output.contains("skipped .ferry/"), "\(first.output)")
        let published = publishedListing(remote.root)
        #expect(published.contains("a.txt") && !published.split(separator: "\n").contains("manifest.json"), "\(published)")
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "\(down.output)")
        p.write(src, "a.txt", Data("a, changed\n".utf8))
        let second = box.sync(["--session", "up"])
        #expect(second.exitCode == 0, "\(second.output)")
        #expect(!second.output.contains("skipped manifest.json"), "said once: \(second.output)")
        #expect(box.sync(["--session", "down"]).exitCode == 0)
        #expect(fileContents(box.directory + "/dst/a.txt") == "a, changed\n")
    }

    /// The server moved the manifest into place but the answer was lost (the connection reset after
    /// the move): the run sees its own manifest on the remote and succeeds. When even that cannot be
    /// seen (the remote fails right after), the next run recognizes the manifest as its own instead
    /// of reporting a conflict with another writer.
    @Test func aLostAnswerToTheManifestMoveIsRecognized() throws {
        let box = Sandbox("push-lost-answer")
        let remoteDir = box.directory + "/remote"
        try FileManager.default.createDirectory(atPath: remoteDir, withIntermediateDirectories: true)
        let server = try PythonServer(directory: remoteDir, extra: ["--dav"])
        defer { server.stop() }
        let src = box.directory + "/src"
        p.write(src, "a.txt", Data("one\n".utf8))
        try configure(box, url: server.url)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let v1 = try #require(manifestVersion(remoteDir + "/manifest.json"))

        server.setFaults(["/manifest.json": ["move_then_reset": true]])
        p.write(src, "a.txt", Data("two\n".utf8))
        let lost = box.sync(["--session", "up"])
        #expect(lost.exitCode == 0, "\(lost.output)")
        let v2 = try #require(manifestVersion(remoteDir + "/manifest.json"))
        #expect(v2 > v1, "the lost answer's manifest was published")

        server.setFaults(["/manifest.json": ["move_then_reset": true, "gets_fail_after_move": 3]])
        p.write(src, "a.txt", Data("three\n".utf8))
        let unknown = box.sync(["--session", "up"])
        #expect(unknown.exitCode != 0, "the run cannot tell: \(unknown.output)")
        #expect((manifestVersion(remoteDir + "/manifest.json") ?? 0) > v2, "the server did publish it")
        server.setFaults([:])
        let next = box.sync(["--session", "up"])
        #expect(next.exitCode == 0, "no false conflict: \(next.output)")
        #expect(!next.output.contains("conflict"), "\(next.output)")
        #expect(box.sync(["--session", "down"]).exitCode == 0)
        #expect(fileContents(box.directory + "/dst/a.txt") == "three\n")
    }

    /// A server that stores other bytes than it was sent, or answers a MOVE without moving: the
    /// run says so (exit 1) and the manifest never lists bytes the remote does not hold; once the
    /// server behaves, the next run repairs the file.
    @Test(arguments: [
        ("store_truncate", "10", "holds 10 bytes"),
        ("store_flip", "true", "SHA-256"),
        ("move_noop", "true", "not at its final name"),
        ("move_elsewhere", "\".x\"", "not at its final name"),
    ])
    func whatTheServerStoredIsChecked(fault: String, value: String, says: String) throws {
        let box = Sandbox("push-lies-\(fault)")
        let remoteDir = box.directory + "/remote"
        try FileManager.default.createDirectory(atPath: remoteDir, withIntermediateDirectories: true)
        let server = try PythonServer(directory: remoteDir, extra: ["--dav", "--digests"])
        defer { server.stop() }
        let src = box.directory + "/src"
        let body = randomData(100_000, seed: 9)
        p.write(src, "a.bin", body)
        p.write(src, "b.txt", Data("b\n".utf8))
        try configure(box, url: server.url)
        let parsed = try JSONSerialization.jsonObject(with: Data(value.utf8), options: .fragmentsAllowed)
        server.setFaults(["/a.bin": [fault: parsed]])
        let run = box.sync(["--session", "up"])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.output.contains(says), "\(run.output)")
        let manifest = publishedListing(remoteDir)
        #expect(manifest.contains("b.txt") && !manifest.contains("a.bin"), "the manifest lists only what the remote holds: \(manifest)")

        server.setFaults([:])
        let repaired = box.sync(["--session", "up"])
        #expect(repaired.exitCode == 0, "\(repaired.output)")
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "\(down.output)")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/a.bin") == body)
    }

    /// A file edited on the remote since ferry placed it is a conflict (the default conflict = fail
    /// reports it and changes nothing), and local-wins replaces it; one deleted on the remote is
    /// found too (every placed file is checked: at once for a local directory, after
    /// verify-interval over HTTP) and put back.
    @Test(arguments: ["nginx", "file"])
    func filesEditedOnTheRemoteAreConflicts(kind: String) throws {
        let remote = try PushTests.PushRemote(kind)
        let box = Sandbox("push-edited-\(kind)")
        let src = box.directory + "/src"
        p.write(src, "a.txt", Data("ours\n".utf8))
        p.write(src, "b.txt", Data("b\n".utf8))
        try configure(box, url: remote.url, push: ["verify-interval = 1s"])
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        // Someone edits a.txt in place on the remote (same size, a later mtime).
        try "edit\n".writeReplacing(remote.root + "/a.txt")
        var times = [timespec(tv_sec: time(nil) - 100, tv_nsec: 0), timespec(tv_sec: time(nil) - 100, tv_nsec: 0)]
        utimensat(AT_FDCWD, remote.root + "/a.txt", &times, 0)
        p.write(src, "a.txt", Data("ours, v2\n".utf8))
        let refused = box.sync(["--session", "up"])
        #expect(refused.exitCode == 1, "\(refused.output)")
        #expect(refused.output.contains("a.txt: conflict: changed on the remote since ferry placed it"), "\(refused.output)")
        #expect(fileContents(remote.root + "/a.txt") == "edit\n", "not overwritten")

        try p.config(box, remote: remote.url, up: "verify-interval = 1s\nconflict = local-wins")
        let replaced = box.sync(["--session", "up"])
        #expect(replaced.exitCode == 0, "\(replaced.output)")
        #expect(fileContents(remote.root + "/a.txt") == "ours, v2\n")

        // Deleted on the remote, unchanged locally: found and put back.
        try FileManager.default.removeItem(atPath: remote.root + "/b.txt")
        #expect(eventually(5) { box.sync(["--session", "up"]).exitCode == 0 && fileContents(remote.root + "/b.txt") == "b\n" },
                "the missing file is sent again")
        #expect(box.sync(["--session", "down"]).exitCode == 0)
        #expect(p.tree(box.directory + "/dst") == p.tree(src))
    }

    /// A push of `secret.txt` and `open.txt` published as v1 (returned), then `secret.txt` written
    /// anew as `secret` (and `open.txt` as `open`, if given) and made unreadable to `nobody`, who
    /// owns everything else.
    func unreadableChange(_ label: String, secret: String, open: String?) throws -> (PushTests.PushRemote, Sandbox, String, Int64) {
        let remote = try PushTests.PushRemote("file")
        let box = Sandbox(label)
        let src = box.directory + "/src"
        p.write(src, "secret.txt", Data("v1\n".utf8))
        p.write(src, "open.txt", Data("v1\n".utf8))
        try configure(box, url: remote.url)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let v1 = try #require(manifestVersion(remote.root + "/manifest.json"))
        p.write(src, "secret.txt", Data(secret.utf8))
        if let open { p.write(src, "open.txt", Data(open.utf8)) }
        _ = runProcess("/bin/chown", ["-R", "65534:65534", box.directory, remote.root])
        chmod(box.directory, 0o755)
        chown(src + "/secret.txt", 0, 0)
        chmod(src + "/secret.txt", 0o600)
        return (remote, box, src, v1)
    }

    /// A file no one can read fails alone (exit 1): the rest is published, and the manifest goes on
    /// listing what the remote holds at its path. (As `nobody`: root reads everything.)
    @Test func anUnreadableFileFailsAlone() throws {
        let (remote, box, _, v1) = try unreadableChange("push-unreadable", secret: "v2, unreadable\n", open: "v2\n")
        let run = runProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", Harness.ferryBinary,
                                                  "sync", "now", "--config", box.config, "--session", "up"])
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.output.contains("secret.txt"), "\(run.output)")
        #expect(fileContents(remote.root + "/open.txt") == "v2\n", "the rest was published")
        #expect(fileContents(remote.root + "/secret.txt") == "v1\n")
        let manifest = publishedListing(remote.root)
        #expect((manifestVersion(remote.root + "/manifest.json") ?? 0) > v1 && manifest.contains("secret.txt"), "it still lists what the remote holds: \(manifest)")
    }

    /// A changed file that cannot be read, and nothing else changed: nothing is published, but the
    /// run is not in sync (exit 1, every run), and the agent tries it again on its schedule though
    /// nothing under the root changes; once it can be read it is published. (As `nobody`.)
    @Test(.enabled(if: getuid() == 0, "needs root to run ferry as nobody"))
    func anUnreadableChangeAloneFailsEveryRunAndTheAgentRetriesIt() throws {
        // At the size published: the scan hashes it to tell whether it changed, and cannot.
        let (remote, box, src, v1) = try unreadableChange("push-unreadable-alone", secret: "v2\n", open: nil)
        let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", Harness.ferryBinary]
        for _ in 0..<2 {
            let run = runProcess("/usr/bin/setpriv", asNobody + ["sync", "now", "--config", box.config, "--session", "up"])
            #expect(run.exitCode == 1, "\(run.output)")
            #expect(run.output.contains("secret.txt") && !run.output.contains("in sync"), "\(run.output)")
        }
        #expect(manifestVersion(remote.root + "/manifest.json") == v1, "nothing else changed: nothing was published")

        // The agent: every poll (1 s) tries the file again, with no change under the root between.
        let text = try String(contentsOfFile: box.config, encoding: .utf8).replacingOccurrences(of: "[session up]", with: "[session up]\npoll = 1s")
        try text.writeReplacing(box.config)
        chown(box.config, 65534, 65534)
        let log = box.state + "/events/up.jsonl"
        func failures() -> Int { (fileContents(log) ?? "").components(separatedBy: "\n").filter { $0.contains("\"file-failed\"") && $0.contains("secret.txt") }.count }
        let before = failures()
        let out = box.directory + "/agent.out"
        let agent = try Child("/usr/bin/setpriv", asNobody + ["agent", "--config", box.config], stdout: out, stderr: out)
        defer { agent.stop() }
        #expect(eventually(30) { failures() >= before + 3 }, "retried on each poll: \(failures() - before) failures; \(fileContents(out) ?? "")")
        chmod(src + "/secret.txt", 0o644)
        #expect(eventually(30) { fileContents(remote.root + "/secret.txt") == "v2\n" && (manifestVersion(remote.root + "/manifest.json") ?? 0) > v1 },
                "published once readable: \(fileContents(out) ?? "")")
    }

    /// A file whose absolute path is longer than PATH_MAX (its path under the root is not) is read
    /// one directory at a time and published like any other.
    @Test func aPathLongerThanPathMaxIsPublished() throws {
        let remote = try PushTests.PushRemote("file")
        let box = Sandbox("push-long")
        var src = box.directory + "/src"
        // The local root itself lies deep: about 3,000 bytes of directories.
        for i in 0..<15 { src += "/" + String(repeating: Character(UnicodeScalar(UInt8(97 + i))), count: 240) }
        let relative = (0..<5).map { String(repeating: Character(UnicodeScalar(UInt8(65 + $0))), count: 200) }.joined(separator: "/") + "/file.txt"
        #expect(src.utf8.count + relative.utf8.count > Int(PATH_MAX))
        #expect(makeDeep(src + "/" + relative, "deep\n"))
        // rm removes a tree too deep for one path; the sandbox's own removal could not.
        defer { runProcess("/bin/rm", ["-rf", box.directory + "/src"]) }
        try """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = \(remote.url)
            local = \(src)
            """.writeReplacing(box.config)
        let run = box.sync(["--session", "up"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: remote.root + "/" + relative) == Data("deep\n".utf8))
    }

    /// Creates `path` with `text`, one directory at a time (relative to each parent: the whole path
    /// is too long for one call).
    func makeDeep(_ path: String, _ text: String) -> Bool {
        var fd = open("/", O_RDONLY | O_DIRECTORY)
        let parts = path.split(separator: "/").map(String.init)
        for part in parts.dropLast() {
            mkdirat(fd, part, 0o755)
            let next = openat(fd, part, O_RDONLY | O_DIRECTORY)
            close(fd)
            guard next >= 0 else { return false }
            fd = next
        }
        let file = openat(fd, parts.last!, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        close(fd)
        guard file >= 0 else { return false }
        _ = text.withCString { write(file, $0, strlen($0)) }
        close(file)
        return true
    }

    /// A symlink in a push source is said once (again only when it changes), not on every scan;
    /// the rest are counted.
    @Test func symlinkWarningsAreSaidOncePerPath() throws {
        let remote = try PushTests.PushRemote("file")
        let box = Sandbox("push-symlinks")
        let src = box.directory + "/src"
        p.write(src, "a.txt", Data("a\n".utf8))
        for i in 0..<5 { try FileManager.default.createSymbolicLink(atPath: src + "/link\(i)", withDestinationPath: "a.txt") }
        try configure(box, url: remote.url)
        let first = box.sync(["--session", "up", "--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(first.events(named: "warning").filter { ($0["message"] as? String)?.contains("skipped symlink") == true }.count == 5)
        p.write(src, "a.txt", Data("a, changed\n".utf8))
        let second = box.sync(["--session", "up", "--json"])
        let repeated = second.events(named: "warning").filter { ($0["message"] as? String)?.contains("skipped symlink") == true }
        #expect(repeated.count == 0, "\(second.output)")
        let counted = second.events(named: "planned").first?["skipped"] as? Int
        #expect(counted == 5, "counted: \(second.output)")
        // One changes: said again, alone.
        try FileManager.default.removeItem(atPath: src + "/link3")
        try FileManager.default.createSymbolicLink(atPath: src + "/link3", withDestinationPath: "elsewhere")
        let third = box.sync(["--session", "up", "--json"])
        let said = third.events(named: "warning").compactMap { $0["message"] as? String }.filter { $0.contains("skipped symlink") }
        #expect(said.count == 1 && said[0].contains("link3"), "\(said)")
    }
}

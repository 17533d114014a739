import Foundation
import Testing

/// Attacks from whoever can write a `file://` remote or a directory ferry writes into, and from a
/// local user who swaps a file for a FIFO: each case is the attack itself, and each checks that
/// nothing is read, written or deleted outside its place and that no thread hangs
/// (product.md §6 rules 10-12).
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
}

import Foundation
import Testing

/// A path that changes type — on the remote (file ↔ directory) or locally (a directory replaced by
/// a file, a file by a directory, a directory by a symlink or a FIFO) — converges in one run. The
/// manifest is the authority over the paths it lists: what stands in the way of a listed path is
/// replaced whatever `delete` says; a directory in the way of a listed file goes only if what it
/// holds may be deleted. Nothing is followed through a symlink or written outside the root.
@Suite(.serialized)
struct TypeChangeTests {
    @Test(arguments: ["delete = yes", "delete = no"])
    func theRemoteTurnsAFileIntoADirectory(delete: String) throws {
        let w = try SyncedMirror("remote-file-dir", session: [delete], files: ["a/x": "a file\n", "keep.txt": "keep\n"])
        w.box.unpublish("a/x")
        w.box.publish("a/x/inner.txt", "now a directory\n")
        w.box.publish("a/x/deeper/more.txt", "and more\n")
        w.box.buildManifest()
        let run = w.expectConverges()
        #expect(run.stdout.contains("replaced the file a/x with a directory"), "\(run.stdout)")
        #expect(fileContents(w.box.localPath("a/x/inner.txt")) == "now a directory\n")
    }

    /// The replacement does not postpone the run's deletions: a file the remote dropped goes in
    /// the same run.
    @Test func theRemoteTurnsADirectoryIntoAFile() throws {
        var files = ["b/y/1.txt": "one\n", "b/y/sub/2.txt": "two\n", "b/other.txt": "other\n", "c.txt": "c\n"]
        for i in 0..<4 { files["k\(i).txt"] = "\(i)\n" }
        let w = try SyncedMirror("remote-dir-file", session: ["delete = yes"], files: files)
        try FileManager.default.removeItem(atPath: w.box.published + "/b/y")
        w.box.publish("b/y", "now a file\n")
        w.box.unpublish("c.txt")
        w.box.buildManifest()
        let run = w.expectConverges()
        #expect(run.stdout.contains("deleted b/y/1.txt") && run.stdout.contains("deleted b/y/sub/2.txt"), "\(run.stdout)")
        #expect(run.stdout.contains("replaced the directory b/y with a file"))
        #expect(run.stdout.contains("deleted c.txt"), "deletions are not postponed by the replacement: \(run.stdout)")
        #expect(run.stdout.contains("3 deleted"), "\(run.stdout)")
        #expect(fileContents(w.box.localPath("b/y")) == "now a file\n")
    }

    /// With `delete = no` the files a directory in the way holds are kept: that file fails, naming
    /// the path and what to do, and nothing is removed.
    @Test func aDirectoryInTheWayIsKeptWhenTheSessionDoesNotDelete() throws {
        let w = try SyncedMirror("dir-kept", session: ["delete = no"], files: ["b/y/1.txt": "one\n", "other.txt": "o\n"])
        try FileManager.default.removeItem(atPath: w.box.published + "/b/y")
        w.box.publish("b/y", "now a file\n")
        w.box.publish("new.txt", "new\n")
        w.box.buildManifest()
        let run = w.box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.stderr.contains("b/y is a directory holding 1 file where the manifest has a file; delete = no keeps them: move them away, or set delete = yes"),
                "\(run.stderr)")
        #expect(fileContents(w.box.localPath("b/y/1.txt")) == "one\n", "nothing removed")
        #expect(fileContents(w.box.localPath("new.txt")) == "new\n", "the other files arrive")
        // An empty directory holds nothing to keep: it gives way whatever delete says.
        try FileManager.default.removeItem(atPath: w.box.localPath("b/y/1.txt"))
        _ = w.expectConverges()
    }

    @Test func aDirectoryInTheWayCountsAgainstMaxDelete() throws {
        let w = try SyncedMirror("dir-cap", session: ["delete = yes", "max-delete = 2"],
                          files: ["b/y/1.txt": "1\n", "b/y/2.txt": "2\n", "b/y/3.txt": "3\n", "z.txt": "z\n"])
        try FileManager.default.removeItem(atPath: w.box.published + "/b/y")
        w.box.publish("b/y", "now a file\n")
        w.box.buildManifest()
        let run = w.box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.stderr.contains("b/y is a directory holding 3 files where the manifest has a file; removing them would pass max-delete = 2"),
                "\(run.stderr)")
        #expect(run.output.contains("refused to delete 3 files"), "\(run.output)")
        for i in 1...3 { #expect(FileManager.default.fileExists(atPath: w.box.localPath("b/y/\(i).txt"))) }
        w.configure(session: ["delete = yes", "max-delete = 3"])
        _ = w.expectConverges()
    }

    @Test(arguments: ["delete = yes", "delete = no"])
    func aLocalDirectoryReplacedByAFile(delete: String) throws {
        let w = try SyncedMirror("local-dir-file", session: [delete], files: ["d/f1": "1\n", "d/f2": "2\n", "e": "e\n"])
        try FileManager.default.removeItem(atPath: w.box.localPath("d"))
        try "a file where a directory was\n".writeReplacing(w.box.localPath("d"))
        let run = w.expectConverges()
        #expect(run.stdout.contains("replaced the file d with a directory"), "\(run.stdout)")
    }

    @Test func aLocalFileReplacedByADirectory() throws {
        let w = try SyncedMirror("local-file-dir", session: ["delete = yes"], files: ["f": "file\n", "g": "g\n", "h": "h\n"])
        try FileManager.default.removeItem(atPath: w.box.localPath("f"))
        try FileManager.default.createDirectory(atPath: w.box.localPath("f/junk"), withIntermediateDirectories: true)
        try "junk\n".writeReplacing(w.box.localPath("f/junk/file"))
        let run = w.expectConverges()
        #expect(run.stdout.contains("deleted f/junk/file"), "\(run.stdout)")
    }

    @Test func aLocalDirectoryReplacedByASymlinkInsideTheRoot() throws {
        let w = try SyncedMirror("local-link-in", session: ["delete = yes"], files: ["d/f": "f\n", "e/g": "g\n"])
        try FileManager.default.removeItem(atPath: w.box.localPath("d"))
        try FileManager.default.createSymbolicLink(atPath: w.box.localPath("d"), withDestinationPath: "e")
        let run = w.expectConverges()
        #expect(run.stdout.contains("replaced the symlink d with a directory"), "\(run.stdout)")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: w.box.localPath("d"))) == nil)
        #expect(fileContents(w.box.localPath("e/g")) == "g\n", "what the link pointed to is untouched")
        #expect((try FileManager.default.contentsOfDirectory(atPath: w.box.localPath("e"))) == ["g"], "nothing written through the link")
    }

    @Test(arguments: ["delete = yes", "delete = no"])
    func aLocalDirectoryReplacedByASymlinkOutsideTheRoot(delete: String) throws {
        let w = try SyncedMirror("local-link-out", session: [delete], files: ["d/f": "f\n", "d/sub/h": "h\n"])
        let outside = w.box.directory + "/outside"
        try FileManager.default.createDirectory(atPath: outside + "/sub", withIntermediateDirectories: true)
        try "precious\n".writeReplacing(outside + "/f")
        try FileManager.default.removeItem(atPath: w.box.localPath("d"))
        try FileManager.default.createSymbolicLink(atPath: w.box.localPath("d"), withDestinationPath: outside)
        _ = w.expectConverges()
        #expect(fileContents(outside + "/f") == "precious\n", "never written through the link")
        #expect((try FileManager.default.contentsOfDirectory(atPath: outside)).sorted() == ["f", "sub"])
        #expect((try FileManager.default.contentsOfDirectory(atPath: outside + "/sub")).isEmpty)
    }

    @Test func aFIFOWhereADirectoryMustBe() throws {
        let w = try SyncedMirror("local-fifo", session: [], files: ["d/f": "f\n"])
        try FileManager.default.removeItem(atPath: w.box.localPath("d"))
        #expect(mkfifo(w.box.localPath("d"), 0o644) == 0)
        let run = w.expectConverges()
        #expect(run.stdout.contains("replaced the special file d with a directory"), "\(run.stdout)")
    }

    /// A directory in the way goes only with exactly the files the plan counted: a name ferry
    /// cannot list (not UTF-8), or a file that appeared during the run, keeps all of it.
    @Test func aDirectoryInTheWayHoldingWhatThePlanDidNotCountStays() throws {
        let w = try SyncedMirror("dir-uncounted", session: ["delete = yes"], files: ["b/y/1.txt": "1\n", "o1": "1\n", "o2": "2\n", "o3": "3\n"])
        createFile(in: w.box.localPath("b/y"), named: Array("caf".utf8) + [0xE9])
        let odd = Array(w.box.localPath("b/y/caf").utf8) + [0xE9, 0]
        try FileManager.default.removeItem(atPath: w.box.published + "/b/y")
        w.box.publish("b/y", randomData(400_000, seed: 31))
        w.box.buildManifest()
        let run = w.box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.stderr.contains("b/y is a directory where the manifest has a file, and it holds 1 name that is not UTF-8; nothing in it was removed"),
                "\(run.stderr)")
        #expect(fileContents(w.box.localPath("b/y/1.txt")) == "1\n")
        #expect(access(odd.map { CChar(bitPattern: $0) }, F_OK) == 0, "the unlistable file is still there")
        unlink(odd.map { CChar(bitPattern: $0) })

        // A file that appears while the replacement downloads is not ferry's to remove either.
        let server = try PythonServer(directory: w.box.published)
        defer { server.stop() }
        server.setFaults(["/b/y": ["rate": 400_000]])
        w.box.configure(remote: server.url, session: ["delete = yes"])
        try FileManager.default.removeItem(atPath: w.box.localPath(".ferry/partial"))
        let out = w.box.directory + "/appear.out", err = w.box.directory + "/appear.err"
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", w.box.config], stdout: out, stderr: err)
        server.waitForRequest("/b/y")
        try "arrived late\n".writeReplacing(w.box.localPath("b/y/late.txt"))
        #expect(child.wait(timeout: 30) == 1)
        let stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        #expect(stderr.contains("b/y is a directory where the manifest has a file, and it holds 1 file the plan did not count (b/y/late.txt)"), "\(stderr)")
        #expect(fileContents(w.box.localPath("b/y/late.txt")) == "arrived late\n")
        #expect(fileContents(w.box.localPath("b/y/1.txt")) == "1\n")

        // Once it is moved away, the next run places the file without fetching it again.
        try FileManager.default.removeItem(atPath: w.box.localPath("b/y/late.txt"))
        server.clearLog()
        let again = w.box.sync(["--json"])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(again.events(named: "file-done").first?["fetched"] as? Int == 0, "the verified partial was kept: \(again.stdout)")
        #expect(again.events(named: "file-deleted").compactMap { $0["path"] as? String } == ["b/y/1.txt"])
        expectIdentical(w.box.published, w.box.local)
    }
}

extension SyncedMirror {
    /// Runs twice: exit 0 both times, the mirror equals the remote, and the second run has nothing to do.
    func expectConverges(sourceLocation: SourceLocation = #_sourceLocation) -> FerryRun {
        let run = box.sync()
        #expect(run.exitCode == 0, "first run: \(run.output)", sourceLocation: sourceLocation)
        expectIdentical(box.published, box.local, sourceLocation: sourceLocation)
        let again = box.sync()
        #expect(again.exitCode == 0, "second run: \(again.output)", sourceLocation: sourceLocation)
        #expect(again.stdout.contains("nothing to transfer"), "\(again.output)", sourceLocation: sourceLocation)
        return run
    }
}

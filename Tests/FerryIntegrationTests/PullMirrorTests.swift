import Foundation
import Testing

/// `ferry sync now` against real nginx: a whole tree mirrored byte-identical, kept so through
/// remote adds, changes and deletes and local tampering, with nothing re-fetched or re-hashed
/// when nothing changed.
@Suite(.serialized)
struct PullMirrorTests {
    func publishSampleTree(_ box: Sandbox) {
        box.publish("a.txt", "hello ferry\n")
        box.publish("nested/deep/er/file.bin", randomData(100_000, seed: 2))
        box.publish("dir with spaces/file name.txt", "spaces\n")
        box.publish("ünïcødé/ç é.txt", "non-ascii\n")
        box.publish("q?#%&+;=.txt", "reserved characters\n")
        box.publish("empty", "")
        box.publish("large.bin", randomData(12_000_000, seed: 3))  // hashed on a second thread (≥ 8 MiB), checkpointed
        box.publish("private/mode600.txt", "private\n", mode: 0o600)
        box.publish("bin/tool.sh", "#!/bin/sh\necho hi\n", mode: 0o755)
    }

    @Test func mirrorsATreeAndFollowsRemoteAndLocalChanges() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("mirror", published: nginx.root + "/site")
        publishSampleTree(box)
        box.buildManifest()
        box.configure(remote: nginx.url + "site/", session: ["delete = yes"])

        // First run: everything arrives, verified, byte-identical with modes and mtimes.
        let first = box.sync(["--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(first.events(named: "file-done").count == 9)
        expectIdentical(box.published, box.local)
        #expect(first.events.count == first.stdout.split(separator: "\n").count, "every --json line is one JSON object")

        // Unchanged manifest and tree: one conditional request (304), nothing transferred or hashed.
        nginx.clearLog()
        let second = box.sync(["--json"])
        #expect(second.exitCode == 0)
        let fetched = try #require(second.events(named: "manifest-fetched").first)
        #expect(fetched["unchanged"] as? Bool == true)
        let planned = try #require(second.events(named: "planned").first)
        #expect(planned["downloads"] as? Int == 0)
        #expect(planned["hashed"] as? Int == 0)
        let requests = nginx.requests()
        #expect(requests.count == 1)
        #expect(requests.first?.path == "/site/manifest.json")
        #expect(requests.first?.status == 304)

        // Remote adds, changes and deletes.
        box.publish("new/added.txt", "added later\n")
        box.publish("a.txt", "hello ferry, version two\n")
        box.unpublish("empty")
        box.unpublish("nested/deep/er/file.bin")
        box.buildManifest()
        let third = box.sync(["--json"])
        #expect(third.exitCode == 0, "\(third.output)")
        #expect(Set(third.events(named: "file-done").compactMap { $0["path"] as? String }) == ["a.txt", "new/added.txt"])
        #expect(Set(third.events(named: "file-deleted").compactMap { $0["path"] as? String }) == ["empty", "nested/deep/er/file.bin"])
        expectIdentical(box.published, box.local)
        #expect(!FileManager.default.fileExists(atPath: box.localPath("nested")), "emptied directories are removed")

        // Local tampering: an edit that keeps the size, a deletion, extras, a chmod, a symlink.
        var tampered = try Data(contentsOf: URL(fileURLWithPath: box.localPath("large.bin")))
        tampered[1000] ^= 0xFF
        try tampered.write(to: URL(fileURLWithPath: box.localPath("large.bin")))
        try FileManager.default.removeItem(atPath: box.localPath("a.txt"))
        try "junk".writeReplacing(box.localPath("junk.txt"))
        try FileManager.default.createDirectory(atPath: box.localPath("junkdir/deeper"), withIntermediateDirectories: true)
        try "junk".writeReplacing(box.localPath("junkdir/deeper/x"))
        chmod(box.localPath("bin/tool.sh"), 0o600)
        try FileManager.default.removeItem(atPath: box.localPath("dir with spaces/file name.txt"))
        try FileManager.default.createSymbolicLink(atPath: box.localPath("dir with spaces/file name.txt"), withDestinationPath: "/etc/hostname")
        let fourth = box.sync(["--json"])
        #expect(fourth.exitCode == 0, "\(fourth.output)")
        let repaired = try #require(fourth.events(named: "planned").first)
        // The edit kept the size, and chmod moved ctime: those two are hashed, nothing else.
        #expect(repaired["hashed"] as? Int == 2)
        #expect(repaired["metadata_fixes"] as? Int == 1)
        expectIdentical(box.published, box.local)
        #expect(!FileManager.default.fileExists(atPath: box.localPath("junkdir")))
    }

    @Test func unchangedRemoteAfterPartialLocalDamageRepairsOnlyTheDamage() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("repair", published: nginx.root + "/site")
        for i in 0..<20 { box.publish("f\(i).txt", "file \(i)\n") }
        box.buildManifest()
        box.configure(remote: nginx.url + "site/")
        #expect(box.sync().exitCode == 0)
        try FileManager.default.removeItem(atPath: box.localPath("f7.txt"))
        try "extra".writeReplacing(box.localPath("extra.txt"))
        nginx.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0)
        #expect(nginx.requests().map(\.path) == ["/site/manifest.json", "/site/f7.txt"])
        #expect(fileContents(box.localPath("extra.txt")) == "extra", "delete = no keeps local extras")
        #expect(run.events(named: "planned").first?["extras_kept"] as? Int == 1)
    }

    @Test func worksWithPythonHTTPServerWithoutRangesOrETags() throws {
        let box = Sandbox("python")
        box.publish("one.txt", "one\n")
        box.publish("sub/two.bin", randomData(9_000_000, seed: 9))
        box.publish("sp ace/ü.txt", "three\n")
        box.buildManifest()
        let server = try PythonServer(directory: box.published, plain: true)
        defer { server.stop() }
        box.configure(remote: server.url)
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        expectIdentical(box.published, box.local)
        #expect(box.sync().exitCode == 0)
    }

    @Test func mirrorsAFileRemoteAndASHA256SUMSManifest() throws {
        let box = Sandbox("file")
        box.publish("x/y.txt", "from a file remote\n")
        box.publish("z.bin", randomData(50_000))
        let sums = runProcess("/bin/sh", ["-c", "cd '\(box.published)' && sha256sum x/y.txt z.bin > SHA256SUMS"])
        #expect(sums.exitCode == 0)
        box.configure(remote: "file://" + box.published, session: ["manifest = SHA256SUMS"])
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(fileContents(box.localPath("x/y.txt")) == "from a file remote\n")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("z.bin"))) == randomData(50_000))
        let again = box.sync(["--json"])
        #expect(again.events(named: "manifest-fetched").first?["unchanged"] as? Bool == true)
        #expect(again.events(named: "planned").first?["hashed"] as? Int == 0)
    }

    @Test func dryRunChangesNothing() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("dry", published: nginx.root + "/site")
        box.publish("a.txt", "a\n")
        box.publish("b/c.txt", "c\n")
        box.buildManifest()
        box.configure(remote: nginx.url + "site/")
        let run = box.sync(["--dry-run", "--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        let items = run.events(named: "plan-item")
        #expect(Set(items.compactMap { $0["path"] as? String }) == ["a.txt", "b/c.txt"])
        #expect(!FileManager.default.fileExists(atPath: box.local))
        let human = box.sync(["--dry-run"])
        #expect(human.stdout.contains("would download b/c.txt"))
        let status = box.status(["--json", "--files"])
        #expect(status.stdout.contains("\"tasks\":[]"), "\(status.stdout)")
        #expect(box.sync().exitCode == 0)
        expectIdentical(box.published, box.local)
    }

    @Test func showsProgressBarsOnATerminal() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("tty", published: nginx.root + "/site")
        box.publish("big.bin", randomData(3_000_000))
        box.buildManifest()
        box.configure(remote: nginx.url + "site/")
        // util-linux `script` gives ferry a pseudo-terminal, as an operator's shell would.
        let command = "\(Harness.ferryBinary) sync now --config \(box.config)"
        let run = runProcess("/usr/bin/script", ["-qec", command, "/dev/null"], environment: ["TERM": "xterm"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stdout.contains("[#"), "a progress bar was drawn")
        #expect(run.stdout.contains("100%"))
        #expect(run.stdout.contains("ETA"))
        #expect(run.stdout.contains("test: in sync"))
        let quiet = box.sync(["--quiet"])
        #expect(quiet.exitCode == 0)
        #expect(quiet.stdout.isEmpty && quiet.stderr.isEmpty)
    }
}

import Foundation
import Testing

/// Hostile manifests, lying servers, missing files, symlink traps: each gets a clear error and
/// loses nothing already synced.
@Suite(.serialized)
struct BadInputTests {
    static let hash = String(repeating: "a", count: 64)

    /// A synced tree to protect, then a hostile manifest in place of the good one.
    @Test(arguments: [
        ("not json {", "expected '<64 hex digits>  <path>'"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 9, \"files\": [{\"path\": \"a.txt\", \"size\": 1, \"sha256\": \"abc\"}]}", "sha256 must be 64 hex digits"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 9, \"files\": [{\"path\": \"x\", \"size\": 1, \"sha256\": \"\(hash)\"}, {\"path\": \"x\", \"size\": 1, \"sha256\": \"\(hash)\"}]}", "lists \"x\" twice"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 9, \"files\": [{\"path\": \"../../escaped.txt\", \"size\": 1, \"sha256\": \"\(hash)\"}]}", "has a '..' segment"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 9, \"files\": [{\"path\": \"/tmp/ferry-tests/absolute.txt\", \"size\": 1, \"sha256\": \"\(hash)\"}]}", "is absolute"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 9, \"files\": [{\"path\": \"nul\\u0000.txt\", \"size\": 1, \"sha256\": \"\(hash)\"}]}", "control character"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 9, \"files\": [{\"path\": \"bell\\u0007.txt\", \"size\": 1, \"sha256\": \"\(hash)\"}]}", "control character"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 9, \"files\": [{\"path\": \".ferry/partial/1.part\", \"size\": 1, \"sha256\": \"\(hash)\"}]}", "reserved '.ferry/'"),
    ])
    func refusesHostileManifestsAndKeepsTheTree(manifest: String, reason: String) throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("hostile", published: nginx.root + "/site")
        box.publish("a.txt", "precious\n")
        box.publish("sub/b.txt", "also precious\n")
        box.buildManifest()
        box.configure(remote: nginx.url + "site/", session: ["delete = yes"])
        #expect(box.sync().exitCode == 0)
        let before = treeSnapshot(box.local)

        try manifest.writeReplacing(box.published + "/manifest.json")
        let run = box.sync()
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.stderr.contains(reason), "\(run.stderr)")
        #expect(run.stderr.contains("manifest.json"), "the error names the manifest")
        #expect(treeSnapshot(box.local) == before, "nothing already synced was lost or changed")
        #expect(!FileManager.default.fileExists(atPath: box.directory + "/escaped.txt"))
        #expect(!FileManager.default.fileExists(atPath: "/tmp/ferry-tests/absolute.txt"))
        let status = box.status(["--json"])
        #expect(status.stdout.contains("\"last_exit_code\":4"))
    }

    @Test func missingFileFailsAloneAndPostponesDeletions() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("404", published: nginx.root + "/site")
        box.publish("old.txt", "old\n")
        box.publish("stays1.txt", "1\n")
        box.publish("stays2.txt", "2\n")
        box.buildManifest()
        box.configure(remote: nginx.url + "site/", session: ["delete = yes"])
        #expect(box.sync().exitCode == 0)

        box.unpublish("old.txt")
        for i in 0..<5 { box.publish("ok\(i).txt", "fine \(i)\n") }
        box.publish("gone.txt", "will vanish\n")
        box.buildManifest()
        box.unpublish("gone.txt")
        let run = box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.stderr.contains("gone.txt: HTTP 404"), "\(run.stderr)")
        for i in 0..<5 { #expect(fileContents(box.localPath("ok\(i).txt")) == "fine \(i)\n") }
        #expect(!FileManager.default.fileExists(atPath: box.localPath("gone.txt")))
        #expect(fileContents(box.localPath("old.txt")) == "old\n", "no deletion after an error in the same run")
        #expect(run.stderr.contains("1 deletion postponed because 1 file did not arrive"), "\(run.stderr)")

        let status = box.status()
        #expect(status.stdout.contains("failed"))
        #expect(status.stdout.contains("HTTP 404"))
        let json = box.status(["--json"])
        #expect(json.stdout.contains("\"path\":\"gone.txt\""))
        #expect(json.stdout.contains("\"state\":\"failed\""))

        // Once the remote is whole again (and its manifest says so, with the file's new mtime),
        // the next run completes and deletes.
        box.publish("gone.txt", "will vanish\n")
        box.buildManifest()
        let again = box.sync()
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("old.txt")))
        expectIdentical(box.published, box.local)
    }

    @Test func contentThatDoesNotMatchTheManifestNeverReachesTheFinalPath() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("mismatch", published: nginx.root + "/site")
        box.publish("good.txt", "good\n")
        box.publish("liar.bin", randomData(200_000, seed: 1))
        box.publish("short.bin", randomData(1000, seed: 2))
        box.buildManifest()
        box.publish("liar.bin", randomData(200_000, seed: 99))  // same size, other bytes
        box.publish("short.bin", randomData(500, seed: 2))      // truncated
        box.configure(remote: nginx.url + "site/")
        let run = box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.stderr.contains("liar.bin: content does not match the manifest: SHA-256"))
        #expect(run.stderr.contains("short.bin: the server says the file has 500 bytes; the manifest says 1000"))
        #expect(!FileManager.default.fileExists(atPath: box.localPath("liar.bin")))
        #expect(!FileManager.default.fileExists(atPath: box.localPath("short.bin")))
        #expect(fileContents(box.localPath("good.txt")) == "good\n")
        let partials = (try? FileManager.default.contentsOfDirectory(atPath: box.localPath(".ferry/partial"))) ?? []
        #expect(partials.isEmpty, "wrong bytes are not kept as resume data: \(partials)")
    }

    /// A symlink where the manifest needs a directory is replaced by a directory (the link, never
    /// what it points to); one where it needs a file is replaced by the file. Nothing is written
    /// outside the root, and the mirror converges in one run.
    @Test func neverWritesThroughASymlinkOutOfTheRoot() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("symlink", published: nginx.root + "/site")
        box.publish("link/evil.txt", "should not escape\n")
        box.publish("target.txt", "replaces the link, not its target\n")
        box.publish("ok.txt", "ok\n")
        box.buildManifest()
        let outside = box.directory + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try "outside file\n".writeReplacing(outside + "/target")
        try FileManager.default.createDirectory(atPath: box.local, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: box.localPath("link"), withDestinationPath: outside)
        try FileManager.default.createSymbolicLink(atPath: box.localPath("target.txt"), withDestinationPath: outside + "/target")
        box.configure(remote: nginx.url + "site/")

        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stdout.contains("replaced the symlink link with a directory"), "\(run.stdout)")
        #expect(!FileManager.default.fileExists(atPath: outside + "/evil.txt"), "nothing written through the link")
        #expect((try FileManager.default.contentsOfDirectory(atPath: outside)) == ["target"])
        #expect(fileContents(outside + "/target") == "outside file\n", "the symlink's target is untouched")
        #expect(fileContents(box.localPath("link/evil.txt")) == "should not escape\n")
        #expect(fileContents(box.localPath("target.txt")) == "replaces the link, not its target\n")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: box.localPath("target.txt"))) == nil)
        #expect(fileContents(box.localPath("ok.txt")) == "ok\n")
        expectIdentical(box.published, box.local)
        #expect(box.sync().exitCode == 0)
    }

    @Test func refusesARollbackUnlessAllowed() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("rollback", published: nginx.root + "/site")
        box.publish("v.txt", "five\n")
        box.buildManifest(["--version", "5"])
        box.configure(remote: nginx.url + "site/")
        #expect(box.sync().exitCode == 0)
        box.publish("v.txt", "three\n")
        box.buildManifest(["--version", "3", "--allow-rollback"])
        let refused = box.sync()
        #expect(refused.exitCode == 4)
        #expect(refused.stderr.contains("version 3, lower than version 5 already applied: refused as a rollback"))
        #expect(refused.stderr.contains("allow-rollback = yes"))
        #expect(fileContents(box.localPath("v.txt")) == "five\n")
        box.configure(remote: nginx.url + "site/", session: ["allow-rollback = yes"])
        #expect(box.sync().exitCode == 0)
        #expect(fileContents(box.localPath("v.txt")) == "three\n")
    }

    @Test func capsDeletionsAtMaxDelete() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("maxdelete", published: nginx.root + "/site")
        for i in 0..<4 { box.publish("f\(i).txt", "\(i)\n") }
        box.buildManifest()
        box.configure(remote: nginx.url + "site/", session: ["delete = yes", "max-delete = 2"])
        #expect(box.sync().exitCode == 0)
        for i in 0..<3 { box.unpublish("f\(i).txt") }
        box.buildManifest()
        let run = box.sync()
        #expect(run.exitCode == 1)
        #expect(run.output.contains("refused to delete 3 files: more than max-delete = 2"))
        for i in 0..<4 { #expect(FileManager.default.fileExists(atPath: box.localPath("f\(i).txt"))) }
    }

    @Test func refusesAnExpiredManifest() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("expired", published: nginx.root + "/site")
        let text = "{\"format\": \"ferry-manifest/1\", \"version\": 1, \"expires\": \"2001-01-01T00:00:00Z\", \"files\": []}"
        box.publish("manifest.json", text)
        box.configure(remote: nginx.url + "site/")
        let run = box.sync()
        #expect(run.exitCode == 4)
        #expect(run.stderr.contains("expired at 2001-01-01T00:00:00Z"))
    }

    @Test func unreachableRemoteExitsFour() throws {
        let box = Sandbox("unreachable")
        box.configure(remote: "http://127.0.0.1:\(freePort())/", session: ["connect-timeout = 2s", "retry-delay = 0.05s", "retries = 2"])
        let run = box.sync()
        #expect(run.exitCode == 4)
        #expect(run.stderr.contains("cannot fetch the manifest"))
        // Tried again, like a transfer, and said once: the same error on every try is one line.
        let retries = run.stdout.split(separator: "\n").filter { $0.contains("trying again") }
        #expect(retries.count == 1 && retries[0].contains("try 2 in"), "an unreachable remote is tried again, said once: \(run.output)")
        #expect(run.stderr.split(separator: "\n").filter { $0.contains("cannot fetch the manifest") }.count == 1, "\(run.output)")
        let json = box.sync(["--json"])
        #expect(json.events(named: "manifest-retrying").count == 2, "--json has every try: \(json.output)")
        #expect(run.stderr.contains("hint: check that the remote is up"))
    }

    @Test func fullDiskIsALocalIOErrorAndLosesNothing() throws {
        guard getuid() == 0 else { return }
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("diskfull", published: nginx.root + "/site")
        box.publish("small.txt", "fits\n")
        box.buildManifest()
        // A 2 MiB tmpfs is a disk that fills up.
        try FileManager.default.createDirectory(atPath: box.local, withIntermediateDirectories: true)
        let mount = runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", box.local])
        guard mount.exitCode == 0 else { return }
        defer { runProcess("/bin/umount", ["-l", box.local]) }
        box.configure(remote: nginx.url + "site/")
        #expect(box.sync().exitCode == 0)
        box.publish("huge.bin", randomData(4_000_000))
        box.buildManifest()
        let run = box.sync()
        #expect(run.exitCode == 5, "\(run.output)")
        #expect(run.stderr.contains("No space left on device"), "\(run.stderr)")
        #expect(fileContents(box.localPath("small.txt")) == "fits\n")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("huge.bin")))
    }

    /// A disk that fills up fails every file written after it for the same reason: that is said
    /// once, on the first file (a full disk once logged 325 lines for 43 files), and the run's
    /// summary; `--json` (and so hooks and the event log) keeps each file's failure.
    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func aFullDiskIsSaidOncePerRun() throws {
        let box = Sandbox("diskfull-once")
        box.publish("small.txt", "fits\n")
        for i in 0..<8 { box.publish("big\(i).bin", randomData(600_000, seed: UInt64(i + 1))) }
        box.buildManifest()
        // A 2 MiB tmpfs is a disk that fills up.
        try FileManager.default.createDirectory(atPath: box.local, withIntermediateDirectories: true)
        let mount = runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", box.local])
        try #require(mount.exitCode == 0, "\(mount.output)")
        defer { runProcess("/bin/umount", ["-l", box.local]) }
        box.configure(remote: "file://" + box.published)
        let run = box.sync()
        #expect(run.exitCode == 5, "\(run.output)")
        let fileLines = run.stderr.split(separator: "\n").filter { $0.hasPrefix("ferry: test: ") && $0.contains("No space left on device") }
        #expect(fileLines.count == 1 && fileLines[0].contains("further files failing for this reason in this run are not shown"), "\(run.stderr)")
        #expect(run.stderr.contains("error: test: failed:"), "the summary is said: \(run.output)")
        let json = box.sync(["--json"])
        let failed = json.events(named: "file-failed")
        #expect(failed.count >= 2 && failed.allSatisfy { ($0["error"] as? String)?.contains("No space left on device") == true },
                "every file's failure is an event: \(json.stdout)")
        let again = box.sync()
        #expect(again.stderr.split(separator: "\n").filter { $0.hasPrefix("ferry: test: ") && $0.contains("No space left on device") }.count == 1,
                "the next run says it again, once: \(again.stderr)")
    }
}

import Foundation
import Glibc
import Testing
@testable import FerryRuntime
import FerryCore

/// `ferry check`: the tree hashed again against the manifest last applied, including what the hash
/// cache vouches for wrongly (bit rot), read-only unless `--repair`.
struct CheckTests {
    @Test func findsWhatASyncCannotSeeAndRepairsIt() throws {
        let box = Sandbox("check")
        box.publish("a.txt", "alpha\n")
        box.publish("d/b.txt", "bravo\n", mode: 0o644)
        box.publish("c.txt", "charlie\n")
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        box.configure(remote: server.url)

        let early = ferry(["check", "--config", box.config])
        #expect(early.exitCode == 2 && early.output.contains("has not applied a manifest"), "\(early.output)")
        #expect(box.sync().exitCode == 0)
        let clean = ferry(["check", "--config", box.config])
        #expect(clean.exitCode == 0 && clean.stdout.contains("all 3 listed files match"), "\(clean.output)")

        // Bit rot as ferry sees it: other bytes of the same size, and a hash cache that still vouches
        // for the manifest's bytes at the file's current stat.
        try "ALPHA\n".writeReplacing(box.localPath("a.txt"))
        let root = try LocalRoot(path: box.local, create: false)
        let a = RelativePath(trusted: "a.txt")
        let entry = try #require(root.stat(a))
        let store = try StateStore(directory: box.state, clock: SystemClock())
        let manifestDigest = try #require(try store.hashCache(session: "test")[a]?.sha256)
        try store.saveHashes(session: "test", [(a, CachedHash(entry, sha256: manifestDigest, wanted: nil))])
        #expect(box.sync().exitCode == 0)
        #expect(fileContents(box.localPath("a.txt")) == "ALPHA\n", "a sync trusts the cache: why check exists")
        #expect(unlink(box.localPath("c.txt")) == 0)
        #expect(chmod(box.localPath("d/b.txt"), 0o600) == 0)

        let found = ferry(["check", "--config", box.config, "--json"])
        #expect(found.exitCode == 1, "\(found.output)")
        let items = Dictionary(uniqueKeysWithValues: found.events(named: "plan-item").map { ($0["path"] as? String ?? "", $0["action"] as? String ?? "") })
        #expect(items == ["a.txt": "download", "c.txt": "download", "d/b.txt": "fix-metadata"], "\(found.output)")
        let checked = try #require(found.events(named: "checked").first)
        #expect(checked["differ"] as? Int == 3 && checked["unnoticed"] as? Int == 1 && checked["listed"] as? Int == 3, "\(checked)")
        #expect(fileContents(box.localPath("a.txt")) == "ALPHA\n", "check alone changes nothing")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("c.txt")))

        let repaired = ferry(["check", "--config", box.config, "--repair"])
        #expect(repaired.exitCode == 0, "\(repaired.output)")
        #expect(fileContents(box.localPath("a.txt")) == "alpha\n")
        #expect(fileContents(box.localPath("c.txt")) == "charlie\n")
        var st = stat()
        #expect(lstat(box.localPath("d/b.txt"), &st) == 0 && st.st_mode & 0o777 == 0o644)
        #expect(ferry(["check", "--config", box.config]).exitCode == 0)
    }
}

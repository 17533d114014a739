import Foundation
import Synchronization
import Testing
@testable import FerryRuntime
import FerryCore

/// Generations (continued), kept sound between runs: removals cut short, a build that cannot finish
/// yet, an edit during a build, the agent's watch, the hash cache, a state directory replaced whole,
/// and who may write the generations directory.
@Suite(.serialized)
struct GenerationsUpkeepTests {
    let p = GenerationsTests()

    /// A removal of old generations moves the ctime of every file they share with the current
    /// one. Cut short (here: left as a kill leaves it, half done, with ferry's mark that rows must
    /// be written again), the next run takes the rows that differ in ctime alone and hashes
    /// nothing; a conversion back to in place cut short after its exchange is finished.
    @Test func interruptedRemovalsNeitherRehashNorLeaveLeftovers() throws {
        let box = Sandbox("generations-removal")
        for i in 0..<30 { box.publish("d\(i % 3)/f\(i).txt", "file \(i)\n") }
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["layout = generations"])
        #expect(box.sync().exitCode == 0)
        box.publish("d0/f0.txt", "changed\n")
        box.buildManifest()
        #expect(box.sync().exitCode == 0)
        #expect(p.generations(box) == ["g1", "g2"])

        // g1 half removed, as a kill in the middle of its removal leaves it.
        let g1 = p.generation(box, "g1")
        #expect(rename(g1, g1 + ".deleting") == 0)
        for i in 1..<15 { unlink(g1 + ".deleting/d\(i % 3)/f\(i).txt") }
        try Data().write(to: URL(fileURLWithPath: box.state + "/manifests/test.manifest.renew-hashes"))
        let next = box.sync(["--json"])
        #expect(next.exitCode == 0, "\(next.output)")
        #expect(next.events(named: "planned").first?["hashed"] as? Int == 0, "rows renewed, nothing hashed: \(next.output)")
        #expect(p.generations(box) == ["g2"], "the removal was finished: \(p.generations(box))")
        #expect(!FileManager.default.fileExists(atPath: box.state + "/manifests/test.manifest.renew-hashes"))
        #expect(box.sync(["--json"]).events(named: "planned").first?["hashed"] as? Int == 0, "the rows hold")

        // Back to in place, cut short right after the exchange: local is the directory, and
        // the generations directory still holds the symlink; the next in-place run removes it.
        try Generations(local: box.local).makeInPlace(current: 2)
        box.configure(remote: "file://" + box.published, session: ["layout = in-place"])
        let back = box.sync(["--json"])
        #expect(back.exitCode == 0 && back.events(named: "file-done").isEmpty, "\(back.output)")
        #expect(back.events(named: "planned").first?["hashed"] as? Int == 0, "\(back.output)")
        #expect(!FileManager.default.fileExists(atPath: box.local + ".generations"))
        expectIdentical(box.published, box.local)
    }

    /// A build that cannot finish (a file the remote lost) leaves the current generation as it
    /// is; the runs that follow neither hash the current generation's files again nor switch, and
    /// the one after the remote is whole again switches.
    @Test func aPendingBuildCostsNoHashingUntilItCanFinish() throws {
        let box = Sandbox("generations-pending")
        box.publish("a.txt", "alpha\n")
        box.publish("b.txt", "bravo\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["layout = generations"])
        #expect(box.sync().exitCode == 0)
        box.publish("a.txt", "alpha two\n")
        box.publish("c.txt", "charlie\n")
        box.buildManifest()
        #expect(rename(box.published + "/c.txt", box.directory + "/c.txt") == 0)
        for attempt in 0..<2 {
            let run = box.sync(["--json"])
            #expect(run.exitCode == 1 && run.output.contains("is not complete"), "\(run.output)")
            #expect(run.events(named: "planned").first?["hashed"] as? Int == 0, "attempt \(attempt): \(run.output)")
            #expect(p.target(box) == "mirror.generations/g1" && fileContents(box.localPath("a.txt")) == "alpha\n")
        }
        #expect(rename(box.directory + "/c.txt", box.published + "/c.txt") == 0)
        let done = box.sync(["--json"])
        #expect(done.exitCode == 0 && done.events(named: "file-done").map { $0["path"] as? String } == ["c.txt"], "\(done.output)")
        #expect(done.events(named: "generation-switched").first?["changed"] as? Int == 2, "a.txt (an earlier run) and c.txt: \(done.output)")
        #expect(p.target(box) == "mirror.generations/g2")
        expectIdentical(box.published, p.current(box))
    }

    /// An edit made in place in the current generation while the next one is being built
    /// reaches the build through the shared inode: the build is not switched to, and the next
    /// run hashes the file and fetches it.
    @Test func anEditDuringTheBuildKeepsItFromBeingSwitchedTo() throws {
        let box = Sandbox("generations-edit-during")
        box.publish("a.txt", "alpha\n")
        box.publish("big.bin", randomData(1_500_000, seed: 1))
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        box.configure(remote: server.url, session: ["layout = generations"])
        #expect(box.sync().exitCode == 0)
        box.publish("big.bin", randomData(1_500_000, seed: 2))
        box.buildManifest()
        server.setFaults(["*": ["rate": 1_000_000]])
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config], stdout: box.directory + "/sync.out",
                              stderr: box.directory + "/sync.err")
        #expect(box.waitForRunningTask(), "the download began")
        let fd = open(box.localPath("a.txt"), O_WRONLY)
        #expect(fd >= 0 && write(fd, "ALPHA\n", 6) == 6)
        close(fd)
        let status = child.wait(timeout: 60)
        let said = (fileContents(box.directory + "/sync.out") ?? "") + (fileContents(box.directory + "/sync.err") ?? "")
        #expect(status == 3, "\(said)")
        #expect(said.contains("1 file of the current generation changed while generation g2 was built"), "\(said)")
        #expect(p.target(box) == "mirror.generations/g1")
        server.setFaults([:])
        let next = box.sync(["--json"])
        #expect(next.exitCode == 0 && next.events(named: "file-done").map { $0["path"] as? String } == ["a.txt"], "\(next.output)")
        #expect(p.target(box) == "mirror.generations/g2" && fileContents(box.localPath("a.txt")) == "alpha\n")
        expectIdentical(box.published, p.current(box))
    }

    /// The agent watches the generation that is current: after a switch, an edit in the new one
    /// is noticed at the next poll (the manifest unchanged) and repaired by another generation.
    @Test func theAgentWatchesTheCurrentGeneration() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("generations-agent", published: server.root)
        box.publish("a.txt", "alpha\n")
        box.buildManifest()
        box.configure(remote: server.url, session: ["poll = 1s", "layout = generations"])
        let agent = try AgentTests.RunningAgent(box)
        #expect(eventually { p.target(box) == "mirror.generations/g1" }, "\(agent.output)")
        box.publish("a.txt", "alpha two\n")
        box.buildManifest()
        #expect(eventually { p.target(box) == "mirror.generations/g2" && fileContents(box.localPath("a.txt")) == "alpha two\n" }, "\(agent.output)")
        #expect(box.waitForStatus(containing: "test  pull  idle\n  agent      pid ").contains("next poll"))
        try "edited\n".writeReplacing(box.localPath("a.txt"))
        #expect(eventually { fileContents(box.localPath("a.txt")) == "alpha two\n" }, "the edit in the new generation was seen: \(agent.output)")
        #expect(p.target(box) == "mirror.generations/g3")
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    /// The hash cache holds rows for the files there are: the rows of files a new generation no
    /// longer has go (a push's are tested in PushTests).
    @Test func theHashCacheForgetsFilesAGenerationNoLongerHas() throws {
        let box = Sandbox("generations-cache-rows")
        for i in 0..<6 { box.publish("d/f\(i).txt", "one \(i)\n") }
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["layout = generations", "delete = yes", "max-delete = 100%"])
        #expect(box.sync().exitCode == 0)
        func rows() throws -> Int { try StateStore(directory: box.state, clock: SystemClock()).hashCacheCount(session: "test") }
        #expect(try rows() == 6)
        for i in 0..<4 { box.unpublish("d/f\(i).txt") }
        box.buildManifest()
        let second = box.sync()
        #expect(second.exitCode == 0, "\(second.output)")
        #expect(p.target(box) == "mirror.generations/g2")
        #expect(try rows() == 2, "the rows of the 4 files g2 does not have are gone")
    }

    /// A state directory replaced whole (what the README advises for a damaged database) with the
    /// `local` link gone too: the next run builds a generation from the remote, prunes the old
    /// ones, and is in sync, with no help.
    @Test func aReplacedStateDirectoryWithoutTheLinkRecovers() throws {
        let box = Sandbox("generations-new-state")
        box.publish("a.txt", "alpha\n")
        box.configure(remote: "file://" + box.published, session: ["layout = generations"])
        for i in 1...3 {
            box.publish("a.txt", "alpha \(i)\n")
            box.buildManifest()
            #expect(box.sync().exitCode == 0)
        }
        #expect(p.target(box) == "mirror.generations/g3")
        try FileManager.default.removeItem(atPath: box.state)
        try FileManager.default.removeItem(atPath: box.local)
        let recovered = box.sync()
        #expect(recovered.exitCode == 0, "\(recovered.output)")
        #expect(fileContents(box.localPath("a.txt")) == "alpha 3\n")
        let again = box.sync()
        #expect(again.exitCode == 0 && again.output.contains("in sync"), "\(again.output)")
    }

    /// `<local>.generations` is ferry's alone: one planted by another user (with a generation
    /// ready to go live) or one its group or others may write is refused, naming the owner or the
    /// mode and the command that fixes it; nothing in it goes live.
    @Test(.enabled(if: getuid() == 0, "needs root to give the directory to another user"))
    func aGenerationsDirectoryOthersMayWriteIsRefused() throws {
        let box = Sandbox("generations-owner")
        box.publish("a.txt", "alpha\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["layout = generations"])
        let planted = box.local + ".generations"
        try FileManager.default.createDirectory(atPath: planted + "/g7", withIntermediateDirectories: true)
        try "planted\n".writeReplacing(planted + "/g7/a.txt")
        _ = runProcess("/bin/chown", ["-R", "65534:65534", planted])
        let refused = box.sync()
        #expect(refused.exitCode == 5, "\(refused.output)")
        #expect(refused.stderr.contains("is owned by nobody (uid 65534)") && refused.stderr.contains("chown -R root"), "\(refused.stderr)")
        #expect(p.target(box) == nil, "nothing went live")

        _ = runProcess("/bin/chown", ["-R", "0:0", planted])
        chmod(planted, 0o777)
        let writable = box.sync()
        #expect(writable.exitCode == 5, "\(writable.output)")
        #expect(writable.stderr.contains("may be written by its group or others (mode 777)") && writable.stderr.contains("chmod go-w"), "\(writable.stderr)")
        #expect(p.target(box) == nil)

        chmod(planted, 0o755)
        let fixed = box.sync()
        #expect(fixed.exitCode == 0, "\(fixed.output)")
        #expect(fileContents(box.localPath("a.txt")) == "alpha\n")
    }
}

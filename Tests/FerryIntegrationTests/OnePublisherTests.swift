import Foundation
import Testing
import Glibc
@testable import FerryRuntime
import FerryCore

/// One publisher at a time: two `manifest build` runs of one tree, two pushes to one remote from
/// one state directory, a push and a build of one `file://` directory never both publish; what
/// is left published always names objects that are there.
struct OnePublisherTests {
    let p = PushTests()

    /// Holds `<directory>/.ferry/publish.lock` as another publisher would, until `body` returns.
    func holdingDirectory(_ directory: String, _ body: () throws -> Void) throws {
        let lock = try SessionLock.publisher(directory: directory, what: "a test holding it")
        try body()
        withExtendedLifetime(lock) {}
    }

    /// A build while another publisher holds the directory is refused (exit 6), naming the holder,
    /// and changes nothing; once it is free, the build runs.
    @Test func aBuildWaitsForNoOneAndChangesNothingWhileAnotherPublishes() throws {
        let box = Sandbox("build-lock")
        let dir = box.directory + "/tree"
        p.write(dir, "a.txt", Data("a\n".utf8))
        #expect(ferry(["manifest", "build", dir]).exitCode == 0)
        let before = FileManager.default.contents(atPath: dir + "/manifest.json")
        p.write(dir, "b.txt", Data("b\n".utf8))
        try holdingDirectory(dir) {
            let run = ferry(["manifest", "build", dir])
            #expect(run.exitCode == 6, "\(run.output)")
            #expect(run.output.contains("a test holding it") && run.output.contains("one publisher of a directory at a time"), "\(run.output)")
            #expect(FileManager.default.contents(atPath: dir + "/manifest.json") == before, "nothing changed")
        }
        #expect(ferry(["manifest", "build", dir]).exitCode == 0)
        #expect(publishedListing(dir).contains("b.txt"))
    }

    /// Two builds of one tree started together (two cron jobs), over and over while the tree
    /// changes, with no grace for objects: each either builds or is refused as busy, and the
    /// published root always names objects that are all there.
    @Test func twoBuildsAtOnceNeverLeaveARootNamingAGoneObject() throws {
        let box = Sandbox("build-race")
        let dir = box.directory + "/tree"
        for i in 0..<200 { p.write(dir, "d\(i % 10)/f\(i).txt", Data("file \(i) v0\n".utf8)) }
        #expect(ferry(["manifest", "build", dir, "--grace", "0"]).exitCode == 0)
        var built = 0
        for round in 1...6 {
            for i in stride(from: round, to: 200, by: 7) { p.write(dir, "d\(i % 10)/f\(i).txt", Data("file \(i) v\(round)\n".utf8)) }
            let builds = try (0..<2).map { k in
                try Child(Harness.ferryBinary, ["manifest", "build", dir, "--grace", "0"],
                          stdout: box.directory + "/out\(round)-\(k)", stderr: box.directory + "/err\(round)-\(k)")
            }
            let codes = builds.map { $0.wait(timeout: 120) }
            for (k, code) in codes.enumerated() {
                #expect(code == 0 || code == 6, "round \(round), build \(k): \(code.map(String.init) ?? "still running") \(fileContents(box.directory + "/err\(round)-\(k)") ?? "")")
                if code == 0 { built += 1 }
            }
            let (manifest, named) = try publishedTree(dir)
            #expect(named.isSubset(of: publishedObjects(dir)), "round \(round): the root names only objects that are there")
            #expect(manifest.entries.count == 200)
        }
        #expect(built >= 6, "each round built at least once")
    }

    /// A push to a `file://` directory that `manifest build` (or another push, from another state
    /// directory) is publishing is refused as busy; so is a second push to one remote from one
    /// state directory (two sessions naming it).
    @Test func twoPushesToOneRemoteTakeTurns() throws {
        let box = Sandbox("push-lock")
        let remote = box.directory + "/remote"
        let src = box.directory + "/src"
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        p.write(src, "a.txt", Data("a\n".utf8))
        p.write(src + "2", "a.txt", Data("a\n".utf8))
        try ["[agent]", "state = \(box.state)", "", "[session up]", "direction = push", "remote = file://\(remote)/", "local = \(src)",
             "", "[session again]", "direction = push", "remote = file://\(remote)/", "local = \(src)2", ""].joined(separator: "\n").writeReplacing(box.config)
        try holdingDirectory(remote) {
            let run = box.sync(["--session", "up"])
            #expect(run.exitCode == 6, "\(run.output)")
            #expect(run.output.contains("a test holding it"), "\(run.output)")
            #expect(!FileManager.default.fileExists(atPath: remote + "/manifest.json"), "nothing published")
        }
        do {
            let held = try SessionLock.publisher(stateDirectory: box.state, remote: "file://\(remote)/", manifest: "manifest.json", session: "session 'up'")
            let second = box.sync(["--session", "again"])
            #expect(second.exitCode == 6, "\(second.output)")
            #expect(second.output.contains("another push to") && second.output.contains("session 'up'"), "\(second.output)")
            withExtendedLifetime(held) {}
        }
        let free = box.sync(["--session", "again"])
        #expect(free.exitCode == 0, "\(free.output)")
        #expect(publishedListing(remote) == "a.txt")
    }
}

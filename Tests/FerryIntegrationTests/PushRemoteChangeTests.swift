import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Push (continued): a remote that changes under a push, or goes away during it (another writer,
/// an unparseable manifest, an empty local tree, files that change or vanish while they are sent):
/// nothing is published over what the push did not see, and the next run completes.
@Suite(.serialized)
struct PushRemoteChangeTests {
    let p = PushTests()

    /// The remote goes away mid-push: the run ends without publishing (the uploads wait for
    /// connectivity), the remote keeps the version it had, and once it is back the next run
    /// completes the push.
    @Test func aRemoteThatGoesAwayMidPushKeepsItsVersionAndTheNextRunCompletes() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let remoteRoot = server.root + "/site"
        let box = Sandbox("push-away")
        let src = box.directory + "/src"
        p.write(src, "a.txt", Data("a\n".utf8))
        try p.config(box, remote: server.url + "site/")
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let v1 = try #require(manifestVersion(remoteRoot + "/manifest.json"))

        p.write(src, "big.bin", randomData(4_000_000, seed: 95))
        try p.config(box, remote: server.url + "site/", up: "bwlimit = 1M\nretries = 1\nretry-delay = 1s")
        let push = try p.startPush(box)
        #expect(box.waitForRunningTask(session: "up"), "the upload began")
        server.goAway()
        let code = push.wait(timeout: 30)
        let said = p.pushOutput(box)
        #expect(code == 4, "the remote could not be reached: \(said)")
        #expect(said.contains("the manifest was not published"), "\(said)")
        #expect(manifestVersion(remoteRoot + "/manifest.json") == v1, "readers still see the version they had")
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/big.bin"))

        try server.comeBack()
        try p.config(box, remote: server.url + "site/")
        p.pushThenPull(box, remoteRoot: remoteRoot)
        #expect((manifestVersion(remoteRoot + "/manifest.json") ?? 0) > v1)
    }

    /// Something that is not a manifest where the push's manifest goes (another writer, a broken
    /// tool): nothing is uploaded over it unless conflict = local-wins says so; then the whole tree
    /// is published and the version goes on from the last one.
    @Test(arguments: ["nginx", "file"])
    func aRemoteManifestThatDoesNotParseIsNotPublishedOverBlindly(kind: String) throws {
        let pushRemote = try PushTests.PushRemote(kind)
        let box = Sandbox("push-garbage-\(kind)")
        let src = box.directory + "/src"
        p.write(src, "a.txt", Data("a\n".utf8))
        try p.config(box, remote: pushRemote.url)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let v1 = try #require(manifestVersion(pushRemote.root + "/manifest.json"))
        try "not a manifest {\n".writeReplacing(pushRemote.root + "/manifest.json")
        p.write(src, "b.txt", Data("b\n".utf8))

        let refused = box.sync(["--session", "up"])
        #expect(refused.exitCode == 4, "\(refused.output)")
        #expect(refused.stderr.contains("the remote's manifest does not parse") && refused.stderr.contains("conflict = local-wins"), "\(refused.stderr)")
        #expect(fileContents(pushRemote.root + "/manifest.json") == "not a manifest {\n" && !FileManager.default.fileExists(atPath: pushRemote.root + "/b.txt"))

        try p.config(box, remote: pushRemote.url, up: "conflict = local-wins")
        let over = box.sync(["--session", "up"])
        #expect(over.exitCode == 0, "\(over.output)")
        #expect((manifestVersion(pushRemote.root + "/manifest.json") ?? 0) > v1, "the version goes on")
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "\(down.output)")
        #expect(p.tree(box.directory + "/dst") == p.tree(src))
    }

    /// An empty local directory (an unmounted disk, a mistyped path) never empties the remote, even
    /// with max-delete at 100%: exit 5, nothing changed, until the session says allow-empty = yes.
    @Test(arguments: ["nginx", "file"])
    func anEmptyLocalTreeNeverEmptiesTheRemote(kind: String) throws {
        let pushRemote = try PushTests.PushRemote(kind)
        let box = Sandbox("push-empty-\(kind)")
        let src = box.directory + "/src"
        for i in 0..<3 { p.write(src, "dir/f\(i).txt", Data("file \(i)\n".utf8)) }
        try p.config(box, remote: pushRemote.url, up: "max-delete = 100%")
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let published = p.tree(pushRemote.root)
        #expect(published.count == 4, "three files and the manifest: \(published.keys.sorted())")
        try FileManager.default.removeItem(atPath: src + "/dir")

        for arguments in [["--session", "up", "--dry-run"], ["--session", "up"]] {
            let refused = box.sync(arguments)
            #expect(refused.exitCode == 5, "\(arguments): \(refused.output)")
            #expect(refused.stderr.contains("holds no files to publish, and the remote lists 3") && refused.stderr.contains("allow-empty = yes"),
                    "\(refused.stderr)")
            #expect(p.tree(pushRemote.root) == published, "nothing on the remote changed")
        }
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0 && p.tree(box.directory + "/dst").count == 3, "\(down.output)")

        try p.config(box, remote: pushRemote.url, up: "max-delete = 100%\nallow-empty = yes")
        let emptied = box.sync(["--session", "up"])
        #expect(emptied.exitCode == 0, "\(emptied.output)")
        #expect(p.tree(pushRemote.root).keys.sorted() == ["manifest.json"], "\(p.tree(pushRemote.root).keys.sorted())")
    }

    /// Files deleted from the local tree after the scan, before their turn to upload, leave the run
    /// without failing it: the manifest goes on listing what the remote holds at their paths (the
    /// old version of a changed file, nothing for a new one), and the next run publishes the removal.
    @Test func filesDeletedBeforeTheirUploadLeaveTheRunAndTheNextRunRemovesThem() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let remoteRoot = server.root + "/site"
        let box = Sandbox("push-vanished")
        let src = box.directory + "/src"
        p.write(src, "b.txt", Data("b, version 1\n".utf8))
        p.write(src, "keep.txt", Data("kept\n".utf8))
        try p.config(box, remote: server.url + "site/")
        #expect(box.sync(["--session", "up"]).exitCode == 0)

        // One upload at a time, the first one slow: the other two are deleted while it goes.
        let big = randomData(2_500_000, seed: 95)
        p.write(src, "a-big.bin", big)
        p.write(src, "b.txt", Data("b, version 2\n".utf8))
        p.write(src, "new.txt", Data("new\n".utf8))
        try p.config(box, remote: server.url + "site/", up: "bwlimit = 1M\nsession-transfers = 1")
        let push = try p.startPush(box, ["--json"])
        defer { push.stop() }
        #expect(eventually(10) { box.statusTasks().contains { $0["path"] as? String == "a-big.bin" && $0["state"] as? String == "running" } },
                "\(box.status(["-v"]).output)")
        try FileManager.default.removeItem(atPath: src + "/b.txt")
        try FileManager.default.removeItem(atPath: src + "/new.txt")
        #expect(push.wait(timeout: 30) == 0, "\(p.pushOutput(box))")
        for name in ["b.txt", "new.txt"] {
            #expect(p.pushOutput(box).contains("\(name) is gone from the local tree since the scan"), "\(p.pushOutput(box))")
        }
        #expect(FileManager.default.contents(atPath: remoteRoot + "/a-big.bin") == big)
        #expect(fileContents(remoteRoot + "/b.txt") == "b, version 1\n", "the remote keeps the version it had")
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/new.txt"))
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "the manifest lists what the remote holds: \(down.output)")
        #expect(fileContents(box.directory + "/dst/b.txt") == "b, version 1\n")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/a-big.bin") == big)

        let next = box.sync(["--session", "up"])
        #expect(next.exitCode == 0, "\(next.output)")
        #expect(!FileManager.default.fileExists(atPath: remoteRoot + "/b.txt"), "the next run publishes the removal")
        #expect(box.sync(["--session", "down"]).exitCode == 0)
        #expect(p.tree(box.directory + "/dst") == p.tree(src))
        #expect(!box.status(["--files"]).stdout.contains("new.txt"), "no task is left for a file that is gone")
    }

    /// A file rewritten while it uploads is hashed again and sent again in the same run; the
    /// manifest published lists the bytes that are on the remote.
    @Test(arguments: ["nginx", "file"])
    func aFileThatChangesWhileItUploadsIsSentAgain(kind: String) throws {
        let pushRemote = try PushTests.PushRemote(kind)
        let box = Sandbox("push-change-\(kind)")
        let src = box.directory + "/src"
        p.write(src, "big.bin", randomData(4_000_000, seed: 61))
        try p.config(box, remote: pushRemote.url, up: "bwlimit = 1M\nretry-delay = 1s")
        let push = try p.startPush(box, ["--json"])
        #expect(box.waitForRunningTask(session: "up"), "the upload began")
        let changed = randomData(3_000_000, seed: 62)
        p.write(src, "big.bin", changed)
        #expect(push.wait(timeout: 60) == 0, "\(fileContents(box.directory + "/push.err") ?? "")")
        let events = fileContents(box.directory + "/push.out") ?? ""
        #expect(events.contains("\"event\":\"file-retrying\"") && events.contains("changed"), "sent again: \(events)")
        #expect(FileManager.default.contents(atPath: pushRemote.root + "/big.bin") == changed, "the remote holds the new content")
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "the manifest lists what is on the remote: \(down.output)")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/big.bin") == changed)
    }

    /// Another writer publishes a manifest while a push uploads: the push does not publish over
    /// it (exit 1, theirs stays), and the next run, which compares, publishes on top of theirs.
    @Test(arguments: ["nginx", "file"])
    func aManifestPublishedByAnotherWriterDuringAPushIsNotOverwritten(kind: String) throws {
        let pushRemote = try PushTests.PushRemote(kind)
        let box = Sandbox("push-race-\(kind)")
        let src = box.directory + "/src"
        p.write(src, "a.txt", Data("a\n".utf8))
        try p.config(box, remote: pushRemote.url)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let manifestPath = pushRemote.root + "/manifest.json"
        let v1 = try #require(manifestVersion(manifestPath))
        let theirs = try #require(fileContents(manifestPath)).replacingOccurrences(of: "\"version\": \(v1)", with: "\"version\": \(v1 + 1000)")

        p.write(src, "big.bin", randomData(3_000_000, seed: 71))
        try p.config(box, remote: pushRemote.url, up: "bwlimit = 1M")
        let push = try p.startPush(box)
        #expect(box.waitForRunningTask(session: "up"), "the upload began")
        #expect(push.isRunning, "still uploading")
        try theirs.writeReplacing(manifestPath)
        #expect(push.wait(timeout: 30) == 1, "\(fileContents(box.directory + "/push.err") ?? "")")
        #expect(fileContents(box.directory + "/push.err")?.contains("changed while this run uploaded") == true,
                "\(fileContents(box.directory + "/push.err") ?? "")")
        #expect(fileContents(manifestPath) == theirs, "the other writer's manifest stays")

        try p.config(box, remote: pushRemote.url)
        let next = box.sync(["--session", "up"])
        #expect(next.exitCode == 0, "\(next.output)")
        let published = publishedListing((manifestPath as NSString).deletingLastPathComponent, name: (manifestPath as NSString).lastPathComponent)
        #expect(manifestVersion(manifestPath) == v1 + 1001 && published.contains("big.bin"), "published on top of theirs: \(published)")
    }

    /// Someone else publishes to the same remote between two pushes of this session: the remote's
    /// changes are never overwritten blindly. conflict = fail (the default) reports and changes
    /// nothing; remote-wins keeps theirs and publishes the rest; local-wins replaces theirs.
    @Test(arguments: ["nginx", "file"])
    func remoteChangesAreNotOverwrittenBlindly(kind: String) throws {
        let remote = try PushTests.PushRemote(kind)
        let box = Sandbox("push-conflict-\(kind)")
        let src = box.directory + "/src"
        p.write(src, "shared.txt", Data("ours, v1\n".utf8))
        p.write(src, "other.txt", Data("other, v1\n".utf8))
        try p.config(box, remote: remote.url)
        p.pushThenPull(box, remoteRoot: remote.root)
        let ours = try #require(manifestVersion(remote.root + "/manifest.json"))

        // Another writer (its own state and tree) changes shared.txt on the remote.
        let theirs = box.directory + "/theirs"
        p.write(theirs, "shared.txt", Data("theirs\n".utf8))
        p.write(theirs, "other.txt", Data("other, v1\n".utf8))
        let theirConfig = box.directory + "/theirs.conf"
        try "[agent]\nstate = \(box.directory)/their-state\n[session them]\ndirection = push\nremote = \(remote.url)\nlocal = \(theirs)\n"
            .writeReplacing(theirConfig)
        #expect(ferry(["sync", "now", "--config", theirConfig]).exitCode == 0)
        #expect(fileContents(remote.root + "/shared.txt") == "theirs\n")

        // This session changed both files meanwhile.
        p.write(src, "shared.txt", Data("ours, v2\n".utf8))
        p.write(src, "other.txt", Data("other, v2\n".utf8))
        let refused = box.sync(["--session", "up"])
        #expect(refused.exitCode == 1, "\(refused.output)")
        #expect(refused.output.contains("shared.txt: conflict: changed on the remote since ferry published version \(ours)"), "\(refused.output)")
        #expect(refused.output.contains("conflict = local-wins"), "the hint says what to do: \(refused.output)")
        #expect(fileContents(remote.root + "/shared.txt") == "theirs\n" && fileContents(remote.root + "/other.txt") == "other, v1\n",
                "nothing changed on the remote")
        #expect(fileContents(src + "/shared.txt") == "ours, v2\n", "nor locally")

        try p.config(box, remote: remote.url, up: "conflict = remote-wins")
        let kept = box.sync(["--session", "up"])
        #expect(kept.exitCode == 0, "\(kept.output)")
        #expect(fileContents(remote.root + "/shared.txt") == "theirs\n", "remote-wins keeps theirs")
        #expect(fileContents(remote.root + "/other.txt") == "other, v2\n", "and publishes the rest")
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0 && fileContents(box.directory + "/dst/shared.txt") == "theirs\n", "the manifest lists theirs: \(down.output)")

        // They change it again (we changed other.txt since their push: they must say local-wins too);
        // our local-wins then replaces it with ours.
        p.write(theirs, "shared.txt", Data("theirs, again\n".utf8))
        try (fileContents(theirConfig)! + "conflict = local-wins\n").writeReplacing(theirConfig)
        let theirAgain = ferry(["sync", "now", "--config", theirConfig])
        #expect(theirAgain.exitCode == 0, "\(theirAgain.output)")
        try p.config(box, remote: remote.url, up: "conflict = local-wins")
        let replaced = box.sync(["--session", "up"])
        #expect(replaced.exitCode == 0 && replaced.output.contains("local-wins"), "\(replaced.output)")
        #expect(fileContents(remote.root + "/shared.txt") == "ours, v2\n")
        #expect(box.sync(["--session", "down"]).exitCode == 0 && fileContents(box.directory + "/dst/shared.txt") == "ours, v2\n")
    }
}

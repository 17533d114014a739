import Foundation
import Synchronization
import Testing
import FerryCore

/// A value a test's threads share (an `Atomic` or a `Mutex`, which cannot be captured by copy).
final class Shared<Value: ~Copyable>: Sendable where Value: Sendable {
    let value: Value
    init(_ value: consuming Value) { self.value = value }
}

/// `remote-layout = objects` (issue 21): a push stores each content once, by its SHA-256, under
/// `.ferry/data/` on the remote and publishes a manifest that says so; a pull follows it. A
/// published version is whole from the moment its manifest is, whatever a later push does or
/// where it is killed; objects leave once no recent manifest names them.
@Suite(.serialized)
struct ObjectLayoutTests {
    /// A remote a push can write: nginx's WebDAV, Apache's, a local directory, S3 (SeaweedFS), or
    /// OpenSSH's sshd over SFTP.
    final class PushTarget {
        let kind: String
        let url: String
        /// Config lines the remote needs (S3's endpoint and credentials).
        let lines: [String]
        private let root: String?
        private let nginx: NginxServer?
        /// The nginx it runs on ("nginx"), for its access log.
        var nginxServer: NginxServer? { nginx }
        private let apache: ApacheServer?
        private let store: SeaweedFS?
        private let ssh: SSHServer?
        private let bucket: String
        static let prefix = "tree/"

        init(_ kind: String, scratch: String) throws {
            self.kind = kind
            var (nginx, apache, store): (NginxServer?, ApacheServer?, SeaweedFS?) = (nil, nil, nil)
            var ssh: SSHServer?
            var lines: [String] = []
            var bucket = ""
            switch kind {
            case "nginx":
                nginx = try NginxServer()
                root = nginx!.root + "/site"
                try FileManager.default.createDirectory(atPath: root!, withIntermediateDirectories: true)
                url = nginx!.url + "site/"
            case "apache":
                apache = try ApacheServer()
                try apache!.makeDirectory("site")
                root = apache!.root + "/site"
                url = apache!.url + "site/"
            case "s3":
                store = try SeaweedFS.shared()
                bucket = try store!.newBucket("objects")
                root = nil
                url = "s3://\(bucket)/\(PushTarget.prefix)"
                lines = ["s3-endpoint = \(store!.endpoint)", "s3-credentials = \(try store!.credentialsFile(in: scratch))"]
            case "sftp":
                let server = try SSHServer()
                ssh = server
                root = server.root
                url = server.url
                lines = ["sftp-key = \(server.clientKey)", "sftp-known-hosts = \(server.knownHosts)"]
            default:
                root = scratch + "/remote"
                try FileManager.default.createDirectory(atPath: root!, withIntermediateDirectories: true)
                url = "file://" + root! + "/"
            }
            (self.nginx, self.apache, self.store, self.ssh) = (nginx, apache, store, ssh)
            self.bucket = bucket
            self.lines = lines
        }

        deinit {
            nginx?.stop()
            apache?.stop()
            ssh?.stop()
        }

        /// Every file the remote holds, by its path under the remote.
        func files() -> [String: Data] {
            var out: [String: Data] = [:]
            if let store {
                for key in store.keys(bucket, prefix: PushTarget.prefix) {
                    out[String(key.dropFirst(PushTarget.prefix.count))] = store.get(bucket, key) ?? Data()
                }
                return out
            }
            guard let root, let walker = FileManager.default.enumerator(atPath: root) else { return out }
            while let relative = walker.nextObject() as? String {
                var st = stat()
                guard lstat(root + "/" + relative, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
                out[relative] = FileManager.default.contents(atPath: root + "/" + relative)
            }
            return out
        }

        /// The content objects the remote holds, each checked against its name.
        func contentObjects(sourceLocation: SourceLocation = #_sourceLocation) -> Set<String> {
            var names = Set<String>()
            for (path, data) in files() where path.hasPrefix(RemoteLayout.contentDirectory + "/") {
                let name = String(path.split(separator: "/").last!)
                #expect(path == RemoteLayout.contentPath(SHA256Digest(hex: name) ?? sha256(of: Data()), beside: "manifest.json").string,
                        "\(path) is named as a content object is", sourceLocation: sourceLocation)
                #expect(sha256(of: data).hex == name, "\(path) holds the bytes its name says", sourceLocation: sourceLocation)
                names.insert(name)
            }
            return names
        }
    }

    /// A push session `up` from `src` and a pull session `down` into `dst`, on `target`.
    func configure(_ box: Sandbox, _ target: PushTarget, up: [String] = ["remote-layout = objects"], agent: [String] = []) throws {
        try (["[agent]", "state = \(box.state)", "transfers = 4"] + agent
             + ["", "[session up]", "direction = push", "remote = \(target.url)", "local = \(box.directory)/src", "delete = yes"] + target.lines + up
             + ["", "[session down]", "remote = \(target.url)", "local = \(box.directory)/dst", "delete = yes"] + target.lines)
            .joined(separator: "\n").appending("\n").writeReplacing(box.config)
    }

    func write(_ box: Sandbox, _ path: String, _ data: Data) {
        let full = box.directory + "/src/" + path
        try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try! data.write(to: URL(fileURLWithPath: full))
    }

    func hex(_ text: String) -> String { sha256(of: Data(text.utf8)).hex }

    /// The mirror holds what the source holds: the same files, bytes, modes and mtimes.
    func expectMirrored(_ box: Sandbox, sourceLocation: SourceLocation = #_sourceLocation) {
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "\(down.output)", sourceLocation: sourceLocation)
        #expect(treeSnapshot(box.directory + "/dst") == treeSnapshot(box.directory + "/src"), "the pull mirrors the source", sourceLocation: sourceLocation)
    }

    /// A tree with two files of the same content goes up as one object per content, nothing at
    /// the files' paths, and comes back identical; a change sends only the new content, a moved
    /// file sends nothing, a deleted one leaves the manifest; an unchanged tree publishes nothing.
    @Test(arguments: ["nginx", "apache", "file", "s3"])
    func storesEachContentOnceAndAPullMirrorsIt(kind: String) throws {
        let box = Sandbox("objects-\(kind)")
        let target = try PushTarget(kind, scratch: box.directory)
        try configure(box, target)
        let big = randomData(300_000, seed: 21)
        write(box, "a.txt", Data("same\n".utf8))
        write(box, "dir/b.txt", Data("same\n".utf8))
        write(box, "c.bin", big)
        write(box, "with space/ü #1.txt", Data("unicode\n".utf8))
        write(box, "empty", Data())

        let first = box.sync(["--session", "up", "--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(first.events(named: "file-done").count == 4, "four contents, each sent once: \(first.stdout)")
        let files = target.files()
        let manifest = try Manifest.parse(Array(try #require(files["manifest.json"])), source: "manifest.json")
        #expect(manifest.layout == .objects && manifest.fileCount == 5)
        #expect(target.contentObjects() == [hex("same\n"), sha256(of: big).hex, hex("unicode\n"), hex("")])
        // `.ferry/publish.lock`: a file:// remote's publisher lock, ferry's own.
        let outside = files.keys.filter { $0 != "manifest.json" && !$0.hasPrefix(".ferry/meta/") && !$0.hasPrefix(".ferry/data/") && $0 != ".ferry/publish.lock" }
        #expect(outside.isEmpty, "nothing is stored at a file's path, and no temporary upload is left: \(outside.sorted())")
        expectMirrored(box)

        // A change, a move and a deletion: only the new content goes up.
        write(box, "a.txt", Data("changed\n".utf8))
        try FileManager.default.createDirectory(atPath: box.directory + "/src/moved", withIntermediateDirectories: true)
        try FileManager.default.moveItem(atPath: box.directory + "/src/c.bin", toPath: box.directory + "/src/moved/c.bin")
        try FileManager.default.removeItem(atPath: box.directory + "/src/with space")
        let second = box.sync(["--session", "up", "--json"])
        #expect(second.exitCode == 0, "\(second.output)")
        #expect(second.events(named: "file-done").map { $0["path"] as? String } == ["a.txt"], "the moved file's content is stored already: \(second.stdout)")
        #expect(target.contentObjects().isSuperset(of: [hex("changed\n"), sha256(of: big).hex, hex("same\n")]))
        expectMirrored(box)

        let again = box.sync(["--session", "up"])
        #expect(again.exitCode == 0 && again.output.contains("nothing to transfer"), "\(again.output)")
    }

    /// The bytes of content objects the remote holds, by name.
    func objectSizes(_ target: PushTarget) -> [String: Int] {
        var out: [String: Int] = [:]
        for (path, data) in target.files() where path.hasPrefix(RemoteLayout.contentDirectory + "/") {
            out[String(path.split(separator: "/").last!)] = data.count
        }
        return out
    }

    /// `file-done`'s `fetched` for `path` (for a push: the bytes it sent).
    func moved(_ run: FerryRun, _ path: String) -> Int? {
        run.events(named: "file-done").first { $0["path"] as? String == path }.flatMap { $0["fetched"] as? Int }
    }

    /// A file from `delta-min-size` goes up as the pieces of its content index, not as one object,
    /// and a fresh mirror assembles it from them; a change of 1% sends the pieces it touched (about
    /// that much), a mirror that holds the old version fetches about the change, and the pieces
    /// only the old version named are collected (object-grace = 0s, keep-versions = 1).
    @Test(arguments: ["nginx", "apache", "file", "s3"])
    func largeFilesAreStoredAsPiecesAndAChangeSendsWhatChanged(kind: String) throws {
        let box = Sandbox("pieces-\(kind)")
        let target = try PushTarget(kind, scratch: box.directory)
        try configure(box, target, up: ["remote-layout = objects", "object-grace = 0s", "keep-versions = 1"])
        let size = 4 << 20
        let old = randomData(size, seed: 91)
        write(box, "big.bin", old)
        write(box, "small.txt", Data("small\n".utf8))

        let first = box.sync(["--session", "up", "--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        let before = objectSizes(target)
        _ = target.contentObjects()
        #expect(before[sha256(of: old).hex] == nil, "the large file is not stored as one object")
        #expect(before.count > 6 && before.values.reduce(0, +) == size + 6, "its pieces hold its bytes once: \(before.count) objects")
        #expect(moved(first, "big.bin") == size, "\(first.stdout)")
        let manifest = try Manifest.parse(Array(try #require(target.files()["manifest.json"])), source: "manifest.json")
        #expect(manifest.layout == .objects)
        expectMirrored(box)

        // 1%: 40 KB in the middle.
        var new = old
        new.replaceSubrange((2 << 20)..<((2 << 20) + 40_000), with: randomData(40_000, seed: 92))
        write(box, "big.bin", new)
        let second = box.sync(["--session", "up", "--json"])
        #expect(second.exitCode == 0, "\(second.output)")
        let after = objectSizes(target)
        let added = after.filter { before[$0.key] == nil }
        let sent = try #require(moved(second, "big.bin"), "\(second.stdout)")
        #expect(sent == added.values.reduce(0, +), "what was sent is the new pieces: \(sent), \(added)")
        #expect(added.count >= 1 && added.count <= 3 && sent >= 40_000 && sent < 1_000_000, "about the change went up: \(sent) bytes in \(added.count) pieces")
        #expect(after[sha256(of: new).hex] == nil)
        #expect(!before.filter({ after[$0.key] == nil }).isEmpty, "the pieces only the old version named were collected")

        let down = box.sync(["--session", "down", "--json"])
        #expect(down.exitCode == 0, "\(down.output)")
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/big.bin") == new)
        let fetched = try #require(moved(down, "big.bin"), "\(down.stdout)")
        #expect(fetched >= 40_000 && fetched < 150_000, "the mirror fetched about the change: \(fetched)")

        // A new mirror assembles the new version from the pieces of both pushes.
        let fresh = Sandbox("pieces-\(kind)-fresh")
        try (["[agent]", "state = \(fresh.state)", "", "[session down]", "remote = \(target.url)", "local = \(fresh.directory)/dst"] + target.lines)
            .joined(separator: "\n").appending("\n").writeReplacing(fresh.config)
        let cold = fresh.sync()
        #expect(cold.exitCode == 0, "\(cold.output)")
        #expect(FileManager.default.contents(atPath: fresh.directory + "/dst/big.bin") == new)
        #expect(!cold.output.contains("warning"), "\(cold.output)")

        let again = box.sync(["--session", "up"])
        #expect(again.exitCode == 0 && again.output.contains("nothing to transfer"), "\(again.output)")
    }

    /// A sandbox whose push session sent one large file, `big.bin`, to a file:// remote (so as
    /// its pieces); with the remote and the file's bytes.
    func pushedLargeFile(_ name: String, size: Int, seed: UInt64) throws -> (Sandbox, PushTarget, Data) {
        let box = Sandbox(name)
        let target = try PushTarget("file", scratch: box.directory)
        try configure(box, target)
        let data = randomData(size, seed: seed)
        write(box, "big.bin", data)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        return (box, target, data)
    }

    /// A piece the remote lost or damaged: a mirror refuses the file (it is never placed, the
    /// run fails naming it) and the version it held stays; the next push, which checks what it
    /// placed, sends the piece again, and the mirror then takes the file.
    @Test func aDamagedPieceIsRefusedAndTheNextPushSendsItAgain() throws {
        let (box, target, _) = try pushedLargeFile("pieces-damaged", size: 3 << 20, seed: 93)
        let remote = box.directory + "/remote/"
        let piece = try #require(objectSizes(target).filter { $0.value > 100_000 }.keys.sorted().first)
        let path = remote + RemoteLayout.contentPath(try #require(SHA256Digest(hex: piece)), beside: "manifest.json").string
        var bytes = try #require(FileManager.default.contents(atPath: path))
        bytes[bytes.count / 2] ^= 0x5A
        try bytes.write(to: URL(fileURLWithPath: path))

        let down = box.sync(["--session", "down"])
        #expect(down.exitCode != 0, "\(down.output)")
        #expect(!FileManager.default.fileExists(atPath: box.directory + "/dst/big.bin"), "a file with a damaged piece is never placed")
        #expect(down.output.contains("big.bin") && down.output.contains("does not hold the bytes its name says"), "\(down.output)")

        let repair = box.sync(["--session", "up", "--json"])
        #expect(repair.exitCode == 0, "\(repair.output)")
        #expect(repair.output.contains("changed or vanished"), "the push saw the damaged piece: \(repair.output)")
        let sent = try #require(moved(repair, "big.bin"), "\(repair.stdout)")
        #expect(sent < 3 << 20, "only what was damaged went again: \(sent)")
        _ = target.contentObjects()
        expectMirrored(box)
    }

    /// A push whose cache of metadata objects was lost cannot tell which pieces a published file
    /// is made of: it sends that file's pieces again rather than list it as one object, and the
    /// manifest it publishes still assembles on a new mirror.
    @Test func aPushThatLostItsCacheStillPublishesFilesAMirrorCanAssemble() throws {
        let (box, target, data) = try pushedLargeFile("pieces-cache-lost", size: 2 << 20, seed: 95)
        let cache = box.state + "/manifests/up.manifest.objects"
        #expect(FileManager.default.fileExists(atPath: cache))
        try FileManager.default.removeItem(atPath: cache)
        write(box, "other.txt", Data("a change elsewhere\n".utf8))
        let again = box.sync(["--session", "up", "--json"])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(objectSizes(target)[sha256(of: data).hex] == nil, "still stored as pieces")
        _ = target.contentObjects()
        expectMirrored(box)
    }

    /// A push of a file stored as pieces killed with SIGKILL midway goes on from the pieces it
    /// placed: the next run sends the rest, not the whole file again.
    @Test func aKilledPushOfPiecesGoesOnFromThePiecesPlaced() throws {
        let box = Sandbox("pieces-kill")
        let target = try PushTarget("file", scratch: box.directory)
        try configure(box, target, agent: ["bwlimit = 4M"])
        let size = 16 << 20
        write(box, "big.bin", randomData(size, seed: 94))
        let push = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--session", "up"],
                             stdout: box.directory + "/push.out", stderr: box.directory + "/push.err")
        #expect(eventually(60) { objectSizes(target).values.reduce(0, +) >= 6 << 20 }, "pieces were placed")
        push.signal(SIGKILL)
        _ = push.wait(timeout: 10)
        let placed = objectSizes(target).values.reduce(0, +)

        try configure(box, target)
        let rest = box.sync(["--session", "up", "--json"])
        #expect(rest.exitCode == 0, "\(rest.output)")
        let sent = try #require(moved(rest, "big.bin"), "\(rest.stdout)")
        #expect(sent <= size - placed + (2 << 20), "the pieces placed before the kill were not sent again: \(sent) sent, \(placed) were placed")
        _ = target.contentObjects()
        expectMirrored(box)
    }

    /// Objects leave once none of the last `keep-versions` manifests names them and the grace
    /// period passed: never one a recent manifest names, even after its content moved to another
    /// path; with a grace period that has not passed, none.
    @Test func collectsContentNoRecentManifestNames() throws {
        let box = Sandbox("objects-gc")
        let target = try PushTarget("file", scratch: box.directory)
        try configure(box, target, up: ["remote-layout = objects", "keep-versions = 2", "object-grace = 0s"])
        func push(sourceLocation: SourceLocation = #_sourceLocation) {
            let run = box.sync(["--session", "up"])
            #expect(run.exitCode == 0, "\(run.output)", sourceLocation: sourceLocation)
            expectMirrored(box, sourceLocation: sourceLocation)
        }
        write(box, "a", Data("A1".utf8))
        write(box, "b", Data("B".utf8))
        push()
        #expect(target.contentObjects() == [hex("A1"), hex("B")])
        // Version 2: a changes, b moves to c.
        write(box, "a", Data("A2".utf8))
        try FileManager.default.moveItem(atPath: box.directory + "/src/b", toPath: box.directory + "/src/c")
        push()
        #expect(target.contentObjects() == [hex("A1"), hex("A2"), hex("B")], "version 1 is one of the last two: its objects stay")
        // Version 3: c goes. A1 is named by neither version 2 nor 3; B by version 2.
        write(box, "a", Data("A3".utf8))
        try FileManager.default.removeItem(atPath: box.directory + "/src/c")
        push()
        #expect(target.contentObjects() == [hex("A2"), hex("A3"), hex("B")], "B moved in version 2, which is recent: it stays")
        write(box, "a", Data("A4".utf8))
        push()
        #expect(target.contentObjects() == [hex("A3"), hex("A4")])

        // A grace period that has not passed keeps everything, however many versions go by.
        try configure(box, target, up: ["remote-layout = objects", "keep-versions = 1", "object-grace = 1h"])
        for v in 5...7 {
            write(box, "a", Data("A\(v)".utf8))
            push()
        }
        #expect(target.contentObjects() == Set((3...7).map { hex("A\($0)") }))
        let metadata = target.files().keys.filter { $0.hasPrefix(".ferry/meta/") }
        #expect(metadata.count >= 5, "metadata objects follow the same rule: \(metadata.count)")
    }

    /// A session switches from the tree layout to objects and back on an existing remote: the
    /// mirror follows without fetching content it has, the tree's files leave the remote after
    /// the switch, and the objects leave after the switch back.
    @Test func switchesLayoutsBothWays() throws {
        let box = Sandbox("objects-switch")
        let target = try PushTarget("nginx", scratch: box.directory)
        try configure(box, target, up: [])
        write(box, "one.txt", Data("one\n".utf8))
        write(box, "sub/two.bin", randomData(100_000, seed: 3))
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        expectMirrored(box)
        #expect(target.files()["one.txt"] == Data("one\n".utf8))

        try configure(box, target, up: ["remote-layout = objects", "keep-versions = 1", "object-grace = 0s"])
        let toObjects = box.sync(["--session", "up"])
        #expect(toObjects.exitCode == 0, "\(toObjects.output)")
        #expect(target.files()["one.txt"] == nil && target.files()["sub/two.bin"] == nil, "the tree layout's files left the remote")
        #expect(target.contentObjects().count == 2)
        let follow = box.sync(["--session", "down", "--json"])
        #expect(follow.exitCode == 0 && follow.events(named: "file-done").isEmpty, "the mirror fetches nothing it has: \(follow.output)")
        expectMirrored(box)

        try configure(box, target, up: ["keep-versions = 1", "object-grace = 0s"])
        let toTree = box.sync(["--session", "up"])
        #expect(toTree.exitCode == 0, "\(toTree.output)")
        #expect(target.files()["one.txt"] == Data("one\n".utf8))
        #expect(target.contentObjects().isEmpty, "no manifest names the objects any more")
        expectMirrored(box)
    }

    /// A reader pulls in a loop, each time afresh, while pushes of changing content run, half of
    /// them killed with SIGKILL mid-upload: every pull succeeds and every mirror it leaves is one
    /// version, whole. (With the tree layout the same loop fails: a reader of the last manifest
    /// finds the next version's bytes under its paths.)
    @Test func readersNeverSeeAMixedVersionWhilePushesAreKilled() throws {
        let box = Sandbox("objects-readers")
        let target = try PushTarget("nginx", scratch: box.directory)
        try configure(box, target, agent: ["bwlimit = 1M"])
        let names = (0..<12).map { "f\($0).txt" }
        func publishRound(_ round: Int) {
            for name in names { write(box, name, Data("round \(round) \(name)\n".utf8)) }
            // The large file keeps a push busy long enough to be killed in the middle.
            write(box, "big.bin", Data("round \(round)\n".utf8) + randomData(1_500_000, seed: UInt64(round)))
        }
        publishRound(0)
        #expect(box.sync(["--session", "up"]).exitCode == 0)

        let stop = Shared(Atomic<Bool>(false))
        /// Each pull: its exit, the versions its mirror held, its output, and when it ran.
        let seen = Shared(Mutex<[(Int32, Set<String>, String, ClosedRange<Double>)]>([]))
        // A fresh reader each time (its own state, an empty mirror): it fetches every file of
        // the version it reads, so a file that moved on before the manifest did would fail it.
        let (config, fresh) = (box.directory + "/reader.conf", box.directory + "/fresh")
        let mirror = fresh + "/mirror/"
        try (["[agent]", "state = \(fresh)/state", "", "[session reader]", "remote = \(target.url)", "local = \(mirror)"] + target.lines)
            .joined(separator: "\n").appending("\n").writeReplacing(config)
        let reader = Thread {
            while !stop.value.load(ordering: .relaxed) {
                try? FileManager.default.removeItem(atPath: fresh)
                let began = Date().timeIntervalSince1970
                let run = ferry(["sync", "now", "--config", config])
                var rounds = Set<String>()
                for name in names + ["big.bin"] {
                    let data = FileManager.default.contents(atPath: mirror + name) ?? Data()
                    // "round N ...": N, the version of the source this file came from.
                    rounds.insert(String(decoding: data.dropFirst(6).prefix { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
                }
                let ended = Date().timeIntervalSince1970
                seen.value.withLock { $0.append((run.exitCode, rounds, run.output, began...ended)) }
            }
        }
        reader.start()
        var pushes: [ClosedRange<Double>] = []
        for round in 1...6 {
            publishRound(round)
            let began = Date().timeIntervalSince1970
            defer { pushes.append(began...Date().timeIntervalSince1970) }
            let push = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--session", "up"],
                                 stdout: box.directory + "/push.out", stderr: box.directory + "/push.err")
            if round % 2 == 1 {
                #expect(box.waitForRunningTask(session: "up"), "round \(round): the upload began")
                push.signal(SIGKILL)
                _ = push.wait(timeout: 10)
            } else {
                #expect(push.wait(timeout: 60) == 0, "round \(round): \(fileContents(box.directory + "/push.err") ?? "")")
            }
        }
        #expect(eventually(60) { seen.value.withLock { $0.count } >= 4 }, "the reader ran during the pushes")
        stop.value.store(true, ordering: .relaxed)
        #expect(eventually(120) { reader.isFinished })
        let pulls = seen.value.withLock { $0 }
        for (exit, rounds, output, _) in pulls {
            #expect(exit == 0, "a pull during pushes never fails: \(output)")
            #expect(rounds.count == 1, "a mirror holds one version: \(rounds.sorted())")
        }
        let during = pulls.filter { pull in pushes.contains { $0.contains(pull.3.lowerBound) && $0.contains(pull.3.upperBound) } }
        #expect(during.count >= 1, "pulls ran while pushes were under way: \(during.count) of \(pulls.count)")
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        expectMirrored(box)
    }
}

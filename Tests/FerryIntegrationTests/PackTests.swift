import Foundation
import Testing
@testable import FerryCore

/// Packs of small files (`remote-layout = objects`; design.md "Packs"), on nginx's WebDAV: a push
/// writes the small contents a second time in packs of at most 1 MiB, a cold mirror takes them
/// from the packs in a few requests instead of one per file, an update reads only what changed,
/// and a pack that lies (other bytes, members of other bytes, more bytes than it may hold) costs
/// the requests it was meant to save, never a wrong file.
@Suite(.serialized) struct PackTests {
    /// nginx taking pushes under `site/`, a push session `up` from `src` and a pull `down` into `dst`.
    final class World {
        let box: Sandbox
        let server: NginxServer
        var site: String { server.root + "/site" }
        var src: String { box.directory + "/src" }
        var dst: String { box.directory + "/dst" }

        /// `down`: more lines for the pull session.
        init(_ label: String, files: Int, agent: [String] = [], remote: ((NginxServer) throws -> String)? = nil,
             down: [String] = []) throws {
            box = Sandbox(label)
            server = try NginxServer()
            try FileManager.default.createDirectory(atPath: server.root + "/site", withIntermediateDirectories: true)
            for i in 0..<files { write("d\(i / 100)/f\(i).txt", size: 1000 + (i * 37) % 4000, seed: UInt64(i)) }
            let pullFrom = try remote?(server) ?? server.url + "site/"
            try (["[agent]", "state = \(box.state)", "transfers = 4"] + agent + ["",
                  "[session up]", "direction = push", "remote = \(server.url)site/", "local = \(src)",
                  "remote-layout = objects", "delete = yes", "",
                  "[session down]", "remote = \(pullFrom)", "local = \(dst)", "delete = yes"] + down)
                .joined(separator: "\n").appending("\n").writeReplacing(box.config)
        }

        deinit { server.stop() }

        func write(_ path: String, size: Int, seed: UInt64) {
            let full = src + "/" + path
            try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent,
                                                     withIntermediateDirectories: true)
            try! randomData(size, seed: seed).write(to: URL(fileURLWithPath: full))
        }

        func push(sourceLocation: SourceLocation = #_sourceLocation) {
            let up = box.sync(["--session", "up"])
            #expect(up.exitCode == 0, "\(up.output)", sourceLocation: sourceLocation)
        }

        /// A pull, which leaves the mirror as the source.
        func pull(sourceLocation: SourceLocation = #_sourceLocation) -> FerryRun {
            server.clearLog()
            let down = box.sync(["--session", "down", "--json"])
            #expect(down.exitCode == 0, "\(down.output)", sourceLocation: sourceLocation)
            #expect(treeSnapshot(dst) == treeSnapshot(src), "the mirror holds what the source holds",
                    sourceLocation: sourceLocation)
            return down
        }

        /// The packs the remote's manifest names, by name.
        func packs() throws -> [String: Data] {
            let root = Array(try #require(FileManager.default.contents(atPath: site + "/manifest.json")))
            let named = try #require(try Manifest.parse(root, source: "m").packs)
            let list = Array(try #require(FileManager.default.contents(atPath: site + "/.ferry/meta/" + named.sha256.hex)))
            let read = try #require(ContentPacks.read(list: list, for: try entries()))
            var out: [String: Data] = [:]
            for name in read.packs.compactMap(\.name) {
                out[name.hex] = FileManager.default.contents(atPath: site + "/.ferry/meta/" + name.hex) ?? Data()
            }
            return out
        }

        /// The entries of what the remote's manifest lists, its tree read.
        func entries() throws -> [ManifestEntry] {
            let bytes = Array(try #require(FileManager.default.contents(atPath: site + "/manifest.json")))
            let tree = try #require(try Manifest.parse(bytes, source: "m").tree)
            return try ManifestTree.resolve(tree, source: "m", maximumBytes: 1 << 30) { batch in
                batch.map { Array(FileManager.default.contents(atPath: site + "/.ferry/meta/" + $0.hex) ?? Data()) }
            }.entries
        }

        /// Requests for content objects, and for metadata objects, since the log was cleared.
        func requests() -> (content: Int, meta: Int, all: Int) {
            let paths = server.requests().filter { $0.method == "GET" }.map(\.path)
            return (paths.filter { $0.contains("/.ferry/data/") }.count, paths.filter { $0.contains("/.ferry/meta/") }.count,
                    paths.count)
        }
    }

    @Test func aColdMirrorTakesSmallFilesFromPacksAndAnUpdateOnlyWhatChanged() throws {
        let world = try World("packs-cold", files: 3000)
        world.push()
        let packs = try world.packs()
        #expect((3...9).contains(packs.count), "about 9 MB of small files in packs of about 2 MiB: \(packs.count)")
        #expect(packs.values.allSatisfy { $0.count <= ContentPacks.maximumSize })

        let first = world.pull()
        let cold = world.requests()
        #expect(cold.content == 0, "no file fetched alone: \(cold)")
        // Each file is placed from its pack, verified, and said done; none is said to be resumed.
        #expect(first.events(named: "file-done").count == 3000 && first.events(named: "file-resumed").isEmpty,
                "\(first.events(named: "file-resumed").count) resumed")
        #expect(cold.all <= packs.count + 8, "the manifest, its tree, the list and the packs: \(cold)")

        // 40 files of one directory change, 2 elsewhere: the packs that hold them are written again, no other.
        for i in 1200..<1240 { world.write("d12/f\(i).txt", size: 3000, seed: UInt64(i) + 50_000) }
        world.write("d5/f500.txt", size: 2000, seed: 7)
        world.write("d29/f2999.txt", size: 2000, seed: 8)
        world.push()
        let rewritten = Set(try world.packs().keys).subtracting(packs.keys)
        #expect((1...5).contains(rewritten.count), "\(rewritten.count) packs written again")
        _ = world.pull()
        let update = world.requests()
        // The directory's pack whole (40 members are more than requests are worth); the other two
        // files, in one pack, by one request for two ranges; the changed tree objects one by one
        // (too few to be worth every bundle, the whole tree).
        #expect(update.content == 0, "\(update)")
        #expect(update.all <= 20, "\(update): \(world.server.requests().map(\.path))")
    }

    /// Members of one pack too far apart for one range (three files of one directory, each 40
    /// files from the next) come in one request for several ranges, which nginx answers with
    /// `multipart/byteranges`: no file is fetched alone.
    @Test func scatteredMembersComeInOneRequestForSeveralRanges() throws {
        let world = try World("packs-multi", files: 3000)
        world.push()
        _ = world.pull()
        for i in [1200, 1240, 1280] { world.write("d12/f\(i).txt", size: 3000, seed: UInt64(i) + 90_000) }
        world.push()
        _ = world.pull()
        let packNames = try world.packs().keys
        let asked = world.server.requests().filter { r in packNames.contains { r.path.hasSuffix($0) } }
        #expect(world.requests().content == 0 && asked.count == 1 && asked.first?.status == 206,
                "one request of one pack: \(world.server.requests().map { "\($0.path) \($0.status)" })")
        #expect(world.server.ranges().map { $0.split(separator: ",").count } == [3], "\(world.server.ranges())")
    }

    /// A server that answers a request for several ranges wrongly (its parts swapped, or only the
    /// first range): the pack's runs are asked one range at a time, the mirror is right, and no
    /// file is retried.
    @Test(arguments: ["multipart_swap", "no_multipart"])
    func aServerThatAnswersSeveralRangesWronglyCostsARequestPerRun(fault: String) throws {
        var python: PythonServer?
        let world = try World("packs-\(fault)", files: 3000) { nginx in
            python = try PythonServer(directory: nginx.root + "/site")
            return python!.url
        }
        let server = try #require(python)
        defer { server.stop() }
        world.push()
        _ = world.pull()
        for i in [1200, 1240, 1280] { world.write("d12/f\(i).txt", size: 3000, seed: UInt64(i) + 90_000) }
        world.push()
        server.setFaults(["*": [fault: true]])
        server.clearLog()
        let down = world.pull()
        #expect(down.events(named: "file-retrying").isEmpty && down.events(named: "warning").isEmpty, "\(down.output)")
        let ranges = server.requests().compactMap { $0["range"] as? String }
        let several = ranges.filter { $0.contains(",") }
        #expect(several.count == 1 && ranges.count - 1 == several.first.map { $0.split(separator: ",").count },
                "one request for the pack's runs, then one for each: \(ranges)")
    }

    /// An unchanged poll stays one request; a file larger than a pack member is fetched alone; a
    /// pull with only a file or two to fetch reads no pack.
    @Test func fewFilesToFetchReadNoPack() throws {
        let world = try World("packs-few", files: 400)
        world.write("big.bin", size: 300_000, seed: 9)
        world.push()
        _ = world.pull()
        #expect(world.requests().content == 1, "only the large file alone: \(world.requests())")
        world.server.clearLog()
        let again = world.box.sync(["--session", "down"])
        #expect(again.exitCode == 0 && world.requests().all == 1, "an unchanged poll: \(world.requests())")
        world.write("d1/f150.txt", size: 2222, seed: 77)
        world.push()
        _ = world.pull()
        let one = world.requests()
        #expect(one.content == 1, "\(one)")
        let packNames = try world.packs().keys
        #expect(!world.server.requests().contains { req in packNames.contains { req.path.hasSuffix($0) } }, "no pack read for one file")
    }

    /// Each pack damaged at the origin (other bytes of its size, or its last byte changed), or
    /// replaced by 8 MB (more than a pack may hold, so never read whole): the files it holds
    /// wrong come one by one, the mirror is right, and the run says why once. A pack is not
    /// hashed whole as well as member by member: one with a byte wrong still gives its other
    /// members, and is known as sent wrong, not made wrong.
    @Test(arguments: ["other", "larger", "one byte"])
    func aPackHeldWrongCostsRequestsOnly(wrong: String) throws {
        let world = try World("packs-\(wrong.replacingOccurrences(of: " ", with: "-"))", files: 600)
        world.push()
        let packs = try world.packs()
        #expect(packs.count >= 2)
        for (name, data) in packs {
            var bytes = wrong == "larger" ? randomData(8 << 20, seed: 5) : randomData(data.count, seed: 6)
            if wrong == "one byte" {
                bytes = data
                bytes[bytes.endIndex - 1] ^= 0xFF  // the last member's last byte
            }
            try bytes.write(to: URL(fileURLWithPath: world.site + "/.ferry/meta/" + name))
        }
        let down = world.pull()
        let alone = wrong == "one byte" ? packs.count : 600
        #expect(world.requests().content == alone, "the files held wrong alone: \(world.requests())")
        let warnings = down.events(named: "warning").compactMap { $0["message"] as? String }
        let said = wrong == "larger" ? "(its packs) cannot be read, so its objects are fetched one by one" : "not fetched again"
        #expect(warnings.count == 1 && warnings[0].contains(said), "\(warnings) \(down.output)")
    }

    /// A mirror that holds every pack damaged (one byte of each): from a mirror a pack is checked
    /// as a whole, not only member by member as from the remote, so each is asked of the
    /// origin instead, no file comes alone, and the mirror is demoted for what it sent.
    @Test func aMirrorsDamagedPacksAreTakenFromTheOrigin() throws {
        let copy = Harness.temporaryDirectory("packs-mirror-copy")
        defer { Harness.remove(copy) }
        try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        let mirror = try PythonServer(directory: copy)
        defer { mirror.stop() }
        let mirrorURL = mirror.url + "site/"
        let world = try World("packs-mirror", files: 600, down: ["mirrors = \(mirrorURL)"])
        world.push()
        try FileManager.default.copyItem(atPath: world.site, toPath: copy + "/site")
        let packs = try world.packs()
        #expect(packs.count >= 2)
        for (name, data) in packs {
            var bytes = data
            bytes[bytes.endIndex - 1] ^= 0xFF
            try bytes.write(to: URL(fileURLWithPath: copy + "/site/.ferry/meta/" + name))
        }
        let down = world.pull()
        let origin = world.requests()
        #expect(origin.content == 0, "no file alone: \(origin)")
        let packPaths = Set(packs.keys.map { "/.ferry/meta/" + $0 })
        let fromOrigin = world.server.requests().filter { r in packPaths.contains { r.path.hasSuffix($0) } }
        #expect(!fromOrigin.isEmpty && fromOrigin.count <= packs.count, "the packs from the origin: \(fromOrigin.count)")
        let served = down.events(named: "source-served").first { $0["source"] as? String == mirrorURL }
        #expect((served?["demoted"] as? String)?.contains("wrong") == true, "\(String(describing: served))")
    }

    /// A publisher's packs whose members hold other bytes than the files they stand for (the
    /// list and root made to match, as a signer could): each such file fails its check from the
    /// partial and is fetched alone; none is placed wrong. A list whose counts do not add up to
    /// the manifest's files is not read at all.
    @Test(arguments: ["members", "counts"])
    func packsThatLieAboutTheirMembersGiveNoWrongFile(lie: String) throws {
        let world = try World("packs-lie-\(lie)", files: 500)
        world.push()
        let manifestPath = world.site + "/manifest.json"
        var root = try String(contentsOfFile: manifestPath, encoding: .utf8)
        let manifest = try Manifest.parse(Array(root.utf8), source: "m")
        let listName = try #require(manifest.packs).sha256.hex
        let list = Array(try #require(FileManager.default.contents(atPath: world.site + "/.ferry/meta/" + listName)))
        var forged: [UInt8]
        if lie == "members" {
            // Each pack again, its members' bytes replaced by others of their sizes.
            var named: [(name: SHA256Digest?, count: Int)] = []
            let resolved = try #require(ContentPacks.read(list: list, for: try world.entries()))
            for pack in resolved.packs {
                let liar = ContentPacks.pack(resolved.members[pack.members].enumerated().map {
                    Array(randomData($1.size, seed: UInt64(900 + $0)))
                })
                let digest = sha256(of: Data(liar))
                try Data(liar).write(to: URL(fileURLWithPath: world.site + "/.ferry/meta/" + digest.hex))
                named.append((digest, pack.members.count))
            }
            forged = ContentPacks.list(named)
        } else {
            forged = list
            forged[forged.count - 1] &+= 1  // the last pack's count
        }
        let forgedName = sha256(of: Data(forged))
        try Data(forged).write(to: URL(fileURLWithPath: world.site + "/.ferry/meta/" + forgedName.hex))
        root = root.replacingOccurrences(of: listName, with: forgedName.hex)
            .replacingOccurrences(of: "\"size\": \(list.count)}", with: "\"size\": \(forged.count)}")
        try root.writeReplacing(manifestPath)

        let down = world.pull()
        #expect(world.requests().content == 500, "every file alone: \(world.requests())")
        let warnings = down.events(named: "warning").compactMap { $0["message"] as? String }
        let said = lie == "counts" ? "packs" : "500 files the packs of manifest"
        #expect(warnings.count == 1 && warnings[0].contains(said), "said once: \(warnings)")
        #expect(down.events(named: "file-retrying").isEmpty, "not a retry per file: \(down.stdout.count)")
    }

}

import Foundation
import Testing
@testable import FerryCore

/// Packs where it matters: a pull and a push killed with SIGKILL again and again over a slow
/// link (the WAN relay), a site cache in front of the origin, S3 (SeaweedFS) with its ranges, and
/// SFTP, which reads no ranges.
@Suite(.serialized) struct PackFieldTests {
    typealias World = PackTests.World

    /// The WAN relay (`scripts/wanrelay.py`) in front of `port`: `delay` ms each way, `rate` Mbit/s.
    static func relay(to port: UInt16, in directory: String, delay: Int, rate: Int) throws -> (port: UInt16, child: Child) {
        try startScript("the WAN relay", "wanrelay.py", in: directory, log: "relay.log") {
            ["--port", String($0), "--target", "127.0.0.1:\(port)", "--delay-ms", String(delay), "--rate-mbit", String(rate)]
        }
    }

    /// Runs `arguments` and kills it with SIGKILL after a moment of `range` seconds, `times` times;
    /// returns how many runs were killed (the others ended first).
    @discardableResult
    static func killLoop(_ box: Sandbox, _ arguments: [String], times: Int, range: ClosedRange<Double>) throws -> Int {
        var generator = SystemRandomNumberGenerator()
        var killed = 0
        for i in 0..<times {
            let run = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config] + arguments,
                                stdout: box.directory + "/kill\(i).out", stderr: box.directory + "/kill\(i).err")
            let ended = run.wait(timeout: Double.random(in: range, using: &generator))
            if ended == nil {
                run.signal(SIGKILL)
                _ = run.wait(timeout: 30)
                killed += 1
            }
        }
        return killed
    }

    /// 4,000 small files (about 12 MB in 4 to 9 packs) through a 10 Mbit/s link: pulls killed
    /// with SIGKILL at random moments in their first second, then one killed once a pack's members
    /// are written (a byte
    /// budget has the packs come one at a time, so there is a pause before the next). The next
    /// run asks only for the packs it still needs, and every file is right.
    @Test func aPullKilledWhileTakingPacksResumesByPack() throws {
        var relay: Child?
        let world = try World("packs-kill-pull", files: 4000, agent: ["budget = 100G/day"]) { server in
            let started = try PackFieldTests.relay(to: server.port, in: server.directory, delay: 10, rate: 10)
            relay = started.child
            return "http://127.0.0.1:\(started.port)/site/"
        }
        defer { relay?.stop() }
        world.push()
        // Each run gets at most 1 s of the about 10 s the whole takes.
        let killed = try Self.killLoop(world.box, ["--session", "down"], times: 3, range: 0.2...1)
        #expect(killed == 3, "\(killed) of 3 runs killed")
        let partial = world.dst + "/.ferry/partial"
        // Files a pack gave: written as partials, or placed already.
        func taken() -> Int {
            let written = ((try? FileManager.default.contentsOfDirectory(atPath: partial)) ?? []).filter { name in
                var st = stat()
                return lstat(partial + "/" + name, &st) == 0 && st.st_size > 0
            }.count
            return written + treeSnapshot(world.dst).count
        }
        let before = taken()
        let run = try Child(Harness.ferryBinary, ["sync", "now", "--config", world.box.config, "--session", "down"],
                            stdout: world.box.directory + "/last-kill.out", stderr: world.box.directory + "/last-kill.err")
        #expect(eventually(60) { taken() > before || run.wait(timeout: 0) != nil }, "a pack's members were written")
        // Until they are all written: nothing more for 400 ms (the next pack takes 1 s or more).
        var last = taken()
        while run.wait(timeout: 0.4) == nil, taken() != last { last = taken() }
        run.signal(SIGKILL)
        _ = run.wait(timeout: 30)
        let packs = try world.packs()
        let placed = treeSnapshot(world.dst).count
        #expect(taken() > before, "the killed run kept what it took")
        let done = world.pull()
        let asked = Set(world.server.requests().map(\.path).filter { path in packs.keys.contains { path.hasSuffix($0) } })
        #expect(asked.count < packs.count, "\(asked.count) of \(packs.count) packs asked for again")
        #expect(down(done) == 4000 - placed, "the last run placed each file the killed ones had not (\(placed))")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: partial)) ?? []
        #expect(left.isEmpty, "\(left.count) partial files left")
    }

    /// Files the last run downloaded.
    func down(_ run: FerryRun) -> Int { run.events(named: "file-done").count }

    /// A push of 2,000 small files over the relay killed ten times: the next one publishes packs a
    /// cold mirror takes every small file from.
    @Test func aPushKilledWhileSendingFinishesWithPacksThatServe() throws {
        var relay: Child?
        let world = try World("packs-kill-push", files: 2000)
        let started = try Self.relay(to: world.server.port, in: world.server.directory, delay: 5, rate: 20)
        relay = started.child
        defer { relay?.stop() }
        let config = try String(contentsOfFile: world.box.config, encoding: .utf8)
        try config.replacingOccurrences(of: "remote = \(world.server.url)site/\nlocal = \(world.src)",
                                        with: "remote = http://127.0.0.1:\(started.port)/site/\nlocal = \(world.src)")
            .writeReplacing(world.box.config)
        let killed = try Self.killLoop(world.box, ["--session", "up"], times: 10, range: 0.3...3)
        #expect(killed >= 5, "\(killed) of 10 runs killed")
        world.push()
        _ = world.pull()
        #expect(world.requests().content == 0, "every small file from a pack: \(world.requests())")
    }

    /// Four agents cold through the shipped site cache, at once: the origin sends each pack about
    /// once.
    @Test func agentsBehindASiteCacheCostTheOriginEachPackOnce() throws {
        let world = try World("packs-cache", files: 2500)
        world.push()
        let cache = try NginxServer(cacheFor: world.server.port)
        defer { cache.stop() }
        let sent = try FileManager.default.subpathsOfDirectory(atPath: world.site).reduce(0) { total, path in
            var st = stat()
            return lstat(world.site + "/" + path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG ? total + Int(st.st_size) : total
        }
        world.server.clearLog()
        let agents = (0..<4).map { i -> Sandbox in
            let box = Sandbox("packs-cache-agent\(i)")
            box.configure(remote: world.server.url + "site/", session: ["mirrors = \(cache.url)site/"])
            return box
        }
        let runs = agents.map { box in
            try! Child(Harness.ferryBinary, ["sync", "now", "--config", box.config],
                       stdout: box.directory + "/run.out", stderr: box.directory + "/run.err")
        }
        for (box, run) in zip(agents, runs) {
            #expect(run.wait(timeout: 120) == 0, "\(fileContents(box.directory + "/run.err") ?? "")")
            #expect(treeSnapshot(box.local) == treeSnapshot(world.src))
        }
        let origin = world.server.bytesSent { _ in true }
        #expect(origin.bytes <= sent * 5 / 4, "the origin sent \(origin.bytes) bytes for \(sent) published (\(origin.requests) requests)")
        #expect(origin.requests <= 40, "\(origin.requests) requests at the origin")
    }

    /// On S3 (SeaweedFS): a cold mirror takes the small files from packs, and an update of one
    /// directory reads them as one range of a pack.
    @Test func s3ServesPacksWholeAndByRange() throws {
        let (box, layout) = (Sandbox("packs-s3"), ObjectLayoutTests())
        let target = try ObjectLayoutTests.PushTarget("s3", scratch: box.directory)
        try layout.configure(box, target)
        let (src, dst) = (box.directory + "/src", box.directory + "/dst")
        for i in 0..<1500 { layout.write(box, "d\(i / 100)/f\(i)", randomData(1000 + i % 3000, seed: UInt64(i))) }
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let cold = box.sync(["--session", "down", "--json"])
        #expect(cold.exitCode == 0 && treeSnapshot(dst) == treeSnapshot(src), "\(cold.output)")
        let fetched = cold.events(named: "file-done").compactMap { $0["fetched"] as? Int }.reduce(0, +)
        #expect(fetched == 0, "no file fetched alone: \(fetched) bytes")
        for i in 500..<530 { layout.write(box, "d5/f\(i)", randomData(2500, seed: UInt64(i) + 7000)) }
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let update = box.sync(["--session", "down", "--json"])
        #expect(update.exitCode == 0 && treeSnapshot(dst) == treeSnapshot(src), "\(update.output)")
        let alone = update.events(named: "file-done").filter { ($0["fetched"] as? Int ?? 0) > 0 }
        #expect(update.events(named: "file-done").count == 30 && alone.isEmpty, "30 files from one range: \(alone.count) alone")
    }

    /// Over SFTP, which gives no range of an object here: whole packs still serve a cold mirror.
    @Test func sftpServesWholePacks() throws {
        let (box, layout) = (Sandbox("packs-sftp"), ObjectLayoutTests())
        let target = try ObjectLayoutTests.PushTarget("sftp", scratch: box.directory)
        try layout.configure(box, target)
        let (src, dst) = (box.directory + "/src", box.directory + "/dst")
        for i in 0..<800 { layout.write(box, "d\(i / 100)/f\(i)", randomData(2000 + i, seed: UInt64(i))) }
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        let cold = box.sync(["--session", "down", "--json"])
        #expect(cold.exitCode == 0 && treeSnapshot(dst) == treeSnapshot(src), "\(cold.output)")
        let alone = cold.events(named: "file-done").filter { ($0["fetched"] as? Int ?? 0) > 0 }
        #expect(cold.events(named: "file-done").count == 800 && alone.isEmpty, "\(alone.count) files fetched alone")
    }
}

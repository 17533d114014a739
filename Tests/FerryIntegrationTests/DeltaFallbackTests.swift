import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// A delta not taken is never silent: each large file fetched whole says why once (a
/// `delta-fallback` event; on a terminal, a line per reason), `status` lists the last run's, the
/// agent's metrics count them by reason; and an index object the remote holds damaged is asked
/// for once, not on every poll, until the manifest changes.
@Suite(.serialized)
struct DeltaFallbackTests {
    /// Two large files mirrored from nginx, then a new version of each published: returns the
    /// metadata objects of their new indexes' pieces (`fdC3`), by file, as the remote has them.
    static func twoChangedFiles(_ box: Sandbox, remote: String) throws -> [String: String] {
        let meta = box.published + "/.ferry/meta"
        for (name, seed) in [("big.bin", 1), ("big2.bin", 2)] { box.publish(name,
                                                                            randomData(3 << 20, seed: UInt64(seed))) }
        box.buildManifest()
        box.configure(remote: remote)
        #expect(box.sync().exitCode == 0)
        var pieces: [String: String] = [:]
        for (name, seed) in [("big.bin", 11), ("big2.bin", 12)] {
            let before = Set(try FileManager.default.contentsOfDirectory(atPath: meta))
            var data = try #require(FileManager.default.contents(atPath: box.published + "/" + name))
            data.replaceSubrange(1_000_000..<1_050_000, with: randomData(50_000, seed: UInt64(seed)))
            box.publish(name, data)
            box.buildManifest()
            let new = Set(try FileManager.default.contentsOfDirectory(atPath: meta)).subtracting(before)
            pieces[name] = try #require(new.sorted().first { name in
                FileManager.default.contents(atPath: meta + "/" + name)?.prefix(4) == Data("fdC3".utf8)
            }, "a new piece of \(name)'s index")
        }
        return pieces
    }

    @Test func aDamagedIndexIsSaidOnceListedByStatusAndNotFetchedAgain() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("fallback-damaged", published: server.root)
        let pieces = try Self.twoChangedFiles(box, remote: server.url)
        for object in pieces.values {
            let path = box.published + "/.ferry/meta/" + object
            var bytes = try #require(FileManager.default.contents(atPath: path))
            bytes[bytes.count / 2] ^= 0x20
            try bytes.write(to: URL(fileURLWithPath: path))
        }
        server.clearLog()
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        for name in ["big.bin", "big2.bin"] {
            let published = FileManager.default.contents(atPath: box.published + "/" + name)
            #expect(FileManager.default.contents(atPath: box.localPath(name)) == published, "\(name), byte for byte")
        }
        // On a terminal: the first said with why, the other counted, in one line for the cause.
        let lines = run.stderr.split(separator: "\n").filter { $0.contains("whole") }
        #expect(lines.count == 2 && lines[0].contains("no delta, the whole file is fetched: its index is damaged")
                && lines[1].contains("1 more file fetched whole: its index is damaged"), "\(run.stderr)")
        // In the event log: once per file, with the reason and what said so.
        let events = ferry(["events", "--config", box.config, "--json"]).events(named: "delta-fallback")
        #expect(Set(events.compactMap { $0["path"] as? String }) == ["big.bin", "big2.bin"] && events.count == 2,
                "\(events)")
        #expect(events.allSatisfy { $0["reason"] as? String == "index-damaged"
                && ($0["message"] as? String ?? "").contains("does not match its hash") })
        // Status: the last run's files fetched whole.
        let status = box.statusText()
        let line = "no delta   2 files fetched whole: big.bin (its index is damaged), big2.bin (its index is damaged)"
        #expect(status.contains(line),
                "\(status)")
        let listed = box.statusSessions().first?["last_fallbacks"] as? [[String: Any]] ?? []
        #expect(listed.compactMap { $0["reason"] as? String } == ["index-damaged", "index-damaged"], "\(listed)")
        let remembered = run.stderr.split(separator: "\n").filter { $0.contains("not fetched again") }
        #expect(remembered.count == 1 && remembered[0].contains("and 1 more do not match their hash"),
                "one line: \(run.stderr)")
        // Each damaged object was asked for once, and is remembered: the next run asks for neither.
        for object in pieces.values {
            #expect(server.requests().filter { $0.path.hasSuffix(object) }.count == 1, "\(object) asked once")
        }
        server.clearLog()
        let again = box.sync(["--json"])
        #expect(again.exitCode == 0 && again.events(named: "delta-fallback").isEmpty
                && again.events(named: "warning").isEmpty,
                "\(again.output)")
        #expect(server.requests().filter { request in pieces.values.contains { request.path.hasSuffix($0) } }.isEmpty,
                "not fetched again: \(server.requests().map(\.path))")
        #expect(!box.statusText().contains("no delta"), "the last run fetched nothing whole")
    }

    @Test func aMissingIndexObjectIsAFallbackOfItsOwnKind() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("fallback-missing", published: server.root)
        let pieces = try Self.twoChangedFiles(box, remote: server.url)
        try FileManager.default.removeItem(atPath: box.published + "/.ferry/meta/" + pieces["big.bin"]!)
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        let said = run.events(named: "delta-fallback")
        #expect(said.count == 1 && said[0]["path"] as? String == "big.bin"
                && said[0]["reason"] as? String == "index-missing",
                "\(said)")
        let published = FileManager.default.contents(atPath: box.published + "/big.bin")
        #expect(FileManager.default.contents(atPath: box.localPath("big.bin")) == published)
    }

    /// The agent's metrics count files fetched whole by reason, every reason there from the start.
    @Test func theMetricsCountFallbacksByReason() {
        let metrics = Metrics(path: nil)
        let clock = SystemClock()
        for (path, reason) in [("a", DeltaFallback.indexDamaged), ("b", .indexDamaged), ("c", .rangesRefused)] {
            metrics.event(Event(time: clock.now(), session: "s",
                                body: .deltaFallback(path: RelativePath(trusted: path), reason: reason,
                                                                                        message: "test")))
        }
        let page = metrics.render([Metrics.Standing(name: "s", record: nil, taskCounts: [:], waiting: false)])
        #expect(page.contains("ferry_delta_fallbacks_total{session=\"s\",reason=\"index-damaged\"} 2"), "\(page)")
        #expect(page.contains("ferry_delta_fallbacks_total{session=\"s\",reason=\"ranges-refused\"} 1"))
        #expect(page.contains("ferry_delta_fallbacks_total{session=\"s\",reason=\"index-missing\"} 0"))
    }
}

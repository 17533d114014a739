import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Response parsing and local-root set-up against hostile input.
@Suite(.serialized)
struct HostileResponseTests {
    func consume(_ lines: [String]) -> ResponseHeaders {
        var headers = ResponseHeaders()
        for line in lines {
            var bytes = Array((line + "\r\n").utf8)
            bytes.withUnsafeMutableBufferPointer { headers.consume(UnsafeBufferPointer($0)) }
        }
        return headers
    }

    @Test func aHeaderThatLooksLikeAStatusLineChangesNothing() {
        let h = consume(["HTTP/1.1 206 Partial Content", "Content-Range: bytes 5-9/10", "HTTP/x: 99999999999999999999", "ETag: \"a\""])
        #expect(h.status == 206)
        #expect(h.contentRange == "bytes 5-9/10")
        #expect(h.etag == "\"a\"")
        let redirected = consume(["HTTP/1.1 302 Found", "Location: /x", "", "HTTP/1.1 200 OK", "Content-Length: 4"])
        #expect(redirected.status == 200, "a new response after the blank line")
        #expect(consume(["HTTP/1.1 99999999999999999999 Nope"]).status == 999, "at most three digits")
    }

    /// `.ferry` is ferry's own name: a symlink there is removed as a link (never followed) and
    /// replaced by ferry's directory; nothing is created where it pointed.
    @Test func aSymlinkedFerryDirectoryIsReplacedAndNothingIsCreatedOutside() throws {
        let box = Sandbox("ferrylink")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        let outside = box.directory + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: box.local, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: box.localPath(".ferry"), withDestinationPath: outside)
        box.configure(remote: "file://" + box.published)
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stderr.contains(".ferry was a symlink, not ferry's directory; removed it (not followed)"), "\(run.stderr)")
        #expect((try FileManager.default.contentsOfDirectory(atPath: outside)).isEmpty, "nothing created through the symlink")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: box.localPath(".ferry"))) == nil)
        #expect(fileContents(box.localPath("a.txt")) == "a\n")
        #expect(box.sync().exitCode == 0)
    }

    @Test func withoutValidatorsNoRangeIsAskedFor() throws {
        let box = Sandbox("novalidators")
        let content = randomData(2_000_000, seed: 4)
        box.publish("f.bin", content)
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/f.bin": ["no_validators": true, "reset_after": 1_000_000, "only_first": 1]])
        box.configure(remote: server.url, session: ["retry-delay = 0.05s"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        let requests = server.requests().filter { $0["path"] as? String == "/f.bin" }
        #expect(requests.count == 2)
        #expect(requests.allSatisfy { $0["range"] is NSNull || $0["range"] == nil }, "nothing to guard a range with: \(requests)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: box.localPath("f.bin"))) == content)
    }
}

/// The state database's migrations carry what a previous ferry recorded.
struct StateMigrationTests {
    /// Schema 2 kept hash-cache times as nanoseconds since 1970; schema 3 keeps seconds and
    /// nanoseconds (64-bit nanoseconds end in 2262). Rows survive the move, negative times too.
    @Test func theHashCacheSurvivesMigrationThree() throws {
        let dir = Harness.temporaryDirectory("migrate")
        defer { Harness.remove(dir) }
        try writeStateDatabase(in: dir, schema: 2, """
                INSERT INTO hash_cache VALUES ('s', 'a.txt', 5, 1700000000123456789, 1700000001000000007, 42, '\(String(repeating: "a", count: 64))');
                INSERT INTO hash_cache VALUES ('s', 'old.txt', 1, -1500000000, 0, 43, '\(String(repeating: "b", count: 64))');
                """)
        let store = try StateStore(directory: dir, clock: SystemClock())
        let cache = try store.hashCache(session: "s")
        let a = try #require(cache[RelativePath(trusted: "a.txt")])
        #expect(a.mtime == Timestamp(seconds: 1_700_000_000, nanoseconds: 123_456_789))
        #expect(a.ctime == Timestamp(seconds: 1_700_000_001, nanoseconds: 7))
        #expect(a.inode == 42 && a.size == 5 && a.wantedMtime == nil)
        let old = try #require(cache[RelativePath(trusted: "old.txt")])
        #expect(old.mtime == Timestamp(seconds: -2, nanoseconds: 500_000_000), "1.5 s before 1970")
        // And times beyond 2262 round-trip now.
        let far = CachedHash(size: 1, mtime: Timestamp(seconds: 253_402_300_799), ctime: Timestamp(seconds: -62_135_596_800), inode: 1,
                             sha256: SHA256Digest(hex: String(repeating: "c", count: 64))!, wantedMtime: Timestamp(seconds: 253_402_300_799, nanoseconds: 1))
        try store.saveHashes(session: "s", [(RelativePath(trusted: "far.txt"), far)])
        #expect(try store.hashCache(session: "s")[RelativePath(trusted: "far.txt")] == far)
    }
}

/// A state database as an older ferry left it: the first `schema` migrations, then `rows`.
func writeStateDatabase(in dir: String, schema: Int, _ rows: String) throws {
    let db = try SQLiteDatabase(path: dir + "/ferry.db")
    for sql in StateStore.migrations.prefix(schema) { try db.execute(sql) }
    try db.execute("PRAGMA user_version = \(schema);\n" + rows)
}

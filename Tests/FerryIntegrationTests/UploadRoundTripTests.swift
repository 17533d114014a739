import Foundation
import Testing
@testable import FerryRuntime

/// A small body goes with its PUT: no `Expect: 100-continue`, which costs a round trip before the
/// first byte, below `EasyHandle.expectContinueFrom`; a large one still asks first (a refusal then
/// costs no body). As the servers' own request logs see it, over WebDAV and S3.
@Suite(.serialized)
struct UploadRoundTripTests {
    let p = PushTests()
    static let large = Int(EasyHandle.expectContinueFrom) + (512 << 10)

    /// What each PUT of `path`'s name said in `Expect` (nil: nothing).
    static func expects(_ puts: [(path: String, expect: String?)], _ name: String) -> [String?] {
        puts.filter { $0.path.contains(name) }.map(\.expect)
    }

    @Test func aSmallWebDAVPutCarriesItsBodyAtOnce() throws {
        let box = Sandbox("expect-dav")
        let remoteDir = box.directory + "/remote"
        try FileManager.default.createDirectory(atPath: remoteDir, withIntermediateDirectories: true)
        let server = try PythonServer(directory: remoteDir, extra: ["--dav"])
        defer { server.stop() }
        let src = box.directory + "/src"
        p.write(src, "small.bin", randomData(4096, seed: 5))
        p.write(src, "large.bin", randomData(Self.large, seed: 6))
        try p.config(box, remote: server.url, up: "")
        let run = box.sync(["--session", "up"])
        #expect(run.exitCode == 0, "\(run.output)")
        let puts = server.requests().filter { $0["method"] as? String == "PUT" }
            .map { (path: $0["path"] as? String ?? "", expect: $0["expect"] as? String) }
        // Files go up under .ferry/upload/ and are moved into place: of the PUTs (two files, the
        // large one's index objects, the manifest), the large file's alone is 1 MiB or more.
        let asking = puts.filter { $0.expect != nil }
        #expect(puts.count >= 3 && asking.count == 1, "\(puts)")
        #expect(asking.allSatisfy { $0.expect?.lowercased() == "100-continue" && $0.path.hasPrefix("/.ferry/upload/") }, "\(asking)")
        #expect(box.sync(["--session", "down"]).exitCode == 0)
        #expect(FileManager.default.contents(atPath: box.directory + "/dst/large.bin") == randomData(Self.large, seed: 6))
    }

    @Test func aSmallS3PutCarriesItsBodyAtOnce() throws {
        let store = try SeaweedFS.shared()
        let proxy = try S3FaultProxy(before: store, upstreamPort: store.port)
        defer { proxy.stop() }
        let w = try S3PushTests.World("expect", endpoint: proxy.endpoint)
        w.write("small.bin", randomData(4096, seed: 7))
        w.write("large.bin", randomData(Self.large, seed: 8))
        let run = w.push()
        #expect(run.exitCode == 0, "\(run.output)")
        let puts = proxy.expectations().filter { $0.method == "PUT" }.map { (path: $0.path, expect: $0.expect) }
        let small = Self.expects(puts, "small.bin"), large = Self.expects(puts, "large.bin")
        #expect(!small.isEmpty && small.allSatisfy { $0 == nil }, "the small object's PUTs: \(small)")
        #expect(!large.isEmpty && large.allSatisfy { $0?.lowercased() == "100-continue" }, "the large object's PUTs: \(large)")
        w.checkObjects("the push")
        #expect(w.pull().exitCode == 0)
        #expect(FileManager.default.contents(atPath: w.dst + "/large.bin") == randomData(Self.large, seed: 8))
    }
}

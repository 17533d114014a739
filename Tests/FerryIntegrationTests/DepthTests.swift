import Foundation
import Testing
@testable import FerryRuntime

/// Depth on a far path: small files fetched whole share the `transfers` slots when their requests
/// take a round trip of 25 ms or more, so more of them are in flight; large files keep a slot each,
/// and a near path sees `transfers` and no more. The far path is our test server delaying every
/// answer, which to the client is a round trip; it logs how many requests waited at once.
@Suite struct DepthTests {
    /// The most requests the server held in their delay at once.
    static func peak(_ server: PythonServer) -> Int {
        server.requests().compactMap { $0["concurrent"] as? Int }.max() ?? 0
    }

    /// Mirrors `count` files of `size` bytes from a server delaying each answer: the peak, and the
    /// requests for files.
    static func mirror(count: Int, size: Int, delay: Double) throws -> (peak: Int, requests: Int) {
        let box = Sandbox("depth")
        var files: [String: Data] = [:]
        for i in 0..<count { files["d/f\(i).bin"] = randomData(size, seed: UInt64(7_000 + i)) }
        for (path, data) in files { box.publish(path, data) }
        #expect(box.buildManifest().exitCode == 0)
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["*": ["delay": delay]])
        box.configure(remote: server.url)  // transfers = 4
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, data) in files { #expect(FileManager.default.contents(atPath: box.localPath(path)) == data, "\(path)") }
        return (peak(server), server.requests().filter { ($0["path"] as? String)?.hasSuffix(".bin") == true }.count)
    }

    /// 60 ms a request: four small files share each of the 4 slots (16 in flight), after the
    /// first answers show the round trip.
    @Test func smallFilesOnAFarPathShareTheSlots() throws {
        let (peak, requests) = try Self.mirror(count: 96, size: 4096, delay: 0.06)
        #expect(peak > 4 && peak <= 16, "peak \(peak)")
        #expect(requests == 96, "each file once: \(requests)")
    }

    /// Files larger than a short request keep one slot each, however far the path.
    @Test func largeFilesOnAFarPathKeepTheirSlots() throws {
        let (peak, _) = try Self.mirror(count: 12, size: 300 << 10, delay: 0.06)
        #expect(peak >= 2 && peak <= 4, "peak \(peak)")
    }

    /// 5 ms a request is a near path: no more than `transfers` at once.
    @Test func aNearPathKeepsTransfersInFlight() throws {
        let (peak, _) = try Self.mirror(count: 96, size: 4096, delay: 0.005)
        #expect(peak >= 2 && peak <= 4, "peak \(peak)")
    }

    /// The rule: sharing doubles with each 12.5 ms of round trip, up to 8 a slot and 128 in flight.
    @Test func sharingFollowsTheRoundTrip() {
        var depth = Depth()
        #expect(depth.sharing(transfers: 4) == 1)
        depth.saw(0.020)
        #expect(depth.sharing(transfers: 4) == 1)
        depth.saw(0.030)  // the shortest counts
        #expect(depth.sharing(transfers: 4) == 1)
        var far = Depth()
        far.saw(0.060)
        #expect(far.sharing(transfers: 4) == 4)
        #expect(far.units(short: true, transfers: 4) == 2 && far.units(short: false, transfers: 4) == Depth.slot)
        far.saw(0.051)
        #expect(far.sharing(transfers: 8) == 4)
        var farther = Depth()
        farther.saw(0.150)
        #expect(farther.sharing(transfers: 8) == 8)
        #expect(farther.sharing(transfers: 64) == 2)  // 128 in flight at most
        #expect(farther.sharing(transfers: 100) == 1)
    }
}

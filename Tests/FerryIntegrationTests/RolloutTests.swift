import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Phased rollouts (issue 43): the signed root says what share of machines take a release and
/// names the one before; each machine decides by a stable hash of its `machine-id` and the
/// release, so raising the share only adds machines, and the others stay on (or, when the
/// publisher keeps both, move to) the release before.
@Suite(.serialized)
struct RolloutTests {
    /// `count` machines, each its own state, mirror and `machine-id`, pulling `remote`.
    struct Fleet {
        let root: String
        let count: Int

        init(_ label: String, count: Int, remote: String) throws {
            root = Harness.temporaryDirectory(label)
            self.count = count
            for i in 0..<count {
                try FileManager.default.createDirectory(atPath: root + "/m\(i)", withIntermediateDirectories: true)
                try """
                    [agent]
                    state = \(root)/m\(i)/state
                    machine-id = machine-\(i)
                    [session fleet]
                    remote = \(remote)
                    local = \(root)/m\(i)/mirror
                    delete = yes
                    """.writeReplacing(root + "/m\(i)/ferry.conf")
            }
        }

        /// Every machine syncs once, one process after another; their exit codes.
        func sync() -> [Int32] {
            (0..<count).map { ferry(["sync", "now", "--config", root + "/m\($0)/ferry.conf", "--quiet"]).exitCode }
        }

        func file(_ i: Int, _ path: String) -> String? { fileContents(root + "/m\(i)/mirror/" + path) }

        /// The machines whose `path` holds `text`.
        func holding(_ path: String, _ text: String) -> Set<Int> { Set((0..<count).filter { file($0, path) == text }) }
    }

    /// Writes the release's files with a fixed mode and mtime, so its tree (and so which machines
    /// a share picks) is the same on every run of the test.
    static func publish(_ box: Sandbox, _ files: [String: String]) {
        for (path, text) in files { fix(box.publish(path, text)) }
    }

    static func fix(_ path: String) {
        chmod(path, 0o644)
        var times = [timespec(tv_sec: 1_700_000_000, tv_nsec: 0), timespec(tv_sec: 1_700_000_000, tv_nsec: 0)]
        utimensat(AT_FDCWD, path, &times, 0)
    }

    @Test func aShareReachesAFewMachinesAndRaisingItOnlyAddsMachines() throws {
        let box = Sandbox("rollout-shares")
        Self.publish(box, ["v.txt": "release 1\n", "same.txt": "unchanged\n"])
        #expect(ferry(["manifest", "build", box.published]).exitCode == 0)
        let fleet = try Fleet("rollout-fleet", count: 100, remote: "file://" + box.published)
        defer { Harness.remove(fleet.root) }
        #expect(fleet.sync().allSatisfy { $0 == 0 })
        #expect(fleet.holding("v.txt", "release 1\n").count == 100)

        // Release 2 to 10%: a few take it, the others stay on release 1.
        Self.publish(box, ["v.txt": "release 2\n"])
        let built = ferry(["manifest", "build", box.published, "--rollout", "10%", "--json"])
        #expect(built.exitCode == 0 && built.output.contains("the others stay on version"), "\(built.output)")
        #expect(fleet.sync().allSatisfy { $0 == 0 })
        let tenth = fleet.holding("v.txt", "release 2\n")
        #expect((3...20).contains(tenth.count), "10%: \(tenth.count) machines took it")
        #expect(fleet.holding("v.txt", "release 1\n").count == 100 - tenth.count)
        let inside = tenth.first!, outside = (0..<100).first { !tenth.contains($0) }!
        let insideRun = ferry(["sync", "now", "--config", fleet.root + "/m\(inside)/ferry.conf", "--json"])
        let rollout = insideRun.events(named: "rollout").first
        #expect(rollout?["inside"] as? Bool == true && rollout?["percent"] as? Int == 10, "\(insideRun.stdout)")
        let status = ferry(["status", "--config", fleet.root + "/m\(outside)/ferry.conf", "-v"]).stdout
        #expect(status.contains("rollout") && status.contains("not in it") && status.contains("stays on version"), "\(status)")
        // It serves the release before, not the newest it saw, and says why.
        #expect(status.contains("serving    v") && status.contains("not this one)"), "\(status)")
        let json = (try? JSONSerialization.jsonObject(with: Data(ferry(["status", "--config", fleet.root + "/m\(outside)/ferry.conf", "--json"]).stdout.utf8))) as? [String: Any]
        let member = (json?["sessions"] as? [[String: Any]])?.first ?? [:]
        let standing = member["rollout"] as? [String: Any] ?? [:]
        #expect(member["served_version"] as? Int == standing["taking"] as? Int && member["manifest_version"] as? Int == standing["version"] as? Int
                && member["served_version"] as? Int != member["manifest_version"] as? Int, "\(member)")
        // ferry check judges a machine outside by the release it holds: nothing differs.
        let check = ferry(["check", "--config", fleet.root + "/m\(outside)/ferry.conf", "--json"])
        #expect(check.exitCode == 0 && check.events(named: "check-finished").first?["message"] == nil, "\(check.output)")

        // Raised to 50% (the same files, a new version): every machine that had it keeps it.
        #expect(ferry(["manifest", "build", box.published, "--rollout", "50%"]).exitCode == 0)
        #expect(fleet.sync().allSatisfy { $0 == 0 })
        let half = fleet.holding("v.txt", "release 2\n")
        #expect(tenth.isSubset(of: half) && (35...65).contains(half.count), "50%: \(half.count) machines, \(tenth.subtracting(half).count) of the first lost it")
        print("rollout test: 100 machines, 10%: \(tenth.count) took release 2, 50%: \(half.count)")

        // 100%: all of them.
        #expect(ferry(["manifest", "build", box.published]).exitCode == 0)
        #expect(fleet.sync().allSatisfy { $0 == 0 })
        #expect(fleet.holding("v.txt", "release 2\n").count == 100 && fleet.holding("same.txt", "unchanged\n").count == 100)
    }

    /// `manifest build` serves one directory: a machine outside the rollout that never held the
    /// release before cannot be given its files that changed, and is refused with the reason.
    @Test func aNewMachineOutsideATreeLayoutRolloutIsRefusedWithTheReason() throws {
        let box = Sandbox("rollout-tree")
        Self.publish(box, ["v.txt": "release 1\n"])
        #expect(ferry(["manifest", "build", box.published]).exitCode == 0)
        Self.publish(box, ["v.txt": "release 2\n"])
        #expect(ferry(["manifest", "build", box.published, "--rollout", "1%"]).exitCode == 0)
        let fleet = try Fleet("rollout-new", count: 30, remote: "file://" + box.published)
        defer { Harness.remove(fleet.root) }
        let codes = fleet.sync()
        let refused = (0..<30).filter { codes[$0] == 4 }
        #expect(!refused.isEmpty && refused.count + fleet.holding("v.txt", "release 2\n").count == 30, "\(codes)")
        let run = ferry(["sync", "now", "--config", fleet.root + "/m\(refused[0])/ferry.conf"])
        #expect(run.stderr.contains("outside the rollout") && run.stderr.contains("tree layout keeps only the newest content"), "\(run.output)")
        #expect(fleet.file(refused[0], "v.txt") == nil, "nothing was changed")
        #expect(ferry(["manifest", "build", box.published, "--rollout", "0%"]).stderr.contains("from 1% to 100%"))
    }

    /// A push with remote-layout = objects keeps both releases: machines outside the rollout move to
    /// the release before (fresh ones too), those inside take the new one, and raising it to 100%
    /// brings every machine to the new one. Collection keeps what the release before needs.
    @Test func aPushRollsOutWithBothReleasesOnTheRemote() throws {
        let box = Sandbox("rollout-push")
        let remote = box.directory + "/remote", src = box.directory + "/src"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        func push(rollout: Int, version text: String, extra: String? = nil) throws -> FerryRun {
            try "\(text)\n".writeReplacing(src + "/v.txt")
            if let extra { try extra.writeReplacing(src + "/extra.txt") }
            // A fixed mtime: the same tree, so the same machines, on every run of the test.
            for name in ["v.txt", "extra.txt"] { Self.fix(src + "/" + name) }
            try box.configure(push: "file://\(remote)/", from: src, ["remote-layout = objects", "object-grace = 0s", "keep-versions = 1", "rollout = \(rollout)%"])
            return ferry(["sync", "now", "--config", box.config, "--session", "up"])
        }
        let refused = try push(rollout: 20, version: "release 1")
        #expect(refused.exitCode == 4 && refused.stderr.contains("nothing was published before"), "\(refused.output)")
        #expect(try push(rollout: 100, version: "release 1").exitCode == 0)
        #expect(try push(rollout: 30, version: "release 2").exitCode == 0)
        // Another publication at 30%: what no root names is collected at once (grace 0, one
        // version kept), but for what the release before needs.
        #expect(try push(rollout: 30, version: "release 2", extra: "more\n").exitCode == 0)
        let fleet = try Fleet("rollout-push-fleet", count: 20, remote: "file://\(remote)/")
        defer { Harness.remove(fleet.root) }
        #expect(fleet.sync().allSatisfy { $0 == 0 })
        let second = fleet.holding("v.txt", "release 2\n"), first = fleet.holding("v.txt", "release 1\n")
        #expect(second.count + first.count == 20 && !first.isEmpty && !second.isEmpty, "30%: \(second.count) on release 2, \(first.count) moved to release 1")
        print("rollout test: 20 fresh machines, 30%: \(second.count) took release 2, \(first.count) moved to release 1")
        #expect(try push(rollout: 100, version: "release 2").exitCode == 0)
        #expect(fleet.sync().allSatisfy { $0 == 0 })
        #expect(fleet.holding("v.txt", "release 2\n").count == 20)

        // The tree layout cannot keep the release before.
        try box.configure(push: "file://\(remote)/", from: src, ["rollout = 10%"])
        #expect(ferry(["config", "check", "--config", box.config]).stderr.contains("key 'rollout': needs remote-layout = objects"))
    }
}

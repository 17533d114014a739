import Foundation
import Synchronization
import Testing
@testable import FerryRuntime
import FerryCore

/// `on-switch-check` (issue 43, the health gate): after each switch to a new generation the
/// session's command runs; when it fails the previous generation is current again within the same
/// run, the version is not taken again on this machine (a newer one is), and the rollback is said
/// once in the run, `status` and the metrics. A kill during the check leaves a whole generation
/// current, and the next run finishes the check.
@Suite(.serialized)
struct SwitchCheckTests {
    /// A check that records its environment and what `local` holds in `log`, then exits with the
    /// code in `verdict` (0 when the file is absent); with `hold` present it waits for it to go.
    static func checkScript(_ box: Sandbox) throws -> (script: String, log: String, verdict: String, hold: String) {
        let script = box.directory + "/check.sh", log = box.directory + "/check.log"
        let verdict = box.directory + "/verdict", hold = box.directory + "/hold"
        try """
            #!/bin/sh
            echo "$FERRY_SESSION $FERRY_GENERATION $FERRY_PREVIOUS_GENERATION $FERRY_VERSION $(cat "$FERRY_LOCAL/v.txt")" >> \(log)
            while [ -e \(hold) ]; do touch \(hold).seen; sleep 0.05; done
            [ -e \(verdict) ] && exit "$(cat \(verdict))"
            exit 0
            """.writeReplacing(script)
        chmod(script, 0o755)
        return (script, log, verdict, hold)
    }

    static func publish(_ box: Sandbox, version: Int) {
        box.publish("v.txt", "version \(version)\n")
        box.publish("data/\(version).bin", randomData(50_000, seed: UInt64(version)))
        let built = ferry(["manifest", "build", box.published, "--version", String(version)])
        #expect(built.exitCode == 0, "\(built.output)")
    }

    static func current(_ box: Sandbox) -> String? { fileContents(box.local + "/v.txt") }

    /// The session's member of `status --json`.
    static func statusJSON(_ box: Sandbox) -> [String: Any] {
        let object = try? JSONSerialization.jsonObject(with: Data(box.status(["--json"]).stdout.utf8)) as? [String: Any]
        return (object?["sessions"] as? [[String: Any]])?.first ?? [:]
    }

    /// After version 2 was rolled back to version 1, status and metrics say one coherent thing: v1
    /// served, v2 the newest seen and rolled back, the generation left on disk never taking it.
    static func expectOneAccountOfTheRollback(_ box: Sandbox, status: String) throws {
        #expect(status.contains("serving    v1 since") && status.contains("(v2 was rolled back here)"), "\(status)")
        #expect(!status.contains("the next run goes on with it") && status.contains("version 2 never is"), "\(status)")
        let json = Self.statusJSON(box)
        #expect(json["served_version"] as? Int == 1 && json["manifest_version"] as? Int == 2 && json["rejected_version"] as? Int == 2, "\(json)")
        let rolledBack = try Self.metrics(box)
        for line in ["ferry_served_version{session=\"test\"} 1", "ferry_seen_version{session=\"test\"} 2",
                     "ferry_rejected_version{session=\"test\"} 2", "ferry_manifest_version{session=\"test\"} 2"] {
            #expect(rolledBack.contains(line + "\n"), "\(line): \(rolledBack)")
        }
    }

    /// The metrics the agent would write for the session now, from its state.
    static func metrics(_ box: Sandbox) throws -> String {
        let store = try StateStore(directory: box.state, clock: SystemClock())
        return Metrics(path: nil).render([Metrics.Standing(name: "test", record: try store.session("test"), taskCounts: [:], waiting: false)])
    }

    @Test func aFailedCheckSwitchesBackAndTheVersionIsNotTakenAgain() throws {
        let box = Sandbox("switch-check")
        let (script, log, verdict, _) = try Self.checkScript(box)
        Self.publish(box, version: 1)
        box.configure(remote: "file://" + box.published, session: ["layout = generations", "on-switch-check = \(script)", "delete = yes"])
        #expect(box.sync().exitCode == 0)
        #expect(Self.current(box) == "version 1\n" && Generations.readLink(box.local) == "mirror.generations/g1")
        #expect(Self.statusJSON(box)["served_version"] as? Int == 1, "\(Self.statusJSON(box))")
        #expect(fileContents(log) == "test g1  1 version 1\n", "the check ran on the new generation, with no previous: \(fileContents(log) ?? "")")

        // Version 2 fails its check: back on g1 in the same run, said once. A reader that opens
        // local meanwhile sees one whole version each time: v.txt and the data file of its version.
        Self.publish(box, version: 2)
        try "3".writeReplacing(verdict)
        let local = box.local
        let stop = Shared(Atomic<Bool>(false))
        let views = Shared(Mutex<[String]>([]))
        let reader = Thread {
            while !stop.value.load(ordering: .relaxed) {
                let dir = open(local, O_RDONLY | O_DIRECTORY)
                guard dir >= 0 else { continue }
                var buffer = [UInt8](repeating: 0, count: 64)
                let fd = openat(dir, "v.txt", O_RDONLY)
                let n = fd >= 0 ? read(fd, &buffer, buffer.count) : -1
                if fd >= 0 { close(fd) }
                let text = n > 0 ? String(decoding: buffer[..<n], as: UTF8.self) : "?"
                let version = text.split(separator: " ").last.map { $0.trimmingCharacters(in: .newlines) } ?? "?"
                var st = stat()
                let whole = fstatat(dir, "data/\(version).bin", &st, 0) == 0 && st.st_size == 50_000
                close(dir)
                views.value.withLock { $0.append(whole ? version : "mixed: \(text)") }
            }
        }
        reader.start()
        let failed = box.sync(["--json"])
        stop.value.store(true, ordering: .relaxed)
        #expect(eventually(30) { reader.isFinished })
        let seen = views.value.withLock { $0 }
        #expect(!seen.isEmpty && seen.allSatisfy { $0 == "1" || $0 == "2" }, "every open saw one whole version: \(Set(seen))")
        #expect(failed.exitCode == 1, "\(failed.output)")
        #expect(Self.current(box) == "version 1\n" && Generations.readLink(box.local) == "mirror.generations/g1")
        #expect(fileContents(log)?.hasSuffix("test g2 g1 2 version 2\n") == true, "the check saw version 2 in place: \(fileContents(log) ?? "")")
        let rolled = failed.events(named: "rolled-back")
        #expect(rolled.count == 1 && rolled[0]["generation"] as? String == "g2" && rolled[0]["previous"] as? String == "g1"
                && rolled[0]["version"] as? Int == 2 && (rolled[0]["reason"] as? String)?.contains("exited with code 3") == true, "\(rolled)")
        #expect(failed.events(named: "generation-switched").isEmpty, "hooks hear of no switch that did not hold")
        let finished = failed.events(named: "sync-finished").first?["message"] as? String ?? ""
        #expect(finished.contains("failed on-switch-check") && finished.contains("not taken again"), "\(finished)")
        let status = box.statusText(["-v"])
        #expect(status.contains("rolled back") && status.contains("version 2"), "\(status)")
        try Self.expectOneAccountOfTheRollback(box, status: status)

        // Still published: not taken again, nothing fails, the check does not run.
        try? FileManager.default.removeItem(atPath: verdict)
        let runs = fileContents(log)?.split(separator: "\n").count
        let again = box.sync(["--json"])
        #expect(again.exitCode == 0 && Self.current(box) == "version 1\n", "\(again.output)")
        #expect(again.events(named: "rolled-back").isEmpty && fileContents(log)?.split(separator: "\n").count == runs)
        #expect((again.events(named: "sync-finished").first?["message"] as? String)?.contains("stays on the generation before") == true, "\(again.stdout)")

        // Version 3 passes: taken, whole, nothing of version 2 in it.
        box.unpublish("data/2.bin")
        Self.publish(box, version: 3)
        let taken = box.sync()
        #expect(taken.exitCode == 0, "\(taken.output)")
        #expect(Self.current(box) == "version 3\n")
        // A newer version passed: the rollback is over, said no more.
        let after = box.statusText(["-v"])
        #expect(after.contains("serving    v3 since") && !after.contains("rolled back") && !after.contains("never is"), "\(after)")
        let passed = try Self.metrics(box)
        #expect(passed.contains("ferry_served_version{session=\"test\"} 3\n") && !passed.contains("ferry_rejected_version{"), "\(passed)")
        expectIdentical(box.published, (box.local as NSString).deletingLastPathComponent + "/" + (Generations.readLink(box.local) ?? ""))
        let store = try StateStore(directory: box.state, clock: SystemClock())
        #expect(try store.session("test")?.rollbacks == 1)
        #expect(try store.session("test")?.switchCheck == nil)
    }

    /// kill -9 while the check runs: `local` names the new generation, whole; the next run runs the
    /// check again, and its failure switches back then.
    @Test func aKillDuringTheCheckIsFinishedByTheNextRun() throws {
        let box = Sandbox("switch-check-kill")
        let (script, log, verdict, hold) = try Self.checkScript(box)
        Self.publish(box, version: 1)
        box.configure(remote: "file://" + box.published, session: ["layout = generations", "on-switch-check = \(script)"])
        #expect(box.sync().exitCode == 0)
        Self.publish(box, version: 2)
        try "".writeReplacing(hold)
        let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config], stdout: box.directory + "/out", stderr: box.directory + "/err")
        let deadline = Date().addingTimeInterval(60)
        while !FileManager.default.fileExists(atPath: hold + ".seen") && Date() < deadline { usleep(10_000) }
        #expect(FileManager.default.fileExists(atPath: hold + ".seen"), "the check is running")
        kill(child.pid, SIGKILL)
        _ = child.wait(timeout: 30)
        #expect(Self.current(box) == "version 2\n" && Generations.readLink(box.local) == "mirror.generations/g2", "a whole generation is current")
        let store = try StateStore(directory: box.state, clock: SystemClock())
        #expect(try store.session("test")?.switchCheck == SwitchCheck(generation: 2, previous: 1, version: 2))

        try? FileManager.default.removeItem(atPath: hold)
        try "1".writeReplacing(verdict)
        let next = box.sync(["--json"])
        #expect(next.exitCode == 1 && next.events(named: "rolled-back").count == 1, "\(next.output)")
        #expect(Self.current(box) == "version 1\n")
        #expect(fileContents(log)?.split(separator: "\n").count == 3, "the check ran again: \(fileContents(log) ?? "")")
        #expect(try store.session("test")?.switchCheck == nil && store.session("test")?.rejectedVersion == 2)
    }

    /// The first generation has nothing before it: a failed check leaves it current and says so;
    /// a check that outlasts hook-timeout fails.
    @Test func withoutAGenerationBeforeTheNewOneStays() throws {
        let box = Sandbox("switch-check-first")
        let (script, _, verdict, hold) = try Self.checkScript(box)
        Self.publish(box, version: 1)
        box.configure(remote: "file://" + box.published, session: ["layout = generations", "on-switch-check = \(script)", "hook-timeout = 1s"])
        try "2".writeReplacing(verdict)
        let first = box.sync()
        #expect(first.exitCode == 1 && first.output.contains("no generation before it to return to"), "\(first.output)")
        #expect(Self.current(box) == "version 1\n")
        try? FileManager.default.removeItem(atPath: verdict)
        Self.publish(box, version: 2)
        try "".writeReplacing(hold)
        let slow = box.sync()
        #expect(slow.exitCode == 1 && slow.output.contains("did not finish within hook-timeout"), "\(slow.output)")
        #expect(Self.current(box) == "version 1\n")
        try? FileManager.default.removeItem(atPath: hold)
    }

    @Test func theKeyNeedsGenerationsAndRollbacksAreCounted() throws {
        let box = Sandbox("switch-check-config")
        box.configure(remote: "file://" + box.published, session: ["on-switch-check = /bin/true"])
        let refused = box.sync()
        #expect(refused.exitCode == 2 && refused.stderr.contains("applies to a pull session with layout = generations"), "\(refused.output)")
        let metrics = Metrics(path: nil)
        metrics.event(Event(time: SystemClock().now(), session: "s", body: .rolledBack(generation: "g2", previous: "g1", version: 2, reason: "it exited with code 1")))
        var state = Metrics.Standing(name: "s", record: nil, taskCounts: [:], waiting: false)
        state.direction = .pull
        #expect(metrics.render([state]).contains("ferry_rollbacks_total{session=\"s\"} 1"))
        let line = Event(time: SystemClock().now(), session: "s", body: .rolledBack(generation: "g2", previous: "g1", version: 2, reason: "why")).json
        #expect(line.contains("\"event\":\"rolled-back\",\"generation\":\"g2\",\"previous\":\"g1\",\"version\":2,\"reason\":\"why\""), "\(line)")
    }
}

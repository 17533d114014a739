import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Time reaches the runtime only through the clock it was given: on a `ManualClock` a run's
/// backoff and a discretionary session's window are decided on the clock's time, and the test
/// waits for neither.
struct InjectedClockTests {
    final class Collector: EventSink, @unchecked Sendable {
        var events: [Event] = []
        func event(_ event: Event) { events.append(event) }
        func progress(_ progress: SyncProgress) {}
    }

    /// A remote that refuses every connection, three tries of the manifest after minute-long
    /// backoffs: on the system's clock the run would wait 1.5 to 3 minutes; on a manual one it
    /// ends at once, the clock moved forward by exactly the delays it announced.
    @Test func aManifestRetryWaitsOnTheRunsClock() throws {
        let box = Sandbox("clock-backoff")
        box.configure(remote: "http://127.0.0.1:\(freePort())/", session: ["retries = 3", "retry-delay = 60s"])
        let config = try ConfigLoader.load(path: box.config)
        let clock = ManualClock()
        let started = clock.monotonic()
        let realStart = SystemClock().monotonic()
        let events = Collector()
        let job = SessionRunner.Job(session: config.sessions[0], options: SyncOptions(stop: StopCondition(clock: clock, maxDuration: nil)))
        let result = try SessionRunner(agent: config.agent, clock: clock).run([job], sinks: [events])[0]

        #expect(result.exitCode == .remoteOrManifest, "\(String(describing: result.message))")
        let delays = events.events.compactMap { event -> Double? in
            if case let .manifestRetrying(_, _, delay, _) = event.body { return delay }
            return nil
        }
        #expect(delays.count == 3, "one wait before each of the 3 retries: \(events.events.map(\.name))")
        #expect(delays.allSatisfy { (30...60).contains($0) }, "retry-delay with its jitter: \(delays)")
        #expect(abs(clock.monotonic() - started - delays.reduce(0, +)) < 1e-6, "the run waited out its backoff on the injected clock")
        #expect(SystemClock().monotonic() - realStart < 30, "and not on the machine's")
    }

    /// `window = 02:00-06:00` read at the manual clock's local time: closed a second before 02:00,
    /// still said closed a second later (the gate asks the host at most every 2 s of that clock),
    /// open once the clock has moved on past both.
    @Test func aDiscretionaryWindowOpensOnTheInjectedClock() throws {
        let box = Sandbox("clock-window")
        box.configure(remote: "file://\(box.published)/", session: ["discretionary = yes", "window = 02:00-06:00"])
        let config = try ConfigLoader.load(path: box.config)
        let wall = try #require(Timestamp(localTime: "2030-01-10 01:59:59"))
        let clock = ManualClock(wall: wall)
        // A host root of its own: no power supply, load or NetworkManager of this machine's counts.
        let host = box.directory + "/host"
        try FileManager.default.createDirectory(atPath: host, withIntermediateDirectories: true)
        let gate = try #require(DiscretionGate(session: config.sessions[0], agent: config.agent, clock: clock, probe: HostProbe(root: host)))

        let closed = gate.waitsFor()
        #expect(closed?.contains("02:00-06:00") == true, "\(String(describing: closed))")
        clock.advance(by: 1)
        #expect(gate.waitsFor() == closed, "asked again only 2 s after the last look")
        clock.advance(by: 1)
        #expect(gate.waitsFor() == nil, "02:00:01 is inside the window")
        clock.advance(by: 4 * 3600)
        #expect(gate.waitsFor()?.contains("02:00-06:00") == true, "06:00:01 is past it")
    }
}

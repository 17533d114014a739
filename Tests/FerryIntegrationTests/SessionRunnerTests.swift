import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// The session runner in-process, on file:// remotes: what `sync now` and `resume` run.
struct SessionRunnerTests {
    final class Collector: EventSink, @unchecked Sendable {
        var events: [Event] = []
        var progressCalls = 0
        func event(_ event: Event) { events.append(event) }
        func progress(_ progress: SyncProgress) { progressCalls += 1 }
    }

    func sessions(_ box: Sandbox, _ names: [String]) throws -> Config {
        var lines = ["[agent]", "state = \(box.state)", "transfers = 2"]
        for name in names {
            box.publish("\(name)/\(name).txt", "\(name)\n")
            #expect(ferry(["manifest", "build", box.published + "/" + name, "--quiet"]).exitCode == 0)
            lines += ["", "[session \(name)]", "remote = file://\(box.published)/\(name)/", "local = \(box.directory)/\(name)"]
        }
        return try ConfigParser.parse(lines.joined(separator: "\n") + "\n", path: box.config)
    }

    @Test func runsSessionsTogetherAndFansEventsOutToEverySink() throws {
        let box = Sandbox("runner")
        let config = try sessions(box, ["a", "b", "c"])
        let first = Collector(), second = Collector()
        let jobs = config.sessions.map { SessionRunner.Job(session: $0, options: SyncOptions(stop: StopCondition(clock: SystemClock(), maxDuration: nil))) }
        let results = try SessionRunner(agent: config.agent, clock: SystemClock()).run(jobs, sinks: [first, second])
        #expect(results.map(\.session) == ["a", "b", "c"])
        #expect(results.allSatisfy { $0.exitCode == .inSync && $0.counts.transferred == 1 })
        for name in ["a", "b", "c"] { #expect(fileContents("\(box.directory)/\(name)/\(name).txt") == "\(name)\n") }
        #expect(first.events.count == second.events.count && !first.events.isEmpty)
        #expect(first.events.filter { $0.name == "sync-finished" }.count == 3)
    }

    @Test func aStopTokenAskedBeforeTheRunStopsItWithNothingChanged() throws {
        let box = Sandbox("runner-stop")
        let config = try sessions(box, ["a"])
        let token = StopToken()
        token.request("stopped by SIGTERM")
        let job = SessionRunner.Job(session: config.sessions[0], options: SyncOptions(stop: StopCondition(token: token, clock: SystemClock(), maxDuration: nil)))
        let result = try SessionRunner(agent: config.agent, clock: SystemClock()).run([job], sinks: [Collector()])[0]
        #expect(result.exitCode == .incomplete, "\(String(describing: result.message))")
        #expect(result.message?.contains("stopped by SIGTERM") == true)
        #expect(!FileManager.default.fileExists(atPath: "\(box.directory)/a/a.txt"))
    }
}

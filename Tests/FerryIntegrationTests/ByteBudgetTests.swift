import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// `[agent] budget`: the bytes all sessions of the machine move per local day or month, kept in
/// the state so restarts and other processes spend the same budget; a spent budget holds counted
/// sessions until the next period, and `budget = exempt` goes on.
struct ByteBudgetTests {
    typealias Collector = InjectedClockTests.Collector

    /// The largest read a transfer takes past a spent budget is libcurl's 16 KiB buffer, per running
    /// transfer; a piece (1 MiB) bounds it with room to spare.
    static let piece: Int64 = 1 << 20

    /// 4M/day with 21 MiB pending, scaled down from 100 MB/day and 1 GiB: on the injected clock,
    /// runs through a whole day move the day's budget and at most a piece more, each run on a new
    /// runner (a restart: only the state remembers what was spent); the next days resume the
    /// partial files where they stopped, and the mirror is whole after six days, every byte counted
    /// once.
    @Test func aDayOfTheInjectedClockMovesTheBudgetAndAtMostOnePieceMore() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("budget-day", published: server.root)
        let contents = (0..<3).map { randomData(7 << 20, seed: UInt64(40 + $0)) }
        for (i, data) in contents.enumerated() { box.publish("big\(i).bin", data) }
        box.buildManifest()
        box.configure(remote: server.url, agent: ["budget = 4M/day"])
        let config = try ConfigLoader.load(path: box.config)
        let clock = ManualClock(wall: try #require(Timestamp(localTime: "2030-01-10 00:00:30")))
        let budget: Int64 = 4 << 20
        func run() throws -> (SyncResult, [Event]) {
            let events = Collector()
            let job = SessionRunner.Job(session: config.sessions[0], options: SyncOptions(stop: StopCondition(clock: clock, maxDuration: nil)))
            let result = try SessionRunner(agent: config.agent, clock: clock).run([job], sinks: [events])[0]
            return (result, events.events)
        }
        func used(_ day: String) throws -> Int64 { try StateStore(directory: box.state, clock: clock).budgetUsed(period: "day:" + day) }
        func binBytes() -> Int {
            #expect(server.awaitIdle(), "nginx finished the requests the runs cut off")
            return server.bytesSent { $0.hasSuffix(".bin") }.bytes
        }

        // Day 1: the first run spends the budget and is held until midnight.
        let (first, events) = try run()
        #expect(first.exitCode == .incomplete, "\(String(describing: first.message))")
        #expect(first.counts.heldUntil == Timestamp(localTime: "2030-01-11 00:00:00"))
        #expect(first.message?.contains("wait for the byte budget (4M/day") == true, "\(String(describing: first.message))")
        let held = events.compactMap { event -> String? in
            if case let .sessionHeld(_, waitsFor) = event.body { return waitsFor }
            return nil
        }
        #expect(held.count == 1 && held[0].contains("the next day begins at \(Timestamp(localTime: "2030-01-11 00:00:00")!.rfc3339)"), "\(held)")
        let dayOne = try used("2030-01-10")
        #expect(dayOne >= budget && dayOne <= budget + Self.piece, "day 1 used \(dayOne)")
        let servedOnDayOne = binBytes()

        // The rest of day 1, a restart each time: nothing more of the files moves.
        for _ in 0..<3 {
            clock.advance(by: 6 * 3600)
            let (again, _) = try run()
            #expect(again.exitCode == .incomplete && again.counts.heldUntil == Timestamp(localTime: "2030-01-11 00:00:00"))
        }
        #expect(try used("2030-01-10") == dayOne, "the day's books are closed")
        #expect(binBytes() == servedOnDayOne, "no file byte was asked for while the budget was spent")

        // Each next day moves its budget; the partial files resume where they stopped.
        var total = dayOne
        var day = 10
        var last = first
        while last.exitCode != .inSync && day < 20 {
            day += 1
            let name = "2030-01-\(day)"
            clock.advance(by: (Timestamp(localTime: name + " 00:00:30")!.timeInterval - clock.now().timeInterval))
            (last, _) = try run()
            let spent = try used(name)
            #expect(spent <= budget + Self.piece, "\(name) used \(spent)")
            total += spent
        }
        #expect(last.exitCode == .inSync, "\(String(describing: last.message))")
        #expect(day == 15, "21 MiB at 4 MiB a day takes 6 days: took \(day - 9)")
        for (i, data) in contents.enumerated() {
            #expect((try? Data(contentsOf: URL(fileURLWithPath: box.localPath("big\(i).bin")))) == data)
        }
        #expect(total >= 21 << 20 && total <= (21 << 20) + 6 * Self.piece, "every byte counted once, none fetched again from the start: \(total)")
        #expect(server.requests().contains { $0.path.hasSuffix(".bin") && $0.status == 206 }, "a held file resumed with a range")
    }

    /// With the budget spent, a counted session is held and an exempt one goes on; what the exempt
    /// one moves counts too. Status (text and JSON) and the metrics say how much is used and when
    /// the budget is whole again. The process runs in a time zone where it is noon, far from a
    /// turn of the day.
    @Test func anExemptSessionGoesOnAndStatusAndMetricsTellTheBudget() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("budget-exempt", published: server.root)
        for name in ["counted", "critical"] {
            box.publish("\(name)/a.bin", randomData(3 << 20, seed: name == "counted" ? 7 : 8))
            _ = ferry(["manifest", "build", server.root + "/\(name)"])
        }
        try """
            [agent]
            state = \(box.state)
            budget = 1M/day
            [session counted]
            remote = \(server.url)counted/
            local = \(box.directory)/counted
            [session critical]
            remote = \(server.url)critical/
            local = \(box.directory)/critical
            budget = exempt
            """.writeReplacing(box.config)
        let noon = ["TZ": Self.zone(localSecondOfDay: 12 * 3600, at: Int(Date().timeIntervalSince1970))]
        let run = box.sync(environment: noon)
        #expect(run.exitCode == 3, "\(run.output)")
        #expect(run.output.contains("1 file waits for the byte budget (1M/day"), "\(run.output)")
        #expect(FileManager.default.fileExists(atPath: box.directory + "/critical/a.bin"), "the exempt session is not held")
        #expect(!FileManager.default.fileExists(atPath: box.directory + "/counted/a.bin"), "the counted one is")

        let json = try #require(try JSONSerialization.jsonObject(with: Data(ferry(["status", "--config", box.config, "--json"], environment: noon).stdout.utf8)) as? [String: Any])
        let standing = try #require(json["budget"] as? [String: Any], "\(json)")
        let used = try #require(standing["used"] as? Int)
        #expect(standing["spent"] as? Bool == true && standing["period"] as? String == "day" && standing["bytes"] as? Int == 1 << 20)
        #expect(used >= 3 << 20, "the exempt session's bytes count: \(used)")
        let sessions = try #require(json["sessions"] as? [[String: Any]])
        let counted = try #require(sessions.first { $0["name"] as? String == "counted" })
        #expect((counted["held_for"] as? String)?.contains("byte budget") == true, "\(counted)")
        let text = ferry(["status", "--config", box.config], environment: noon).stdout
        #expect(text.contains("budget: 1M/day, ") && text.contains("used this day; spent: counted sessions wait until"), "\(text)")

        let metrics = Metrics(path: nil)
        metrics.budget = BudgetMeter(budget: ByteBudget(bytes: 1 << 20, period: .day), state: box.state, clock: SystemClock())
        let page = metrics.render([])
        #expect(page.contains("ferry_budget_bytes{period=\"day\"} 1048576"), "\(page)")
        #expect(page.contains("ferry_budget_used_bytes{period=\"day\"} "), "\(page)")
        #expect(page.contains("ferry_budget_period_end_timestamp_seconds{period=\"day\"} "), "\(page)")
        // A scrape with nothing charged since reads the state; it commits nothing (SQLite's
        // data_version, seen from another connection, moves only when another commits).
        let watcher = try SQLiteDatabase(path: box.state + "/ferry.db")
        func version() -> Int64 {
            guard let s = try? watcher.prepare("PRAGMA data_version"), (try? s.step()) == true else { return -1 }
            return s.int(0)
        }
        let before = version()
        for _ in 0..<5 { #expect(metrics.render([]).contains("ferry_budget_used_bytes{period=\"day\"} \(used)"), "the same use") }
        #expect(before >= 0 && version() == before, "scrapes committed to the state: \(before) -> \(version())")
    }

    /// The agent, its budget spent, waits for the next period and not for its hourly poll: run in
    /// a time zone where the day ends 20 s after it starts, it moves the day's 1 MiB of a 1.5 MiB
    /// file, says it is held by the budget, and finishes the file once the next day begins.
    @Test func theAgentResumesWhenTheNextPeriodBegins() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("budget-agent", published: server.root)
        let data = randomData(3 << 19, seed: 12)
        box.publish("half.bin", data)
        box.buildManifest()
        box.configure(remote: server.url, session: ["poll = 1h"], agent: ["budget = 1M/day"])
        let now = Int(Date().timeIntervalSince1970)
        let midnight = Date(timeIntervalSince1970: Double(now + 20))
        let zone = ["TZ": Self.zone(localSecondOfDay: 86_400 - 20, at: now)]
        let agent = try AgentTests.RunningAgent(box, environment: zone)
        let status = { ferry(["status", "--config", box.config], environment: zone).stdout }
        #expect(eventually(15) { status().contains("held: 1 file waits for the byte budget (1M/day") }, "\(status())\n\(agent.output)")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("half.bin")))
        #expect(eventually(40) { (try? Data(contentsOf: URL(fileURLWithPath: box.localPath("half.bin")))) == data }, "\(status())\n\(agent.output)")
        #expect(Date() >= midnight, "the file was finished only once the next day began")
        #expect(server.requests().contains { $0.path == "/half.bin" && $0.status == 206 }, "the held file resumed with a range")
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 10) == 0)
    }

    /// A POSIX `TZ` in which the local time at Unix time `at` is `localSecondOfDay`.
    static func zone(localSecondOfDay: Int, at: Int) -> String {
        let utc = at % 86_400
        // Local time is UTC minus the offset that TZ names.
        var offset = (utc - localSecondOfDay) % 86_400
        if offset < 0 { offset += 86_400 }
        if offset >= 43_200 { offset -= 86_400 }
        let sign = offset < 0 ? "-" : "+"
        let a = abs(offset)
        return String(format: "FER%@%02d:%02d:%02d", sign, a / 3600, a / 60 % 60, a % 60)
    }
}

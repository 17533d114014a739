import Foundation
import Testing
import FerryCore

/// The fleet view told three ways at once: 20 real agents go through a 10% → 50% → 100% rollout
/// with a health gate that fails on five of them, and at each step `ferry fleet --json` (their
/// signed reports), the series a real Prometheus scraped from them, and each agent's own `status`
/// say the same thing. Mid-rollout every query of the shipped Grafana dashboard returns data.
@Suite(.serialized)
struct FleetRolloutTests {
    static let machines = 20
    static let failing: Set<Int> = [3, 7, 11, 15, 19]

    /// The agents, their configs and metrics ports, and the places they share.
    struct Fleet {
        let box: Sandbox
        let root: String
        /// Each agent's metrics port, once `startAgent` found it one.
        var ports: [UInt16] = Array(repeating: 0, count: machines)
        let reports: String
        let ledger: String
        let mirror: String
        /// The mirror's copy, served over HTTP (so its sources time their first bytes).
        let mirrorURL: String

        func config(_ i: Int) -> String { root + "/m\(i)/ferry.conf" }

        /// Starts machine `i`'s agent with its config written for a fresh metrics port (another,
        /// when another program took that one); returns once the agent listens there.
        mutating func startAgent(_ i: Int) throws -> Child {
            let out = root + "/m\(i)/out"
            let started = try startListening("agent \(i)", ports: 1, timeout: 60) { given in
                ports[i] = given[0]
                try write(i)
                return (try Child(Harness.ferryBinary, ["agent", "--config", config(i)], stdout: out, stderr: out), [out])
            }
            return started.child
        }

        /// One agent's config: a generations pull with a health gate, a mirror, a byte budget,
        /// metrics served on its port and reports to the shared location.
        func write(_ i: Int) throws {
            try FileManager.default.createDirectory(atPath: root + "/m\(i)", withIntermediateDirectories: true)
            try """
                [agent]
                state = \(root)/m\(i)/state
                machine-id = machine-\(i)
                metrics-listen = 127.0.0.1:\(ports[i])
                budget = 10G/month
                [session fleet]
                remote = file://\(box.published)
                local = \(root)/m\(i)/mirror
                mirrors = \(mirrorURL)
                report = file://\(reports)/
                poll = 1h
                layout = generations
                on-switch-check = /usr/bin/test ! -e \(root)/fail-\(i)

                """.writeReplacing(config(i))
        }

        /// `version` published to `share`% of machines (no share: to all), and copied to the mirror.
        /// From version 2 on the content stays: the tree layout keeps only the newest content, so
        /// a machine left outside a rollout keeps what it has.
        func publish(_ version: Int, share: Int?) {
            RolloutTests.publish(box, ["app.conf": "release \(min(version, 2))\n"])
            let rollout = share.map { ["--rollout", "\($0)%"] } ?? []
            #expect(ferry(["manifest", "build", box.published, "--version", "\(version)", "--expires", "7d"] + rollout).exitCode == 0)
            #expect(runProcess("cp", ["-a", box.published + "/.", mirror]).exitCode == 0)
        }

        /// Every agent runs now (`sync now` hands the run to it); what each said.
        func sync() -> [FerryRun] { (0..<machines).map { ferry(["sync", "now", "--config", config($0), "--quiet"]) } }

        /// Each machine's session as its `status --json` tells it.
        func statuses() throws -> [[String: Any]] {
            try (0..<machines).map { i in
                let json = (try? JSONSerialization.jsonObject(with: Data(ferry(["status", "--config", config(i), "--json"]).stdout.utf8))) as? [String: Any]
                return try #require((json?["sessions"] as? [[String: Any]])?.first, "machine-\(i) has a status")
            }
        }
    }

    @Test func twentyAgentsThroughARolloutAreToldAlikeByReportsMetricsAndStatus() throws {
        let box = Sandbox("fleet-rollout")
        let root = Harness.temporaryDirectory("fleet-rollout-agents")
        defer { Harness.remove(root) }
        let mirror = box.directory + "/mirror"
        try FileManager.default.createDirectory(atPath: mirror, withIntermediateDirectories: true)
        let server = try PythonServer(directory: mirror)
        var fleet = Fleet(box: box, root: root, reports: box.directory + "/reports",
                          ledger: box.directory + "/ledger", mirror: mirror, mirrorURL: server.url)
        fleet.publish(1, share: nil)
        var agents: [Child] = []
        defer {
            for agent in agents { agent.signal(SIGTERM) }
            for agent in agents { agent.stop() }
        }
        for i in 0..<Self.machines { agents.append(try fleet.startAgent(i)) }
        let prometheus = try PrometheusServer(directory: box.directory + "/prometheus", targets: fleet.ports,
                                              rules: [PrometheusRulesTests.directory + "/ferry.rules.yml"])
        defer { prometheus.stop() }

        let first = fleet.sync()
        #expect(first.allSatisfy { $0.exitCode == 0 }, "\(first.map(\.output))")
        try Self.agree(fleet, prometheus, version: 1)
        for i in Self.failing { try "".writeReplacing(root + "/fail-\(i)") }
        for (version, share) in [(2, 10), (3, 50), (4, 100)] {
            fleet.publish(version, share: share)
            let runs = fleet.sync()
            #expect(runs.allSatisfy { $0.exitCode == 0 || $0.exitCode == 1 }, "\(share)%: \(runs.filter { $0.exitCode > 1 }.map(\.output))")
            try Self.agree(fleet, prometheus, version: version)
            // Mid-rollout, with machines outside the share and rolled back: every panel has data.
            if share == 50 { Self.everyDashboardQueryAnswers(prometheus) }
        }
        let last = FleetReportTests.fleet(["file://" + fleet.reports, "--ledger", fleet.ledger])
        #expect(FleetReportTests.served(last) == [4: 15, 1: 5], "at 100% the machines whose gate passes serve release 4: \(last)")
        // What a scrape costs an agent: one page for one session with a mirror and a budget.
        let page = MetricsEndpointTests.get(fleet.ports[0], "/metrics")
        #expect(page?.status == 200 && page?.body.contains("ferry_served_version{session=\"fleet\"} 4") == true, "\(String(describing: page))")
        print("a scrape of one agent: \(page?.body.utf8.count ?? 0) bytes, \(page?.body.split(separator: "\n").filter { !$0.hasPrefix("#") }.count ?? 0) series")
    }

    /// What `ferry fleet --json` and Prometheus say of each machine is what its `status --json`
    /// says, and the fleet's counts of `version` are what the statuses add up to.
    static func agree(_ fleet: Fleet, _ prometheus: PrometheusServer, version: Int) throws {
        let view = FleetReportTests.fleet(["file://" + fleet.reports, "--ledger", fleet.ledger])
        #expect(view["taken"] as? Int == machines && (view["refused"] as? [Any])?.isEmpty == true, "\(view)")
        var byMachine: [String: [String: Any]] = [:]
        for m in view["machines"] as? [[String: Any]] ?? [] { byMachine[m["machine"] as? String ?? ""] = m }
        let truth = try fleet.statuses()
        var eligible = 0, took = 0, passed = 0, rolledBack = 0
        for (i, session) in truth.enumerated() {
            let told = try #require(byMachine["machine-\(i)"], "machine-\(i) is in the view")
            let served = session["served_version"] as? Int, rejected = session["rejected_version"] as? Int
            let inside = (session["rollout"] as? [String: Any])?["inside"] as? Bool
            #expect(told["served"] as? Int == served && told["rejected"] as? Int == rejected && told["inside"] as? Bool == inside
                    && told["seen"] as? Int == session["manifest_version"] as? Int, "v\(version) machine-\(i): fleet \(told), status \(session)")
            if inside ?? true { eligible += 1 }
            if (served ?? 0) >= version { passed += 1 }
            if rejected == version { rolledBack += 1 }
            if (served ?? 0) >= version || rejected == version { took += 1 }
        }
        let release = (view["releases"] as? [[String: Any]])?.first { $0["version"] as? Int == version } ?? [:]
        #expect(release["eligible"] as? Int == eligible && release["took"] as? Int == took && release["passed"] as? Int == passed
                && release["rolled_back"] as? Int == rolledBack, "v\(version): \(release), statuses: \(eligible) \(took) \(passed) \(rolledBack)")
        try scraped(fleet, prometheus, truth: truth, served: FleetReportTests.served(view), version: version)
        print("fleet rollout v\(version): \(eligible) eligible, \(took) took it, \(passed) passed, \(rolledBack) rolled back")
    }

    /// Prometheus, polled until its newest scrape and rule evaluation hold the statuses' values
    /// (or a deadline): each machine's served, seen and rejected version and rollout standing,
    /// and `ferry:machines_serving:count` equal to the fleet's count of machines by version.
    static func scraped(_ fleet: Fleet, _ prometheus: PrometheusServer, truth: [[String: Any]], served: [Int: Int], version: Int) throws {
        func expected(_ key: (([String: Any]) -> Int?)) -> [UInt16: Double] {
            var out: [UInt16: Double] = [:]
            for (i, s) in truth.enumerated() { if let v = key(s) { out[fleet.ports[i]] = Double(v) } }
            return out
        }
        let want: [(String, [UInt16: Double])] = [
            ("ferry_served_version", expected { $0["served_version"] as? Int }),
            ("ferry_seen_version", expected { $0["manifest_version"] as? Int }),
            ("ferry_rejected_version", expected { $0["rejected_version"] as? Int }),
            ("ferry_rollout_inside", expected { (($0["rollout"] as? [String: Any])?["inside"] as? Bool).map { $0 ? 1 : 0 } }),
        ]
        let wantCounts = served.reduce(into: [String: Double]()) { $0[String($1.key)] = Double($1.value) }
        var differs: [String] = []
        let deadline = Date().addingTimeInterval(60)
        repeat {
            differs = want.compactMap { series, values in
                let got = prometheus.byTarget(series)
                return got == values ? nil : "\(series): scraped \(got.map { "\($0.count) machines" } ?? "no answer"), status says \(values.count)"
            }
            let counts = prometheus.query("ferry:machines_serving:count")?.reduce(into: [String: Double]()) { $0[$1.labels["version"] ?? "?"] = $1.value }
            if counts != wantCounts { differs.append("ferry:machines_serving:count \(counts ?? [:]) != fleet \(wantCounts)") }
            if differs.isEmpty { return }
            usleep(200_000)
        } while Date() < deadline
        Issue.record("v\(version): Prometheus disagrees with status: \(differs)\n\(prometheus.output.suffix(2000))")
    }

    /// Every target of every panel of `ferry-dashboard.json`, its variables set as Grafana sets
    /// them (all sessions, a 1m rate interval, a 1h range), answers with at least one series.
    static func everyDashboardQueryAnswers(_ prometheus: PrometheusServer) {
        let path = PrometheusRulesTests.directory + "/ferry-dashboard.json"
        guard let dashboard = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path)))) as? [String: Any] else {
            Issue.record("\(path) is not JSON")
            return
        }
        let panels = (dashboard["panels"] as? [[String: Any]] ?? []).filter { $0["type"] as? String != "row" }
        #expect(panels.count >= 20, "\(panels.count) panels")
        var empty: [String] = []
        var asked = 0
        for panel in panels {
            let targets = panel["targets"] as? [[String: Any]] ?? []
            #expect(!targets.isEmpty, "panel \(panel["title"] ?? "") has a query")
            for target in targets {
                let expression = (target["expr"] as? String ?? "").replacingOccurrences(of: "$session", with: ".*")
                    .replacingOccurrences(of: "$__rate_interval", with: "1m").replacingOccurrences(of: "$__range", with: "1h")
                asked += 1
                let answer = prometheus.query(expression)
                if answer?.isEmpty != false { empty.append("\(panel["title"] ?? ""): \(expression) -> \(answer == nil ? "refused" : "no data")") }
            }
        }
        #expect(empty.isEmpty, "of \(asked) queries: \(empty)")
        print("dashboard: \(panels.count) panels, \(asked) queries, each answered with data")
    }
}

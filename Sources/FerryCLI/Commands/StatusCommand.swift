import Glibc
import FerryCore
import FerryRuntime

/// `ferry status`: what each session's last run did and where its tasks stand, read from the state
/// database (works whether or not another ferry is running).
struct StatusCommand: Command {
    static let words = ["status"]
    static let summary = "Show each session's state and its transfer tasks."
    static let usage = "status [--config F] [--session ID] [--json]"
    static let details = """
        Lists every session with its last run and the count of tasks per state, then the tasks that are
        not done (queued, running, failed...) with bytes, attempts, what each waits for (connectivity, a
        time, ferry resume, or a discretionary session's conditions) and the last error. --json prints
        one object with every session and all its tasks.
        """
    static let options = [CommonOptions.config, CommonOptions.session, CommonOptions.json, CommonOptions.help]

    let configPath: String?
    let session: String?
    let json: Bool

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
        session = arguments.value("--session")
        json = arguments.has("--json")
    }

    func run() throws(FerryError) -> ExitCode {
        let config = try CommandConfig.load(configPath, allowingNoSession: session == nil)
        if config.sessions.isEmpty {
            // The package's config before its sessions are written: an agent started on it waits.
            let agent = AgentLink(state: config.agent.state) != nil
            let text = "\(config.path) names no session" + (agent ? "; the agent runs and waits for a reload" : "; no agent runs")
            if json { Console.json("{\"sessions\":[],\"agent_running\":\(agent),\"message\":\(JSONText.quote(text))}") } else { Console.out(text) }
            return .inSync
        }
        let sessions = try selectSessions(config, names: session.map { [$0] } ?? [])
        let store = try StateStore(directory: config.agent.state)
        var rows: [(SessionConfig, SessionRecord?, [TransferTask])] = []
        for s in sessions {
            rows.append((s, try store.session(s.name), try store.tasks(session: s.name)))
        }
        if json { printJSON(rows) } else { printTable(rows) }
        return .inSync
    }

    /// Where a session stands, as fields: `state` is one word (running, idle, held, waiting,
    /// failed, busy, interrupted, suspended, delayed, pending); `detail` says it in full where
    /// there is more to say.
    struct Standing {
        var state: String
        /// The state in full, with why ("failed: cannot fetch the manifest ...").
        var detail: String?
        /// The process running the session now, and when it stops by itself.
        var runningPID: Int32?
        var secondsLeft: Int64?
        /// The agent scheduling the session, and when it polls next.
        var agentPID: Int32?
        var nextPoll: Timestamp?
    }

    private func standing(_ record: SessionRecord?, _ tasks: [TransferTask]) -> Standing {
        func alive(_ pid: Int32?) -> Bool { pid.map { kill($0, 0) == 0 || errno == EPERM } ?? false }
        if alive(record?.runningPID) {
            let left = record?.deadline.map { Int64(max(0, $0.timeInterval - Timestamp.now().timeInterval).rounded()) }
            return Standing(state: "running", runningPID: record?.runningPID, secondsLeft: left,
                            agentPID: alive(record?.agentPID) ? record?.agentPID : nil)
        }
        if alive(record?.agentPID), let said = record?.agentState {
            // Between the agent's polls: what it said of the session ("failed: why"): its first
            // word, and all of it when there is more than the word.
            let word = String(said.prefix { $0 != ":" && $0 != " " })
            return Standing(state: word, detail: said == word ? nil : said, agentPID: record?.agentPID, nextPoll: record?.nextPoll)
        }
        if let heldFor = record?.heldFor, tasks.contains(where: { $0.state == .queued || $0.state == .running }) {
            return Standing(state: "held", detail: "held: waits for \(heldFor)")
        }
        if tasks.contains(where: { $0.state == .running }) { return Standing(state: "interrupted", detail: "interrupted: resumes next run") }
        if tasks.contains(where: { $0.state == .waiting }) { return Standing(state: "waiting", detail: "waiting for connectivity") }
        if tasks.contains(where: { $0.state == .suspended }) { return Standing(state: "suspended", detail: "suspended tasks: ferry resume continues them") }
        if let next = tasks.compactMap({ $0.state == .delayed ? $0.notBefore : nil }).min() {
            return Standing(state: "delayed", detail: "delayed until \(Timestamp(seconds: next.seconds).rfc3339)")
        }
        if tasks.contains(where: { $0.state == .queued }) { return Standing(state: "pending") }
        return Standing(state: "idle")
    }

    /// The STATE column: the word, and the process's pid and time left, or the agent's and its
    /// next poll; never the why (that is in `status --session` and `--json`).
    private func shortState(_ s: Standing) -> String {
        if let pid = s.runningPID {
            return "running (pid \(pid)" + (s.secondsLeft.map { ", \(Units.formatDuration(Double($0))) left" } ?? "") + ")"
        }
        if let pid = s.agentPID {
            let next = s.nextPoll.map { ", next poll in " + Units.formatDuration(max(0, $0.timeInterval - Timestamp.now().timeInterval).rounded(.up)) } ?? ""
            return "\(s.state) (agent pid \(pid)\(next))"
        }
        return s.state
    }

    private func printTable(_ rows: [(SessionConfig, SessionRecord?, [TransferTask])]) {
        var table: [[String]] = [["SESSION", "DIRECTION", "STATE", "LAST RUN", "RESULT", "MANIFEST", "TASKS"]]
        for (s, r, tasks) in rows {
            var counts: [String] = []
            for state in TaskState.allCases {
                let n = tasks.filter { $0.state == state }.count
                if n > 0 { counts.append("\(n) \(state.rawValue)") }
            }
            let result = r?.lastExitCode.map { "exit \($0)" } ?? "never run"
            let lastRun = (r?.lastRunFinished ?? r?.lastRunStarted).map { Timestamp(seconds: $0.seconds).rfc3339 } ?? "-"
            table.append([Printable.name(s.name), s.direction.rawValue, shortState(standing(r, tasks)), lastRun, result,
                          r?.manifestVersion.map { "v\($0)" } ?? "-", counts.isEmpty ? "none" : counts.joined(separator: ", ")])
        }
        printColumns(table)
        // Why, below the table: in full for one session (--session), else the first line of each.
        var more = false
        for (s, r, _) in rows {
            if let signer = r?.manifestSigner {
                let expires = r?.manifestExpires.map { ", expires \($0.rfc3339)" } ?? ""
                Console.out("\(s.name): manifest \(r?.manifestVersion.map { "v\($0) " } ?? "")signed by \(signer)\(expires)")
            }
        }
        for (s, _, _) in rows where s.direction == .pull && s.layout == .generations {
            let g = GenerationStatus(local: s.local)
            var text = "\(s.name): " + (g.current.map { "generation \($0) is current" } ?? "no generation is current yet")
            if !g.kept.isEmpty { text += "; kept: " + g.kept.joined(separator: ", ") }
            if let b = g.building { text += "; \(b) is being built (the next run goes on with it)" }
            Console.out(text)
        }
        for (s, r, tasks) in rows {
            let why = [standing(r, tasks).detail, r?.lastExitCode != 0 ? r?.lastMessage.map { "last run: \($0)" } : nil].compactMap { $0 }
            for line in why {
                if session != nil || line.count <= 120 { Console.out("\(s.name): \(line)") } else {
                    Console.out("\(s.name): \(line.prefix(117))...")
                    more = true
                }
            }
        }
        if more { Console.out("(ferry status --session NAME says all of it; --json too)") }
        let open = rows.flatMap { row in row.2.filter { $0.state != .done }.map { (row.1, $0) } }
        guard !open.isEmpty else { return }
        Console.out("")
        var tasks: [[String]] = [["SESSION", "TASK", "STATE", "BYTES", "TRIES", "PATH", "WAITS FOR", "LAST ERROR"]]
        for (r, t) in open {
            let bytes = Units.formatBytes(t.bytesDone) + (t.size.map { " / " + Units.formatBytes($0) } ?? "")
            tasks.append([t.session, String(t.id), t.state.rawValue, bytes, String(t.attempts), Printable.name(t.path.string),
                          waitsFor(t, r) ?? "-", t.lastError ?? ""])
        }
        printColumns(tasks)
    }

    /// What an open task waits for: connectivity, a time, ferry resume, or its session's
    /// discretionary conditions; nil for a task that waits for nothing (running, or failed).
    private func waitsFor(_ t: TransferTask, _ record: SessionRecord?) -> String? {
        switch t.state {
        case .waiting: return "connectivity"
        case .delayed: return t.notBefore.map { "the time \($0.rfc3339)" }
        case .suspended: return "ferry resume"
        case .queued, .running: return record?.heldFor
        case .failed, .done: return nil
        }
    }

    private func printColumns(_ table: [[String]]) {
        var widths = [Int](repeating: 0, count: table[0].count)
        for row in table { for (i, c) in row.enumerated() { widths[i] = max(widths[i], c.count) } }
        for row in table {
            var line = ""
            for (i, c) in row.enumerated() { line += i == row.count - 1 ? c : c.padding(to: widths[i]) + "  " }
            Console.out(line)
        }
    }

    private func printJSON(_ rows: [(SessionConfig, SessionRecord?, [TransferTask])]) {
        var sessions: [String] = []
        for (s, r, tasks) in rows {
            var f: [String] = []
            f.append("\"name\":\(JSONText.quote(s.name))")
            f.append("\"direction\":\"\(s.direction.rawValue)\"")
            f.append("\"remote\":\(JSONText.quote(s.remote.url))")
            f.append("\"local\":\(JSONText.quote(s.local))")
            if s.direction == .pull && s.layout == .generations {
                let g = GenerationStatus(local: s.local)
                f.append("\"generation\":" + (g.current.map(JSONText.quote) ?? "null"))
                f.append("\"generations_kept\":[" + g.kept.map(JSONText.quote).joined(separator: ",") + "]")
                f.append("\"generation_building\":" + (g.building.map(JSONText.quote) ?? "null"))
            }
            let st = standing(r, tasks)
            f.append("\"state\":\(JSONText.quote(st.state))")
            f.append("\"state_detail\":" + (st.detail.map(JSONText.quote) ?? "null"))
            f.append("\"running_pid\":" + (st.runningPID.map { String($0) } ?? "null"))
            f.append("\"seconds_left\":" + (st.secondsLeft.map { String($0) } ?? "null"))
            f.append("\"deadline\":" + (r?.deadline.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"manifest_version\":" + (r?.manifestVersion.map(String.init) ?? "null"))
            f.append("\"manifest_signer\":" + (r?.manifestSigner.map { JSONText.quote($0.description) } ?? "null"))
            f.append("\"manifest_expires\":" + (r?.manifestExpires.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"last_run_started\":" + (r?.lastRunStarted.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"last_run_finished\":" + (r?.lastRunFinished.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"last_exit_code\":" + (r?.lastExitCode.map { String($0) } ?? "null"))
            f.append("\"last_message\":" + (r?.lastMessage.map(JSONText.quote) ?? "null"))
            let agentAlive = r?.agentPID.map { kill($0, 0) == 0 || errno == EPERM } ?? false
            f.append("\"agent_pid\":" + (agentAlive ? r!.agentPID.map { String($0) }! : "null"))
            f.append("\"next_poll\":" + (agentAlive ? r?.nextPoll.map { JSONText.quote($0.rfc3339) } ?? "null" : "null"))
            f.append("\"held_for\":" + (r?.heldFor.map(JSONText.quote) ?? "null"))
            f.append("\"last_poll_ok\":" + (r?.lastPollOK.map { JSONText.quote($0.rfc3339) } ?? "null"))
            var counts: [String] = []
            for state in TaskState.allCases { counts.append("\"\(state.rawValue)\":\(tasks.filter { $0.state == state }.count)") }
            f.append("\"task_counts\":{" + counts.joined(separator: ",") + "}")
            let list = tasks.map { t -> String in
                "{\"id\":\(t.id),\"path\":\(JSONText.quote(t.path.string)),\"direction\":\"\(t.direction.rawValue)\",\"state\":\"\(t.state.rawValue)\","
                    + "\"size\":\(t.size.map(String.init) ?? "null"),\"bytes_done\":\(t.bytesDone),\"sha256\":\"\(t.sha256)\","
                    + "\"attempts\":\(t.attempts),\"last_error\":\(t.lastError.map(JSONText.quote) ?? "null"),"
                    + "\"created_at\":\"\(t.createdAt.rfc3339)\",\"updated_at\":\"\(t.updatedAt.rfc3339)\","
                    + "\"not_before\":\(t.notBefore.map { JSONText.quote($0.rfc3339) } ?? "null"),"
                    + "\"waits_for\":\(waitsFor(t, r).map(JSONText.quote) ?? "null")}"
            }
            f.append("\"tasks\":[" + list.joined(separator: ",") + "]")
            sessions.append("{" + f.joined(separator: ",") + "}")
        }
        Console.json("{\"sessions\":[" + sessions.joined(separator: ",") + "]}")
    }
}

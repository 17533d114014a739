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
        let config = try ConfigLoader.load(path: ConfigLoader.resolvePath(configPath))
        let sessions = try selectSessions(config, names: session.map { [$0] } ?? [])
        let store = try StateStore(directory: config.agent.state)
        var rows: [(SessionConfig, SessionRecord?, [TransferTask])] = []
        for s in sessions {
            rows.append((s, try store.session(s.name), try store.tasks(session: s.name)))
        }
        if json { printJSON(rows) } else { printTable(rows) }
        return .inSync
    }

    private func runState(_ record: SessionRecord?, _ tasks: [TransferTask]) -> String {
        if let pid = record?.runningPID, kill(pid, 0) == 0 || errno == EPERM {
            if let deadline = record?.deadline {
                let left = max(0, deadline.timeInterval - Timestamp.now().timeInterval)
                return "running (pid \(pid), \(Units.formatDuration(left)) left)"
            }
            return "running (pid \(pid))"
        }
        if let pid = record?.agentPID, let state = record?.agentState, kill(pid, 0) == 0 || errno == EPERM {
            // Between the agent's polls: what it said of the session, and when it polls next.
            let next = record?.nextPoll.map { ", next poll in " + Units.formatDuration(max(0, $0.timeInterval - Timestamp.now().timeInterval).rounded(.up)) } ?? ""
            return "\(state) (agent pid \(pid)\(next))"
        }
        if let heldFor = record?.heldFor, tasks.contains(where: { $0.state == .queued || $0.state == .running }) {
            return "held: waits for \(heldFor)"
        }
        if tasks.contains(where: { $0.state == .running }) { return "interrupted (resumes next run)" }
        if tasks.contains(where: { $0.state == .waiting }) { return "waiting for connectivity" }
        if tasks.contains(where: { $0.state == .suspended }) { return "suspended tasks (ferry resume)" }
        if let next = tasks.compactMap({ $0.state == .delayed ? $0.notBefore : nil }).min() { return "delayed until \(next.rfc3339)" }
        if tasks.contains(where: { $0.state == .queued }) { return "pending" }
        return "idle"
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
            table.append([s.name, s.direction.rawValue, runState(r, tasks), r?.lastRunFinished?.rfc3339 ?? r?.lastRunStarted?.rfc3339 ?? "-", result,
                          r?.manifestVersion.map { "v\($0)" } ?? "-", counts.isEmpty ? "none" : counts.joined(separator: ", ")])
        }
        printColumns(table)
        for (s, r, _) in rows {
            if let message = r?.lastMessage, r?.lastExitCode != 0 { Console.out("\(s.name): last run: \(message)") }
        }
        let open = rows.flatMap { row in row.2.filter { $0.state != .done }.map { (row.1, $0) } }
        guard !open.isEmpty else { return }
        Console.out("")
        var tasks: [[String]] = [["SESSION", "TASK", "STATE", "BYTES", "ATTEMPTS", "PATH", "WAITS FOR", "LAST ERROR"]]
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
            f.append("\"state\":\(JSONText.quote(runState(r, tasks)))")
            f.append("\"deadline\":" + (r?.deadline.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"manifest_version\":" + (r?.manifestVersion.map(String.init) ?? "null"))
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

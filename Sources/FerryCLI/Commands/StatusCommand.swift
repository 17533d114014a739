import Glibc
import FerryCore
import FerryRuntime

/// `ferry status`: where each session stands, read from the state database (works whether or not
/// another ferry is running). A summary per session that does not grow with its tree (its state,
/// its tasks counted by state, a few of the files running now, the last error), in lines that
/// fit `Columns.standardOutput`; each task only when asked (`-v`, `--files`, a PATH). `--json` is
/// bounded the same way: the running and failed tasks capped, the others counted.
struct StatusCommand: Command {
    static let words = ["status"]
    static let summary = "Show where each session stands: state, task counts, what runs now, the last error."
    static let usage = "status [--config F] [--session ID] [PATH] [--files] [--verbose|-v] [--json]"
    static let details = """
        A summary per session, as long for a million files as for one: its state (with an agent
        running, the agent's word: idle, running, held, waiting, failed...), the agent's next poll or
        the process running the session and its time left, the last run, the manifest, the tasks
        counted by state (queued, running, waiting, delayed, suspended, failed, done), up to 3 of the
        files transferring now with their progress and how many more, and the last error. Times are
        the local time zone's, to the second.

        Every line fits in 80 columns, or in the terminal's width when stdout is a narrower
        terminal: long names are shortened in the middle, and long messages cut to two lines (-v
        says them whole, as --json does).

        Each task on a line of its own (id, state, bytes, path, and what it waits for or its last
        error) only when asked: -v lists the tasks that are not done, --files every task, and PATH
        (relative to the session's local directory, or absolute under it) the tasks under it, done
        ones included. The ids are what ferry cancel and ferry resume take.

        --json prints one object {"sessions":[...]}, one member per session, bounded the same way:
          name, direction, remote, local, state, state_detail, running_pid, seconds_left, deadline,
          agent_pid, next_poll, held_for, last_run_started, last_run_finished, last_exit_code,
          last_message, last_poll_ok, manifest_version (the newest the remote offered),
          served_version and served_since (the release a pull serves: whole in place and past
          on-switch-check; null before its first complete run; a push's served_version is the
          version it last published), manifest_signers (the keys whose
          signatures it was taken on), manifest_signer (the first of them), manifest_expires, rejected_version
          and rejected_reason (what on-switch-check rolled back), rollbacks, rollout (the last
          phased rollout seen: {"version","percent","inside","taking"}), key_set (with
          trusted-keys: the set trusted now, {"version":N,"threshold":N,"keys":[...]}), and for
          generations: generation, generations_kept, generation_building;
          task_counts: {"queued":N,"running":N,"done":N,"failed":N,"waiting":N,"suspended":N,"delayed":N};
          running_tasks: up to 10 running tasks; running_tasks_omitted: how many more;
          failed_tasks: up to 10 failed tasks, the latest first; failed_tasks_omitted: how many more;
          last_error: {"task","path","error","time"} of the unfinished task that failed last, or null;
          tasks: the tasks listed (-v, --files, PATH: as above), only when one of them is given.
        A task is {"id","path","direction","state","size","bytes_done","sha256","attempts",
        "last_error","created_at","updated_at","not_before","waits_for"}. Times are RFC 3339 in UTC;
        what is not known is null.
        """
    static let options = [CommonOptions.config, CommonOptions.session,
                          OptionSpec("--files", "also list every task, done ones included, one line each"),
                          OptionSpec("--verbose", "also list each task that is not done, and say long messages whole (-v)"),
                          CommonOptions.json, CommonOptions.help]

    /// The running and failed tasks `--json` gives in full; the rest are counted.
    static let jsonTasks = 10
    /// The running files the summary shows.
    static let runningShown = 3
    /// Lines a message may take in the summary (-v: all it needs).
    static let messageLines = 2

    let configPath: String?
    let session: String?
    let json: Bool
    let files: Bool
    let verbose: Bool
    let path: String?
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...1, command: Self.name, what: "")
        configPath = arguments.value("--config")
        session = arguments.value("--session")
        json = arguments.has("--json")
        files = arguments.has("--files")
        verbose = arguments.has("--verbose")
        path = arguments.positionals.first
    }

    /// One session as the state holds it.
    struct Row {
        let session: SessionConfig
        let record: SessionRecord?
        let tasks: [TransferTask]
        /// A pull with trusted-keys: the key set it trusts now (`KeyChain`).
        var keySet: KeySet?
        /// A session with a report location: its last report, and the machine's key.
        var report: (record: ReportRecord, key: PublicKey?)?
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
        let store = try StateStore(directory: config.agent.state, clock: clock)
        var rows: [Row] = []
        for s in sessions {
            rows.append(Row(session: s, record: try store.session(s.name), tasks: try store.tasks(session: s.name),
                            keySet: s.direction == .pull && !s.trustedKeys.isEmpty ? KeyChain.trusted(by: s, state: config.agent.state) : nil,
                            report: s.report == nil ? nil : (try store.report(session: s.name), MachineKey.existing(state: config.agent.state))))
        }
        var budget: BudgetStanding?
        if let b = config.agent.budget { budget = try BudgetStanding(budget: b, at: clock.now(), store: store) }
        if json { printJSON(rows, budget: budget) } else { printHuman(rows, budget: budget, width: Columns.standardOutput()) }
        return .inSync
    }

    /// The machine's byte budget in the period now: what all sessions used of it.
    struct BudgetStanding {
        let budget: ByteBudget
        let window: ByteBudget.Window
        let used: Int64
        init(budget: ByteBudget, at time: Timestamp, store: StateStore) throws(FerryError) {
            self.budget = budget
            window = budget.window(at: time)
            used = try store.budgetUsed(period: window.key)
        }
        /// `ByteBudget.spent` decides, as it does for the runs.
        var spent: Bool { budget.spent(used: used, window: window) != nil }
        var line: String {
            "\(budget), \(Units.formatBytes(used)) used this \(budget.period.rawValue)"
                + (spent ? "; spent: counted sessions wait until \(window.end.rfc3339)" : "; the \(budget.period.rawValue) ends at \(window.end.rfc3339)")
        }
        var json: String {
            "{\"bytes\":\(budget.bytes),\"period\":\"\(budget.period.rawValue)\",\"used\":\(used),\"spent\":\(spent),"
                + "\"period_end\":\(JSONText.quote(window.end.rfc3339))}"
        }
    }

    // MARK: what is listed

    /// Whether tasks are listed one by one.
    private var listing: Bool { files || verbose || path != nil }

    /// The tasks listed for a session: under PATH when given, and the done ones only with
    /// `--files` or a PATH.
    private func listed(_ row: Row) -> [TransferTask] {
        var tasks = row.tasks
        if let path {
            guard let under = StatusCommand.relative(path, to: row.session.local) else { return [] }
            if !under.isEmpty { tasks = tasks.filter { $0.path.string == under || $0.path.string.hasPrefix(under + "/") } }
        } else if !files {
            tasks = tasks.filter { $0.state != .done }
        }
        return tasks
    }

    /// PATH relative to a session's local directory: as given (`./` and a trailing `/` dropped),
    /// or absolute under the directory; "" for all of it; nil for an absolute path elsewhere.
    static func relative(_ path: String, to local: String) -> String? {
        var p = path
        let root = local.count > 1 && local.hasSuffix("/") ? String(local.dropLast()) : local
        if p == root { return "" }
        if p.hasPrefix(root + "/") {
            p = String(p.dropFirst(root.count + 1))
        } else if p.hasPrefix("/") {
            return nil
        }
        while p.hasPrefix("./") { p.removeFirst(2) }
        while p.hasSuffix("/") { p.removeLast() }
        return p == "." ? "" : p
    }

    // MARK: where a session stands

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

    /// `time` writes a time into the detail: local for people, RFC 3339 for `--json`.
    private func standing(_ record: SessionRecord?, _ tasks: [TransferTask], time: (Timestamp) -> String) -> Standing {
        var st = standingOfTasks(record, tasks, time: time)
        if st.agentPID == nil, let pid = record?.agentPID, StatusCommand.alive(pid) {
            // An agent that has not said anything of the session yet (its first cycle runs).
            st.agentPID = pid
            st.nextPoll = record?.nextPoll
        }
        return st
    }

    static func alive(_ pid: Int32?) -> Bool { pid.map { kill($0, 0) == 0 || errno == EPERM } ?? false }

    private func standingOfTasks(_ record: SessionRecord?, _ tasks: [TransferTask], time: (Timestamp) -> String) -> Standing {
        let alive = StatusCommand.alive
        if alive(record?.runningPID) {
            let left = record?.deadline.map { Int64(max(0, $0.timeInterval - clock.now().timeInterval).rounded()) }
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
            return Standing(state: "delayed", detail: "delayed until \(time(Timestamp(seconds: next.seconds)))")
        }
        if tasks.contains(where: { $0.state == .queued }) { return Standing(state: "pending") }
        return Standing(state: "idle")
    }

    /// What an open task waits for: connectivity, a time, ferry resume, or its session's
    /// discretionary conditions; nil for a task that waits for nothing (running, or failed).
    private func waitsFor(_ t: TransferTask, _ record: SessionRecord?, time: (Timestamp) -> String) -> String? {
        switch t.state {
        case .waiting: return "connectivity"
        case .delayed: return t.notBefore.map { "the time \(time($0))" }
        case .suspended: return "ferry resume"
        case .queued, .running: return record?.heldFor
        case .failed, .done: return nil
        }
    }

    /// The order counts are said in: what is still to happen first, what is over last.
    static let countOrder: [TaskState] = [.queued, .running, .waiting, .delayed, .suspended, .failed, .done]

    private func counts(_ tasks: [TransferTask]) -> [TaskState: Int] {
        var counts: [TaskState: Int] = [:]
        for t in tasks { counts[t.state, default: 0] += 1 }
        return counts
    }

    /// The running tasks, the largest first (the ones a person waits for).
    private func running(_ tasks: [TransferTask]) -> [TransferTask] {
        tasks.filter { $0.state == .running }.sorted { ($0.size ?? $0.bytesDone, $1.path.string) > ($1.size ?? $1.bytesDone, $0.path.string) }
    }

    /// The unfinished task that failed last (for good, or an attempt it will retry).
    private func lastError(_ tasks: [TransferTask]) -> TransferTask? {
        tasks.filter { $0.state != .done && $0.lastError != nil }.max { $0.updatedAt < $1.updatedAt }
    }

    // MARK: people

    private func printHuman(_ rows: [Row], budget: BudgetStanding?, width: Int) {
        var cut = false
        var unlisted = false
        for (i, row) in rows.enumerated() {
            if i > 0 { Console.out("") }
            let summary = self.summary(row, width: width)
            cut = cut || summary.cut
            for line in summary.lines { Console.out(line) }
            if listing {
                for line in taskLines(listed(row), row.record, width: width) { Console.out(line) }
            } else {
                unlisted = unlisted || row.tasks.contains { $0.state != .done && $0.state != .running }
                    || running(row.tasks).count > StatusCommand.runningShown
            }
        }
        if let budget { Console.out(""); Console.out(Columns.cut("budget: " + budget.line, width)) }
        if unlisted { Console.out(Columns.cut("(-v lists each task not done, --files every task, PATH those under it)", width)) }
        if cut { Console.out(Columns.cut("(cut short: -v says all of it, --json too)", width)) }
    }

    /// A session's summary: its lines, and whether a message was cut short.
    private func summary(_ row: Row, width: Int) -> (lines: [String], cut: Bool) {
        let (s, r, tasks) = (row.session, row.record, row.tasks)
        let st = standing(r, tasks, time: LocalTime.text)
        var out = SummaryLines(width: width, verbose: verbose)
        let fixed = "  " + s.direction.rawValue + "  " + st.state
        out.lines.append(Columns.cut(Columns.middle(Printable.name(s.name), max(8, width - Columns.columns(fixed))) + fixed, width))
        if let detail = st.detail { out.add("state", detail, maxLines: StatusCommand.messageLines) }
        addProcesses(st, r, to: &out)
        addLastRun(st, r, to: &out)
        addContent(s, r, to: &out)
        if let text = StatusCommand.reportText(row) { out.add("report", text, maxLines: 3) }
        if let set = row.keySet, set.version > 1 {
            out.add("trust", "key set \(set.version) (taken from the publisher): \(set.threshold) of \(set.keys.map(\.description).joined(separator: ", "))", maxLines: 3)
        }
        addTasks(tasks, st, to: &out)
        return (out.lines, out.cut)
    }

    /// A summary's lines as they are added, and whether a message was cut short.
    private struct SummaryLines {
        let width: Int
        /// -v: messages are said whole.
        let verbose: Bool
        var lines: [String] = []
        var cut = false
        var valueWidth: Int { max(8, width - 13) }

        /// A labelled line: "  label      text", the text wrapped under itself.
        mutating func add(_ label: String, _ text: String, maxLines: Int = 1) {
            var wrapped = Columns.wrap(Printable.text(text), valueWidth)
            if !verbose && wrapped.count > maxLines {
                cut = true
                wrapped = Columns.wrap(Printable.text(text), valueWidth, maxLines: maxLines)
            }
            for (k, part) in wrapped.enumerated() {
                lines.append(Columns.cut((k == 0 ? "  " + label.padding(to: 10) + " " : String(repeating: " ", count: 13)) + part, width))
            }
        }
    }

    /// The agent scheduling the session (running it, or its next poll), and a process running it apart from the agent.
    private func addProcesses(_ st: Standing, _ r: SessionRecord?, to out: inout SummaryLines) {
        let now = clock.now().timeInterval
        if let pid = st.agentPID {
            if st.runningPID == pid {
                out.add("agent", "pid \(pid), running the session now")
            } else {
                let next = st.nextPoll.map { ", next poll \(LocalTime.text($0)) (in \(Units.formatDuration(max(0, $0.timeInterval - now).rounded(.up))))" } ?? ""
                out.add("agent", "pid \(pid)\(next)")
            }
        }
        if let pid = st.runningPID, pid != st.agentPID {
            var text = "pid \(pid)"
            if let deadline = r?.deadline, let left = st.secondsLeft {
                text += ", stops by \(LocalTime.text(deadline)) (\(Units.formatDuration(Double(left))) left)"
            }
            out.add("process", text)
        }
    }

    /// The last run: when it started (running now) or ended, with its exit code and, when it failed, why.
    private func addLastRun(_ st: Standing, _ r: SessionRecord?, to out: inout SummaryLines) {
        if let r, let time = st.runningPID != nil ? r.lastRunStarted : (r.lastRunFinished ?? r.lastRunStarted) {
            var text = st.runningPID != nil ? "started \(LocalTime.text(time))" : LocalTime.text(time)
            if st.runningPID == nil, let code = r.lastExitCode {
                text += ", exit \(code)"
                // What a delta saved is said beside what came over the network.
                if let reused = r.lastReused, reused > 0 {
                    text += ", \(Units.formatBytes(r.lastFetched ?? 0)) fetched, \(Units.formatBytes(reused)) reused from local data"
                }
                if code != 0, let message = r.lastMessage { text += ": \(message)" }
            }
            out.add("last run", text, maxLines: StatusCommand.messageLines)
            // With mirrors: where the last run's bytes came from, and what that saved the origin.
            if st.runningPID == nil, !r.lastSources.isEmpty {
                let total = max(1, r.lastSources.reduce(0) { $0 + $1.bytes })
                let parts = r.lastSources.map { s in
                    "\(s.source) \(Units.formatBytes(s.bytes)) (\(s.bytes * 100 / total)%)"
                        + (s.firstByte.map { ", first byte \(SourceCount.seconds($0))" } ?? "") + (s.demoted.map { ", demoted: \($0)" } ?? "")
                }
                out.add("sources", parts.joined(separator: "; "), maxLines: StatusCommand.messageLines)
            }
            // Large files the last run fetched whole: never silent.
            if st.runningPID == nil, !r.lastFallbacks.isEmpty {
                out.add("no delta", StatusCommand.fallbacks(r.lastFallbacks), maxLines: StatusCommand.messageLines)
            }
        } else {
            out.add("last run", "never run")
        }
    }

    /// "2 files fetched whole: a.img (its index is damaged), b.img (…)", a few named.
    static func fallbacks(_ records: [FallbackRecord]) -> String {
        let named = records.prefix(3).map { "\(Printable.name($0.path)) (\($0.reason.said))" }
        let more = records.count > 3 ? ", and \(records.count - 3) more" : ""
        return "\(Plural.count(records.count, "file")) fetched whole: " + named.joined(separator: ", ") + more
    }

    /// What a pull serves, against the newest version its remote offered (`manifest`), and why
    /// they differ: a rollout that leaves this machine out, a version rolled back, a run not done.
    static func serving(_ r: SessionRecord) -> String {
        guard let since = r.servedSince else { return "not known yet (the next complete run says)" }
        var text = (r.servedVersion.map { "v\($0)" } ?? "unversioned") + " since " + LocalTime.text(since)
        guard let seen = r.manifestVersion, seen != r.servedVersion else { return text }
        if let rollout = r.rollout, rollout.version == seen, !rollout.inside {
            text += " (v\(seen) goes to \(rollout.percent)% of machines, not this one)"
        } else if r.rejectedVersion == seen {
            text += " (v\(seen) was rolled back here)"
        } else {
            text += " (v\(seen) is not in place yet)"
        }
        return text
    }

    /// The manifest last applied, and a pull's generations (layout = generations).
    private func addContent(_ s: SessionConfig, _ r: SessionRecord?, to out: inout SummaryLines) {
        if let r, r.manifestVersion != nil || r.manifestSigner != nil {
            var text = r.manifestVersion.map { "v\($0)" } ?? "unversioned"
            if let files = r.manifestFiles { text += ", " + Units.formatCount(files) + " " + Plural.noun(files, "file") }
            if !r.manifestSigners.isEmpty { text += ", signed by \(r.manifestSigners.map(\.description).joined(separator: " and "))" }
            if let expires = r.manifestExpires { text += ", expires \(LocalTime.text(expires))" }
            out.add("manifest", text, maxLines: 2)
        }
        if let r, s.direction == .pull { out.add("serving", StatusCommand.serving(r), maxLines: 2) }
        if s.direction == .pull && s.layout == .generations {
            let g = GenerationStatus(local: s.local)
            var text = g.current.map { "\($0) is current" } ?? "none is current yet"
            if !g.kept.isEmpty { text += "; kept: " + g.kept.joined(separator: ", ") }
            if let b = g.building {
                // After a rollback the generation switched back from stays on disk; a newer version
                // is built there, never the one rejected.
                text += r?.rejectedVersion == nil ? "; \(b) is being built (the next run goes on with it)"
                    : "; \(b) is left from a build (a newer version is built there; version \(r!.rejectedVersion!) never is)"
            }
            out.add("generation", text, maxLines: 2)
        }
        if let r, let rollout = r.rollout, s.direction == .pull {
            out.add("rollout", "version \(rollout.version) goes to \(rollout.percent)% of machines; this one is "
                    + (rollout.inside ? "in it" : "not in it and stays on version \(rollout.taking)"), maxLines: 2)
        }
        if let r, let version = r.rejectedVersion, s.onSwitchCheck != nil {
            out.add("rolled back", "version \(version) failed on-switch-check (\(r.rejectedReason ?? "")) and is not taken again here; "
                    + Plural.count(r.rollbacks, "rollback") + " in all", maxLines: 2)
        }
    }

    /// The tasks counted by state, the largest running ones with their progress, and the last error.
    private func addTasks(_ tasks: [TransferTask], _ st: Standing, to out: inout SummaryLines) {
        let byState = counts(tasks)
        let said = StatusCommand.countOrder.compactMap { state in byState[state].map { Units.formatCount($0) + " " + state.rawValue } }
        out.add("tasks", said.isEmpty ? "none" : said.joined(separator: ", "), maxLines: 2)
        let runningTasks = running(tasks)
        for (k, t) in runningTasks.prefix(StatusCommand.runningShown).enumerated() {
            var progress = Units.formatBytes(t.bytesDone)
            if let size = t.size {
                let percent = size > 0 ? Int(Double(min(t.bytesDone, size)) / Double(size) * 100) : 100
                progress = "\(percent)%  " + progress + "/" + Units.formatBytes(size)
            }
            let label = k > 0 ? "" : st.runningPID != nil ? "running" : "unfinished"
            let name = Columns.middle(Printable.name(t.path.string), max(8, out.valueWidth - Columns.columns(progress) - 2))
            out.add(label, progress + "  " + name)
        }
        if runningTasks.count > StatusCommand.runningShown {
            out.add("", "and \(Units.formatCount(runningTasks.count - StatusCommand.runningShown)) more")
        }
        if let t = lastError(tasks), let error = t.lastError {
            out.add("error", "\(Printable.name(t.path.string)): \(error) (\(LocalTime.text(t.updatedAt)))", maxLines: StatusCommand.messageLines)
        }
    }

    /// Each task on a line: id, state, bytes, path, and what it waits for or its last error.
    private func taskLines(_ tasks: [TransferTask], _ record: SessionRecord?, width: Int) -> [String] {
        guard !tasks.isEmpty else {
            let none = path.map { "no tasks under \(Printable.name($0))" } ?? (files ? "no tasks" : "every task is done")
            return [Columns.cut("  (\(none))", width)]
        }
        func bytes(_ t: TransferTask) -> String {
            if t.state == .done { return Units.formatBytes(t.size ?? t.bytesDone) }
            return Units.formatBytes(t.bytesDone) + (t.size.map { "/" + Units.formatBytes($0) } ?? "")
        }
        let rows = tasks.map { t in (id: String(t.id), state: t.state.rawValue, bytes: bytes(t), t: t) }
        let idWidth = max(4, rows.map(\.id.count).max()!)
        let stateWidth = max(5, rows.map(\.state.count).max()!)
        let bytesWidth = max(5, rows.map(\.bytes.count).max()!)
        func line(_ id: String, _ state: String, _ bytes: String) -> String {
            "  " + String(repeating: " ", count: max(0, idWidth - id.count)) + id + "  " + state.padding(to: stateWidth) + "  " + bytes.padding(to: bytesWidth) + "  "
        }
        var out = [Columns.cut(line("TASK", "STATE", "BYTES") + "PATH", width)]
        for row in rows {
            let prefix = line(row.id, row.state, row.bytes)
            let room = max(8, width - Columns.columns(prefix))
            let path = Printable.name(row.t.path.string)
            var note: String?
            if let waits = waitsFor(row.t, record, time: LocalTime.text) {
                note = "waits for " + waits
            } else if let error = row.t.lastError, row.t.state != .done {
                note = Printable.text(error).split(whereSeparator: \.isNewline).joined(separator: " ")
            }
            guard let note else {
                out.append(Columns.cut(prefix + Columns.middle(path, room), width))
                continue
            }
            let pathRoom = max(min(Columns.columns(path), room * 2 / 3), room - Columns.columns(note) - 2)
            out.append(Columns.cut(prefix + Columns.middle(path, pathRoom) + "  " + note, width))
        }
        return out
    }

    // MARK: machines

    private func taskJSON(_ t: TransferTask, _ r: SessionRecord?) -> String {
        "{\"id\":\(t.id),\"path\":\(JSONText.quote(t.path.string)),\"direction\":\"\(t.direction.rawValue)\",\"state\":\"\(t.state.rawValue)\","
            + "\"size\":\(t.size.map(String.init) ?? "null"),\"bytes_done\":\(t.bytesDone),\"sha256\":\"\(t.sha256)\","
            + "\"attempts\":\(t.attempts),\"last_error\":\(t.lastError.map(JSONText.quote) ?? "null"),"
            + "\"created_at\":\"\(t.createdAt.rfc3339)\",\"updated_at\":\"\(t.updatedAt.rfc3339)\","
            + "\"not_before\":\(t.notBefore.map { JSONText.quote($0.rfc3339) } ?? "null"),"
            + "\"waits_for\":\(waitsFor(t, r, time: \.rfc3339).map(JSONText.quote) ?? "null")}"
    }

    /// Up to `jsonTasks` of `tasks` as a member, and how many more as another.
    private func capped(_ name: String, _ tasks: [TransferTask], _ r: SessionRecord?) -> [String] {
        let shown = tasks.prefix(StatusCommand.jsonTasks)
        return ["\"\(name)\":[" + shown.map { taskJSON($0, r) }.joined(separator: ",") + "]",
                "\"\(name)_omitted\":\(tasks.count - shown.count)"]
    }

    private func printJSON(_ rows: [Row], budget: BudgetStanding?) {
        var sessions: [String] = []
        for row in rows {
            let (s, r, tasks) = (row.session, row.record, row.tasks)
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
            let st = standing(r, tasks, time: \.rfc3339)
            f.append("\"state\":\(JSONText.quote(st.state))")
            f.append("\"state_detail\":" + (st.detail.map(JSONText.quote) ?? "null"))
            f.append("\"running_pid\":" + (st.runningPID.map { String($0) } ?? "null"))
            f.append("\"seconds_left\":" + (st.secondsLeft.map { String($0) } ?? "null"))
            f.append("\"deadline\":" + (r?.deadline.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"manifest_version\":" + (r?.manifestVersion.map(String.init) ?? "null"))
            f.append("\"manifest_signer\":" + (r?.manifestSigner.map { JSONText.quote($0.description) } ?? "null"))
            f.append("\"manifest_signers\":[" + (r?.manifestSigners ?? []).map { JSONText.quote($0.description) }.joined(separator: ",") + "]")
            f.append("\"manifest_expires\":" + (r?.manifestExpires.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"served_version\":" + (r?.served(s.direction).map(String.init) ?? "null"))
            f.append("\"served_since\":" + (r?.servedSince.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"rejected_version\":" + (r?.rejectedVersion.map(String.init) ?? "null"))
            f.append("\"rejected_reason\":" + (r?.rejectedReason.map(JSONText.quote) ?? "null"))
            f.append("\"rollbacks\":\(r?.rollbacks ?? 0)")
            f.append("\"report\":" + StatusCommand.reportJSON(row))
            f.append("\"rollout\":" + (r?.rollout.map { "{\"version\":\($0.version),\"percent\":\($0.percent),\"inside\":\($0.inside),\"taking\":\($0.taking)}" } ?? "null"))
            f.append("\"key_set\":" + (row.keySet.map { "{\"version\":\($0.version),\"threshold\":\($0.threshold),\"keys\":[" + $0.keys.map { JSONText.quote($0.description) }.joined(separator: ",") + "]}" } ?? "null"))
            f.append("\"last_run_started\":" + (r?.lastRunStarted.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"last_run_finished\":" + (r?.lastRunFinished.map { JSONText.quote($0.rfc3339) } ?? "null"))
            f.append("\"last_exit_code\":" + (r?.lastExitCode.map { String($0) } ?? "null"))
            f.append("\"last_message\":" + (r?.lastMessage.map(JSONText.quote) ?? "null"))
            f.append("\"last_fetched\":" + (r?.lastFetched.map { String($0) } ?? "null"))
            f.append("\"last_reused\":" + (r?.lastReused.map { String($0) } ?? "null"))
            f.append("\"last_sources\":[" + (r?.lastSources ?? []).map { s in
                "{\"source\":\(JSONText.quote(s.source)),\"bytes\":\(s.bytes),\"requests\":\(s.requests),"
                    + "\"first_byte_seconds\":\(s.firstByte.map { Units.formatFixed($0, digits: 4) } ?? "null"),"
                    + "\"slowest_first_byte_seconds\":\(s.slowestFirstByte.map { Units.formatFixed($0, digits: 4) } ?? "null"),"
                    + "\"demoted\":\(s.demoted.map(JSONText.quote) ?? "null")}"
            }.joined(separator: ",") + "]")
            f.append("\"last_fallbacks\":[" + (r?.lastFallbacks ?? []).map { fallback in
                "{\"path\":\(JSONText.quote(fallback.path)),\"reason\":\"\(fallback.reason.rawValue)\"}"
            }.joined(separator: ",") + "]")
            f.append("\"agent_pid\":" + (st.agentPID.map { String($0) } ?? "null"))
            f.append("\"next_poll\":" + (st.agentPID != nil ? r?.nextPoll.map { JSONText.quote($0.rfc3339) } ?? "null" : "null"))
            f.append("\"held_for\":" + (r?.heldFor.map(JSONText.quote) ?? "null"))
            f.append("\"last_poll_ok\":" + (r?.lastPollOK.map { JSONText.quote($0.rfc3339) } ?? "null"))
            let byState = counts(tasks)
            f.append("\"task_counts\":{" + TaskState.allCases.map { "\"\($0.rawValue)\":\(byState[$0] ?? 0)" }.joined(separator: ",") + "}")
            f += capped("running_tasks", running(tasks), r)
            f += capped("failed_tasks", tasks.filter { $0.state == .failed }.sorted { $0.updatedAt > $1.updatedAt }, r)
            if let t = lastError(tasks), let error = t.lastError {
                f.append("\"last_error\":{\"task\":\(t.id),\"path\":\(JSONText.quote(t.path.string)),\"error\":\(JSONText.quote(error)),"
                         + "\"time\":\(JSONText.quote(t.updatedAt.rfc3339))}")
            } else {
                f.append("\"last_error\":null")
            }
            if listing { f.append("\"tasks\":[" + listed(row).map { taskJSON($0, r) }.joined(separator: ",") + "]") }
            sessions.append("{" + f.joined(separator: ",") + "}")
        }
        Console.json("{\"sessions\":[" + sessions.joined(separator: ",") + "],\"budget\":" + (budget?.json ?? "null") + "}")
    }
}

import Glibc
import Synchronization
import FerryCore

/// The agent's Prometheus metrics: counted from the events as they pass, with the task table's
/// state per session. Written as node_exporter's textfile (`[agent] metrics = PATH`), atomically
/// (temporary name, rename) after every cycle, and served at `/metrics` (`[agent] metrics-listen`,
/// `MetricsServer`) from the newest state the agent gave it. Counters start at zero when the
/// agent starts, as Prometheus expects of a process's counters, and every series is there from
/// the first scrape.
public final class Metrics: EventSink, @unchecked Sendable {
    private struct Counts {
        var bytes: [String: Int64] = [:]
        /// Bytes of the files placed, by session and source (`origin`, or a mirror's URL).
        var bySource: [String: [String: Int64]] = [:]
        var files: [String: Int] = [:]
        var failedFiles: [String: Int] = [:]
        /// Errors by session and kind: a failed file ("file"), or a run's exit code name.
        var errors: [String: [String: Int]] = [:]
        var polls: [String: Int] = [:]
        var rollbacks: [String: Int] = [:]
        var metadataBytes: [String: Int64] = [:]
        /// Bytes a delta took from data the mirror held.
        var reusedBytes: [String: Int64] = [:]
        /// Large files fetched whole, their delta not taken, by reason.
        var fallbacks: [String: [DeltaFallback: Int]] = [:]
        /// Each source of a pull with mirrors at its last run: 1 used, 0 left for the run (demoted:
        /// wrong bytes, or hung and slow); and the requests it answered since the agent started.
        var sourceUp: [String: [String: Int]] = [:]
        var sourceRequests: [String: [String: Int]] = [:]
        /// Each source's mean and slowest time to a first byte at its last run (nil: none came).
        var sourceFirstByte: [String: [String: (mean: Double, slowest: Double)]] = [:]
    }

    /// The textfile, if the config names one.
    public let path: String?
    private let counts = Mutex(Counts())
    /// The sessions' standing the agent gave last (for `/metrics` between its updates).
    private let latest = Mutex<[Standing]>([])
    /// Set when `/metrics` was read since the agent last gave the sessions' standing.
    private let asked = Atomic<Bool>(false)

    public init(path: String?) { self.path = path }

    private let budgetMeter = Mutex<BudgetMeter?>(nil)
    /// The machine's byte budget, whose standing the series show (nil: none configured).
    public var budget: BudgetMeter? {
        get { budgetMeter.withLock { $0 } }
        set { budgetMeter.withLock { $0 = newValue } }
    }

    /// The newest standing of the sessions (the agent's loop); `/metrics` renders from it.
    public func update(_ sessions: [Standing]) {
        latest.withLock { $0 = sessions }
        asked.store(false, ordering: .relaxed)
    }

    /// Whether `/metrics` was read since the last `update`: the agent refreshes the standing then.
    public var wanted: Bool { asked.load(ordering: .relaxed) }

    /// `/metrics`: the series for the newest standing.
    public func page() -> String {
        asked.store(true, ordering: .relaxed)
        return render(latest.withLock { $0 })
    }

    public func progress(_ progress: SyncProgress) {}

    public func event(_ event: Event) {
        let s = event.session
        switch event.body {
        case let .fileDone(_, _, fetched, reused, source):
            counts.withLock {
                $0.bytes[s, default: 0] += fetched
                $0.bySource[s, default: [:]][source ?? "origin", default: 0] += fetched
                $0.files[s, default: 0] += 1
                $0.reusedBytes[s, default: 0] += reused
            }
        case let .manifestFetched(_, _, _, _, _, metadataBytes, _):
            counts.withLock { $0.metadataBytes[s, default: 0] += metadataBytes }
        case .fileFailed:
            counts.withLock { $0.failedFiles[s, default: 0] += 1; $0.errors[s, default: [:]]["file", default: 0] += 1 }
        case .rolledBack:
            counts.withLock { $0.rollbacks[s, default: 0] += 1 }
        case let .deltaFallback(_, reason, _):
            counts.withLock { $0.fallbacks[s, default: [:]][reason, default: 0] += 1 }
        case let .sourceServed(c, _):
            counts.withLock {
                $0.sourceUp[s, default: [:]][c.source] = c.demoted == nil ? 1 : 0
                $0.sourceRequests[s, default: [:]][c.source, default: 0] += c.requests
                $0.sourceFirstByte[s, default: [:]][c.source] = c.firstByte.map { ($0, c.slowestFirstByte ?? $0) }
            }
        case let .syncFinished(code, _, _, _, _, _, _, _, dryRun) where !dryRun:
            counts.withLock { c in
                c.polls[s, default: 0] += 1
                if code != ExitCode.inSync.rawValue && code != ExitCode.incomplete.rawValue {
                    c.errors[s, default: [:]][ExitCode(rawValue: code)?.name ?? "exit-\(code)", default: 0] += 1
                }
            }
        default:
            break
        }
    }

    /// One session's standing, from the store and the agent.
    public struct Standing: Sendable {
        public var name: String
        /// pull or push: what the transfer counters count (downloads or uploads).
        public var direction: Direction = .pull
        public var record: SessionRecord?
        public var taskCounts: [TaskState: Int]
        /// Waiting for connectivity (or failing) between polls.
        public var waiting: Bool
        /// A pull's local filesystem: bytes free (to unprivileged users) and its size.
        public var space: (free: Int64, size: Int64)?

        public init(name: String, direction: Direction = .pull, record: SessionRecord?, taskCounts: [TaskState: Int], waiting: Bool) {
            self.name = name
            self.direction = direction
            self.record = record
            self.taskCounts = taskCounts
            self.waiting = waiting
        }
    }

    /// The file's text for `sessions`, each family of series written by its own part.
    public func render(_ sessions: [Standing]) -> String {
        let c = counts.withLock { $0 }
        var metric = MetricText()
        metric("ferry_build_info", "gauge", "Always 1; the labels say which ferry this is.", [("version=\"\(Metrics.escape(FerryVersion.string))\"", "1")])
        transfers(&metric, sessions, c)
        sources(&metric, sessions, c)
        standing(&metric, sessions, c)
        versions(&metric, sessions)
        budgetMetrics(&metric)
        return metric.out
    }

    /// The series' text as it is written: each metric's HELP and TYPE, then its rows.
    struct MetricText {
        var out = ""
        mutating func callAsFunction(_ name: String, _ type: String, _ help: String, _ rows: [(labels: String, value: String)]) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            for row in rows { out += "\(name){\(row.labels)} \(row.value)\n" }
        }
    }

    static func label(_ s: Standing) -> String { "session=\"\(Metrics.escape(s.name))\"" }

    /// Bytes and files moved, deltas, metadata, polls.
    private func transfers(_ metric: inout MetricText, _ sessions: [Standing], _ c: Counts) {
        let label = Metrics.label
        func moved(_ s: Standing) -> String { label(s) + ",direction=\"\(s.direction.rawValue)\"" }
        // By source: `origin` (the remote), or each mirror a pull took files from.
        metric("ferry_transferred_bytes_total", "counter", "Bytes downloaded (pull) or uploaded (push) since the agent started, by source (origin, or a mirror's URL).",
               sessions.flatMap { s in
                   let by = c.bySource[s.name] ?? [:]
                   return (["origin"] + by.keys.filter { $0 != "origin" }.sorted()).map { source in
                       (moved(s) + ",source=\"\(Metrics.escape(source))\"", String(by[source] ?? 0))
                   }
               })
        metric("ferry_reused_bytes_total", "counter", "Bytes of changed files a delta took from data the mirror held instead of the network (pull), since the agent started.",
               sessions.filter { $0.direction == .pull }.map { (label($0), String(c.reusedBytes[$0.name] ?? 0)) })
        let pulls = sessions.filter { $0.direction == .pull }
        metric("ferry_delta_fallbacks_total", "counter",
               "Large files with a content index fetched whole since the agent started, by why the delta was not "
               + "taken.",
               pulls.flatMap { s in
                   DeltaFallback.allCases.map {
                       (label(s) + ",reason=\"\($0.rawValue)\"", String(c.fallbacks[s.name]?[$0] ?? 0))
                   }
               })
        metric("ferry_transferred_files_total", "counter", "Files downloaded and placed (pull) or uploaded and moved into place (push) since the agent started.",
               sessions.map { (moved($0), String(c.files[$0.name] ?? 0)) })
        metric("ferry_failed_files_total", "counter", "Files that failed since the agent started.",
               sessions.map { (label($0), String(c.failedFiles[$0.name] ?? 0)) })
        metric("ferry_metadata_bytes_total", "counter", "Bytes of manifests and metadata objects fetched since the agent started: what the remote's changes cost this mirror.",
               sessions.map { (label($0), String(c.metadataBytes[$0.name] ?? 0)) })
        metric("ferry_polls_total", "counter", "Cycles run since the agent started.",
               sessions.map { (label($0), String(c.polls[$0.name] ?? 0)) })
    }

    /// Each source of a pull with mirrors: up, requests, first bytes.
    private func sources(_ metric: inout MetricText, _ sessions: [Standing], _ c: Counts) {
        let label = Metrics.label
        func bySource(_ table: [String: [String: Int]]) -> [(labels: String, value: String)] {
            sessions.flatMap { s in (table[s.name] ?? [:]).sorted { $0.key < $1.key }.map { (label(s) + ",source=\"\(Metrics.escape($0.key))\"", String($0.value)) } }
        }
        metric("ferry_source_up", "gauge", "For a pull with mirrors, each source at its last run: 1 used, 0 left for the run (wrong bytes, or hung or slower than min-speed for mirror patience; status says why).",
               bySource(c.sourceUp))
        metric("ferry_source_requests_total", "counter", "Requests each source of a pull with mirrors answered (files, ranges and metadata objects), since the agent started.",
               bySource(c.sourceRequests))
        func firstBytes(_ value: ((mean: Double, slowest: Double)) -> Double) -> [(labels: String, value: String)] {
            sessions.flatMap { s in
                (c.sourceFirstByte[s.name] ?? [:]).sorted { $0.key < $1.key }.map {
                    (label(s) + ",source=\"\(Metrics.escape($0.key))\"", Units.formatFixed(value($0.value), digits: 4))
                }
            }
        }
        metric("ferry_source_first_byte_seconds", "gauge", "For a pull with mirrors, each source's mean time from a request to its first byte at its last run (what sets a mirror's patience: ten times the slowest, at least 5 s).",
               firstBytes(\.mean))
        metric("ferry_source_first_byte_max_seconds", "gauge", "For a pull with mirrors, each source's slowest time from a request to its first byte at its last run.",
               firstBytes(\.slowest))
    }

    /// Rollouts, rollbacks, errors, the queue and the sessions' standing.
    private func standing(_ metric: inout MetricText, _ sessions: [Standing], _ c: Counts) {
        let label = Metrics.label
        metric("ferry_rollout_inside", "gauge", "Whether this machine takes the version being rolled out (1) or stays on the one before (0), for sessions whose last manifest had a rollout.",
               sessions.compactMap { s in s.record?.rollout.map { (label(s), $0.inside ? "1" : "0") } })
        metric("ferry_rollout_percent", "gauge", "The share of machines the version being rolled out goes to, for sessions whose last manifest had a rollout.",
               sessions.compactMap { s in s.record?.rollout.map { (label(s) + ",version=\"\($0.version)\"", String($0.percent)) } })
        metric("ferry_rollbacks_total", "counter", "Times on-switch-check failed and the generation before was made current again, since the agent started.",
               sessions.filter { $0.direction == .pull }.map { (label($0), String(c.rollbacks[$0.name] ?? 0)) })
        var errorRows: [(String, String)] = []
        for s in sessions {
            // "file" is there from the start, so the counter exists at 0 before the first error.
            var kinds = c.errors[s.name] ?? [:]
            if kinds["file"] == nil { kinds["file"] = 0 }
            for (kind, n) in kinds.sorted(by: { $0.key < $1.key }) { errorRows.append((label(s) + ",kind=\"\(kind)\"", String(n))) }
        }
        metric("ferry_errors_total", "counter", "Errors since the agent started, by kind: file, or the exit code of a run that failed.", errorRows)
        var taskRows: [(String, String)] = []
        for s in sessions {
            for state in TaskState.allCases where state != .done { taskRows.append((label(s) + ",state=\"\(state.rawValue)\"", String(s.taskCounts[state] ?? 0))) }
        }
        metric("ferry_tasks", "gauge", "Tasks not done, by state: the queue depth, and what waiting tasks wait for.", taskRows)
        metric("ferry_session_waiting", "gauge", "1 while the session waits for connectivity or its last poll failed.",
               sessions.map { (label($0), $0.waiting ? "1" : "0") })
        metric("ferry_session_held", "gauge", "1 while a discretionary session's transfers wait for its conditions (status says which).",
               sessions.map { (label($0), $0.record?.heldFor == nil ? "0" : "1") })
        metric("ferry_last_successful_poll_timestamp_seconds", "gauge", "When the last poll that reached the remote ended (Unix time).",
               sessions.compactMap { s in s.record?.lastPollOK.map { (label(s), String($0.seconds)) } })
    }

    /// Which version each session serves, apart from the newest it saw.
    private func versions(_ metric: inout MetricText, _ sessions: [Standing]) {
        let label = Metrics.label
        // Served apart from seen: a machine outside a rollout, or one that rolled a release back,
        // serves an older version than the newest its remote offers.
        metric("ferry_served_version", "gauge", "The version this machine serves: a pull's release whole in place and past its on-switch-check; a push's last published.",
               sessions.compactMap { s in
                   s.record?.served(s.direction).map { (label(s), String($0)) }
               })
        metric("ferry_served_since_timestamp_seconds", "gauge", "When a pull began serving its release (Unix time).",
               sessions.compactMap { s in s.direction == .push ? nil : s.record?.servedSince.map { (label(s), String($0.seconds)) } })
        metric("ferry_seen_version", "gauge", "The newest version the remote offered (pull) or the last published (push), taken or not.",
               sessions.compactMap { s in s.record?.manifestVersion.map { (label(s), String($0)) } })
        metric("ferry_rejected_version", "gauge", "A version on-switch-check rolled back on this machine and that is not taken again, until a newer one passes.",
               sessions.compactMap { s in s.record?.rejectedVersion.map { (label(s), String($0)) } })
        metric("ferry_manifest_expiry_timestamp_seconds", "gauge", "When the manifest last taken (pull) or published (push) expires (Unix time); none for one that never does.",
               sessions.compactMap { s in s.record?.manifestExpires.map { (label(s), String($0.seconds)) } })
        metric("ferry_local_free_bytes", "gauge", "Bytes free (to unprivileged users) on the filesystem of a pull's local directory.",
               sessions.compactMap { s in s.space.map { (label(s), String($0.free)) } })
        metric("ferry_local_size_bytes", "gauge", "The size of the filesystem of a pull's local directory.",
               sessions.compactMap { s in s.space.map { (label(s), String($0.size)) } })
        metric("ferry_manifest_version", "gauge", "Deprecated (the newest seen, not the one served): use ferry_seen_version, or ferry_served_version for what the machine serves.",
               sessions.compactMap { s in s.record?.manifestVersion.map { (label(s), String($0)) } })
    }

    /// The machine's byte budget, when it has one.
    private func budgetMetrics(_ metric: inout MetricText) {
        if let budget {
            let (window, used) = budget.standing()
            let period = "period=\"\(budget.budget.period.rawValue)\""
            metric("ferry_budget_bytes", "gauge", "The bytes all sessions may move per period ([agent] budget).", [(period, String(budget.budget.bytes))])
            metric("ferry_budget_used_bytes", "gauge", "The bytes all sessions moved in the period now, every process on this state together.", [(period, String(used))])
            metric("ferry_budget_period_end_timestamp_seconds", "gauge", "When the period now ends and a spent budget is whole again (Unix time).",
                   [(period, String(window.end.seconds))])
        }
    }

    /// Writes the file atomically (readable by node_exporter: mode 0644), if there is one.
    public func write(_ sessions: [Standing]) throws(FerryError) {
        guard let path else { return }
        try FileSystem.writeAtomically(path, bytes: Array(render(sessions).utf8), mode: 0o644)
    }

    /// A label value as the text format wants it: `\`, `"` and newlines escaped.
    static func escape(_ value: String) -> String {
        var out = ""
        for c in value.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }
}

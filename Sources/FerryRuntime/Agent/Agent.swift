import CSystem
import Dispatch
import Glibc
import Synchronization
import FerryCore

/// `ferry agent`: the session runner on a schedule. One process runs every session of the config;
/// each session's cycle (refresh, transfers, settle, exactly as `sync now` runs it) is started on
/// the process's one `SessionRunner`, so all sessions share one engine and the global `transfers`
/// limit. When a cycle ends, `PollSchedule` says when the session polls next: one `poll` interval
/// after a poll that reached the remote, a capped backoff while it waits for connectivity.
///
/// On start every session is polled at once, which reattaches to the tasks that were in flight
/// (they resume from their partial files). SIGHUP re-reads the config (`requestReload`); SIGTERM
/// stops it: nothing new starts, running transfers checkpoint, and `run` returns.
///
/// The loop runs on the caller's thread and sleeps between due times; cycles end on their own
/// threads and wake it. It owns the schedule; the store hears what it says of each session, for
/// `ferry status` and metrics.
public final class Agent: @unchecked Sendable {
    private struct Slot {
        var session: SessionConfig
        var schedule: PollSchedule
        /// Monotonic time the next poll is due.
        var due: Double
        /// The running cycle's stop token, while one runs.
        var running: StopToken?
        /// Removed from the config by a reload: dropped when its cycle ends.
        var removed = false
        /// What the agent last said of the session.
        var state = PollState.starting
        var nextPoll: Timestamp?
        /// Clients waiting for the session's next cycle (`sync now` handed over), and its options.
        var waiting: [Handover] = []
        var waitingNotBefore: EarliestBegin?
        var waitingLimits: RunLimits?
        /// Clients following the running cycle.
        var following: [Handover] = []
        /// The last cycle left the session in sync (nothing open, nothing failed).
        var inSync = false
        /// Notices changes under the local root between cycles (nil: scan every poll).
        var watch: LocalWatch?
        /// When the tree was last scanned in full (monotonic).
        var lastScan = -Double.infinity
        /// A discretionary session whose last cycle held its transfers: the conditions are watched
        /// between polls, and a cycle starts as soon as they hold.
        var held: DiscretionGate?
    }

    /// Requests from other threads (signal handlers, ending cycles, control clients).
    private struct Inbox {
        var ended: [(session: String, result: SyncResult)] = []
        var reload = false
        var requests: [(ControlRequest, ControlConnection)] = []
    }

    /// One client's handed-over sync: the sessions it waits for, and the exit codes so far.
    private final class Handover {
        let connection: ControlConnection
        /// The client draws progress bars: it is sent the cycles' progress.
        let progress: Bool
        var remaining: Set<String>
        var codes: [ExitCode] = []
        init(connection: ControlConnection, progress: Bool, sessions: Set<String>) {
            self.connection = connection
            self.progress = progress
            remaining = sessions
        }

        /// One session's cycle ended; the client is told when its last one has.
        func ended(_ session: String, _ code: ExitCode) {
            guard remaining.remove(session) != nil else { return }
            codes.append(code)
            if remaining.isEmpty {
                connection.send("{\"event\":\"handover-done\",\"exit_code\":\(ExitCode.worst(codes).rawValue)}")
                connection.finish()
            }
        }
    }

    /// Sends the events of followed sessions to their clients (a sink of the hub), and their
    /// progress to the clients that asked for it.
    private final class Followers: EventSink, @unchecked Sendable {
        struct Follower: Sendable {
            let connection: ControlConnection
            let progress: Bool
        }
        let bySession = Mutex<[String: [Follower]]>([:])
        func event(_ event: Event) {
            let followers = bySession.withLock { $0[event.session] ?? [] }
            guard !followers.isEmpty else { return }
            let line = event.json
            for f in followers { f.connection.send(line) }
        }
        func progress(_ progress: SyncProgress) {
            // A client that is behind skips some: the next line it reads says where the run is.
            let followers = bySession.withLock { ($0[progress.session] ?? []).filter { $0.progress && $0.connection.queued < 8 } }
            guard !followers.isEmpty else { return }
            let line = progress.controlLine
            for f in followers { f.connection.send(line) }
        }
    }

    public private(set) var config: Config
    private let runner: SessionRunner
    private let hub: EventHub
    private let hooks: HookRunner?
    private let notifier: SystemdNotifier
    private let clock: any Clock
    private let random: @Sendable () -> Double
    private let reloadConfig: @Sendable (String) throws(FerryError) -> Config
    private let store: StateStore
    private let pid = getpid()
    private let wake = DispatchSemaphore(value: 0)
    private let inbox = Mutex(Inbox())
    private var slots: [String: Slot] = [:]
    private var lastMetricsError: String?
    private var lastWatchdog = 0.0
    private var lastStatus = ""
    private let followers = Followers()
    private var control: ControlServer?
    private var metrics: Metrics?
    private var metricsServer: MetricsServer?
    /// When the scheduler last went round its loop (monotonic seconds), for `/healthz`.
    private let heartbeat: Heartbeat

    /// `sinks` get every event (the event log, the journal, metrics); `hooks` too, and learn the
    /// sessions of each reload. `clock` is the schedule's, the engine's and every cycle's.
    /// `reloadConfig` reads the config file again (injected for tests).
    public init(config: Config, sinks: [EventSink], hooks: HookRunner?, notifier: SystemdNotifier = SystemdNotifier(),
                clock: any Clock, random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
                reloadConfig: @escaping @Sendable (String) throws(FerryError) -> Config = { path throws(FerryError) in try ConfigLoader.load(path: path, allowingNoSession: true) })
        throws(FerryError) {
        // Two malloc arenas for the whole process, set before the agent's threads start: with one
        // per thread (glibc's default) the freed blocks of many cycles lie scattered over up to 8
        // arenas per CPU, and even trimmed after each cycle an agent syncing 3,000 files grew from
        // 34 to 49 MiB over 120 change cycles; with two it stays at 33 (AgentMemoryTests).
        _ = ferry_limit_arenas(2)
        self.config = config
        self.hooks = hooks
        self.notifier = notifier
        self.clock = clock
        heartbeat = Heartbeat(clock.monotonic())
        self.random = random
        self.reloadConfig = reloadConfig
        let metrics = config.agent.metrics != nil || config.agent.metricsListen != nil ? Metrics(path: config.agent.metrics) : nil
        self.metrics = metrics
        hub = EventHub(sinks + (hooks.map { [$0] } ?? []) + [followers] + (metrics.map { [$0] } ?? []))
        runner = try SessionRunner(agent: config.agent, clock: clock)
        runner.sessions = config.sessions.count
        metrics?.budget = runner.budget
        store = try StateStore(directory: config.agent.state, clock: clock)
        let hub = self.hub
        hooks?.report = { hub.event($0) }
        for session in config.sessions { add(session) }
    }

    /// Re-read the config at the next turn of the loop (SIGHUP).
    public func requestReload() {
        inbox.withLock { $0.reload = true }
        wake.signal()
    }

    /// Wake the loop now (a stop was requested).
    public func wakeUp() { wake.signal() }

    /// Listens on `<state>/agent.sock` for `sync now` and `resume` to hand their work over.
    public func serveControlSocket() throws(FerryError) {
        control = try ControlServer(state: config.agent.state) { [self] request, connection in
            inbox.withLock { $0.requests.append((request, connection)) }
            wake.signal()
        }
    }

    /// Serves `/metrics` and `/healthz` on `[agent] metrics-listen`, if set (`MetricsServer`).
    /// `/healthz` fails once the scheduler has not gone round its loop for as long as systemd's
    /// watchdog allows (WatchdogSec, else 60 s).
    public func serveMetrics() throws(FerryError) {
        guard let address = config.agent.metricsListen, let metrics else { return }
        let limit = notifier.watchdogInterval.map { $0 * 2 } ?? 60
        let (heartbeat, clock) = (self.heartbeat, self.clock)
        metricsServer = try MetricsServer(address: address, clock: clock, metrics: { metrics.page() }, healthy: {
            let quiet = clock.monotonic() - heartbeat.last.load(ordering: .relaxed)
            return quiet <= limit ? (true, "ok: the scheduler ticked \(Units.formatFixed(quiet, digits: 1))s ago")
                                  : (false, "the scheduler has not ticked for \(Units.formatFixed(quiet, digits: 1))s (limit \(Units.formatFixed(limit, digits: 0))s)")
        })
    }

    /// Runs until `stop` is requested and every running cycle has checkpointed; returns the
    /// agent's exit code (0: stopped as asked, state intact).
    public func run(stop: StopToken) -> ExitCode {
        emit("", .agent(action: "started", message: "ferry agent (pid \(pid)) runs \(Plural.count(config.sessions.count, "session")) from \(config.path)"))
        sayIfIdle()
        // `ferry status` knows the agent from its first cycle on, not only once that cycle has ended.
        for name in slots.keys { try? store.recordAgentState(session: name, pid: pid, state: .starting, nextPoll: nil) }
        notifier.ready(status: statusLine())
        writeMetrics()
        var stopping = false
        while true {
            let (reload, reloadClients) = takeInbox(stop: stop)
            if let reason = stop.reason {
                if !stopping {
                    stopping = true
                    emit("", .agent(action: "stopping", message: "\(reason): starting nothing new, checkpointing running transfers"))
                    notifier.stopping(reason)
                    for slot in slots.values { slot.running?.request(reason) }
                }
                if !slots.values.contains(where: { $0.running != nil }) { break }
            } else {
                if reload {
                    let refusal = self.reload()
                    for client in reloadClients { Agent.answerReload(client, refusal: refusal, config: config) }
                }
                startDueCycles()
            }
            keepWatchdog()
            heartbeat.last.store(clock.monotonic(), ordering: .relaxed)
            if metrics?.wanted == true { refreshMetrics() }
            let status = statusLine()
            if status != lastStatus {
                lastStatus = status
                notifier.status(status)
            }
            let now = clock.monotonic()
            let nextDue = slots.values.filter { $0.running == nil }.map(\.due).min() ?? .infinity
            var sleep = stopping ? 0.1 : min(max(0, nextDue - now), 1)
            if let interval = notifier.watchdogInterval {
                // Awake for the next WATCHDOG=1: with WatchdogSec=1s it is due every 0.5 s.
                sleep = min(sleep, max(0, lastWatchdog + interval - clock.monotonic()))
            }
            // A semaphore's timeout is kept by the kernel's clock: `sleep` was measured on ours.
            _ = wake.wait(timeout: .now() + sleep)
        }
        control?.remove()
        // Requests that came after the loop's last look are answered, not left hanging.
        for (request, connection) in inbox.withLock({ inbox in defer { inbox.requests.removeAll() }; return inbox.requests }) {
            if request.command == ControlRequest.reload {
                Agent.answerReload(connection, refusal: FerryError(.stopped, "the agent is stopping"), config: config)
            } else {
                connection.send("{\"event\":\"handover-done\",\"exit_code\":\(ExitCode.incomplete.rawValue)}")
                connection.finish()
            }
        }
        metricsServer?.stop()
        for (name, slot) in slots {
            for handover in slot.waiting { handover.ended(name, .incomplete) }
            try? store.recordAgentState(session: name, pid: nil, state: nil, nextPoll: nil)
        }
        hooks?.drain()
        return .inSync
    }

    /// Settles ended cycles and `sync now` requests; returns whether to reload, and who asked (refused while stopping).
    private func takeInbox(stop: StopToken) -> (reload: Bool, clients: [ControlConnection]) {
        let (ended, hangup, requests) = inbox.withLock { inbox in
            defer { inbox.ended.removeAll(); inbox.reload = false; inbox.requests.removeAll() }
            return (inbox.ended, inbox.reload, inbox.requests)
        }
        for (name, result) in ended { cycleEnded(name, result) }
        var reload = hangup
        var reloadClients: [ControlConnection] = []
        for (request, connection) in requests {
            if request.command == ControlRequest.reload {
                reloadClients.append(connection)
                reload = true
            } else {
                accept(request, connection, stopping: stop.reason != nil)
            }
        }
        if stop.reason != nil {
            for client in reloadClients { Agent.answerReload(client, refusal: FerryError(.stopped, "the agent is stopping"), config: config) }
        }
        return (reload, reloadClients)
    }

    /// Starts the cycle of each free session that is due, or whose held work may go now.
    private func startDueCycles() {
        let now = clock.monotonic()
        for name in slots.keys.sorted() where slots[name]!.running == nil {
            if let gate = slots[name]!.held, gate.waitsFor() == nil {
                slots[name]!.held = nil
                slots[name]!.due = now
            }
            if slots[name]!.due <= now { startCycle(name) }
        }
    }

    // MARK: handed-over syncs

    /// A client's `sync now`: each named session (all, when none are named) runs a cycle as soon
    /// as it is free, the client following its events.
    private func accept(_ request: ControlRequest, _ connection: ControlConnection, stopping: Bool) {
        let names = request.sessions.isEmpty ? slots.keys.sorted() : request.sessions
        let accepted = stopping ? [] : names.filter { slots[$0] != nil && !slots[$0]!.removed }
        let unknown = names.filter { !accepted.contains($0) }
        connection.send("{\"event\":\"handover\",\"pid\":\(pid),\"accepted\":\(JSONText.quote(accepted.joined(separator: ","))),"
                        + "\"unknown\":\(JSONText.quote(unknown.joined(separator: ",")))\(request.limits?.controlFields ?? "")}")
        guard !accepted.isEmpty else {
            connection.send("{\"event\":\"handover-done\",\"exit_code\":0}")
            connection.finish()
            return
        }
        let handover = Handover(connection: connection, progress: request.progress, sessions: Set(accepted))
        for name in accepted {
            slots[name]!.waiting.append(handover)
            if let nb = request.notBefore { slots[name]!.waitingNotBefore = nb }
            if let limits = request.limits { slots[name]!.waitingLimits = limits }
            // Free now: the loop starts it this turn. Running: it starts again when this cycle ends.
            if slots[name]!.running == nil { slots[name]!.due = clock.monotonic() }
        }
    }

    // MARK: the schedule

    private func add(_ session: SessionConfig) {
        slots[session.name] = Slot(session: session, schedule: PollSchedule(interval: session.poll, firstRetry: session.retryDelay),
                                   due: clock.monotonic())
    }

    private func startCycle(_ name: String) {
        let session = slots[name]!.session
        let token = StopToken()
        var options = SyncOptions(stop: StopCondition(token: token, clock: clock, maxDuration: session.maxDuration))
        options.retryManifest = false
        options.notBefore = slots[name]!.waitingNotBefore
        options.limits = slots[name]!.waitingLimits
        options.localUnchanged = localUnchanged(name)
        slots[name]!.waitingNotBefore = nil
        slots[name]!.waitingLimits = nil
        slots[name]!.running = token
        // Clients waiting for this session follow this cycle.
        let following = slots[name]!.waiting
        slots[name]!.following = following
        slots[name]!.waiting = []
        if !following.isEmpty {
            followers.bySession.withLock { $0[name, default: []] += following.map { Followers.Follower(connection: $0.connection, progress: $0.progress) } }
        }
        if let limits = options.limits {
            emit(name, .agent(action: "run-limits", message: "\(Printable.name(name)): this cycle goes at \(limits.description), as the sync now handed over asked; the next at the config's"))
        }
        do throws(FerryError) {
            try runner.start(SessionRunner.Job(session: session, options: options), observer: hub) { [self] result in
                inbox.withLock { $0.ended.append((name, result)) }
                wake.signal()
            }
        } catch {
            // No thread to run the cycle on: said, and tried again after the failure backoff like
            // any failed poll (never at once, even for a waiting client); clients following this
            // cycle are told it failed.
            var result = SyncResult(session: name)
            result.error = error
            result.exitCode = RunOutcome(error: error.category).exitCode
            result.message = error.message
            result.hint = error.hint
            emit(name, .warning(message: "\(error.message); the next try comes after the failure backoff"))
            cycleEnded(name, result)
            if slots[name] != nil { slots[name]!.due = max(slots[name]!.due, clock.monotonic() + max(1, session.retryDelay)) }
        }
    }

    /// Whether this poll may skip the scan: the last cycle left the session in sync, the inotify
    /// watch begun before that scan saw nothing since, `verify-interval` has not passed, and no
    /// client asked for this cycle. Otherwise a new watch begins before the cycle scans.
    private func localUnchanged(_ name: String) -> Bool {
        var slot = slots[name]!
        defer { slots[name] = slot }
        let now = clock.monotonic()
        if slot.inSync, slot.waiting.isEmpty, let watch = slot.watch, !watch.changed, now - slot.lastScan < slot.session.verifyInterval {
            return true
        }
        slot.lastScan = now
        if slot.watch == nil || slot.watch!.changed {
            slot.watch = nil
            slot.watch = LocalWatch(root: slot.session.local)
        }
        return false
    }

    private func cycleEnded(_ name: String, _ result: SyncResult) {
        // What the cycle's threads freed goes back to the system: glibc keeps it in their
        // arenas otherwise, and an agent's memory climbed with every change cycle.
        _ = ferry_release_free_memory()
        guard var slot = slots[name] else { return }
        slot.running = nil
        slot.inSync = result.exitCode == .inSync
        // Held by the spent byte budget: the cycle comes again when the next period begins.
        slot.held = result.counts.heldFor == nil || result.counts.heldUntil != nil ? nil : DiscretionGate(session: slot.session, agent: config.agent, clock: clock)
        if !slot.following.isEmpty {
            let done = Set(slot.following.map { ObjectIdentifier($0.connection) })
            followers.bySession.withLock { $0[name]?.removeAll { done.contains(ObjectIdentifier($0.connection)) } }
            for handover in slot.following { handover.ended(name, result.exitCode) }
            slot.following = []
        }
        if slot.removed {
            for handover in slot.waiting { handover.ended(name, .incomplete) }
            slots[name] = nil
            try? store.recordAgentState(session: name, pid: nil, state: nil, nextPoll: nil)
            return
        }
        let outcome = PollSchedule.outcome(exitCode: result.exitCode, waiting: result.counts.waiting)
        var delay = slot.schedule.delay(after: outcome, random: random())
        let now = clock.now()
        if let begin = [result.counts.nextBegin, result.counts.heldUntil].compactMap({ $0 }).min() {
            // A delayed download comes due, or the budget's next period begins, before the next poll: poll then.
            delay = min(delay, max(1, begin.timeInterval - now.timeInterval))
        }
        // A client asked for a cycle while this one ran: it starts now.
        if !slot.waiting.isEmpty { delay = 0 }
        slot.due = clock.monotonic() + delay
        let next = Timestamp(seconds: now.seconds + Int64(delay.rounded(.up)), nanoseconds: now.nanoseconds)
        let state = Agent.describe(result, outcome: outcome)
        if outcome == .reached { try? store.recordPollSucceeded(session: name, at: now) }
        try? store.recordAgentState(session: name, pid: pid, state: state, nextPoll: next)
        if state != slot.state {
            emit(name, .sessionState(state: state, nextPoll: next))
        }
        slot.state = state
        slot.nextPoll = next
        slots[name] = slot
        writeMetrics()
    }

    /// The sessions' standing for metrics.
    private func metricsStates() throws(FerryError) -> [Metrics.Standing] {
        var states: [Metrics.Standing] = []
        for (name, slot) in slots.sorted(by: { $0.key < $1.key }) {
            var standing = Metrics.Standing(name: name, direction: slot.session.direction, record: try store.session(name),
                                            taskCounts: try store.openTaskCounts(session: name), waiting: slot.state.lastPollFailed)
            if slot.session.direction == .pull { standing.space = HostProbe.shared.freeSpace(near: slot.session.local) }
            states.append(standing)
        }
        return states
    }

    /// `/metrics` was read: the standing it serves is brought up to date (at most once per turn
    /// of the loop, and only when someone reads it).
    private func refreshMetrics() {
        guard let metrics, let states = try? metricsStates() else { return }
        metrics.update(states)
    }

    /// Rewrites the metrics file, if the config names one, and the standing `/metrics` serves;
    /// a failure is said once per cause.
    private func writeMetrics() {
        guard let metrics else { return }
        do throws(FerryError) {
            let states = try metricsStates()
            metrics.update(states)
            try metrics.write(states)
            lastMetricsError = nil
        } catch {
            if error.message != lastMetricsError {
                lastMetricsError = error.message
                emit("", .warning(message: "metrics: \(error.message)"))
            }
        }
    }

    // MARK: reload

    /// Tells a `ferry reload` client how its reload went (the answer ends the exchange).
    private static func answerReload(_ client: ControlConnection, refusal: FerryError?, config: Config) {
        if let refusal {
            client.send("{\"event\":\"reload-refused\",\"message\":\(JSONText.quote(refusal.message))"
                        + (refusal.hint.map { ",\"hint\":\(JSONText.quote($0))" } ?? "") + "}")
        } else {
            client.send("{\"event\":\"reloaded\",\"config\":\(JSONText.quote(config.path)),\"sessions\":\(JSONText.quote(config.sessions.map(\.name).joined(separator: ",")))}")
        }
        client.finish()
    }

    /// Re-reads the config; returns why it was refused, or nil when the new one applies.
    @discardableResult
    private func reload() -> FerryError? {
        notifier.reloading()
        let fresh: Config
        do throws(FerryError) {
            fresh = try reloadConfig(config.path)
            if fresh.agent.state != config.agent.state {
                throw .usage("\(config.path): [agent] key 'state': the state directory cannot change while the agent runs (\(config.agent.state) → \(fresh.agent.state))",
                             hint: "restart the agent to move its state")
            }
        } catch {
            emit("", .agent(action: "reload-refused", message: error.message + "; the agent goes on with the config it has"))
            notifier.ready(status: statusLine())
            return error
        }
        for w in fresh.warnings { emit("", .warning(message: w)) }
        var added: [String] = [], removed: [String] = []
        let names = Set(fresh.sessions.map(\.name))
        for name in slots.keys.sorted() where !names.contains(name) {
            removed.append(name)
            if let token = slots[name]!.running {
                token.request("session '\(name)' was removed from the config")
                slots[name]!.removed = true
            } else {
                slots[name] = nil
                try? store.recordAgentState(session: name, pid: nil, state: nil, nextPoll: nil)
            }
        }
        for session in fresh.sessions {
            if var slot = slots[session.name], !slot.removed {
                // Changed settings apply from the next cycle; a running one is not restarted.
                let sooner = session.poll < slot.schedule.interval
                // Any changed setting (a filter, the remote, the layout) may need the tree looked at
                // again: the next poll scans, even when the manifest answers 304. Without a watch it
                // does, whatever the running cycle (of the old settings) says when it ends.
                if session != slot.session { slot.watch = nil; slot.inSync = false }
                if slot.held != nil {
                    // Held work waits for the new conditions; with none left, it starts now.
                    slot.held = DiscretionGate(session: session, agent: fresh.agent, clock: clock)
                    if slot.held == nil && slot.running == nil { slot.due = clock.monotonic() }
                }
                slot.session = session
                slot.schedule.interval = session.poll
                slot.schedule.firstRetry = session.retryDelay
                if sooner && slot.running == nil { slot.due = min(slot.due, clock.monotonic() + session.poll) }
                slots[session.name] = slot
            } else if slots[session.name] == nil {
                added.append(session.name)
                add(session)
            }
        }
        runner.follow(fresh.agent, sessions: fresh.sessions.count)
        metrics?.budget = runner.budget
        if fresh.agent.metrics != config.agent.metrics {
            emit("", .warning(message: "[agent] metrics changed; the change takes effect when the agent restarts"))
        }
        if fresh.agent.metricsListen != config.agent.metricsListen {
            emit("", .warning(message: "[agent] metrics-listen changed; the change takes effect when the agent restarts"))
        }
        hooks?.update(sessions: fresh.sessions)
        config = fresh
        var parts = [Plural.count(fresh.sessions.count, "session")]
        if !added.isEmpty { parts.append("started " + added.joined(separator: ", ")) }
        if !removed.isEmpty { parts.append("stopped " + removed.joined(separator: ", ") + " (their tasks are kept)") }
        emit("", .agent(action: "reloaded", message: "reloaded \(config.path): " + parts.joined(separator: "; ")))
        sayIfIdle()
        notifier.ready(status: statusLine())
        return nil
    }

    /// An agent started before its sessions were written (the package's config names none) runs
    /// and waits for a reload, and says so where an operator looks: the journal and `status`.
    private func sayIfIdle() {
        guard config.sessions.isEmpty else { return }
        emit("", .warning(message: "\(config.path) names no session: the agent waits; add a [session NAME] section, give the units its directory "
                                   + "(ferry config units), then restart (systemctl restart ferry), or reload where the agent may already write it (ferry reload)"))
    }

    // MARK: reporting

    private func emit(_ session: String, _ body: Event.Body) {
        hub.event(Event(time: clock.now(), session: session, body: body))
    }

    private func keepWatchdog() {
        guard let interval = notifier.watchdogInterval else { return }
        let now = clock.monotonic()
        if now - lastWatchdog >= interval {
            lastWatchdog = now
            notifier.watchdog()
        }
    }

    /// One line for systemd's STATUS=: how many sessions run, wait or idle.
    private func statusLine() -> String {
        let running = slots.values.filter { $0.running != nil }.count
        let waiting = slots.values.filter { $0.running == nil && $0.state.isWaiting }.count
        let failed = slots.values.filter { $0.running == nil && $0.state.isFailed }.count
        let held = slots.values.filter { $0.running == nil && $0.held != nil }.count
        if slots.isEmpty { return "no session configured; waiting for a reload" }
        var parts = [Plural.count(slots.count, "session")]
        if running > 0 { parts.append("\(running) running") }
        if held > 0 { parts.append("\(held) held for discretionary conditions") }
        if waiting > 0 { parts.append("\(waiting) waiting for connectivity") }
        if failed > 0 { parts.append("\(failed) failed") }
        return parts.joined(separator: ", ")
    }
}

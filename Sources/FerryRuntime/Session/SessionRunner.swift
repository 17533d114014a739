import Synchronization
import FerryCore

/// Runs the sessions of `sync now`, `resume`, `check --repair` and the agent: each session's cycle
/// on a thread of its own — refresh (fetch, scan, hash, plan, queue), its transfers through the one
/// engine the runner owns, settle (deletions, outcome) — so several sessions transfer at the same
/// time under the global `transfers` limit. Events and progress from every thread reach the
/// observer one at a time.
public final class SessionRunner {
    /// One session to run, and how.
    public struct Job: Sendable {
        public var session: SessionConfig
        public var options: SyncOptions
        public init(session: SessionConfig, options: SyncOptions) {
            self.session = session
            self.options = options
        }
    }

    private var agent: AgentConfig
    private let engine: TransferEngine
    private let clock: any Clock

    /// `clock`: the engine's (its buckets, its ticks, the bandwidth schedule); the runs go by their own
    /// (`SyncOptions.stop`), the same one where the runner is made.
    public init(agent: AgentConfig, clock: any Clock) throws(FerryError) {
        self.agent = agent
        self.clock = clock
        engine = try TransferEngine(concurrency: agent.transfers, clock: clock)
        engine.bandwidth = agent.bwlimit
        budget = agent.budget.map { BudgetMeter(budget: $0, state: agent.state, clock: clock) }
        engine.budget = budget
    }

    deinit { engine.shutdown() }

    /// Runs the jobs at the same time, their events going to every sink; returns their results in
    /// the jobs' order.
    /// A job that gets no thread of its own (none can be had) runs on the caller's, after the
    /// others have started.
    public func run(_ jobs: [Job], sinks: [EventSink]) -> [SyncResult] {
        let hub = EventHub(sinks)
        engine.sessions = Set(jobs.map(\.session.name)).count
        let runs = jobs.map { SessionRun(session: $0.session, agent: agent, observer: hub, options: $0.options, engine: engine) }
        let running = runs.map { sync in try? BackgroundWork(name: "ferry-session") { () throws(Never) -> SyncResult in sync.run() } }
        return zip(runs, running).map { sync, work in work?.wait() ?? sync.run() }
    }

    /// Starts one job on a thread of its own and returns at once; `finished` gets its result on
    /// that thread (the agent's way: a cycle per session as its poll comes due). Throws when no
    /// thread can be had: the job did not start.
    public func start(_ job: Job, observer: EventSink, finished: @escaping @Sendable (SyncResult) -> Void) throws(FerryError) {
        let sync = SessionRun(session: job.session, agent: agent, observer: observer, options: job.options, engine: engine)
        _ = try BackgroundWork(name: "ferry-session") { () throws(Never) -> SyncResult in
            let result = sync.run()
            finished(result)
            return result
        }
    }

    /// A reload's `[agent]` limits: `transfers` (running transfers are not restarted), `bwlimit`
    /// (running transfers follow the new rate) and `budget` (a changed one from the next transfer
    /// on; what the period used stays in the state); and how many sessions share the transfers.
    public func follow(_ fresh: AgentConfig, sessions: Int) {
        engine.concurrency = fresh.transfers
        engine.bandwidth = fresh.bwlimit
        engine.sessions = sessions
        if fresh.budget != budget?.budget {
            budget = fresh.budget.map { BudgetMeter(budget: $0, state: agent.state, clock: clock) }
            engine.budget = budget
        }
    }

    /// The machine's byte budget, as the runs spend it (nil: none).
    public private(set) var budget: BudgetMeter?

    /// How many sessions share the transfers (the agent's: its config's), so that each leaves the
    /// others a share (`TransferEngine.share`).
    public var sessions: Int {
        get { engine.sessions }
        set { engine.sessions = newValue }
    }
}

/// Fans events and progress out to every sink, one call at a time, whichever thread they come from.
public final class EventHub: EventSink, @unchecked Sendable {
    private let sinks: [EventSink]
    private let lock = Mutex(())

    public init(_ sinks: [EventSink]) { self.sinks = sinks }

    public func event(_ event: Event) { lock.withLock { _ in for sink in sinks { sink.event(event) } } }
    public func progress(_ progress: SyncProgress) { lock.withLock { _ in for sink in sinks { sink.progress(progress) } } }
}

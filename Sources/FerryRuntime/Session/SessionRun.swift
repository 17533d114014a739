import Glibc
import FerryCore

/// Progress of one run, for progress bars.
public struct SyncProgress: Sendable {
    public struct Active: Sendable {
        public let path: RelativePath
        public let done: Int64
        public let size: Int64?
    }
    public var session: String
    public var filesTotal = 0
    public var filesDone = 0
    public var filesFailed = 0
    public var bytesTotal: Int64 = 0
    /// Bytes of finished files plus bytes written so far to files in flight.
    public var bytesDone: Int64 = 0
    public var active: [Active] = []
    /// Files in flight beyond those `active` lists (a follower of the agent's cycle is sent the
    /// largest few: `controlLine`).
    public var moreActive = 0

    public init(session: String) { self.session = session }
}

/// Where events and progress go: the terminal or `--json` lines today; the journal, hooks, metrics
/// and sd_notify with the agent. A sink is called one event at a time (`EventHub`).
public protocol EventSink: AnyObject {
    func event(_ event: Event)
    func progress(_ progress: SyncProgress)
}

public struct SyncOptions: Sendable {
    public var dryRun = false
    /// New downloads begin no earlier than this (`--not-before`); overrides `earliest-begin`.
    public var notBefore: EarliestBegin?
    /// When to stop early (deadline, signal); a stopped run exits 3 and the next one resumes.
    /// Its clock is the run's.
    public var stop: StopCondition
    /// Try a failed manifest fetch again within the run (`retries`). The agent says no: its poll
    /// schedule is the retry.
    public var retryManifest = true
    /// Nothing under the local root changed since a run left the session in sync (the agent's
    /// inotify watch says so): an unchanged manifest (304) ends the run at once, in sync.
    public var localUnchanged = false
    /// The run's own `bwlimit` and `transfers` in place of the engine's global ones (a `sync now`
    /// handed over to the agent with `--bwlimit` or `--transfers`); nil: the global ones.
    public var limits: RunLimits?
    public init(dryRun: Bool = false, stop: StopCondition) {
        self.dryRun = dryRun
        self.stop = stop
    }
}

/// The outcome of one run for one session.
public struct SyncResult: Sendable {
    public var session: String
    public var exitCode: ExitCode = .inSync
    /// What the run did with its files (`TransferCounts`): the transfer stage's counts, and the
    /// cycle's own (files that could not be read, a path in the way, deletions).
    public var counts = TransferCounts()
    /// A pull with mirrors: what each source served (`PullSources`).
    public var sources: [SourceCount] = []
    /// A pull: the large files fetched whole, their delta not taken, and why.
    public var fallbacks: [FallbackRecord] = []
    /// The run-level error, if the run could not go on.
    public var error: FerryError?
    /// Why the run did not end in sync (failed files, refused deletions), or what a dry run would do.
    public var message: String?
    /// What the user can do about it.
    public var hint: String?
}

extension SessionRun {
    /// The session's status report, when it has a report location and one is due.
    private func report(_ result: SyncResult, store: StateStore) {
        guard session.report != nil else { return }
        let origin = result.sources.filter { $0.source == PullSources.origin }.reduce(0) { $0 + $1.bytes }
        let mirrors = result.sources.filter { $0.source != PullSources.origin }.reduce(0) { $0 + $1.bytes }
        let record = try? store.session(session.name)
        let tree = manifests.cachedBytes(record: record).map { String(SHA256Hasher.digest(of: $0).hex.prefix(24)) }
        let facts = StatusReports.RunFacts(exit: result.exitCode, originBytes: result.sources.isEmpty ? result.counts.bytes : origin,
                                           mirrorBytes: mirrors, tree: tree)
        if let warning = StatusReports.publish(session: session, agent: agent, store: store, facts: facts, clock: clock) {
            emit(.warning(message: warning))
        }
    }
}

extension SyncResult {
    /// Why work was left for a later run, a sentence each: suspended by `ferry cancel`, delayed to a
    /// time, held by the session's conditions. `noun` names the work, singular: file, upload.
    func leftForLater(_ noun: String) -> [String] {
        var reasons: [String] = []
        func are(_ n: Int) -> String { n == 1 ? "is" : "are" }
        let (suspended, delayed, held) = (counts.suspended, counts.delayed, counts.held)
        if suspended > 0 { reasons.append("\(Plural.count(suspended, noun)) \(are(suspended)) suspended by ferry cancel; ferry resume continues \(suspended == 1 ? "it" : "them")") }
        if delayed > 0 { reasons.append("\(Plural.count(delayed, noun)) \(are(delayed)) delayed; the first may begin at \(counts.nextBegin?.rfc3339 ?? "?"), in a later run") }
        if held > 0, let heldFor = counts.heldFor, counts.heldUntil != nil {
            reasons.append("\(Plural.count(held, noun)) \(held == 1 ? "waits" : "wait") for \(heldFor); \(held == 1 ? "it begins" : "they begin") then, in a later run")
        } else if held > 0, let heldFor = counts.heldFor {
            reasons.append("\(Plural.count(held, noun)) \(held == 1 ? "waits" : "wait") for the session's discretionary conditions: \(heldFor); \(held == 1 ? "it begins" : "they begin") when the conditions hold")
        }
        return reasons
    }
}

/// What a session's run and the direction's cycle share: the session, the agent's settings, where
/// events go, the run's options and the one transfer engine.
class SessionWork {
    let session: SessionConfig
    let agent: AgentConfig
    let observer: EventSink
    let options: SyncOptions
    let engine: TransferEngine

    init(session: SessionConfig, agent: AgentConfig, observer: EventSink, options: SyncOptions, engine: TransferEngine) {
        self.session = session
        self.agent = agent
        self.observer = observer
        self.options = options
        self.engine = engine
    }

    /// The run's clock (`SyncOptions.stop`): every time the run reads comes from it.
    var clock: any Clock { options.stop.clock }

    func emit(_ body: Event.Body) {
        observer.event(Event(time: clock.now(), session: session.name, body: body))
    }

    /// The session's manifest: fetched, parsed and kept (the one last accepted or published).
    var manifests: ManifestSource { ManifestSource(session: session, state: agent.state) }
}

/// One run of one session, either direction: the session's lock, the run recorded in the state
/// store (started, finished, exit code, held), the direction's cycle (`PullSync`, `PushSync`),
/// and the events that open and close it. A dry run's state is `DryRun`: it takes no lock and
/// records nothing. The cycle hands back its result; a run-level error ends it, what it did counted.
final class SessionRun: SessionWork {
    func run() -> SyncResult {
        let started = clock.monotonic()
        var result = SyncResult(session: session.name)
        emit(.syncStarted(direction: session.direction, dryRun: options.dryRun))
        var state: SessionState?
        // Held until the report is out: two runs of a session never number reports alike.
        var lock: SessionLock?
        do throws(FerryError) {
            let store = try StateStore(directory: agent.state, clock: clock)
            let stored = StoredState(store: store, session: session, stateDirectory: agent.state)
            let kept: SessionState = options.dryRun ? DryRun(stored, session: session, stateDirectory: agent.state)
                                                    : stored
            state = kept
            lock = try kept.beginRun(pid: getpid(), deadline: options.stop.deadlineTime)
            switch session.direction {
            case .pull:
                let pull = PullSync(session: session, agent: agent, observer: observer, options: options,
                                    engine: engine)
                result = try pull.cycle(state: kept)
            case .push:
                let push = PushSync(session: session, agent: agent, observer: observer, options: options,
                                    engine: engine)
                try push.cycle(state: kept, result: &result)
            }
            if let error = result.error {
                result.end(with: options.stop.explaining(error))
            } else {
                // A file that failed never leaves the run in sync, whichever way the cycle ended: the
                // exit code is what tells a caller, and the agent, to try it again.
                let failed = RunOutcome(counts: TransferCounts(failed: result.counts.failed))
                result.exitCode = ExitCode.worst([result.exitCode] + failed.codes)
            }
        } catch {
            result.end(with: options.stop.explaining(error))
        }
        // A run refused as busy never ran: the status belongs to the process that holds the session.
        if let state, result.error?.category != .busy {
            state.endRun(result)
            if !options.dryRun, let stored = state as? StoredState { report(result, store: stored.store) }
        }
        withExtendedLifetime(lock) {}
        emit(.syncFinished(exitCode: result.exitCode.rawValue, transferred: result.counts.transferred, failed: result.counts.failed,
                           deleted: result.counts.deleted, bytes: result.counts.bytes, seconds: clock.monotonic() - started,
                           message: result.message, hint: result.hint, dryRun: options.dryRun))
        return result
    }
}

extension SyncResult {
    /// The run ended with `error`: its exit code, message and hint are the error's.
    mutating func end(with error: FerryError) {
        self.error = error
        exitCode = RunOutcome(error: error.category).exitCode
        message = error.message
        hint = error.hint
    }
}

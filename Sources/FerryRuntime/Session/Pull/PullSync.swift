import FerryCore

/// One pull run for one session: a pipeline of stages, each a type that takes the value the
/// stage before handed on and hands on the next (`Onward`), or ends the run with its result.
/// docs/design.md ("The pull, stage by stage") has the table of what each stage takes and gives.
final class PullSync: SessionWork {
    func cycle(state: SessionState) throws(FerryError) -> SyncResult {
        let pull = try PullRun(self, state: state)
        // The objects the session's caches keep settle however the run ends.
        defer { pull.caches.settle() }
        let planned = try (options.dryRun ? InspectStage(pull: pull).run() : RecoverStage(pull: pull).run())
            .then(ObserveStage(pull: pull).run)
            .then(TrustStage(pull: pull).run)
            .then(ReleaseStage(pull: pull).run)
            .then(PlanStage(pull: pull).run)
        // A dry run ends with its plan: it changes nothing, here or in the state (`DryRun`).
        if options.dryRun { return try planned.finish(DryRunReport(pull: pull).run) }
        return try planned
            .then(BuildStage(pull: pull).run)
            .then(PrepareStage(pull: pull).run)
            .then(TransferStage(pull: pull).run)
            .then(CommitStage(pull: pull).run)
            .finish(ReportStage(pull: pull).run)
    }
}

/// What a stage hands on: the next stage's value, or the run's result when it ends there.
enum Onward<Value> {
    case go(Value)
    case end(SyncResult)

    /// The next stage's answer, or this end handed on.
    func then<Out>(_ stage: (Value) throws(FerryError) -> Onward<Out>) throws(FerryError) -> Onward<Out> {
        switch self {
        case let .go(value): return try stage(value)
        case let .end(result): return .end(result)
        }
    }

    /// The last stage's result, or this end.
    func finish(_ stage: (Value) throws(FerryError) -> SyncResult) throws(FerryError) -> SyncResult {
        switch self {
        case let .go(value): return try stage(value)
        case let .end(result): return result
        }
    }
}

/// What the stages of one pull run share: the session, the run's options and clock, where events
/// go, the engine; the session's state (`SessionState`: for a dry run, `DryRun`, which keeps
/// nothing); the remote and the run's sources (`PullSources`), the key sets the session trusts
/// (`keys`), and what the session's caches keep when the run ends (`caches`).
final class PullRun {
    let session: SessionConfig
    let agent: AgentConfig
    let options: SyncOptions
    let engine: TransferEngine
    let observer: EventSink
    let state: SessionState
    let remote: Remote
    let sources: PullSources
    let caches = SessionCaches()
    /// The large files this run fetched whole, said once each (`DeltaFallbacks`).
    let fallbacks: DeltaFallbacks
    /// The key sets this session trusts, read from the state when first needed (`TrustStage`).
    lazy var keys: KeyChain = state.keyChain()

    init(_ work: SessionWork, state: SessionState) throws(FerryError) {
        session = work.session
        agent = work.agent
        options = work.options
        engine = work.engine
        observer = work.observer
        self.state = state
        let firstBytes = PullSources.firstBytes(of: work.session)
        remote = try Remotes.open(work.session, clock: work.clock, stop: work.options.stop,
                                  meter: PullSources.originMeter(work.session, firstBytes))
        let (observer, name, clock) = (observer, work.session.name, work.clock)
        let emit: (Event.Body) -> Void = { body in observer.event(Event(time: clock.now(), session: name, body: body)) }
        sources = PullSources(session: session, remote: remote, firstBytes: firstBytes, clock: clock, stop: options.stop, emit: emit)
        fallbacks = DeltaFallbacks(emit: emit)
    }

    var store: StateStore { state.store }
    /// The run's clock (`SyncOptions.stop`): every time the run reads comes from it.
    var clock: any Clock { options.stop.clock }
    /// The session's manifest as it is kept (`ManifestSource`).
    var manifests: ManifestSource { ManifestSource(session: session, state: agent.state) }

    func emit(_ body: Event.Body) {
        observer.event(Event(time: clock.now(), session: session.name, body: body))
    }

    /// What fetching metadata objects found, said once each: mirrors demoted for a wrong object,
    /// and objects the remote itself holds wrong (remembered, `BadObjects`, so not asked again).
    func sayWhatObjectsFound(_ objects: ManifestObjects) {
        sources.sayDemotions()
        if let problem = objects.takeBundleProblem() { emit(.warning(message: problem)) }
        let bad = objects.bad?.takeNew() ?? []
        guard let first = bad.first else { return }
        let named = bad.count == 1 ? "object \(first.hex) does" : "objects \(first.hex) and \(bad.count - 1) more do"
        emit(.warning(message: "the remote's metadata \(named) not match \(bad.count == 1 ? "its" : "their") hash: not "
                               + "fetched "
                               + "again before the manifest changes or verify-interval "
                               + "(\(Units.formatDuration(session.verifyInterval))) passes"))
    }

    /// The run's result when it ends with nothing else to say of its files.
    func result(_ exitCode: ExitCode = .inSync, message: String? = nil) -> SyncResult {
        var result = SyncResult(session: session.name)
        result.exitCode = exitCode
        result.message = message
        return result
    }
}

/// What the session's metadata-object cache keeps when a run ends: the objects of the tree taken
/// and the content indexes of the files it lists; the rest goes (`ManifestObjects.sweep`), with
/// the map of which index describes which content (`IndexMap`) written again. Only a run that
/// prepared its transfers knows the indexes (`arm`): one that ends before sweeps nothing (the
/// next one does).
final class SessionCaches {
    private var objects: ManifestObjects?
    private var kept: [SHA256Digest] = []
    private var entries: [ManifestEntry] = []
    private var mapPath = ""

    /// These stay cached.
    func keep(_ names: [SHA256Digest]) { kept += names }

    /// The run knows every object it keeps once its transfers are prepared.
    func arm(_ objects: ManifestObjects, entries: [ManifestEntry], mapPath: String) {
        self.objects = objects
        self.entries = entries
        self.mapPath = mapPath
    }

    func settle() {
        guard let objects else { return }
        objects.sweep(keeping: kept)
        IndexMap.write(mapPath, entries)
    }
}

/// The large files a run fetched whole, their delta not taken (`DeltaFallback`): each said once
/// (a `delta-fallback` event) and kept for the run's result, which the state keeps for `status`.
/// Called on the session's thread, or the engine's while the session waits on it.
final class DeltaFallbacks {
    private let emit: (Event.Body) -> Void
    private(set) var records: [FallbackRecord] = []
    private var said = Set<RelativePath>()

    init(emit: @escaping (Event.Body) -> Void) { self.emit = emit }

    func say(_ path: RelativePath, _ reason: DeltaFallback, _ message: String) {
        guard said.insert(path).inserted else { return }
        records.append(FallbackRecord(path: path.string, reason: reason))
        emit(.deltaFallback(path: path, reason: reason, message: message))
    }
}

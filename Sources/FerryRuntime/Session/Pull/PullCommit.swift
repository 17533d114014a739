import FerryCore

/// What transfer hands on: what the run did with its files so far, and why it stopped early if
/// it did. A failure of the run's own (the state store, the local directory) is carried, not
/// thrown, so what moved before it is still counted.
struct Transferred {
    let prepared: Prepared
    let counts: TransferCounts
    let sources: [SourceCount]
    let unstorableMtimes: [(RelativePath, CachedHash)]
    let localIOError: String?
    /// Why the transfers ended before all of them did, if they did.
    let stopped: String?
    let failure: FerryError?
}

/// Transfer: the downloads through the engine (`PullTransfers`, the session's `TransferSource`:
/// partial files, checkpoints, verify, commit into place, retries), each from the source
/// `PullSources` picks; then what each source served is said.
struct TransferStage {
    let pull: PullRun

    func run(_ prepared: Prepared) throws(FerryError) -> Onward<Transferred> {
        let plan = prepared.plan
        guard !plan.downloads.isEmpty else {
            return .go(Transferred(prepared: prepared, counts: prepared.counts, sources: [],
                                   unstorableMtimes: prepared.unstorableMtimes,
                                   localIOError: nil, stopped: pull.options.stop.reason, failure: nil))
        }
        // Small files a pack holds are written from it as it comes; their transfers then need no request.
        let packs = PullPacks(pull: pull)
        let fill = packs.start(prepared)
        let transfers = PullTransfers(session: pull.session, root: prepared.root, store: pull.store,
                                      sources: pull.sources, locate: prepared.locate, deltas: prepared.deltas,
                                      fallbacks: pull.fallbacks, observer: pull.observer, emit: { pull.emit($0) },
                                      plan: plan, stop: pull.options.stop,
                                      gate: DiscretionGate(session: pull.session, agent: pull.agent, clock: pull.clock))
        transfers.runLimits = pull.options.limits
        transfers.packs = fill
        transfers.run(plan.downloads, tasks: prepared.tasks, engine: pull.engine)
        let packed = fill.map { packs.say($0.finish(), objects: prepared.preparation.objects) } ?? 0
        var counts = prepared.counts
        counts += transfers.counts
        counts.bytes += packed
        var stopped = transfers.stopped
        if stopped == nil && transfers.unfinished > 0 {
            // Never report "in sync" with work left undone, whatever the reason.
            stopped = "\(Plural.count(transfers.unfinished, "download")) did not finish"
        }
        return .go(Transferred(prepared: prepared, counts: counts, sources: pull.sources.account(),
                               unstorableMtimes: prepared.unstorableMtimes + transfers.unstorableMtimes,
                               localIOError: transfers.localIOError,
                               stopped: stopped, failure: transfers.storeError ?? transfers.abort))
    }
}

/// What commit hands on: the run's outcome, and every reason it is not in sync so far.
struct Committed {
    let plan: Plan
    let outcome: RunOutcome
    let counts: TransferCounts
    let sources: [SourceCount]
    let exitCode: ExitCode
    let stopped: String?
    let localIOError: String?
    /// Why the generation built was not switched to (or was switched back), if it was not.
    let unswitched: String?
    /// Deletions refused, and what to do about it.
    let refusal: String?
    let hint: String?
}

/// Commit: the mtimes the filesystem could not store said once; the indexes of what was fetched
/// whole read for next time; deletions, only once every transfer succeeded and capped
/// (`max-delete`); then the outcome, and with `layout = generations` the switch to the generation
/// built and its `on-switch-check`. A failure of the run's own ends the run here, what it did
/// still counted.
struct CommitStage {
    let pull: PullRun

    func run(_ transferred: Transferred) throws(FerryError) -> Onward<Committed> {
        let prepared = transferred.prepared
        if let failure = transferred.failure { return .end(failed(failure, transferred.counts, transferred.sources)) }
        sayUnstorable(transferred.unstorableMtimes)
        if transferred.stopped == nil {
            pull.caches.keep(prepared.preparation.cacheIndexes(prepared.plan.downloads, skipping: prepared.deltas))
            pull.sayWhatObjectsFound(prepared.preparation.objects)
        }
        var counts = transferred.counts
        do throws(FerryError) {
            let refused = try commitDeletions(prepared.plan, root: prepared.root, stopped: transferred.stopped,
                                              counts: &counts)
            let outcome = RunOutcome(localIOFailed: transferred.localIOError != nil, counts: counts,
                                     deletionsRefused: prepared.plan.refusedDeletions != nil,
                                     stopped: transferred.stopped != nil)
            let (exitCode, unswitched) = try commitGeneration(prepared, exitCode: outcome.exitCode)
            // Whole in place (and past its check): the release this machine now serves.
            if exitCode == .inSync && unswitched == nil {
                try pull.store.recordServed(session: pull.session.name, version: prepared.manifest.version, now: pull.clock.now())
            }
            return .go(Committed(plan: prepared.plan, outcome: outcome, counts: counts, sources: transferred.sources,
                                 exitCode: exitCode,
                                 stopped: transferred.stopped, localIOError: transferred.localIOError,
                                 unswitched: unswitched,
                                 refusal: refused?.message, hint: refused?.hint))
        } catch {
            return .end(failed(error, counts, transferred.sources))
        }
    }

    /// The run ends with `error`, what it did counted.
    private func failed(_ error: FerryError, _ counts: TransferCounts, _ sources: [SourceCount]) -> SyncResult {
        var result = pull.result()
        result.counts = counts
        result.sources = sources
        result.fallbacks = pull.fallbacks.records
        result.error = error
        return result
    }

    /// Said once a run: the mtimes the manifest gives that the filesystem could not store.
    private func sayUnstorable(_ unstorableMtimes: [(RelativePath, CachedHash)]) {
        if let (path, cache) = unstorableMtimes.first, let wanted = cache.wantedMtime {
            let more = unstorableMtimes.count - 1
            let others = more > 0 ? " (and \(Plural.count(more, "more file")))" : ""
            pull.emit(.warning(message: "this filesystem cannot store the mtime the manifest gives "
                                        + "\(Printable.name(path.string))\(others): "
                + "it asked for \(wanted.rfc3339) and the filesystem stored \(cache.mtime.rfc3339); ferry keeps what "
                + "was stored and does not set it again"))
        }
    }

    /// Deletions only after every transfer succeeded (data-safety rule 7), and capped
    /// (`max-delete`): a refusal is said, and returned with what to do about it.
    private func commitDeletions(_ plan: Plan, root: LocalRoot, stopped: String?,
                                 counts: inout TransferCounts) throws(FerryError) -> (message: String, hint: String)? {
        let session = pull.session
        let unfinished = counts.failed + counts.notDone
        if let refused = plan.refusedDeletions {
            let message = "refused to delete \(Plural.count(refused.count, "file")): more than max-delete = "
                          + "\(session.maxDelete) allows (\(refused.limit) of the "
                          + "\(Plural.count(refused.managed, "file")) in \(Printable.name(session.local))); nothing "
                          + "was deleted"
            pull.emit(.warning(message: message))
            return (message, "if this is intended, raise max-delete for session '\(session.name)' (a count like "
                             + "\(refused.count), or a percentage like 100%)")
        }
        guard !plan.deletions.isEmpty || !plan.directoryRemovals.isEmpty else { return nil }
        if let stopped {
            if !plan.deletions.isEmpty {
                pull.emit(.warning(message: "\(Plural.count(plan.deletions.count, "deletion")) postponed: \(stopped)"))
            }
        } else if unfinished > 0 {
            if !plan.deletions.isEmpty {
                pull.emit(.warning(message: "\(Plural.count(plan.deletions.count, "deletion")) postponed because "
                                            + "\(Plural.count(unfinished, "file")) did not arrive"))
            }
        } else {
            for path in plan.deletions {
                do {
                    try root.delete(path)
                    counts.deleted += 1
                    pull.emit(.fileDeleted(path: path))
                } catch {
                    counts.failed += 1
                    pull.emit(.fileFailed(path: path, error: error.message))
                }
            }
            try pull.store.forgetHashes(session: session.name, plan.deletions)
            for dir in plan.directoryRemovals { root.removeDirectoryIfEmpty(dir) }
            try root.syncDirectories()
        }
        return nil
    }

    /// With `layout = generations`, the generation built becomes current once the run is
    /// otherwise in sync (`switchGeneration`). Returns the exit code, and why it did not switch.
    private func commitGeneration(_ prepared: Prepared, exitCode: ExitCode) throws(FerryError) -> (ExitCode, String?) {
        let mirror = prepared.mirror
        guard let g = mirror.generations, let number = mirror.building else { return (exitCode, nil) }
        guard exitCode == .inSync else {
            return (exitCode, "generation \(g.name(number)) is not complete, so \(Printable.name(pull.session.local)) "
                              + "still shows the one before; the next run goes on with it")
        }
        var checkFailed: String?
        guard let moved = try pull.switchGeneration(g, to: number, mirror: mirror, root: prepared.root,
                                                    tree: prepared.tree, plan: prepared.plan,
                                                   version: prepared.manifest.version, checkFailed: &checkFailed) else {
            return (checkFailed != nil ? .someFilesFailed : exitCode, checkFailed)
        }
        return (.incomplete, "\(Plural.count(moved, "file")) of the current generation changed while generation "
                             + "\(g.name(number)) was built from it (edited in place?), so it was not switched to; the "
                             + "next run hashes \(moved == 1 ? "it" : "them") and goes on with it")
    }
}

/// Report: the run's result, every condition present named, the one that decided the exit code
/// (`outcome`) first.
struct ReportStage {
    let pull: PullRun

    func run(_ committed: Committed) -> SyncResult {
        var result = pull.result(committed.exitCode)
        result.counts = committed.counts
        result.sources = committed.sources
        result.fallbacks = pull.fallbacks.records
        result.hint = committed.hint
        let plan = committed.plan
        let attempted = plan.downloads.count + plan.metadataFixes.count + plan.blocked.count
        var reasons: [String] = []
        if let generation = committed.unswitched { reasons.append(generation) }
        if let localIOError = committed.localIOError { reasons.append(localIOError) }
        if result.counts.failed > 0 {
            reasons.append("\(result.counts.failed) of \(Plural.count(attempted, "file")) failed")
        }
        if let refusal = committed.refusal { reasons.append(refusal) }
        let waiting = result.counts.waiting
        if waiting > 0 {
            let text = "the remote could not be reached for \(Plural.count(waiting, "file")); "
                       + "\(waiting == 1 ? "it waits" : "they wait") for connectivity and the next run tries again"
            if committed.outcome.exitCode == .remoteOrManifest {
                reasons.insert(text, at: 0)
            } else {
                reasons.append(text)
            }
        }
        if let stopped = committed.stopped { reasons.append("\(stopped); the next run resumes where this one stopped") }
        reasons += result.leftForLater("file")
        result.message = reasons.isEmpty ? nil : reasons.joined(separator: "; ")
        return result
    }
}

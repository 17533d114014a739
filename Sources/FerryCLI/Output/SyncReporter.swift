import FerryCore
import FerryRuntime

/// Shows a run to its user: JSON lines, human lines plus progress bars on a terminal, or nothing
/// but errors. Every name is shown through `Printable.name`; a run that failed ends with one
/// summary that says so and why.
final class SyncReporter: EventSink {
    let mode: OutputMode
    private let bars: ProgressBars?
    /// A run refused as busy is not an error to report (`ferry resume` leaves its work to the holder).
    var busyIsExpected = false
    /// Sessions whose run pushes (told by `sync-started`): their counts say "upload".
    private var pushing = Set<String>()
    /// `ferry agent`'s log: no progress bars, and a poll that found nothing to do says nothing
    /// (a session's state changes are reported instead).
    let agentLog: Bool

    /// The events shown (`-v`: debug; the agent's `log-level`). `--quiet` has its own rendering.
    let level: LogLevel

    /// `clock`: the progress bars' rates go by it.
    init(mode: OutputMode, agentLog: Bool = false, level: LogLevel = .info, clock: any Clock) {
        self.mode = mode
        self.agentLog = agentLog
        self.level = mode == .json && !agentLog ? .debug : level
        bars = (mode == .human && Console.stderrIsTerminal && !agentLog) ? ProgressBars(clock: clock) : nil
    }

    func event(_ event: Event) {
        // Which sessions push is known from their start, whatever is shown of it.
        if case let .syncStarted(direction, _) = event.body {
            if direction == .push { pushing.insert(event.session) } else { pushing.remove(event.session) }
            // A new run says a shared cause again.
            causesSaid = causesSaid.filter { $0.first != event.session }
        }
        if mode != .quiet && event.body.level > level { return }
        switch mode {
        case .json:
            Console.json(event.json)
        case .quiet:
            quiet(event)
        case .human:
            human(event)
        }
    }

    func progress(_ progress: SyncProgress) {
        bars?.update(progress, force: progress.active.isEmpty)
    }

    /// Whether progress is drawn (human output on a terminal): a run handed over to the agent
    /// asks it for progress only then.
    var drawsBars: Bool { bars != nil }

    /// The last error each retried thing (a session's manifest, a file) was retried for, until its
    /// run ends: a remote that stays down is one line, not one per try (`--json` has every try).
    private struct Retried: Hashable {
        let session: String
        let path: String?
    }
    private var retried: [Retried: String] = [:]

    /// Whether this retry is the first with this error for its manifest or file in this run.
    private func firstRetry(_ session: String, _ path: String?, _ error: String) -> Bool {
        let key = Retried(session: session, path: path)
        let identity = SharedCause.retryIdentity(error)
        guard retried[key] != identity else { return false }
        if retried.count < 10_000 { retried[key] = identity }
        return true
    }

    /// The shared causes (`SharedCause`: a full disk) already said for a session in this run.
    private var causesSaid = Set<[String]>()

    /// Files fetched whole, by session and reason, in this run: the first is said with its
    /// detail, the others counted and said in one line as the run ends (one line per cause).
    private var fallbacks: [String: [DeltaFallback: Int]] = [:]

    /// A failed file's line, or nil when its cause is the disk's and was said for this run.
    private func failureLine(_ event: Event, _ path: RelativePath, _ error: String) -> String? {
        let text = "ferry: \(Printable.name(event.session)): \(Printable.name(path.string)): \(error)"
        guard let cause = SharedCause.of(error) else { return text }
        guard causesSaid.insert([event.session, cause]).inserted else { return nil }
        return text + " (further files failing for this reason in this run are not shown)"
    }

    private func line(_ text: String) {
        bars?.clear()
        Console.out(text)
    }

    private func warn(_ text: String) {
        bars?.clear()
        Console.warning(text)
    }

    /// `--quiet`: errors only — failed files, and why a run did not end in sync.
    private func quiet(_ event: Event) {
        var s: String { Printable.name(event.session) }  // most events print nothing here
        switch event.body {
        case let .fileFailed(path, error):
            if let text = failureLine(event, path, error) { Console.err(text) }
        case let .agent(action, message) where action == "reload-refused":
            Console.err("ferry: error: \(message)")
        case let .checked(_, _, _, differ, _) where differ > 0:
            Console.err("ferry: \(s): \(Plural.count(differ, "path")) \(differ == 1 ? "differs" : "differ") from the manifest last applied")
        case let .checkFinished(_, message?, hint):
            Console.err("ferry: error: \(s): \(message)")
            if let hint { Console.err("  hint: \(hint)") }
        case let .syncFinished(code, _, _, _, _, _, message, hint, _):
            guard code != ExitCode.inSync.rawValue && code != ExitCode.incomplete.rawValue, let message else { return }
            if busyIsExpected && code == ExitCode.sessionBusy.rawValue { return }
            Console.err("ferry: error: \(s): \(message)")
            if let hint { Console.err("  hint: \(hint)") }
        default:
            break
        }
    }

    private func human(_ event: Event) {
        guard !agentLogQuiet(event.body) else { return }
        // Every case named here, none by default: a new event cannot go unshown by mistake.
        switch event.body {
        case .replaced, .fileResumed, .fileRestarted, .fileFailed, .fileDeleted, .fileRetrying, .fileWaiting, .fileDelayed, .delayedDue,
             .fileSuspended, .fileInterrupted, .fileStarted, .fileDone, .metadataFixed, .deltaFallback:
            humanFile(event)
        case .manifestFetched, .planned, .deltaPlanned, .sourceServed, .planItem, .checked, .manifestBuilt:
            humanPlan(event)
        case .sessionState, .agent, .uploadsVerified, .generationSwitched, .rolledBack, .rollout, .warning, .syncFinished, .manifestRetrying, .syncStarted,
             .checkFinished, .sessionHeld:
            humanRun(event)
        }
    }

    /// Whether `ferry agent`'s log leaves the event out: a poll with nothing new, or a failed one (its session state says it).
    private func agentLogQuiet(_ body: Event.Body) -> Bool {
        switch body {
        case let .manifestFetched(_, _, _, unchanged, _, _, _) where unchanged && agentLog && level < .debug:
            return true
        case let .planned(p) where agentLog && p.isIdle && level < .debug:
            return true
        case let .syncFinished(code, transferred, failed, deleted, _, _, _, _, _)
            where agentLog && code == ExitCode.inSync.rawValue && transferred + failed + deleted == 0 && level < .debug:
            return true
        case let .syncFinished(code, _, _, _, _, _, _, _, _)
            where agentLog && PollSchedule.outcome(exitCode: ExitCode(rawValue: code) ?? .usage, waiting: 0) == .failed:
            // A failed poll (the remote, the disk): the session-state event that follows says it,
            // with when the agent tries again, and only when it says something new.
            return true
        default:
            return false
        }
    }

    /// A name in a line for people.
    private func name(_ p: RelativePath) -> String { Printable.name(p.string) }

    /// The line of an event about one file (most only with -v).
    private func humanFile(_ event: Event) {
        var s: String { Printable.name(event.session) }
        switch event.body {
        case let .replaced(path, was, now):
            line("\(s): replaced the \(was) \(name(path)) with a \(now)")
        case let .fileResumed(path, offset):
            line("\(s): resuming \(name(path)) at \(Units.formatBytes(offset)) (offset \(offset))")
        case let .fileRestarted(path, reason):
            line("\(s): \(name(path)): \(reason)")
        case let .fileFailed(path, error):
            guard let text = failureLine(event, path, error) else { return }
            bars?.clear()
            Console.err(text)
        case let .fileDeleted(path):
            line("\(s): deleted \(name(path))")
        case let .deltaFallback(path, reason, message):
            let seen = fallbacks[event.session, default: [:]][reason, default: 0]
            fallbacks[event.session, default: [:]][reason] = seen + 1
            guard seen == 0 else { return }
            warn("\(s): \(name(path)): no delta, the whole file is fetched: \(reason.said) (\(message))")
        case let .fileRetrying(path, attempt, delay, error):
            guard firstRetry(event.session, path.string, error) else { return }
            line("\(s): \(name(path)): \(error); trying again (try \(attempt) in \(Units.formatFixed(delay, digits: 1))s; further tries with this error are not shown)")
        case let .fileWaiting(path, error):
            warn("\(s): \(name(path)): waiting for connectivity (\(error)); the next run tries again")
        case let .fileDelayed(path, until):
            line("\(s): \(name(path)): delayed until \(until.rfc3339)")
        case let .delayedDue(path, disposition, reason):
            line("\(s): \(name(path)): delayed download due: \(disposition.rawValue) (\(reason))")
        case let .fileSuspended(path, offset):
            line("\(s): \(name(path)): suspended by ferry cancel at \(Units.formatBytes(offset)); ferry resume continues it")
        case let .fileInterrupted(path, offset):
            line("\(s): \(name(path)): stopped at \(Units.formatBytes(offset)), kept for the next run")
        case let .fileStarted(path, size, reason) where level >= .debug:
            line("\(s): \(pushing.contains(event.session) ? "uploading" : "downloading") \(name(path))" + (size.map { " (\(Units.formatBytes($0)), \(reason.rawValue))" } ?? " (\(reason.rawValue))"))
        case let .fileDone(path, size, fetched, reused, _) where level >= .debug:
            var moved = fetched == size ? Units.formatBytes(size) : "\(Units.formatBytes(size)), \(Units.formatBytes(fetched)) of it transferred"
            if reused > 0 { moved += ", \(Units.formatBytes(reused)) reused from local data" }
            line("\(s): \(pushing.contains(event.session) ? "uploaded" : "done") \(name(path)) (\(moved))")
        case let .metadataFixed(path) where level >= .debug:
            line("\(s): set the mode and mtime of \(name(path))")
        default:
            // Each file is said with -v; without, the run's summary says them.
            break
        }
    }

    /// The lines of an event about a manifest or a plan.
    private func humanPlan(_ event: Event) {
        var s: String { Printable.name(event.session) }
        switch event.body {
        case let .manifestFetched(url, version, files, unchanged, signedBy, _, redirectedTo):
            let v = version.map { "version \($0), " } ?? ""
            let signed = signedBy.map { ", signed by \($0)" } ?? ""
            line("\(s): manifest \(v)\(Plural.count(files, "file"))\(signed)\(unchanged ? " (unchanged)" : "") from \(url)\(redirectedTo.map { " (redirected to \($0))" } ?? "")")
        case let .planned(p):
            var size = Units.formatBytes(p.bytes)
            if p.unknownSizes == p.transfers && p.transfers > 0 { size = "size unknown: the manifest gives none" }
            else if p.unknownSizes > 0 { size += " and \(Plural.count(p.unknownSizes, "file")) of unknown size" }
            var parts = ["\(p.transfers) to \(pushing.contains(event.session) ? "upload" : "download") (\(size))"]
            if p.metadataFixes > 0 { parts.append("\(p.metadataFixes) to fix mode/mtime") }
            if p.deletions > 0 { parts.append("\(p.deletions) to delete") }
            parts.append("\(p.upToDate) up to date")
            if p.hashed > 0 { parts.append("\(p.hashed) hashed") }
            if p.extrasKept > 0 { parts.append("\(Plural.count(p.extrasKept, "extra local file")) kept (delete = no)") }
            if p.skipped > 0 { parts.append("\(p.skipped) not publishable (symlinks, special files or names a manifest cannot carry)") }
            line("\(s): " + parts.joined(separator: ", "))
        case let .deltaPlanned(files, reused, fetch, whole, _):
            var parts: [String] = []
            if files > 0 {
                parts.append("delta for \(Plural.count(files, "file")): \(Units.formatBytes(reused)) reused from local data, \(Units.formatBytes(fetch)) to fetch")
            }
            if whole > 0 { parts.append("\(Plural.count(whole, "indexed file")) fetched whole (too little of \(whole == 1 ? "it" : "them") held locally)") }
            line("\(s): " + parts.joined(separator: "; "))
        case let .sourceServed(c, share):
            var text = "\(s): from \(c.source): \(Units.formatBytes(c.bytes)) in \(Plural.count(c.requests, "request")) (\(Units.formatFixed(share * 100, digits: 0))% of the bytes)"
            if let firstByte = c.firstByte { text += ", first byte in \(SourceCount.seconds(firstByte))" }
            if let demoted = c.demoted { text += "; not used after it \(demoted)" }
            line(text)
        case let .planItem(action, path, reason, size):
            let verb: String
            switch action {
            case "refused-delete": verb = "keep (deleting it is refused by max-delete)"
            case "fix-metadata": verb = "fix the mode or mtime of"
            case "blocked": verb = "fail on"
            default: verb = action
            }
            var text = "\(s): would \(verb) \(name(path))"
            if let size, action == "download" { text += " (\(Units.formatBytes(size))" + (reason.map { ", \($0))" } ?? ")") }
            else if let reason, action != "refused-delete" { text += " (\(reason))" }
            line(text)
        case let .checked(version, listed, hashed, differ, unnoticed):
            let against = "the manifest last applied" + (version.map { " (version \($0))" } ?? "")
            guard differ > 0 else {
                line("\(s): all \(Plural.count(listed, "listed file")) match \(against); \(hashed) hashed")
                return
            }
            var text = "\(s): \(Plural.count(differ, "path")) \(differ == 1 ? "differs" : "differ") from \(against); \(Plural.count(hashed, "file")) hashed"
            if unnoticed > 0 { text += "; \(unnoticed) changed while their size and times did not, which a sync alone does not notice" }
            line(text)
            line("  hint: ferry check --repair records what was found and syncs the session now")
        case let .manifestBuilt(output, version, files, bytes, signedBy, sha256sums):
            let signed = signedBy.map { ", signed by \($0)" } ?? ""
            line("wrote \(Printable.name(output)): version \(version), \(Plural.count(files, "file")), \(Units.formatBytes(bytes))\(signed)")
            if let sha256sums { line("wrote \(Printable.name(sha256sums)): the same files for sha256sum -c") }
        default:
            break
        }
    }

    /// The lines of an event about a run, its session or the agent.
    private func humanRun(_ event: Event) {
        var s: String { Printable.name(event.session) }
        switch event.body {
        case let .sessionState(state, nextPoll):
            let next = nextPoll.map { "; next poll at \($0.rfc3339)" } ?? ""
            if state.lastPollFailed { warn("\(s): \(state.text)\(next)") } else { line("\(s): \(state.text)\(next)") }
        case let .agent(action, message):
            if action == "reload-refused" { Console.err("ferry: error: \(message)") } else { line("ferry agent: \(message)") }
        case let .uploadsVerified(storeChecksum, readBack, sizeOnly):
            let counts = [(storeChecksum, UploadVerification.storeChecksum), (readBack, .readBack), (sizeOnly, .sizeOnly)].filter { $0.0 > 0 }
            guard !counts.isEmpty else { return }
            let total = storeChecksum + readBack + sizeOnly
            let how = counts.count == 1 ? counts[0].1.phrase : counts.map { "\($0.0) \($0.1.phrase)" }.joined(separator: ", ")
            let text = "\(s): \(Plural.count(total, "object")) placed on the remote, verified \(how)"
            if sizeOnly > 0 { warn(text) } else { line(text) }
        case let .generationSwitched(generation, directory, previous, changed, _):
            let from = previous.map { " (was \($0))" } ?? ""
            line("\(s): switched to generation \(generation)\(from): \(Plural.count(changed, "file")) new or changed, in \(Printable.name(directory))")
        case let .rollout(version, percent, inside, taking):
            line("\(s): version \(version) goes to \(percent)% of machines; this one is \(inside ? "in it" : "not, and stays on version \(taking)")")
        case let .rolledBack(generation, previous, version, reason):
            warn("\(s): generation \(generation)\(version.map { " (version \($0))" } ?? "") failed on-switch-check (\(reason)): back on generation \(previous); that version is not taken again here")
        case let .warning(message):
            warn(s.isEmpty ? message : "\(s): \(message)")
        case let .syncFinished(code, transferred, failed, deleted, bytes, seconds, message, hint, dryRun):
            retried = retried.filter { $0.key.session != event.session }
            let counts = (fallbacks.removeValue(forKey: event.session) ?? [:]).sorted(by: { $0.key < $1.key })
            for (reason, count) in counts where count > 1 {
                warn("\(s): \(Plural.count(count - 1, "more file")) fetched whole: \(reason.said)")
            }
            bars?.remove(session: event.session)
            bars?.clear()
            finished(s, ExitCode(rawValue: code), verb: pushing.contains(event.session) ? "uploaded" : "downloaded", transferred: transferred, failed: failed, deleted: deleted, bytes: bytes,
                     seconds: seconds, message: message, hint: hint, dryRun: dryRun)
        case let .manifestRetrying(_, attempt, delay, error):
            guard firstRetry(event.session, nil, error) else { return }
            line("\(s): \(error); trying again (try \(attempt) in \(Units.formatFixed(delay, digits: 1))s; further tries with this error are not shown)")
        case let .checkFinished(_, message?, hint):
            Console.err("ferry: error: \(s): \(message)")
            if let hint { Console.err("  hint: \(hint)") }
        case let .sessionHeld(files, waitsFor) where level >= .debug:
            line("\(s): \(Plural.count(files, "file")) held until \(waitsFor)")
        default:
            // A hold is said with -v; without, the agent's session state says it.
            break
        }
    }

    /// The run's one summary. A run that could not go on says "failed" and why, on stderr, with
    /// what to do next; it never claims there was nothing to transfer.
    private func finished(_ s: String, _ code: ExitCode?, verb: String, transferred: Int, failed: Int, deleted: Int, bytes: Int64, seconds: Double,
                          message: String?, hint: String?, dryRun: Bool) {
        if busyIsExpected && code == .sessionBusy { return }
        let time = Units.formatFixed(seconds, digits: 2) + "s"
        if dryRun && code == .inSync {
            Console.out("\(s): \(message ?? "dry run: nothing was changed")")
            return
        }
        let counts = "\(transferred) \(verb) (\(Units.formatBytes(bytes)) in \(time)"
            + (seconds > 0 && bytes > 0 ? ", \(Units.formatBytes(Int64(Double(bytes) / seconds)))/s" : "") + "), \(deleted) deleted, \(failed) failed"
        switch code {
        case .inSync?:
            let what = transferred == 0 && deleted == 0 && failed == 0 ? "nothing to transfer (\(time))" : counts
            Console.out("\(s): in sync — \(what)")
        case .someFilesFailed?:
            Console.out("\(s): finished with errors — \(counts)")
            if let message { Console.out("\(s): \(message)") }
            if let hint { Console.out("  hint: \(hint)") }
        case .incomplete?:
            Console.out("\(s): stopped, work remains (resumes next run) — \(counts)")
            if let message { Console.out("\(s): \(message)") }
        default:
            // Usage, remote or manifest, local I/O, busy: the run could not go on.
            let done = transferred + deleted + failed > 0 ? " (\(counts))" : ""
            Console.err("ferry: error: \(s): failed: \(message ?? "exit code \(code?.rawValue ?? -1)")\(done)")
            if let hint { Console.err("  hint: \(hint)") }
        }
    }
}

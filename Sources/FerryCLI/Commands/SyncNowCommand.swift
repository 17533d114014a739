import FerryCore
import FerryRuntime

/// `ferry sync now`: one pull cycle for each session, then exit with the contract's exit code.
struct SyncNowCommand: Command {
    static let words = ["sync", "now"]
    static let summary = "Bring each session's local directory in line with its remote manifest, once."
    static let usage = "sync now [--config F] [--session ID]... [--max-duration D] [--not-before T] [--bwlimit RATE] [--transfers N] [--dry-run|-n] [--json] [--quiet|-q] [--verbose|-v]"
    static let details = """
        With a ferry agent running on the same state directory, the work is handed to it (never run
        beside it): the agent polls the sessions at once, and this command shows their events and
        progress bars as for a run of its own, and exits with their code; a deadline or signal here
        stops only the following (exit 3).

        Fetches the manifest (a conditional GET: an unchanged manifest costs one round trip), scans the
        local directory, downloads new and changed files into .ferry/ under the local root, verifies size
        and SHA-256, then renames each into place. Local edits are repaired. With delete = yes, files the
        manifest no longer lists are removed after every transfer succeeded (at most max-delete).
        Every file's transfer is recorded, so an interrupted run resumes where it stopped.

        A changed large file whose manifest entry has a content index (manifest build and push write
        one from 1M) is assembled from the data the mirror holds (its older version, the current
        generation, a renamed file, the session's seed directories) and range requests for the rest,
        each piece checked against the index: a small change costs about what changed. delta = no
        in the session turns it off; the run's delta-planned event and each file-done say what was
        reused and what fetched.

        At the --max-duration deadline (or the session's max-duration), or on SIGTERM/SIGINT, ferry starts
        nothing new, keeps what running transfers have fetched as resume data, and exits 3 (within
        stop-timeout, default 5s). The next run continues from there.

        --not-before T (or the session's earliest-begin) records new downloads as delayed until T, a
        duration from now (30m), a local time (2026-11-24 02:00) or an RFC 3339 time. A run after T revalidates each against the newest
        manifest: continue, replace (the file changed) or cancel (the file is gone).

        --bwlimit RATE (512K, off, or a schedule like 08:00,512K 19:00,off) and --transfers N replace
        the [agent] bwlimit and transfers for this run only; the sessions' own bwlimit and
        session-transfers still hold. Handed to a running agent, they go with the work: the cycles
        the agent starts for this command go at them (its other sessions keep sharing [agent]'s),
        and the sessions' next cycles at the config's again.

        exit codes: 0 in sync · 1 some files failed · 2 usage or config error · 3 incomplete ·
                    4 remote unreachable or manifest invalid/refused · 5 local I/O error · 6 session busy
        """
    static let options = [CommonOptions.config, CommonOptions.sessions,
                          CommonOptions.maxDuration,
                          OptionSpec("--not-before", value: "T", "begin new downloads no earlier than T (30m, 2026-11-24 02:00 local time, or RFC 3339)"),
                          OptionSpec("--bwlimit", value: "RATE", "this run's overall rate limit instead of [agent] bwlimit (512K, off)"),
                          OptionSpec("--transfers", value: "N", "this run's parallel transfers instead of [agent] transfers (1-256)"),
                          OptionSpec("--dry-run", "print what would be done; change nothing (-n)"),
                          CommonOptions.json, CommonOptions.quiet, CommonOptions.verbose, CommonOptions.help]

    let configPath: String?
    let sessions: [String]
    let dryRun: Bool
    let mode: OutputMode
    let level: LogLevel
    let maxDuration: Double?
    let notBefore: EarliestBegin?
    let notBeforeText: String?
    let bwlimit: BandwidthSchedule?
    let transfers: Int?
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
        sessions = arguments.all("--session")
        dryRun = arguments.has("--dry-run")
        mode = OutputMode(arguments: arguments)
        level = CommonOptions.level(arguments)
        maxDuration = try CommonOptions.maxDuration(arguments, command: Self.name)
        notBeforeText = arguments.value("--not-before")
        notBefore = try CommonOptions.time(arguments, "--not-before", command: Self.name)
        if let text = arguments.value("--bwlimit") {
            do { bwlimit = try BandwidthSchedule(parsing: text) } catch {
                throw .usage("ferry sync now: --bwlimit: \(error.message)", hint: "write a rate like 512K, off, or a daily schedule like: 08:00,512K 19:00,off")
            }
        } else {
            bwlimit = nil
        }
        if let text = arguments.value("--transfers") {
            do { transfers = try RunLimits.transfers(parsing: text) } catch { throw .usage("ferry sync now: --transfers \(error.message)") }
        } else {
            transfers = nil
        }
    }

    func run() throws(FerryError) -> ExitCode {
        var config = try CommandConfig.load(configPath)
        for w in config.warnings where mode != .json { Console.warning(w) }
        if let bwlimit { config.agent.bwlimit = bwlimit }
        if let transfers { config.agent.transfers = transfers }
        var selected = try selectSessions(config, names: sessions)
        let reporter = SyncReporter(mode: mode, level: level, clock: clock)
        for w in config.warnings where mode == .json {
            reporter.event(Event(time: clock.now(), session: "", body: .warning(message: w)))
        }
        let stop = StopSignals.stopCondition(stopTimeout: config.agent.stopTimeout, maxDuration: maxDuration, clock: clock)
        if let reason = stop.reason {
            if mode != .json { for session in selected { Console.err("ferry: \(Printable.name(session.name)): not started, \(reason)") } }
            return .incomplete
        }
        var handedOver: ExitCode?
        if !dryRun, let outcome = Handover.toAgent(config: config, sessions: selected, notBefore: notBeforeText,
                                                   limits: RunLimits(bandwidth: bwlimit, transfers: transfers), reporter: reporter,
                                                   mode: mode, stop: stop) {
            handedOver = outcome.exitCode
            selected = outcome.leftOver
            if selected.isEmpty { return outcome.exitCode }
        }
        let jobs = selected.map { session in
            var options = SyncOptions(dryRun: dryRun, stop: stop.limited(to: session.maxDuration))
            options.notBefore = notBefore
            return SessionRunner.Job(session: session, options: options)
        }
        let record = dryRun ? nil : try RunRecord(config: config, terminal: reporter, clock: clock)
        let results = try SessionRunner(agent: config.agent, clock: clock).run(jobs, sinks: [record?.hub ?? reporter])
        record?.finish()
        return ExitCode.worst(results.map(\.exitCode) + (handedOver.map { [$0] } ?? []))
    }
}

/// Where a run's events go besides the terminal: the sessions' event logs (`ferry events`) and
/// their hooks. A dry run records nothing.
struct RunRecord {
    let hub: EventHub
    private let log: EventLog
    private let hooks: HookRunner?

    init(config: Config, terminal: EventSink, clock: any Clock) throws(FerryError) {
        log = EventLog(state: config.agent.state, clock: clock)
        let hasHooks = config.sessions.contains { $0.onFileDone != nil || $0.onSessionDone != nil }
        hooks = hasHooks ? try HookRunner(sessions: config.sessions, clock: clock) : nil
        hub = EventHub([terminal, log] + (hooks.map { [$0] } ?? []))
        let hub = self.hub
        hooks?.report = { hub.event($0) }
    }

    /// Waits for the hooks still queued, then writes what the log holds.
    func finish() {
        hooks?.drain()
        log.flush()
    }
}

/// The sessions a command works on: all of them, or those named with --session (each once,
/// however often it is named: a session run twice at once would only meet its own lock).
func selectSessions(_ config: Config, names: [String]) throws(FerryError) -> [SessionConfig] {
    if names.isEmpty { return config.sessions }
    var out: [SessionConfig] = []
    for name in names where !out.contains(where: { $0.name == name }) {
        guard let s = config.session(named: name) else {
            throw .usage("no session '\(name)' in \(config.path)",
                         hint: "sessions there: " + config.sessions.map(\.name).joined(separator: ", "))
        }
        out.append(s)
    }
    return out
}

import FerryCore
import FerryRuntime

/// `ferry check`: re-hashes each session's local tree against the manifest it last applied.
struct CheckCommand: Command {
    static let words = ["check"]
    static let summary = "Hash the local tree again and report what differs from the manifest last applied."
    static let usage = "check [--config F] [--session ID]... [--repair] [--json] [--quiet|-q] [--verbose|-v]"
    static let details = """
        Every listed file is hashed again, whatever the hash cache says, so check also finds content that
        changed while size, mtime, ctime and inode did not (bit rot, or a tool that wrote in place and put
        the times back), which a sync does not notice. It reports what the next sync would change: files
        missing, changed or of the wrong type, modes and mtimes, and extra files when the session deletes.
        It compares against the manifest ferry last applied (no request to the remote) and changes nothing.

        --repair records the hashes it took and then syncs each session that differs, as sync now does.

        exit codes: 0 the tree matches · 1 something differs · 2 usage or config error, or a session that
                    never synced · 5 local I/O error · 6 session busy · with --repair, those of sync now
        """
    static let options = [CommonOptions.config, CommonOptions.sessions,
                          OptionSpec("--repair", "record the hashes taken and sync the sessions that differ"),
                          CommonOptions.json, CommonOptions.quiet, CommonOptions.verbose, CommonOptions.help]

    let configPath: String?
    let sessions: [String]
    let repair: Bool
    let mode: OutputMode
    let level: LogLevel
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
        sessions = arguments.all("--session")
        repair = arguments.has("--repair")
        mode = OutputMode(arguments: arguments)
        level = CommonOptions.level(arguments)
    }

    func run() throws(FerryError) -> ExitCode {
        let config = try CommandConfig.load(configPath)
        for w in config.warnings where mode != .json { Console.warning(w) }
        let reporter = SyncReporter(mode: mode, level: level, clock: clock)
        let bars = mode == .human && Console.stderrIsTerminal ? ProgressBars(clock: clock) : nil
        var codes: [ExitCode] = []
        var toRepair: [SessionConfig] = []
        for session in try selectSessions(config, names: sessions) {
            func emit(_ body: Event.Body) { reporter.event(Event(time: clock.now(), session: session.name, body: body)) }
            let report: CheckReport
            do {
                report = try SessionCheck.run(session: session, agent: config.agent, record: repair, clock: clock) { done, total in
                    var p = SyncProgress(session: session.name + ": hashing")
                    p.filesDone = done
                    p.filesTotal = total
                    bars?.update(p, force: done == total)
                }
                bars?.clear()
            } catch {
                bars?.clear()
                let code = RunOutcome(error: error.category).exitCode
                emit(.checkFinished(exitCode: code.rawValue, message: error.message, hint: error.hint))
                codes.append(code)
                continue
            }
            for item in report.items { emit(.planItem(action: item.action, path: item.path, reason: item.reason, size: nil)) }
            emit(.checked(version: report.manifestVersion, listed: report.listed, hashed: report.hashed,
                          differ: report.items.count, unnoticed: report.unnoticed))
            let code: ExitCode = report.items.isEmpty ? .inSync : .someFilesFailed
            emit(.checkFinished(exitCode: code.rawValue, message: nil, hint: nil))
            if !report.items.isEmpty && repair {
                toRepair.append(session)
            } else {
                codes.append(code)
            }
        }
        if !toRepair.isEmpty {
            let stop = StopSignals.stopCondition(stopTimeout: config.agent.stopTimeout, maxDuration: nil, clock: clock)
            let jobs = toRepair.map { SessionRunner.Job(session: $0, options: SyncOptions(stop: stop.limited(to: $0.maxDuration))) }
            let record = try RunRecord(config: config, terminal: reporter, clock: clock)
            codes += try SessionRunner(agent: config.agent, clock: clock).run(jobs, sinks: [record.hub]).map(\.exitCode)
            record.finish()
        }
        return ExitCode.worst(codes)
    }
}

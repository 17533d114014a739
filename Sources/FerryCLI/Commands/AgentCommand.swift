import Glibc
import FerryCore
import FerryRuntime

/// `ferry agent`: every session of the config, polled on its schedule, in one long-running process.
struct AgentCommand: Command {
    static let words = ["agent"]
    static let summary = "Keep every session in sync in the background: poll manifests on a schedule."
    static let usage = "agent [--config F] [--json] [--log-level error|warning|info|debug]"
    static let details = """
        Runs every session of the config in one process, sharing one transfer queue and the global
        transfers limit. Each session is polled every 'poll' (up to 10% early, never late); a changed
        manifest is applied as ferry sync now would. On start it polls every session at once, which
        resumes the transfers that were in flight. A remote that cannot be reached puts its session in
        'waiting for connectivity' (ferry status shows it); the agent tries again with a backoff that
        starts at retry-delay and never waits longer than poll, and recovers by itself.

        Every event goes to the session's event log (ferry events) and to the agent's output: one line
        per event, with journald priority prefixes (<6>, <4>, <3>) when not on a terminal; --json
        writes the events as JSON lines instead. A poll that finds nothing to do prints nothing.
        --log-level (or [agent] log-level) chooses what reaches this output: error (failures only),
        warning (and warnings, retries, waiting for connectivity), info (the default: and each run,
        file deleted, generation switched, state change), debug (and each file begun and done, and
        polls that found nothing). The event log (ferry events) always holds every event.
        Hooks (on-file-done, on-session-done) run as their events come.

        signals: SIGTERM or SIGINT stops it within stop-timeout: nothing new starts, running transfers
                 keep what they fetched, exit 0. SIGHUP re-reads the config: new sessions start,
                 removed ones stop (their tasks are kept), changed settings apply from each session's
                 next poll without restarting running transfers; a config with an error is refused
                 (the error names file, line and key) and the agent goes on with the one it has.
        systemd: speaks sd_notify (READY, STATUS, WATCHDOG, RELOADING, STOPPING) when $NOTIFY_SOCKET
                 is set; see config/ferry.service.

        exit codes: 0 stopped by a signal · 2 config error · 6 another agent runs with the same state
        """
    static let options = [CommonOptions.config, CommonOptions.json,
                          OptionSpec("--log-level", value: "LEVEL", "error, warning, info or debug: what reaches the output (default: [agent] log-level, else info)"),
                          CommonOptions.help]

    let configPath: String?
    let json: Bool
    let logLevel: LogLevel?
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
        json = arguments.has("--json")
        if let text = arguments.value("--log-level") {
            guard let level = LogLevel(rawValue: text.lowercased()) else {
                throw .usage("ferry agent: --log-level is error, warning, info or debug, got '\(Printable.name(text))'")
            }
            logLevel = level
        } else {
            logLevel = nil
        }
    }

    func run() throws(FerryError) -> ExitCode {
        if !json && isatty(2) == 0 { Console.priorityPrefixes = true }
        let config = try CommandConfig.load(configPath, allowingNoSession: true)
        let lock = try SessionLock.agent(stateDirectory: config.agent.state)
        let log = SyncReporter(mode: json ? .json : .human, agentLog: true, level: logLevel ?? config.agent.logLevel, clock: clock)
        for w in config.warnings { log.event(Event(time: clock.now(), session: "", body: .warning(message: w))) }
        let hooks = try HookRunner(sessions: config.sessions, clock: clock)
        let eventLog = EventLog(state: config.agent.state, clock: clock)
        let agent = try Agent(config: config, sinks: [eventLog, log], hooks: hooks, clock: clock)
        do { try agent.serveControlSocket() } catch {
            log.event(Event(time: clock.now(), session: "", body: .warning(message: error.message + "; sync now and resume cannot hand their work over to this agent")))
        }
        try agent.serveMetrics()
        let stop = StopToken()
        StopSignals.install(stopTimeout: config.agent.stopTimeout, token: stop, forcedExit: .inSync) { agent.wakeUp() }
        StopSignals.onHangup { agent.requestReload() }
        let code = agent.run(stop: stop)
        // The last events (the stop itself) may still be buffered: written before the process ends.
        eventLog.flush()
        withExtendedLifetime(lock) {}
        return code
    }
}

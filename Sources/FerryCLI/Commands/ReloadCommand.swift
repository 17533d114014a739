import FerryCore
import FerryRuntime

/// `ferry reload`: asks the running agent to re-read its config, over its control socket, and
/// waits for the answer. It is `ExecReload=` of ferry.service, so `systemctl reload ferry` needs
/// nothing but ferry (no /bin/kill), and fails when the agent refuses the new config.
struct ReloadCommand: Command {
    static let words = ["reload"]
    static let summary = "Make the running agent re-read its config (systemctl reload ferry runs this)."
    static let usage = "reload [--config F] [--json]"
    static let details = """
        The agent that uses the config's state directory re-reads the config file it was started
        with: new sessions start, removed ones stop (their tasks are kept), changed settings apply
        from each session's next poll. A config with an error is refused: the agent goes on with the
        one it has, and this command prints the error and exits 2. SIGHUP to the agent does the same
        without an answer.

        exit codes: 0 reloaded · 2 the config has an error (the agent goes on with the old one), or
        no agent runs with this state directory
        """
    static let options = [CommonOptions.config, CommonOptions.json, CommonOptions.help]

    let configPath: String?
    let json: Bool
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
        json = arguments.has("--json")
    }

    func run() throws(FerryError) -> ExitCode {
        let config: Config
        do throws(FerryError) { config = try CommandConfig.load(configPath, allowingNoSession: true) } catch {
            guard error.category == .usage else { throw error }
            // The agent would refuse it too; it is not asked, and goes on with the config it has.
            throw FerryError(.usage, error.message + " — not reloaded: a running agent goes on with the config it has", hint: error.hint)
        }
        guard let link = AgentLink(state: config.agent.state), link.send(ControlRequest(command: ControlRequest.reload, sessions: [], notBefore: nil)) else {
            throw .usage("no agent runs with the state directory \(config.agent.state): there is nothing to reload",
                         hint: "start it (systemctl start ferry, or ferry agent); a one-shot ferry sync now reads the config each time. If the agent runs with another state directory ([agent] state changed), restart it instead")
        }
        // The agent answers at its next turn, which a long reload (a config of many sessions) may delay.
        let deadline = clock.monotonic() + 60
        while clock.monotonic() < deadline {
            switch link.receive(timeout: 0.5) {
            case .timedOut:
                continue
            case .closed:
                throw .usage("the agent closed the link without answering the reload", hint: "journalctl -u ferry (or the agent's output) says why")
            case .line(let line):
                guard let f = try? JSONReader.flatFields(line) else { continue }
                if json, let text = String(validating: line, as: UTF8.self) { Console.json(text) }
                switch f["event"] {
                case "reloaded":
                    let sessions = (f["sessions"] ?? "").split(separator: ",").map { Printable.name(String($0)) }
                    // The file the agent was started with, which is what it re-read.
                    let path = f["config"].map(Printable.name) ?? config.path
                    if !json { Console.out("ferry: the agent reloaded \(path): " + (sessions.isEmpty ? "no session (it waits for one)" : sessions.joined(separator: ", "))) }
                    return .inSync
                case "reload-refused":
                    throw FerryError(.usage, "the agent refused the reload: \(f["message"] ?? "no reason given"); it goes on with the config it has",
                                     hint: f["hint"])
                case "handover-refused":
                    throw FerryError(.usage, "the agent refused the request: \(f["message"] ?? "no reason given")")
                default:
                    continue
                }
            }
        }
        throw .usage("the agent did not answer the reload within 60 s", hint: "journalctl -u ferry (or the agent's output) says what it is doing")
    }
}

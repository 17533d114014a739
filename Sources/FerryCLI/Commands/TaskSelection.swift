import FerryCore
import FerryRuntime

/// What `ferry cancel` and `ferry resume` act on: every task of one session (`--session ID`), or
/// the tasks named by id (the TASK column of `ferry status`).
struct TaskSelection {
    /// Per session: the task ids, or nil for all of the session's tasks.
    let targets: [(session: SessionConfig, ids: [Int64]?)]
    /// The tasks were named one by one (TASK...), not as a session's: each is reported.
    var named: Bool { targets.contains { $0.ids != nil } }
    let config: Config
    let store: StateStore

    /// Loads the config and the state, and resolves what the command line names.
    init(arguments: Arguments, command: String, clock: any Clock) throws(FerryError) {
        let config = try CommandConfig.load(arguments.value("--config"))
        let store = try StateStore(directory: config.agent.state, clock: clock)
        try self.init(arguments: arguments, config: config, store: store, command: command)
    }

    init(arguments: Arguments, config: Config, store: StateStore, command: String) throws(FerryError) {
        let session = arguments.value("--session")
        if session != nil && !arguments.positionals.isEmpty {
            throw .usage("ferry \(command): give --session ID or task ids, not both")
        }
        if let session {
            targets = [(try selectSessions(config, names: [session])[0], nil)]
            self.config = config
            self.store = store
            return
        }
        guard !arguments.positionals.isEmpty else {
            throw .usage("ferry \(command): name the tasks (ids from ferry status) or a session (--session ID)")
        }
        var bySession: [String: [Int64]] = [:]
        for text in arguments.positionals {
            guard let id = Int64(text) else { throw .usage("ferry \(command): '\(text)' is not a task id (a number from ferry status)") }
            guard let task = try store.task(id: id) else { throw .usage("ferry \(command): there is no task \(id)", hint: "see: ferry status") }
            bySession[task.session, default: []].append(id)
        }
        var targets: [(SessionConfig, [Int64]?)] = []
        for (name, ids) in bySession.sorted(by: { $0.key < $1.key }) {
            guard let s = config.session(named: name) else {
                throw .usage("ferry \(command): task \(ids[0]) belongs to session '\(name)', which is not in \(config.path)")
            }
            targets.append((s, ids))
        }
        self.targets = targets
        self.config = config
        self.store = store
    }
}

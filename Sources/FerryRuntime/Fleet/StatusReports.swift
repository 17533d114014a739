import FerryCore

/// Publishes a session's signed status report (`StatusReport`) to its `report` location after a
/// run: when what it says changed, after `report-interval` when nothing did, and after a try
/// that failed. One small write per report (for S3 one PUT; WebDAV a PUT and a MOVE), never read
/// back: a report is a statement, not data a machine depends on.
enum StatusReports {
    /// How long a report location may take to connect, or send nothing, before the try is given up.
    static let reportPatience = 10.0

    /// What the run tells the report beside the state: how it ended, the bytes by source, and
    /// the tree the served manifest's bytes hash to.
    struct RunFacts {
        var exit: ExitCode
        var originBytes: Int64
        var mirrorBytes: Int64
        var tree: String?
    }

    /// The report the state and `facts` make now (sequence number not taken yet).
    static func make(session: SessionConfig, agent: AgentConfig, record: SessionRecord?, key: PublicKey,
                     facts: RunFacts, now: Timestamp) -> StatusReport {
        let served = record?.served(session.direction)
        let health: String
        if record?.switchCheck != nil { health = "checking" } else if record?.rejectedVersion != nil { health = "failed" } else if session.onSwitchCheck == nil {
            health = "none"
        } else { health = "passed" }
        return StatusReport(machine: MachineKey.identity(agent), host: MachineKey.hostName(), key: key, session: session.name, seq: 0,
                            time: now, served: served, tree: served != nil && served == record?.manifestVersion ? facts.tree : nil,
                            seen: record?.manifestVersion, rollout: record?.rollout, health: health, rejected: record?.rejectedVersion,
                            exit: facts.exit.rawValue, error: errorClass(facts.exit, record: record),
                            originBytes: facts.originBytes, mirrorBytes: facts.mirrorBytes)
    }

    /// The last run's error class: its exit code's word, or `rolled-back` for a run whose health
    /// check failed on the newest release (exit 1, nothing else wrong); nil when in sync.
    private static func errorClass(_ exit: ExitCode, record: SessionRecord?) -> String? {
        if exit == .inSync { return nil }
        if exit == .someFilesFailed, let rejected = record?.rejectedVersion, rejected == record?.manifestVersion { return "rolled-back" }
        return exit.name
    }

    /// Publishes the report when it is due; returns a warning to say when a try failed for a
    /// cause not said before (nil otherwise).
    static func publish(session: SessionConfig, agent: AgentConfig, store: StateStore, facts: RunFacts, clock: any Clock) -> String? {
        guard let location = session.report else { return nil }
        let now = clock.now()
        do throws(FerryError) {
            let last = try store.report(session: session.name)
            let key = try MachineKey.load(state: agent.state)
            var report = make(session: session, agent: agent, record: try store.session(session.name), key: key.publicKey, facts: facts, now: now)
            let substance = report.substance
            let quiet = last.time.map { now.seconds - $0.seconds < Int64(session.reportInterval) } ?? false
            guard substance != last.substance || !quiet || last.failure != nil else { return nil }
            report.seq = try store.takeReportSeq(session: session.name)
            let body = report.body()
            let bytes = StatusReport.signed(body: body, signature: try key.sign(body))
            do throws(FerryError) {
                try write(bytes, as: report.objectName, to: location, session: session, clock: clock)
            } catch {
                let said = last.failure == error.message
                try store.recordReport(session: session.name, substance: substance, time: now, failure: error.message)
                return said ? nil : "the status report cannot be published to \(location.url): \(error.message)"
                    + (error.hint.map { " (\($0))" } ?? "") + "; the next run tries again"
            }
            try store.recordReport(session: session.name, substance: substance, time: now, failure: nil)
            return nil
        } catch {
            return "the status report cannot be made: \(error.message)"
        }
    }

    /// Writes the report over the one before, as one object readers see whole or not at all.
    private static func write(_ bytes: [UInt8], as name: String, to location: RemoteLocation, session: SessionConfig, clock: any Clock) throws(FerryError) {
        var target = session
        target.remote = location
        target.mirrors = []
        target.direction = .push
        // A report is a few hundred bytes and nothing waits on it but the session's lock: a hung
        // location costs the run `reportPatience`, not the session's stall-timeout.
        target.connectTimeout = min(target.connectTimeout, reportPatience)
        target.stallTimeout = min(target.stallTimeout, reportPatience)
        guard let writer = try Remotes.open(target, clock: clock) as? RemoteWriting else {
            throw .usage("a report cannot be written to \(location.url): ferry cannot write to this kind of remote")
        }
        try writer.prepareToWrite()
        guard let path = try? RelativePath(validating: name) else { throw .usage("'\(Printable.name(name))' cannot name a report") }
        _ = try writer.write(bytes, at: path, condition: .none)
    }
}

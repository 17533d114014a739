import CSQLite
import Glibc
import FerryCore

/// What ferry remembers about a session between runs: the manifest's validators and version.
public struct SessionRecord: Sendable {
    public var name: String
    public var manifestURL: String?
    public var manifestETag: String?
    public var manifestLastModified: String?
    public var manifestVersion: Int64?
    public var lastRunStarted: Timestamp?
    public var lastRunFinished: Timestamp?
    public var lastExitCode: Int32?
    public var lastMessage: String?
    /// Process currently running the session (while a run is going).
    public var runningPID: Int32?
    /// When the running process will stop by itself, if it has a deadline.
    public var deadline: Timestamp?
    /// The `ferry agent` that schedules the session, while one does.
    public var agentPID: Int32?
    /// What the agent says of the session between runs ("waiting for connectivity: ...").
    public var agentState: String?
    /// When the agent polls the session next.
    public var nextPoll: Timestamp?
    /// The last poll that reached the remote and applied its manifest.
    public var lastPollOK: Timestamp?
    /// What a discretionary session's transfers wait for, after a run whose conditions did not hold.
    public var heldFor: String?
    /// How many files the manifest last applied lists.
    public var manifestFiles: Int?
    /// The keys whose signatures vouched for the manifest last applied or published (empty: unsigned).
    public var manifestSigners: [PublicKey] = []
    /// The first of them, as status shows it.
    public var manifestSigner: PublicKey? { manifestSigners.first }
    /// When that manifest expires, if it says.
    public var manifestExpires: Timestamp?
    /// Bytes the last run moved over the network, and took from local data (a delta).
    public var lastFetched: Int64?
    public var lastReused: Int64?
    /// What each source served the last run (a pull with mirrors; empty otherwise).
    public var lastSources: [SourceCount] = []
    /// A pull with trusted-keys: the newest signed `generated` time it took (`ManifestAcceptance.floor`).
    public var trustFloor: Timestamp?
    /// `on-switch-check`: a switch whose check has not ended (a run was killed meanwhile).
    public var switchCheck: SwitchCheck?
    /// The version a failed check rolled back on this machine (not taken again), and why.
    public var rejectedVersion: Int64?
    public var rejectedReason: String?
    /// How many times a failed check switched back, ever.
    public var rollbacks = 0
    /// This machine's place in the last phased rollout it saw (nil: the manifest had none).
    public var rollout: RolloutStanding?
    /// The large files the last run fetched whole, their delta not taken, and why.
    public var lastFallbacks: [FallbackRecord] = []
    /// The release this pull serves: whole in place (and, with `on-switch-check`, past it) at
    /// `servedSince`; `servedVersion` nil with a `servedSince` is an unversioned manifest, and no
    /// `servedSince` says none is known yet (a state from before migration 19 until its next
    /// complete run). `manifestVersion` is the newest the remote offered, which a machine outside
    /// a rollout, or one that rolled a release back, does not serve.
    public var servedVersion: Int64?
    public var servedSince: Timestamp?

    /// The version the session serves, as status, metrics and reports all tell it: a pull's
    /// release in place (`servedVersion`); a push's last published (`manifestVersion`).
    public func served(_ direction: Direction) -> Int64? { direction == .push ? manifestVersion : servedVersion }
}

/// The SQLite state of all sessions (WAL mode): sessions, the task table and the hash cache.
/// The only code that knows the schema. Used from one thread at a time. Here: opening, the
/// sessions table and notices; each other concern is an extension in a file of its own (the schema
/// in `+Schema`, tasks in `+Tasks`, the hash cache in `+HashCache`, a push's placed files in
/// `+Placed`, uploads in parts in `UploadJournal.swift`).
public final class StateStore {
    let db: SQLiteDatabase
    public let directory: String
    /// Where the times recorded (runs, tasks, checks) come from.
    public let clock: any Clock

    /// Opens (creating if needed) `<directory>/ferry.db` and brings its schema up to date.
    public init(directory: String, clock: any Clock) throws(FerryError) {
        self.directory = directory
        self.clock = clock
        // State is private to its owner whatever the umask (docs/design.md, data-safety rule 12): the directory
        // 0700, the database 0600 before its WAL exists (SQLite gives the -wal and -shm files the
        // database's mode). By name only: closing any descriptor of the database would drop the
        // locks SQLite holds on it for the process's other connections.
        try FileSystem.makePrivateDirectory(directory)
        let path = directory + "/ferry.db"
        db = try SQLiteDatabase(path: path)
        for file in [path, path + "-wal", path + "-shm"] { FileSystem.makePrivate(file) }
        try db.executeRetryingWhileBusy("PRAGMA journal_mode=WAL", clock: clock)
        for file in [path, path + "-wal", path + "-shm"] { FileSystem.makePrivate(file) }
        // SQLite's temporary data in memory, not in files of /var/tmp: what a statement of many
        // rows keeps to undo itself (a statement journal, written out past 64 KiB: ~1,000 writes
        // and reads a cold 10,000-file pull), and the small tables of an IN list. None of ferry's
        // statements sorts (each ORDER BY follows an index), so this stays a few pages. A full or
        // read-only /var/tmp then fails nothing, and no row of the state leaves its directory.
        try db.execute("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;")
        if try db.userVersion < StateStore.migrations.count {
            // Another ferry may be migrating at this moment: read the version again under the write lock.
            try db.transaction { () throws(FerryError) in
                let version = try db.userVersion
                for (i, sql) in StateStore.migrations.enumerated() where i >= version {
                    try db.execute(sql)
                }
                if version < StateStore.migrations.count { try db.execute("PRAGMA user_version = \(StateStore.migrations.count)") }
            }
        }
        let version = try db.userVersion
        if version > StateStore.migrations.count {
            throw .localIO("state database \(db.path) was written by a newer ferry (schema \(version))",
                           hint: "run the newer ferry, or point [agent] state at another directory")
        }
    }

    // MARK: sessions

    public func session(_ name: String) throws(FerryError) -> SessionRecord? {
        let s = try db.prepare("""
            SELECT manifest_url, manifest_etag, manifest_last_modified, manifest_version, last_run_started,
                   last_run_finished, last_exit_code, last_message, running_pid, deadline,
                   agent_pid, agent_state, next_poll, last_poll_ok, held_for, manifest_files, manifest_signer, manifest_expires,
                   last_fetched, last_reused, last_sources, trust_floor, switch_check, rejected_version, rejected_reason, rollbacks,
                   rollout, last_fallbacks, served_version, served_since FROM sessions WHERE name = ?
            """).bind(.text(name))
        guard try s.step() else { return nil }
        return SessionRecord(
            name: name, manifestURL: s.text(0), manifestETag: s.text(1), manifestLastModified: s.text(2),
            manifestVersion: s.isNull(3) ? nil : s.int(3), lastRunStarted: s.text(4).flatMap(Timestamp.init(rfc3339:)),
            lastRunFinished: s.text(5).flatMap(Timestamp.init(rfc3339:)), lastExitCode: s.isNull(6) ? nil : Int32(s.int(6)),
            lastMessage: s.text(7), runningPID: s.isNull(8) ? nil : Int32(s.int(8)), deadline: s.text(9).flatMap(Timestamp.init(rfc3339:)),
            agentPID: s.isNull(10) ? nil : Int32(s.int(10)), agentState: s.text(11), nextPoll: s.text(12).flatMap(Timestamp.init(rfc3339:)),
            lastPollOK: s.text(13).flatMap(Timestamp.init(rfc3339:)), heldFor: s.text(14), manifestFiles: s.isNull(15) ? nil : Int(s.int(15)),
            manifestSigners: (s.text(16) ?? "").split(separator: " ").compactMap { PublicKey(text: String($0)) }, manifestExpires: s.text(17).flatMap(Timestamp.init(rfc3339:)),
            lastFetched: s.isNull(18) ? nil : s.int(18), lastReused: s.isNull(19) ? nil : s.int(19),
            lastSources: s.text(20).map(SourceCount.parse) ?? [], trustFloor: s.text(21).flatMap(Timestamp.init(rfc3339:)),
            switchCheck: s.text(22).flatMap(SwitchCheck.init(text:)), rejectedVersion: s.isNull(23) ? nil : s.int(23), rejectedReason: s.text(24),
            rollbacks: Int(s.int(25)), rollout: s.text(26).flatMap(RolloutStanding.init(text:)),
            lastFallbacks: s.text(27).map(FallbackRecord.parse) ?? [],
            servedVersion: s.isNull(28) ? nil : s.int(28), servedSince: s.text(29).flatMap(Timestamp.init(rfc3339:)))
    }

    /// What the agent `pid` says of a session between runs; a nil pid says no agent schedules it.
    public func recordAgentState(session: String, pid: Int32?, state: PollState?, nextPoll: Timestamp?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET agent_pid = ?, agent_state = ?, next_poll = ? WHERE name = ?")
            .bind(.optional(pid.map(Int64.init)), .optional(state?.text), .optional(nextPoll?.rfc3339), .text(session)).run()
    }

    /// What the session's transfers wait for (discretionary conditions), or nil when none were held.
    public func recordHold(session: String, waitsFor: String?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET held_for = ? WHERE name = ?").bind(.optional(waitsFor), .text(session)).run()
    }

    /// A poll reached the remote and its manifest was applied.
    public func recordPollSucceeded(session: String, at time: Timestamp) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET last_poll_ok = ? WHERE name = ?").bind(.text(time.rfc3339), .text(session)).run()
    }

    func ensureSession(_ name: String) throws(FerryError) {
        try db.prepare("INSERT OR IGNORE INTO sessions (name) VALUES (?)").bind(.text(name)).run()
    }

    public func saveManifest(session: String, url: String, etag: String?, lastModified: String?, version: Int64?, files: Int,
                             signers: [PublicKey], expires: Timestamp?, trustFloor: Timestamp? = nil) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("""
            UPDATE sessions SET manifest_url = ?, manifest_etag = ?, manifest_last_modified = ?, manifest_version = ?, manifest_files = ?,
                                manifest_signer = ?, manifest_expires = ?, trust_floor = ? WHERE name = ?
            """)
            .bind(.text(url), .optional(etag), .optional(lastModified), .optional(version), .int(Int64(files)), .optional(signers.isEmpty ? nil : signers.map(\.description).joined(separator: " ")),
                  .optional(expires?.rfc3339), .optional(trustFloor?.rfc3339), .text(session)).run()
    }

    /// This machine's place in the rollout of the manifest just taken (nil: it had none).
    public func recordRollout(session: String, _ standing: RolloutStanding?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET rollout = ? WHERE name = ?").bind(.optional(standing?.text), .text(session)).run()
    }

    /// A switch whose check is about to run (nil: it ended).
    public func recordSwitchCheck(session: String, _ check: SwitchCheck?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET switch_check = ? WHERE name = ?").bind(.optional(check?.text), .text(session)).run()
    }

    /// A failed check switched back from `version`: not taken again. Ends the check in the same transaction.
    /// A release is served: whole in place and past its check, at `now`. A rejection of an older
    /// version is over (said no more): a newer one passed.
    public func recordServed(session: String, version: Int64?, now: Timestamp) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("""
            UPDATE sessions SET served_since = CASE WHEN served_since IS NOT NULL AND served_version IS ? THEN served_since ELSE ? END,
                served_version = ?,
                rejected_version = CASE WHEN ? > rejected_version THEN NULL ELSE rejected_version END,
                rejected_reason = CASE WHEN ? > rejected_version THEN NULL ELSE rejected_reason END
            WHERE name = ?
            """).bind(.optional(version), .text(now.rfc3339), .optional(version), .optional(version), .optional(version), .text(session)).run()
    }

    public func recordRollback(session: String, version: Int64?, reason: String) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET switch_check = NULL, rejected_version = ?, rejected_reason = ?, rollbacks = rollbacks + 1 WHERE name = ?")
            .bind(.optional(version), .text(reason), .text(session)).run()
    }

    /// New validators for the manifest the session already has (the remote sent the same bytes
    /// again, with validators that now hold).
    public func saveManifestValidators(session: String, etag: String?, lastModified: String?) throws(FerryError) {
        try db.prepare("UPDATE sessions SET manifest_etag = ?, manifest_last_modified = ? WHERE name = ?")
            .bind(.optional(etag), .optional(lastModified), .text(session)).run()
    }

    public func recordRunStarted(session: String, pid: Int32, deadline: Timestamp?) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET last_run_started = ?, running_pid = ?, deadline = ? WHERE name = ?")
            .bind(.text(clock.now().rfc3339), .int(Int64(pid)), .optional(deadline?.rfc3339), .text(session)).run()
    }

    public func recordRunFinished(session: String, exitCode: Int32, message: String?, fetched: Int64 = 0, reused: Int64 = 0,
                                  sources: [SourceCount] = [], fallbacks: [FallbackRecord] = []) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("""
            UPDATE sessions SET last_run_finished = ?, last_exit_code = ?, last_message = ?, running_pid = NULL, deadline = NULL,
                                last_fetched = ?, last_reused = ?, last_sources = ?, last_fallbacks = ? WHERE name = ?
            """)
            .bind(.text(clock.now().rfc3339), .int(Int64(exitCode)), .optional(message), .int(fetched), .int(reused),
                  .optional(sources.isEmpty ? nil : SourceCount.text(sources)),
                  .optional(fallbacks.isEmpty ? nil : FallbackRecord.text(fallbacks)), .text(session)).run()
    }

    // MARK: notices said once

    /// Of `notices` (a key, like a path, and a signature of what it is about now), those not said
    /// before with the same signature; the session's notices of `kind` become `notices`, so one
    /// that no longer applies is said again if it comes back.
    public func unsaidNotices(session: String, kind: String, _ notices: [(key: String, signature: String)]) throws(FerryError) -> Set<String> {
        var said: [String: String] = [:]
        let rows = try db.prepare("SELECT key, signature FROM notices WHERE session = ? AND kind = ?").bind(.text(session), .text(kind))
        while try rows.step() { said[rows.text(0) ?? ""] = rows.text(1) ?? "" }
        let unsaid = Set(notices.filter { said[$0.key] != $0.signature }.map(\.key))
        let current = Dictionary(notices.map { ($0.key, $0.signature) }, uniquingKeysWith: { a, _ in a })
        guard !unsaid.isEmpty || current.count != said.count else { return [] }
        try db.transaction { () throws(FerryError) in
            try db.prepare("DELETE FROM notices WHERE session = ? AND kind = ?").bind(.text(session), .text(kind)).run()
            let insert = try db.prepare("INSERT INTO notices (session, kind, key, signature) VALUES (?, ?, ?, ?)")
            for (key, signature) in current { try insert.bind(.text(session), .text(kind), .text(key), .text(signature)).run() }
        }
        return unsaid
    }
}


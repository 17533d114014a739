import FerryCore

/// The schema: its migrations, in order, and the task state machine as the SQL the statements use.
extension StateStore {
    /// Ordered schema migrations; `PRAGMA user_version` says how many have run. Append, never edit.
    static let migrations: [String] = [
        // 1: sessions, the per-file task table, and the hash cache keyed by what makes a hash stale.
        """
        CREATE TABLE sessions (
            name TEXT PRIMARY KEY,
            manifest_url TEXT,
            manifest_etag TEXT,
            manifest_last_modified TEXT,
            manifest_version INTEGER,
            last_run_started TEXT,
            last_run_finished TEXT,
            last_exit_code INTEGER,
            last_message TEXT,
            running_pid INTEGER,
            deadline TEXT
        );
        CREATE TABLE tasks (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            direction TEXT NOT NULL,
            state TEXT NOT NULL,
            size INTEGER,
            sha256 TEXT NOT NULL,
            bytes_done INTEGER NOT NULL DEFAULT 0,
            validator TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            UNIQUE (session, path)
        );
        CREATE TABLE hash_cache (
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            ctime_ns INTEGER NOT NULL,
            inode INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            PRIMARY KEY (session, path)
        ) WITHOUT ROWID;
        """,
        // 2: delayed tasks (earliest-begin, --not-before) and the URL a task was queued for, so a
        // task coming due can be revalidated against the newest manifest.
        """
        ALTER TABLE tasks ADD COLUMN not_before TEXT;
        ALTER TABLE tasks ADD COLUMN url TEXT;
        """,
        // 3: `ferry cancel` asks (suspend_requested counts its requests) and the process running the
        // session answers (suspend_handled) once every task it had in hand is stopped or committed,
        // so cancel can report what really happened. The hash cache keeps times as seconds and
        // nanoseconds: nanoseconds since 1970 in 64 bits end in 2262, and files carry later (and
        // earlier) times. It also remembers the mtime ferry asked for when the filesystem stored
        // another. Cached rows are carried over.
        """
        ALTER TABLE sessions ADD COLUMN suspend_requested INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN suspend_handled INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE hash_cache_3 (
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_sec INTEGER NOT NULL,
            mtime_nsec INTEGER NOT NULL,
            ctime_sec INTEGER NOT NULL,
            ctime_nsec INTEGER NOT NULL,
            inode INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            wanted_mtime_sec INTEGER,
            wanted_mtime_nsec INTEGER,
            PRIMARY KEY (session, path)
        ) WITHOUT ROWID;
        INSERT INTO hash_cache_3
            SELECT session, path, size,
                   (mtime_ns - ((mtime_ns % 1000000000) + 1000000000) % 1000000000) / 1000000000, ((mtime_ns % 1000000000) + 1000000000) % 1000000000,
                   (ctime_ns - ((ctime_ns % 1000000000) + 1000000000) % 1000000000) / 1000000000, ((ctime_ns % 1000000000) + 1000000000) % 1000000000,
                   inode, sha256, NULL, NULL
            FROM hash_cache;
        DROP TABLE hash_cache;
        ALTER TABLE hash_cache_3 RENAME TO hash_cache;
        """,
        // 4: the task table checks its states and directions, so a row no ferry wrote (or a bug)
        // cannot hold a state the state machine (TaskState.after) does not know. A row with an
        // unknown state is carried over as queued: the next run checks it against the manifest.
        """
        CREATE TABLE tasks_4 (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            direction TEXT NOT NULL CHECK (direction IN ('pull', 'push')),
            state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed', 'waiting', 'suspended', 'delayed')),
            size INTEGER,
            sha256 TEXT NOT NULL,
            bytes_done INTEGER NOT NULL DEFAULT 0 CHECK (bytes_done >= 0),
            validator TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            not_before TEXT,
            url TEXT,
            UNIQUE (session, path)
        );
        INSERT INTO tasks_4
            SELECT id, session, path,
                   CASE WHEN direction IN ('pull', 'push') THEN direction ELSE 'pull' END,
                   CASE WHEN state IN ('queued', 'running', 'done', 'failed', 'waiting', 'suspended', 'delayed') THEN state ELSE 'queued' END,
                   size, sha256, max(bytes_done, 0), validator, attempts, last_error, created_at, updated_at, not_before, url
            FROM tasks;
        DROP TABLE tasks;
        ALTER TABLE tasks_4 RENAME TO tasks;
        """,
        // 5: the same checks written as OR chains. SQLite evaluates a CHECK's `IN (list)` by
        // building a temporary b-tree for the list on every statement, which made each task insert
        // and update 1.5-2x slower (10,000 small files: ~0.15 s); `=` comparisons cost nothing.
        """
        CREATE TABLE tasks_5 (
            id INTEGER PRIMARY KEY,
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            direction TEXT NOT NULL CHECK (direction = 'pull' OR direction = 'push'),
            state TEXT NOT NULL CHECK (state = 'queued' OR state = 'running' OR state = 'done' OR state = 'failed'
                                       OR state = 'waiting' OR state = 'suspended' OR state = 'delayed'),
            size INTEGER,
            sha256 TEXT NOT NULL,
            bytes_done INTEGER NOT NULL DEFAULT 0 CHECK (bytes_done >= 0),
            validator TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            not_before TEXT,
            url TEXT,
            UNIQUE (session, path)
        );
        INSERT INTO tasks_5 SELECT * FROM tasks;
        DROP TABLE tasks;
        ALTER TABLE tasks_5 RENAME TO tasks;
        """,
        // 6: what `ferry agent` says of a session between runs, for status and metrics.
        """
        ALTER TABLE sessions ADD COLUMN agent_pid INTEGER;
        ALTER TABLE sessions ADD COLUMN agent_state TEXT;
        ALTER TABLE sessions ADD COLUMN next_poll TEXT;
        ALTER TABLE sessions ADD COLUMN last_poll_ok TEXT;
        CREATE INDEX tasks_by_state ON tasks (session, state);
        """,
        // 7: what a discretionary session's transfers wait for.
        """
        ALTER TABLE sessions ADD COLUMN held_for TEXT;
        """,
        // 8: the manifest's file count, so an unchanged poll says it without counting the hash cache.
        """
        ALTER TABLE sessions ADD COLUMN manifest_files INTEGER;
        """,
        // 9: push: what the remote said of each file right after ferry placed it there (its size
        // and validator), so a later run tells a file someone else changed from one ferry placed;
        // when the session last checked every published file on the remote; and the warnings said
        // once per path (a symlink in a push source), with what each was about when it was said.
        """
        CREATE TABLE placed (
            session TEXT NOT NULL,
            path TEXT NOT NULL,
            size INTEGER NOT NULL,
            validator TEXT,
            PRIMARY KEY (session, path)
        ) WITHOUT ROWID;
        ALTER TABLE sessions ADD COLUMN remote_checked TEXT;
        CREATE TABLE notices (
            session TEXT NOT NULL,
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            signature TEXT NOT NULL,
            PRIMARY KEY (session, kind, key)
        ) WITHOUT ROWID;
        """,
        // 10: push to S3: a multipart upload in flight, with what it is for, and each part the
        // store acknowledged, so a run after a crash resumes it (`UploadJournal`).
        """
        ALTER TABLE tasks ADD COLUMN upload_id TEXT;
        ALTER TABLE tasks ADD COLUMN upload_content TEXT;
        CREATE TABLE upload_parts (
            task INTEGER NOT NULL,
            number INTEGER NOT NULL,
            size INTEGER NOT NULL,
            etag TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            PRIMARY KEY (task, number)
        ) WITHOUT ROWID;
        """,
        // 11: the keys whose signatures vouched for the manifest last applied or published
        // (`ed25519:BASE64`, separated by spaces; NULL: unsigned), for status, and so that an unchanged poll after
        // trusted-keys dropped that key does not stand for an accepted manifest; and when that
        // manifest expires, so a push re-issues it in time without parsing it.
        """
        ALTER TABLE sessions ADD COLUMN manifest_signer TEXT;
        ALTER TABLE sessions ADD COLUMN manifest_expires TEXT;
        """,
        // 12: what the last run moved: bytes over the network, and bytes a delta took from data
        // the mirror held, for status.
        """
        ALTER TABLE sessions ADD COLUMN last_fetched INTEGER;
        ALTER TABLE sessions ADD COLUMN last_reused INTEGER;
        """,
        // 13: what each source served the last run of a pull with mirrors (`SourceCount.text`), for status.
        """
        ALTER TABLE sessions ADD COLUMN last_sources TEXT;
        """,
        // 14: the time floor of a pull with trusted-keys: the newest signed `generated` it took
        // (never later than this machine's clock when it took it), below which no manifest is taken
        // and by which expiry is judged when the clock says earlier.
        """
        ALTER TABLE sessions ADD COLUMN trust_floor TEXT;
        """,
        // 15: on-switch-check: the switch whose check has not ended (`SwitchCheck.text`: set
        // before the switch, cleared once the check passed or the previous generation is current
        // again), so a run killed meanwhile is finished by the next; and the version a failed
        // check rolled back on this machine, why, and how many rollbacks there were.
        """
        ALTER TABLE sessions ADD COLUMN switch_check TEXT;
        ALTER TABLE sessions ADD COLUMN rejected_version INTEGER;
        ALTER TABLE sessions ADD COLUMN rejected_reason TEXT;
        ALTER TABLE sessions ADD COLUMN rollbacks INTEGER NOT NULL DEFAULT 0;
        """,
        // 16: a pull's place in the last phased rollout it saw (`RolloutStanding.text`; NULL: the
        // manifest had none), for status.
        """
        ALTER TABLE sessions ADD COLUMN rollout TEXT;
        """,
        // 17: the large files the last run fetched whole, their delta not taken, and why
        // (`FallbackRecord.text`: `<reason> <path>` lines; NULL: none), for status.
        """
        ALTER TABLE sessions ADD COLUMN last_fallbacks TEXT;
        """,
        // 18: the machine's byte budget: the bytes each period used (`ByteBudget.Window.key`,
        // such as `day:2026-11-29`), shared by every session and process of this state.
        """
        CREATE TABLE budget (
            period TEXT PRIMARY KEY,
            used INTEGER NOT NULL
        ) WITHOUT ROWID;
        """,
        // 19: the release a pull serves — whole in place and past its on-switch-check — apart from
        // the newest the remote offered (`manifest_version`): its version (NULL for an unversioned
        // manifest) and when it became served (NULL: none known yet).
        """
        ALTER TABLE sessions ADD COLUMN served_version INTEGER;
        ALTER TABLE sessions ADD COLUMN served_since TEXT;
        """,
        // 20: the session's last signed status report (`StatusReports`): its sequence number, what
        // it said (`StatusReport.substance`), when it went, and why the last try failed (NULL: it did not).
        """
        ALTER TABLE sessions ADD COLUMN report_seq INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE sessions ADD COLUMN report_substance TEXT;
        ALTER TABLE sessions ADD COLUMN report_time TEXT;
        ALTER TABLE sessions ADD COLUMN report_failure TEXT;
        """,
        // 21: how ferry knew each placed file held what it sent (`UploadVerification`); NULL for a
        // row an older ferry recorded, whose content object is read back at the next check.
        """
        ALTER TABLE placed ADD COLUMN verified TEXT;
        """,
    ]

    /// `TaskState.after(event)` as SQL: the expression a row's new state is set to, so the table
    /// moves exactly as the core's state machine says and no state rule is spelled out here.
    static func stateAfter(_ event: TaskEvent) -> String { stateAfterSQL[event]! }

    /// True (in SQL) for a row `event` applies to. An OR chain, not `IN (list)`: SQLite builds a
    /// temporary b-tree for an IN list each time a statement runs.
    static func applies(_ event: TaskEvent) -> String { appliesSQL[event]! }

    // Spelled out once: statements run once per file or per engine round name them.
    private static let appliesSQL: [TaskEvent: String] = Dictionary(uniqueKeysWithValues: TaskEvent.allCases.map { event in
        (event, "(" + TaskState.applying(event).map { "state = '\($0.rawValue)'" }.joined(separator: " OR ") + ")")
    })
    private static let stateAfterSQL: [TaskEvent: String] = Dictionary(uniqueKeysWithValues: TaskEvent.allCases.map { event in
        let targets = Set(TaskState.applying(event).compactMap { $0.after(event) })
        precondition(targets.count == 1, "every state an event applies to must move to the same one")
        return (event, "CASE WHEN \(appliesSQL[event]!) THEN '\(targets.first!.rawValue)' ELSE state END")
    })
}

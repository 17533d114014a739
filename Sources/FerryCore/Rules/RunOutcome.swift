/// What one session's run came to, in the terms that decide its exit code (docs/design.md,
/// data-safety rule 14). One rule for a run and for several: every condition present maps to an
/// exit code, and the one that needs the most attention wins — within a session exactly as across
/// sessions.
public struct RunOutcome: Sendable, Equatable {
    /// The run could not go on (config, remote, manifest, disk, busy, stopped before transfers).
    public var error: FerryError.Category?
    /// A disk-level failure (full, read-only, I/O error) while placing files.
    public var localIOFailed = false
    /// Files that failed (transfer, verification, a path in the way).
    public var failed = 0
    /// Deletions refused by `max-delete`.
    public var deletionsRefused = false
    /// Files waiting for connectivity: the remote could not be reached for them.
    public var waiting = 0
    /// A deadline or signal stopped the run with work left.
    public var stopped = false
    /// Files suspended by `ferry cancel`.
    public var suspended = 0
    /// Files delayed to a later run (`earliest-begin`, `--not-before`).
    public var delayed = 0
    /// Files a discretionary session holds until its conditions hold.
    public var held = 0

    public init(error: FerryError.Category? = nil, localIOFailed: Bool = false, failed: Int = 0, deletionsRefused: Bool = false,
                waiting: Int = 0, stopped: Bool = false, suspended: Int = 0, delayed: Int = 0, held: Int = 0) {
        self.error = error
        self.localIOFailed = localIOFailed
        self.failed = failed
        self.deletionsRefused = deletionsRefused
        self.waiting = waiting
        self.stopped = stopped
        self.suspended = suspended
        self.delayed = delayed
        self.held = held
    }

    /// The exit code of each condition present; an outcome with none is in sync.
    public var codes: [ExitCode] {
        var codes: [ExitCode] = []
        if let error { codes.append(FerryError(error, "").exitCode) }
        if localIOFailed { codes.append(.localIO) }
        if failed > 0 || deletionsRefused { codes.append(.someFilesFailed) }
        if waiting > 0 { codes.append(.remoteOrManifest) }
        if stopped || suspended > 0 || delayed > 0 || held > 0 { codes.append(.incomplete) }
        return codes
    }

    public var exitCode: ExitCode { ExitCode.worst(codes) }
}

extension ExitCode {
    /// Most attention first: a usage error, then the local disk, the remote or manifest, a busy
    /// session, failed files, and last work left for a later run.
    static let precedence: [ExitCode] = [.usage, .localIO, .remoteOrManifest, .sessionBusy, .someFilesFailed, .incomplete, .inSync]

    /// The code that needs the most attention among `codes` (in sync when there are none): used
    /// for the conditions of one run and for the runs of several sessions alike.
    public static func worst(_ codes: [ExitCode]) -> ExitCode {
        precedence.first(where: codes.contains) ?? .inSync
    }
}

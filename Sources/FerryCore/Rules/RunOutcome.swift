/// What one session's run came to, in the terms that decide its exit code (docs/design.md,
/// data-safety rule 14). One rule for a run and for several: every condition present maps to an
/// exit code, and the one that needs the most attention wins — within a session exactly as across
/// sessions.
public struct RunOutcome: Sendable, Equatable {
    /// The run could not go on (config, remote, manifest, disk, busy, stopped before transfers).
    public var error: FerryError.Category?
    /// A disk-level failure (full, read-only, I/O error) while placing files.
    public var localIOFailed = false
    /// The run's files: those that failed (transfer, verification, a path in the way), wait for
    /// connectivity, or were suspended, delayed or held for a later run (what it transferred or deleted
    /// decides nothing).
    public var counts: TransferCounts
    /// Deletions refused by `max-delete`.
    public var deletionsRefused = false
    /// A deadline or signal stopped the run with work left.
    public var stopped = false

    public init(error: FerryError.Category? = nil, localIOFailed: Bool = false, counts: TransferCounts = TransferCounts(),
                deletionsRefused: Bool = false, stopped: Bool = false) {
        self.error = error
        self.localIOFailed = localIOFailed
        self.counts = counts
        self.deletionsRefused = deletionsRefused
        self.stopped = stopped
    }

    /// The exit code of each condition present; an outcome with none is in sync.
    public var codes: [ExitCode] {
        var codes: [ExitCode] = []
        if let error { codes.append(FerryError(error, "").exitCode) }
        if localIOFailed { codes.append(.localIO) }
        if counts.failed > 0 || deletionsRefused { codes.append(.someFilesFailed) }
        if counts.waiting > 0 { codes.append(.remoteOrManifest) }
        if stopped || counts.suspended > 0 || counts.delayed > 0 || counts.held > 0 { codes.append(.incomplete) }
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

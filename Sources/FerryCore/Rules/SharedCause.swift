import Glibc

/// A failure that is not the file's own but the disk's: once the disk is full (or the quota
/// spent), every file written after it fails for the same reason. The terminal and the agent's
/// log say such a cause once per session and run, on the first file it failed; the event log,
/// `--json` and hooks keep a `file-failed` for each file.
public enum SharedCause {
    /// The errors that are the whole filesystem's, as `strerror` says them in a file's error.
    private static let diskWide: [String] = [ENOSPC, EDQUOT].map { String(cString: strerror($0)) }

    /// The shared cause `error` names (the text the first file said it with), or nil when the
    /// failure is the file's own.
    public static func of(_ error: String) -> String? {
        diskWide.first { error.contains($0) }
    }

    /// What tells one retried failure from another: its text without the time libcurl says it
    /// took ("after 3 ms", "after 30001 milliseconds"), which differs from try to try of the same
    /// failure. The terminal says a retry once per distinct failure.
    public static func retryIdentity(_ error: String) -> String {
        error.replacing(/after [0-9]+ (ms|milliseconds)/, with: "after some time")
    }
}

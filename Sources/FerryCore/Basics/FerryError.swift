/// The exit statuses of the contract (docs/design.md, data-safety rule 14). Every error maps to
/// exactly one.
public enum ExitCode: Int32, Sendable {
    case inSync = 0
    case someFilesFailed = 1
    case usage = 2
    case incomplete = 3
    case remoteOrManifest = 4
    case localIO = 5
    case sessionBusy = 6

    /// A word for the code, for hooks (`FERRY_RESULT`) and metrics.
    public var name: String {
        switch self {
        case .inSync: return "in-sync"
        case .someFilesFailed: return "files-failed"
        case .usage: return "usage"
        case .incomplete: return "incomplete"
        case .remoteOrManifest: return "remote-or-manifest"
        case .localIO: return "local-io"
        case .sessionBusy: return "busy"
        }
    }
}

/// An error a user can act on: what was wrong, and (when there is one) what to do next.
/// The category decides the exit code, so callers never pick exit codes by hand.
public struct FerryError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Category: Sendable, Equatable {
        /// Bad command line or config file.
        case usage
        /// The remote could not be reached, or answered with an error for the manifest.
        case remote
        /// The manifest is malformed, hostile, a rollback or expired.
        case manifest
        /// The local disk refused: permissions, full disk, a path that is not what it should be.
        case localIO
        /// Another process holds the session.
        case busy
        /// One file failed (its transfer, or a local path in its way); the run goes on with the others.
        case transfer
        /// A deadline or signal stopped the run; work remains and the next run resumes it.
        case stopped
    }

    public let category: Category
    public let message: String
    public let hint: String?
    /// What failed underneath, for errors from a request: decides whether trying again can help.
    public var cause: FailureCause?

    public init(_ category: Category, _ message: String, hint: String? = nil, cause: FailureCause? = nil) {
        self.category = category
        self.message = message
        self.hint = hint
        self.cause = cause
    }

    /// Whether trying again can help (never for errors that did not come from a request).
    public var retryClass: RetryClass { cause?.retryClass ?? .never }

    public var exitCode: ExitCode {
        switch category {
        case .usage: return .usage
        case .remote, .manifest: return .remoteOrManifest
        case .localIO: return .localIO
        case .busy: return .sessionBusy
        case .transfer: return .someFilesFailed
        case .stopped: return .incomplete
        }
    }

    public var description: String {
        if let hint { return "\(message)\n  hint: \(hint)" }
        return message
    }

    public static func usage(_ message: String, hint: String? = nil) -> FerryError { FerryError(.usage, message, hint: hint) }
    public static func manifest(_ message: String, hint: String? = nil) -> FerryError { FerryError(.manifest, message, hint: hint) }
    public static func remote(_ message: String, hint: String? = nil) -> FerryError { FerryError(.remote, message, hint: hint) }
    public static func localIO(_ message: String, hint: String? = nil) -> FerryError { FerryError(.localIO, message, hint: hint) }
}

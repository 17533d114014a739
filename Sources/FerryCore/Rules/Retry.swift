/// Whether trying a failed request again can help: one classification for manifest fetches and
/// transfers alike.
public enum RetryClass: String, Sendable {
    /// No: the answer will be the same (404, a hash that does not match, a full disk).
    case never
    /// Yes, after a backoff: a reset, a truncated body, a stall, a 5xx or 429.
    case later
    /// Yes, once the remote can be reached again.
    case connectivity
}

/// Why a request failed, in terms a rule can decide on.
public enum FailureCause: Sendable, Equatable {
    /// libcurl ended the transfer with this CURLcode.
    case network(curlCode: Int32)
    /// The server answered with this HTTP status.
    case http(status: Int)
    /// A local system call failed with this errno (writing, syncing, truncating the partial).
    case local(errno: Int32)
    /// The body ended before the size the manifest gives.
    case truncated
    /// The server announced or sent another length than the manifest gives.
    case wrongLength
    /// The server did not honour a range request as asked (wrong Content-Range, another validator).
    case rangeNotHonoured
    /// The bytes do not hash to the manifest's SHA-256. After a resume (or from a kept partial) the
    /// resumed prefix may be the culprit, and a fresh download may succeed.
    case contentMismatch(afterResume: Bool)
    /// The response could not be used for another reason (a header larger than libcurl accepts).
    case unusable
    /// Push: the local file changed while (or after) it was hashed; it is sent again.
    case sourceChanged

    /// CURLcode values (stable across libcurl versions) the classification depends on.
    enum CurlCode {
        static let couldntResolveProxy: Int32 = 5, couldntResolveHost: Int32 = 6, couldntConnect: Int32 = 7
        static let http2: Int32 = 16, partialFile: Int32 = 18, operationTimedOut: Int32 = 28, sslConnectError: Int32 = 35
        static let abortedByCallback: Int32 = 42
        static let gotNothing: Int32 = 52, sendError: Int32 = 55, recvError: Int32 = 56, http2Stream: Int32 = 92
    }

    /// HTTP statuses that may succeed on a later try: timeouts, rate limits, a server in trouble,
    /// and a range the server cannot satisfy (the next try asks for the whole file).
    static let transientStatuses: Set<Int> = [408, 416, 425, 429, 500, 502, 503, 504]

    public var retryClass: RetryClass {
        switch self {
        case let .network(code):
            switch code {
            case CurlCode.couldntResolveProxy, CurlCode.couldntResolveHost, CurlCode.couldntConnect:
                return .connectivity
            case CurlCode.http2, CurlCode.partialFile, CurlCode.operationTimedOut, CurlCode.sslConnectError,
                 CurlCode.gotNothing, CurlCode.sendError, CurlCode.recvError, CurlCode.http2Stream:
                return .later
            default:
                return .never
            }
        case let .http(status):
            return FailureCause.transientStatuses.contains(status) ? .later : .never
        case .local, .wrongLength, .unusable:
            return .never
        case .truncated, .rangeNotHonoured, .sourceChanged:
            return .later
        case let .contentMismatch(afterResume):
            return afterResume ? .later : .never
        }
    }

    /// True when the remote could not be reached at all.
    public var isConnectivity: Bool { retryClass == .connectivity }
    /// True when a request ran out of time: a connect that took too long, or an answer that sent
    /// nothing (below min-speed) for the stall time.
    public var isTimeout: Bool { self == .network(curlCode: CurlCode.operationTimedOut) }
}

/// How long to wait before try number `attempt + 1` (attempt ≥ 1): exponential from `baseDelay`,
/// capped at a minute, with jitter so that many clients do not come back in step; at least what
/// the server asked for with `Retry-After` (or S3's SlowDown with it), up to
/// `maximumServerRequestedWait`. `jitter` is in 0.5...1. A run's deadline stops the wait
/// wherever it falls (`StopCondition`).
public func retryDelay(attempt: Int, baseDelay: Double, retryAfter: Double?, jitter: Double) -> Double {
    let backoff = min(60, baseDelay * Double(1 << min(max(attempt, 1) - 1, 16)))
    var delay = backoff * jitter
    if let retryAfter, retryAfter.isFinite { delay = max(delay, min(retryAfter, maximumServerRequestedWait)) }
    return delay
}

/// The longest one wait a server's `Retry-After` can impose on a try: 5 minutes. A server's word
/// is a hint, not a command; with `retries` tries a run waits at most `retries` times this, and a
/// later run (or the agent's next cycle) asks again.
public let maximumServerRequestedWait: Double = 300

/// What a transfer does after a failed attempt: one rule for downloads and uploads.
public enum RetryDecision: Equatable, Sendable {
    /// Try again in this run, after this many seconds.
    case retry(after: Double)
    /// The remote cannot be reached and this run's tries are spent: the task waits for
    /// connectivity (a later run, or the agent, tries it again).
    case waitForConnectivity
    /// The task fails, with this message.
    case giveUp(message: String)
}

/// A session's retry settings (`retries`, `retry-delay`, `resource-timeout`) as a rule.
public struct RetryRule: Sendable {
    public var retries: Int
    public var baseDelay: Double
    public var resourceTimeout: Double

    public init(retries: Int, baseDelay: Double, resourceTimeout: Double) {
        self.retries = retries
        self.baseDelay = baseDelay
        self.resourceTimeout = resourceTimeout
    }

    /// After try number `triesThisRun` of this run failed with `message` (of class `retry`), for a
    /// task queued `queuedFor` seconds ago. `jitter` is in 0.5...1 (see `retryDelay`).
    public func decide(message: String, retry: RetryClass, retryAfter: Double?, triesThisRun: Int, queuedFor: Double,
                       jitter: Double) -> RetryDecision {
        if retry == .never { return .giveUp(message: message) }
        if queuedFor > resourceTimeout {
            return .giveUp(message: "\(message) (gave up: unfinished \(Units.formatDuration(resourceTimeout)) after it was queued; resource-timeout)")
        }
        if triesThisRun > retries {
            return retry == .connectivity ? .waitForConnectivity : .giveUp(message: "\(message) (after \(triesThisRun) tries)")
        }
        return .retry(after: retryDelay(attempt: triesThisRun, baseDelay: baseDelay, retryAfter: retryAfter, jitter: jitter))
    }
}

extension SessionConfig {
    public var retryRule: RetryRule { RetryRule(retries: retries, baseDelay: retryDelay, resourceTimeout: resourceTimeout) }
}

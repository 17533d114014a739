/// What `ferry agent` says of a session between its cycles. `status` shows it (its first word as
/// the state, all of it as the detail), a `session-state` event says it when it changes, and
/// metrics and sd_notify count the sessions whose last poll failed. `text` is the one form it is
/// written in (the store, events); `init?(text:)` reads that back.
public enum PollState: Sendable, Equatable {
    /// The agent started and runs the session's first cycle.
    case starting
    /// The last poll reached the remote and the run went as far as it could.
    case idle
    /// The last poll reached the remote, and a discretionary session's transfers wait: how many
    /// files, for what.
    case held(String)
    /// Another ferry process holds the session.
    case busy
    /// The last poll failed for what connectivity can cure (why): it is tried again after a backoff.
    case waiting(String)
    /// The last poll failed for anything else (why): a refusal, a manifest that does not parse, the disk.
    case failed(String)

    private static let busyText = "busy: another ferry process holds the session"

    /// What is written and shown.
    public var text: String {
        switch self {
        case .starting: return "starting"
        case .idle: return "idle"
        case let .held(detail): return "held: " + detail
        case .busy: return PollState.busyText
        case let .waiting(why): return "waiting for connectivity: " + why
        case let .failed(why): return "failed: " + why
        }
    }

    /// The state whose `text` this is; nil for any other text.
    public init?(text: String) {
        switch text {
        case "starting": self = .starting
        case "idle": self = .idle
        case PollState.busyText: self = .busy
        default:
            let detailed: [(prefix: String, state: (String) -> PollState)] = [
                ("held: ", PollState.held), ("waiting for connectivity: ", PollState.waiting), ("failed: ", PollState.failed),
            ]
            guard let match = detailed.first(where: { text.hasPrefix($0.prefix) }) else { return nil }
            self = match.state(String(text.dropFirst(match.prefix.count)))
        }
    }

    public var isWaiting: Bool { if case .waiting = self { true } else { false } }
    public var isFailed: Bool { if case .failed = self { true } else { false } }
    /// The last poll failed, for whatever cause: the session waits between polls.
    public var lastPollFailed: Bool { isWaiting || isFailed }
}

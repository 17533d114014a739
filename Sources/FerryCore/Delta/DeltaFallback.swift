/// Why a large file with a content index was fetched whole, its delta not taken. Never silent:
/// a `delta-fallback` event says it once per file and run (a line per reason on a terminal),
/// `status` lists the last run's, and `ferry_delta_fallbacks_total{reason}` counts them.
public enum DeltaFallback: String, Sendable, CaseIterable, Comparable {
    /// The index does not read as ferry writes one (its structure, its bounds).
    case indexRefused = "index-refused"
    /// An object of the index does not match its name (damaged at the remote or on the way).
    case indexDamaged = "index-damaged"
    /// An object of the index is not on the remote.
    case indexMissing = "index-missing"
    /// An object of the index could not be fetched (the network, a server error).
    case indexUnavailable = "index-unavailable"
    /// The server did not answer ranges as asked (the whole file for a range, another range).
    case rangesRefused = "ranges-refused"
    /// The bytes fetched for a piece did not match the index twice, or the file assembled from
    /// pieces that each matched did not match its SHA-256: the index does not describe the file.
    case piecesWrong = "pieces-wrong"

    /// The reason in a sentence's words ("its index is damaged").
    public var said: String {
        switch self {
        case .indexRefused: return "its index is refused"
        case .indexDamaged: return "its index is damaged"
        case .indexMissing: return "its index is missing"
        case .indexUnavailable: return "its index could not be fetched"
        case .rangesRefused: return "the server did not answer ranges as asked"
        case .piecesWrong: return "the bytes fetched did not match its index"
        }
    }

    /// Why an index could not be read, from the error that said so.
    public static func reading(_ error: FerryError) -> DeltaFallback {
        switch error.cause {
        case .contentMismatch?: return .indexDamaged
        case .http(status: 404)?, .http(status: 410)?: return .indexMissing
        case nil where error.category == .manifest: return .indexRefused
        default: return .indexUnavailable
        }
    }

    public static func < (a: DeltaFallback, b: DeltaFallback) -> Bool { a.rawValue < b.rawValue }
}

/// One file fetched whole, and why (for `status`, from the state).
public struct FallbackRecord: Sendable, Equatable {
    public let path: String
    public let reason: DeltaFallback

    public init(path: String, reason: DeltaFallback) {
        self.path = path
        self.reason = reason
    }

    /// `<reason> <path>` lines, as the state keeps them (at most `limit` of them).
    public static func text(_ records: [FallbackRecord], limit: Int = 20) -> String {
        records.prefix(limit).map { "\($0.reason.rawValue) \($0.path)" }.joined(separator: "\n")
    }

    public static func parse(_ text: String) -> [FallbackRecord] {
        text.split(separator: "\n").compactMap { line in
            guard let space = line.firstIndex(of: " "),
                let reason = DeltaFallback(rawValue: String(line[..<space])) else {
                return nil
            }
            return FallbackRecord(path: String(line[space...].dropFirst()), reason: reason)
        }
    }
}

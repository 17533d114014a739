import CCurl
import Synchronization

/// How soon each source of a run answers: the time from a request's start to its first byte
/// (libcurl's start-transfer time: connect, TLS, the request, and the server's think time), kept
/// per source for the run. It sets a mirror's patience, and `status` and the metrics tell it.
///
/// **Patience** is what a source may take to connect, or to send again, before it is judged slow:
/// ten times the slowest first byte this run has seen from any source that answered, never under
/// `floor` (a healthy cache starts an answer in milliseconds, even on a miss, so a few seconds
/// is already far above it) and never over the session's stall-timeout (nor its connect-timeout
/// to connect). A link where answers take a second waits ten; a hung cache on a quick link costs
/// the floor, once.
public final class FirstBytes: Sendable {
    public struct Seen: Sendable, Equatable {
        public var count = 0
        public var total = 0.0
        public var slowest = 0.0
        public var mean: Double { count == 0 ? 0 : total / Double(count) }
    }

    private let seen: Mutex<[Int: Seen]>
    /// The least patience, and the most: the session's stall-timeout, and its connect-timeout
    /// to connect (the floor is never above either).
    public let floor: Double
    public let ceiling: Double
    public let connectCeiling: Double
    public static let factor = 10.0

    public init(floor: Double, stallTimeout: Double, connectTimeout: Double) {
        self.floor = min(floor, stallTimeout, connectTimeout)
        ceiling = stallTimeout
        connectCeiling = connectTimeout
        seen = Mutex([:])
    }

    /// The meter of one source: what its requests record, and whether they are held to patience.
    public func meter(source: Int, patient: Bool) -> Meter { Meter(log: self, source: source, patient: patient) }

    func record(_ source: Int, seconds: Double) {
        guard seconds > 0, seconds.isFinite else { return }
        seen.withLock { s in
            var one = s[source] ?? Seen()
            one.count += 1
            one.total += seconds
            one.slowest = max(one.slowest, seconds)
            s[source] = one
        }
    }

    /// What this run has seen of `source` (nothing yet: a count of 0).
    public func seen(_ source: Int) -> Seen { seen.withLock { $0[source] ?? Seen() } }

    /// The patience in force now (see the type).
    public var patience: Double {
        let slowest = seen.withLock { $0.values.map(\.slowest).max() ?? 0 }
        return min(ceiling, max(floor, slowest * FirstBytes.factor))
    }

    /// One source's view of the log, carried by its requests (`HTTPSettings.meter`).
    public struct Meter: Sendable {
        let log: FirstBytes
        let source: Int
        /// Its requests give up after `patience` (a mirror, or the origin's root while a mirror
        /// may stand for it); the others keep the session's timeouts and are only timed.
        let patient: Bool

        /// Records the first byte of the request `easy` just made (nothing when none came).
        func record(_ easy: EasyHandle) {
            var micros: curl_off_t = 0
            guard ferry_easy_getinfo_offt(easy.handle, CURLINFO_STARTTRANSFER_TIME_T, &micros) == CURLE_OK else { return }
            log.record(source, seconds: Double(micros) / 1_000_000)
        }
    }
}

import CCurl
import FerryCore

/// `ferry config check --online`: each session's remote and mirrors asked once, as a run asks
/// them — opened with their credentials (S3 keys, the SSH key and host key), then asked for the
/// manifest — so wrong static keys, an unknown host key or an unreachable server are found before
/// the first run. Where the manifest answered over HTTP (HTTP(S) and S3), its first byte is asked
/// as a range too (`probe`): whether the server answers ranges, and how far its clock (`Date`)
/// is from this machine's. Short waits: 10 s to connect and to answer.
public enum OnlineCheck {
    public struct Finding: Sendable {
        /// `remote URL` or `mirror URL`.
        public let place: String
        public let ok: Bool
        public let text: String
        public let hint: String?
    }

    public static func findings(for session: SessionConfig, clock: any Clock) -> [Finding] {
        var out = findings(place: "remote \(session.remote.url)", reading: session, isMirror: false, clock: clock)
        for i in session.mirrors.indices {
            out += findings(place: "mirror \(session.mirrors[i].url)", reading: session.reading(mirror: i), isMirror: true, clock: clock)
        }
        return out
    }

    /// The remote's line, and the probe's when the manifest answered.
    private static func findings(place: String, reading: SessionConfig, isMirror: Bool, clock: any Clock) -> [Finding] {
        var session = reading
        session.connectTimeout = min(session.connectTimeout, 10)
        session.stallTimeout = min(session.stallTimeout, 10)
        session.retries = 0
        do throws(FerryError) {
            let remote = try Remotes.open(session, clock: clock, stop: nil)
            switch try remote.fetchManifest(url: session.manifestURL, etag: nil, lastModified: nil, maximumSize: session.maxManifestSize) {
            case let .fetched(bytes, _, _, _):
                return [Finding(place: place, ok: true, text: "answered: \(Printable.name(session.manifest)) (\(Units.formatBytes(Int64(bytes.count))))", hint: nil)]
                    + probe(remote, session: session, place: place, clock: clock)
            case .unchanged:
                return [Finding(place: place, ok: true, text: "answered", hint: nil)]
            case let .missing(error):
                // Nothing published yet is a push's start; a cache holds the root only once asked.
                if session.direction == .push || isMirror {
                    return [Finding(place: place, ok: true, text: "reached; no \(Printable.name(session.manifest)) there yet", hint: nil)]
                }
                return [Finding(place: place, ok: false, text: error.message, hint: error.hint)]
            }
        } catch {
            return [Finding(place: place, ok: false, text: error.message, hint: error.hint)]
        }
    }

    /// How far the server's clock may be from this machine's before it is said (a minute: `Date`
    /// has a second's grain, and a machine without NTP drifts that in days), and before it is a
    /// problem: S3 refuses a request signed more than 15 minutes off, and a signed manifest's
    /// expiry and time floor are judged on this machine's clock.
    static let clockNoted = 60.0
    static let clockRefused = 15 * 60.0

    /// The manifest's first byte asked as a range, as a resumed download or a delta asks: a `206`
    /// says the server answers ranges (a pull's line; a push does not read ranges), and its
    /// `Date` how far its clock is from this machine's. Nothing for a remote whose manifest is
    /// not a file under it, or that does not speak HTTP.
    static func probe(_ remote: Remote, session: SessionConfig, place: String, clock: any Clock) -> [Finding] {
        guard !session.manifest.contains("://"), case let .request(read) = remote.origin(of: RelativePath(trusted: session.manifest)),
              let request = try? read.build(0, nil) else { return [] }
        let asked = clock.now()
        let answer = EasyHandle.borrow { easy in
            Exchange.perform(easy, request, limit: 64, dropExcess: true) { $0.set(CURLOPT_RANGE, "0-0") }
        }
        guard answer.code == CURLE_OK else { return [] }
        var out: [Finding] = []
        if session.direction == .pull {
            out.append(answer.headers.status == 206
                ? Finding(place: place, ok: true, text: "ranges: answered (206); resumes and deltas read only what they need", hint: nil)
                : Finding(place: place, ok: true, text: "ranges: not answered (HTTP \(answer.headers.status) to a range): an interrupted "
                          + "download starts again, and a delta fetches whole files", hint: nil))
        }
        if let text = answer.headers.date, let date = Timestamp(httpDate: text) {
            out.append(clockFinding(server: date, asked: asked, now: clock.now(), place: place))
        }
        return out
    }

    /// The server's `Date` against this machine's clock between asking and the answer (the
    /// server's second falls in that span, give or take its grain).
    static func clockFinding(server: Timestamp, asked: Timestamp, now: Timestamp, place: String) -> Finding {
        let ahead = server.timeInterval - now.timeInterval, behind = asked.timeInterval - server.timeInterval - 1
        let off = ahead > 0 ? ahead : max(0, behind)
        guard off > clockNoted else {
            return Finding(place: place, ok: true, text: "clock: within a minute of the server's", hint: nil)
        }
        let how = "this machine's clock is \(Units.formatDuration(off)) \(ahead > 0 ? "behind" : "ahead of") the server's"
        let hint = "set this machine's time (an NTP client such as systemd-timesyncd or chrony), or the server's"
        guard off > clockRefused else {
            return Finding(place: place, ok: true, text: "clock: \(how); check its time", hint: nil)
        }
        return Finding(place: place, ok: false, text: "clock: \(how): S3 refuses requests signed that far off, and signed "
                       + "manifests' expiry is judged on this clock", hint: hint)
    }
}

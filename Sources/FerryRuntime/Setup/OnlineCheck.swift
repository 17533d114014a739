import FerryCore

/// `ferry config check --online`: each session's remote and mirrors asked once, as a run asks
/// them — opened with their credentials (S3 keys, the SSH key and host key), then asked for the
/// manifest — so wrong static keys, an unknown host key or an unreachable server are found before
/// the first run. Short waits: 10 s to connect and to answer.
public enum OnlineCheck {
    public struct Finding: Sendable {
        /// `remote URL` or `mirror URL`.
        public let place: String
        public let ok: Bool
        public let text: String
        public let hint: String?
    }

    public static func findings(for session: SessionConfig, clock: any Clock) -> [Finding] {
        var out = [finding(place: "remote \(session.remote.url)", reading: session, isMirror: false, clock: clock)]
        for i in session.mirrors.indices {
            out.append(finding(place: "mirror \(session.mirrors[i].url)", reading: session.reading(mirror: i), isMirror: true, clock: clock))
        }
        return out
    }

    private static func finding(place: String, reading: SessionConfig, isMirror: Bool, clock: any Clock) -> Finding {
        var session = reading
        session.connectTimeout = min(session.connectTimeout, 10)
        session.stallTimeout = min(session.stallTimeout, 10)
        session.retries = 0
        do throws(FerryError) {
            let remote = try Remotes.open(session, clock: clock, stop: nil)
            switch try remote.fetchManifest(url: session.manifestURL, etag: nil, lastModified: nil, maximumSize: session.maxManifestSize) {
            case let .fetched(bytes, _, _, _):
                return Finding(place: place, ok: true, text: "answered: \(Printable.name(session.manifest)) (\(Units.formatBytes(Int64(bytes.count))))", hint: nil)
            case .unchanged:
                return Finding(place: place, ok: true, text: "answered", hint: nil)
            case let .missing(error):
                // Nothing published yet is a push's start; a cache holds the root only once asked.
                if session.direction == .push || isMirror {
                    return Finding(place: place, ok: true, text: "reached; no \(Printable.name(session.manifest)) there yet", hint: nil)
                }
                return Finding(place: place, ok: false, text: error.message, hint: error.hint)
            }
        } catch {
            return Finding(place: place, ok: false, text: error.message, hint: error.hint)
        }
    }
}

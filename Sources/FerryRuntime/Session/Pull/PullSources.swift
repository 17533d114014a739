import FerryCore

/// Where a pull's files come from (`mirrors`): the session's mirrors in order, then its remote,
/// the origin. A file starts at the first source that is not resting or demoted and that has not
/// failed it this run. Nothing a source sends is trusted (every file is checked against the
/// manifest, every piece of a delta against its index), so what a mirror does wrong costs a
/// refetch, never a wrong file:
/// - a mirror that fails a file (an error status, a network error, a stall, a timeout) is skipped
///   for it, and (unless it only lacks the file: 404, 410) rests before another file is started
///   there, longer after each failure in a row (1 s doubling up to a minute);
/// - a mirror that sends wrong bytes (the hash does not match) is demoted: not used again this
///   run, said once.
/// - until a mirror has sent one file that verified this run, one file at a time comes from it
///   (the others wait for that one), so a mirror that sends wrong bytes costs one file before it is
///   demoted, not one per transfer; the first file a run fetches is its smallest for that reason.
/// The origin is never skipped: its failures follow the session's retry rules. What each source
/// served, and how many requests it took, is counted for the run's summary, `status` and metrics.
final class PullSources {
    struct Source {
        /// How the source is named in events, status and metrics: `origin`, or the mirror's URL.
        let name: String
        let remote: Remote
        /// Its copy of the manifest, and where its metadata objects are (`.ferry/meta/` beside it).
        var manifestURL = ""
        var objectPrefix = ""
        var isOrigin: Bool { name == PullSources.origin }
        /// Why it is not used again this run, once it is not.
        var demoted: String?
        var failuresInARow = 0
        /// It sent a file that verified this run; until then one file at a time comes from it.
        var proven = false
        var inFlight = 0
        var restsUntil = 0.0
        var bytes: Int64 = 0
        var requests = 0
    }

    static let origin = "origin"
    private(set) var all: [Source]
    /// The mirrors that could not be opened (their credentials, their address), and why.
    let unopened: [(url: String, why: String)]

    /// The session's mirrors, each opened as the session reads it (`SessionConfig.reading`), then `remote`.
    init(session: SessionConfig, remote: Remote, clock: any Clock, stop: StopCondition?) {
        var sources: [Source] = []
        var unopened: [(String, String)] = []
        for i in session.mirrors.indices {
            do throws(FerryError) {
                let reading = session.reading(mirror: i)
                sources.append(Source(name: session.mirrors[i].url, remote: try Remotes.open(reading, clock: clock, stop: stop),
                                      manifestURL: reading.manifestURL, objectPrefix: ManifestTree.objectDirectory(beside: reading.manifestURL) + "/"))
            } catch {
                unopened.append((session.mirrors[i].url, error.message))
            }
        }
        sources.append(Source(name: PullSources.origin, remote: remote))
        all = sources
        self.unopened = unopened
    }

    var hasMirrors: Bool { all.count > 1 }
    /// The mirrors as `ManifestObjects` asks them, in order (by their place in `all`).
    var mirrorObjects: [(remote: Remote, prefix: String)] { all.dropLast().map { ($0.remote, $0.objectPrefix) } }
    var originIndex: Int { all.count - 1 }

    /// The source a file starts from: the first that neither rests nor was demoted and that
    /// `skipping` (the sources that failed it this run) does not name; the origin otherwise. Nil:
    /// that source is a mirror still sending its first file, which the file waits for.
    func pick(skipping: Set<Int>, now: Double) -> Int? {
        let i = all.indices.first { i in
            all[i].isOrigin || (all[i].demoted == nil && all[i].restsUntil <= now && !skipping.contains(i))
        } ?? originIndex
        return all[i].isOrigin || all[i].proven || all[i].inFlight == 0 ? i : nil
    }

    /// A file started from `source`.
    func started(_ source: Int) { all[source].inFlight += 1 }

    /// A file from `source` ended; `verified`: its bytes are the manifest's.
    func ended(_ source: Int, verified: Bool) {
        all[source].inFlight -= 1
        if verified { all[source].proven = true }
    }

    /// An attempt at `source` moved `bytes` in `requests` requests.
    func count(_ source: Int, bytes: Int64, requests: Int) {
        all[source].bytes += bytes
        all[source].requests += requests
    }

    /// A file came whole from `source`: its run of failures ends.
    func served(_ source: Int) { all[source].failuresInARow = 0 }

    /// `source` failed a file: it rests, longer after each failure in a row.
    func failed(_ source: Int, now: Double) {
        guard !all[source].isOrigin else { return }
        all[source].failuresInARow += 1
        all[source].restsUntil = now + min(60, Double(1 << min(all[source].failuresInARow - 1, 6)))
    }

    /// `source` sent wrong bytes: not used again this run. True the first time (to be said once).
    func demote(_ source: Int, why: String) -> Bool {
        guard !all[source].isOrigin, all[source].demoted == nil else { return false }
        all[source].demoted = why
        return true
    }

    /// What each source did this run, for the `sources` event and the state.
    var summary: [SourceCount] {
        all.map { SourceCount(source: $0.name, bytes: $0.bytes, requests: $0.requests, demoted: $0.demoted) }
    }
}

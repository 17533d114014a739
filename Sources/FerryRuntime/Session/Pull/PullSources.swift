import Synchronization
import FerryCore

/// Where a pull's bytes come from, and the one owner of every rule about it: the session's
/// mirrors in order, then its remote, the origin, which stays the authority for the manifest.
/// Nothing a source sends is trusted (every file is checked against the manifest, every piece of
/// a delta against its index, every metadata object against its name), so what a mirror does
/// wrong costs a refetch, never a wrong file. This type decides:
/// - **which source** a file starts from (`pick`): the first that neither rests nor was demoted
///   and that has not failed it this run; until a mirror has sent one file that verified this
///   run (**probation**), one file at a time comes from it;
/// - **what a failure costs** a mirror (`judge`): wrong bytes under a content name demote it
///   (not used again this run, said once), wrong bytes at a path (a stale copy) skip it for that
///   file until they come too often (`wrongAtPathLimit`, and more than its right ones), a mirror
///   that sends nothing for its patience (`FirstBytes`: ten times the slowest first byte of the
///   run, at least `mirrorPatience`) is left for the run like a demoted one (a hung cache costs
///   the run seconds once, not a stall per file), another failure rests it (1 s doubling up to a
///   minute; not for a file it lacks);
/// - which sources **metadata objects and key sets** are asked of (`ObjectMirrors`,
///   `keySetPlaces`), and that a mirror sending a wrong object is demoted for the files too;
/// - when the **root** may come from a mirror (`rootFromMirror`): the origin cannot be had, or
///   is asked with a mirror's patience and sends nothing for it (`rootOrigin`), and the session
///   takes signed manifests only;
/// - the **accounting**: each source's bytes and requests, files and metadata objects alike, for
///   the run's `source-served` events, `status` and metrics.
/// Mirrors are opened when first needed, so a poll that finds nothing new opens none. The
/// origin is never skipped: its failures follow the session's retry rules. Calls come from the
/// session's thread, the engine's (while the session waits on it) and the lanes that fetch
/// metadata objects (several at once): what they change is kept under a lock.
final class PullSources: ObjectMirrors {
    /// A source: how it is named (`origin`, or the mirror's URL), the remote, and its copy of the
    /// manifest with where its metadata objects are (`.ferry/meta/` beside it).
    struct Source {
        let name: String
        /// Its place in the session's sources as configured (mirrors, then the origin), where its
        /// first bytes are kept (`FirstBytes`).
        let slot: Int
        let remote: Remote
        let manifestURL: String
        let objectPrefix: String
        var isOrigin: Bool { name == PullSources.origin }
    }

    /// What the run has seen of a source so far.
    struct Standing {
        /// Why it is not used again this run, once it is not.
        var demoted: String?
        var failuresInARow = 0
        /// It sent a file that verified this run; until then one file at a time comes from it.
        var proven = false
        /// Files it sent this run that verified, and files whose bytes at their path were not the
        /// manifest's (a stale copy, or a lie).
        var verified = 0
        var wrongAtPath = 0
        var inFlight = 0
        var restsUntil = 0.0
        var bytes: Int64 = 0
        var requests = 0
    }

    static let origin = "origin"
    private let session: SessionConfig
    private let origin: Remote
    private let clock: any Clock
    private let stop: StopCondition
    private let emit: (Event.Body) -> Void
    /// How soon each source answers this run, which sets the mirrors' patience.
    let firstBytes: FirstBytes
    private var opened: [Source]?
    private let standings = Mutex<[Standing]>([])
    /// Demotions for a wrong metadata object, found on a fetching lane, said on the session's thread.
    private let unsaid = Mutex<[Int]>([])

    /// `remote`: the origin, opened with `originMeter`.
    init(session: SessionConfig, remote: Remote, firstBytes: FirstBytes, clock: any Clock, stop: StopCondition,
         emit: @escaping (Event.Body) -> Void) {
        self.session = session
        origin = remote
        self.firstBytes = firstBytes
        self.clock = clock
        self.stop = stop
        self.emit = emit
    }

    /// The first bytes of a session's run: its sources' patience starts at `mirrorPatience`.
    static func firstBytes(of session: SessionConfig) -> FirstBytes {
        FirstBytes(floor: SessionConfig.mirrorPatience, stallTimeout: session.stallTimeout, connectTimeout: session.connectTimeout)
    }

    /// The meter the origin's remote is opened with: its first bytes are timed (in a pull with
    /// mirrors, where they are told beside the mirrors'), and it keeps the session's timeouts.
    static func originMeter(_ session: SessionConfig, _ firstBytes: FirstBytes) -> FirstBytes.Meter? {
        session.mirrors.isEmpty ? nil : firstBytes.meter(source: session.mirrors.count, patient: false)
    }

    /// The sources in order: the mirrors (opened now if not yet, each as the session reads it,
    /// `SessionConfig.reading`; one that cannot be opened is said once and left out), then the origin.
    var all: [Source] {
        if let opened { return opened }
        var sources: [Source] = []
        for i in session.mirrors.indices {
            do throws(FerryError) {
                let reading = session.reading(mirror: i)
                sources.append(Source(name: session.mirrors[i].url, slot: i,
                                      remote: try Remotes.open(reading, clock: clock, stop: stop,
                                                               meter: firstBytes.meter(source: i, patient: true)),
                                      manifestURL: reading.manifestURL,
                                      objectPrefix: ManifestTree.objectDirectory(beside: reading.manifestURL) + "/"))
            } catch {
                emit(.warning(message: "mirror \(session.mirrors[i].url) cannot be used this run: \(error.message); "
                                       + "its files come from the next source"))
            }
        }
        sources.append(Source(name: PullSources.origin, slot: session.mirrors.count, remote: origin, manifestURL: session.manifestURL,
                              objectPrefix: ManifestTree.objectDirectory(beside: session.manifestURL) + "/"))
        opened = sources
        standings.withLock { $0 = Array(repeating: Standing(), count: sources.count) }
        return sources
    }

    var hasMirrors: Bool { !session.mirrors.isEmpty && all.count > 1 }
    var originIndex: Int { all.count - 1 }
    func isOrigin(_ source: Int) -> Bool { source == originIndex }
    func demoted(_ source: Int) -> String? { standings.withLock { $0[source].demoted } }

    // MARK: files

    /// The source a file starts from: the first that neither rests nor was demoted and that
    /// `skipping` (the sources that failed it this run) does not name; the origin otherwise. Nil:
    /// that source is a mirror still sending its first file, which the file waits for.
    func pick(skipping: Set<Int>, now: Double) -> Int? {
        let last = originIndex
        return standings.withLock { s in
            let i = s.indices.first { i in
                i == last || (s[i].demoted == nil && s[i].restsUntil <= now && !skipping.contains(i))
            } ?? last
            return i == last || s[i].proven || s[i].inFlight == 0 ? i : nil
        }
    }

    /// A file started from `source`.
    func started(_ source: Int) { standings.withLock { $0[source].inFlight += 1 } }

    /// A file from `source` ended; `verified`: its bytes are the manifest's.
    func ended(_ source: Int, verified: Bool) {
        standings.withLock {
            $0[source].inFlight -= 1
            if verified {
                $0[source].proven = true
                $0[source].verified += 1
            }
        }
    }

    /// An attempt at `source` moved `bytes` in `requests` requests.
    func count(_ source: Int, bytes: Int64, requests: Int) {
        standings.withLock {
            $0[source].bytes += bytes
            $0[source].requests += requests
        }
    }

    /// A file came whole from `source`: its run of failures ends.
    func served(_ source: Int) { standings.withLock { $0[source].failuresInARow = 0 } }

    /// What a mirror did wrong, as a failed attempt at a file shows it.
    enum Fault {
        /// Bytes other than the manifest's or the index's; `how` says it in a sentence.
        case wrongBytes(how: String, detail: String)
        /// It does not hold the file (404, 410): a replica behind, a cache not told of it.
        case lacks
        /// It sent nothing for its patience (hung, or trickling below min-speed), or could not
        /// connect within it.
        case slow
        /// Any other failure: an error status, a network error.
        case failed
    }

    /// Why a slow source is left for the run, as said: the patience in force.
    var tooSlow: String { "sent nothing for \(Units.formatDuration(firstBytes.patience)) (hung, or slower than min-speed)" }

    /// Judges a failed attempt at `path` from the mirror `source` (the file goes to the next source
    /// at once, not a try of its own): wrong bytes under a name that is their content's
    /// (`contentAddressed`: the objects layout) demote it, said once; at a path they may be a
    /// cache's stale copy, which costs the file one refetch; a failure rests it, longer after each
    /// in a row; a file it lacks only skips it.
    func judge(_ source: Int, path: RelativePath, _ fault: Fault, contentAddressed: Bool) {
        switch fault {
        case let .wrongBytes(how, detail):
            if contentAddressed && demote(source, why: "\(how) \(Printable.name(path.string))") {
                emit(.warning(message: "mirror \(all[source].name) \(how) \(Printable.name(path.string)) (\(detail)): "
                                       + "not used again this run; the files come from the next source"))
            } else if !contentAddressed, let wrong = wrongAtPathTooOften(source),
                      demote(source, why: "sent wrong bytes for \(Plural.count(wrong, "file")) at their paths") {
                emit(.warning(message: "mirror \(all[source].name) sent wrong bytes for \(Plural.count(wrong, "file")) at their "
                                       + "paths this run, the last \(Printable.name(path.string)), more than it sent right: "
                                       + "not used again this run; the files come from the next source"))
            }
        case .lacks:
            break
        case .slow:
            // Slow is slow for every file: the run does not wait on it again.
            let why = tooSlow
            if demote(source, why: why) {
                emit(.warning(message: "mirror \(all[source].name) \(why) for \(Printable.name(path.string)): "
                                       + "not used again this run; the files come from the next source"))
            }
        case .failed:
            let now = clock.monotonic()
            standings.withLock { s in
                s[source].failuresInARow += 1
                s[source].restsUntil = now + min(60, Double(1 << min(s[source].failuresInARow - 1, 6)))
            }
        }
    }

    /// A stale copy at a path costs one refetch, and a cache may hold a few; a mirror whose wrong
    /// files this run reach `wrongAtPathLimit` and outnumber its right ones is behind or lying,
    /// and every file it sends costs twice: the count then, nil before.
    private func wrongAtPathTooOften(_ source: Int) -> Int? {
        standings.withLock { s in
            s[source].wrongAtPath += 1
            let (wrong, right) = (s[source].wrongAtPath, s[source].verified)
            return wrong >= PullSources.wrongAtPathLimit && wrong > right ? wrong : nil
        }
    }

    static let wrongAtPathLimit = 4

    /// `source` is not used again this run. True the first time (to be said once).
    private func demote(_ source: Int, why: String) -> Bool {
        guard source != originIndex else { return false }
        return standings.withLock { s in
            guard s[source].demoted == nil else { return false }
            s[source].demoted = why
            return true
        }
    }

    // MARK: metadata objects, key sets and the root

    func objectMirrors() -> [(place: Int, remote: Remote, prefix: String)] {
        all.dropLast().enumerated().map { ($0.offset, $0.element.remote, $0.element.objectPrefix) }
    }

    var originPlace: Int { originIndex }
    func asks(_ place: Int) -> Bool { demoted(place) == nil }

    /// Counts what a source sent for one metadata object; a mirror that sent another object than
    /// its name says is demoted, said by `sayDemotions` on the session's thread.
    func served(_ place: Int, object: SHA256Digest, bytes: Int64, failure: FerryError?) {
        count(place, bytes: bytes, requests: 1)
        var why: String?
        if case .contentMismatch? = failure?.cause { why = "sent a wrong metadata object (\(object.hex))" }
        if failure?.cause?.isTimeout == true { why = tooSlow + " for a metadata object" }
        guard let why, demote(place, why: why) else { return }
        unsaid.withLock { $0.append(place) }
    }

    /// Says each mirror demoted for a wrong metadata object since the last call, once.
    func sayDemotions() {
        for place in unsaid.withLock({ u in defer { u = [] }; return u }).sorted() {
            emit(.warning(message: "mirror \(all[place].name) \(demoted(place) ?? ""): not used again this run; what "
                                   + "it would serve comes from the next source"))
        }
    }

    /// Where the key-set documents are asked for: beside the origin's manifest, then each mirror's
    /// not demoted (each set is checked against the one before, so where it came from does not matter).
    var keySetPlaces: [(remote: Remote, manifestURL: String)] {
        let mirrors = all.indices.dropLast().filter { demoted($0) == nil }.map { (all[$0].remote, all[$0].manifestURL) }
        return originSlow ? mirrors + [(origin, session.manifestURL)] : [(origin, session.manifestURL)] + mirrors
    }

    /// A mirror's copy of the root, when the origin's cannot be had (`error`) for a reason that
    /// may pass (unreachable, a server error) and the session takes signed manifests only
    /// (`trusted-keys`): it is then checked as the origin's would be (signature, rollback,
    /// expiry), so a site goes on with its origin down. Its validators are not kept (they are the
    /// mirror's). nil: none to be had.
    func rootFromMirror(after error: FerryError) -> ManifestFetch? {
        guard !session.trustedKeys.isEmpty, !session.mirrors.isEmpty, error.retryClass != .never else { return nil }
        for (i, mirror) in all.dropLast().enumerated() where demoted(i) == nil {
            let answer = try? mirror.remote.fetchManifest(url: mirror.manifestURL, etag: nil, lastModified: nil,
                                                          maximumSize: session.maxManifestSize)
            guard case let .fetched(bytes, _, _, _)? = answer else { continue }
            let why = error.cause?.isTimeout == true
                ? "it sent nothing for \(Units.formatDuration(firstBytes.patience)), hung or slower than min-speed" : error.message
            rootStandIn = (mirror: mirror.name, manifestURL: mirror.manifestURL, why: why)
            return .fetched(bytes: bytes, etag: nil, lastModified: nil, redirectedTo: nil)
        }
        return nil
    }

    /// The origin as its root is asked for when a mirror may stand for it (the session takes
    /// signed roots only, and has mirrors): with a mirror's patience, so a hung origin costs the
    /// run seconds before the mirror's root is read (`rootFromMirror`), not the stall-timeout.
    /// nil: the origin as it is (no stand-in, or a kind that does not speak HTTP).
    func rootOrigin() -> Remote? {
        let scheme = session.remote.url.prefix { $0 != ":" }.lowercased()
        guard !session.trustedKeys.isEmpty, hasMirrors, ["http", "https", "s3"].contains(scheme) else { return nil }
        return try? Remotes.open(session, clock: clock, stop: stop,
                                 meter: firstBytes.meter(source: session.mirrors.count, patient: true))
    }

    /// The origin sent nothing for its patience this run (its root): what else is asked of it
    /// (key sets) is asked of the mirrors first.
    private var originSlow = false

    func originTimedOut() { originSlow = true }

    /// After a new root was taken from the origin, each HTTP mirror still used is asked for it too
    /// (its answer is dropped): a site cache then holds the root, and carries the site through an
    /// origin outage — a new machine can start from it alone (`rootFromMirror`). For sessions that
    /// take signed roots only, which are the ones that may take a root from a mirror.
    func keepRootAtMirrors() {
        guard rootStandIn == nil, !session.trustedKeys.isEmpty, !session.mirrors.isEmpty else { return }
        for (i, mirror) in all.dropLast().enumerated() where demoted(i) == nil && mirror.manifestURL.lowercased().hasPrefix("http") {
            _ = try? mirror.remote.fetchManifest(url: mirror.manifestURL, etag: nil, lastModified: nil, maximumSize: session.maxManifestSize)
        }
    }

    /// The mirror whose root stands for the origin's this run, and why (nil: the origin's).
    private(set) var rootStandIn: (mirror: String, manifestURL: String, why: String)?

    /// Where the root being read came from, as checks and refusals name it.
    var rootSource: String { rootStandIn?.manifestURL ?? session.manifestURL }

    /// Said once the root a mirror gave was taken (its signature and every rule passed), never before.
    func sayRootTaken() {
        guard let taken = rootStandIn else { return }
        emit(.warning(message: "the remote's manifest cannot be had (\(taken.why)); taken from mirror \(taken.mirror), "
                               + "as signed by a trusted key"))
    }

    // MARK: the run's account

    /// What each source did this run, said once per source (`source-served`: its bytes, requests,
    /// share of the bytes and why it was demoted: what the mirrors saved the origin), for the state.
    func account() -> [SourceCount] {
        guard hasMirrors else { return [] }
        let counts = standings.withLock { s in
            zip(all, s).map { source, standing in
                let seen = firstBytes.seen(source.slot)
                return SourceCount(source: source.name, bytes: standing.bytes, requests: standing.requests, demoted: standing.demoted,
                                   firstByte: seen.count > 0 ? seen.mean : nil, slowestFirstByte: seen.count > 0 ? seen.slowest : nil)
            }
        }
        let total = max(1, counts.reduce(0) { $0 + $1.bytes })
        for s in counts {
            emit(.sourceServed(s, share: Double(s.bytes) / Double(total)))
        }
        return counts
    }
}

/// Where a pull's metadata objects may come from before the remote, and who keeps count of what
/// each sent (`PullSources`). `asks` and `served` are called from the fetching lanes, several at once.
protocol ObjectMirrors: AnyObject {
    /// The mirrors to ask, in order: each one's place among the run's sources and where its
    /// objects are.
    func objectMirrors() -> [(place: Int, remote: Remote, prefix: String)]
    /// The remote's place among the run's sources.
    var originPlace: Int { get }
    /// Whether the mirror at `place` is still asked (not demoted).
    func asks(_ place: Int) -> Bool
    /// What the source at `place` did for one object: the bytes it sent, or how it failed.
    func served(_ place: Int, object: SHA256Digest, bytes: Int64, failure: FerryError?)
}

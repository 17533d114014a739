import Glibc
import FerryCore

/// A session's manifest, from one place for pull, push and check: fetched from the remote
/// conditionally on the validators the state recorded with the cached copy (and retried as
/// transfers are), parsed, and kept under `<state>/manifests/<session>.manifest` — the one last
/// accepted (pull) or published (push). A new one waits in `.new` until it is accepted; one a
/// push is writing waits in `.publishing` until the remote is known to hold it. The cache stands
/// for the remote's manifest only when the state recorded it from the session's manifest URL.
struct ManifestSource {
    let session: SessionConfig
    /// The cached manifest's path.
    let path: String
    let directory: String
    private let state: String

    init(session: SessionConfig, state: String) {
        self.session = session
        self.state = state
        path = StatePaths.cachedManifest(state: state, session: session.name)
        directory = state + "/manifests"
    }

    private var limit: Int { Int(session.maxManifestSize) }

    /// The cached manifest's bytes, when the state recorded them from the session's manifest URL.
    func cachedBytes(record: SessionRecord?) -> [UInt8]? {
        guard record?.manifestURL == session.manifestURL else { return nil }
        return try? FileSystem.readFile(path, limit: limit)
    }

    /// The cached manifest, parsed, with its tree read from the cached objects (nil: none for
    /// this URL); one that no longer parses throws. For a machine its phased rollout left out
    /// (`record.rollout`), the release before, which is what it holds.
    func cached(record: SessionRecord?) throws(FerryError) -> Manifest? {
        guard record?.manifestURL == session.manifestURL, FileSystem.exists(path) else { return nil }
        let objects = objects(remote: nil)
        let root = try read(FileSystem.readFile(path, limit: limit), source: path, objects: objects).manifest
        if let standing = record?.rollout, !standing.inside, standing.version == root.version, let previous = root.previousRelease() {
            return try objects.resolve(previous, source: path + " (version \(standing.taking), the release before the rollout)", maximumSize: session.maxManifestSize).manifest
        }
        return root
    }

    /// The session's metadata objects (format 2): cached, or fetched from `remote`; a dry run
    /// (`keeps: false`) keeps what it fetches in memory only.
    func objects(remote: Remote?, keeps: Bool = true, mirrors: ObjectMirrors? = nil,
                 bad: BadObjects? = nil) -> ManifestObjects {
        ManifestObjects(session: session, state: state, remote: remote, keeps: keeps, mirrors: mirrors, bad: bad)
    }

    /// A manifest's bytes, parsed, and its tree read through `objects` (format 2); with the hashes
    /// of the tree's objects.
    func read(_ bytes: [UInt8], source: String, objects: ManifestObjects) throws(FerryError) -> (manifest: Manifest, objects: [SHA256Digest]) {
        try objects.resolve(Manifests.parse(bytes, source: source), source: source, maximumSize: session.maxManifestSize)
    }

    /// The remote's manifest, asked conditionally when the cache holds the last one (`cached`
    /// says whether it does). A failure that may pass is tried again `retries` times after the
    /// transfers' backoff, unless the caller's schedule is the retry (`SyncOptions.retryManifest`,
    /// the agent) or the run must stop, or it timed out and a mirror's copy may stand in (`hedged`).
    /// Not there is an answer (`.missing`), not an error.
    func fetch(from remote: Remote, record: SessionRecord?, cached: Bool, options: SyncOptions, hedged: Bool = false,
               emit: (Event.Body) -> Void) throws(FerryError) -> ManifestFetch {
        let url = session.manifestURL
        let etag = cached ? record?.manifestETag : nil
        let lastModified = cached ? record?.manifestLastModified : nil
        var attempt = 1
        while true {
            do throws(FerryError) {
                return try remote.fetchManifest(url: url, etag: etag, lastModified: lastModified, maximumSize: session.maxManifestSize)
            } catch {
                guard options.retryManifest, error.retryClass != .never, attempt <= session.retries,
                      !(hedged && error.cause?.isTimeout == true) else { throw error }
                let delay = retryDelay(attempt: attempt, baseDelay: session.retryDelay, retryAfter: nil, jitter: Double.random(in: 0.5...1.0))
                attempt += 1
                emit(.manifestRetrying(url: url, attempt: attempt, delay: delay, error: error.message))
                let clock = options.stop.clock
                guard clock.wait(until: clock.monotonic() + delay, interrupted: { options.stop.reason != nil }) else { throw error }
            }
        }
    }

    /// The remote's manifest asked once, conditionally on `etag` and `lastModified` when given
    /// (what this run read, just before it publishes).
    func fetchOnce(from remote: Remote, etag: String?, lastModified: String?) throws(FerryError) -> ManifestFetch {
        try remote.fetchManifest(url: session.manifestURL, etag: etag, lastModified: lastModified, maximumSize: session.maxManifestSize)
    }

    /// What the remote holds now, asked once without validators (after a write: its validators,
    /// or whether an answer lost on the way still left it in place).
    func now(from remote: Remote) -> ManifestFetch? { try? fetchOnce(from: remote, etag: nil, lastModified: nil) }

    /// Puts new bytes aside until they are accepted (`commit`); returns where.
    func stage(_ bytes: [UInt8]) throws(FerryError) -> String {
        try FileSystem.makePrivateDirectory(directory)
        try FileSystem.writeAtomically(path + ".new", bytes: bytes, mode: 0o600)
        return path + ".new"
    }

    /// Staged bytes, accepted: they become the cached manifest.
    func commit(staged: String) throws(FerryError) { try FileSystem.replace(path, with: staged) }

    /// Keeps `bytes` as the cached manifest (what a push published).
    func keep(_ bytes: [UInt8]) throws(FerryError) {
        try FileSystem.makePrivateDirectory(directory)
        try FileSystem.writeAtomically(path, bytes: bytes, mode: 0o600)
    }

    /// Where a manifest being published waits until the remote is known to hold it: an answer
    /// lost after the server put it in place (a reset, `kill -9`) must not leave the session
    /// taking its own manifest for another writer's.
    var publishingPath: String { path + ".publishing" }

    func beginPublishing(_ bytes: [UInt8]) throws(FerryError) {
        try FileSystem.makePrivateDirectory(directory)
        try FileSystem.writeAtomically(publishingPath, bytes: bytes, mode: 0o600)
    }

    /// The bytes of a publish whose answer was lost, if any.
    var pendingPublish: [UInt8]? { try? FileSystem.readFile(publishingPath, limit: limit) }

    func endPublishing() { unlink(publishingPath) }
}

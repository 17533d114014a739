import Glibc
import FerryCore

/// Progress of one run, for progress bars.
public struct SyncProgress: Sendable {
    public struct Active: Sendable {
        public let path: RelativePath
        public let done: Int64
        public let size: Int64?
    }
    public var session: String
    public var filesTotal = 0
    public var filesDone = 0
    public var filesFailed = 0
    public var bytesTotal: Int64 = 0
    /// Bytes of finished files plus bytes written so far to files in flight.
    public var bytesDone: Int64 = 0
    public var active: [Active] = []

    public init(session: String) { self.session = session }
}

/// Receives what a run does, as it happens.
public protocol SyncObserver: AnyObject {
    func event(_ event: Event)
    func progress(_ progress: SyncProgress)
}

public struct SyncOptions: Sendable {
    public var dryRun = false
    /// New downloads begin no earlier than this (`--not-before`); overrides `earliest-begin`.
    public var notBefore: EarliestBegin?
    /// When to stop early (deadline, signal); a stopped run exits 3 and the next one resumes.
    public var stop = StopCondition(maxDuration: nil)
    public init(dryRun: Bool = false, stop: StopCondition = StopCondition(maxDuration: nil)) {
        self.dryRun = dryRun
        self.stop = stop
    }
}

/// The outcome of one run for one session.
public struct SyncResult: Sendable {
    public var session: String
    public var exitCode: ExitCode = .inSync
    public var downloaded = 0
    public var failed = 0
    /// Files waiting for connectivity at the end of the run.
    public var waiting = 0
    /// Files suspended by `ferry cancel`.
    public var suspended = 0
    /// Files delayed by `earliest-begin` / `--not-before`, and the earliest time one begins.
    public var delayed = 0
    public var nextBegin: Timestamp?
    public var deleted = 0
    public var bytes: Int64 = 0
    public var hashed = 0
    public var plan: Plan?
    /// The run-level error, if the run could not go on.
    public var error: FerryError?
    /// Why some work was not done (failed files, refused deletions).
    public var message: String?
}

/// One pull cycle for one session: manifest fetch (conditional GET) → local scan → hash what is
/// unknown → plan → tasks recorded → transfers (partial file, checkpoints) → verify → rename →
/// state → deletions → events. A straight line: each stage hands the next a value; only the store
/// and the transfer engine hold state.
public final class PullSync {
    let session: SessionConfig
    let agent: AgentConfig
    let observer: SyncObserver
    let options: SyncOptions

    public init(session: SessionConfig, agent: AgentConfig, observer: SyncObserver, options: SyncOptions) {
        self.session = session
        self.agent = agent
        self.observer = observer
        self.options = options
    }

    private func emit(_ body: Event.Body) {
        observer.event(Event(time: Timestamp.now(), session: session.name, body: body))
    }

    public func run() -> SyncResult {
        let started = MonotonicClock.seconds()
        var result = SyncResult(session: session.name)
        emit(.syncStarted(direction: session.direction, dryRun: options.dryRun))
        var store: StateStore?
        do throws(FerryError) {
            guard session.direction == .pull else {
                throw FerryError.usage("session '\(session.name)' is a push session; this ferry mirrors pull sessions only so far",
                                       hint: "set direction = pull, or leave this session out with --session")
            }
            let state = try StateStore(directory: agent.state)
            store = state
            var lock: SessionLock?
            if !options.dryRun {
                lock = try SessionLock(stateDirectory: agent.state, session: session.name)
                try state.recordRunStarted(session: session.name, pid: getpid(), deadline: options.stop.deadlineTime)
            }
            try cycle(store: state, result: &result)
            withExtendedLifetime(lock) {}
        } catch {
            result.error = error
            result.exitCode = error.exitCode
            result.message = error.message
        }
        if let store, !options.dryRun {
            try? store.recordRunFinished(session: session.name, exitCode: result.exitCode.rawValue, message: result.message)
        }
        emit(.syncFinished(exitCode: result.exitCode.rawValue, downloaded: result.downloaded, failed: result.failed,
                           deleted: result.deleted, bytes: result.bytes, seconds: MonotonicClock.seconds() - started,
                           message: result.message))
        return result
    }

    private func cycle(store: StateStore, result: inout SyncResult) throws(FerryError) {
        let settings = try ConfigLoader.httpSettings(for: session)
        let manifest = try fetchManifest(store: store, settings: settings)

        // Local scan; a dry run never creates the root.
        let root: LocalRoot?
        if options.dryRun && !FileSystem.exists(session.local) {
            root = nil
        } else {
            root = try LocalRoot(path: session.local, create: !options.dryRun)
        }
        let scan = try root?.scan() ?? (entries: [:], warnings: [])
        for w in scan.warnings { emit(.warning(message: w)) }

        // Hash only what the cache cannot vouch for.
        let cache = try store.hashCache(session: session.name)
        var hashes: [RelativePath: String] = [:]
        var fresh: [(RelativePath, CachedHash)] = []
        for entry in manifest.entries {
            if let reason = options.stop.reason { throw FerryError(.stopped, "\(reason) while hashing local files; nothing was changed") }
            let local = scan.entries[entry.path]
            let cached = cache[entry.path]
            if let local, let cached, cached.isValid(for: local) { hashes[entry.path] = cached.sha256 }
            if Reconciler.needsHash(entry, local: local, cached: cached), let root {
                let h = try root.hash(entry.path)
                hashes[entry.path] = h.sha256
                fresh.append((entry.path, h))
            }
        }
        result.hashed = fresh.count
        if !options.dryRun { try store.saveHashes(session: session.name, fresh) }

        let plan = Reconciler.plan(manifest: manifest, local: scan.entries, hashes: hashes, deleteExtras: session.delete)
        result.plan = plan
        emit(.planned(downloads: plan.downloads.count, bytes: plan.downloadBytes, metadataFixes: plan.metadataFixes.count,
                      deletions: plan.deletions.count, upToDate: plan.upToDate, hashed: fresh.count, extrasKept: plan.extrasKept))
        guard !options.dryRun, let root else { return }

        // Record the tasks before any byte moves, and drop state of paths no longer listed.
        for gone in try store.pruneTasks(session: session.name, keeping: Set(manifest.entries.map(\.path))) where gone.delayed {
            emit(.delayedDue(path: gone.path, disposition: .cancel, reason: "the file is no longer in the manifest"))
        }
        let notBefore = (options.notBefore ?? session.earliestBegin)?.time(from: Timestamp.now())
        let queued = try store.queueDownloads(session: session.name, entries: plan.downloads.map(\.entry),
                                              urlFor: { self.session.remote.url(for: $0) }, notBefore: notBefore)
        for due in queued.due { emit(.delayedDue(path: due.path, disposition: due.disposition, reason: due.reason)) }
        for t in try store.dropDueDelayedTasks(session: session.name, keeping: Set(plan.downloads.map(\.entry.path))) {
            emit(.delayedDue(path: t.path, disposition: .cancel, reason: "the file is already in place"))
        }
        let tasks = queued.tasks
        root.removePartials(keeping: try store.unfinishedTaskIDs(session: session.name))

        var localIOError: String?
        for entry in plan.metadataFixes {
            do {
                let now = try root.setMetadata(entry.path, mode: entry.mode, mtime: entry.mtime)
                try store.saveHashes(session: session.name, [(entry.path, CachedHash(size: now.size, mtime: now.mtime, ctime: now.ctime, inode: now.inode, sha256: entry.sha256))])
                emit(.metadataFixed(path: entry.path))
            } catch {
                result.failed += 1
                emit(.fileFailed(path: entry.path, error: error.message))
            }
        }
        for path in plan.blocked {
            result.failed += 1
            emit(.fileFailed(path: path, error: "\(session.local)/\(path.string) is a directory where the manifest has a file; remove it"))
        }

        let stopped = try transfer(plan: plan, tasks: tasks, root: root, store: store, settings: settings, result: &result, localIOError: &localIOError)

        // Deletions only after every transfer succeeded (rule 7), and capped.
        if !plan.deletions.isEmpty {
            if let stopped {
                emit(.warning(message: "\(plan.deletions.count) deletions postponed: \(stopped)"))
            } else if result.failed > 0 || result.waiting > 0 || result.suspended > 0 || result.delayed > 0 {
                let note = "\(plan.deletions.count) deletions postponed because \(result.failed + result.waiting + result.suspended + result.delayed) files did not arrive"
                emit(.warning(message: note))
            } else if plan.deletions.count > session.maxDelete {
                result.message = "refused to delete \(plan.deletions.count) files: more than max-delete = \(session.maxDelete)"
                emit(.warning(message: result.message! + "; raise max-delete if this is intended"))
                result.exitCode = .someFilesFailed
            } else {
                for path in plan.deletions {
                    do {
                        try root.delete(path)
                        result.deleted += 1
                        emit(.fileDeleted(path: path))
                    } catch {
                        result.failed += 1
                        emit(.fileFailed(path: path, error: error.message))
                    }
                }
                try store.forgetHashes(session: session.name, plan.deletions)
                for dir in plan.directoryRemovals { root.removeDirectoryIfEmpty(dir) }
                try root.syncDirectories()
            }
        }

        if let localIOError {
            result.exitCode = .localIO
            result.message = localIOError
        } else if result.failed > 0 {
            result.exitCode = .someFilesFailed
            result.message = result.message ?? "\(result.failed) of \(plan.downloads.count + plan.metadataFixes.count + plan.blocked.count) files failed"
        } else if result.waiting > 0 {
            result.exitCode = .remoteOrManifest
            result.message = "the remote could not be reached for \(result.waiting) files; they wait for connectivity and the next run tries again"
        } else if let stopped {
            result.exitCode = .incomplete
            result.message = "\(stopped); the next run resumes where this one stopped"
        } else if result.suspended > 0 {
            result.exitCode = .incomplete
            result.message = "\(result.suspended) files are suspended by ferry cancel; ferry resume continues them"
        } else if result.delayed > 0 {
            result.exitCode = .incomplete
            result.message = "\(result.delayed) files are delayed; the first may begin at \(result.nextBegin?.rfc3339 ?? "?"), in a later run"
        }
    }

    /// Fetches the manifest (conditionally), refuses it when invalid, a rollback or expired, and
    /// only then remembers it. A refused manifest changes nothing.
    private func fetchManifest(store: StateStore, settings: HTTPSettings) throws(FerryError) -> Manifest {
        let url = session.manifestURL
        let record = try store.session(session.name)
        let cachePath = agent.state + "/manifests/" + session.name + ".manifest"
        let sameURL = record?.manifestURL == url && FileSystem.exists(cachePath)
        let fetched = try ManifestFetcher(settings: settings).fetch(
            url: url, etag: sameURL ? record?.manifestETag : nil, lastModified: sameURL ? record?.manifestLastModified : nil)
        switch fetched {
        case .unchanged:
            let bytes = try FileSystem.readFile(cachePath, limit: ManifestFetcher.maximumSize)
            let manifest = try Manifest.parse(bytes, source: url)
            emit(.manifestFetched(url: url, version: manifest.version, files: manifest.entries.count, unchanged: true))
            return manifest
        case let .fetched(bytes, etag, lastModified):
            let manifest = try Manifest.parse(bytes, source: url)
            if let expires = manifest.expires, expires < Timestamp.now() {
                throw .manifest("manifest \(url) expired at \(expires.rfc3339)", hint: "publish a fresh manifest on the remote")
            }
            if sameURL || record?.manifestURL == url, let old = record?.manifestVersion, let new = manifest.version, new < old, !session.allowRollback {
                throw .manifest("manifest \(url) has version \(new), lower than version \(old) already applied: refused as a rollback",
                                hint: "if the rollback is intended, set allow-rollback = yes for session '\(session.name)'")
            }
            if !options.dryRun {
                try FileSystem.makeDirectories(agent.state + "/manifests", mode: 0o700)
                try FileSystem.writeAtomically(cachePath, bytes: bytes, mode: 0o600)
                try store.saveManifest(session: session.name, url: url, etag: etag, lastModified: lastModified, version: manifest.version)
            }
            emit(.manifestFetched(url: url, version: manifest.version, files: manifest.entries.count, unchanged: false))
            return manifest
        }
    }

    /// Runs the downloads; returns why it stopped early, if it did.
    private func transfer(plan: Plan, tasks: [RelativePath: TransferTask], root: LocalRoot, store: StateStore, settings: HTTPSettings,
                          result: inout SyncResult, localIOError: inout String?) throws(FerryError) -> String? {
        guard !plan.downloads.isEmpty else { return options.stop.reason }
        let transfers = PullTransfers(session: session, root: root, store: store, settings: settings,
                                      observer: observer, emit: { [unowned self] in self.emit($0) }, plan: plan, stop: options.stop)
        transfers.run(plan.downloads, tasks: tasks, concurrency: agent.transfers)
        result.downloaded += transfers.downloaded
        result.failed += transfers.failed
        result.waiting += transfers.waiting
        result.suspended += transfers.suspended
        result.delayed += transfers.delayed
        result.nextBegin = transfers.nextBegin
        result.bytes += transfers.bytesFetched
        if let error = transfers.localIOError { localIOError = localIOError ?? error }
        if let error = transfers.storeError { throw error }
        if transfers.stopped == nil && transfers.unfinished > 0 {
            // Never report "in sync" with work left undone, whatever the reason.
            return "\(transfers.unfinished) downloads did not finish"
        }
        return transfers.stopped
    }
}

/// What a run is about to do (the `planned` event): its transfers (downloads, or uploads for a
/// push) and their bytes, and what else it found.
public struct PlanSummary: Sendable, Equatable {
    public var transfers = 0
    /// The bytes of the transfers whose size is known.
    public var bytes: Int64 = 0
    /// Transfers whose size the manifest does not give (a SHA256SUMS manifest): `bytes` leaves them out.
    public var unknownSizes = 0
    public var metadataFixes = 0
    public var deletions = 0
    public var upToDate = 0
    public var hashed = 0
    /// Extra files kept (delete = no).
    public var extrasKept = 0
    /// Push: entries of the local tree no manifest can list (symlinks, special files, names a
    /// manifest cannot carry), said once per path.
    public var skipped = 0

    public init(transfers: Int = 0, bytes: Int64 = 0, unknownSizes: Int = 0, metadataFixes: Int = 0, deletions: Int = 0, upToDate: Int = 0,
                hashed: Int = 0, extrasKept: Int = 0, skipped: Int = 0) {
        self.transfers = transfers
        self.bytes = bytes
        self.unknownSizes = unknownSizes
        self.metadataFixes = metadataFixes
        self.deletions = deletions
        self.upToDate = upToDate
        self.hashed = hashed
        self.extrasKept = extrasKept
        self.skipped = skipped
    }

    /// Nothing to transfer, fix, delete or hash.
    public var isIdle: Bool { transfers + metadataFixes + deletions + hashed == 0 }
}

/// What one source of a pull (`origin`, or a mirror's URL) served in a run: the bytes and
/// requests, how soon it answered (the mean and the slowest time to a first byte, over the
/// requests that got one; nil: none did, or the source does not speak HTTP), and why it was
/// demoted if it was.
public struct SourceCount: Sendable, Equatable {
    public let source: String
    public let bytes: Int64
    public let requests: Int
    public let demoted: String?
    public var firstByte: Double?
    public var slowestFirstByte: Double?

    public init(source: String, bytes: Int64, requests: Int, demoted: String? = nil,
                firstByte: Double? = nil, slowestFirstByte: Double? = nil) {
        self.source = source
        self.bytes = bytes
        self.requests = requests
        self.demoted = demoted
        self.firstByte = firstByte
        self.slowestFirstByte = slowestFirstByte
    }

    /// As the state keeps them: a line each, `<bytes> <requests> [<mean>/<slowest> ]<source>` and
    /// a tab before why it was demoted (a URL holds neither spaces nor tabs, and the reason no
    /// newline). Lines kept before the times were (three fields) still read.
    public static func text(_ counts: [SourceCount]) -> String {
        counts.map { c in
            let times = c.firstByte.map { "\(Units.formatFixed($0, digits: 4))/\(Units.formatFixed(c.slowestFirstByte ?? $0, digits: 4)) " } ?? ""
            return "\(c.bytes) \(c.requests) \(times)\(c.source)" + (c.demoted.map { "\t" + $0.split(separator: "\n").joined(separator: " ") } ?? "")
        }.joined(separator: "\n")
    }

    /// A time to a first byte as said: milliseconds below ten seconds, seconds above.
    public static func seconds(_ value: Double) -> String {
        value < 10 ? "\(Units.formatFixed(value * 1000, digits: 0)) ms" : "\(Units.formatFixed(value, digits: 1)) s"
    }

    public static func parse(_ text: String) -> [SourceCount] {
        text.split(separator: "\n").compactMap { line in
            let (main, demoted) = line.firstIndex(of: "\t").map { (line[..<$0], String(line[line.index(after: $0)...])) } ?? (line[...], nil)
            var fields = main.split(separator: " ", maxSplits: 3)
            guard fields.count >= 3, let bytes = Int64(fields[0]), let requests = Int(fields[1]) else { return nil }
            var times: [Double]?
            if fields.count == 4 {
                times = fields[2].split(separator: "/").compactMap { Double($0) }
                guard times?.count == 2 else { return nil }
                fields.remove(at: 2)
            }
            return SourceCount(source: fields[2...].joined(separator: " "), bytes: bytes, requests: requests, demoted: demoted,
                               firstByte: times?[0], slowestFirstByte: times?[1])
        }
    }
}

/// A file a generation switch made current that is new or differs from the generation before.
public struct GenerationFile: Sendable, Equatable {
    public let path: RelativePath
    public let size: Int64

    public init(path: RelativePath, size: Int64) {
        self.path = path
        self.size = size
    }
}

/// Something that happened in a session, for `--json` output, progress and (later) the event log.
/// Each event renders as one JSON object on one line.
public struct Event: Sendable {
    public enum Body: Sendable {
        case syncStarted(direction: Direction, dryRun: Bool)
        /// `signedBy`: the key the manifest was taken on (`Manifest.signer(trusting:)`, `ed25519:BASE64`),
        /// nil when unsigned.
        /// `metadataBytes`: what this fetch brought over the network (the manifest, and the
        /// metadata objects of a format-2 tree that were not cached); 0 for an unchanged one.
        case manifestFetched(url: String, version: Int64?, files: Int, unchanged: Bool, signedBy: String? = nil, metadataBytes: Int64 = 0,
                             redirectedTo: String? = nil)
        /// A manifest fetch failed in a way that may pass (`RetryClass`); try `attempt` follows after `delay` seconds.
        case manifestRetrying(url: String, attempt: Int, delay: Double, error: String)
        case planned(PlanSummary)
        /// Delta (pull): `files` changed large files are assembled from `reused` bytes the mirror
        /// holds and `fetch` bytes of ranges; `whole` indexed files are fetched whole, too little
        /// of them being held locally. `read`: held versions read to plan (the others were known by
        /// the cached index of their content).
        case deltaPlanned(files: Int, reused: Int64, fetch: Int64, whole: Int, read: Int = 0)
        /// A large file with a content index is fetched whole, its delta not taken (`reason`), with
        /// what said so: once per file and run.
        case deltaFallback(path: RelativePath, reason: DeltaFallback, message: String)
        /// A pull with `mirrors`, after its transfers: what one source (`origin`, or a mirror's URL)
        /// served this run, its `share` of all the bytes fetched (0...1), and why it was demoted if it was.
        case sourceServed(SourceCount, share: Double)
        /// One line of a dry run's plan: `action` is download, replace, delete, refused-delete,
        /// fix-metadata or blocked; `reason` says why.
        case planItem(action: String, path: RelativePath, reason: String?, size: Int64?)
        /// What was at `path` (a file, a symlink, a directory holding files) made room for what the
        /// manifest lists there (a directory, a file).
        case replaced(path: RelativePath, was: String, now: String)
        case fileStarted(path: RelativePath, size: Int64?, reason: Plan.Reason)
        case fileResumed(path: RelativePath, offset: Int64)
        case fileRestarted(path: RelativePath, reason: String)
        /// A failed attempt that will be tried again after `delay` seconds.
        case fileRetrying(path: RelativePath, attempt: Int, delay: Double, error: String)
        /// The remote cannot be reached: the task waits for connectivity (until resource-timeout).
        case fileWaiting(path: RelativePath, error: String)
        /// A download that begins no earlier than `until`.
        case fileDelayed(path: RelativePath, until: Timestamp)
        /// A delayed download came due and was revalidated against the newest manifest.
        case delayedDue(path: RelativePath, disposition: DelayedRequest.Disposition, reason: String)
        /// Suspended by `ferry cancel`, `offset` bytes kept as resume data.
        case fileSuspended(path: RelativePath, offset: Int64)
        /// A discretionary session's conditions do not hold: `files` downloads wait (those that were
        /// running checkpointed first) until they do.
        case sessionHeld(files: Int, waitsFor: String)
        /// Stopped by a deadline or signal with `offset` bytes kept as resume data.
        case fileInterrupted(path: RelativePath, offset: Int64)
        /// `reused`: bytes a delta took from data the mirror held (0 for any other download).
        /// `source`: with `mirrors`, where the file came from (`origin`, or the mirror's URL).
        case fileDone(path: RelativePath, size: Int64, fetched: Int64, reused: Int64 = 0, source: String? = nil)
        case fileFailed(path: RelativePath, error: String)
        /// A push's placed objects this run (files, content and metadata objects), by how each was
        /// found to hold what was sent: the store's own checksum, a read-back, the size only.
        case uploadsVerified(storeChecksum: Int, readBack: Int, sizeOnly: Int)
        case metadataFixed(path: RelativePath)
        case fileDeleted(path: RelativePath)
        /// `layout = generations`: `local` now names generation `generation`, the directory
        /// `directory`; `changed` files of it are new or differ from the generation before
        /// (`previous`). `files` lists them for hooks; only their count is written out.
        case generationSwitched(generation: String, directory: String, previous: String?, changed: Int, files: [GenerationFile] = [])
        /// `on-switch-check` failed after a switch to `generation` (of manifest `version`): `local`
        /// names `previous` again, and that version is not taken again on this machine.
        case rolledBack(generation: String, previous: String, version: Int64?, reason: String)
        /// A phased rollout: `version` goes to `percent`% of machines; this one is `inside` it or
        /// not, and takes version `taking` (the one before, when it is not).
        case rollout(version: Int64, percent: Int, inside: Bool, taking: Int64)
        case warning(message: String)
        /// `ferry manifest build` wrote a manifest.
        case manifestBuilt(output: String, version: Int64, files: Int, bytes: Int64, signedBy: String? = nil, sha256sums: String? = nil)
        /// `ferry check` compared the tree with the manifest last applied: `differ` paths the next
        /// sync would change (each was a `plan-item`), `unnoticed` of them changed behind the hash cache.
        case checked(version: Int64?, listed: Int, hashed: Int, differ: Int, unnoticed: Int)
        /// The end of `ferry check` for a session: its exit code, and why when it could not check.
        case checkFinished(exitCode: Int32, message: String?, hint: String?)
        /// `ferry agent` changed what it says of a session between runs (`PollState`); `nextPoll`
        /// is when it polls next.
        case sessionState(state: PollState, nextPoll: Timestamp?)
        /// `ferry agent` itself: `action` is started, reloaded, reload-refused or stopping.
        case agent(action: String, message: String)
        /// The end of a run: `message` says why when it did not end in sync (or what a dry run
        /// would do), `hint` what to do next. `transferred` (`TransferCounts.transferred`) is
        /// `downloaded` in JSON, whichever the direction.
        case syncFinished(exitCode: Int32, transferred: Int, failed: Int, deleted: Int, bytes: Int64, seconds: Double,
                          message: String?, hint: String?, dryRun: Bool)
    }

    public let time: Timestamp
    public let session: String
    public let body: Body

    public init(time: Timestamp, session: String, body: Body) {
        self.time = time
        self.session = session
        self.body = body
    }

    /// Every event name ferry writes (`name`), for `ferry events --type`.
    public static let names = [
        "sync-started", "manifest-fetched", "manifest-retrying", "planned", "delta-planned", "delta-fallback",
        "source-served", "plan-item", "manifest-built", "checked", "check-finished", "replaced", "file-started",
        "file-resumed", "file-restarted", "file-interrupted", "file-retrying", "file-waiting", "file-suspended",
        "file-delayed", "session-held", "delayed-due", "file-done", "uploads-verified", "file-failed",
        "metadata-fixed", "file-deleted", "generation-switched", "rolled-back", "rollout", "warning", "sync-finished",
        "session-state", "agent",
    ]

    /// The event's name in JSON (`"event": "file-done"`).
    public var name: String {
        switch body {
        case .syncStarted: return "sync-started"
        case .manifestFetched: return "manifest-fetched"
        case .manifestRetrying: return "manifest-retrying"
        case .planned: return "planned"
        case .deltaPlanned: return "delta-planned"
        case .deltaFallback: return "delta-fallback"
        case .sourceServed: return "source-served"
        case .planItem: return "plan-item"
        case .manifestBuilt: return "manifest-built"
        case .checked: return "checked"
        case .checkFinished: return "check-finished"
        case .replaced: return "replaced"
        case .fileStarted: return "file-started"
        case .fileResumed: return "file-resumed"
        case .fileRestarted: return "file-restarted"
        case .fileInterrupted: return "file-interrupted"
        case .fileRetrying: return "file-retrying"
        case .fileWaiting: return "file-waiting"
        case .fileSuspended: return "file-suspended"
        case .fileDelayed: return "file-delayed"
        case .sessionHeld: return "session-held"
        case .delayedDue: return "delayed-due"
        case .fileDone: return "file-done"
        case .uploadsVerified: return "uploads-verified"
        case .fileFailed: return "file-failed"
        case .metadataFixed: return "metadata-fixed"
        case .fileDeleted: return "file-deleted"
        case .generationSwitched: return "generation-switched"
        case .rolledBack: return "rolled-back"
        case .rollout: return "rollout"
        case .warning: return "warning"
        case .syncFinished: return "sync-finished"
        case .sessionState: return "session-state"
        case .agent: return "agent"
        }
    }

    /// The event as one line of JSON (no newline), the `--json` form and the event log's.
    public var json: String { String(decoding: jsonBytes(), as: UTF8.self) }

    /// `json` as UTF-8 bytes, written straight into a buffer (the event log takes every file's
    /// events this way: no intermediate strings).
    public func jsonBytes() -> [UInt8] {
        var out: [UInt8] = []
        appendJSON(to: &out)
        return out
    }

    /// Appends `json` to `out`.
    public func appendJSON(to out: inout [UInt8]) {
        var fields = JSONFields()
        // The fields go straight into the caller's buffer: swapped in and back, never copied.
        swap(&fields.out, &out)
        defer { swap(&fields.out, &out) }
        fields.out.append(contentsOf: "{\"time\":\"".utf8)
        time.appendRFC3339(to: &fields.out)
        fields.out.append(UInt8(ascii: "\""))
        fields.s("session", session); fields.s("event", name)
        // Every case named here, none by default: a new event cannot go without its fields.
        switch body {
        case .replaced, .fileStarted, .fileResumed, .fileInterrupted, .fileSuspended, .fileRestarted, .fileRetrying, .fileDelayed, .delayedDue,
             .fileWaiting, .fileDone, .fileFailed, .metadataFixed, .fileDeleted, .deltaFallback:
            fields.appendFile(body)
        case .syncStarted, .manifestFetched, .manifestRetrying, .planned, .deltaPlanned, .planItem, .uploadsVerified, .generationSwitched, .rolledBack, .rollout, .warning,
             .manifestBuilt, .checked, .checkFinished, .sessionState, .sessionHeld, .agent, .syncFinished, .sourceServed:
            fields.appendRun(body)
        }
        fields.out.append(UInt8(ascii: "}"))
    }
}

/// An event's JSON fields as they are appended, in the order each event writes them.
private struct JSONFields {
    var out: [UInt8] = []

    private mutating func key(_ k: StaticString) {
        out.append(UInt8(ascii: ","))
        out.append(UInt8(ascii: "\""))
        k.withUTF8Buffer { out.append(contentsOf: $0) }
        out.append(UInt8(ascii: "\""))
        out.append(UInt8(ascii: ":"))
    }
    mutating func raw(_ k: StaticString, _ v: String) { key(k); out.append(contentsOf: v.utf8) }
    mutating func s(_ k: StaticString, _ v: String) { key(k); JSONText.appendQuoted(v, to: &out) }
    mutating func n(_ k: StaticString, _ v: Int64) { key(k); JSONText.appendInteger(v, to: &out) }
    mutating func b(_ k: StaticString, _ v: Bool) { key(k); out.append(contentsOf: (v ? "true" : "false").utf8) }

    /// The fields of an event about one file (its path first).
    mutating func appendFile(_ body: Event.Body) {
        switch body {
        case let .replaced(path, was, now):
            s("path", path.string); s("was", was); s("now", now)
        case let .fileStarted(path, size, reason):
            s("path", path.string)
            if let size { n("size", size) }
            s("reason", reason.rawValue)
        case let .fileResumed(path, offset), let .fileInterrupted(path, offset), let .fileSuspended(path, offset):
            s("path", path.string); n("offset", offset)
        case let .fileRestarted(path, reason):
            s("path", path.string); s("reason", reason)
        case let .fileRetrying(path, attempt, delay, error):
            s("path", path.string); n("attempt", Int64(attempt)); raw("delay", Units.formatFixed(delay, digits: 3)); s("error", error)
        case let .fileDelayed(path, until):
            s("path", path.string); s("not_before", until.rfc3339)
        case let .delayedDue(path, disposition, reason):
            s("path", path.string); s("disposition", disposition.rawValue); s("reason", reason)
        case let .fileWaiting(path, error):
            s("path", path.string); s("error", error)
        case let .fileDone(path, size, fetched, reused, source):
            s("path", path.string); n("size", size); n("fetched", fetched)
            if reused > 0 { n("reused", reused) }
            if let source { s("source", source) }
        case let .fileFailed(path, error):
            s("path", path.string); s("error", error)
        case let .deltaFallback(path, reason, message):
            s("path", path.string); s("reason", reason.rawValue); s("message", message)
        case let .metadataFixed(path), let .fileDeleted(path):
            s("path", path.string)
        default:
            break
        }
    }

    /// The fields of an event about a session's run, a manifest, or the agent.
    mutating func appendRun(_ body: Event.Body) {
        switch body {
        case let .syncStarted(direction, dryRun):
            s("direction", direction.rawValue); b("dry_run", dryRun)
        case let .manifestFetched(url, version, files, unchanged, signedBy, metadataBytes, redirectedTo):
            s("url", url)
            if let redirectedTo { s("redirected_to", redirectedTo) }
            if let version { n("version", version) }
            n("files", Int64(files)); b("unchanged", unchanged)
            if let signedBy { s("signed_by", signedBy) }
            n("metadata_bytes", metadataBytes)
        case let .planned(p):
            n("downloads", Int64(p.transfers)); n("bytes", p.bytes); n("unknown_sizes", Int64(p.unknownSizes)); n("metadata_fixes", Int64(p.metadataFixes))
            n("deletions", Int64(p.deletions)); n("up_to_date", Int64(p.upToDate)); n("hashed", Int64(p.hashed)); n("extras_kept", Int64(p.extrasKept))
            n("skipped", Int64(p.skipped))
        case let .deltaPlanned(files, reused, fetch, whole, read):
            n("files", Int64(files)); n("reused", reused); n("fetch", fetch); n("whole", Int64(whole)); n("read", Int64(read))
        case let .sourceServed(c, share):
            s("source", c.source); n("bytes", c.bytes); n("requests", Int64(c.requests)); raw("share", Units.formatFixed(share, digits: 3))
            if let firstByte = c.firstByte { raw("first_byte", Units.formatFixed(firstByte, digits: 4)) }
            if let slowest = c.slowestFirstByte { raw("slowest_first_byte", Units.formatFixed(slowest, digits: 4)) }
            if let demoted = c.demoted { s("demoted", demoted) }
        case let .planItem(action, path, reason, size):
            s("action", action); s("path", path.string)
            if let reason { s("reason", reason) }
            if let size { n("size", size) }
        case let .manifestRetrying(url, attempt, delay, error):
            s("url", url); n("attempt", Int64(attempt)); raw("delay", Units.formatFixed(delay, digits: 3)); s("error", error)
        case let .sessionHeld(files, waitsFor):
            n("files", Int64(files)); s("waits_for", waitsFor)
        case let .uploadsVerified(storeChecksum, readBack, sizeOnly):
            n("store_checksum", Int64(storeChecksum)); n("read_back", Int64(readBack)); n("size_only", Int64(sizeOnly))
        case let .generationSwitched(generation, directory, previous, changed, _):
            s("generation", generation); s("directory", directory)
            if let previous { s("previous", previous) }
            n("changed", Int64(changed))
        case let .rollout(version, percent, inside, taking):
            n("version", version); n("percent", Int64(percent)); b("inside", inside); n("taking", taking)
        case let .rolledBack(generation, previous, version, reason):
            s("generation", generation); s("previous", previous)
            if let version { n("version", version) }
            s("reason", reason)
        case let .warning(message):
            s("message", message)
        case let .manifestBuilt(output, version, files, bytes, signedBy, sha256sums):
            s("output", output); n("version", version); n("files", Int64(files)); n("bytes", bytes)
            if let signedBy { s("signed_by", signedBy) }
            if let sha256sums { s("sha256sums", sha256sums) }
        case let .checked(version, listed, hashed, differ, unnoticed):
            if let version { n("version", version) }
            n("listed", Int64(listed)); n("hashed", Int64(hashed)); n("differ", Int64(differ)); n("unnoticed", Int64(unnoticed))
        case let .checkFinished(exitCode, message, hint):
            n("exit_code", Int64(exitCode))
            if let message { s("message", message) }
            if let hint { s("hint", hint) }
        case let .sessionState(state, nextPoll):
            s("state", state.text)
            if let nextPoll { s("next_poll", nextPoll.rfc3339) }
        case let .agent(action, message):
            s("action", action); s("message", message)
        case let .syncFinished(exitCode, transferred, failed, deleted, bytes, seconds, message, hint, dryRun):
            n("exit_code", Int64(exitCode)); n("downloaded", Int64(transferred)); n("failed", Int64(failed))
            n("deleted", Int64(deleted)); n("bytes", bytes); raw("seconds", Units.formatFixed(seconds, digits: 3))
            if let message { s("message", message) }
            if let hint { s("hint", hint) }
            if dryRun { b("dry_run", true) }
        default:
            break
        }
    }
}

extension Event.Body {
    /// How much the event matters, for the agent's `log-level` and `-v`: a failure, a warning,
    /// what a run did (info), or the steps on the way (debug). The event log keeps every event.
    public var level: LogLevel {
        switch self {
        case .fileFailed:
            return .error
        case let .syncFinished(code, _, _, _, _, _, _, _, _):
            return code == ExitCode.inSync.rawValue || code == ExitCode.incomplete.rawValue ? .info : .error
        case let .checkFinished(_, message, _):
            return message == nil ? .info : .error
        case let .agent(action, _):
            return action == "reload-refused" ? .error : .info
        case let .sessionState(state, _):
            return state.isFailed ? .error : state.isWaiting ? .warning : .info
        case .warning, .rolledBack, .fileWaiting, .manifestRetrying, .fileRetrying, .deltaFallback:
            return .warning
        case .syncStarted, .fileStarted:
            return .debug
        case let .manifestFetched(_, _, _, unchanged, _, _, _):
            return unchanged ? .debug : .info
        case let .planned(summary):
            return summary.isIdle ? .debug : .info
        case .deltaPlanned, .sourceServed, .planItem, .replaced, .fileResumed, .fileRestarted, .fileDelayed, .delayedDue, .fileSuspended, .sessionHeld,
             .fileInterrupted, .fileDone, .uploadsVerified, .metadataFixed, .fileDeleted, .generationSwitched, .manifestBuilt, .checked, .rollout:
            return .info
        }
    }
}

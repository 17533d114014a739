/// Events read back from their JSON form (`Event.json`): what `ferry sync now` gets from a running
/// agent over the control socket, to show it exactly as a run of its own would.
extension Event {
    /// The event a JSON line holds, or nil when it is not one ferry writes (unknown name, missing
    /// or malformed fields). Paths come from ferry itself and are taken as they are.
    public init?(fields f: [String: String]) {
        guard let timeText = f["time"], let time = Timestamp(rfc3339: timeText), let session = f["session"], let name = f["event"] else { return nil }
        let fields = EventFields(f: f)
        // Each name is of one family; the other answers nil for it, as both do for a name ferry does not write.
        guard let body = fields.fileBody(name) ?? fields.runBody(name) else { return nil }
        self.init(time: time, session: session, body: body)
    }
}

/// An event's JSON fields, each read as the type it holds (nil when missing or malformed).
private struct EventFields {
    let f: [String: String]

    func text(_ k: String) -> String? { f[k] }
    // Every whole number an event carries is a count, a size, an offset or a version.
    func int64(_ k: String) -> Int64? { f[k].flatMap(JSONReader.count) }
    func int(_ k: String) -> Int? { int64(k).map { Int($0) } }
    func double(_ k: String) -> Double? { f[k].flatMap { Double($0) } }
    func bool(_ k: String) -> Bool? { f[k].map { $0 == "true" } }
    func path(_ k: String = "path") -> RelativePath? { f[k].map { RelativePath(trusted: $0) } }

    /// The body of an event about one file, or nil when `name` is none of those or a field is wanting.
    func fileBody(_ name: String) -> Event.Body? {
        switch name {
        case "replaced":
            guard let p = path(), let was = text("was"), let now = text("now") else { return nil }
            return .replaced(path: p, was: was, now: now)
        case "file-started":
            guard let p = path(), let reason = text("reason").flatMap(Plan.Reason.init(rawValue:)) else { return nil }
            return .fileStarted(path: p, size: int64("size"), reason: reason)
        case "file-resumed", "file-interrupted", "file-suspended":
            guard let p = path(), let offset = int64("offset") else { return nil }
            return name == "file-resumed" ? .fileResumed(path: p, offset: offset)
                : name == "file-interrupted" ? .fileInterrupted(path: p, offset: offset) : .fileSuspended(path: p, offset: offset)
        case "file-restarted":
            guard let p = path(), let reason = text("reason") else { return nil }
            return .fileRestarted(path: p, reason: reason)
        case "file-retrying":
            guard let p = path(), let attempt = int("attempt"), let delay = double("delay"), let error = text("error") else { return nil }
            return .fileRetrying(path: p, attempt: attempt, delay: delay, error: error)
        case "file-waiting":
            guard let p = path(), let error = text("error") else { return nil }
            return .fileWaiting(path: p, error: error)
        case "file-delayed":
            guard let p = path(), let until = text("not_before").flatMap(Timestamp.init(rfc3339:)) else { return nil }
            return .fileDelayed(path: p, until: until)
        case "delayed-due":
            guard let p = path(), let d = text("disposition").flatMap(DelayedRequest.Disposition.init(rawValue:)), let reason = text("reason") else { return nil }
            return .delayedDue(path: p, disposition: d, reason: reason)
        case "file-done":
            guard let p = path(), let size = int64("size"), let fetched = int64("fetched") else { return nil }
            return .fileDone(path: p, size: size, fetched: fetched, reused: int64("reused") ?? 0, source: text("source"))
        case "file-failed":
            guard let p = path(), let error = text("error") else { return nil }
            return .fileFailed(path: p, error: error)
        case "metadata-fixed", "file-deleted":
            guard let p = path() else { return nil }
            return name == "metadata-fixed" ? .metadataFixed(path: p) : .fileDeleted(path: p)
        case "delta-fallback":
            guard let p = path(), let reason = text("reason").flatMap(DeltaFallback.init(rawValue:)),
                let message = text("message") else {
                return nil
            }
            return .deltaFallback(path: p, reason: reason, message: message)
        default:
            return nil
        }
    }

    /// The body of an event about a run, a manifest or the agent, or nil when `name` is none of those or a field is wanting.
    func runBody(_ name: String) -> Event.Body? {
        switch name {
        case "sync-started":
            guard let d = text("direction").flatMap(Direction.init(rawValue:)) else { return nil }
            return .syncStarted(direction: d, dryRun: bool("dry_run") ?? false)
        case "manifest-fetched":
            guard let url = text("url"), let files = int("files") else { return nil }
            return .manifestFetched(url: url, version: int64("version"), files: files, unchanged: bool("unchanged") ?? false,
                                   signedBy: text("signed_by"), metadataBytes: int64("metadata_bytes") ?? 0, redirectedTo: text("redirected_to"))
        case "manifest-retrying":
            guard let url = text("url"), let attempt = int("attempt"), let delay = double("delay"), let error = text("error") else { return nil }
            return .manifestRetrying(url: url, attempt: attempt, delay: delay, error: error)
        case "planned":
            guard let downloads = int("downloads"), let bytes = int64("bytes"), let fixes = int("metadata_fixes"), let deletions = int("deletions"),
                  let upToDate = int("up_to_date"), let hashed = int("hashed"), let extras = int("extras_kept") else { return nil }
            return .planned(PlanSummary(transfers: downloads, bytes: bytes, unknownSizes: int("unknown_sizes") ?? 0, metadataFixes: fixes,
                                        deletions: deletions, upToDate: upToDate, hashed: hashed, extrasKept: extras, skipped: int("skipped") ?? 0))
        case "delta-planned":
            guard let files = int("files"), let reused = int64("reused"), let fetch = int64("fetch"), let whole = int("whole") else { return nil }
            return .deltaPlanned(files: files, reused: reused, fetch: fetch, whole: whole, read: int("read") ?? 0)
        case "plan-item":
            guard let action = text("action"), let p = path() else { return nil }
            return .planItem(action: action, path: p, reason: text("reason"), size: int64("size"))
        case "session-held":
            guard let files = int("files"), let waitsFor = text("waits_for") else { return nil }
            return .sessionHeld(files: files, waitsFor: waitsFor)
        case "uploads-verified":
            guard let store = int("store_checksum"), let read = int("read_back"), let size = int("size_only") else { return nil }
            return .uploadsVerified(storeChecksum: store, readBack: read, sizeOnly: size)
        case "source-served":
            guard let source = text("source"), let bytes = int64("bytes"), let requests = int("requests") else { return nil }
            return .sourceServed(SourceCount(source: source, bytes: bytes, requests: requests, demoted: text("demoted"),
                                             firstByte: double("first_byte"), slowestFirstByte: double("slowest_first_byte")),
                                 share: double("share") ?? 0)
        case "generation-switched":
            guard let generation = text("generation"), let directory = text("directory"), let changed = int("changed") else { return nil }
            return .generationSwitched(generation: generation, directory: directory, previous: text("previous"), changed: changed)
        case "rollout":
            guard let version = int64("version"), let percent = int("percent"), let inside = bool("inside"), let taking = int64("taking") else { return nil }
            return .rollout(version: version, percent: percent, inside: inside, taking: taking)
        case "rolled-back":
            guard let generation = text("generation"), let previous = text("previous"), let reason = text("reason") else { return nil }
            return .rolledBack(generation: generation, previous: previous, version: int64("version"), reason: reason)
        case "warning":
            guard let message = text("message") else { return nil }
            return .warning(message: message)
        case "manifest-built":
            guard let output = text("output"), let version = int64("version"), let files = int("files"), let bytes = int64("bytes") else { return nil }
            return .manifestBuilt(output: output, version: version, files: files, bytes: bytes, signedBy: text("signed_by"), sha256sums: text("sha256sums"))
        case "checked":
            guard let listed = int("listed"), let hashed = int("hashed"), let differ = int("differ"), let unnoticed = int("unnoticed") else { return nil }
            return .checked(version: int64("version"), listed: listed, hashed: hashed, differ: differ, unnoticed: unnoticed)
        case "check-finished":
            guard let code = int("exit_code") else { return nil }
            return .checkFinished(exitCode: Int32(code), message: text("message"), hint: text("hint"))
        case "session-state":
            guard let state = text("state").flatMap(PollState.init(text:)) else { return nil }
            return .sessionState(state: state, nextPoll: text("next_poll").flatMap(Timestamp.init(rfc3339:)))
        case "agent":
            guard let action = text("action"), let message = text("message") else { return nil }
            return .agent(action: action, message: message)
        case "sync-finished":
            guard let code = int("exit_code").map(Int32.init), let transferred = int("downloaded"), let failed = int("failed"),
                  let deleted = int("deleted"), let bytes = int64("bytes"), let seconds = double("seconds") else { return nil }
            return .syncFinished(exitCode: code, transferred: transferred, failed: failed, deleted: deleted, bytes: bytes, seconds: seconds,
                                 message: text("message"), hint: text("hint"), dryRun: bool("dry_run") ?? false)
        default:
            return nil
        }
    }
}

import Glibc
import FerryCore

/// The metadata objects of a session's format-2 manifests (`ManifestTree`): read from the
/// session's cache (`<state>/manifests/<session>.manifest.objects/`, one file per object, named by its
/// SHA-256) and otherwise fetched from the remote (`.ferry/meta/<sha256>` beside the manifest),
/// several at once. Every object is checked against its name as it is read: a cached one that
/// does not match is thrown away and fetched again; a fetched one that does not match refuses the
/// manifest. A cached object is trusted only because a root that was taken names its hash.
final class ManifestObjects {
    let directory: String
    /// Where the objects are on the remote (the manifest's URL up to its last `/`, then
    /// `.ferry/meta/`); nil: the cache only (`ferry check`).
    private let remote: (remote: Remote, prefix: String)?
    /// false (a dry run): what is fetched is kept in memory only.
    private let keeps: Bool
    private var fetchedInMemory: [SHA256Digest: [UInt8]] = [:]
    /// Whether the cache directory was made (once per run, not once per object).
    private var directoryMade = false
    /// Threads writing fetched objects into the cache (one per batch), so a cold fetch does not
    /// wait on the cache: waited for by `sweep` and when the cache goes.
    private var writers: [BackgroundWork<Void, Never>] = []
    /// Objects `keep` took that wait to be written (a group at a time, by a writer).
    private var kept: [(SHA256Digest, [UInt8])] = []
    /// Bytes and objects fetched from the remote, and cached objects found damaged.
    private(set) var fetchedBytes: Int64 = 0
    private(set) var fetchedObjects = 0
    private(set) var damaged = 0
    /// A pull's mirrors (`PullSources`), asked for an object before the remote, which count
    /// what each source sent. A mirror that fails an object is skipped for it; one that sends an
    /// object other than its name says is not asked again (`PullSources` demotes it).
    private let mirrors: ObjectMirrors?
    /// A pull's memory of objects the remote sent wrong (`BadObjects`): not fetched again soon.
    let bad: BadObjects?

    init(session: SessionConfig, state: String, remote: Remote?, keeps: Bool = true, mirrors: ObjectMirrors? = nil,
         bad: BadObjects? = nil) {
        self.bad = bad
        directory = StatePaths.cachedManifest(state: state, session: session.name) + ".objects"
        let prefix = ManifestTree.objectDirectory(beside: session.manifestURL) + "/"
        self.remote = remote.map { ($0, prefix) }
        self.keeps = keeps
        self.mirrors = mirrors
    }

    /// `manifest` with the entries of the tree it names (as it is, for format 1); the hashes of
    /// the tree's objects come back too, for `sweep`.
    func resolve(_ manifest: Manifest, source: String, maximumSize: Int64) throws(FerryError) -> (manifest: Manifest, objects: [SHA256Digest]) {
        guard let tree = manifest.tree else { return (manifest, []) }
        let loader = TreeLoader(objects: self, list: manifest.treeBundles, source: source, bound: maximumSize)
        let (entries, objects) = try ManifestTree.resolve(tree, source: source, maximumBytes: maximumSize) { (batch) throws(FerryError) in
            try loader.load(batch)
        }
        return (try manifest.resolving(entries, source: source), objects)
    }

    /// The bytes of each object, from the cache or the remote (where one larger than
    /// `maximumSize` is refused). `index`: objects of a content index, which `bad` remembers
    /// when the remote sends them wrong (a tree's are asked again on the next poll: a run that
    /// cannot read its tree fails, and takes it as soon as the publisher repairs it).
    func load(_ batch: [SHA256Digest], source: String, maximumSize: Int = ManifestTree.maximumObjectSize,
              index: Bool = false) throws(FerryError) -> [[UInt8]] {
        var out = [[UInt8]](repeating: [], count: batch.count)
        var missing: [Int] = []
        for (i, digest) in batch.enumerated() {
            if let bytes = cached(digest) { out[i] = bytes } else { missing.append(i) }
        }
        guard !missing.isEmpty else { return out }
        guard let (remote, prefix) = self.remote else {
            throw .manifest("the metadata object \(batch[missing[0]].hex) of manifest \(source) is not in the cache \(Printable.name(directory))",
                            hint: "run ferry sync now for the session first: it fetches what the manifest names")
        }
        // In groups, each cached as it comes: a run killed while a large tree or index is fetched
        // over a slow link keeps what it had (the next fetches the rest).
        for group in stride(from: 0, to: missing.count, by: ManifestObjects.group).map({ Array(missing[$0..<min($0 + ManifestObjects.group, missing.count)]) }) {
            let digests = group.map { batch[$0] }
            let fetched = try fetch(digests, from: remote, prefix: prefix, source: source, maximumSize: maximumSize,
                                    bad: index ? bad : nil)
            for (i, bytes) in zip(group, fetched) {
                out[i] = bytes
                fetchedBytes += Int64(bytes.count)
                fetchedObjects += 1
                if !keeps { fetchedInMemory[batch[i]] = bytes }
            }
            if keeps, let directory = cacheDirectory() { cache(zip(digests, fetched), in: directory) }
        }
        return out
    }

    /// The largest metadata object: a pack of small files (`ContentPacks`); a tree's are at most 1 MiB.
    static let largest = max(ManifestTree.maximumObjectSize, ContentPacks.maximumSize)

    /// Objects fetched and cached together, at most.
    static let group = 128

    /// Writes fetched objects into the cache on a thread of their own, while the run goes on:
    /// 1,200 small files written from the fetching lanes (one directory, so one lock) took a
    /// cold 10,000-file pull 30 ms before its first download. Without a thread, at once.
    private func cache(_ objects: Zip2Sequence<[SHA256Digest], [[UInt8]]>, in directory: String) {
        write { for (digest, bytes) in objects { ManifestObjects.store(bytes, as: digest, in: directory) } }
    }

    /// Runs `store` on a writer's thread of its own (waited for by `finishCaching`), or at once.
    private func write(_ store: @escaping () -> Void) {
        if let writer = try? BackgroundWork(name: "ferry-cache", store) { writers.append(writer) } else { store() }
    }

    /// Waits until every fetched object is written into the cache. A pull calls it once its plan
    /// has read its index objects and details, before its transfers begin, so a run killed while
    /// they run does not fetch them again (the writers run beside the planning; by its end they
    /// are mostly done).
    func finishCaching() {
        writeKept()
        for writer in writers { writer.wait() }
        writers.removeAll()
    }

    deinit { finishCaching() }

    /// The cache directory, made once per run; nil when it cannot be (the objects are then
    /// fetched again next time).
    private func cacheDirectory() -> String? {
        if !directoryMade {
            guard (try? FileSystem.makePrivateDirectory(directory)) != nil else { return nil }
            directoryMade = true
        }
        return directory
    }

    /// A cached object whose bytes match its name; one that does not is removed.
    private func cached(_ digest: SHA256Digest) -> [UInt8]? {
        if let bytes = fetchedInMemory[digest] { return bytes }
        let path = directory + "/" + digest.hex
        guard let bytes = try? FileSystem.readFile(path, limit: ManifestObjects.largest) else { return nil }
        guard SHA256Hasher.digest(of: bytes) == digest else {
            // Read while this run's writer still writes it: read again once the writes are in.
            if !writers.isEmpty || !kept.isEmpty {
                finishCaching()
                return cached(digest)
            }
            damaged += 1
            unlink(path)
            return nil
        }
        return bytes
    }

    /// Keeps an object whose bytes match its name: written into the cache with the next group
    /// (`writeKept`), as fetched objects are. Not synced: one lost or torn by a crash does not
    /// match its name the next time, and is fetched again.
    func keep(_ digest: SHA256Digest, _ bytes: [UInt8]) {
        guard keeps else { fetchedInMemory[digest] = bytes; return }
        kept.append((digest, bytes))
        if kept.count >= ManifestObjects.group { writeKept() }
    }

    /// Writes what `keep` took into the cache, on a writer's thread; an object the cache holds
    /// already is left as it is.
    func writeKept() {
        guard !kept.isEmpty else { return }
        defer { kept.removeAll() }
        guard let directory = cacheDirectory() else { return }
        let objects = kept
        write { for (digest, bytes) in objects { ManifestObjects.store(bytes, as: digest, in: directory) } }
    }

    /// Writes an object into the cache directory under its own name, unless a file of that name is
    /// there (held already, or a symlink someone planted: never followed). Not synced and not
    /// through a temporary name (see `keep`): every read checks the bytes against the name, and
    /// removes one that does not match (torn by a crash, or read while a second ferry writes it),
    /// which is then fetched again. A cold 1 GiB mirror keeps its index's ~7,800 objects so in
    /// three system calls each, not six (0.2 s after its download, on its critical path).
    private static func store(_ bytes: [UInt8], as digest: SHA256Digest, in directory: String) {
        let path = directory + "/" + digest.hex
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let written = bytes.isEmpty || bytes.withUnsafeBytes { FileSystem.write(fd: fd, $0.baseAddress!, count: $0.count, at: 0) }
        close(fd)
        if !written { unlink(path) }
    }

    /// Whether the cache holds no object at all (a cold mirror, or one whose cache was lost): read
    /// until its first object's name.
    func holdsNothing() -> Bool {
        guard keeps, let dir = opendir(directory) else { return true }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            if SHA256Digest(hex: FileSystem.name(of: entry)) != nil { return false }
        }
        return true
    }

    /// Whether the cache holds `digest` (by name; `resolve` checks the bytes when it reads them),
    /// once the objects being written are in.
    func has(_ digest: SHA256Digest) -> Bool {
        finishCaching()
        return access(directory + "/" + digest.hex, F_OK) == 0
    }

    /// Objects fetched whole, each checked against its name and at most its named size, and not
    /// cached: a content index's or a tree's bundles and lists, whose members the cache keeps
    /// instead (`keep`). Through the mirrors first, as `load` fetches; what the remote sends wrong
    /// is remembered. Each one's bytes are kept as they arrive (`ObjectPart`), so that a run
    /// killed while a large one comes over a slow link leaves them to the next, which asks for the
    /// rest.
    func fetchUncached(_ named: [ObjectBundle.Named], source: String) throws(FerryError) -> [[UInt8]] {
        guard let (remote, prefix) = self.remote, !named.isEmpty else { return [] }
        // One part an object (a list that names one twice has it fetched twice, into one part).
        var parted = Set<SHA256Digest>()
        let parts = (keeps ? cacheDirectory() : nil).map { directory in
            named.map { one in
                parted.insert(one.sha256).inserted
                    ? ObjectPart(path: directory + "/" + one.sha256.hex + ManifestObjects.partSuffix, size: Int64(one.size)) : nil
            }
        } ?? []
        let fetched = try fetch(named.map(\.sha256), from: remote, prefix: prefix, source: source,
                                maximumSize: named.map(\.size).max() ?? 0, bad: bad, parts: parts)
        fetchedObjects += fetched.count
        fetchedBytes += fetched.reduce(0) { $0 + Int64($1.count) }
        return fetched
    }

    /// Why bundles could not be had this run (said once, by the run: `takeBundleProblem`), when
    /// not for bytes other than their names say (which `bad` remembers).
    private var bundleProblem: (said: Bool, text: String?) = (false, nil)

    /// Bundles of `what` could not be had: their objects come one by one.
    func bundlesUnread(of what: String, _ error: FerryError) {
        if case .contentMismatch? = error.cause { return }
        guard !bundleProblem.said, bundleProblem.text == nil else { return }
        bundleProblem.text = "the bundles of \(what) cannot be read, so its objects are fetched one by one: "
            + error.message
    }

    /// What `bundlesUnread` found, once a run.
    func takeBundleProblem() -> String? {
        defer { if bundleProblem.text != nil { bundleProblem = (true, nil) } }
        return bundleProblem.text
    }

    /// The names in the cache, once the objects being written are in.
    func names() -> [String] {
        finishCaching()
        return FileSystem.names(in: directory)
    }

    /// Removes every cached object `keeping` does not name (and what a killed write left), once
    /// the objects being written are in. The part of an object that did not all arrive
    /// (`ObjectPart`) stays for a day: a run stopped while a bundle came (a deadline, a signal)
    /// still leaves it to the next.
    func sweep(keeping: [SHA256Digest]) {
        guard keeps else { return }
        finishCaching()
        let kept = Set(keeping)
        let dayAgo = time(nil) - 86_400
        var stale: [String] = []
        FileSystem.forEachName(in: directory) { name in
            // Ferry names them in lowercase hex; anything else is not one of its objects.
            if !name.utf8.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "F") }),
               let digest = SHA256Digest(hex: name), kept.contains(digest) { return }
            var st = stat()
            if name.hasSuffix(ManifestObjects.partSuffix), SHA256Digest(hex: String(name.dropLast(ManifestObjects.partSuffix.count))) != nil,
               lstat(directory + "/" + name, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_mtim.tv_sec > dayAgo { return }
            stale.append(name)
        }
        for name in stale { unlink(directory + "/" + name) }
    }

    /// What a part's name adds to its object's.
    static let partSuffix = ".part"

    /// The cached bytes of `digest`, checked against its name; nil when the cache lacks it.
    func bytes(of digest: SHA256Digest) -> [UInt8]? {
        finishCaching()
        return cached(digest)
    }

    /// Reads each of `digests` back from the remote, up to 8 at once, and returns those it does not
    /// hold as named (gone, or other bytes): what a publisher checks of the objects it placed,
    /// reading them as a mirror would. A remote that cannot be read throws.
    func notHeld(_ digests: [SHA256Digest]) throws(FerryError) -> [SHA256Digest] {
        guard let (remote, prefix) = self.remote, !digests.isEmpty else { return [] }
        let (results, error) = Lanes.run(digests.count, lanes: 8, name: "ferry-meta") { i throws(FerryError) -> Bool in
            let url = prefix + digests[i].hex
            switch try remote.fetchManifest(url: url, etag: nil, lastModified: nil, maximumSize: Int64(ManifestObjects.largest)) {
            case let .fetched(bytes, _, _, _): return SHA256Hasher.digest(of: bytes) == digests[i]
            case .missing: return false
            case .unchanged: throw .remote("the remote answered 'not modified' to an unconditional request for \(url)")
            }
        }
        if let error { throw error }
        return zip(digests, results).filter { $0.1 != true }.map(\.0)
    }

    /// Fetches objects, up to 8 at once, each checked against its name.
    /// Each object from the first mirror that has it as named, else from the remote.
    /// `parts`: where each object's bytes are kept as they arrive (none: not kept).
    private func fetch(_ digests: [SHA256Digest], from remote: Remote, prefix: String, source: String,
                       maximumSize: Int, bad: BadObjects?,
                       parts: [ObjectPart?] = []) throws(FerryError) -> [[UInt8]] {
        if let bad, let (digest, since) = digests.lazy.compactMap({ d in bad.knownBad(d).map { (d, $0) } }).first {
            throw ManifestObjects.knownBad(digest, since: since, prefix: prefix, source: source)
        }
        let (results, error) = Lanes.run(digests.count, lanes: 8, name: "ferry-meta") { i throws(FerryError) -> [UInt8] in
            try self.fetchFromSources(digests[i], remote: remote, prefix: prefix, source: source, maximumSize: maximumSize,
                                      bad: bad, part: i < parts.count ? parts[i] : nil).get()
        }
        if let error { throw error }
        return results.map { $0! }
    }

    /// One object fetched whole and not cached, as `fetchUncached` fetches it (through the
    /// mirrors first, checked against its name, remembered when the remote sends it wrong). Safe
    /// on any thread; what it fetched is the caller's to count (a pull's packs, `PullPacks`).
    /// `checked: false`: what the remote sends is taken as it comes (a mirror's is still checked,
    /// so that one that lies is demoted and the remote asked), for a caller that checks each part
    /// it takes by a hash of its own and asks `judge` only when one does not match: a pack's
    /// members, whose pack would otherwise be hashed as well as each member, every byte twice.
    func fetchLoose(_ digest: SHA256Digest, source: String, maximumSize: Int,
                    checked: Bool = true) -> Result<[UInt8], FerryError> {
        guard let (remote, prefix) = self.remote else { return .failure(FerryError(.manifest, "no remote to fetch \(digest.hex) from")) }
        if let since = bad?.knownBad(digest) { return .failure(ManifestObjects.knownBad(digest, since: since, prefix: prefix, source: source)) }
        return fetchFromSources(digest, remote: remote, prefix: prefix, source: source, maximumSize: maximumSize, bad: bad,
                                checked: checked)
    }

    /// Whether `bytes`, fetched as `digest` (`fetchLoose`, perhaps unchecked), are that object:
    /// nil when they are; otherwise it is remembered as sent wrong (not fetched again soon) and
    /// the error is the one a checked fetch gives.
    func judge(_ digest: SHA256Digest, _ bytes: [UInt8], source: String) -> FerryError? {
        guard let (_, prefix) = remote, SHA256Hasher.digest(of: bytes) != digest else { return nil }
        bad?.remember(digest)
        return ManifestObjects.mismatch(url: prefix + digest.hex, source: source, count: bytes.count)
    }

    /// Bytes `range` of the object `digest`, from the remote (not its mirrors; a run of a pack's
    /// members): nil where the remote does not give that range as asked. Not checked here: a caller
    /// checks what it takes of them by its own hash. Safe on any thread.
    func fetchRange(_ digest: SHA256Digest, range: Range<Int64>) throws(FerryError) -> [UInt8]? {
        guard let (remote, prefix) = self.remote else { return nil }
        return try remote.fetchRange(url: prefix + digest.hex, range: range)
    }

    /// Bytes `ranges` of the object `digest` (`size` bytes) in one request, as `fetchRange` gives
    /// one: nil where the remote does not give them so.
    func fetchRanges(_ digest: SHA256Digest, ranges: [Range<Int64>], size: Int) throws(FerryError) -> [[UInt8]]? {
        guard let (remote, prefix) = self.remote else { return nil }
        return try remote.fetchRanges(url: prefix + digest.hex, ranges: ranges, size: Int64(size))
    }

    /// Why an object the remote sent wrong before is not fetched again yet.
    private static func knownBad(_ digest: SHA256Digest, since: Timestamp, prefix: String, source: String) -> FerryError {
        FerryError(.manifest, "the metadata object \(prefix + digest.hex) that manifest \(source) names did not match its "
                              + "hash when it was fetched at \(since.rfc3339); it is not fetched again before the manifest "
                              + "changes or verify-interval passes: refused, nothing was changed",
                   hint: "the remote's copy was altered or damaged: the publisher's next verified push writes it again",
                   cause: .contentMismatch(afterResume: false))
    }

    /// Why an object the remote sent (`count` bytes from `url`) is refused: not what its name says.
    static func mismatch(url: String, source: String, count: Int) -> FerryError {
        FerryError(.manifest, "the metadata object \(url) that manifest \(source) names does not match its hash (it holds \(Units.formatBytes(Int64(count))) of something else): refused, nothing was changed",
                   hint: "the remote's copy was altered or damaged: a push writes it again when it next verifies what it published (verify-interval, or ferry sync now on the publisher); after ferry manifest build, run it again",
                   cause: .contentMismatch(afterResume: false))
    }

    /// An object from the first mirror that has it as named, else from the remote, each answer
    /// counted for its source (which judges what a mirror's wrong object costs it).
    /// `checked: false`: the remote's answer is not checked against the name (`fetchLoose`); a
    /// mirror's always is.
    private func fetchFromSources(_ digest: SHA256Digest, remote: Remote, prefix: String, source: String, maximumSize: Int,
                                  bad: BadObjects?, part: ObjectPart? = nil, checked: Bool = true) -> Result<[UInt8], FerryError> {
        let sources = self.mirrors
        func counted(_ place: Int, _ fetch: () throws(FerryError) -> [UInt8]) throws(FerryError) -> [UInt8] {
            do throws(FerryError) {
                let bytes = try fetch()
                sources?.served(place, object: digest, bytes: Int64(bytes.count), failure: nil)
                return bytes
            } catch {
                sources?.served(place, object: digest, bytes: 0, failure: error)
                throw error
            }
        }
        for mirror in sources?.objectMirrors() ?? [] where sources?.asks(mirror.place) == true {
            if let bytes = try? counted(mirror.place, { () throws(FerryError) in
                try ManifestObjects.fetchOne(digest, from: mirror.remote, prefix: mirror.prefix, source: source, maximumSize: maximumSize,
                                             part: part)
            }) { return .success(bytes) }
        }
        do throws(FerryError) {
            return .success(try counted(sources?.originPlace ?? 0) { () throws(FerryError) in
                try ManifestObjects.fetchOne(digest, from: remote, prefix: prefix, source: source, maximumSize: maximumSize,
                                             part: part, checked: checked)
            })
        } catch {
            // The origin's own copy is wrong: remembered, so the next poll does not ask again.
            if case .contentMismatch? = error.cause { bad?.remember(digest) }
            return .failure(error)
        }
    }

    /// `part`: where its bytes are kept as they come (`ObjectPart`); a part resumed that does not
    /// make the object costs one fetch of the whole.
    private static func fetchOne(_ digest: SHA256Digest, from remote: Remote, prefix: String, source: String,
                                 maximumSize: Int, part: ObjectPart? = nil, checked: Bool = true) throws(FerryError) -> [UInt8] {
        let url = prefix + digest.hex
        let answer: ManifestFetch
        do throws(FerryError) {
            if let part, let kept = try remote.fetchKept(url: url, part: part) {
                answer = kept
            } else {
                answer = try remote.fetchManifest(url: url, etag: nil, lastModified: nil, maximumSize: Int64(maximumSize))
            }
        } catch where error.cause == .wrongLength {
            throw FerryError(.manifest, "the metadata object \(url) that manifest \(source) names is larger than the "
                                        + "\(Units.formatBytes(Int64(maximumSize))) it may hold: refused, nothing was changed",
                             hint: "the remote's copy was altered or damaged: the publisher's next verified push writes it again",
                             cause: .wrongLength)
        }
        switch answer {
        case let .fetched(bytes, _, _, _):
            let matches = !checked || SHA256Hasher.digest(of: bytes) == digest
            let resumed = part?.resumedFrom ?? 0
            part?.discard()
            if !matches, resumed > 0 {
                // What an earlier run kept, or the rest asked for, was not the object's: the whole, once.
                return try fetchOne(digest, from: remote, prefix: prefix, source: source, maximumSize: maximumSize)
            }
            guard matches else { throw mismatch(url: url, source: source, count: bytes.count) }
            return bytes
        case let .missing(error):
            throw FerryError(.manifest, "the metadata object \(url) that manifest \(source) names is not on the remote "
                             + "(\(error.message)): refused, nothing was changed",
                             hint: "the publisher removed it too early or never wrote it: a push writes it again when "
                                   + "it next "
                                   + "verifies what it published (verify-interval, or ferry sync now on the "
                                   + "publisher); after "
                                   + "ferry manifest build, run it again",
                             cause: .http(status: 404))
        case .unchanged:
            throw .manifest("the remote answered 'not modified' to an unconditional request for \(url)")
        }
    }
}

/// The objects a publisher placed that no manifest it published names any more (or none ever did:
/// a publish that failed after its objects went), since when, and by how many published
/// manifests in a row: `<sha256> <Unix seconds> <count>` lines in a file of the publisher's own
/// (`<state>/manifests/<session>.manifest.retired` for a push's metadata objects, `.retired-content`
/// for its content objects, `.ferry/retired` beside the objects for `manifest build`). An object
/// goes once none of the last `keep-versions` manifests names it and it has been unnamed for the
/// grace period (`ManifestTree.expired`); one named again is taken off.
struct RetiredObjects {
    let path: String
    /// Since when each object is unnamed, and by how many published manifests in a row.
    struct Retirement: Equatable {
        var seconds: Int64
        var unnamedBy: Int
    }
    private(set) var since: [String: Retirement] = [:]

    /// Lines `<sha256> <since> <unnamed by>`; a line without the count (written before counts
    /// were kept) stands for one manifest.
    init(path: String) {
        self.path = path
        guard let bytes = try? FileSystem.readFile(path, limit: 256 << 20) else { return }
        for line in bytes.split(separator: 0x0A) {
            let parts = line.split(separator: 0x20).map { String(decoding: $0, as: UTF8.self) }
            guard parts.count == 2 || parts.count == 3, let digest = SHA256Digest(hex: parts[0]), let seconds = Int64(parts[1]) else { continue }
            let count = parts.count == 3 ? Int(parts[2]) ?? 1 : 1
            since[digest.hex] = Retirement(seconds: seconds, unnamedBy: max(0, count))
        }
    }

    /// These are not named by the published manifest (yet: an object listed just before it is
    /// sent), from `now` unless already listed.
    mutating func retire(_ names: some Sequence<String>, now: Timestamp) {
        for n in names where since[n] == nil { since[n] = Retirement(seconds: now.seconds, unnamedBy: 0) }
    }

    /// After a manifest naming `current` was published: the objects `present` (what the publisher
    /// knows it placed) that it does not name are retired from `now` unless already listed; those
    /// it names leave the list; every one still listed is unnamed by one more manifest.
    mutating func update(present: some Sequence<String>, current: Set<String>, now: Timestamp) {
        retire(present.filter { $0.utf8.count == 64 && !current.contains($0) }, now: now)
        since = since.filter { !current.contains($0.key) }
        for name in since.keys { since[name]!.unnamedBy += 1 }
    }

    /// The objects no manifest of the last `versions` published names, unnamed for `grace` seconds.
    func expired(now: Timestamp, grace: Double, versions: Int) -> [String] {
        since.filter { $0.value.unnamedBy >= versions && ManifestTree.expired(since: Timestamp(seconds: $0.value.seconds), now: now, grace: grace) }
            .map(\.key).sorted()
    }

    mutating func removed(_ name: String) { since[name] = nil }

    func save() throws(FerryError) {
        if since.isEmpty && !FileSystem.exists(path) { return }
        if let slash = path.lastIndex(of: "/"), !FileSystem.exists(String(path[..<slash])) {
            try FileSystem.makePrivateDirectory(String(path[..<slash]))
        }
        let text = since.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value.seconds) \($0.value.unnamedBy)\n" }.joined()
        try FileSystem.writeAtomically(path, bytes: Array(text.utf8), mode: 0o600)
    }
}

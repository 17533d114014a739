import Glibc
import Synchronization
import FerryCore

/// While a pull's transfers run, when the manifest names packs of its small contents
/// (`ContentPacks`, design.md "Packs"): a pack of which the run needs half the bytes, or more
/// members than a request is worth (`ObjectBundle.worthFetching`), is fetched whole; of another,
/// each run of members it needs (neighbours in path order, the files of one directory) is fetched
/// as a range where the remote reads ranges, all of a pack's runs in one request where it reads
/// several at once (`.multipleRanges`). Each member a download needs is written as that
/// download's partial file, whole: the transfer, which waits for it (`PackFill.waits`), then
/// takes it with the hash the fill checked as it wrote (`PackFill.wroteWhole`) and places it with
/// no request, as it does a partial a killed run left whole (that one read back and hashed).
/// Packs come in path order, as the transfers go, so files are placed while later packs still
/// arrive. A member that does not hash to the content it stands for is not written (said once a
/// run): its files are fetched alone, as all that no pack gave. A whole pack from the remote is
/// not hashed as well (each member taken is; a mirror's is checked whole): only when a member
/// does not match is the pack hashed, to tell one sent damaged (remembered as sent wrong, as any
/// object) from one made wrong. A run killed here keeps what it wrote.
struct PullPacks {
    let pull: PullRun
    /// Packs or runs fetched at once, at most (a pack up to 4 MiB, held until written); one at a
    /// time when a byte budget counts them, so they overshoot a spent budget by one at most.
    static let lanes = 8
    /// Members apart by at most this many bytes are fetched in one range (what a request is worth).
    static let gap = 32 << 10

    /// A pack's bytes to fetch: all of it, or runs of members (indices of the list's members),
    /// each as a range, in one request where the remote gives several ranges at once; `ranges` is
    /// where each run is in the pack (all of it when whole), `offsets` where each member is.
    struct Want {
        let pack: ContentPacks.Pack
        let runs: [Range<Int>]
        let whole: Bool
        let ranges: [Range<Int64>]
        let offsets: [Int]
        var members: [Int] { runs.flatMap { $0 } }
    }

    /// Starts filling what the packs hold, on a thread of its own; nil when there is nothing to
    /// fill (no packs, a file or none to take from them, the session held or stopping).
    func start(_ prepared: Prepared) -> PackFill? {
        guard prepared.manifest.layout == .objects, let named = prepared.manifest.packs, pull.options.stop.reason == nil,
              DiscretionGate(session: pull.session, agent: pull.agent, clock: pull.clock)?.waitsFor() == nil,
              !held(), (try? prepared.root.openStaging()) != nil else { return nil }
        let needed = neededContents(prepared)
        guard needed.count > 1 else { return nil }
        let fill = PackFill(waiting: Set(needed.values.joined()), wake: { [engine = pull.engine] in engine.wake() })
        let work = { () -> PackFill.Outcome in self.fill(prepared, named: named, needed: needed, into: fill) }
        guard let thread = try? BackgroundWork(name: "ferry-packs", work) else { return nil }
        fill.thread = thread
        return fill
    }

    /// Fetches and writes what `needed` wants of the packs `named` lists, telling `fill` as each
    /// pack or run is written (on the fill's thread, and 8 lanes of its own).
    private func fill(_ prepared: Prepared, named: ObjectBundle.Named, needed: [SHA256Digest: [Int64]],
                      into fill: PackFill) -> PackFill.Outcome {
        defer { fill.release(nil) }
        let objects = prepared.preparation.objects
        let outcome = Mutex(PackFill.Outcome())
        do throws(FerryError) {
            let list = try objects.fetchUncached([named], source: pull.session.manifestURL)
            outcome.withLock { $0.bytes += Int64(list.first?.count ?? 0) }
            guard let bytes = list.first, let (packs, members) = ContentPacks.read(list: bytes, for: prepared.manifest.entries) else {
                throw FerryError(.manifest, "the list of packs the manifest names is not one of its files")
            }
            let abilities = pull.remote.base.backend.abilities
            let wants = packs.flatMap { wanted(of: $0, members: members, needed: needed, abilities: abilities) }
            func tasks(_ want: Want) -> Set<Int64> { Set(want.members.compactMap { needed[members[$0].sha256] }.joined()) }
            // What no pack will give is fetched alone at once.
            fill.release(Set(needed.values.joined()).subtracting(wants.flatMap(tasks)))
            // In path order, as the transfers go; one at a time when a byte budget counts them.
            let lanes = pull.engine.budget != nil && !pull.session.budgetExempt ? 1 : PullPacks.lanes
            _ = Lanes.run(wants.count, lanes: lanes, name: "ferry-packs") { i throws(FerryError) in
                defer { fill.release(tasks(wants[i])) }
                guard pull.options.stop.reason == nil, !held(), outcome.withLock({ $0.stopped == nil }) else { return }
                let fetched = fetch(wants[i], objects: objects)
                let got = fetched.0
                var failure = fetched.1
                let count = got?.reduce(0) { $0 + $1.count } ?? 0
                var wrote = (bytes: Int64(count), lying: 0)
                if let got {
                    pull.engine.budget?.charge(count)
                    wrote.lying = write(wants[i], got, members: members, needed: needed, root: prepared.root, into: fill)
                    if wrote.lying > 0, let wrong = sentWrong(wants[i], got, objects: objects) {
                        // The pack came damaged, not made wrong: its own failure, not the publisher's.
                        wrote.lying = 0
                        failure = wrong
                    }
                }
                outcome.withLock { o in
                    o.bytes += wrote.bytes
                    o.lying += wrote.lying
                    o.problem = o.problem ?? failure
                    // A remote that fails (not one object it lacks or holds wrong) is not asked for more.
                    if let failure, !PullPacks.aboutOneObject(failure) { o.stopped = failure }
                }
            }
        } catch {
            outcome.withLock { $0.problem = $0.problem ?? error }
        }
        return outcome.withLock { $0 }
    }

    /// Whether a failure is of one object (lacking, wrong, too large), not of the remote.
    static func aboutOneObject(_ error: FerryError) -> Bool {
        switch error.cause {
        case .contentMismatch?, .http(status: 404)?, .http(status: 410)?, .wrongLength?: return true
        default: return false
        }
    }

    /// What the fill did, said on the run's thread once it ended (`PackFill.finish`): the warning
    /// for members that lied, and why packs could not be read. Returns the bytes fetched.
    func say(_ outcome: PackFill.Outcome, objects: ManifestObjects) -> Int64 {
        if outcome.lying > 0 {
            pull.emit(.warning(message: "\(Plural.count(outcome.lying, "file")) the packs of manifest \(pull.session.manifestURL) "
                                        + "hold did not match their hash there: fetched alone (the publisher's packs are wrong)"))
        }
        if let problem = outcome.problem { objects.bundlesUnread(of: "the manifest's small files (its packs)", problem) }
        return outcome.bytes
    }

    /// What of `pack` to fetch: all of it; its runs of needed members (where the remote reads
    /// ranges), all in one request where it gives several at once, else each run of more than one
    /// member alone; or nothing (a member or none needed: fetched alone, as without packs).
    private func wanted(of pack: ContentPacks.Pack, members: [ContentPacks.Member], needed: [SHA256Digest: [Int64]],
                        abilities: RemoteAbilities) -> [Want] {
        let wanted = pack.members.filter { needed[members[$0].sha256] != nil }
        guard pack.name != nil, wanted.count > 1 else { return [] }
        let offsets = ContentPacks.layout(members[pack.members].map(\.size)).offsets
        let bytes = wanted.reduce(0) { $0 + members[$1].size }
        if bytes * 2 >= pack.size
            || ObjectBundle.worthFetching(missing: wanted.count, of: pack.members.count, bundleBytes: pack.size) {
            return [Want(pack: pack, runs: [pack.members], whole: true, ranges: [0..<Int64(pack.size)], offsets: offsets)]
        }
        guard abilities.contains(.rangedReads) else { return [] }
        var runs: [Range<Int>] = []
        for i in wanted {
            if let last = runs.last, members[last.upperBound..<i].reduce(0, { $0 + $1.size }) <= PullPacks.gap {
                runs[runs.count - 1] = last.lowerBound..<(i + 1)
            } else {
                runs.append(i..<(i + 1))
            }
        }
        func range(_ run: Range<Int>) -> Range<Int64> {
            let first = offsets[run.lowerBound - pack.members.lowerBound]
            let end = offsets[run.upperBound - 1 - pack.members.lowerBound] + members[run.upperBound - 1].size
            return Int64(first)..<Int64(end)
        }
        if abilities.contains(.multipleRanges) {
            return [Want(pack: pack, runs: runs, whole: false, ranges: runs.map(range), offsets: offsets)]
        }
        return runs.filter { run in run.filter { needed[members[$0].sha256] != nil }.count > 1 }.map { run in
            Want(pack: pack, runs: [run], whole: false, ranges: [range(run)], offsets: offsets)
        }
    }

    /// The bytes of each of `want`'s ranges: its whole pack, or its runs of members (in one
    /// request where the remote gives several ranges at once, else a request each); or why not.
    private func fetch(_ want: Want, objects: ManifestObjects) -> ([[UInt8]]?, FerryError?) {
        if want.whole {
            // Not checked as a whole from the remote (a mirror's is): each member taken is (`write`).
            switch objects.fetchLoose(want.pack.name!, source: pull.session.manifestURL, maximumSize: want.pack.size,
                                      checked: false) {
            case let .success(bytes): return ([bytes], nil)
            case let .failure(error): return (nil, error)
            }
        }
        do throws(FerryError) {
            if want.ranges.count > 1, let parts = try objects.fetchRanges(want.pack.name!, ranges: want.ranges, size: want.pack.size) {
                return (parts, nil)
            }
            var parts: [[UInt8]] = []
            for range in want.ranges {
                guard let part = try objects.fetchRange(want.pack.name!, range: range) else { return (nil, nil) }
                parts.append(part)
            }
            return (parts, nil)
        } catch {
            return (nil, error)
        }
    }

    /// Where members of a whole pack did not match their hashes: the pack's failure when it came
    /// with other bytes than its name says (nil: it is the pack as published, and its members
    /// are wrong).
    private func sentWrong(_ want: Want, _ parts: [[UInt8]], objects: ManifestObjects) -> FerryError? {
        guard want.whole, let bytes = parts.first else { return nil }
        return objects.judge(want.pack.name!, bytes, source: pull.session.manifestURL)
    }

    /// Writes each member of `parts` (what `want` fetched, a part per range) a download needs as
    /// its partial file, each checked against its content's hash first; returns how many did not
    /// match. `fill` is told of the files written, a few at a time, so that their transfers go
    /// while the rest are.
    private func write(_ want: Want, _ parts: [[UInt8]], members: [ContentPacks.Member], needed: [SHA256Digest: [Int64]],
                       root: LocalRoot, into fill: PackFill) -> Int {
        let hasher = SHA256Hasher()
        var lying = 0
        var written: [Int64] = []
        defer { fill.wrote(written) }
        for (k, m) in want.runs.enumerated().flatMap({ k, run in run.map { (k, $0) } }) {
            let member = members[m]
            guard let tasks = needed[member.sha256] else { continue }
            let bytes = k < parts.count ? parts[k] : []
            let at = want.offsets[m - want.pack.members.lowerBound] - Int(want.ranges[k].lowerBound)
            let right = bytes.count == want.ranges[k].count && at >= 0 && at + member.size <= bytes.count
                && bytes.withUnsafeBytes { hasher.digest(of: UnsafeRawBufferPointer(rebasing: $0[at..<(at + member.size)])) } == member.sha256
            guard right else {
                lying += 1
                continue
            }
            for task in tasks where write(bytes, at: at, count: member.size, task: task, root: root) { written.append(task) }
            if written.count >= 32 {
                fill.wrote(written)
                written.removeAll(keepingCapacity: true)
            }
        }
        return lying
    }

    /// Whether the machine's spent byte budget holds this session.
    private func held() -> Bool { !pull.session.budgetExempt && pull.engine.budget?.hold() != nil }

    /// The tasks of each content the run downloads whole that a pack may hold, and whose partial
    /// file does not hold it yet (a run killed after a pack was written left it whole).
    private func neededContents(_ prepared: Prepared) -> [SHA256Digest: [Int64]] {
        var needed: [SHA256Digest: [Int64]] = [:]
        let partials = prepared.root.partialLengths()
        for (download, task) in zip(prepared.plan.downloads, prepared.tasks) {
            let e = download.entry
            guard e.index == nil, let size = e.size, size > 0, size <= Int64(ContentPacks.largestAllowed),
                  task.bytesDone == 0, partials[task.id] != size, prepared.deltas.plans[e.path] == nil else { continue }
            needed[e.sha256, default: []].append(task.id)
        }
        return needed
    }

    /// Writes `count` bytes of `bytes` from `at` as the partial file of `task` (what it held
    /// before, which no checkpoint vouches for, goes); whether they are all there.
    private func write(_ bytes: [UInt8], at: Int, count: Int, task: Int64, root: LocalRoot) -> Bool {
        guard let (partial, _) = try? root.openPartial(taskID: task) else { return false }
        defer { close(partial.fd) }
        guard partial.length == 0 || ftruncate(partial.fd, 0) == 0 else { return false }
        let whole = bytes.withUnsafeBytes { FileSystem.write(fd: partial.fd, $0.baseAddress! + at, count: count, at: 0) }
        if !whole { ftruncate(partial.fd, 0) }
        return whole
    }
}

/// A pull's packs being fetched (`PullPacks.start`): which downloads wait for their partial, and
/// what the fill did once it ended. Shared by the fill's thread and the engine's.
final class PackFill: @unchecked Sendable {
    /// What the fill did: bytes fetched, members that did not match their hash, the first failure.
    struct Outcome {
        var bytes: Int64 = 0
        var lying = 0
        var problem: FerryError?
        /// The failure of the remote that stopped the fill, if one did.
        var stopped: FerryError?
    }

    /// The downloads whose partial file the fill may write: theirs are not made ahead by the
    /// committer, and are opened as they are (`LocalRoot.openPartial(existing:)`).
    let filling: Set<Int64>
    private let waiting: Mutex<Set<Int64>>
    private let whole = Mutex(Set<Int64>())
    private let wake: () -> Void
    var thread: BackgroundWork<Outcome, Never>?

    init(waiting: Set<Int64>, wake: @escaping () -> Void) {
        filling = waiting
        self.waiting = Mutex(waiting)
        self.wake = wake
    }

    /// Whether the download of `task` waits for a pack still to come.
    func waits(_ task: Int64) -> Bool { waiting.withLock { $0.contains(task) } }

    /// The partial files of `tasks` are written whole, each from a member checked by its hash as
    /// it was written: their downloads wait no more.
    func wrote(_ tasks: [Int64]) {
        guard !tasks.isEmpty else { return }
        whole.withLock { $0.formUnion(tasks) }
        release(Set(tasks))
    }

    /// Whether this run's fill wrote the partial file of `task` whole (and checked what it wrote).
    func wroteWhole(_ task: Int64) -> Bool { whole.withLock { $0.contains(task) } }

    /// The downloads of `tasks` wait no more (nil: none does); the engine is told.
    func release(_ tasks: Set<Int64>?) {
        waiting.withLock { w in if let tasks { w.subtract(tasks) } else { w.removeAll() } }
        wake()
    }

    /// Waits for the fill to end.
    func finish() -> Outcome { thread?.wait() ?? Outcome() }
}

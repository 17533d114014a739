import Glibc
import FerryCore

/// Before a pull's transfers, when the manifest names packs of its small contents
/// (`ContentPacks`, design.md "Packs"): a pack of which the run needs half the bytes, or more
/// members than a request is worth (`ObjectBundle.worthFetching`), is fetched whole; of another,
/// each run of members it needs (neighbours in path order, the files of one directory) is fetched
/// as one range where the remote reads ranges. Each member a download needs is written as that
/// download's partial file, whole: the transfer then verifies it from disk by its hash and places
/// it with no request, as it does a partial a killed run left whole. A member that does not hash
/// to the content it stands for is not written (said once a run): its files are fetched alone, as
/// all that no pack gave. A run killed here keeps what it wrote.
struct PullPacks {
    let pull: PullRun
    /// Packs or runs fetched at once, at most (a pack up to 4 MiB, held until written); one at a
    /// time when a byte budget counts them, so they overshoot a spent budget by one at most.
    static let batch = 8
    /// Members apart by at most this many bytes are fetched in one range (what a request is worth).
    static let gap = 32 << 10

    /// A pack's bytes to fetch: all of it, or the members `members` (indices of the list's members) as one range.
    struct Want {
        let pack: ContentPacks.Pack
        let members: Range<Int>
        let whole: Bool
    }

    /// Fills what the packs hold; returns the bytes fetched.
    func fill(_ prepared: Prepared) -> Int64 {
        guard prepared.manifest.layout == .objects, let named = prepared.manifest.packs, pull.options.stop.reason == nil,
              DiscretionGate(session: pull.session, agent: pull.agent, clock: pull.clock)?.waitsFor() == nil,
              !held() else { return 0 }
        let needed = neededContents(prepared)
        guard needed.count > 1 else { return 0 }
        let objects = prepared.preparation.objects
        var fetched: Int64 = 0
        do throws(FerryError) {
            let list = try objects.fetchUncached([named.sha256], source: pull.session.manifestURL, maximumSize: named.size)
            fetched += Int64(list.first?.count ?? 0)
            guard let bytes = list.first, let (packs, members) = ContentPacks.read(list: bytes, for: prepared.manifest.entries) else {
                throw FerryError(.manifest, "the list of packs the manifest names is not one of its files")
            }
            let ranged = pull.remote.base.backend.abilities.contains(.rangedReads)
            let wants = packs.flatMap { wanted(of: $0, members: members, needed: needed, ranged: ranged) }
            let step = pull.engine.budget != nil && !pull.session.budgetExempt ? 1 : PullPacks.batch
            var problem: FerryError?
            var lying = 0
            // Whole packs, then runs: a group is of one kind.
            for kind in [wants.filter(\.whole), wants.filter { !$0.whole }] {
                for start in stride(from: 0, to: kind.count, by: step) {
                    if pull.options.stop.reason != nil || held() { break }
                    let group = Array(kind[start..<min(start + step, kind.count)])
                    let (size, failure) = take(group, lying: &lying, members: members, needed: needed, objects: objects, root: prepared.root)
                    fetched += size
                    pull.engine.budget?.charge(Int(size))
                    problem = problem ?? failure
                }
            }
            if lying > 0 {
                pull.emit(.warning(message: "\(Plural.count(lying, "file")) the packs of manifest \(pull.session.manifestURL) hold "
                                            + "did not match their hash there: fetched alone (the publisher's packs are wrong)"))
            }
            if let problem { throw problem }
        } catch {
            objects.bundlesUnread(of: "the manifest's small files (its packs)", error)
        }
        return fetched
    }

    /// What of `pack` to fetch: all of it, its runs of needed members (where the remote reads
    /// ranges), or nothing (a member or none needed: fetched alone, as without packs).
    private func wanted(of pack: ContentPacks.Pack, members: [ContentPacks.Member], needed: [SHA256Digest: [Int64]],
                        ranged: Bool) -> [Want] {
        let wanted = pack.members.filter { needed[members[$0].sha256] != nil }
        guard pack.name != nil, wanted.count > 1 else { return [] }
        let bytes = wanted.reduce(0) { $0 + members[$1].size }
        if bytes * 2 >= pack.size
            || ObjectBundle.worthFetching(missing: wanted.count, of: pack.members.count, bundleBytes: pack.size) {
            return [Want(pack: pack, members: pack.members, whole: true)]
        }
        guard ranged else { return [] }
        var runs: [Range<Int>] = []
        for i in wanted {
            if let last = runs.last, members[last.upperBound..<i].reduce(0, { $0 + $1.size }) <= PullPacks.gap {
                runs[runs.count - 1] = last.lowerBound..<(i + 1)
            } else {
                runs.append(i..<(i + 1))
            }
        }
        return runs.filter { run in run.filter { needed[members[$0].sha256] != nil }.count > 1 }
            .map { Want(pack: pack, members: $0, whole: false) }
    }

    /// Fetches `group` (whole packs, or runs of them) and writes what each gave; returns the
    /// bytes fetched and the first failure, if any.
    private func take(_ group: [Want], lying: inout Int, members: [ContentPacks.Member], needed: [SHA256Digest: [Int64]], objects: ManifestObjects,
                      root: LocalRoot) -> (Int64, FerryError?) {
        var fetched: Int64 = 0
        var failure: FerryError?
        let ranges = group.map { want -> Range<Int64> in
            let (_, offsets) = ContentPacks.layout(members[want.pack.members].map(\.size))
            let first = offsets[want.members.lowerBound - want.pack.members.lowerBound]
            let last = offsets[want.members.upperBound - 1 - want.pack.members.lowerBound] + members[want.members.upperBound - 1].size
            return Int64(first)..<Int64(last)
        }
        let got: [[UInt8]?]
        if group.first?.whole == true {
            got = objects.fetchEachUncached(group.map { $0.pack.name! }, source: pull.session.manifestURL,
                                            maximumSize: group.map(\.pack.size).max() ?? 0).map { result in
                if case let .failure(error)? = result { failure = failure ?? error }
                return try? result?.get()
            }
        } else {
            got = objects.fetchRanges(zip(group, ranges).map { ($0.pack.name!, $1) })
        }
        let hasher = SHA256Hasher()
        for (i, want) in group.enumerated() {
            guard let bytes = got[i] else { continue }
            fetched += Int64(bytes.count)
            let (size, offsets) = ContentPacks.layout(members[want.pack.members].map(\.size))
            let base = want.whole ? 0 : Int(ranges[i].lowerBound)
            for m in want.members {
                let member = members[m]
                guard let tasks = needed[member.sha256] else { continue }
                let at = offsets[m - want.pack.members.lowerBound] - base
                let right = (!want.whole || size == bytes.count) && at >= 0 && at + member.size <= bytes.count
                    && bytes.withUnsafeBytes { hasher.digest(of: UnsafeRawBufferPointer(rebasing: $0[at..<(at + member.size)])) } == member.sha256
                guard right else {
                    lying += 1
                    continue
                }
                for task in tasks { write(bytes, at: at, count: member.size, task: task, root: root) }
            }
        }
        return (fetched, failure)
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
    /// before, which no checkpoint vouches for, goes).
    private func write(_ bytes: [UInt8], at: Int, count: Int, task: Int64, root: LocalRoot) {
        guard let (partial, _) = try? root.openPartial(taskID: task) else { return }
        defer { close(partial.fd) }
        guard partial.length == 0 || ftruncate(partial.fd, 0) == 0 else { return }
        var done = 0
        bytes.withUnsafeBytes { all in
            while done < count {
                let n = pwrite(partial.fd, all.baseAddress! + at + done, count - done, off_t(done))
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                done += n
            }
        }
        if done < count { ftruncate(partial.fd, 0) }
    }
}

import CCurl
import Glibc
import FerryCore

/// A download's strategy (`DownloadStrategy`) for a new version of a large file assembled from
/// bytes the mirror already holds and from the remote (`DeltaPlan`), piece by piece: a piece's
/// bytes gather in memory (`PieceMemory`), and only once they match the piece's SHA-256 from the
/// signed index do they go to the partial file, in order, where the download hashes them for the
/// whole-file check and checkpoints them. So the partial only ever holds verified pieces, and a
/// relaunch resumes at the last checkpoint (a piece boundary), whatever the remote's validators.
///
/// Local runs are copied in the engine's steps. Fetched bytes come from the remote as one of two
/// kinds (`Fetched`):
/// - **ranges** of the file: each run of fetched bytes one request for exactly that range (a 206
///   whose Content-Range is that range of a file of the manifest's size), several runs in one
///   request where the remote may be asked so (`multipart/byteranges`, read by the extension in
///   `DeltaAssembly+Multipart.swift`), or reads at those offsets where the engine's steps read the
///   remote themselves (`file://`, SFTP). A piece made with local bytes that does not verify is
///   fetched whole; a fetched piece that fails twice, or a server that will not answer a range as
///   asked, stops the delta (`stopped`): the file is then fetched whole as any other;
/// - **pieces**, for a file stored as its pieces (`ContentIndex.Reference.storedAsPieces`): each
///   piece is an object of its own, its fetched bytes are ranges of that object, and what would
///   stop a delta fails the attempt instead (the verified pieces are kept): there is no whole. A
///   piece stored compressed (`DeltaPlan.Frames`) is asked for the frames of the chunks a run
///   covers, one range a request; they gather whole (`packed`) and are decompressed into exactly
///   the run's bytes (no more: what bounds a bomb), which the piece's SHA-256 then judges.
final class DeltaAssembly: DownloadStrategy {
    /// Where the fetched bytes are on the remote.
    enum Fetched {
        /// Ranges of the file, at the download's origin.
        case ranges
        /// Each piece is an object of its own, at the origin this gives for its SHA-256.
        case pieces((SHA256Digest) -> Download.Origin)
    }

    private(set) var plan: DeltaPlan
    let fetched: Fetched
    /// The local files the plan takes bytes from, by `DeltaPlan.Location.file`; the file after
    /// them is the partial itself, whose verified pieces a repeat takes its bytes from.
    let sources: [Int32]
    private var partialFD: Int32 = -1
    /// Where the assembly is: the piece, the segment in it, the bytes of that segment done.
    var piece = 0
    var segment = 0
    var segmentDone = 0
    /// The piece's bytes gathered so far (given back at `close`).
    private var memory: PieceMemory? = PieceMemory()
    var gathered: PieceMemory { memory! }
    /// Tries of each fetched piece whose bytes did not match.
    private var mismatches: [Int: Int] = [:]
    /// How often a piece's fetched bytes may fail its hash before the delta stops: twice from the
    /// remote (the second fetch rules out damage on the way), once from a mirror, whose wrong
    /// bytes send the file to the next source at once.
    private let mismatchesAllowed: Int
    /// The piece gathered from what an earlier attempt left (`restore`), and the fetched bytes
    /// taken from there (counted as reused: local data, not fetched by this attempt).
    private var restoredPiece: Int?
    private var restoredBytes: Int64 = 0
    private var reusedBytes: Int64 = 0
    private var receivedAtCheckpoint: Int64 = 0
    static let fetchedCheckpoint: Int64 = 32 << 10
    /// Why the delta stopped (the file is fetched whole next), when it did.
    private(set) var stopped: DeltaStop?

    /// The range being fetched by the current request: its first and last byte, where they are on
    /// the remote (`remoteRange`), what arrived.
    var run: (first: Int64, last: Int64)?
    var asked: (first: Int64, last: Int64)?
    var runReceived: Int64 = 0
    /// Several ranges in one request (`multipart/byteranges`), where the remote may be asked for
    /// them; false once the server answers such a request otherwise.
    var multipleRanges = false
    /// The ranges of the current request when it asks several, and its answer's reader.
    var runs: [(first: Int64, last: Int64)] = []
    var parts: MultipartRanges?
    static let rangesPerRequest = 64
    var checkedAnswer = false
    /// The request ended early on purpose (a piece to fetch again): its next one starts there.
    var restartRun = false
    var request: HTTPRequest?
    var more = false
    /// What ended the current request from inside the body callback.
    var outcomeOfReceive: TransferOutcome?
    /// The source the engine's steps read (the file's, or the current piece's), and whether it
    /// was opened; for a file stored as its pieces, the piece it reads.
    var source: SteppedSource?
    var sourcePiece = -1
    var sourceOpened = false
    /// A server that answered a range of a piece with the whole of it: pieces are asked whole.
    var wholePieces = false
    /// The frames of the current run of a piece stored compressed, as they arrive.
    var packed: [UInt8] = []
    lazy var decompressor = Zstd.Decompressor()

    private init(plan: DeltaPlan, fetched: Fetched, sources: [Int32], fromMirror: Bool) {
        self.plan = plan
        self.fetched = fetched
        self.sources = sources
        mismatchesAllowed = fromMirror ? 1 : 2
    }

    var kind: DownloadKind {
        if case .pieces = fetched { return .pieces }
        return .ranges
    }
    var continues: Bool { more }
    var reused: Int64 { reusedBytes }
    var storedAsPieces: Bool { kind == .pieces }

    /// A download that assembles `entry` by `plan` from the local files `sources` and `origin`.
    /// `resumeFrom`: bytes of the partial kept from an earlier attempt (its last checkpoint); the
    /// assembly goes on from the start of the piece that holds that offset. Pieces the partial
    /// holds whole after it (appended before a kill, not yet checkpointed) are kept if they match
    /// their SHA-256, and the fetched bytes of the piece after them, which go to the partial as
    /// they come (`keepFetched`), are taken again: a kill costs about what was in flight.
    static func download(task: TransferTask, entry: ManifestEntry, reason: Plan.Reason, origin: Download.Origin,
                         partial: PartialFile,
                         resumeFrom: Int64, plan: DeltaPlan, sources: [Int32],
                         pieces: ((SHA256Digest) -> Download.Origin)? = nil,
                         fromMirror: Bool = false, clock: any Clock) throws(FerryError) -> Download {
        let assembly = DeltaAssembly(plan: plan, fetched: pieces.map(Fetched.pieces) ?? .ranges, sources: sources,
                                     fromMirror: fromMirror)
        let index = verifiedPieces(plan, from: plan.piece(at: min(resumeFrom, partial.length)), partial: partial)
        let start = index < plan.pieces.count ? plan.pieces[index].offset : plan.size
        // The bytes after them, up to less than a piece (a whole one did not match). A piece
        // stored compressed is fetched in runs of whole frames: it starts again.
        let tail = index < plan.pieces.count && plan.pieces[index].frames == nil
            ? FileSystem.read(fd: partial.fd, at: start, count: min(partial.length - start,
                                                                 Int64(plan.pieces[index].length - 1))) : []
        assembly.piece = index
        assembly.partialFD = partial.fd
        if case let .request(read) = origin { assembly.multipleRanges = read.multipleRanges }
        assembly.source = pieces == nil ? origin.stepped : nil
        // Any validator keeps the offset: what the partial holds was verified piece by piece.
        let d = try Download(task: task, entry: entry, reason: reason, origin: origin, partial: partial,
                             resumeFrom: start,
                             validator: "delta", clock: clock, strategy: assembly)
        d.validator = nil
        // A partial that already holds the whole file (a kill after its last piece) is verified
        // as it is: the assembly starts where the partial ends.
        assembly.piece = plan.piece(at: d.written)
        if assembly.piece == index && d.written == start && !tail.isEmpty { assembly.restore(d, tail) }
        return d
    }

    /// From piece `first`: the first piece the partial does not hold whole and as its hash says.
    private static func verifiedPieces(_ plan: DeltaPlan, from first: Int, partial: PartialFile) -> Int {
        var i = first
        let hasher = SHA256Hasher()
        while i < plan.pieces.count {
            let p = plan.pieces[i]
            guard p.offset + Int64(p.length) <= partial.length else { break }
            let bytes = FileSystem.read(fd: partial.fd, at: p.offset, count: Int64(p.length))
            guard bytes.count == p.length else { break }
            bytes.withUnsafeBytes { hasher.update($0.baseAddress!, count: $0.count) }
            guard hasher.finalize() == p.sha256 else { break }
            i += 1
        }
        return i
    }

    /// The piece being gathered when an attempt ended: its fetched bytes from what the partial
    /// holds after the verified pieces (`tail`), its local bytes read again, as far as the tail
    /// goes. The piece's hash judges them as any: one that does not match is fetched whole.
    private func restore(_ d: Download, _ tail: [UInt8]) {
        restoredPiece = piece
        let p = plan.pieces[piece]
        var at = 0
        tail.withUnsafeBytes { raw in
            for s in p.segments {
                guard at < raw.count else { return }
                let n = min(s.length, raw.count - at)
                if let from = s.from {
                    var done = 0
                    while done < n {
                        let got = readLocal(DeltaPlan.Location(file: from.file, offset: from.offset + Int64(done)),
                                            count: n - done)
                        // Fetched whole now (the source could not be read).
                        if got == 0 { return }
                        _ = advance(d, got)
                        done += got
                    }
                } else {
                    // Written back: opening the attempt cut the partial at the verified pieces,
                    // and a kill before this piece ends must find these bytes there again.
                    keepFetched(d, raw.baseAddress! + at, count: n)
                    gathered.take(raw.baseAddress! + at, count: n)
                    _ = advance(d, n)
                    restoredBytes += Int64(n)
                }
                at += n
            }
        }
    }

    /// Fetched bytes go to the partial where they belong as they come (beyond the verified
    /// pieces, which `endPiece` appends again once their piece matched), so that an attempt that
    /// ends mid-piece, a kill among them, does not have to fetch them again (`restore`). Best effort.
    func keepFetched(_ d: Download, _ bytes: UnsafeRawPointer, count: Int) {
        _ = FileSystem.write(fd: d.fd, bytes, count: count, at: at(d))
    }

    // MARK: where the assembly is

    /// The offset in the file the next byte of the assembly belongs at.
    func at(_ d: Download) -> Int64 { d.written + Int64(gathered.filled) }

    /// Where the remote's bytes of the current piece are: offsets in the file (0), or in the
    /// piece's own object; and how long what they are read from is.
    var base: Int64 { storedAsPieces ? plan.pieces[piece].offset : 0 }
    func remoteSize(_ d: Download) -> Int64 {
        storedAsPieces ? Int64(plan.pieces[piece].storedLength) : d.entry.size ?? 0
    }
    /// Where the current bytes come from on the remote: the file, or the current piece's object.
    func remoteOrigin(_ d: Download) -> Download.Origin {
        if case let .pieces(at) = fetched { return at(plan.pieces[piece].object) }
        return d.origin
    }
    /// Whether the current piece is stored compressed.
    var compressed: Bool { storedAsPieces && piece < plan.pieces.count && plan.pieces[piece].frames != nil }

    /// Where a run of the file's bytes is on the remote: the same offsets, or those in the piece's
    /// object (its frames, for a piece stored compressed; nil when the run does not cover whole
    /// chunks, which a plan never makes).
    func remoteRange(_ run: (first: Int64, last: Int64)) -> (first: Int64, last: Int64)? {
        guard let frames = storedAsPieces ? plan.pieces[piece].frames : nil else {
            return (run.first - base, run.last - base)
        }
        return frames.storedRange(of: Int(run.first - base)..<Int(run.last - base + 1))
            .map { (Int64($0.lowerBound), Int64($0.upperBound - 1)) }
    }

    /// The run's frames, all come, decompressed into exactly the run's bytes (nil: they are not
    /// frames of that many bytes).
    func unpacked(_ run: (first: Int64, last: Int64)) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: Int(run.last - run.first + 1))
        let done = packed.withUnsafeBytes { source in
            out.withUnsafeMutableBytes { decompressor.decompress(source, into: $0) }
        }
        packed.removeAll(keepingCapacity: true)
        return done ? out : nil
    }

    enum Work {
        case local(DeltaPlan.Location, Int)
        case remote(Int64, Int)
        case done
    }

    /// The next bytes to take: from a local file, from the remote (at that offset, that many
    /// bytes, up to the end of the current segment), or nothing more.
    func work(_ d: Download) -> Work {
        guard piece < plan.pieces.count else { return .done }
        let s = plan.pieces[piece].segments[segment]
        let left = s.length - segmentDone
        if let from = s.from {
            return .local(DeltaPlan.Location(file: from.file, offset: from.offset + Int64(segmentDone)), left)
        }
        return .remote(at(d), left)
    }

    /// Takes `count` fetched bytes of the current segment into the piece; ends the piece when
    /// full. A failure outcome when the delta cannot go on.
    func take(_ d: Download, _ bytes: UnsafeRawPointer, count: Int) -> TransferOutcome? {
        keepFetched(d, bytes, count: count)
        gathered.take(bytes, count: count)
        return advance(d, count)
    }

    /// `count` more bytes of the current segment are gathered; ends the piece when full.
    func advance(_ d: Download, _ count: Int) -> TransferOutcome? {
        gathered.grew(by: count)
        segmentDone += count
        let p = plan.pieces[piece]
        guard segmentDone == p.segments[segment].length else { return nil }
        segment += 1
        segmentDone = 0
        guard segment == p.segments.count else { return nil }
        return endPiece(d)
    }

    /// The current piece is fetched whole from its start (its local bytes could not be read, or
    /// did not verify): what was gathered of it goes.
    func refetchPiece() {
        plan.fetchWhole(piece)
        gathered.clear()
        segment = 0
        segmentDone = 0
    }

    /// The piece is whole: written to the partial if it matches its hash; otherwise fetched
    /// whole (local bytes), or once more (fetched bytes), or the delta stops.
    private func endPiece(_ d: Download) -> TransferOutcome? {
        let p = plan.pieces[piece]
        let matches = gathered.matches(p.sha256)
        segment = 0
        segmentDone = 0
        if matches { return appendPiece(d) }
        gathered.clear()
        restartRun = true
        // Local bytes, or bytes an earlier attempt left, that do not verify: fetched whole.
        if p.reusesLocalBytes || restoredPiece == piece {
            restoredPiece = nil
            refetchPiece()
            return nil
        }
        return fetchedBytesWrong()
    }

    /// The current piece's fetched bytes are not its own (they do not match its hash, or its
    /// frames do not decompress to its bytes): fetched once more, or the delta stops.
    func fetchedBytesWrong() -> TransferOutcome? {
        let p = plan.pieces[piece]
        gathered.clear()
        segment = 0
        segmentDone = 0
        restartRun = true
        mismatches[piece, default: 0] += 1
        if mismatches[piece]! < mismatchesAllowed { return nil }
        if storedAsPieces {
            return stop("the remote's object of the piece of \(Units.formatBytes(Int64(p.length))) at offset "
                        + "\(p.offset) (\(p.sha256.hex.prefix(16))…) does not hold the bytes its name says; the "
                        + "publisher's next push checks its objects and sends it again",
                        cause: .contentMismatch(afterResume: false), reason: .piecesWrong)
        }
        return stop("the bytes the remote sent for \(Units.formatBytes(Int64(p.length))) at offset \(p.offset) did not "
                    + "match the file's index twice",
                    cause: .contentMismatch(afterResume: false), reason: .piecesWrong)
    }

    /// A piece that matched its hash goes to the partial; fetched bytes are checkpointed every
    /// 32 KiB of them (at a piece's end, where the partial can end), besides every 2 MiB written:
    /// they are what a kill would cost again.
    private func appendPiece(_ d: Download) -> TransferOutcome? {
        let p = plan.pieces[piece]
        let local = p.segments.reduce(0) { $0 + ($1.from == nil ? 0 : Int64($1.length)) }
        let count = gathered.filled
        gathered.clear()
        guard d.append(gathered.bytes, count: count) else {
            return d.recordedFailure(or: "cannot write the partial file")
        }
        reusedBytes += local
        if restoredPiece == piece {
            reusedBytes += restoredBytes
            restoredPiece = nil
        }
        piece += 1
        if d.received - receivedAtCheckpoint >= DeltaAssembly.fetchedCheckpoint {
            receivedAtCheckpoint = d.received
            d.takeCheckpoint()
            if d.failure != nil { return d.recordedFailure(or: "") }
        }
        return nil
    }

    /// Stops the delta: the file is fetched whole next (its verified pieces are not kept, as a
    /// whole download starts from zero without a validator).
    func stop(_ why: String, keepPieces: Bool = true, cause: FailureCause = .rangeNotHonoured,
              reason: DeltaFallback = .rangesRefused) -> TransferOutcome {
        guard !storedAsPieces else {
            // Stored as pieces: the attempt fails, what was verified kept; tried again unless the
            // piece's object itself is wrong (a later run tries again, as for a whole file).
            return .failed(TransferFailure(message: why, keepPartial: keepPieces, cause: cause))
        }
        stopped = DeltaStop(reason: reason, why: why)
        return .failed(TransferFailure(message: why + "; fetching the whole "
                                                    + "file", keepPartial: false, cause: .rangeNotHonoured))
    }

    /// The whole file checked as any download's is; one whose every piece matched its index but
    /// not its SHA-256 has an index that does not describe it: the delta stops.
    func verify(_ d: Download) -> TransferOutcome {
        let outcome = d.verify()
        if case let .failed(failure) = outcome, case .contentMismatch = failure.cause {
            return stop("the file assembled from pieces that each matched the index does not match its SHA-256 (the "
                        + "index does not describe the file)",
                        keepPieces: false, reason: .piecesWrong)
        }
        return outcome
    }

    /// Reads up to `count` local bytes at `at` into the piece; 0 when the file shrank or cannot be
    /// read, and the piece is then fetched whole instead.
    func readLocal(_ at: DeltaPlan.Location, count: Int) -> Int {
        while true {
            let got = pread(at.file < sources.count ? sources[at.file] : partialFD, gathered.end, count,
                            off_t(at.offset))
            if got < 0 && errno == EINTR { continue }
            if got <= 0 {
                refetchPiece()
                return 0
            }
            return got
        }
    }

    func close(_ d: Download) {
        if storedAsPieces { source?.close() }
        source = nil
        for fd in sources { Glibc.close(fd) }
        memory = nil
        d.origin.stepped?.close()
    }
}

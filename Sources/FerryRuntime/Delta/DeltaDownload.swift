import CCurl
import Glibc
import FerryCore

/// A download that assembles a new version of a large file from bytes the mirror already holds
/// and ranges of the remote (`DeltaPlan`), piece by piece: a piece's bytes gather in memory (a
/// piece is at most 3 MiB), and only once they match the piece's SHA-256 from the signed index do
/// they go to the partial file, in order, where `Download` hashes them for the whole-file check
/// and checkpoints them. So the partial only ever holds verified pieces, and a relaunch resumes
/// at the last checkpoint (a piece boundary), whatever the remote's validators.
///
/// Local runs are copied in the engine's steps; each run of fetched bytes is one request for
/// exactly that range (a 206 whose Content-Range is that range of a file of the manifest's size),
/// or reads at those offsets where the engine's steps read the remote themselves (`file://`,
/// SFTP). A piece made with local bytes that does not verify is fetched whole; a fetched piece that
/// fails twice, or a server that will not answer a range as asked, stops the delta
/// (`deltaStopped`): the file is then fetched whole as any other.
///
/// A file stored as its pieces (`ContentIndex.Reference.storedAsPieces`) has no whole to fetch:
/// each piece is an object of its own (`pieces` gives where), its fetched bytes are ranges of that
/// object, and what would stop a delta fails the attempt instead (the verified pieces are kept).
final class DeltaDownload: Download {
    private(set) var plan: DeltaPlan
    /// The local files the plan takes bytes from, by `DeltaPlan.Location.file`.
    private let sources: [Int32]
    /// Where the assembly is: the piece, the segment in it, the bytes of that segment done.
    private var piece = 0
    private var segment = 0
    private var segmentDone = 0
    /// The piece's bytes gathered so far (given back at `close`).
    private var memory: PieceMemory? = PieceMemory()
    private var buffer: UnsafeMutableRawPointer { memory!.bytes }
    private var filled = 0
    private let pieceHasher = SHA256Hasher()
    /// Tries of each fetched piece whose bytes did not match.
    private var mismatches: [Int: Int] = [:]
    /// The piece gathered from what an earlier attempt left (`restore`), and the fetched bytes
    /// taken from there (counted as reused: local data, not fetched by this attempt).
    private var restoredPiece: Int?
    private var restoredBytes: Int64 = 0
    private var reusedBytes: Int64 = 0
    private var receivedAtCheckpoint: Int64 = 0
    static let fetchedCheckpoint: Int64 = 32 << 10
    override var reused: Int64 { reusedBytes }
    /// Why the delta stopped (the file is fetched whole next), when it did.
    private(set) var deltaStopped: String?

    /// The range being fetched by the current request: its first and last byte, what arrived.
    private var run: (first: Int64, last: Int64)?
    private var runReceived: Int64 = 0
    /// Several ranges in one request (`multipart/byteranges`), where the remote may be asked for
    /// them; false once the server answers such a request otherwise.
    private var multipleRanges = false
    /// The ranges of the current request when it asks several, and its answer's reader.
    private var runs: [(first: Int64, last: Int64)] = []
    private var parts: MultipartRanges?
    static let rangesPerRequest = 64
    private var checkedAnswer = false
    /// The request ended early on purpose (a piece to fetch again): its next one starts there.
    private var restartRun = false
    private var request: HTTPRequest?
    private var more = false
    /// The source the engine's steps read (the file's, or the current piece's), and whether it
    /// was opened; for a file stored as its pieces, the piece it reads.
    private var source: SteppedSource?
    private var sourcePiece = -1
    private var sourceOpened = false
    /// Where each piece is, for a file stored as its pieces (nil: the file is one object).
    private let pieces: ((SHA256Digest) -> Origin)?
    /// How often a piece's fetched bytes may fail its hash before the delta stops: twice from the
    /// remote (the second fetch rules out damage on the way), once from a mirror, whose wrong
    /// bytes send the file to the next source at once.
    private let mismatchesAllowed: Int
    /// A server that answered a range of a piece with the whole of it: pieces are asked whole.
    private var wholePieces = false

    static let maximumPiece = ContentIndex.pieceMaximumChunks * ContentChunker.maximum

    /// `resumeFrom`: bytes of the partial kept from an earlier attempt (its last checkpoint); the
    /// assembly goes on from the start of the piece that holds that offset. Pieces the partial
    /// holds whole after it (appended before a kill, not yet checkpointed) are kept if they match
    /// their SHA-256, and the fetched bytes of the piece after them, which go to the partial as
    /// they come (`keepFetched`), are taken again: a kill costs about what was in flight.
    init(task: TransferTask, entry: ManifestEntry, reason: Plan.Reason, origin: Origin, partial: PartialFile, resumeFrom: Int64,
         plan: DeltaPlan, sources: [Int32], pieces: ((SHA256Digest) -> Origin)? = nil, fromMirror: Bool = false, clock: any Clock) throws(FerryError) {
        self.plan = plan
        mismatchesAllowed = fromMirror ? 1 : 2
        self.sources = sources
        self.pieces = pieces
        let index = DeltaDownload.verifiedPieces(plan, from: plan.piece(at: min(resumeFrom, partial.length)), partial: partial)
        let start = index < plan.pieces.count ? plan.pieces[index].offset : plan.size
        // The bytes after them, up to less than a piece (a whole one did not match).
        let tail = index < plan.pieces.count ? DeltaDownload.read(partial.fd, at: start, count: min(partial.length - start, Int64(plan.pieces[index].length - 1)))
                                             : []
        piece = index
        if case let .request(read) = origin { multipleRanges = read.multipleRanges }
        source = pieces == nil ? origin.stepped : nil
        // Any validator keeps the offset: what the partial holds was verified piece by piece.
        try super.init(task: task, entry: entry, reason: reason, origin: origin, partial: partial, resumeFrom: start,
                       validator: "delta", clock: clock)
        validator = nil
        // A partial that already holds the whole file (a kill after its last piece) is verified
        // as it is: the assembly starts where the partial ends.
        piece = plan.piece(at: written)
        if piece == index && written == start && !tail.isEmpty { restore(tail) }
    }

    /// From piece `first`: the first piece the partial does not hold whole and as its hash says.
    private static func verifiedPieces(_ plan: DeltaPlan, from first: Int, partial: PartialFile) -> Int {
        var i = first
        let hasher = SHA256Hasher()
        while i < plan.pieces.count {
            let p = plan.pieces[i]
            guard p.offset + Int64(p.length) <= partial.length else { break }
            let bytes = read(partial.fd, at: p.offset, count: Int64(p.length))
            guard bytes.count == p.length else { break }
            bytes.withUnsafeBytes { hasher.update($0.baseAddress!, count: $0.count) }
            guard hasher.finalize() == p.sha256 else { break }
            i += 1
        }
        return i
    }

    /// Up to `count` bytes of `fd` at `offset` (fewer where it ends or cannot be read).
    private static func read(_ fd: Int32, at offset: Int64, count: Int64) -> [UInt8] {
        guard count > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: Int(count))
        var got = 0
        out.withUnsafeMutableBytes { raw in
            while got < raw.count {
                let n = pread(fd, raw.baseAddress! + got, raw.count - got, off_t(offset) + off_t(got))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                got += n
            }
        }
        return Array(out.prefix(got))
    }

    /// The piece being gathered when an attempt ended: its fetched bytes from what the partial
    /// holds after the verified pieces (`tail`), its local bytes read again, as far as the tail
    /// goes. The piece's hash judges them as any: one that does not match is fetched whole.
    private func restore(_ tail: [UInt8]) {
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
                        let got = readLocal(DeltaPlan.Location(file: from.file, offset: from.offset + Int64(done)), count: n - done)
                        // Fetched whole now (the source could not be read).
                        if got == 0 { return }
                        _ = advance(got)
                        done += got
                    }
                } else {
                    // Written back: opening the attempt cut the partial at the verified pieces,
                    // and a kill before this piece ends must find these bytes there again.
                    keepFetched(raw.baseAddress! + at, count: n)
                    (buffer + filled).copyMemory(from: raw.baseAddress! + at, byteCount: n)
                    _ = advance(n)
                    restoredBytes += Int64(n)
                }
                at += n
            }
        }
    }

    /// Fetched bytes go to the partial where they belong as they come (beyond the verified
    /// pieces, which `append` writes again once their piece matched), so that an attempt that ends
    /// mid-piece, a kill among them, does not have to fetch them again (`restore`). Best effort.
    private func keepFetched(_ bytes: UnsafeRawPointer, count: Int) {
        var done = 0
        while done < count {
            let n = pwrite(fd, bytes + done, count - done, off_t(written + Int64(filled + done)))
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            done += n
        }
    }

    /// The memory a piece gathers in (a piece is at most 256 chunks of 12 KiB).
    private final class PieceMemory {
        let bytes = UnsafeMutableRawPointer.allocate(byteCount: DeltaDownload.maximumPiece, alignment: 16)
        deinit { bytes.deallocate() }
    }

    // MARK: where the assembly is

    /// Where the remote's bytes of the current piece are: offsets in the file (0), or in the
    /// piece's own object; and how long what they are read from is.
    private var base: Int64 { pieces == nil ? 0 : plan.pieces[piece].offset }
    private var remoteSize: Int64 { pieces == nil ? entry.size ?? 0 : Int64(plan.pieces[piece].length) }
    /// Where the current bytes come from on the remote: the file, or the current piece's object.
    private var remoteOrigin: Origin { pieces.map { $0(plan.pieces[piece].sha256) } ?? origin }

    private enum Work {
        case local(DeltaPlan.Location, Int)
        case remote(Int64, Int)
        case done
    }

    /// The next bytes to take: from a local file, from the remote (at that offset, that many
    /// bytes, up to the end of the current segment), or nothing more.
    private var work: Work {
        guard piece < plan.pieces.count else { return .done }
        let p = plan.pieces[piece]
        let s = p.segments[segment]
        let left = s.length - segmentDone
        if let from = s.from { return .local(DeltaPlan.Location(file: from.file, offset: from.offset + Int64(segmentDone)), left) }
        return .remote(written + Int64(filled), left)
    }

    /// The fetched ranges from where the assembly is (which is at fetched bytes), each up to the
    /// next local bytes: at most `limit` of them.
    private func remoteRuns(limit: Int) -> [(first: Int64, last: Int64)] {
        var out: [(first: Int64, last: Int64)] = []
        var at = written + Int64(filled)
        var current: Int64?
        var (i, j, done) = (piece, segment, segmentDone)
        // A piece's object holds that piece only.
        while i < plan.pieces.count && (pieces == nil || i == piece) {
            let s = plan.pieces[i].segments[j]
            let length = Int64(s.length - done)
            if s.from == nil {
                if current == nil {
                    guard out.count < limit else { break }
                    current = at
                }
            } else if let start = current {
                out.append((start, at - 1))
                current = nil
                if out.count == limit { break }
            }
            at += length
            done = 0
            j += 1
            if j == plan.pieces[i].segments.count { i += 1; j = 0 }
        }
        if let start = current { out.append((start, at - 1)) }
        return out
    }

    /// Takes `count` bytes of the current segment into the piece; ends the piece when full.
    /// A failure outcome when the delta cannot go on.
    private func take(_ bytes: UnsafeRawPointer, count: Int) -> TransferOutcome? {
        keepFetched(bytes, count: count)
        (buffer + filled).copyMemory(from: bytes, byteCount: count)
        return advance(count)
    }

    private func advance(_ count: Int) -> TransferOutcome? {
        filled += count
        segmentDone += count
        let p = plan.pieces[piece]
        guard segmentDone == p.segments[segment].length else { return nil }
        segment += 1
        segmentDone = 0
        guard segment == p.segments.count else { return nil }
        return endPiece()
    }

    /// The current piece is fetched whole from its start (its local bytes could not be read, or
    /// did not verify): what was gathered of it goes.
    private func refetchPiece() {
        plan.fetchWhole(piece)
        filled = 0
        segment = 0
        segmentDone = 0
    }

    /// The piece is whole: written to the partial if it matches its hash; otherwise fetched
    /// whole (local bytes), or once more (fetched bytes), or the delta stops.
    private func endPiece() -> TransferOutcome? {
        let p = plan.pieces[piece]
        pieceHasher.update(buffer, count: filled)
        let matches = pieceHasher.finalize() == p.sha256
        segment = 0
        segmentDone = 0
        if matches {
            let local = p.segments.reduce(0) { $0 + ($1.from == nil ? 0 : Int64($1.length)) }
            let count = filled
            filled = 0
            guard append(buffer, count: count) else { return recordedFailure(or: "cannot write the partial file") }
            reusedBytes += local
            if restoredPiece == piece {
                reusedBytes += restoredBytes
                restoredPiece = nil
            }
            piece += 1
            // Fetched bytes are what a kill would cost again: checkpointed every 32 KiB of them
            // (at a piece's end, where the partial can end), besides every 2 MiB written.
            if received - receivedAtCheckpoint >= DeltaDownload.fetchedCheckpoint {
                receivedAtCheckpoint = received
                takeCheckpoint()
                if failure != nil { return recordedFailure(or: "") }
            }
            return nil
        }
        filled = 0
        restartRun = true
        // Local bytes, or bytes an earlier attempt left, that do not verify: fetched whole.
        if p.reusesLocalBytes || restoredPiece == piece {
            restoredPiece = nil
            refetchPiece()
            return nil
        }
        mismatches[piece, default: 0] += 1
        if mismatches[piece]! < mismatchesAllowed { return nil }
        if pieces != nil {
            return stop("the remote's object of the piece of \(Units.formatBytes(Int64(p.length))) at offset \(p.offset) (\(p.sha256.hex.prefix(16))…) does not hold the bytes its name says; the publisher's next push checks its objects and sends it again",
                        cause: .contentMismatch(afterResume: false))
        }
        return stop("the bytes the remote sent for \(Units.formatBytes(Int64(p.length))) at offset \(p.offset) did not match the file's index twice",
                    cause: .contentMismatch(afterResume: false))
    }

    /// Stops the delta: the file is fetched whole next (its verified pieces are not kept, as a
    /// whole download starts from zero without a validator).
    private func stop(_ why: String, keepPieces: Bool = true, cause: FailureCause = .rangeNotHonoured) -> TransferOutcome {
        guard pieces == nil else {
            // Stored as pieces: the attempt fails, what was verified kept; tried again unless the
            // piece's object itself is wrong (a later run tries again, as for a whole file).
            return .failed(TransferFailure(message: why, keepPartial: keepPieces, cause: cause))
        }
        deltaStopped = why
        return .failed(TransferFailure(message: why + "; fetching the whole file", keepPartial: false, cause: .rangeNotHonoured))
    }

    // MARK: Transfer

    override var mode: TransferMode {
        if origin.stepped != nil { return .steps }
        if case .remote = work { return .curl }
        return .steps
    }

    override var continues: Bool { more }

    override func outcomeWithoutRequest() -> TransferOutcome? {
        more = false
        restartRun = false
        switch work {
        case .done: return verify()
        case .local: return nil
        case .remote:
            guard case let .request(read) = remoteOrigin else { return nil }
            // A server that will not serve part of a piece is asked for whole pieces.
            if pieces != nil && wholePieces && plan.pieces[piece].segments.count > 1 { refetchPiece() }
            run = remoteRuns(limit: 1).first
            runReceived = 0
            checkedAnswer = false
            runs = multipleRanges ? remoteRuns(limit: DeltaDownload.rangesPerRequest) : []
            if runs.count < 2 { runs = [] }
            parts = nil
            do { request = try read.build(0, nil) } catch {
                return .failed(TransferFailure(message: error.message, keepPartial: true, cause: error.cause ?? .unusable))
            }
            requests += 1
            return nil
        }
    }

    override func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        guard let request, let run else { return }
        headers = ResponseHeaders()
        easy.configure(url: request.url, settings: request.settings, extraHeaders: request.headers)
        if runs.isEmpty {
            // A whole piece's object is asked for without a range.
            if !asksWholeObject { easy.set(CURLOPT_RANGE, "\(run.first - base)-\(run.last - base)") }
        } else {
            easy.set(CURLOPT_RANGE, runs.map { "\($0.first - base)-\($0.last - base)" }.joined(separator: ","))
        }
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, downloadWriteCallback)
        easy.set(CURLOPT_WRITEDATA, pointer: context)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, downloadHeaderCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: context)
    }

    /// The current request is for the whole of a piece's object (no range asked).
    private var asksWholeObject: Bool {
        guard pieces != nil, runs.isEmpty, let run else { return false }
        return run.first == base && run.last - base == remoteSize - 1
    }

    /// The answer to a range must be exactly that range of a file of the manifest's size (of the
    /// piece's size, for a piece's object); a whole piece's, a 200.
    private var answerProblem: String? {
        guard let run else { return "no range was asked" }
        if asksWholeObject && headers.status == 200 { return nil }
        if headers.status != 206 {
            return headers.status == 200 ? "the server answered a range request with the whole file (HTTP 200)" : "the server answered a range request with HTTP \(headers.status)"
        }
        guard let text = headers.contentRange, let got = ResponsePolicy.parseContentRange(text),
              got.first == run.first - base, got.last == run.last - base, got.total == remoteSize else {
            return "the server answered bytes \(run.first - base)-\(run.last - base) with Content-Range \(Printable.quoted(headers.contentRange ?? "(none)"))"
        }
        return nil
    }

    private var outcomeOfReceive: TransferOutcome?

    /// What the answer's status and Content-Range mean, before its body is taken: nil to take
    /// it; an error status fails the attempt as any download's would (retried by the same rules);
    /// any other answer than the range asked stops the delta.
    private func judgeAnswer() -> TransferOutcome? {
        checkedAnswer = true
        guard let problem = answerProblem else { return nil }
        if pieces != nil && headers.status == 200 && !wholePieces {
            // Part of a piece answered with all of it: pieces are asked whole from now on.
            wholePieces = true
            restartRun = true
            return nil
        }
        guard headers.status >= 400 && headers.status != 416 else { return stop(problem) }
        var message = "HTTP \(headers.status) \(headers.reason)".trimmingSpaces() + " to a range request"
        if case let .request(read) = origin, let why = read.explain?(headers.status, []) { message += ": " + why }
        let after = (headers.status == 429 || headers.status == 503) ? headers.retryAfter.flatMap(ResponseHeaders.parseRetryAfter) : nil
        return .failed(TransferFailure(message: message, keepPartial: true, cause: .http(status: headers.status), retryAfter: after))
    }

    override func receive(_ bytes: UnsafeRawPointer, count: Int) -> Int {
        if !runs.isEmpty { return receiveParts(bytes, count: count) }
        if !checkedAnswer, let outcome = judgeAnswer() {
            outcomeOfReceive = outcome
            return 0
        }
        if restartRun { return 0 }
        guard outcomeOfReceive == nil, let run else { return 0 }
        guard runReceived + Int64(count) <= run.last - run.first + 1 else {
            outcomeOfReceive = stop("the server sent more than the \(run.last - run.first + 1) bytes asked for")
            return 0
        }
        runReceived += Int64(count)
        received += Int64(count)
        var taken = 0
        while taken < count {
            guard case let .remote(_, left) = work else {
                outcomeOfReceive = stop("the server sent bytes past the range asked for")
                return 0
            }
            let n = min(left, count - taken)
            if let outcome = take(bytes + taken, count: n) {
                outcomeOfReceive = outcome
                return 0
            }
            // A piece to fetch again: this request ends, the next starts at the piece.
            if restartRun { return 0 }
            taken += n
        }
        return count
    }

    override func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
        if let outcome = outcomeOfReceive {
            outcomeOfReceive = nil
            return outcome
        }
        if restartRun {
            more = true
            return .succeeded
        }
        guard code == CURLE_OK else { return transportFailure(code, errorText: errorText) }
        // An answer without a body is judged here.
        if !checkedAnswer, let outcome = runs.isEmpty ? judgeAnswer() : judgeParts() { return outcome }
        if restartRun {
            more = true
            return .succeeded
        }
        if runs.isEmpty, let run, runReceived < run.last - run.first + 1 {
            // The answer ended cleanly short of the range its Content-Range announced.
            return stop("the server sent \(runReceived) of the \(run.last - run.first + 1) bytes of a range it announced whole")
        }
        if !runs.isEmpty, parts?.finished != true { return stop("the server's answer to \(runs.count) ranges ended before all of them came") }
        more = true
        return .succeeded
    }

    /// The answer to a request for several ranges: a 206 `multipart/byteranges` is read part by
    /// part; a single range or the whole file says the server does not serve several at once
    /// (it is asked for one range at a time from now on); an error status fails the attempt.
    private func judgeParts() -> TransferOutcome? {
        checkedAnswer = true
        if headers.status >= 400 && headers.status != 416 { return judgeAnswer() }
        guard headers.status == 206, let type = headers.contentType, let boundary = MultipartRanges.boundary(ofContentType: type) else {
            multipleRanges = false
            restartRun = true
            return nil
        }
        parts = MultipartRanges(boundary: boundary, ranges: runs.map { ($0.first - base, $0.last - base) }, total: remoteSize)
        return nil
    }

    /// Takes a multipart answer's bytes: the local bytes before each part are copied as its first
    /// bytes arrive, then the part's bytes are taken as a single range's are.
    private func receiveParts(_ bytes: UnsafeRawPointer, count: Int) -> Int {
        if parts == nil {
            if let outcome = judgeParts() {
                outcomeOfReceive = outcome
                return 0
            }
            if restartRun { return 0 }
        }
        guard outcomeOfReceive == nil, var reader = parts else { return 0 }
        received += Int64(count)
        var outcome: TransferOutcome?
        let taken: Bool
        do throws(MultipartRanges.Problem) {
            taken = try reader.feed(UnsafeRawBufferPointer(start: bytes, count: count)) { index, data in
                let start = runs[index].first
                var offset = 0
                // Before a part's first byte: the local bytes up to it.
                if written + Int64(filled) < start {
                    if let failed = copyLocal(upTo: start) { outcome = failed; return false }
                    if restartRun { return false }
                }
                while offset < data.count {
                    guard case let .remote(_, left) = work, written + Int64(filled) >= start else {
                        outcome = stop("the server sent bytes the plan does not fetch")
                        return false
                    }
                    let n = min(left, data.count - offset)
                    if let failed = take(data.baseAddress! + offset, count: n) { outcome = failed; return false }
                    if restartRun { return false }
                    offset += n
                }
                return true
            }
        } catch {
            outcomeOfReceive = stop("the server's answer to \(runs.count) ranges is refused: \(error.text)")
            return 0
        }
        parts = reader
        if let outcome {
            outcomeOfReceive = outcome
            return 0
        }
        return taken ? count : 0
    }

    /// Copies the local bytes from where the assembly is up to `end` (all of them local: a piece
    /// to fetch whole now, or a local file that cannot be read, ends the request to start again).
    private func copyLocal(upTo end: Int64) -> TransferOutcome? {
        while written + Int64(filled) < end {
            guard case let .local(at, left) = work else {
                restartRun = true
                return nil
            }
            let got = readLocal(at, count: Int(min(Int64(min(left, Download.stepSize)), end - (written + Int64(filled)))))
            if got == 0 {
                restartRun = true
                return nil
            }
            if let outcome = advance(got) { return outcome }
            if restartRun { return nil }
        }
        return nil
    }

    /// Reads up to `count` local bytes at `at` into the piece; 0 when the file shrank or cannot be
    /// read, and the piece is then fetched whole instead.
    private func readLocal(_ at: DeltaPlan.Location, count: Int) -> Int {
        while true {
            let got = pread(sources[at.file], buffer + filled, count, off_t(at.offset))
            if got < 0 && errno == EINTR { continue }
            if got <= 0 {
                refetchPiece()
                return 0
            }
            return got
        }
    }

    /// Copies local bytes, or reads the remote where the engine's steps read it, a MiB at most;
    /// hands over to a request when fetched bytes come next.
    override func step() -> TransferOutcome? {
        var budget = Download.stepSize
        while budget > 0 {
            switch work {
            case .done:
                return verify()
            case let .local(at, left):
                let got = readLocal(at, count: min(left, budget))
                if got == 0 { continue }
                budget -= got
                if let outcome = advance(got) { return outcome }
            case let .remote(offset, left):
                guard origin.stepped != nil else {
                    more = true
                    return .succeeded
                }
                // A file stored as its pieces reads each piece's object in turn.
                if pieces != nil && sourcePiece != piece {
                    source?.close()
                    source = remoteOrigin.stepped
                    sourcePiece = piece
                    sourceOpened = false
                }
                guard let source else { return stop("the remote cannot read this piece's object at offsets") }
                if !sourceOpened {
                    switch source.open() {
                    case .wait: return nil
                    case let .failed(failure): return .failed(failure)
                    case let .ready(_, size):
                        if let size, size != remoteSize {
                            return stop(pieces == nil ? "the remote's file is \(size) bytes, the manifest says \(entry.size ?? 0)"
                                                      : "the remote's object of the piece at offset \(base) is \(size) bytes, the index says \(remoteSize)")
                        }
                        sourceOpened = true
                        requests += 1
                    }
                }
                if let throttle, !throttle.open { return nil }
                if let run = remoteRuns(limit: 1).first { source.limitReadAhead(to: run.last + 1 - base) }
                switch source.read(into: buffer + filled, count: min(left, budget), at: offset - base) {
                case .wait: return nil
                case .end: return stop("the remote's file ended at \(offset - base) bytes")
                case let .failed(failure): return .failed(failure)
                case let .bytes(n):
                    throttle?.take(n)
                    keepFetched(buffer + filled, count: n)
                    received += Int64(n)
                    budget -= n
                    if let outcome = advance(n) { return outcome }
                    restartRun = false
                }
            }
        }
        return nil
    }

    override var waitingOn: (fd: Int32, events: Int16)? { source?.waitingOn }

    override func close() {
        if pieces != nil { source?.close() }
        source = nil
        for fd in sources { Glibc.close(fd) }
        memory = nil
        super.close()
    }

    /// The whole file checked as any download's is; one whose every piece matched its index but
    /// not its SHA-256 has an index that does not describe it: the delta stops.
    override func verify() -> TransferOutcome {
        let outcome = super.verify()
        if case let .failed(failure) = outcome, case .contentMismatch = failure.cause {
            return stop("the file assembled from pieces that each matched the index does not match its SHA-256 (the index does not describe the file)",
                        keepPieces: false)
        }
        return outcome
    }
}

import CCurl
import Glibc
import FerryCore

/// How a delta asks the remote for the bytes it fetches: a request per run of fetched bytes (or
/// several runs at once, `DeltaAssembly+Multipart.swift`), whose answer must be exactly what was
/// asked; or the engine's steps, which copy local bytes and read a remote that reads itself.
extension DeltaAssembly {
    func mode(of d: Download) -> TransferMode {
        if d.origin.stepped != nil { return .steps }
        if case .remote = work(d) { return .curl }
        return .steps
    }

    func waitingOn(of d: Download) -> (fd: Int32, events: Int16)? { source?.waitingOn }

    /// The fetched ranges from where the assembly is (which is at fetched bytes), each up to the
    /// next local bytes: at most `limit` of them.
    func remoteRuns(_ d: Download, limit: Int) -> [(first: Int64, last: Int64)] {
        var out: [(first: Int64, last: Int64)] = []
        var at = at(d)
        var current: Int64?
        var (i, j, done) = (piece, segment, segmentDone)
        // A piece's object holds that piece only.
        while i < plan.pieces.count && (!storedAsPieces || i == piece) {
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

    func begin(_ d: Download) -> TransferOutcome? {
        more = false
        restartRun = false
        switch work(d) {
        case .done: return verify(d)
        case .local: return nil
        case .remote:
            guard case let .request(read) = remoteOrigin(d) else { return nil }
            // A server that will not serve part of a piece is asked for whole pieces.
            if storedAsPieces && wholePieces && plan.pieces[piece].segments.count > 1 { refetchPiece() }
            run = remoteRuns(d, limit: 1).first
            // Frames are fetched whole: a run that is not whole chunks (none is planned so) takes the piece.
            if compressed, let r = run, remoteRange(r) == nil {
                refetchPiece()
                run = remoteRuns(d, limit: 1).first
            }
            asked = run.flatMap(remoteRange)
            runReceived = 0
            packed.removeAll(keepingCapacity: true)
            checkedAnswer = false
            runs = multipleRanges && !compressed ? remoteRuns(d, limit: DeltaAssembly.rangesPerRequest) : []
            if runs.count < 2 { runs = [] }
            parts = nil
            do { request = try read.build(0, nil) } catch {
                return .failed(TransferFailure(message: error.message, keepPartial: true,
                                               cause: error.cause ?? .unusable))
            }
            d.requests += 1
            return nil
        }
    }

    func prepare(_ d: Download, _ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        guard let request, run != nil, let asked else { return }
        d.headers = ResponseHeaders()
        easy.configure(url: request.url, settings: request.settings, extraHeaders: request.headers)
        if runs.isEmpty {
            // A whole piece's object is asked for without a range.
            if !asksWholeObject(d) { easy.set(CURLOPT_RANGE, "\(asked.first)-\(asked.last)") }
        } else {
            easy.set(CURLOPT_RANGE, runs.map { "\($0.first - base)-\($0.last - base)" }.joined(separator: ","))
        }
        d.takeAnswer(easy, context: context)
    }

    /// The current request is for the whole of a piece's object (no range asked).
    func asksWholeObject(_ d: Download) -> Bool {
        guard storedAsPieces, runs.isEmpty, run != nil, let asked else { return false }
        return asked.first == 0 && asked.last == remoteSize(d) - 1
    }

    /// The answer to a range must be exactly that range of a file of the manifest's size (of the
    /// piece's size, for a piece's object); a whole piece's, a 200.
    private func answerProblem(_ d: Download) -> String? {
        guard run != nil, let asked else { return "no range was asked" }
        let status = d.headers.status
        if asksWholeObject(d) && status == 200 { return nil }
        if status != 206 {
            return status == 200 ? "the server answered a range request with the whole file (HTTP 200)"
                                 : "the server answered a range request with HTTP \(status)"
        }
        guard let text = d.headers.contentRange, let got = ResponsePolicy.parseContentRange(text),
              got.first == asked.first, got.last == asked.last, got.total == remoteSize(d) else {
            return "the server answered bytes \(asked.first)-\(asked.last) with Content-Range "
                   + "\(Printable.quoted(d.headers.contentRange ?? "(none)"))"
        }
        return nil
    }

    /// What the answer's status and Content-Range mean, before its body is taken: nil to take
    /// it; an error status fails the attempt as any download's would (retried by the same rules);
    /// any other answer than the range asked stops the delta.
    func judgeAnswer(_ d: Download) -> TransferOutcome? {
        checkedAnswer = true
        guard let problem = answerProblem(d) else { return nil }
        let status = d.headers.status
        if storedAsPieces && status == 200 && !wholePieces {
            // Part of a piece answered with all of it: pieces are asked whole from now on.
            wholePieces = true
            restartRun = true
            return nil
        }
        guard status >= 400 && status != 416 else { return stop(problem) }
        var message = "HTTP \(status) \(d.headers.reason)".trimmingSpaces() + " to a range request"
        if case let .request(read) = d.origin, let why = read.explain?(status, []) { message += ": " + why }
        let after = status == 429 || status == 503 ? d.headers.retryAfter.flatMap(ResponseHeaders.parseRetryAfter)
                                                   : nil
        return .failed(TransferFailure(message: message, keepPartial: true, cause: .http(status: status),
                                       retryAfter: after))
    }

    func receive(_ d: Download, _ bytes: UnsafeRawPointer, count: Int) -> Int {
        if !runs.isEmpty { return receiveParts(d, bytes, count: count) }
        if !checkedAnswer, let outcome = judgeAnswer(d) {
            outcomeOfReceive = outcome
            return 0
        }
        if restartRun { return 0 }
        guard outcomeOfReceive == nil, let run, let asked else { return 0 }
        guard runReceived + Int64(count) <= asked.last - asked.first + 1 else {
            outcomeOfReceive = stop("the server sent more than the \(asked.last - asked.first + 1) bytes asked for")
            return 0
        }
        runReceived += Int64(count)
        d.received += Int64(count)
        guard compressed else { return takeFetched(d, bytes, count: count) ? count : 0 }
        // Frames: taken once the run's have all come, decompressed.
        packed.append(contentsOf: UnsafeRawBufferPointer(start: bytes, count: count))
        guard runReceived == asked.last - asked.first + 1 else { return count }
        guard let plain = unpacked(run) else {
            outcomeOfReceive = fetchedBytesWrong()
            return 0
        }
        return plain.withUnsafeBytes { takeFetched(d, $0.baseAddress!, count: $0.count) } ? count : 0
    }

    /// Takes fetched bytes of the current run into the pieces they belong to: false when the
    /// request is to end (an outcome, or a piece to fetch again).
    private func takeFetched(_ d: Download, _ bytes: UnsafeRawPointer, count: Int) -> Bool {
        var taken = 0
        while taken < count {
            guard case let .remote(_, left) = work(d) else {
                outcomeOfReceive = stop("the server sent bytes past the range asked for")
                return false
            }
            let n = min(left, count - taken)
            if let outcome = take(d, bytes + taken, count: n) {
                outcomeOfReceive = outcome
                return false
            }
            // A piece to fetch again: this request ends, the next starts at the piece.
            if restartRun { return false }
            taken += n
        }
        return true
    }

    func finish(_ d: Download, code: CURLcode, errorText: String?) -> TransferOutcome {
        if let outcome = outcomeOfReceive {
            outcomeOfReceive = nil
            return outcome
        }
        if restartRun { return goOn() }
        guard code == CURLE_OK else { return d.transportFailure(code, errorText: errorText) }
        // An answer without a body is judged here.
        if !checkedAnswer, let outcome = runs.isEmpty ? judgeAnswer(d) : judgeParts(d) { return outcome }
        if restartRun { return goOn() }
        if runs.isEmpty, run != nil, let asked, runReceived < asked.last - asked.first + 1 {
            // The answer ended cleanly short of the range its Content-Range announced.
            return stop("the server sent \(runReceived) of the \(asked.last - asked.first + 1) bytes of a range it "
                        + "announced whole")
        }
        if !runs.isEmpty, parts?.finished != true {
            return stop("the server's answer to \(runs.count) ranges ended before all of them came")
        }
        return goOn()
    }

    /// This request is done and the download goes on with its next one.
    private func goOn() -> TransferOutcome {
        more = true
        return .succeeded
    }

    /// Copies local bytes, or reads the remote where the engine's steps read it, a MiB at most;
    /// hands over to a request when fetched bytes come next.
    func step(_ d: Download) -> TransferOutcome? {
        var budget = Download.stepSize
        while budget > 0 {
            switch work(d) {
            case .done:
                return verify(d)
            case let .local(at, left):
                let got = readLocal(at, count: min(left, budget))
                if got == 0 { continue }
                budget -= got
                if let outcome = advance(d, got) { return outcome }
            case let .remote(offset, left):
                guard d.origin.stepped != nil else { return goOn() }
                switch readRemote(d, at: offset, count: min(left, budget)) {
                case let .bytes(n):
                    budget -= n
                    if let outcome = advance(d, n) { return outcome }
                    restartRun = false
                case let .ended(outcome): return outcome
                }
            }
        }
        return nil
    }

    enum RemoteRead {
        case bytes(Int)
        /// nil: wait for the source.
        case ended(TransferOutcome?)
    }

    /// Reads fetched bytes where the engine's steps read the remote (a file stored as its pieces
    /// reads each piece's object in turn), into the piece.
    private func readRemote(_ d: Download, at offset: Int64, count: Int) -> RemoteRead {
        if storedAsPieces && sourcePiece != piece {
            source?.close()
            source = remoteOrigin(d).stepped
            sourcePiece = piece
            sourceOpened = false
        }
        guard let source else { return .ended(stop("the remote cannot read this piece's object at offsets")) }
        if !sourceOpened {
            switch source.open() {
            case .wait: return .ended(nil)
            case let .failed(failure): return .ended(.failed(failure))
            case let .ready(_, size):
                if let size, size != remoteSize(d) {
                    return .ended(stop(storedAsPieces ? "the remote's object of the piece at offset \(base) is \(size) "
                                                        + "bytes, the index says \(remoteSize(d))"
                                                      : "the remote's file is \(size) bytes, the manifest says "
                                                        + "\(d.entry.size ?? 0)"))
                }
                sourceOpened = true
                d.requests += 1
            }
        }
        if let throttle = d.throttle, !throttle.open { return .ended(nil) }
        if compressed { return readFrames(d, from: source) }
        if let run = remoteRuns(d, limit: 1).first { source.limitReadAhead(to: run.last + 1 - base) }
        switch source.read(into: gathered.end, count: count, at: offset - base) {
        case .wait: return .ended(nil)
        case .end: return .ended(stop("the remote's file ended at \(offset - base) bytes"))
        case let .failed(failure): return .ended(.failed(failure))
        case let .bytes(n):
            d.throttle?.take(n)
            keepFetched(d, gathered.end, count: n)
            d.received += Int64(n)
            return .bytes(n)
        }
    }

    /// Reads the frames of the current run of a piece stored compressed where the engine's steps
    /// read the remote; once all have come, their bytes go to the piece (`.bytes(0)`: the piece
    /// starts again, its frames were not its bytes).
    private func readFrames(_ d: Download, from source: SteppedSource) -> RemoteRead {
        guard let run = remoteRuns(d, limit: 1).first, let asked = remoteRange(run) else {
            refetchPiece()
            return .bytes(0)
        }
        let want = Int(asked.last - asked.first + 1)
        source.limitReadAhead(to: asked.last + 1)
        while packed.count < want {
            var buffer = [UInt8](repeating: 0, count: want - packed.count)
            let read = buffer.withUnsafeMutableBytes {
                source.read(into: $0.baseAddress!, count: $0.count, at: asked.first + Int64(packed.count))
            }
            switch read {
            case .wait: return .ended(nil)
            case .end: return .ended(stop("the remote's object of the piece at offset \(base) ended at "
                                          + "\(asked.first + Int64(packed.count)) bytes"))
            case let .failed(failure): return .ended(.failed(failure))
            case let .bytes(n):
                d.throttle?.take(n)
                d.received += Int64(n)
                packed += buffer[0..<n]
            }
        }
        guard let plain = unpacked(run) else {
            if let outcome = fetchedBytesWrong() { return .ended(outcome) }
            return .bytes(0)
        }
        _ = plain.withUnsafeBytes { memcpy(gathered.end, $0.baseAddress!, $0.count) }
        keepFetched(d, gathered.end, count: plain.count)
        return .bytes(plain.count)
    }
}

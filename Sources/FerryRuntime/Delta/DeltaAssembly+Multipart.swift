import FerryCore

/// A delta's request for several ranges at once (plain HTTP(S) and WebDAV): the answer must be a
/// 206 `multipart/byteranges` whose parts are exactly those ranges, in order (`MultipartRanges`
/// reads it); the local bytes between two parts are copied as the second arrives. A server that
/// answers with one range or the whole file does not serve several at once: it is asked for one
/// range at a time from then on.
extension DeltaAssembly {
    /// What the answer to several ranges is, before its body is taken: nil to read its parts (or,
    /// `restartRun`, to ask again one range at a time); an error status fails the attempt.
    func judgeParts(_ d: Download) -> TransferOutcome? {
        checkedAnswer = true
        if d.headers.status >= 400 && d.headers.status != 416 { return judgeAnswer(d) }
        guard d.headers.status == 206, let type = d.headers.contentType,
              let boundary = MultipartRanges.boundary(ofContentType: type) else {
            multipleRanges = false
            restartRun = true
            return nil
        }
        parts = MultipartRanges(boundary: boundary, ranges: runs.map { ($0.first - base, $0.last - base) },
                                total: remoteSize(d))
        return nil
    }

    /// Takes a multipart answer's bytes: the local bytes before each part are copied as its first
    /// bytes arrive, then the part's bytes are taken as a single range's are.
    func receiveParts(_ d: Download, _ bytes: UnsafeRawPointer, count: Int) -> Int {
        if parts == nil {
            if let outcome = judgeParts(d) {
                outcomeOfReceive = outcome
                return 0
            }
            if restartRun { return 0 }
        }
        guard outcomeOfReceive == nil, var reader = parts else { return 0 }
        d.received += Int64(count)
        var outcome: TransferOutcome?
        let taken: Bool
        do throws(MultipartRanges.Problem) {
            taken = try reader.feed(UnsafeRawBufferPointer(start: bytes, count: count)) { index, data in
                outcome = takePart(d, runs[index].first, data)
                return outcome == nil && !restartRun
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

    /// Bytes of the part that starts at `start` in the file: the local bytes before it are copied
    /// first (before its first byte), then they are taken as fetched bytes.
    private func takePart(_ d: Download, _ start: Int64, _ data: UnsafeRawBufferPointer) -> TransferOutcome? {
        if at(d) < start {
            if let failed = copyLocal(d, upTo: start) { return failed }
            if restartRun { return nil }
        }
        var offset = 0
        while offset < data.count {
            guard case let .remote(_, left) = work(d), at(d) >= start else {
                return stop("the server sent bytes the plan does not fetch")
            }
            let n = min(left, data.count - offset)
            if let failed = take(d, data.baseAddress! + offset, count: n) { return failed }
            if restartRun { return nil }
            offset += n
        }
        return nil
    }

    /// Copies the local bytes from where the assembly is up to `end` (all of them local: a piece
    /// to fetch whole now, or a local file that cannot be read, ends the request to start again).
    private func copyLocal(_ d: Download, upTo end: Int64) -> TransferOutcome? {
        while at(d) < end {
            guard case let .local(from, left) = work(d) else {
                restartRun = true
                return nil
            }
            let got = readLocal(from, count: Int(min(Int64(min(left, Download.stepSize)), end - at(d))))
            if got == 0 {
                restartRun = true
                return nil
            }
            if let outcome = advance(d, got) { return outcome }
            if restartRun { return nil }
        }
        return nil
    }
}

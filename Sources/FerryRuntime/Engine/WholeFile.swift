import CCurl
import Glibc
import FerryCore

/// A download of the whole file (`DownloadStrategy`): one request from the partial's offset under
/// its validator, whose answer `ResponsePolicy` judges (append, start again from zero, refuse),
/// or the steps of a source that reads the remote itself (a `file://` remote, SFTP).
final class WholeFile: DownloadStrategy {
    private var decided = false
    private var accepting = false
    private var errorBody: [UInt8] = []
    /// The request, built as the transfer starts (`begin`), for `prepare`.
    private var request: HTTPRequest?
    /// The buffer a stepped origin's bytes pass through, and whether the source was opened.
    private var stepBuffer: UnsafeMutableRawPointer?
    private var sourceOpened = false

    /// A stepped origin's bytes are the file's from the start: nothing to decide.
    init(stepped: Bool) {
        decided = stepped
        accepting = stepped
    }

    var kind: DownloadKind { .wholeFile }
    var continues: Bool { false }
    var reused: Int64 { 0 }
    var stopped: DeltaStop? { nil }
    func mode(of download: Download) -> TransferMode { download.origin.stepped == nil ? .curl : .steps }
    func waitingOn(of download: Download) -> (fd: Int32, events: Int16)? { download.origin.stepped?.waitingOn }

    func begin(_ d: Download) -> TransferOutcome? {
        if d.isAlreadyComplete { return d.verify() }
        guard case let .request(read) = d.origin else { return nil }
        // Built here, just before it is sent (its signature fresh), where a request that cannot be
        // made fails the attempt with the reason, the partial data kept.
        do { request = try read.build(d.requestedOffset, d.ifRange) } catch {
            return .failed(TransferFailure(message: error.message, keepPartial: true, cause: error.cause ?? .unusable))
        }
        d.requests += 1
        return nil
    }

    func prepare(_ d: Download, _ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        guard let request else { return }
        easy.configure(url: request.url, settings: request.settings, extraHeaders: request.headers)
        if d.requestedOffset > 0 { easy.set(CURLOPT_RANGE, "\(d.requestedOffset)-") }
        // Large reads for speed, unless a bandwidth limit is in force (a read is taken whole).
        if (d.entry.size ?? 0) > 1 << 20 && d.throttle?.limiting != true { easy.set(CURLOPT_BUFFERSIZE, 512 * 1024) }
        d.takeAnswer(easy, context: context)
    }

    /// A stepped origin: opens the source, then reads what it has at the partial's length (up to
    /// a MiB a step) and takes it in exactly as bytes from libcurl (size check, hash, checkpoints).
    func step(_ d: Download) -> TransferOutcome? {
        guard let source = d.origin.stepped else { return nil }
        if !sourceOpened {
            switch source.open() {
            case .wait: return nil
            case let .failed(failure): return .failed(failure)
            case let .ready(validator, size):
                sourceOpened = true
                d.requests += 1
                if let outcome = opened(d, source, validator: validator, size: size) { return outcome }
            }
        }
        let buffer = stepBuffer ?? UnsafeMutableRawPointer.allocate(byteCount: Download.stepSize, alignment: 16)
        stepBuffer = buffer
        var taken = 0
        while taken < Download.stepSize {
            switch source.read(into: buffer, count: Download.stepSize - taken, at: d.written) {
            case .wait: return nil
            case .end: return d.verify()
            case let .failed(failure): return .failed(failure)
            case let .bytes(n):
                d.throttle?.take(n)
                taken += n
                guard receive(d, buffer, count: n) == n else { return d.recordedFailure(or: "cannot take the file in") }
            }
        }
        return nil
    }

    /// A stepped source just opened: its size must be the manifest's, and a resume goes on only
    /// under the validator its partial was fetched under.
    private func opened(_ d: Download, _ source: SteppedSource, validator: String?, size: Int64?) -> TransferOutcome? {
        if let size, let expected = d.entry.size, size != expected {
            return .failed(TransferFailure(message: "the remote's file is \(size) bytes, the manifest says "
                                                    + "\(expected)", keepPartial: false,
                                           cause: .wrongLength))
        }
        guard source.checksValidator else { return nil }
        if d.requestedOffset > 0 && validator != d.ifRange {
            guard d.startOver(validator: validator, restart: "the file changed on the remote since its partial was "
                                                             + "fetched") else {
                return d.recordedFailure(or: "cannot truncate the partial file")
            }
        }
        d.validator = validator
        return nil
    }

    func receive(_ d: Download, _ bytes: UnsafeRawPointer, count: Int) -> Int {
        if !decided { decide(d) }
        if d.failure != nil { return 0 }
        guard accepting else {
            if errorBody.count < 4096 {
                errorBody.append(contentsOf: UnsafeRawBufferPointer(start: bytes,
                                                                    count: min(count, 4096 - errorBody.count)))
            }
            return count
        }
        if let size = d.entry.size, d.written + Int64(count) > size {
            d.fail("the server sent more than the manifest's \(size) bytes", discard: true, cause: .wrongLength)
            return 0
        }
        guard d.append(bytes, count: count) else { return 0 }
        d.received += Int64(count)
        return count
    }

    /// Decides, at the first body byte (or at the end for an empty body), what the response means
    /// for the partial file.
    private func decide(_ d: Download) {
        decided = true
        let asked = ResponsePolicy.Asked(offset: d.requestedOffset, ifRange: d.ifRange, size: d.entry.size)
        let answer = ResponsePolicy.Answer(status: d.headers.status, contentRange: d.headers.contentRange,
                                           contentLength: d.headers.contentLength, validator: responseValidator(d))
        switch ResponsePolicy.decide(asked, answer) {
        case let .append(validator):
            accepting = true
            d.validator = validator
        case let .replace(validator, restart):
            guard d.startOver(validator: validator, restart: restart) else { return }
            accepting = true
        case let .refuse(message, cause):
            d.fail(message, discard: true, cause: cause)
        case .errorStatus:
            accepting = false
        }
    }

    /// The validator of the response (`ResponseHeaders.rangeValidator`).
    private func responseValidator(_ d: Download) -> String? {
        if case let .request(read) = d.origin { return d.headers.rangeValidator(contentETags: read.contentETags) }
        return d.headers.rangeValidator(contentETags: false)
    }

    /// The verdict once libcurl reports the transfer done.
    func finish(_ d: Download, code: CURLcode, errorText: String?) -> TransferOutcome {
        if !decided && code == CURLE_OK { decide(d) }
        if d.failure != nil { return d.recordedFailure(or: "") }
        guard code == CURLE_OK else { return d.transportFailure(code, errorText: errorText) }
        let status = d.headers.status
        guard status == 200 || status == 206 else { return errorStatus(d, status) }
        return d.verify()
    }

    /// An answer that is not the file: why, and whether a retry may help.
    private func errorStatus(_ d: Download, _ status: Int) -> TransferOutcome {
        if status == 412 && d.requestedOffset > 0 {
            // A range asked under If-Match, for a file that changed since its partial was fetched.
            return .failed(TransferFailure(message: "the file changed on the remote since its partial was fetched "
                                                    + "(HTTP 412); starting again from zero",
                                           keepPartial: false, cause: .rangeNotHonoured))
        }
        var message = "HTTP \(status) \(d.headers.reason)".trimmingSpaces()
        if status == 416 { message += " (range not satisfiable); starting again from zero" }
        if case let .request(read) = d.origin, let why = read.explain?(status, errorBody) { message += ": " + why }
        let after = status == 429 || status == 503 ? d.headers.retryAfter.flatMap(ResponseHeaders.parseRetryAfter)
                                                   : nil
        return .failed(TransferFailure(message: message, keepPartial: status != 416, cause: .http(status: status),
                                       retryAfter: after))
    }

    func close(_ d: Download) {
        d.origin.stepped?.close()
        stepBuffer?.deallocate()
        stepBuffer = nil
    }
}

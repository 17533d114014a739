import CCurl
import Glibc
import FerryCore

/// One file's download in flight: the partial file it writes, the SHA-256 it computes while the
/// bytes stream in, and the rules for what a response may do to the partial (docs/design.md,
/// data-safety rules 3 and 4). The engine feeds it; it never touches the final path. A delta
/// (`DeltaDownload`) is one too, assembling the partial from local bytes and ranges.
class Download: Transfer {
    let task: TransferTask
    let entry: ManifestEntry
    let reason: Plan.Reason
    /// Where the bytes come from.
    enum Origin {
        /// A request the remote builds (URL, headers, signing) for the bytes from an offset under
        /// a validator, made when the transfer starts.
        case request(ReadRequest)
        /// A source the engine's steps read (a `file://` remote's file, a file over SFTP).
        case stepped(SteppedSource)

        var stepped: SteppedSource? { if case let .stepped(source) = self { return source } else { return nil } }
        /// Read from any offset without a validator (a local file), by the engine's steps.
        var readsAnyOffset: Bool { stepped.map { !$0.checksValidator } ?? false }
    }
    let origin: Origin
    let fd: Int32
    /// The offset asked for with `Range` (0 = the whole file).
    let requestedOffset: Int64
    /// The validator the range request is made under (the remote sends it as `If-Range` or `If-Match`).
    let ifRange: String?

    /// Small files are hashed inline as bytes arrive; large ones on a second thread (`BackgroundHasher`).
    private let inlineHasher: SHA256Hasher?
    private var backgroundHasher: BackgroundHasher?
    var headers = ResponseHeaders()
    private var decided = false
    private var accepting = false
    /// Bytes in the partial file (resumed prefix plus bytes received).
    private(set) var written: Int64
    /// Bytes fetched over the network by this attempt.
    var received: Int64 = 0
    /// Bytes taken from local files (a delta) by this attempt.
    var reused: Int64 { 0 }
    /// Requests this attempt made (a stepped source opened counts as one).
    var requests = 0
    /// Bytes known synced to disk and recorded.
    var checkpointed: Int64
    /// Set when `ferry cancel` suspended the task: the engine stops it as interrupted.
    var cancelRequested = false
    var throttle: Throttle?
    /// Time-based checkpoints are kept on it (the run's clock).
    private let clock: any Clock
    /// When the last checkpoint was taken (monotonic seconds).
    var checkpointTime: Double
    /// The validator of the response the partial now holds.
    var validator: String?
    private(set) var failure: String?
    private(set) var failureCause = FailureCause.unusable
    private(set) var discardPartial = false
    /// Why the download began again from zero, if it did.
    private(set) var restartReason: String?
    private var errorBody: [UInt8] = []

    /// `resumeFrom` bytes of the partial are already valid (hashed here before any network I/O).
    init(task: TransferTask, entry: ManifestEntry, reason: Plan.Reason, origin: Origin, partial: PartialFile,
         resumeFrom: Int64, validator: String?, clock: any Clock) throws(FerryError) {
        self.clock = clock
        checkpointTime = clock.monotonic()
        self.task = task
        self.entry = entry
        self.reason = reason
        self.origin = origin
        fd = partial.fd
        let stepped = origin.stepped != nil
        let anyOffset = origin.readsAnyOffset
        var offset = resumeFrom
        let onDisk = partial.length
        if onDisk < offset { offset = 0 }
        // A partial that already holds the manifest's size (a crash after the last byte, a commit
        // that failed) is verified from disk first: no request at all if it is right (data-safety
        // rule 4).
        if let size = entry.size, size > 0, onDisk == size { offset = size }
        // Over the network a range is asked for only under a validator (If-Range, or the SFTP
        // file's size and mtime): without one, the bytes on disk might belong to another version of
        // the file. A local file is read from the offset (and the whole is verified by hash all the same).
        if !anyOffset && validator == nil && offset != entry.size { offset = 0 }
        // An empty partial (a new one, the common case) has nothing to cut, and is written from 0.
        if onDisk > 0 || offset > 0 {
            if ftruncate(fd, off_t(offset)) != 0 {
                throw .localIO("cannot truncate the partial file for \(Printable.name(entry.path.string)): \(FileSystem.errorText())")
            }
            if lseek(fd, off_t(offset), SEEK_SET) < 0 {
                throw .localIO("cannot seek in the partial file for \(Printable.name(entry.path.string)): \(FileSystem.errorText())")
            }
        }
        if (entry.size ?? Int64.max) >= BackgroundHasher.threshold {
            inlineHasher = nil
            backgroundHasher = BackgroundHasher(fd: fd, prefix: offset)
        } else {
            inlineHasher = SHA256Hasher()
            if offset > 0 { try inlineHasher!.update(fileDescriptor: fd, length: offset) }
        }
        requestedOffset = offset
        written = offset
        checkpointed = offset
        ifRange = offset > 0 && !anyOffset ? validator : nil
        self.validator = validator
        if stepped {
            decided = true
            accepting = true
        }
    }

    /// True when the partial already holds the whole file: verify it without asking the network.
    /// If it does not verify, it is discarded and fetched again (a retry).
    var isAlreadyComplete: Bool { entry.size.map { requestedOffset == $0 && $0 > 0 } ?? false }

    var mode: TransferMode { origin.stepped == nil ? .curl : .steps }
    /// A download is one request (or one run of steps); a delta's go on (`Transfer.continues`).
    var continues: Bool { false }
    var waitingOn: (fd: Int32, events: Int16)? { origin.stepped?.waitingOn }

    /// The request, built as the transfer starts (`outcomeWithoutRequest`), for `prepare`.
    private var request: HTTPRequest?

    func outcomeWithoutRequest() -> TransferOutcome? {
        if isAlreadyComplete { return verify() }
        guard case let .request(read) = origin else { return nil }
        // Built here, just before it is sent (its signature fresh), where a request that cannot be
        // made fails the attempt with the reason, the partial data kept.
        do { request = try read.build(requestedOffset, ifRange) } catch {
            return .failed(TransferFailure(message: error.message, keepPartial: true, cause: error.cause ?? .unusable))
        }
        requests += 1
        return nil
    }

    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        guard let request else { return }
        easy.configure(url: request.url, settings: request.settings, extraHeaders: request.headers)
        if let range = rangeOption { easy.set(CURLOPT_RANGE, range) }
        // Large reads for speed, unless a bandwidth limit is in force (a read is taken whole).
        if (entry.size ?? 0) > 1 << 20 && throttle?.limiting != true { easy.set(CURLOPT_BUFFERSIZE, 512 * 1024) }
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, downloadWriteCallback)
        easy.set(CURLOPT_WRITEDATA, pointer: context)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, downloadHeaderCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: context)
    }

    /// The buffer a stepped origin's bytes pass through, and whether the source was opened.
    private var stepBuffer: UnsafeMutableRawPointer?
    private var sourceOpened = false
    static let stepSize = 1 << 20

    /// A stepped origin: opens the source, then reads what it has at the partial's length (up to
    /// a MiB a step) and takes it in exactly as bytes from libcurl (size check, hash, checkpoints).
    func step() -> TransferOutcome? {
        guard let source = origin.stepped else { return nil }
        if !sourceOpened {
            switch source.open() {
            case .wait: return nil
            case let .failed(failure): return .failed(failure)
            case let .ready(validator, size):
                sourceOpened = true
                requests += 1
                if let size, let expected = entry.size, size != expected {
                    return .failed(TransferFailure(message: "the remote's file is \(size) bytes, the manifest says \(expected)", keepPartial: false, cause: .wrongLength))
                }
                if source.checksValidator {
                    if requestedOffset > 0 && validator != ifRange {
                        guard startOver(validator: validator, restart: "the file changed on the remote since its partial was fetched") else {
                            return .failed(TransferFailure(message: failure ?? "cannot truncate the partial file", keepPartial: false, cause: failureCause))
                        }
                    }
                    self.validator = validator
                }
            }
        }
        let buffer = stepBuffer ?? UnsafeMutableRawPointer.allocate(byteCount: Download.stepSize, alignment: 16)
        stepBuffer = buffer
        var taken = 0
        while taken < Download.stepSize {
            switch source.read(into: buffer, count: Download.stepSize - taken, at: written) {
            case .wait: return nil
            case .end: return verify()
            case let .failed(failure): return .failed(failure)
            case let .bytes(n):
                throttle?.take(n)
                taken += n
                guard receive(buffer, count: n) == n else { return recordedFailure(or: "cannot take the file in") }
            }
        }
        return nil
    }

    /// Slow transfers are checkpointed every second; fast ones every 2 MiB from the write path.
    func tick() {
        if written > checkpointed && clock.monotonic() - checkpointTime >= TransferEngine.checkpointSeconds { takeCheckpoint() }
    }

    var rangeOption: String? { requestedOffset > 0 ? "\(requestedOffset)-" : nil }

    /// Called by libcurl with body bytes. Returns `count` to go on, 0 to abort the transfer.
    func receive(_ bytes: UnsafeRawPointer, count: Int) -> Int {
        if !decided { decide() }
        if failure != nil { return 0 }
        guard accepting else {
            if errorBody.count < 4096 { errorBody.append(contentsOf: UnsafeRawBufferPointer(start: bytes, count: min(count, 4096 - errorBody.count))) }
            return count
        }
        if let size = entry.size, written + Int64(count) > size {
            fail("the server sent more than the manifest's \(size) bytes", discard: true, cause: .wrongLength)
            return 0
        }
        guard append(bytes, count: count) else { return 0 }
        received += Int64(count)
        return count
    }

    /// Writes the next bytes of the file to the partial and hashes them (checkpoints included).
    /// false when they could not be written (`failure` says why).
    func append(_ bytes: UnsafeRawPointer, count: Int) -> Bool {
        if let backgroundHasher {
            // Large file: gather libcurl's 16 KiB pieces into 1 MiB buffers for the hashing thread.
            var taken = 0
            while taken < count {
                if pending == nil { pending = backgroundHasher.acquire() }
                let n = min(count - taken, BackgroundHasher.bufferSize - pendingCount)
                pending!.advanced(by: pendingCount).copyMemory(from: bytes + taken, byteCount: n)
                pendingCount += n
                taken += n
                if pendingCount == BackgroundHasher.bufferSize && !flush() { return false }
            }
        } else {
            guard writeAll(bytes, count) else { return false }
            inlineHasher?.update(bytes, count: count)
        }
        written += Int64(count)
        // Checkpoint from here, not from the engine loop: one curl_multi_perform call can take in
        // tens of MiB on a fast link before the loop runs again.
        if written - checkpointed >= TransferEngine.checkpointInterval { takeCheckpoint() }
        return failure == nil
    }

    /// Called after each checkpoint (set by the session's source): records `checkpointed` in the task table.
    var onCheckpoint: ((Download) -> Void)?

    /// Syncs what is written and records it as resume data.
    func takeCheckpoint() {
        checkpointTime = clock.monotonic()
        guard syncData() else {
            // After a failed fdatasync the kernel may report later syncs as fine: trust nothing.
            let code = errno
            localIOFailure = localIOFailure ?? code
            fail("could not sync the partial file to disk (\(FileSystem.errorText(code))); it will be fetched again", discard: true, cause: .local(errno: code))
            return
        }
        checkpointed = written
        onCheckpoint?(self)
    }

    /// The partial file's length on disk (what can be kept as resume data, at most).
    var bytesOnDisk: Int64 {
        var st = stat()
        return fstat(fd, &st) == 0 ? Int64(st.st_size) : 0
    }

    /// The buffer being filled for the hashing thread, and how much of it is filled.
    private var pending: UnsafeMutableRawPointer?
    private var pendingCount = 0

    /// Writes the pending buffer to the file and hands it to the hashing thread.
    private func flush() -> Bool {
        guard let buffer = pending, let backgroundHasher else { return true }
        pending = nil
        let count = pendingCount
        pendingCount = 0
        guard writeAll(buffer, count) else {
            backgroundHasher.release(buffer)
            return false
        }
        backgroundHasher.submit(buffer, count: count)
        return true
    }

    private func writeAll(_ bytes: UnsafeRawPointer, _ count: Int) -> Bool {
        var offset = 0
        while offset < count {
            let n = Glibc.write(fd, bytes + offset, count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                fail("cannot write the partial file: \(FileSystem.errorText(code))", discard: false, cause: .local(errno: code))
                localIOFailure = code
                return false
            }
            offset += n
        }
        return true
    }

    /// errno of a local write failure (disk full...), which is a local I/O error, not the remote's.
    private(set) var localIOFailure: Int32?

    func fail(_ message: String, discard: Bool, cause: FailureCause) {
        if failure == nil {
            failure = message
            failureCause = cause
        }
        discardPartial = discardPartial || discard
    }

    /// Decides, at the first body byte (or at the end for an empty body), what the response means
    /// for the partial file.
    private func decide() {
        decided = true
        let asked = ResponsePolicy.Asked(offset: requestedOffset, ifRange: ifRange, size: entry.size)
        let answer = ResponsePolicy.Answer(status: headers.status, contentRange: headers.contentRange,
                                           contentLength: headers.contentLength, validator: responseValidator)
        switch ResponsePolicy.decide(asked, answer) {
        case let .append(validator):
            accepting = true
            self.validator = validator
        case let .replace(validator, restart):
            guard startOver(validator: validator, restart: restart) else { return }
            accepting = true
        case let .refuse(message, cause):
            fail(message, discard: true, cause: cause)
        case .errorStatus:
            accepting = false
        }
    }

    /// Takes the partial back to zero when bytes from the start replace a resumed prefix (the
    /// file changed since): false when it cannot be truncated.
    private func startOver(validator: String?, restart: String?) -> Bool {
        if requestedOffset > 0 {
            if ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) < 0 {
                fail("cannot truncate the partial file: \(FileSystem.errorText())", discard: true, cause: .local(errno: errno))
                return false
            }
            if let inlineHasher {
                inlineHasher.reset()
            } else {
                if let buffer = pending { backgroundHasher?.release(buffer) }
                pending = nil
                pendingCount = 0
                backgroundHasher?.cancel()
                backgroundHasher = BackgroundHasher(fd: fd, prefix: 0)
            }
            written = 0
            checkpointed = 0
        }
        restartReason = restart
        self.validator = validator
        // The old offset no longer describes the partial: record the restart before new bytes land.
        if restart != nil { onCheckpoint?(self) }
        return true
    }

    /// The validator of the response (`ResponseHeaders.rangeValidator`).
    private var responseValidator: String? {
        if case let .request(read) = origin { return headers.rangeValidator(contentETags: read.contentETags) }
        return headers.rangeValidator(contentETags: false)
    }

    /// The verdict once libcurl reports the transfer done.
    func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
        if !decided && code == CURLE_OK { decide() }
        if let failure { return .failed(TransferFailure(message: failure, keepPartial: !discardPartial, cause: failureCause)) }
        guard code == CURLE_OK else { return transportFailure(code, errorText: errorText) }
        if headers.status != 200 && headers.status != 206 {
            let status = headers.status
            if status == 412 && requestedOffset > 0 {
                // A range asked under If-Match, for a file that changed since its partial was fetched.
                return .failed(TransferFailure(message: "the file changed on the remote since its partial was fetched (HTTP 412); starting again from zero",
                                               keepPartial: false, cause: .rangeNotHonoured))
            }
            var message = "HTTP \(status) \(headers.reason)".trimmingSpaces()
            if status == 416 { message += " (range not satisfiable); starting again from zero" }
            if case let .request(read) = origin, let why = read.explain?(status, errorBody) { message += ": " + why }
            let after = (status == 429 || status == 503) ? headers.retryAfter.flatMap(ResponseHeaders.parseRetryAfter) : nil
            return .failed(TransferFailure(message: message, keepPartial: status != 416, cause: .http(status: status), retryAfter: after))
        }
        return verify()
    }

    /// A request libcurl ended with an error: what it says, retried by its cause; the bytes kept.
    func transportFailure(_ code: CURLcode, errorText: String?) -> TransferOutcome {
        var text = Curl.describe(code, errorText: errorText, headers: headers)
        if code == CURLE_OPERATION_TIMEDOUT && text.contains("too slow") { text = "stalled: " + text }
        return .failed(TransferFailure(message: text, keepPartial: true, cause: Curl.cause(code, errorText: errorText, headers: headers)))
    }

    /// The failure this download recorded (`fail`), or `fallback` when none was.
    func recordedFailure(or fallback: String) -> TransferOutcome {
        .failed(TransferFailure(message: failure ?? fallback, keepPartial: !discardPartial, cause: failureCause))
    }

    /// Size and hash against the manifest, for every path that yields a file (data-safety rule 4).
    func verify() -> TransferOutcome {
        // A checkpoint that failed (its sync) left nothing to trust.
        if failure != nil { return recordedFailure(or: "") }
        if let size = entry.size, written != size {
            return .failed(TransferFailure(message: "the server sent \(written) of \(size) bytes (truncated)", keepPartial: written < size,
                                   cause: written < size ? .truncated : .wrongLength))
        }
        guard flush() else {
            return .failed(TransferFailure(message: failure ?? "cannot write the partial file", keepPartial: false, cause: failureCause))
        }
        let digest = inlineHasher?.finalize() ?? backgroundHasher?.finish()
        backgroundHasher = nil
        guard let sha = digest else {
            return .failed(TransferFailure(message: "cannot read back the partial file to hash it", keepPartial: false, cause: .local(errno: EIO)))
        }
        guard sha == entry.sha256 else {
            if isAlreadyComplete && received == 0 {
                return .failed(TransferFailure(message: "the kept partial file does not verify; fetching it again", keepPartial: false, cause: .contentMismatch(afterResume: true)))
            }
            if requestedOffset > 0 && restartReason == nil {
                return .failed(TransferFailure(message: "the resumed file does not verify (the server may have changed it); fetching it again from zero",
                                       keepPartial: false, cause: .contentMismatch(afterResume: true)))
            }
            return .failed(TransferFailure(message: "content does not match the manifest: SHA-256 is \(sha), the manifest says \(entry.sha256)",
                                   keepPartial: false, cause: .contentMismatch(afterResume: false)))
        }
        return .succeeded
    }

    /// Writes out buffered bytes and syncs the partial's data to disk, so its length can be
    /// recorded as resume data.
    func syncData() -> Bool { flush() && fdatasync(fd) == 0 }

    /// Stops any hashing and closes the partial file. Call once, when done with the download.
    func close() {
        if let buffer = pending { backgroundHasher?.release(buffer) }
        pending = nil
        backgroundHasher?.cancel()
        backgroundHasher = nil
        Glibc.close(fd)
        origin.stepped?.close()
        stepBuffer?.deallocate()
        stepBuffer = nil
    }
}

let downloadWriteCallback: ferry_data_callback = { buffer, size, count, userdata in
    let download = Unmanaged<Download>.fromOpaque(userdata!).takeUnretainedValue()
    guard let buffer else { return 0 }
    // Over a bandwidth limit: libcurl keeps the bytes and offers them again once the engine continues it.
    if let throttle = download.throttle, !throttle.admit(size * count) { return Int(CURL_WRITEFUNC_PAUSE) }
    return download.receive(UnsafeRawPointer(buffer), count: size * count)
}

let downloadHeaderCallback: ferry_data_callback = { buffer, size, count, userdata in
    let download = Unmanaged<Download>.fromOpaque(userdata!).takeUnretainedValue()
    let n = size * count
    buffer.map { download.headers.consume(UnsafeBufferPointer(start: UnsafeRawPointer($0).assumingMemoryBound(to: UInt8.self), count: n)) }
    return n
}

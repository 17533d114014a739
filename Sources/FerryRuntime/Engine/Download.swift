import CCurl
import Glibc
import FerryCore

/// One file's download in flight: the partial file it writes, the SHA-256 it computes while the
/// bytes come in, its checkpoints, and the final check (docs/design.md, data-safety rules 2 and
/// 4). How the bytes are asked for and taken in is its `strategy`: the whole file (`WholeFile`,
/// resumed under a validator), or a new version assembled from local bytes and ranges of the
/// file or its pieces (`DeltaAssembly`). The engine feeds it; it never touches the final path.
final class Download: Transfer {
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
    /// How the bytes are asked for and taken in.
    let strategy: DownloadStrategy
    /// The offset asked for with `Range` (0 = the whole file).
    let requestedOffset: Int64
    /// The validator the range request is made under (the remote sends it as `If-Range` or `If-Match`).
    let ifRange: String?

    /// Small files are hashed inline as bytes arrive; large ones on a second thread (`BackgroundHasher`).
    private let inlineHasher: SHA256Hasher?
    private var backgroundHasher: BackgroundHasher?
    /// The digest of a partial that held the whole file as written by this process
    /// (`PartialFile.wholeDigest`), taken in place of hashing it; gone if it starts over.
    private var knownDigest: SHA256Digest?
    /// The headers of the answer to the current request.
    var headers = ResponseHeaders()
    /// Bytes in the partial file (resumed prefix plus bytes received).
    private(set) var written: Int64
    /// Bytes fetched over the network by this attempt.
    var received: Int64 = 0
    /// Bytes taken from local files (a delta) by this attempt.
    var reused: Int64 { strategy.reused }
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
    /// The most a download's steps take at once (a MiB).
    static let stepSize = 1 << 20

    /// The whole file (`WholeFile`), its first `resumeFrom` bytes taken from the partial.
    convenience init(task: TransferTask, entry: ManifestEntry, reason: Plan.Reason, origin: Origin,
                     partial: PartialFile,
                     resumeFrom: Int64, validator: String?, clock: any Clock) throws(FerryError) {
        try self.init(task: task, entry: entry, reason: reason, origin: origin, partial: partial,
                      resumeFrom: resumeFrom,
                      validator: validator, clock: clock, strategy: WholeFile(stepped: origin.stepped != nil))
    }

    /// `resumeFrom` bytes of the partial are already valid (hashed here before any network I/O).
    init(task: TransferTask, entry: ManifestEntry, reason: Plan.Reason, origin: Origin, partial: PartialFile,
         resumeFrom: Int64, validator: String?, clock: any Clock, strategy: DownloadStrategy) throws(FerryError) {
        self.clock = clock
        checkpointTime = clock.monotonic()
        self.task = task
        self.entry = entry
        self.reason = reason
        self.origin = origin
        self.strategy = strategy
        fd = partial.fd
        let anyOffset = origin.readsAnyOffset
        let offset = Download.resumeOffset(resumeFrom, onDisk: partial.length, size: entry.size, validator: validator,
                                           anyOffset: anyOffset)
        // An empty partial (a new one, the common case) has nothing to cut, and is written from 0;
        // one that holds exactly what is kept (a pack's file, a crash after the last byte) neither.
        if partial.length != offset && ftruncate(fd, off_t(offset)) != 0 {
            throw .localIO("cannot truncate the partial file for \(Printable.name(entry.path.string)): "
                           + "\(FileSystem.errorText())")
        }
        if offset > 0 {
            if lseek(fd, off_t(offset), SEEK_SET) < 0 {
                throw .localIO("cannot seek in the partial file for \(Printable.name(entry.path.string)): "
                               + "\(FileSystem.errorText())")
            }
        }
        if (entry.size ?? Int64.max) >= BackgroundHasher.threshold {
            inlineHasher = nil
            backgroundHasher = BackgroundHasher(fd: fd, prefix: offset)
        } else {
            inlineHasher = SHA256Hasher()
            if offset > 0, offset == partial.length, let known = partial.wholeDigest {
                knownDigest = known
            } else if offset > 0 {
                try inlineHasher!.update(fileDescriptor: fd, length: offset)
            }
        }
        requestedOffset = offset
        written = offset
        checkpointed = offset
        ifRange = offset > 0 && !anyOffset ? validator : nil
        self.validator = validator
    }

    /// Where a download resumes: `resumeFrom` when the partial holds it and a validator vouches
    /// for it over the network; the whole length when the partial already holds the manifest's size
    /// (a crash after the last byte, a commit that failed: verified from disk first, with no
    /// request if it is right, data-safety rule 4); 0 otherwise. A local file is read from the
    /// offset (and the whole is verified by hash all the same).
    private static func resumeOffset(_ resumeFrom: Int64, onDisk: Int64, size: Int64?, validator: String?,
                                     anyOffset: Bool) -> Int64 {
        var offset = resumeFrom
        if onDisk < offset { offset = 0 }
        if let size, size > 0, onDisk == size { offset = size }
        // Without a validator, the bytes on disk might belong to another version of the file.
        if !anyOffset && validator == nil && offset != size { offset = 0 }
        return offset
    }

    /// True when the partial already holds the whole file: verify it without asking the network.
    /// If it does not verify, it is discarded and fetched again (a retry).
    var isAlreadyComplete: Bool { entry.size.map { requestedOffset == $0 && $0 > 0 } ?? false }

    /// Whether it fetches the whole file, or assembles it from ranges or pieces.
    var kind: DownloadKind { strategy.kind }
    /// Why a delta stopped, when it did: the file is fetched whole next.
    var deltaStopped: DeltaStop? { strategy.stopped }

    // MARK: Transfer: each call goes to the strategy

    var mode: TransferMode { strategy.mode(of: self) }
    var continues: Bool { strategy.continues }
    var isShortRequest: Bool {
        guard kind == .wholeFile, let size = entry.size else { return false }
        return size - requestedOffset <= Depth.shortRequest && mode == .curl
    }
    var waitingOn: (fd: Int32, events: Int16)? { strategy.waitingOn(of: self) }
    func outcomeWithoutRequest() -> TransferOutcome? { strategy.begin(self) }
    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        strategy.prepare(self, easy, context: context)
    }
    func step() -> TransferOutcome? { strategy.step(self) }
    func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
        strategy.finish(self, code: code, errorText: errorText)
    }

    /// Called by libcurl with body bytes. Returns `count` to go on, 0 to abort the transfer.
    func receive(_ bytes: UnsafeRawPointer, count: Int) -> Int { strategy.receive(self, bytes, count: count) }

    /// Slow transfers are checkpointed every second; fast ones every 2 MiB from the write path.
    func tick() {
        if written > checkpointed && clock.monotonic() - checkpointTime >= TransferEngine.checkpointSeconds {
            takeCheckpoint()
        }
    }

    /// Sets up libcurl's callbacks for the body and the headers of the current request.
    func takeAnswer(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, downloadWriteCallback)
        easy.set(CURLOPT_WRITEDATA, pointer: context)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, downloadHeaderCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: context)
    }

    // MARK: the partial file

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
            fail("could not sync the partial file to disk (\(FileSystem.errorText(code))); it will be fetched "
                 + "again", discard: true,
                 cause: .local(errno: code))
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
                fail("cannot write the partial file: "
                     + "\(FileSystem.errorText(code))", discard: false, cause: .local(errno: code))
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

    /// Takes the partial back to zero when bytes from the start replace a resumed prefix (the
    /// file changed since): false when it cannot be truncated.
    func startOver(validator: String?, restart: String?) -> Bool {
        if requestedOffset > 0 {
            if ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) < 0 {
                fail("cannot truncate the partial file: "
                     + "\(FileSystem.errorText())", discard: true, cause: .local(errno: errno))
                return false
            }
            knownDigest = nil
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

    // MARK: outcomes

    /// A request libcurl ended with an error: what it says, retried by its cause; the bytes kept.
    func transportFailure(_ code: CURLcode, errorText: String?) -> TransferOutcome {
        var text = Curl.describe(code, errorText: errorText, headers: headers)
        if code == CURLE_OPERATION_TIMEDOUT && text.contains("too slow") { text = "stalled: " + text }
        return .failed(TransferFailure(message: text, keepPartial: true,
                                       cause: Curl.cause(code, errorText: errorText, headers: headers)))
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
            return .failed(TransferFailure(message: "the server sent \(written) of \(size) bytes "
                                                    + "(truncated)", keepPartial: written < size,
                                           cause: written < size ? .truncated : .wrongLength))
        }
        guard flush() else {
            return .failed(TransferFailure(message: failure ?? "cannot write the partial "
                                                               + "file", keepPartial: false, cause: failureCause))
        }
        let digest = knownDigest ?? inlineHasher?.finalize() ?? backgroundHasher?.finish()
        backgroundHasher = nil
        guard let sha = digest else {
            return .failed(TransferFailure(message: "cannot read back the partial file to hash it", keepPartial: false,
                                           cause: .local(errno: EIO)))
        }
        guard sha == entry.sha256 else {
            if isAlreadyComplete && received == 0 {
                return .failed(TransferFailure(message: "the kept partial file does not verify; fetching it "
                                                        + "again", keepPartial: false,
                                               cause: .contentMismatch(afterResume: true)))
            }
            if requestedOffset > 0 && restartReason == nil {
                return .failed(TransferFailure(message: "the resumed file does not verify (the server may have changed "
                                                        + "it); fetching it again from zero",
                                               keepPartial: false, cause: .contentMismatch(afterResume: true)))
            }
            return .failed(TransferFailure(message: "content does not match the manifest: SHA-256 is \(sha), the "
                                                    + "manifest says \(entry.sha256)",
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
        strategy.close(self)
        Glibc.close(fd)
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
    buffer.map {
        download.headers.consume(UnsafeBufferPointer(start: UnsafeRawPointer($0).assumingMemoryBound(to: UInt8.self),
                                                     count: n))
    }
    return n
}

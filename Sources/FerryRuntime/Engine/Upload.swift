import CCurl
import Glibc
import FerryCore

/// One file's upload in flight (push): its bytes — all of the file, or one part of it — are read
/// from the local file, hashed as they go, and sent where the remote said (a request it built: a
/// `PUT` to a temporary name over WebDAV, to the final key or a part on S3; or a temporary file in a
/// `file://` remote's `.ferry/upload/`). It ends verified only when exactly the bytes whose SHA-256
/// was expected were sent and the local file did not change meanwhile (size, mtime, ctime, inode):
/// a file edited during its upload is sent again, so a published manifest never lists a hash
/// other than the bytes on the remote. What comes after (a move, the next part) is the remote's
/// `Placement`; the local file belongs to it.
final class Upload: Transfer {
    let task: TransferTask
    /// What the local file held when it was hashed.
    let entry: ManifestEntry
    let stat: LocalEntry
    /// The bytes of the file this upload sends (all of it, or a part).
    let range: Range<Int64>
    /// The SHA-256 the bytes sent must have; nil: the file was not hashed before (a new path, or
    /// another size than the remote's), so its hash is what is sent (`digest`), the stat vouching
    /// that the file held still.
    let expected: SHA256Digest?
    /// The SHA-256 of what was sent, once the upload verified.
    private(set) var digest: SHA256Digest?
    /// Where the bytes go.
    enum Destination {
        /// A request the remote built (URL, method, headers, signature).
        case request(HTTPRequest)
        /// A temporary file of a `file://` remote (`LocalRoot.createUpload`: its descriptor, and
        /// its name in the remote's `.ferry/upload/`), written with write(2) by the engine's steps.
        case file(fd: Int32, staged: String)
        /// A remote the steps write to themselves (SFTP), which also places the file.
        case stepped(SteppedSink)
    }
    let destination: Destination
    let fd: Int32
    var cancelRequested = false
    var throttle: Throttle?
    /// Words for an error answer, where the remote's say more than their status (S3's XML).
    var explain: ((_ status: Int, _ body: [UInt8]) -> String?)?
    /// Bytes read from the file and handed on so far.
    private(set) var sent: Int64 = 0
    private var headers = HeaderSink()
    /// The start of an error answer's body (for `explain`).
    private let answer = BodyBuffer(limit: 4096)
    private var failure: (String, FailureCause)?
    private var destinationOpen = true

    /// Sends `range` (nil: all) of the local file `file`, opened by the session (`LocalRoot.open`)
    /// and closed by the placement. Whether it is still what was hashed is checked as it is sent
    /// and at the end (`verify`).
    init(task: TransferTask, entry: ManifestEntry, stat expected: LocalEntry, expecting sha256: SHA256Digest?, file: Int32,
         range: Range<Int64>? = nil, destination: Destination) {
        self.task = task
        self.entry = entry
        self.stat = expected
        self.expected = sha256
        self.range = range ?? 0..<expected.size
        self.destination = destination
        fd = file
    }

    /// The answer's headers (a part's ETag).
    var responseHeaders: ResponseHeaders { headers.headers }
    private var size: Int64 { range.upperBound - range.lowerBound }

    /// What differs between the open file and what was hashed, or nil.
    static func change(fd: Int32, from expected: LocalEntry) -> String? {
        var st = Glibc.stat()
        guard fstat(fd, &st) == 0 else { return "cannot stat it: \(FileSystem.errorText())" }
        let now = FileSystem.entry(from: st)
        if now.kind != .file { return "it is no longer a regular file" }
        if now.size != expected.size { return "size \(expected.size) → \(now.size)" }
        if now.mtime != expected.mtime || now.ctime != expected.ctime { return "modified" }
        if now.inode != expected.inode { return "replaced" }
        return nil
    }

    var mode: TransferMode { if case .request = destination { return .curl } else { return .steps } }

    var waitingOn: (fd: Int32, events: Int16)? { if case let .stepped(sink) = destination { sink.waitingOn } else { nil } }

    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        guard case let .request(request) = destination else { return }
        easy.configure(url: request.url, settings: request.settings, extraHeaders: request.headers)
        easy.upload(size: size)
        if request.method != "PUT" { easy.set(CURLOPT_CUSTOMREQUEST, request.method) }
        // A redirect would send the bytes elsewhere.
        easy.set(CURLOPT_FOLLOWLOCATION, 0)
        // Fewer, larger reads and sends for a large file, as for downloads (unless a limit paces it).
        if size > 1 << 20 && throttle?.limiting != true { easy.set(CURLOPT_UPLOAD_BUFFERSIZE, 512 * 1024) }
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_READFUNCTION, uploadReadCallback)
        easy.set(CURLOPT_READDATA, pointer: context)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, keptBodyCallback)
        easy.set(CURLOPT_WRITEDATA, pointer: Unmanaged.passUnretained(answer).toOpaque())
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, headerCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: Unmanaged.passUnretained(headers).toOpaque())
    }

    /// Fills `buffer` with the next bytes of the file; 0 at its end. Returns nil on a read error.
    func read(into buffer: UnsafeMutableRawPointer, count: Int) -> Int? {
        guard let (chunk, n) = nextChunk(max: count) else { return nil }
        if n > 0 { buffer.copyMemory(from: chunk, byteCount: n) }
        return n
    }

    /// The file is read ahead in pieces into the hasher's buffers; a piece is hashed once all of
    /// it was sent — for a large file on a second thread, so that sending and hashing overlap.
    private var hashing: BackgroundHasher?
    private var piece: UnsafeMutableRawPointer?
    private var pieceCount = 0
    private var pieceSent = 0

    /// Up to `max` of the next bytes of the file, from the piece read ahead; (_, 0) at its end;
    /// nil on a read error or a file that shrank. The bytes count as sent.
    private func nextChunk(max: Int) -> (UnsafeRawPointer, Int)? {
        if failure != nil { return nil }
        let hashing = self.hashing ?? BackgroundHasher(fd: fd, prefix: 0, size: size)
        self.hashing = hashing
        if let piece, pieceSent == pieceCount {
            hashing.submit(piece, count: pieceCount)
            self.piece = nil
        }
        if piece == nil {
            let wanted = min(Int64(hashing.pieceSize), size - sent)
            guard wanted > 0 else { return (UnsafeRawPointer(bitPattern: 1)!, 0) }
            let buffer = hashing.acquire()
            let n = pread(fd, buffer, Int(wanted), off_t(range.lowerBound + sent))
            if n <= 0 {
                hashing.release(buffer)
                failure = n < 0 ? ("cannot read the file: \(FileSystem.errorText())", .local(errno: errno))
                                : ("the file shrank while it was sent", .sourceChanged)
                return nil
            }
            (piece, pieceCount, pieceSent) = (buffer, n, 0)
        }
        let n = min(max, pieceCount - pieceSent)
        let chunk = UnsafeRawPointer(piece! + pieceSent)
        pieceSent += n
        sent += Int64(n)
        throttle?.take(n)
        // The last piece goes to the hasher now: libcurl may not ask again once the size is sent.
        // Its bytes stay valid for the caller's copy: a buffer is only reused by the next acquire.
        if sent == size, let piece {
            hashing.submit(piece, count: pieceCount)
            self.piece = nil
        }
        return (chunk, n)
    }

    /// `file://`: copies the next piece into the temporary file; at the end verifies what was
    /// read (the session syncs the file as it moves it into place). A stepped remote: hands it the
    /// next bytes, and once it holds them all and they verified, has it place them.
    func step() -> TransferOutcome? {
        if case let .stepped(sink) = destination { return step(sink) }
        guard case let .file(target, staged) = destination else { return nil }
        guard let (chunk, n) = nextChunk(max: BackgroundHasher.bufferSize) else { return verify() }
        if n == 0 { return verify() }
        var offset = 0
        while offset < n {
            let w = write(target, chunk + offset, n - offset)
            if w < 0 {
                if errno == EINTR { continue }
                let code = errno
                // The remote's disk, not the local one: a remote failure, retried like any other.
                return .failed(TransferFailure(message: "cannot write the temporary upload \(LocalRoot.uploadPath)/\(staged) on the remote: \(FileSystem.errorText(code))",
                                               keepPartial: false, cause: .local(errno: code)))
            }
            offset += w
        }
        return nil
    }

    /// Set once a stepped remote holds every byte and they verified: what is left is placing them.
    private var verified = false

    private func step(_ sink: SteppedSink) -> TransferOutcome? {
        if !verified {
            let sending = sink.send { max in
                // Over a bandwidth limit: the engine steps the upload again once it may go on.
                guard throttle?.open != false, let (chunk, n) = nextChunk(max: max) else { return nil }
                return UnsafeRawBufferPointer(start: chunk, count: n)
            }
            if failure != nil { return verify() }
            switch sending {
            case .wait: return nil
            case let .failed(failure): return .failed(failure)
            case .done:
                let checked = verify()
                guard case .succeeded = checked else { return checked }
                verified = true
            }
        }
        switch sink.place() {
        case .wait: return nil
        case let .failed(failure): return .failed(failure)
        case .done: return .succeeded
        }
    }

    func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
        if let (message, cause) = failure {
            return .failed(TransferFailure(message: message, keepPartial: false, cause: cause))
        }
        guard code == CURLE_OK else {
            return .failed(TransferFailure(message: Curl.describe(code, errorText: errorText, headers: headers.headers), keepPartial: false,
                                           cause: Curl.cause(code, errorText: errorText, headers: headers.headers)))
        }
        let status = headers.headers.status
        guard (200..<300).contains(status) else {
            // A store that checks the body's hash refuses a file edited while it was sent (S3's
            // BadDigest): that is the file's change, sent again once hashed again.
            if let changed = Upload.change(fd: fd, from: stat) {
                return .failed(TransferFailure(message: "the file changed while it was sent (\(changed)); sending it again", keepPartial: false,
                                               cause: .sourceChanged))
            }
            let after = (status == 429 || status == 503) ? headers.headers.retryAfter.flatMap(ResponseHeaders.parseRetryAfter) : nil
            var message = "PUT refused: " + (explain?(status, answer.bytes) ?? "HTTP \(status) \(headers.headers.reason)".trimmingSpaces())
            if status == 413 { message += " (the server limits request bodies: nginx client_max_body_size, Apache LimitRequestBody)" }
            return .failed(TransferFailure(message: message, keepPartial: false,
                                           cause: .http(status: status), retryAfter: after))
        }
        return verify()
    }

    /// Exactly the hashed bytes were sent, and the file is still the one hashed.
    func verify() -> TransferOutcome {
        if let (message, cause) = failure {
            return .failed(TransferFailure(message: message, keepPartial: false, cause: cause))
        }
        if let changed = Upload.change(fd: fd, from: stat) {
            return .failed(TransferFailure(message: "the file changed while it was sent (\(changed)); sending it again", keepPartial: false,
                                           cause: .sourceChanged))
        }
        let hashing = self.hashing
        self.hashing = nil
        guard sent == size, let sha = size == 0 ? SHA256Hasher().finalize() : hashing?.finish(),
              expected == nil || sha == expected else {
            hashing?.cancel()
            return .failed(TransferFailure(message: "the bytes sent (\(sent) of \(size)) are not the ones hashed; sending it again",
                                           keepPartial: false, cause: .sourceChanged))
        }
        digest = sha
        return .succeeded
    }

    /// Lets go of the hashing and of the destination (a `file://` temporary file). Call once the
    /// upload is over; the local file is the placement's.
    func release() {
        hashing?.cancel()
        hashing = nil
        piece = nil
        closeDestination()
    }

    /// Closes a `file://` temporary file, once it was moved into place or given up.
    func closeDestination() {
        guard destinationOpen else { return }
        destinationOpen = false
        if case let .file(target, _) = destination { Glibc.close(target) }
    }
}

let uploadReadCallback: ferry_data_callback = { buffer, size, count, userdata in
    let upload = Unmanaged<Upload>.fromOpaque(userdata!).takeUnretainedValue()
    guard let buffer else { return Int(CURL_READFUNC_ABORT) }
    // Over a bandwidth limit: libcurl asks again once the engine continues the transfer.
    if upload.throttle?.shut() == true { return Int(CURL_READFUNC_PAUSE) }
    guard let n = upload.read(into: UnsafeMutableRawPointer(buffer), count: size * count) else { return Int(CURL_READFUNC_ABORT) }
    return n
}

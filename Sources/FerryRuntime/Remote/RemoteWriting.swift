import CCurl
import Glibc
import FerryCore

/// The write side of a remote, for push, shaped as an object store: place a file at its final name
/// atomically (a reader sees the old object or the new one, never part of one), write a small
/// object (the manifest) atomically and, where the remote can, conditionally; delete; say what is
/// at a name. How each is done is the remote's: WebDAV sends to a temporary name and moves it
/// (`HTTP/`), a local directory writes a temporary file and renames it (`File/`), S3 sends one
/// PUT or a multipart upload that survives a restart (`S3/`). "Not found" and "precondition
/// failed" come back as values. Paths are relative to the remote.
protocol RemoteWriting {
    /// Before the first file of a run is sent: what every write needs, checked once (SFTP: a
    /// server that can replace a file atomically, a staging directory that is one), so that a
    /// remote unfit for any write stops the run with one error instead of failing each file alike.
    func prepareToWrite() throws(FerryError)
    /// The steps that place `file` (open, owned by the placement from now on) at `file.destination`.
    func placement(for file: LocalUpload, journal: UploadJournal) throws(FerryError) -> Placement
    /// Puts `bytes` at `path` as one object that readers see whole or not at all (the manifest),
    /// if `condition` holds on the remote at that moment (atomically where the backend has
    /// `.conditionalWrites`; elsewhere the session compares just before it writes, which leaves a
    /// window another writer may fall into).
    func write(_ bytes: [UInt8], at path: RelativePath, condition: WriteCondition) throws(FerryError) -> WriteOutcome
    /// Puts `bytes` at `path`, the name of an immutable object named by its content (a metadata
    /// object). Readers check such an object against its name and look for it only once a
    /// published root names it, and the publisher lists it for collection before it goes, so it
    /// may be written in place; several threads may write objects at once. Returns true when the
    /// store's answer vouches for what it holds (its own checksum, equal to the bytes'); otherwise
    /// the session reads the object back.
    func writeObject(_ bytes: [UInt8], at path: RelativePath) throws(FerryError) -> Bool
    /// Removes the file at `path`; one already gone is not an error.
    func remove(_ path: RelativePath) throws(FerryError)
    /// Removes the directory at `path` if it holds nothing; returns whether it is gone (false: it
    /// holds something, or the remote cannot say what it holds). A remote without directories
    /// (S3) says true.
    func removeDirectoryIfEmpty(_ path: RelativePath) throws(FerryError) -> Bool
    /// What the remote says of the file at `path` (a `HEAD`, or a look at the directory), with the
    /// SHA-256 the store computed over it where it gives one.
    func inspect(_ path: RelativePath) -> RemoteInspection
    /// What the remote holds at `path`, read back and hashed by ferry (at most `limit` bytes and
    /// one more are read): the check of a store that computes no checksum.
    func readBack(_ path: RelativePath, limit: Int64) -> RemoteInspection
    /// Removes what a run that died left on the remote: temporary uploads of the session's tasks
    /// (those `running` were in flight; others may have left something) and a manifest being
    /// written. Multipart uploads a journal records are not touched: they resume.
    func removeLeftovers(tasks: [TransferTask], journaled: [JournaledUpload])
    /// Gives up an upload in parts the journal recorded (its file changed or is gone), so nothing
    /// is left pending on the remote.
    func abandon(_ upload: JournaledUpload)
}

extension RemoteWriting {
    func prepareToWrite() throws(FerryError) {}

    func writeObject(_ bytes: [UInt8], at path: RelativePath) throws(FerryError) -> Bool {
        _ = try write(bytes, at: path, condition: .none)
        return false
    }
}

/// What a write of a small object requires of what the remote holds at its name.
enum WriteCondition: Equatable {
    /// Whatever is there.
    case none
    /// Nothing is there (`If-None-Match: *`): the first manifest.
    case absent
    /// The object whose ETag is this (`If-Match`): the manifest this run read.
    case matches(String)
}

enum WriteOutcome: Equatable {
    case written
    /// The remote holds something else than the condition said: another writer.
    case preconditionFailed
}

/// One local file to place on a remote: the open file, what it held when it was hashed, and its task.
struct LocalUpload {
    let task: TransferTask
    /// What the file held when it was hashed: the content to place.
    let entry: ManifestEntry
    /// Where it goes under the remote (`RemoteLayout.location`): its path, or its content object.
    let destination: RelativePath
    let stat: LocalEntry
    /// false: the file is hashed as it is sent (`Upload.expected` is nil).
    let hashKnown: Bool
    /// Opened by the session (`LocalRoot.open`); the placement closes it.
    let file: Int32
    /// The bytes of the file that `entry` describes, when not all of it: a piece of a file stored
    /// as its pieces (`ContentIndex.Reference.storedAsPieces`).
    var range: Range<Int64>? = nil
}

/// The steps that put one local file at its final name, as the remote plans them: each is an
/// engine transfer, run when the previous one succeeded. WebDAV: PUT to a temporary name, then
/// MOVE; `file://`: write a temporary file, then rename it; S3: one PUT, or create → parts →
/// complete. The session drives it and checks the final name once it is placed.
protocol Placement: AnyObject {
    /// The next step, once `after` (nil at first) succeeded; nil when the file is at its final
    /// name. A throw fails the file (`cause` decides whether it is tried again).
    func next(after: Transfer?) throws(FerryError) -> Transfer?
    /// A step that failed: another one that mends it (WebDAV makes the collections a MOVE lacked,
    /// once), or nil: the placement failed.
    func mend(_ step: Transfer, _ failure: TransferFailure) -> Transfer?
    /// Bytes of the file sent so far this run.
    var sent: Int64 { get }
    /// The SHA-256 of the file as sent, when it was hashed as it went.
    var digest: SHA256Digest? { get }
    /// How the session makes sure the remote holds what was sent, once the file is placed.
    var check: PlacedCheck { get }
    /// The placement is over: the local file closes and, unless it was placed or `keep` (stopped:
    /// a later run resumes it), what it left on the remote goes.
    func end(placed: Bool, keep: Bool)
}

/// What a placement leaves the check after it: an answer of the store's that vouches for what it
/// holds (its own checksum over the bytes it keeps, equal to what was sent), or what to ask.
enum PlacedCheck {
    /// The store computed the SHA-256 of what it holds and it is what was sent: no request of its own.
    case vouched(RemoteFileState)
    /// Ask the remote what it holds (`inspect`); if it computes no checksum, read it back.
    case inspect
    /// The store is known to compute nothing here: read it back (`readBack`).
    case readBack
}

/// A placement of one upload, then at most one step that puts it at its final name (WebDAV's
/// `MOVE`; a `file://` rename, done at once): the shape every remote but S3's multipart has.
final class SinglePlacement: Placement {
    let upload: Upload
    private let file: Int32
    /// After the upload verified: the step that moves it into place, or nil (done, or done at once).
    private let finish: (Upload) throws(FerryError) -> Transfer?
    private let mender: ((Transfer, TransferFailure) -> Transfer?)?
    /// Removes what the upload left on the remote (a temporary name).
    private let cleanup: () -> Void
    /// What the upload's answer leaves the check after it (`check`); a throw fails the file (the
    /// store said it holds something else).
    private let vouch: (Upload) throws(FerryError) -> PlacedCheck
    private var finished = false
    private(set) var check = PlacedCheck.inspect

    init(upload: Upload, file: Int32, finish: @escaping (Upload) throws(FerryError) -> Transfer? = { _ in nil },
         mend: ((Transfer, TransferFailure) -> Transfer?)? = nil, cleanup: @escaping () -> Void = {},
         vouch: @escaping (Upload) throws(FerryError) -> PlacedCheck = { _ in .inspect }) {
        self.upload = upload
        self.file = file
        self.finish = finish
        mender = mend
        self.cleanup = cleanup
        self.vouch = vouch
    }

    func next(after step: Transfer?) throws(FerryError) -> Transfer? {
        guard let step else { return upload }
        if step === upload {
            defer { upload.closeDestination() }
            check = try vouch(upload)
            return try finish(upload)
        }
        // Moved after the upload's answer: that answer was about another name.
        if case .vouched = check { check = .inspect }
        return nil
    }

    func mend(_ step: Transfer, _ failure: TransferFailure) -> Transfer? { mender?(step, failure) }

    var sent: Int64 { upload.sent }
    var digest: SHA256Digest? { upload.digest }

    func end(placed: Bool, keep: Bool) {
        guard !finished else { return }
        finished = true
        upload.release()
        close(file)
        if !placed { cleanup() }
    }
}

/// A request without a file body that the engine runs for a push (a WebDAV `MOVE`, a `HEAD`, an
/// S3 multipart step): it sends `body` if any, keeps the answer's headers and the first `keep`
/// bytes of its body, and never follows a redirect (it would replay the request elsewhere). A
/// non-2xx answer fails it with the status as the cause, in the words of `explain` where the
/// remote's errors say more (S3's XML); a subclass may read the answer otherwise (`finish`).
class RemoteRequest: Transfer {
    let request: HTTPRequest
    let headers = HeaderSink()
    private let source: UploadBuffer?
    private let kept: BodyBuffer
    var explain: ((_ status: Int, _ body: [UInt8]) -> String?)?
    var cancelRequested = false
    var throttle: Throttle?

    init(_ request: HTTPRequest, body: [UInt8]? = nil, keep: Int = 0) {
        self.request = request
        source = body.map(UploadBuffer.init)
        kept = BodyBuffer(limit: keep)
    }

    var method: String { request.method }
    var url: String { request.url }
    /// The answer's body, up to `keep` bytes.
    var body: [UInt8] { kept.bytes }
    var status: Int { headers.headers.status }

    var mode: TransferMode { .curl }

    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        easy.configure(url: request.url, settings: request.settings, extraHeaders: request.headers)
        if method == "HEAD" { easy.set(CURLOPT_NOBODY, 1) } else if method != "GET" { easy.set(CURLOPT_CUSTOMREQUEST, method) }
        easy.set(CURLOPT_FOLLOWLOCATION, 0)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, keptBodyCallback)
        easy.set(CURLOPT_WRITEDATA, pointer: Unmanaged.passUnretained(kept).toOpaque())
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, headerCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: Unmanaged.passUnretained(headers).toOpaque())
        if let source {
            easy.upload(size: Int64(source.bytes.count))
            if method != "PUT" { easy.set(CURLOPT_CUSTOMREQUEST, method) }
            ferry_easy_setopt_datacb(easy.handle, CURLOPT_READFUNCTION, uploadBufferCallback)
            easy.set(CURLOPT_READDATA, pointer: Unmanaged.passUnretained(source).toOpaque())
        }
    }

    /// The failure of a request that did not get an answer.
    func transportFailure(_ code: CURLcode, _ errorText: String?) -> TransferOutcome {
        .failed(TransferFailure(message: "\(method) \(url): " + Curl.describe(code, errorText: errorText, headers: headers.headers),
                                keepPartial: false, cause: Curl.cause(code, errorText: errorText, headers: headers.headers)))
    }

    /// The failure of an answer that refused the request.
    func refusal() -> TransferOutcome {
        let h = headers.headers
        let said = explain?(h.status, body) ?? "HTTP \(h.status) \(h.reason)".trimmingSpaces()
        let after = (h.status == 429 || h.status == 503) ? h.retryAfter.flatMap(ResponseHeaders.parseRetryAfter) : nil
        return .failed(TransferFailure(message: "\(method) \(url) was refused: \(said)", keepPartial: false, cause: .http(status: h.status),
                                       retryAfter: after))
    }

    func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
        guard code == CURLE_OK else { return transportFailure(code, errorText) }
        return (200..<300).contains(status) ? .succeeded : refusal()
    }
}

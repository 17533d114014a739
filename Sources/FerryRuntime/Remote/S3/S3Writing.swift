import CCurl
import Glibc
import FerryCore

/// The write side of an S3 remote. An object appears whole or not at all, so a file goes straight
/// to its final key: one `PUT` up to `upload-part-size`, a multipart upload above it
/// (`S3Multipart`). Every body is signed with its real SHA-256 and carries it as
/// `x-amz-checksum-sha256`, which the store checks (a file that changed while it was sent is
/// refused there, and again by the upload's own hash); the object keeps the file's SHA-256 as
/// metadata (`x-amz-meta-sha256`), which the check after placing reads back. The manifest is
/// written conditionally: `If-Match` on the ETag ferry last read, `If-None-Match: *` for the first.
extension S3Remote: RemoteWriting {

    /// The headers that name an object's content: checked by the store, kept as its metadata.
    static func contentHeaders(_ sha256: SHA256Digest) -> [(String, String)] {
        [("x-amz-checksum-sha256", sha256.base64), ("x-amz-meta-sha256", sha256.hex)]
    }

    /// Words for an S3 error answer about `key`.
    func explainer(_ key: String) -> (Int, [UInt8]) -> String? {
        { [bucket, region, source = signer.credentials.source] status, body in
            S3Errors.explain(status: status, body: body, bucket: bucket, key: key, region: region, credentials: source)?.text
        }
    }

    func placement(for file: LocalUpload, journal: UploadJournal) throws(FerryError) -> Placement {
        guard file.hashKnown else {
            throw FerryError(.remote, "\(Printable.name(file.entry.path.string)) would go to S3 without its hash known first", cause: .sourceChanged)
        }
        let key = self.key(file.destination.string)
        if file.range == nil && file.stat.size > partSize {
            return S3Multipart(remote: self, file: file, key: key, journal: journal)
        }
        let sha = file.entry.sha256
        let upload = Upload(task: file.task, entry: file.entry, stat: file.stat, expecting: sha, file: file.file, range: file.range,
                            destination: .request(try request("PUT", key: key, headers: S3Remote.contentHeaders(sha), payloadHash: sha.hex)))
        upload.explain = explainer(key)
        // A store that computes the SHA-256 of what it keeps answers with it: equal to what was
        // sent, it stands for what is at the key (no request after it); another fails the file.
        // Without one, the session asks (a HEAD), and reads the object back if that says nothing.
        return SinglePlacement(upload: upload, file: file.file, vouch: { upload throws(FerryError) in
            let answer = upload.responseHeaders
            switch S3Checksum.verdict(answer, sha256: sha) {
            case .none: return .inspect
            case let .differs(said): throw S3Checksum.mismatch(key, said: said)
            case .matches:
                guard let etag = answer.etag else { return .inspect }
                return .vouched(RemoteFileState(exists: true, size: upload.sent, validator: RemoteFileState.opaque(etag), sha256: sha, verified: .storeChecksum))
            }
        })
    }

    func write(_ bytes: [UInt8], at path: RelativePath, condition: WriteCondition) throws(FerryError) -> WriteOutcome {
        try put(bytes, at: path, condition: condition).outcome
    }

    func writeObject(_ bytes: [UInt8], at path: RelativePath) throws(FerryError) -> Bool {
        let (outcome, vouched) = try put(bytes, at: path, condition: .none)
        // Unconditional: a store that says a condition failed answers nothing ferry asked.
        guard outcome == .written else { throw .remote("the store refused to write \(Printable.name(key(path.string))) as if a condition had failed, though none was set") }
        return vouched
    }

    /// One PUT of a small object, if `condition` holds; `vouched` when the store answered with the
    /// SHA-256 it computed and it is the bytes'. A store that says it computed another throws.
    private func put(_ bytes: [UInt8], at path: RelativePath, condition: WriteCondition) throws(FerryError) -> (outcome: WriteOutcome, vouched: Bool) {
        let key = self.key(path.string)
        let sha = SHA256Hasher.digest(of: bytes)
        var headers = S3Remote.contentHeaders(sha)
        switch condition {
        case .none: break
        case .absent: headers.append(("If-None-Match", "*"))
        case let .matches(etag): headers.append(("If-Match", etag))
        }
        let answer = try S3Exchange.perform(try request("PUT", key: key, headers: headers, payloadHash: sha.hex), body: bytes,
                                            what: "write \(Printable.name(key))")
        switch answer.headers.status {
        case 200..<300:
            switch S3Checksum.verdict(answer.headers, sha256: sha) {
            case .matches: return (.written, true)
            case .none: return (.written, false)
            case let .differs(said): throw S3Checksum.mismatch(key, said: said)
            }
        // 409: a conditional write that met another one in flight (AWS's ConditionalRequestConflict).
        case 412, 409: return (.preconditionFailed, false)
        default: throw S3Errors.failure(answer, doing: "write \(Printable.name(key))", bucket: bucket, key: key, region: region, credentials: signer.credentials.source)
        }
    }

    func remove(_ path: RelativePath) throws(FerryError) {
        let key = self.key(path.string)
        let answer = try S3Exchange.perform(try request("DELETE", key: key), what: "delete \(Printable.name(key))")
        guard (200..<300).contains(answer.headers.status) || answer.headers.status == 404 else {
            throw S3Errors.failure(answer, doing: "delete \(Printable.name(key))", bucket: bucket, key: key, region: region, credentials: signer.credentials.source)
        }
    }

    /// S3 has no directories: nothing to remove.
    func removeDirectoryIfEmpty(_ path: RelativePath) throws(FerryError) -> Bool { true }

    func inspect(_ path: RelativePath) -> RemoteInspection {
        let key = self.key(path.string)
        let head: HTTPRequest
        do { head = try request("HEAD", key: key, headers: [("x-amz-checksum-mode", "ENABLED")]) } catch { return .failed(error) }
        let probe = RemoteProbe(path: path, request: head) { headers in
            // Only a whole-object checksum the store computed: a multipart one (`-N`, COMPOSITE)
            // is not the file's hash, and the `x-amz-meta-sha256` ferry stored is ferry's own word.
            S3Checksum.whole(headers.extensions["x-amz-checksum-sha256"], type: headers.extensions["x-amz-checksum-type"])
        }
        probe.explain = explainer(key)
        return .probe(probe)
    }

    func readBack(_ path: RelativePath, limit: Int64) -> RemoteInspection {
        let key = self.key(path.string)
        do {
            let probe = RemoteProbe(readingBack: path, request: try request("GET", key: key), limit: limit)
            probe.explain = explainer(key)
            return .probe(probe)
        } catch {
            return .failed(error)
        }
    }

    /// Multipart uploads started without being recorded (the store's answer lost, or the run died
    /// before the task table had it) are found by listing the uploads at the keys of the tasks not
    /// done, and aborted; those the journal records resume.
    func removeLeftovers(tasks: [TransferTask], journaled: [JournaledUpload]) {
        let kept = Set(journaled.map(\.uploadID))
        // Any task not done may have had an upload made whose answer was lost (the run died, or
        // the connection did and the file was tried again).
        for task in tasks where task.state != .done && (task.size ?? 0) > partSize {
            let key = self.key(task.path.string)
            guard let answer = try? S3Exchange.perform(request("GET", key: nil, query: [("prefix", key), ("uploads", "")]), what: "list uploads"),
                  answer.headers.status == 200 else { continue }
            for upload in S3XML.blocks("Upload", in: answer.body) where S3XML.element("Key", in: upload) == key {
                if let id = S3XML.element("UploadId", in: upload), !kept.contains(id) { abort(key: key, uploadID: id) }
            }
        }
    }

    func abandon(_ upload: JournaledUpload) { abort(key: key(upload.path.string), uploadID: upload.uploadID) }

    /// Aborts a multipart upload (best effort: an upload the store no longer has is gone already).
    func abort(key: String, uploadID: String) {
        _ = try? S3Exchange.perform(request("DELETE", key: key, query: [("uploadId", uploadID)]), what: "abort an upload")
    }
}

/// A file above `upload-part-size`, sent as an S3 multipart upload: create → for each part, its
/// SHA-256 (`RangeHash`), then its `PUT` signed and checked by it → complete. The upload's id and
/// each part the store acknowledged (number, size, ETag, hash) go into the task's row as they
/// happen (`UploadJournal`), so a run after `kill -9` asks the store which parts it holds
/// (`ListParts`), sends only the others and completes. An upload recorded for other content (the
/// file changed) is aborted and a new one made.
final class S3Multipart: Placement {
    private let remote: S3Remote
    private let file: LocalUpload
    private let key: String
    private let journal: UploadJournal
    private let partSize: Int64
    private var uploadID: String?
    /// Parts the store holds as recorded, by number.
    private var held: [Int: UploadedPart] = [:]
    /// Parts the journal recorded (from an earlier run), until the store confirmed them.
    private var recorded: [Int: UploadedPart] = [:]
    private var ended = false
    /// Bytes of the parts sent this run, and the part being sent.
    private var partsSent: Int64 = 0
    private var inFlight: Upload?
    var sent: Int64 { partsSent + (inFlight?.sent ?? 0) }
    var digest: SHA256Digest? { nil }
    private(set) var check = PlacedCheck.readBack

    init(remote: S3Remote, file: LocalUpload, key: String, journal: UploadJournal) {
        self.remote = remote
        self.file = file
        self.key = key
        self.journal = journal
        // S3 allows 10,000 parts: a larger file gets larger parts (whole MiB).
        let size = file.stat.size
        let least = (size + 9_999) / 10_000
        partSize = max(remote.partSize, ((least + (1 << 20) - 1) >> 20) << 20)
    }

    private var size: Int64 { file.stat.size }
    private var partCount: Int { Int((size + partSize - 1) / partSize) }
    /// What the upload is for: another content or part size is another upload.
    private var content: String { JournaledUpload.content(sha256: file.entry.sha256, partSize: partSize) }
    private func range(_ number: Int) -> Range<Int64> {
        let start = Int64(number - 1) * partSize
        return start..<min(size, start + partSize)
    }

    /// One multipart request; `accepting` are statuses besides 2xx that the step reads itself.
    private final class Step: RemoteRequest {
        enum Kind { case create, list, complete, head }
        let kind: Kind
        let accepting: Set<Int>
        init(_ kind: Kind, _ request: HTTPRequest, body: [UInt8]? = nil, accepting: Set<Int> = []) {
            self.kind = kind
            self.accepting = accepting
            super.init(request, body: body, keep: 4 << 20)
        }
        override func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
            guard code == CURLE_OK else { return transportFailure(code, errorText) }
            return (200..<300).contains(status) || accepting.contains(status) ? .succeeded : refusal()
        }
    }

    /// A part's hash, then its upload.
    private final class PartHash {
        let number: Int
        let hash: RangeHash
        init(_ number: Int, _ hash: RangeHash) { self.number = number; self.hash = hash }
    }
    private var hashing: PartHash?
    private var sending: (number: Int, sha256: SHA256Digest)?

    private func step(_ kind: Step.Kind, method: String, query: [(String, String)], headers: [(String, String)] = [],
                      body: [UInt8]? = nil, accepting: Set<Int> = []) throws(FerryError) -> Step {
        let payload = body.map { SigV4.sha256Hex($0) } ?? SigV4.emptyPayload
        let s = Step(kind, try remote.request(method, key: key, query: query, headers: headers, payloadHash: payload), body: body, accepting: accepting)
        s.explain = remote.explainer(key)
        return s
    }

    /// The parts carry their SHA-256 (`x-amz-checksum-sha256`), which S3 accepts only when the
    /// upload says so from the start, and wants again in the completion.
    private func create() throws(FerryError) -> Step {
        try step(.create, method: "POST", query: [("uploads", "")],
             headers: [("x-amz-checksum-algorithm", "SHA256"), ("x-amz-meta-sha256", file.entry.sha256.hex)])
    }

    private func listParts(after marker: Int) throws(FerryError) -> Step {
        var query = [("uploadId", uploadID!), ("max-parts", "1000")]
        if marker > 0 { query.append(("part-number-marker", String(marker))) }
        return try step(.list, method: "GET", query: query, accepting: [404])
    }

    /// The part number the last page of `ListParts` ended at (0: none asked yet).
    private var listedUpTo = 0

    /// The page of `ListParts` after a truncated one, which named `next` as where it ended. The
    /// store's word drives this loop, so it must advance: each page must end past the one before,
    /// and none of this upload's parts lies past `partCount` (at most 10,000), which bounds the
    /// pages. A store that says "truncated" without moving on (one after `kill -9` kept a push
    /// asking forever) fails the file, and with it the upload (the next run starts a new one).
    private func nextListPage(after previous: Int, next: Int) throws(FerryError) -> Transfer {
        guard next > previous else {
            let page = previous == 0 ? "its first page" : "the page after part \(previous)"
            throw FerryError(.remote, "the store's list of the parts of \(Printable.name(key)) does not advance: \(page) says there is more, "
                             + "after part \(next); the store (s3-endpoint) answers ListParts wrongly: it was not asked again, the upload is given up and the next run starts it anew",
                             cause: .unusable)
        }
        // Parts past this upload's last are none of its own.
        guard next < partCount else { return try nextPart() }
        listedUpTo = next
        return try listParts(after: next)
    }

    /// The next part to send (its hash first), or the completion once the store holds them all.
    private func nextPart() throws(FerryError) -> Transfer {
        guard let number = (1...partCount).first(where: { held[$0] == nil }) else {
            var xml = "<CompleteMultipartUpload>"
            for number in 1...partCount {
                let part = held[number]!
                xml += "<Part><PartNumber>\(number)</PartNumber><ETag>\(S3XML.escaped(part.etag))</ETag>"
                    + "<ChecksumSHA256>\(part.sha256.base64)</ChecksumSHA256></Part>"
            }
            xml += "</CompleteMultipartUpload>"
            return try step(.complete, method: "POST", query: [("uploadId", uploadID!)], body: Array(xml.utf8))
        }
        let hash = RangeHash(fd: file.file, range: range(number))
        hashing = PartHash(number, hash)
        return hash
    }

    func next(after previous: Transfer?) throws(FerryError) -> Transfer? {
        guard let previous else { return try begin() }
        switch previous {
        case let s as Step: return try answered(s)
        case let hash as RangeHash: return try hashed(hash)
        case let upload as Upload: return try sent(upload)
        default: return nil
        }
    }

    /// The first request: resume the journal's upload when it is for this content (ListParts), else create one.
    private func begin() throws(FerryError) -> Transfer {
        if let journaled = try journal.load() {
            if journaled.content == content {
                uploadID = journaled.uploadID
                recorded = Dictionary(journaled.parts.map { ($0.number, $0) }, uniquingKeysWith: { _, b in b })
                listedUpTo = 0
                return try listParts(after: 0)
            }
            remote.abandon(journaled)
            try journal.clear()
        }
        return try create()
    }

    /// After a multipart request: the next one, or nil once the upload's check is known.
    private func answered(_ s: Step) throws(FerryError) -> Transfer? {
        switch s.kind {
        case .create:
            guard let id = S3XML.element("UploadId", in: s.body) else {
                throw FerryError(.remote, "the store started a multipart upload of \(Printable.name(key)) without saying its id", cause: .http(status: 502))
            }
            uploadID = id
            try journal.begin(uploadID: id, content: content)
            return try nextPart()
        case .list:
            return try listed(s)
        case .complete:
            return try completed(s)
        case .head:
            let h = s.headers.headers
            check = try verdict(h.extensions["x-amz-checksum-sha256"], type: h.extensions["x-amz-checksum-type"], etag: h.etag, size: h.contentLength)
                ?? .readBack
            return nil
        }
    }

    /// A page of `ListParts`: which recorded parts the store holds; then the next page or part, or a new upload.
    private func listed(_ s: Step) throws(FerryError) -> Transfer {
        if s.status == 404 {
            // The store no longer has it (aborted, expired, or completed by a run whose
            // answer was lost): a new upload.
            try journal.clear()
            (uploadID, recorded) = (nil, [:])
            return try create()
        }
        var last = 0
        for block in S3XML.blocks("Part", in: s.body) {
            guard let number = S3XML.element("PartNumber", in: block).flatMap({ Int($0) }) else { continue }
            last = max(last, number)
            let etag = S3XML.element("ETag", in: block)
            let size = S3XML.element("Size", in: block).flatMap { Int64($0) }
            // Only a part recorded as acknowledged, with the same ETag and size, counts:
            // one the store took as the run died is sent again.
            if let mine = recorded[number], mine.etag == etag, mine.size == size, mine.size == range(number).count64 {
                held[number] = mine
            }
        }
        guard S3XML.element("IsTruncated", in: s.body) == "true" else { return try nextPart() }
        return try nextListPage(after: listedUpTo, next: S3XML.element("NextPartNumberMarker", in: s.body).flatMap { Int($0) } ?? last)
    }

    /// The completion's answer: a failure in its body throws; its checksum settles the check, else a HEAD asks.
    private func completed(_ s: Step) throws(FerryError) -> Transfer? {
        // The store answers 200 before it knows, and puts a failure in the body.
        if S3XML.element("Code", in: s.body) != nil, S3XML.blocks("Error", in: s.body).count > 0 {
            let why = S3Errors.explain(status: 500, body: s.body, bucket: remote.bucket, key: key, region: remote.region, credentials: remote.signer.credentials.source)?.text ?? "an error"
            throw FerryError(.remote, "completing the upload of \(Printable.name(key)) failed: \(why)", cause: .http(status: 500))
        }
        try journal.clear()
        uploadID = nil
        // The completion's answer says what the store computed over the parts it joined
        // (AWS, SeaweedFS); without it, a HEAD asks.
        if let said = try verdict(S3XML.element("ChecksumSHA256", in: s.body), type: S3XML.element("ChecksumType", in: s.body),
                                  etag: S3XML.element("ETag", in: s.body), size: nil) {
            check = said
            return nil
        }
        return try step(.head, method: "HEAD", query: [], headers: [("x-amz-checksum-mode", "ENABLED")])
    }

    /// A part's hash is known: its upload, signed and checked by it (nil for a hash not this part's).
    private func hashed(_ hash: RangeHash) throws(FerryError) -> Transfer? {
        guard let part = hashing, part.hash === hash, let sha = hash.digest else { return nil }
        hashing = nil
        sending = (part.number, sha)
        let upload = Upload(task: file.task, entry: file.entry, stat: file.stat, expecting: sha, file: file.file, range: range(part.number),
                            destination: .request(try remote.request("PUT", key: key,
                                                                 query: [("partNumber", String(part.number)), ("uploadId", uploadID!)],
                                                                 headers: [("x-amz-checksum-sha256", sha.base64)], payloadHash: sha.hex)))
        upload.explain = remote.explainer(key)
        inFlight = upload
        return upload
    }

    /// A part sent: recorded as held when the store gave its ETag and the SHA-256 sent; then the next part.
    private func sent(_ upload: Upload) throws(FerryError) -> Transfer {
        defer { upload.release() }
        inFlight = nil
        guard let (number, sha) = sending, let etag = upload.responseHeaders.etag else {
            throw FerryError(.remote, "the store took a part of \(Printable.name(key)) without giving its ETag", cause: .http(status: 502))
        }
        sending = nil
        // A store that says it computed another SHA-256 over the part than was sent holds
        // other bytes: the file fails (the part goes with the upload).
        if let said = upload.responseHeaders.extensions["x-amz-checksum-sha256"], said != sha.base64 {
            throw S3Checksum.mismatch(key, said: "part \(number): \(Printable.name(said))")
        }
        partsSent += upload.sent
        let part = UploadedPart(number: number, size: upload.range.count64, etag: etag, sha256: sha)
        try journal.record(part)
        held[number] = part
        return try nextPart()
    }

    /// What the store says it computed over the whole upload (`value`, `type`), against the file's
    /// SHA-256 and the SHA-256 of each part sent: the placement's check when it vouches, nil when
    /// the store said nothing; a throw when it says the upload holds something else.
    private func verdict(_ value: String?, type: String?, etag: String?, size: Int64?) throws(FerryError) -> PlacedCheck? {
        let parts = (1...partCount).compactMap { held[$0]?.sha256 }
        switch S3Checksum.verdict(value, type: type, sha256: file.entry.sha256, parts: parts) {
        case .none: return nil
        case let .differs(said): throw S3Checksum.mismatch(key, said: said)
        case .matches:
            if let size, size != self.size {
                throw FerryError(.remote, "the store holds \(size) bytes at \(Printable.name(key)), not the \(self.size) sent", cause: .contentMismatch(afterResume: false))
            }
            return .vouched(RemoteFileState(exists: true, size: self.size, validator: etag.map(RemoteFileState.opaque), sha256: file.entry.sha256,
                                            verified: .storeChecksum))
        }
    }

    func mend(_ step: Transfer, _ failure: TransferFailure) -> Transfer? { nil }

    func end(placed: Bool, keep: Bool) {
        guard !ended else { return }
        ended = true
        // A part that failed or stopped: its hashing and buffers go.
        inFlight?.release()
        close(file.file)
        // Failed for good: the upload goes, so nothing is left pending on the store. Stopped, or
        // failed in a way the next try resumes: it stays, recorded, for that try.
        if !placed && !keep, let uploadID {
            remote.abort(key: key, uploadID: uploadID)
            try? journal.clear()
        }
    }
}

extension Range where Bound == Int64 {
    var count64: Int64 { upperBound - lowerBound }
}

/// What an S3 store says it computed over an object: `x-amz-checksum-sha256` (or a completion's
/// `ChecksumSHA256`) with `x-amz-checksum-type`. Stores say it in several dialects, and each is
/// taken for what it is:
/// - the whole object's SHA-256 (a single PUT; a multipart upload of type `FULL_OBJECT`);
/// - a multipart upload's composite: the SHA-256 of its parts' SHA-256s joined, with `-N` (the part
///   count) after it and type `COMPOSITE` (AWS, SeaweedFS), or without either (moto).
/// Only a value that equals what ferry computed of the bytes it sent vouches; any other is the
/// store saying it holds something else.
enum S3Checksum {
    enum Verdict: Equatable {
        /// The store said nothing.
        case none
        case matches
        /// What the store said, to be shown.
        case differs(String)
    }

    /// The store's `value` and `type` against a file with `sha256`, sent in parts whose SHA-256s are
    /// `parts` (empty: one PUT).
    static func verdict(_ value: String?, type: String?, sha256: SHA256Digest, parts: [SHA256Digest]) -> Verdict {
        guard let value, !value.isEmpty else { return .none }
        let said = Printable.name(value) + (type.map { " (\(Printable.name($0)))" } ?? "")
        var text = Substring(value)
        var count: Int?
        if let dash = text.lastIndex(of: "-") {
            guard let n = Int(text[text.index(after: dash)...]), n > 0 else { return .differs(said) }
            count = n
            text = text[..<dash]
        }
        guard let bytes = Base64.decode(String(text)), bytes.count == 32 else { return .differs(said) }
        let digest = bytes.withUnsafeBytes { SHA256Digest(bytes: $0) }
        let kind = type?.uppercased()
        if parts.isEmpty {
            return count == nil && kind != "COMPOSITE" && digest == sha256 ? .matches : .differs(said)
        }
        if kind == "FULL_OBJECT" { return count == nil && digest == sha256 ? .matches : .differs(said) }
        if let count, count != parts.count { return .differs(said) }
        if digest == composite(parts) { return .matches }
        // A store that reports the whole object's hash for a multipart upload without saying so.
        return count == nil && kind == nil && digest == sha256 ? .matches : .differs(said)
    }

    /// What the headers of a single PUT's answer say the store computed, against the body's SHA-256.
    static func verdict(_ headers: ResponseHeaders, sha256: SHA256Digest) -> Verdict {
        verdict(headers.extensions["x-amz-checksum-sha256"], type: headers.extensions["x-amz-checksum-type"], sha256: sha256, parts: [])
    }

    /// The SHA-256 of the parts' SHA-256s joined: what S3 reports for a multipart upload.
    static func composite(_ parts: [SHA256Digest]) -> SHA256Digest {
        SHA256Hasher.digest(of: parts.flatMap(\.bytes))
    }

    /// A whole-object checksum (`HEAD`): the SHA-256 it names, or nil for none or a multipart one.
    static func whole(_ value: String?, type: String?) -> SHA256Digest? {
        guard let value, !value.contains("-"), type.map({ $0.uppercased() == "FULL_OBJECT" }) ?? true,
              let bytes = Base64.decode(value), bytes.count == 32 else { return nil }
        return bytes.withUnsafeBytes { SHA256Digest(bytes: $0) }
    }

    /// The failure of a file the store says it holds otherwise than sent.
    static func mismatch(_ key: String, said: String) -> FerryError {
        FerryError(.remote, "the store says it computed SHA-256 \(said) over what it holds at \(Printable.name(key)), which is not what was sent",
                   hint: "the store kept other bytes than it was sent: the file is not listed, and the next run sends it again",
                   cause: .contentMismatch(afterResume: false))
    }
}

/// The few things ferry reads of S3's XML answers: the text of an element, the blocks of a
/// repeated one. Names are matched exactly, without namespace prefixes (S3 uses none).
enum S3XML {
    /// The text of the first `<name>…</name>`, entities decoded.
    static func element(_ name: String, in body: [UInt8]) -> String? {
        element(name, in: String(decoding: body, as: UTF8.self)[...])
    }

    /// Searched as bytes, as `blocks` is: each `<Contents>` of a listing page asks for its Key,
    /// ETag and Size, and a search over `Character`s cost 0.4 s per 10,000 keys.
    static func element(_ name: String, in text: Substring) -> String? {
        let open = Array("<\(name)>".utf8), close = Array("</\(name)>".utf8)
        var copy = text
        let span = copy.withUTF8 { bytes -> (Int, Int)? in
            guard let o = find(open, in: bytes, from: 0), let c = find(close, in: bytes, from: o + open.count) else { return nil }
            return (o + open.count, c)
        }
        guard let span else { return nil }
        let utf8 = text.utf8
        return unescaped(Substring(utf8[utf8.index(utf8.startIndex, offsetBy: span.0)..<utf8.index(utf8.startIndex, offsetBy: span.1)]))
    }

    /// Each `<name>…</name>` block's inside. Searched as bytes (a listing page of 1,000 keys is
    /// 300 KB: a search over `Character`s cost a second per 10,000 keys).
    static func blocks(_ name: String, in body: [UInt8]) -> [Substring] {
        let text = String(decoding: body, as: UTF8.self)
        let open = Array("<\(name)>".utf8), close = Array("</\(name)>".utf8)
        var spans: [(Int, Int)] = []
        var copy = text
        copy.withUTF8 { bytes in
            var at = 0
            while let o = find(open, in: bytes, from: at), let c = find(close, in: bytes, from: o + open.count) {
                spans.append((o + open.count, c))
                at = c + close.count
            }
        }
        let utf8 = text.utf8
        return spans.map { lower, upper in
            Substring(utf8[utf8.index(utf8.startIndex, offsetBy: lower)..<utf8.index(utf8.startIndex, offsetBy: upper)])
        }
    }

    /// Where `needle` first starts in `bytes` at or after `start`.
    private static func find(_ needle: [UInt8], in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        var i = start
        while i + needle.count <= bytes.count {
            if bytes[i] == needle[0] && memcmp(bytes.baseAddress! + i, needle, needle.count) == 0 { return i }
            i += 1
        }
        return nil
    }

    /// XML's five named entities and numeric references (`&#34;`, `&#x22;`: SeaweedFS quotes ETags so).
    static func unescaped(_ text: Substring) -> String {
        guard text.contains("&") else { return String(text) }
        let named: [Substring: Character] = ["quot": "\"", "apos": "'", "lt": "<", "gt": ">", "amp": "&"]
        var out = ""
        var rest = text
        while let amp = rest.firstIndex(of: "&") {
            out += rest[..<amp]
            guard let semi = rest[amp...].firstIndex(of: ";"), rest.distance(from: amp, to: semi) <= 10 else {
                out += rest[amp...]
                return out
            }
            let name = rest[rest.index(after: amp)..<semi]
            var decoded: Character?
            if let c = named[name] {
                decoded = c
            } else if name.hasPrefix("#") {
                let digits = name.dropFirst()
                let value = digits.hasPrefix("x") || digits.hasPrefix("X") ? UInt32(digits.dropFirst(), radix: 16) : UInt32(digits)
                decoded = value.flatMap(Unicode.Scalar.init).map(Character.init)
            }
            if let decoded { out.append(decoded) } else { out += rest[amp...semi] }
            rest = rest[rest.index(after: semi)...]
        }
        return out + rest
    }

    static func escaped(_ text: String) -> String {
        text.replacing("&", with: "&amp;").replacing("<", with: "&lt;").replacing(">", with: "&gt;")
            .replacing("\"", with: "&quot;")
    }
}

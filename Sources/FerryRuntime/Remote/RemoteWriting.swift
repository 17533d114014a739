import CCurl
import Glibc
import Synchronization
import FerryCore

/// The write side of a remote, for push: bytes are placed under a temporary name in the remote's
/// `.ferry/upload/`, then moved to their final name, so a reader of the remote never sees a
/// partial file under a final name. WebDAV over HTTP(S) (`PUT`, `MOVE` with `Overwrite: T`,
/// `MKCOL`, `DELETE`, `PROPFIND`) and a local directory for `file://` (`FileRemote`: write, fsync,
/// rename, fsync the directory, never through a symlink). Paths are relative to the remote;
/// directories are made as needed.
protocol RemoteWriting {
    /// The transfer that sends the open local file `file` (as `entry` when it looked like `stat`;
    /// its hash is known unless `hashKnown` is false, and then taken as it is sent) to a temporary
    /// upload of `task` on the remote.
    func upload(task: TransferTask, entry: ManifestEntry, stat: LocalEntry, hashKnown: Bool, file: Int32) throws(FerryError) -> Upload
    /// Moves an upload that verified to its final name (`upload.entry.path`), with the entry's
    /// mode and mtime where the remote keeps them: the WebDAV `MOVE` as an engine transfer to run,
    /// or nil when it was done at once (a local directory).
    func place(_ upload: Upload) throws(FerryError) -> RemoteMove?
    /// Removes what an upload of `task` left in the remote's `.ferry/upload/` (stopped or failed).
    func removeUpload(task: Int64)
    /// Removes what a run that died left on the remote: uploads of the session's tasks (those it
    /// had `running` at least; any of `all` where the remote can list its uploads) and a manifest
    /// that was being published.
    func removeLeftovers(running: [Int64], all: Set<Int64>)
    /// Puts `bytes` at `path` so that a reader sees the old file or the new one, never part of
    /// one (the manifest): a temporary name, then a move.
    func publish(_ bytes: [UInt8], at path: RelativePath) throws(FerryError)
    /// Removes the file at `path`; one already gone is not an error.
    func remove(_ path: RelativePath) throws(FerryError)
    /// Removes the directory at `path` if it holds nothing; returns whether it is gone (false: it
    /// holds something, or the remote cannot say what it holds).
    func removeDirectoryIfEmpty(_ path: RelativePath) throws(FerryError) -> Bool
    /// Makes the directories `path` needs (after a move was refused for want of them).
    func makeCollections(for path: RelativePath) throws(FerryError)
    /// What the remote says of the file at `path` (a `HEAD`, or a look at the directory).
    func inspect(_ path: RelativePath) -> RemoteInspection
}

extension HTTPRemote: RemoteWriting {
    /// Where the upload of a task waits on the remote until it is moved into place.
    static func temporaryName(task: Int64) -> RelativePath { RelativePath(trusted: LocalRoot.uploadPath + "/\(task)") }
    static let temporaryManifest = RelativePath(trusted: ".ferry/manifest.json.new")

    func upload(task: TransferTask, entry: ManifestEntry, stat: LocalEntry, hashKnown: Bool, file: Int32) throws(FerryError) -> Upload {
        let temporary = HTTPRemote.temporaryName(task: task.id)
        // nginx and Apache answer 409 to a PUT whose collection is missing: made first, once per run.
        try makeCollections(for: temporary)
        return Upload(task: task, entry: entry, stat: stat, hashKnown: hashKnown, file: file,
                      destination: .http(url: base.url(for: temporary), settings: settings))
    }

    func place(_ upload: Upload) throws(FerryError) -> RemoteMove? {
        RemoteMove(task: upload.task, url: base.url(for: HTTPRemote.temporaryName(task: upload.task.id)),
                   destination: base.url(for: upload.entry.path), settings: settings)
    }

    func removeUpload(task: Int64) { try? remove(HTTPRemote.temporaryName(task: task)) }

    func inspect(_ path: RelativePath) -> RemoteInspection {
        .probe(RemoteProbe(path: path, url: base.url(for: path), settings: settings))
    }

    func removeLeftovers(running: [Int64], all: Set<Int64>) {
        // An upload's name is its task's: a PUT of a task that was not running replaces it.
        for task in running { removeUpload(task: task) }
        try? remove(HTTPRemote.temporaryManifest)
    }

    func publish(_ bytes: [UInt8], at path: RelativePath) throws(FerryError) {
        let temporary = HTTPRemote.temporaryManifest
        try withCollections(for: temporary) { () throws(FerryError) -> Int in
            try request("PUT", temporary, body: bytes)
        }
        try withCollections(for: path) { () throws(FerryError) -> Int in
            try request("MOVE", temporary, headers: ["Destination: \(base.url(for: path))", "Overwrite: T"])
        }
    }

    func remove(_ path: RelativePath) throws(FerryError) {
        let status = try request("DELETE", path)
        guard (200..<300).contains(status) || status == 404 else { throw failure("DELETE", path, status) }
    }

    /// Whether a write to `path` refused with `status` may have wanted its collections: 409
    /// (Conflict) from nginx and RFC 4918, 500 from Apache's MOVE ("Could not rename resource").
    static func mayLackCollections(_ path: RelativePath, status: Int) -> Bool {
        status == 409 || (status == 500 && !path.ancestors.isEmpty)
    }

    /// Runs a request that needs `path`'s directory; when it may have lacked them
    /// (`mayLackCollections`), makes the collections, from the top, and tries once more.
    private func withCollections(for path: RelativePath, _ send: () throws(FerryError) -> Int) throws(FerryError) {
        var status = try send()
        if HTTPRemote.mayLackCollections(path, status: status) {
            dav.forget(path.ancestors)
            try makeCollections(for: path)
            status = try send()
        }
        guard (200..<300).contains(status) else { throw failure(status == 409 ? "MKCOL" : "write", path, status) }
    }

    /// Makes the collections above `path` that are not known to exist, from the top. When even
    /// the first one has no parent (409), the remote's own directory is missing: it is made too,
    /// as a `file://` push makes its directory.
    func makeCollections(for path: RelativePath) throws(FerryError) {
        for directory in path.ancestors.reversed() where !dav.exists(directory) {
            var made = try request("MKCOL", directory, collection: true)
            if made == 409 && directory.ancestors.isEmpty {
                try makeRemoteDirectory()
                made = try request("MKCOL", directory, collection: true)
            }
            // 405: it exists already.
            guard (200..<300).contains(made) || made == 405 else { throw failure("MKCOL", directory, made) }
            dav.made(directory)
        }
    }

    /// Makes the collections of the remote URL's path, from the top (405: one exists already).
    private func makeRemoteDirectory() throws(FerryError) {
        guard let scheme = base.url.firstRange(of: "://"), let slash = base.url[scheme.upperBound...].firstIndex(of: "/") else { return }
        let origin = String(base.url[..<slash])
        var url = origin
        for segment in base.url[slash...].split(separator: "/") {
            url += "/" + segment
            let made = try dav.withHandle { easy throws(FerryError) -> Int in try request(easy, "MKCOL", url: url + "/", headers: [], body: nil) }
            guard (200..<300).contains(made) || made == 405 else {
                throw FerryError(.remote, "the remote directory \(base.url) does not exist, and MKCOL \(url)/ was refused: HTTP \(made)",
                                 hint: "check 'remote =' in the config, or make the directory on the server", cause: .http(status: made))
            }
        }
    }

    private func failure(_ method: String, _ path: RelativePath, _ status: Int) -> FerryError {
        var hint: String?
        if status == 405 || status == 501 { hint = "the server does not accept WebDAV writes here; enable WebDAV (nginx: dav_methods PUT DELETE MKCOL MOVE; Apache: Dav On)" }
        if status == 401 || status == 403 { hint = "check the credentials file named in the config, and that the server lets it write" }
        if status == 507 { hint = "the remote's storage is full" }
        return FerryError(.remote, "\(method) \(base.url(for: path)) was refused: HTTP \(status)", hint: hint, cause: .http(status: status))
    }

    /// One WebDAV request; returns the HTTP status. A transport failure throws.
    private func request(_ method: String, _ path: RelativePath, headers: [String] = [], body: [UInt8]? = nil,
                         collection: Bool = false) throws(FerryError) -> Int {
        try dav.withHandle { easy throws(FerryError) -> Int in
            try request(easy, method, path, headers: headers, body: body, collection: collection)
        }
    }

    private func request(_ easy: EasyHandle, _ method: String, _ path: RelativePath, headers: [String], body: [UInt8]?,
                         collection: Bool) throws(FerryError) -> Int {
        try request(easy, method, url: base.url(for: path) + (collection ? "/" : ""), headers: headers, body: body)
    }

    private func request(_ easy: EasyHandle, _ method: String, url: String, headers: [String], body: [UInt8]?) throws(FerryError) -> Int {
        try exchange(easy, method, url: url, headers: headers, body: body, keep: 0).status
    }

    /// One request on `easy`: its status and the first `keep` bytes of the response body (the
    /// rest is read and dropped; libcurl would print it otherwise). A transport failure throws.
    private func exchange(_ easy: EasyHandle, _ method: String, url: String, headers: [String], body: [UInt8]?,
                          keep: Int) throws(FerryError) -> (status: Int, body: [UInt8]) {
        let answer = Exchange.perform(easy, HTTPRequest(url: url, method: method, headers: headers, settings: settings), body: body,
                                      limit: keep, dropExcess: true)
        guard answer.code == CURLE_OK else {
            throw FerryError(.remote, "\(method) \(url): \(Curl.describe(answer.code, errorText: answer.errorText, headers: answer.headers))",
                             cause: Curl.cause(answer.code, errorText: answer.errorText, headers: answer.headers))
        }
        return (answer.headers.status, answer.body)
    }

    /// Removes a collection only when a `PROPFIND` (Depth: 1) shows it holds nothing: a WebDAV
    /// `DELETE` of a collection removes everything in it, and what someone else put there is not
    /// ferry's to remove. A server that cannot list (no `PROPFIND`: nginx without its dav-ext
    /// module) keeps the collection. A file at `path` (not a collection) is left alone too.
    func removeDirectoryIfEmpty(_ path: RelativePath) throws(FerryError) -> Bool {
        let url = base.url(for: path) + "/"
        let listing = try dav.withHandle { easy throws(FerryError) in
            try exchange(easy, "PROPFIND", url: url, headers: ["Depth: 1"], body: nil, keep: 1 << 20)
        }
        if listing.status == 404 { return true }
        guard listing.status == 207, WebDAV.responses(in: listing.body) == 1 else { return false }
        let status = try dav.withHandle { easy throws(FerryError) -> Int in try request(easy, "DELETE", url: url, headers: [], body: nil) }
        guard (200..<300).contains(status) || status == 404 else { throw failure("DELETE", path, status) }
        dav.forget(under: path)
        return true
    }
}

/// What ferry reads of a WebDAV multistatus answer.
enum WebDAV {
    /// How many `response` elements a `207 Multi-Status` body holds (whatever the namespace
    /// prefix): for a `PROPFIND` with `Depth: 1` on a collection, the collection and its members.
    static func responses(in body: [UInt8]) -> Int {
        let closing = Array("response>".utf8)
        var count = 0
        var i = 0
        while i + closing.count <= body.count {
            guard body[i] == UInt8(ascii: "<"), i + 1 < body.count, body[i + 1] == UInt8(ascii: "/") else { i += 1; continue }
            // `</` then an optional `prefix:`, then `response>`.
            var j = i + 2
            var k = j
            while k < body.count, body[k] != UInt8(ascii: ">"), body[k] != UInt8(ascii: "<"), k - j < 64 {
                if body[k] == UInt8(ascii: ":") { j = k + 1 }
                k += 1
            }
            if j + closing.count <= body.count && Array(body[j..<j + closing.count]) == closing { count += 1 }
            i = k
        }
        return count
    }
}

/// Keeps the first bytes of a body (up to the buffer's limit) and drops the rest.
let keptBodyCallback: ferry_data_callback = { buffer, size, count, userdata in
    let body = Unmanaged<BodyBuffer>.fromOpaque(userdata!).takeUnretainedValue()
    let n = size * count
    let room = min(n, body.limit - body.bytes.count)
    if let buffer, room > 0 { body.bytes.append(contentsOf: UnsafeRawBufferPointer(start: buffer, count: room)) }
    return n
}

/// The one connection a push's WebDAV requests share (kept alive between them), and the
/// collections known to exist on the remote. Requests come from the engine and session threads,
/// one at a time.
final class DAVConnection: @unchecked Sendable {
    private struct State {
        var handle: EasyHandle?
        var collections = Set<RelativePath>()
    }
    private let state = Mutex(State())
    private let busy = Mutex(())

    func withHandle<T>(_ body: (EasyHandle) throws(FerryError) -> T) throws(FerryError) -> T {
        try busy.withLock { _ throws(FerryError) -> T in
            let easy = state.withLock { s in
                if s.handle == nil { s.handle = EasyHandle() }
                return s.handle!
            }
            return try body(easy)
        }
    }

    func exists(_ collection: RelativePath) -> Bool { state.withLock { $0.collections.contains(collection) } }
    func made(_ collection: RelativePath) { state.withLock { _ = $0.collections.insert(collection) } }
    func forget(_ collections: [RelativePath]) { state.withLock { s in for c in collections { s.collections.remove(c) } } }
    /// A collection removed, with everything known under it.
    func forget(under collection: RelativePath) {
        state.withLock { s in s.collections = s.collections.filter { $0 != collection && !$0.string.hasPrefix(collection.string + "/") } }
    }
}

/// Bytes a request sends, read by libcurl a piece at a time.
final class UploadBuffer {
    let bytes: [UInt8]
    var offset = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }
}

let uploadBufferCallback: ferry_data_callback = { buffer, size, count, userdata in
    let source = Unmanaged<UploadBuffer>.fromOpaque(userdata!).takeUnretainedValue()
    let n = min(size * count, source.bytes.count - source.offset)
    guard let buffer, n > 0 else { return 0 }
    source.bytes.withUnsafeBytes { UnsafeMutableRawPointer(buffer).copyMemory(from: $0.baseAddress! + source.offset, byteCount: n) }
    source.offset += n
    return n
}

let discardCallback: ferry_data_callback = { _, size, count, _ in size * count }

/// A request without a body that the engine runs for a push (a WebDAV `MOVE`, a `HEAD`): the
/// subclass says what it asks (`method`, `requestHeaders`) and what the answer means (`finish`);
/// the answer's headers are kept, its body dropped, and a redirect is never followed (it would
/// replay the request elsewhere).
class RemoteRequest: Transfer {
    let url: String
    let settings: HTTPSettings
    let headers = HeaderSink()
    var cancelRequested = false
    var throttle: Throttle?

    init(url: String, settings: HTTPSettings) {
        self.url = url
        self.settings = settings
    }

    var method: String { "HEAD" }
    var requestHeaders: [String] { [] }

    var mode: TransferMode { .curl }
    func outcomeWithoutRequest() -> TransferOutcome? { nil }
    func step() -> TransferOutcome? { nil }
    func tick(now: Double) {}

    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        easy.configure(url: url, settings: settings, extraHeaders: requestHeaders)
        if method == "HEAD" { easy.set(CURLOPT_NOBODY, 1) } else { easy.set(CURLOPT_CUSTOMREQUEST, method) }
        easy.set(CURLOPT_FOLLOWLOCATION, 0)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, discardCallback)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, headerCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: Unmanaged.passUnretained(headers).toOpaque())
    }

    /// The failure of a request that did not get an answer.
    func transportFailure(_ code: CURLcode, _ errorText: String?) -> TransferOutcome {
        .failed(TransferFailure(message: "\(method) \(url): " + Curl.describe(code, errorText: errorText, headers: headers.headers),
                                keepPartial: false, cause: Curl.cause(code, errorText: errorText, headers: headers.headers)))
    }

    func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
        guard code == CURLE_OK else { return transportFailure(code, errorText) }
        return .succeeded
    }
}

/// A WebDAV `MOVE` run by the engine, so a push's moves go beside its uploads on the multi
/// handle's kept-alive connections instead of one at a time.
final class RemoteMove: RemoteRequest {
    let task: TransferTask
    private let destination: String

    init(task: TransferTask, url: String, destination: String, settings: HTTPSettings) {
        self.task = task
        self.destination = destination
        super.init(url: url, settings: settings)
    }

    override var method: String { "MOVE" }
    override var requestHeaders: [String] { ["Destination: \(destination)", "Overwrite: T"] }

    override func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
        guard code == CURLE_OK else { return transportFailure(code, errorText) }
        let status = headers.headers.status
        guard (200..<300).contains(status) else {
            return .failed(TransferFailure(message: "MOVE to \(destination) was refused: HTTP \(status)", keepPartial: false, cause: .http(status: status)))
        }
        return .succeeded
    }
}

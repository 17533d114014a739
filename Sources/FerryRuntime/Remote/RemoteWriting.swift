import CCurl
import Glibc
import Synchronization
import FerryCore

/// The write side of a remote, for push (issue 9): bytes are placed under a temporary name in the
/// remote's `.ferry/`, then moved to their final name, so a reader of the remote never sees a
/// partial file under a final name. WebDAV over HTTP(S) (`PUT`, `MOVE` with `Overwrite: T`,
/// `MKCOL`, `DELETE`) and a local directory for `file://` (write, fsync, rename, fsync the
/// directory). Paths are relative to the remote; directories are made as needed.
protocol RemoteWriting {
    /// Writes `bytes` at `path` (small bodies: the manifest, tests; files go as engine transfers).
    func put(_ bytes: [UInt8], at path: RelativePath) throws(FerryError)
    /// Renames `from` to `to`, replacing what `to` held.
    func move(from: RelativePath, to: RelativePath) throws(FerryError)
    /// Removes the file at `path`; one already gone is not an error.
    func remove(_ path: RelativePath) throws(FerryError)
    /// The transfer that sends the local file at `localPath` (as `entry` when it looked like
    /// `stat`; its hash is known unless `hashKnown` is false, and then taken as it is sent) to the
    /// temporary name `temporary`.
    func upload(task: TransferTask, entry: ManifestEntry, stat: LocalEntry, hashKnown: Bool, localPath: String,
                to temporary: RelativePath) throws(FerryError) -> Upload
    /// The move as an engine transfer, where the remote has one (WebDAV); nil: call `move`.
    func moveTransfer(task: TransferTask, from: RelativePath, to: RelativePath) -> RemoteMove?
    /// Makes the directories `path` needs (after a move was refused for want of them).
    func makeCollections(for path: RelativePath) throws(FerryError)
}

extension HTTPRemote: RemoteWriting {
    func upload(task: TransferTask, entry: ManifestEntry, stat: LocalEntry, hashKnown: Bool, localPath: String,
                to temporary: RelativePath) throws(FerryError) -> Upload {
        // nginx and Apache answer 409 to a PUT whose collection is missing: made first, once per run.
        try makeCollections(for: temporary)
        return try Upload(task: task, entry: entry, stat: stat, hashKnown: hashKnown, localPath: localPath,
                          destination: .http(url: base.url(for: temporary), settings: settings))
    }

    func put(_ bytes: [UInt8], at path: RelativePath) throws(FerryError) {
        try withCollections(for: path) { () throws(FerryError) -> Int in
            try request("PUT", path, body: bytes)
        }
    }

    func move(from: RelativePath, to: RelativePath) throws(FerryError) {
        try withCollections(for: to) { () throws(FerryError) -> Int in
            try request("MOVE", from, headers: ["Destination: \(base.url(for: to))", "Overwrite: T"])
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

    func moveTransfer(task: TransferTask, from: RelativePath, to: RelativePath) -> RemoteMove? {
        RemoteMove(task: task, url: base.url(for: from), destination: base.url(for: to), settings: settings)
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
        easy.configure(url: url, settings: settings, extraHeaders: headers)
        let sink = BodyBuffer(limit: 64 << 10)
        let sinkRef = Unmanaged.passRetained(sink)
        defer { sinkRef.release() }
        // The response body is read and dropped (libcurl would print it otherwise).
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, discardCallback)
        easy.set(CURLOPT_WRITEDATA, pointer: sinkRef.toOpaque())
        let source = UploadBuffer(body ?? [])
        let sourceRef = Unmanaged.passRetained(source)
        defer { sourceRef.release() }
        if body != nil {
            easy.set(CURLOPT_UPLOAD, 1)
            ferry_easy_setopt_offt(easy.handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(source.bytes.count))
            ferry_easy_setopt_datacb(easy.handle, CURLOPT_READFUNCTION, uploadBufferCallback)
            easy.set(CURLOPT_READDATA, pointer: sourceRef.toOpaque())
        } else {
            easy.set(CURLOPT_CUSTOMREQUEST, method)
        }
        // A redirect would replay a write elsewhere: never follow one.
        easy.set(CURLOPT_FOLLOWLOCATION, 0)
        let code = curl_easy_perform(easy.handle)
        guard code == CURLE_OK else {
            let headers = ResponseHeaders()
            throw FerryError(.remote, "\(method) \(url): \(Curl.describe(code, errorText: easy.errorText, headers: headers))",
                             cause: Curl.cause(code, errorText: easy.errorText, headers: headers))
        }
        return easy.responseCode
    }
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

extension FileRemote: RemoteWriting {
    func upload(task: TransferTask, entry: ManifestEntry, stat: LocalEntry, hashKnown: Bool, localPath: String,
                to temporary: RelativePath) throws(FerryError) -> Upload {
        let target = try local(temporary)
        try FileSystem.makeDirectories(ConfigParser.directoryName(of: target))
        return try Upload(task: task, entry: entry, stat: stat, hashKnown: hashKnown, localPath: localPath, destination: .file(path: target))
    }

    func put(_ bytes: [UInt8], at path: RelativePath) throws(FerryError) {
        let target = try local(path)
        try FileSystem.makeDirectories(ConfigParser.directoryName(of: target))
        do { try FileSystem.writeAtomically(target, bytes: bytes) } catch { throw .remote(error.message) }
    }

    func move(from: RelativePath, to: RelativePath) throws(FerryError) {
        let source = try local(from), target = try local(to)
        try FileSystem.makeDirectories(ConfigParser.directoryName(of: target))
        guard rename(source, target) == 0 else {
            throw .remote("cannot move \(Printable.name(source)) to \(Printable.name(target)): \(FileSystem.errorText())")
        }
        FileSystem.syncDirectory(containing: target)
    }

    func moveTransfer(task: TransferTask, from: RelativePath, to: RelativePath) -> RemoteMove? { nil }

    func makeCollections(for path: RelativePath) throws(FerryError) {
        try FileSystem.makeDirectories(ConfigParser.directoryName(of: try local(path)))
    }

    func remove(_ path: RelativePath) throws(FerryError) {
        let target = try local(path)
        guard unlink(target) == 0 || errno == ENOENT else {
            throw .remote("cannot remove \(Printable.name(target)): \(FileSystem.errorText())")
        }
        FileSystem.syncDirectory(containing: target)
    }

    private func local(_ path: RelativePath) throws(FerryError) -> String {
        guard let base = base.filePath else { throw .remote("\(base.url) is not a valid file URL") }
        return (base.hasSuffix("/") ? base : base + "/") + path.string
    }
}

/// A WebDAV `MOVE` run by the engine, so a push's moves go beside its uploads on the multi
/// handle's kept-alive connections instead of one at a time.
final class RemoteMove: Transfer {
    let task: TransferTask
    private let url: String
    private let destination: String
    private let settings: HTTPSettings
    private let headers = HeaderSink()
    var cancelRequested = false
    var throttle: Throttle?

    init(task: TransferTask, url: String, destination: String, settings: HTTPSettings) {
        self.task = task
        self.url = url
        self.destination = destination
        self.settings = settings
    }

    var mode: TransferMode { .curl }
    func outcomeWithoutRequest() -> TransferOutcome? { nil }
    func step() -> TransferOutcome? { nil }
    func tick(now: Double) {}

    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        easy.configure(url: url, settings: settings, extraHeaders: ["Destination: \(destination)", "Overwrite: T"])
        easy.set(CURLOPT_CUSTOMREQUEST, "MOVE")
        easy.set(CURLOPT_FOLLOWLOCATION, 0)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, discardCallback)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, headerCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: Unmanaged.passUnretained(headers).toOpaque())
    }

    func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
        guard code == CURLE_OK else {
            return .failed(TransferFailure(message: "MOVE to \(destination): " + Curl.describe(code, errorText: errorText, headers: headers.headers),
                                           keepPartial: false, cause: Curl.cause(code, errorText: errorText, headers: headers.headers)))
        }
        let status = headers.headers.status
        guard (200..<300).contains(status) else {
            return .failed(TransferFailure(message: "MOVE to \(destination) was refused: HTTP \(status)", keepPartial: false, cause: .http(status: status)))
        }
        return .succeeded
    }
}

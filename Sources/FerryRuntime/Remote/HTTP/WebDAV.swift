import CCurl
import Glibc
import Synchronization
import FerryCore

/// WebDAV, the write side of an `http(s)://` remote: a file is sent with `PUT` to a temporary name
/// in the remote's `.ferry/upload/`, then moved to its final name (`MOVE` with `Overwrite: T`), so
/// a reader never sees a partial file under a final name (metadata objects, named by their
/// content, go straight to their names: `writeObject`); collections are made as needed
/// (`MKCOL`), files and empty collections removed (`DELETE`, after a `PROPFIND` for collections).
/// WebDAV has no write condition ferry can rely on across nginx and Apache: the session compares
/// the manifest just before it publishes (its backend has no `.conditionalWrites`).
extension HTTPRemote: RemoteWriting {
    /// Where the upload of a task waits on the remote until it is moved into place.
    static func temporaryName(task: Int64) -> RelativePath { RelativePath(trusted: LocalRoot.uploadPath + "/\(task)") }
    static let temporaryManifest = temporaryName(for: RelativePath(trusted: ".ferry/manifest.json"))
    /// Where a whole object (`write`) waits until it is moved onto `destination`: a name taken
    /// from the destination's own name, so writers of differently named objects in one collection
    /// (a fleet's machines writing their status reports) never move each other's bytes, and a
    /// name left by a run that died is replaced by the next write of the same object. (Objects of
    /// one name in two collections would share it; the manifest and reports are all it names.)
    static func temporaryName(for destination: RelativePath) -> RelativePath { RelativePath(trusted: ".ferry/\(destination.name).new") }


    func placement(for file: LocalUpload, journal: UploadJournal) throws(FerryError) -> Placement {
        let temporary = HTTPRemote.temporaryName(task: file.task.id)
        // nginx and Apache answer 409 to a PUT whose collection is missing: made first, once per run.
        try makeCollections(for: temporary)
        let upload = Upload(task: file.task, entry: file.entry, stat: file.stat, expecting: file.hashKnown ? file.entry.sha256 : nil,
                            file: file.file, range: file.range, destination: .request(HTTPRequest(url: base.url(for: temporary), method: "PUT", settings: settings)))
        let path = file.destination
        var mended = false
        return SinglePlacement(upload: upload, file: file.file, finish: { _ in move(temporary, to: path) }, mend: { step, failure in
            // A MOVE refused for want of its collections (`mayLackCollections`) makes them and goes once more.
            guard step is RemoteMove, !mended, case let .http(status) = failure.cause,
                  HTTPRemote.mayLackCollections(path, status: status) else { return nil }
            mended = true
            dav.forget(path.ancestors)
            guard (try? makeCollections(for: path)) != nil else { return nil }
            return move(temporary, to: path)
        }, cleanup: { try? remove(temporary) })
    }

    private func move(_ temporary: RelativePath, to path: RelativePath) -> RemoteMove {
        RemoteMove(HTTPRequest(url: base.url(for: temporary), method: "MOVE",
                               headers: ["Destination: \(base.url(for: path))", "Overwrite: T"], settings: settings))
    }

    func inspect(_ path: RelativePath) -> RemoteInspection {
        .probe(RemoteProbe(path: path, request: HTTPRequest(url: base.url(for: path), method: "HEAD",
                                                            headers: ["Want-Repr-Digest: sha-256=10"], settings: settings)))
    }

    /// A `GET` of the file whose body is hashed: nginx and Apache compute no digest.
    func readBack(_ path: RelativePath, limit: Int64) -> RemoteInspection {
        .probe(RemoteProbe(readingBack: path, request: HTTPRequest(url: base.url(for: path), method: "GET", settings: settings), limit: limit))
    }

    func removeLeftovers(tasks: [TransferTask], journaled: [JournaledUpload]) {
        // An upload's name is its task's: a PUT of a task that was not running replaces it.
        for task in tasks where task.state == .running { try? remove(HTTPRemote.temporaryName(task: task.id)) }
        try? remove(HTTPRemote.temporaryManifest)
    }

    func abandon(_ upload: JournaledUpload) {}

    func write(_ bytes: [UInt8], at path: RelativePath, condition: WriteCondition) throws(FerryError) -> WriteOutcome {
        let temporary = HTTPRemote.temporaryName(for: path)
        try withCollections(for: temporary) { () throws(FerryError) -> Int in
            try request("PUT", temporary, body: bytes)
        }
        try withCollections(for: path) { () throws(FerryError) -> Int in
            try request("MOVE", temporary, headers: ["Destination: \(base.url(for: path))", "Overwrite: T"])
        }
        return .written
    }

    /// Straight to its name, without a temporary name and a move: see `RemoteWriting.writeObject`.
    func writeObject(_ bytes: [UInt8], at path: RelativePath) throws(FerryError) -> Bool {
        try withCollections(for: path) { () throws(FerryError) -> Int in
            try request("PUT", path, body: bytes)
        }
        return false
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
            // Another of the run's writes may be making the same collection this moment (a push
            // sends objects 8 at once): Apache refuses the second MKCOL with 403, not 405. A
            // refusal is asked once more, and a collection that now exists answers 405.
            if made == 403 { made = try request("MKCOL", directory, collection: true) }
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
            let made = try EasyHandle.borrow { easy throws(FerryError) -> Int in try request(easy, "MKCOL", url: url + "/", headers: [], body: nil) }
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
        try EasyHandle.borrow { easy throws(FerryError) -> Int in
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
        let listing = try EasyHandle.borrow { easy throws(FerryError) in
            try exchange(easy, "PROPFIND", url: url, headers: ["Depth: 1"], body: nil, keep: 1 << 20)
        }
        if listing.status == 404 { return true }
        guard listing.status == 207, WebDAV.responses(in: listing.body) == 1 else { return false }
        let status = try EasyHandle.borrow { easy throws(FerryError) -> Int in try request(easy, "DELETE", url: url, headers: [], body: nil) }
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

/// The collections a push knows to exist on the remote, so each is made once. (Its requests
/// made one at a time take a handle, with its kept-alive connection, from `EasyHandle.borrow`,
/// so several threads may make them at once: metadata objects go in lanes.)
final class DAVCollections: Sendable {
    private let collections = Mutex(Set<RelativePath>())

    func exists(_ collection: RelativePath) -> Bool { collections.withLock { $0.contains(collection) } }
    func made(_ collection: RelativePath) { collections.withLock { _ = $0.insert(collection) } }
    func forget(_ gone: [RelativePath]) { collections.withLock { s in for c in gone { s.remove(c) } } }
    /// A collection removed, with everything known under it.
    func forget(under collection: RelativePath) {
        collections.withLock { s in s = s.filter { $0 != collection && !$0.string.hasPrefix(collection.string + "/") } }
    }
}

/// A WebDAV `MOVE` run by the engine, so a push's moves go beside its uploads on the multi
/// handle's kept-alive connections instead of one at a time.
final class RemoteMove: RemoteRequest {}

extension HTTPRemote: RemoteDirectory {
    /// A `PROPFIND` with `Depth: 1` on the remote's collection: the members that are not
    /// collections. A server without WebDAV listing cannot say what it holds.
    func entries(limit: Int) throws(FerryError) -> [DirectoryEntry] {
        let listing = try EasyHandle.borrow { easy throws(FerryError) in
            try exchange(easy, "PROPFIND", url: base.url, headers: ["Depth: 1"], body: nil, keep: 16 << 20)
        }
        guard listing.status == 207 else {
            throw FerryError(.remote, "cannot list \(base.url): PROPFIND answered HTTP \(listing.status)",
                             hint: "a report location over HTTP must list its members: WebDAV with PROPFIND (nginx: dav_ext_methods PROPFIND "
                                   + "from libnginx-mod-http-dav-ext; Apache: Dav On), or use an s3://, sftp:// or file:// location",
                             cause: .http(status: listing.status))
        }
        var out: [DirectoryEntry] = []
        for href in WebDAV.hrefs(in: listing.body) where !href.hasSuffix("/") && out.count < limit {
            guard let last = href.split(separator: "/").last, let name = String(last).removingPercentEncoding(), !name.hasPrefix(".") else { continue }
            out.append(DirectoryEntry(name: name, stamp: nil))
        }
        return out
    }
}

extension WebDAV {
    /// The text of every `href` element (whatever the namespace prefix), in order.
    static func hrefs(in body: [UInt8]) -> [String] {
        let text = String(decoding: body, as: UTF8.self)
        var out: [String] = []
        var rest = text[...]
        while let open = rest.firstRange(of: "href>") {
            // An opening tag: `<href>` or `<prefix:href>` (not `</…href>`).
            let before = rest[..<open.lowerBound]
            guard let lt = before.lastIndex(of: "<"), rest[rest.index(after: lt)] != "/",
                  let close = rest[open.upperBound...].firstIndex(of: "<") else {
                rest = rest[open.upperBound...]
                continue
            }
            out.append(String(rest[open.upperBound..<close]).trimmingSpaces())
            rest = rest[close...]
        }
        return out
    }
}

import CCurl
import FerryCore

/// What a remote does for a session, whatever its scheme: fetch the manifest (conditionally, on
/// the validators of the last fetch) and make the transfer that downloads one of its files. Push
/// adds making upload jobs and publishing a manifest. `Remotes.open` is the one place that picks
/// an implementation by scheme; nothing else in the runtime branches on it.
protocol Remote: Sendable {
    /// The manifest at `url`, `.unchanged` when the validators still hold, or `.missing`. A
    /// manifest larger than `maximumSize` is refused as soon as that is known.
    func fetchManifest(url: String, etag: String?, lastModified: String?, maximumSize: Int64) throws(FerryError) -> ManifestFetch
    /// Where the bytes of the file at `source` under the remote (`RemoteLayout.location`) are read
    /// from: a request the engine makes, or a source its steps read.
    func origin(of source: RelativePath) -> Download.Origin
    /// The same, as a mirror is asked for a file at its path that must hold `content`
    /// (`PullSources`): an HTTP cache keys what it keeps by the version asked for, so a file
    /// changed at its path is never served from an older copy (`?ferry_sha256=`, which a static
    /// server ignores). Other kinds read the path as it is.
    func origin(of source: RelativePath, content: SHA256Digest) -> Download.Origin
    /// Bytes `range` of the object at `url` (a run of a pack's members, `PullPacks`); nil when the
    /// remote does not give that range as asked (another range, the whole object), or cannot.
    func fetchRange(url: String, range: Range<Int64>) throws(FerryError) -> [UInt8]?
    /// Bytes `ranges` (in order, none overlapping) of the object at `url`, which holds `size`
    /// bytes, in one request; nil when the remote does not give them so, or has no such request
    /// (a `file://` remote, whose reads cost no round trip): the caller asks for each range alone.
    func fetchRanges(url: String, ranges: [Range<Int64>], size: Int64) throws(FerryError) -> [[UInt8]]?
    /// The immutable object at `url` (`part.size` bytes at most), its bytes kept in `part` as they
    /// arrive; where `part` holds the first bytes from an earlier run, only the rest is asked for
    /// (one range), and the answer is those bytes and the rest. nil: this remote cannot (the
    /// caller fetches the object as a manifest).
    func fetchKept(url: String, part: ObjectPart) throws(FerryError) -> ManifestFetch?
    /// Where the remote is (its URL and backend).
    var base: RemoteLocation { get }
    /// The run's clock, which its downloads keep their checkpoints on.
    var clock: any Clock { get }
}

extension Remote {
    func origin(of source: RelativePath, content: SHA256Digest) -> Download.Origin { origin(of: source) }
    func fetchRange(url: String, range: Range<Int64>) throws(FerryError) -> [UInt8]? { nil }
    func fetchRanges(url: String, ranges: [Range<Int64>], size: Int64) throws(FerryError) -> [[UInt8]]? { nil }
    func fetchKept(url: String, part: ObjectPart) throws(FerryError) -> ManifestFetch? { nil }

    /// The transfer that brings `entry`, whose bytes are at `source` under the remote
    /// (`RemoteLayout.location`), into `partial`, whose first `resumeFrom` bytes were recorded
    /// under `validator` (kept only where the remote reads ranges). `versioned`: asked as a
    /// mirror is (`origin(of:content:)`).
    func download(task: TransferTask, entry: ManifestEntry, from source: RelativePath, reason: Plan.Reason, into partial: PartialFile,
                  resumeFrom: Int64, validator: String?, versioned: Bool = false) throws(FerryError) -> Download {
        try Download(task: task, entry: entry, reason: reason, origin: versioned ? origin(of: source, content: entry.sha256) : origin(of: source),
                     partial: partial, resumeFrom: Remotes.resumeOffset(base, resumeFrom), validator: validator, clock: clock)
    }
}

/// A kind of remote: what the config and the docs know of it (`BackendDescription`: its schemes,
/// keys, credential sources and abilities) and how a session's remote of that kind is opened.
/// Each lives in its own folder beside this file and is listed once, in `Backends.all`.
protocol Backend: SendableMetatype {
    static var description: BackendDescription { get }
    /// The session's remote. `clock` is the run's: its downloads keep their checkpoints on it (S3
    /// signs with its time). `stop` abandons a request of the run's own thread when the run must
    /// stop (`HTTPSettings.stop`). `meter`: the source this remote is in a pull with mirrors
    /// (`HTTPSettings.meter`; kinds that do not speak HTTP ignore it). Credentials are read here,
    /// once per run.
    static func open(_ session: SessionConfig, clock: any Clock, stop: StopCondition?,
                     meter: FirstBytes.Meter?) throws(FerryError) -> Remote
    /// For `config show`: what unset keys of the backend mean on this machine, found without the
    /// network (where the credentials would come from), by key.
    static func describe(_ session: SessionConfig) -> [String: String]
    /// For `config check`: the credentials fetched now, as lines naming their source (never a
    /// secret); an error when none can be had.
    static func check(_ session: SessionConfig, now: Timestamp) throws(FerryError) -> [String]
}

extension Backend {
    static func describe(_ session: SessionConfig) -> [String: String] { [:] }
    static func check(_ session: SessionConfig, now: Timestamp) throws(FerryError) -> [String] { [] }
}

/// The backends ferry has.
public enum Backends {
    /// Every backend: the one line a new one is added to.
    static let all: [any Backend.Type] = [HTTPBackend.self, FileBackend.self, S3Backend.self, SFTPBackend.self]

    /// What the config parser is given: each backend's description.
    public static let descriptions: [BackendDescription] = all.map { $0.description }

    /// The backend of a session's remote.
    static func of(_ session: SessionConfig) -> any Backend.Type {
        all.first { $0.description.schemes.contains(session.remote.scheme) }!
    }

    /// For `config show`: by key, what the session's unset backend keys mean here.
    public static func describe(_ session: SessionConfig) -> [String: String] { of(session).describe(session) }

    /// For `config check`: the session's credentials, fetched now, in lines.
    public static func check(_ session: SessionConfig, now: Timestamp) throws(FerryError) -> [String] {
        try of(session).check(session, now: now)
    }
}

extension ConfigParser {
    /// The config in `text`, with every backend ferry has.
    public static func parse(_ text: String, path: String, allowingNoSession: Bool = false) throws(FerryError) -> Config {
        try parse(text, path: path, backends: Backends.descriptions, allowingNoSession: allowingNoSession)
    }

    /// Every key a config may hold: the agent's, the sessions', and each backend's own.
    public static var allKeys: [String] { agentKeys + sessionKeys + Backends.descriptions.flatMap { $0.keys.map(\.name) } }
}

/// The outcome of a conditional manifest fetch.
public enum ManifestFetch {
    /// The remote says nothing changed since the validators we sent (HTTP 304, or the same file).
    case unchanged
    /// `redirectedTo`: where the bytes came from, when a redirect took the request to another URL.
    case fetched(bytes: [UInt8], etag: String?, lastModified: String?, redirectedTo: String? = nil)
    /// Nothing at that name (HTTP 404 or 410, S3's NoSuchKey, no such file): a value, since a push
    /// takes it as "nothing published yet"; `error` is what a reader that needs it says.
    case missing(FerryError)

    /// The answer, or the error of a manifest that is not there, for a reader that needs one.
    func required() throws(FerryError) -> ManifestFetch {
        if case let .missing(error) = self { throw error }
        return self
    }
}

enum Remotes {
    /// The remote of a session, opened by its backend (`Backend.open`).
    static func open(_ session: SessionConfig, clock: any Clock, stop: StopCondition? = nil,
                     meter: FirstBytes.Meter? = nil) throws(FerryError) -> Remote {
        try Backends.of(session).open(session, clock: clock, stop: stop, meter: meter)
    }

    /// Where the bytes of a download start: a remote that cannot read from an offset starts again.
    static func resumeOffset(_ base: RemoteLocation, _ offset: Int64) -> Int64 {
        base.backend.abilities.contains(.rangedReads) ? offset : 0
    }

    /// A `304 Not Modified` to a request for a manifest (or a metadata object) that named no validator: there is nothing it
    /// could be "not modified" from, so it is the remote's fault (a broken server or a cache in
    /// between), never taken for "unchanged" (which would send the run to a cached copy it may not have).
    static func unsolicitedNotModified(_ url: String) -> FerryError {
        FerryError(.remote, "the remote answered 304 Not Modified to a request for \(url) that asked nothing conditionally (no If-None-Match or If-Modified-Since): refused, nothing was changed",
                   hint: "a server or a cache in front of it answers 304 where it must send the file: fix or bypass it, then run again", cause: .http(status: 304))
    }

    /// What an HTTP answer to a request for bytes `range` gave: the bytes when it is the range
    /// asked for (206, its Content-Range, its length); nil for anything else but a failure, which
    /// is thrown (`fetchRange`).
    static func range(_ answer: Exchange.Answer, _ range: Range<Int64>, url: String) throws(FerryError) -> [UInt8]? {
        guard answer.code == CURLE_OK || answer.overflowed else {
            throw FerryError(.remote, "cannot fetch \(url): \(Curl.describe(answer.code, errorText: answer.errorText, headers: answer.headers))",
                             cause: Curl.cause(answer.code, errorText: answer.errorText, headers: answer.headers))
        }
        let status = answer.headers.status
        if status == 404 || status == 410 || status >= 500 {
            throw FerryError(.remote, "cannot fetch \(url): HTTP \(status)", cause: .http(status: status))
        }
        guard status == 206, !answer.overflowed, let text = answer.headers.contentRange,
              let got = ResponsePolicy.parseContentRange(text), got.first == range.lowerBound, got.last == range.upperBound - 1,
              answer.body.count == range.count else { return nil }
        return answer.body
    }

    /// The ranges of an answer to a request for several (`fetchRanges`): the parts of a `206
    /// multipart/byteranges` answer, exactly those ranges in order; or cut from one range that
    /// spans them all, or from the whole object (a server may give either); nil for anything else.
    static func ranges(_ answer: Exchange.Answer, _ ranges: [Range<Int64>], size: Int64, url: String) throws(FerryError) -> [[UInt8]]? {
        guard let first = ranges.first?.lowerBound, let end = ranges.last?.upperBound else { return [] }
        guard let whole = try range(answer, first..<end, url: url) ?? (answer.headers.status == 200 && answer.body.count == size
                                                                       && end <= size ? answer.body : nil) else {
            return answer.headers.status == 206 ? parts(answer, ranges, size: size) : nil
        }
        let base = answer.headers.status == 200 ? 0 : Int(first)
        return ranges.map { Array(whole[(Int($0.lowerBound) - base)..<(Int($0.upperBound) - base)]) }
    }

    /// The parts of a `multipart/byteranges` answer, each exactly the range asked, in order.
    private static func parts(_ answer: Exchange.Answer, _ ranges: [Range<Int64>], size: Int64) -> [[UInt8]]? {
        guard let type = answer.headers.contentType, let boundary = MultipartRanges.boundary(ofContentType: type) else { return nil }
        var reader = MultipartRanges(boundary: boundary, ranges: ranges.map { ($0.lowerBound, $0.upperBound - 1) }, total: size)
        var parts: [[UInt8]] = ranges.map { range in
            var part: [UInt8] = []
            part.reserveCapacity(range.count)
            return part
        }
        let read = try? answer.body.withUnsafeBytes { body throws(MultipartRanges.Problem) in
            try reader.feed(body) { index, data in
                parts[index].append(contentsOf: data)
                return true
            }
        }
        guard read == true, reader.finished, zip(parts, ranges).allSatisfy({ $0.count == $1.count }) else { return nil }
        return parts
    }

    static func tooLarge(_ url: String, maximumSize: Int64, announced: Int64?) -> FerryError {
        let how = announced.map { " (\(Units.formatBytes($0))): refused without reading it" }
            ?? ": refused once the body passed it (the server did not announce its length)"
        return FerryError(.manifest, "manifest \(url) is larger than max-manifest-size = \(Units.formatBytes(maximumSize))\(how)",
                          hint: "if a manifest this large is intended, raise max-manifest-size for the session", cause: .wrongLength)
    }
}

/// A remote that can say which objects its directory holds (a report location read by `ferry
/// fleet`): the objects directly under its base, not below; at most `limit`, and an error naming
/// the cause when it cannot list (a plain HTTP server without WebDAV).
protocol RemoteDirectory {
    func entries(limit: Int) throws(FerryError) -> [DirectoryEntry]
}

/// One object a directory listing named, with a stamp when the store gives one that changes
/// whenever the content does (S3: its ETag and size; file://: size, modification time and
/// inode); nil where the listing says nothing of it (SFTP, WebDAV), and the object is read again.
struct DirectoryEntry: Sendable, Equatable {
    let name: String
    let stamp: String?
}

import CCurl
import Glibc
import FerryCore

/// What a remote says of one of its files now: a push checks what it placed with it (a server's
/// answer is checked, not trusted: docs/design.md, data-safety rule 11), and a later run compares
/// it with what was recorded then to see whether someone else changed the file.
struct RemoteFileState: Equatable {
    /// A regular file is at the path.
    var exists: Bool
    var size: Int64?
    /// The remote's validator for it: the ETag, else Last-Modified (a local directory: its size,
    /// mtime and inode). It changes when the file does.
    var validator: String?
    /// The SHA-256 of the bytes the remote holds, computed over them by the store itself (RFC 9530
    /// `Repr-Digest`, S3's checksum) or by ferry reading them back (`readBack`); never a value ferry
    /// stored beside the object and the store merely echoes (S3's `x-amz-meta-sha256`).
    var sha256: SHA256Digest?
    /// How `sha256` was had, when it was.
    var verified: UploadVerification?

    static let absent = RemoteFileState(exists: false)

    /// An ETag without its weakness mark (`W/"x"` → `"x"`).
    static func opaque(_ etag: String) -> String { etag.hasPrefix("W/") ? String(etag.dropFirst(2)) : etag }

    /// The record of what ferry placed as `entry`, from this state (the entry's size where the
    /// server gave none), with how it was verified (no checksum: by its size).
    func placed(as entry: ManifestEntry) -> PlacedFile? {
        exists ? PlacedFile(size: size ?? entry.size ?? -1, validator: validator, verified: verified ?? .sizeOnly) : nil
    }

    /// Whether the file is still what ferry recorded when it placed it (a size the server leaves
    /// out is not held against it; the validator still is).
    func matches(_ placed: PlacedFile) -> Bool {
        exists && (size == nil || size == placed.size) && (placed.validator == nil || validator == nil || validator == placed.validator)
    }

    /// Why the file at `path` is not what ferry sent (`entry`), or nil when it is.
    func mismatch(with entry: ManifestEntry) -> String? {
        let name = Printable.name(entry.path.string)
        guard exists else { return "the server answered, but \(name) is not at its final name" }
        if let size, let wanted = entry.size, size != wanted {
            return "the server holds \(size) bytes at \(name), not the \(wanted) sent"
        }
        // A server may leave the length out of a HEAD of an empty file (Apache does): nothing else
        // goes without one.
        if size == nil && entry.size != 0 { return "the server does not say how large \(name) is" }
        if let sha256, sha256 != entry.sha256 {
            return verified == .readBack ? "read back, \(name) has SHA-256 \(sha256), not the \(entry.sha256) sent"
                : "the server says \(name) has SHA-256 \(sha256), not the \(entry.sha256) sent"
        }
        return nil
    }
}

/// How a remote answers for a file: with a transfer the engine runs (an HTTP request; a `file://`
/// read-back in steps), or at once (a look at a local directory); or the request cannot be made
/// (S3 credentials that cannot be had).
enum RemoteInspection {
    case probe(StateProbe)
    case now(RemoteFileState)
    case failed(FerryError)
}

/// A transfer that finds out what the remote holds at `path`: a `HEAD`, or a read-back that hashes
/// the bytes. `state` is set once it succeeded.
protocol StateProbe: Transfer {
    var path: RelativePath { get }
    var state: RemoteFileState? { get }
}

/// A `HEAD` of one file, run by the engine (built by the remote): its status, length, validators
/// and, when the server computes one, its SHA-256 (`sha256`: by default RFC 9530's `Repr-Digest`,
/// asked for with `Want-Repr-Digest`; S3 has its own header). Or, built with `readingBack`, a
/// `GET` whose body is hashed as it comes and not kept (at most that many bytes and one more are
/// read): what a remote that computes no checksum holds, by ferry's own reading.
final class RemoteProbe: RemoteRequest, StateProbe {
    let path: RelativePath
    /// The answer, once the probe succeeded.
    private(set) var state: RemoteFileState?
    private let sha256: (ResponseHeaders) -> SHA256Digest?
    private let reading: ReadBackBody?

    init(path: RelativePath, request: HTTPRequest,
         sha256: @escaping (ResponseHeaders) -> SHA256Digest? = { SHA256Digest.fromServer(reprDigest: $0.reprDigest, digest: $0.digest) }) {
        self.path = path
        self.sha256 = sha256
        reading = nil
        super.init(request)
    }

    /// A read-back of `path` with `request` (a `GET`), reading at most `limit` bytes and one more.
    init(readingBack path: RelativePath, request: HTTPRequest, limit: Int64) {
        self.path = path
        sha256 = { _ in nil }
        reading = ReadBackBody(limit: limit)
        super.init(request)
    }

    override func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {
        super.prepare(easy, context: context)
        if let reading {
            ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, readBackCallback)
            easy.set(CURLOPT_WRITEDATA, pointer: Unmanaged.passUnretained(reading).toOpaque())
        }
    }

    override func finish(code: CURLcode, errorText: String?) -> TransferOutcome {
        if let reading, code == CURLE_WRITE_ERROR, reading.over {
            // More bytes than were sent: what it holds is not the file, whatever the rest is.
            state = RemoteFileState(exists: true, size: reading.count, validator: nil, sha256: nil)
            return .succeeded
        }
        guard code == CURLE_OK else { return transportFailure(code, errorText) }
        let h = headers.headers
        switch h.status {
        case 200..<300:
            // Compared weakly (W/ dropped): Apache makes the ETag of a file changed within the last
            // second weak, and strong a second later, for the same file. (A change within the
            // same second at the same size may keep its validator on such servers: only the size
            // and the digest, when given, see it then.)
            let validator = h.etag.map(RemoteFileState.opaque) ?? h.lastModified.map { "lm:" + $0 }
            if let reading {
                state = RemoteFileState(exists: true, size: reading.count, validator: validator, sha256: reading.hasher.finalize(), verified: .readBack)
            } else {
                let computed = sha256(h)
                state = RemoteFileState(exists: true, size: h.contentLength, validator: validator, sha256: computed,
                                        verified: computed == nil ? nil : .storeChecksum)
            }
        case 404, 410:
            state = .absent
        default:
            return refusal()
        }
        return .succeeded
    }
}

/// Asks the remote about many files at once, through the engine under the session's limits;
/// returns what it says of each. A probe that fails (the remote cannot be reached) fails them all.
final class RemoteProbes: TransferSource {
    private var pending: [RelativePath]
    private let writer: RemoteWriting
    private let session: SessionConfig
    /// Read back (`RemoteWriting.readBack`, at most this many bytes) rather than asked after.
    private let readingBack: [RelativePath: Int64]
    private(set) var states: [RelativePath: RemoteFileState] = [:]
    private(set) var failure: FerryError?

    init(_ paths: [RelativePath], writer: RemoteWriting, session: SessionConfig, readingBack: [RelativePath: Int64] = [:]) {
        pending = paths.reversed()
        self.writer = writer
        self.session = session
        self.readingBack = readingBack
    }

    /// What the remote says of each of `paths`; those `readingBack` names are read back and hashed.
    static func run(_ paths: [RelativePath], writer: RemoteWriting, session: SessionConfig, engine: TransferEngine,
                    readingBack: [RelativePath: Int64] = [:]) throws(FerryError) -> [RelativePath: RemoteFileState] {
        let probes = RemoteProbes(paths, writer: writer, session: session, readingBack: readingBack)
        if !probes.pending.isEmpty { engine.run(probes) }
        if let failure = probes.failure { throw failure }
        return probes.states
    }

    func next() -> TransferEngine.Next {
        while failure == nil, let path = pending.popLast() {
            switch readingBack[path].map({ writer.readBack(path, limit: $0) }) ?? writer.inspect(path) {
            case let .probe(probe): return .start(probe)
            case let .now(state): states[path] = state
            case let .failed(error): failure = error
            }
        }
        return .none
    }

    func finished(_ batch: [(Transfer, TransferOutcome)]) {
        for case let (probe as StateProbe, outcome) in batch {
            switch outcome {
            case .succeeded: states[probe.path] = probe.state
            case let .failed(f): failure = failure ?? FerryError(.remote, f.message, cause: f.cause)
            case .interrupted: failure = failure ?? FerryError(.stopped, "stopped while checking the remote's files")
            }
        }
    }

    func tick(_ running: [Transfer]) {}
    var shouldStop: Bool { failure != nil }
    var limit: Int { session.transfers ?? Int.max }
}

/// What a read-back keeps of a body: its SHA-256 and length, never the bytes; past `limit` bytes
/// it stops the transfer (`over`).
final class ReadBackBody {
    let hasher = SHA256Hasher()
    let limit: Int64
    private(set) var count: Int64 = 0
    private(set) var over = false
    init(limit: Int64) { self.limit = limit }

    /// Takes `n` bytes; false once more than `limit` came.
    func take(_ buffer: UnsafeRawPointer, _ n: Int) -> Bool {
        count += Int64(n)
        if count > limit {
            over = true
            return false
        }
        hasher.update(buffer, count: n)
        return true
    }
}

let readBackCallback: ferry_data_callback = { buffer, size, count, userdata in
    let body = Unmanaged<ReadBackBody>.fromOpaque(userdata!).takeUnretainedValue()
    let n = size * count
    guard let buffer, n > 0 else { return n }
    return body.take(buffer, n) ? n : 0
}

import FerryCore

/// `ferry fleet`'s read of a report location: every `.report` object listed, read 16 at a time,
/// each parsed, its signature checked with the key it names, its name held to that key, and
/// judged by the reader's ledger (`FleetLedger`). A report that fails any of it is counted and
/// named, never merged into the view.
public struct FleetRead: Sendable {
    public struct Refusal: Sendable, Equatable {
        /// `malformed`, `forged`, `replayed` or `unreadable`.
        public let kind: String
        public let name: String
        public let reason: String
    }

    /// Objects named `*.report` in the location.
    public var listed = 0
    /// Of them, those listed as they were at the last read (`FleetObjects`): not fetched again.
    public var unchanged = 0
    public var taken: [StatusReport] = []
    /// Keys taken for the first time (trust on first report, without a file of machine keys).
    public var firstSeen: [StatusReport] = []
    public var refused: [Refusal] = []
}

public enum FleetReading {
    /// Reads the reports of the location that is `session`'s remote (its credentials and
    /// options), judging each by `ledger` and `machineKeys` (nil: trust on first report).
    /// `objects`: what the last read took, for objects listed unchanged; afterwards what this one took.
    public static func read(session: SessionConfig, machineKeys: [PublicKey: String]?, ledger: inout FleetLedger,
                            objects: inout FleetObjects, clock: any Clock) throws(FerryError) -> FleetRead {
        let remote = try Remotes.open(session, clock: clock)
        guard let directory = remote as? RemoteDirectory else {
            throw .usage("ferry fleet cannot list \(session.remote.url)", hint: "use a file://, s3://, sftp:// or WebDAV http(s):// location")
        }
        let listed = try directory.entries(limit: 1_000_000).filter { $0.name.hasSuffix(StatusReport.suffix) }.sorted { $0.name < $1.name }
        let verifier = Ed25519Verifier()
        let verified = ledger.digests
        let kept = objects
        // Read (or taken from what the last read kept), parsed and checked in the lanes; judged
        // by the ledger in name order after.
        let (checked, _) = Lanes.run(listed.count, lanes: 16, name: "ferry-fleet") { i throws(FerryError) -> Checked in
            let bytes = kept.bytes(listed[i].name, stamp: listed[i].stamp)
            return check(listed[i].name, kept: bytes, remote: remote, verifier: verifier, verified: verified)
        }
        var read = FleetRead(listed: listed.count)
        objects = FleetObjects()
        for (entry, outcome) in zip(listed, checked) {
            let name = entry.name
            switch outcome {
            case let .report(report, digest, bytes, fetched)?:
                if !fetched { read.unchanged += 1 }
                switch ledger.judge(report, digest: digest, machineKeys: machineKeys, now: clock.now()) {
                case let .taken(new):
                    read.taken.append(report)
                    objects.keep(name, stamp: entry.stamp, bytes: bytes)
                    if new && machineKeys == nil { read.firstSeen.append(report) }
                case let .replayed(reason): read.refused.append(.init(kind: "replayed", name: name, reason: reason))
                case let .forged(reason): read.refused.append(.init(kind: "forged", name: name, reason: reason))
                }
            case let .refused(kind, reason)?: read.refused.append(.init(kind: kind, name: name, reason: reason))
            case nil: read.refused.append(.init(kind: "unreadable", name: name, reason: "not read"))
            }
        }
        return read
    }

    /// A report read and checked on its own: parsed, its signature verified, its name its key's.
    private enum Checked {
        /// `fetched`: read from the location (not kept from the last read).
        case report(StatusReport, digest: String, bytes: [UInt8], fetched: Bool)
        case refused(kind: String, reason: String)
    }

    /// `kept`: the object's bytes from the last read, when it is listed unchanged (not fetched).
    /// `verified`: digests of objects whose signature held when the ledger took them.
    private static func check(_ name: String, kept: [UInt8]?, remote: Remote, verifier: Ed25519Verifier, verified: Set<String>) -> Checked {
        guard let path = try? RelativePath(validating: name) else { return .refused(kind: "unreadable", reason: "not a plain name") }
        let bytes: [UInt8]
        if let kept { bytes = kept } else {
            let fetched = fetch(path, remote: remote)
            if let refused = fetched.refused { return refused }
            bytes = fetched.bytes
        }
        let parsed: (report: StatusReport, body: [UInt8], signature: [UInt8])
        do { parsed = try StatusReport.parse(bytes) } catch { return .refused(kind: "malformed", reason: error.reason) }
        let report = parsed.report
        let digest = SHA256Hasher.digest(of: bytes).hex
        guard verified.contains(digest)
                || parsed.body.withUnsafeBufferPointer({ verifier.verify(signature: parsed.signature, by: report.key, of: $0) }) else {
            return .refused(kind: "forged", reason: "its signature does not verify with the key it names (\(report.key))")
        }
        guard name == report.objectName else {
            return .refused(kind: "forged", reason: "it is signed by \(report.key) of machine \(report.machine), whose report is \(report.objectName)")
        }
        return .report(report, digest: digest, bytes: bytes, fetched: kept == nil)
    }

    /// The object at `path`, or why it is refused.
    private static func fetch(_ path: RelativePath, remote: Remote) -> (bytes: [UInt8], refused: Checked?) {
        do throws(FerryError) {
            switch try remote.fetchManifest(url: remote.base.url(for: path), etag: nil, lastModified: nil,
                                            maximumSize: Int64(StatusReport.maximumSize)) {
            case let .fetched(b, _, _, _): return (b, nil)
            case let .missing(error): return ([], .refused(kind: "unreadable", reason: error.message))
            case .unchanged: return ([], .refused(kind: "unreadable", reason: "answered 'not modified' to an unconditional request"))
            }
        } catch {
            // Over the size a report may have (`Remotes.tooLarge`, a manifest error): not one; else it could not be read.
            if error.category == .manifest {
                return ([], .refused(kind: "malformed", reason: "it is larger than \(StatusReport.maximumSize) bytes, the most a report can be"))
            }
            return ([], .refused(kind: "unreadable", reason: error.message))
        }
    }
}

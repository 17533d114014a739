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
    public var taken: [StatusReport] = []
    /// Keys taken for the first time (trust on first report, without a file of machine keys).
    public var firstSeen: [StatusReport] = []
    public var refused: [Refusal] = []
}

public enum FleetReading {
    /// Reads the reports of the location that is `session`'s remote (its credentials and
    /// options), judging each by `ledger` and `machineKeys` (nil: trust on first report).
    public static func read(session: SessionConfig, machineKeys: [PublicKey: String]?, ledger: inout FleetLedger,
                            clock: any Clock) throws(FerryError) -> FleetRead {
        let remote = try Remotes.open(session, clock: clock)
        guard let directory = remote as? RemoteDirectory else {
            throw .usage("ferry fleet cannot list \(session.remote.url)", hint: "use a file://, s3://, sftp:// or WebDAV http(s):// location")
        }
        let names = try directory.names(limit: 1_000_000).filter { $0.hasSuffix(StatusReport.suffix) }.sorted()
        let (fetched, _) = Lanes.run(names.count, lanes: 16, name: "ferry-fleet") { i throws(FerryError) -> Result<[UInt8], FerryError> in
            guard let path = try? RelativePath(validating: names[i]) else { return .failure(.remote("not a plain name")) }
            do throws(FerryError) {
                switch try remote.fetchManifest(url: remote.base.url(for: path), etag: nil, lastModified: nil,
                                                maximumSize: Int64(StatusReport.maximumSize)) {
                case let .fetched(bytes, _, _, _): return .success(bytes)
                case let .missing(error): return .failure(error)
                case .unchanged: return .failure(.remote("answered 'not modified' to an unconditional request"))
                }
            } catch { return .failure(error) }
        }
        var read = FleetRead(listed: names.count)
        let verifier = Ed25519Verifier()
        for (name, answer) in zip(names, fetched) {
            switch answer {
            case let .success(bytes)?: judge(bytes, name: name, verifier: verifier, machineKeys: machineKeys, ledger: &ledger, clock: clock, into: &read)
            case let .failure(error)?: read.refused.append(.init(kind: "unreadable", name: name, reason: error.message))
            case nil: read.refused.append(.init(kind: "unreadable", name: name, reason: "not read"))
            }
        }
        return read
    }

    private static func judge(_ bytes: [UInt8], name: String, verifier: Ed25519Verifier, machineKeys: [PublicKey: String]?,
                              ledger: inout FleetLedger, clock: any Clock, into read: inout FleetRead) {
        let parsed: (report: StatusReport, body: [UInt8], signature: [UInt8])
        do { parsed = try StatusReport.parse(bytes) } catch {
            read.refused.append(.init(kind: "malformed", name: name, reason: error.reason))
            return
        }
        let report = parsed.report
        guard parsed.body.withUnsafeBufferPointer({ verifier.verify(signature: parsed.signature, by: report.key, of: $0) }) else {
            read.refused.append(.init(kind: "forged", name: name, reason: "its signature does not verify with the key it names (\(report.key))"))
            return
        }
        guard name == report.objectName else {
            read.refused.append(.init(kind: "forged", name: name, reason: "it is signed by \(report.key) of machine \(report.machine), whose report is \(report.objectName)"))
            return
        }
        switch ledger.judge(report, signature: parsed.signature, machineKeys: machineKeys, now: clock.now()) {
        case let .taken(new):
            read.taken.append(report)
            if new && machineKeys == nil { read.firstSeen.append(report) }
        case let .replayed(reason): read.refused.append(.init(kind: "replayed", name: name, reason: reason))
        case let .forged(reason): read.refused.append(.init(kind: "forged", name: name, reason: reason))
        }
    }
}

import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// The same cases against every remote: nginx over HTTP and over HTTPS (HTTP/2, private CA), and a
/// local directory (`file://`). In-process, through `Remotes.open` and a real `TransferEngine`.
/// WebDAV and S3 join this suite when they come.
@Suite(.serialized)
struct RemoteConformanceTests {
    enum Kind: String, CaseIterable { case http, https, file }

    /// A published tree (a manifest and a 3 MB file) and the session that reaches it.
    final class World {
        let nginx: NginxServer?
        let session: SessionConfig
        let remote: Remote
        let content = randomData(3_000_000, seed: 77)
        let manifest: [UInt8]
        let scratch = Harness.temporaryDirectory("conformance")
        var entry: ManifestEntry

        init(_ kind: Kind) throws {
            let root: String
            if kind == .file {
                nginx = nil
                root = Harness.temporaryDirectory("conformance-remote")
            } else {
                nginx = try NginxServer()
                root = nginx!.root
            }
            try content.write(to: URL(fileURLWithPath: root + "/data.bin"))
            entry = ManifestEntry(path: RelativePath(trusted: "data.bin"), size: Int64(content.count), sha256: sha256(of: content))
            manifest = Array(ManifestWriter.render(version: 1, generated: Timestamp.now(), entries: [entry]).utf8)
            try Data(manifest).write(to: URL(fileURLWithPath: root + "/manifest.json"))
            let url: String
            switch kind {
            case .http: url = nginx!.url
            case .https: url = nginx!.tlsURL
            case .file: url = "file://" + root + "/"
            }
            var lines = ["[agent]", "state = \(scratch)/state", "", "[session c]", "remote = \(url)", "local = \(scratch)/local"]
            if kind == .https { lines.append("ca-file = \(try TestCertificates.shared().caCertificate)") }
            session = try ConfigParser.parse(lines.joined(separator: "\n") + "\n", path: scratch + "/ferry.conf").sessions[0]
            remote = try Remotes.open(session)
        }

        deinit {
            nginx?.stop()
            Harness.remove(scratch)
        }

        func task() -> TransferTask {
            TransferTask(id: 1, session: "c", path: entry.path, direction: .pull, state: .queued, size: entry.size, sha256: entry.sha256.hex,
                         bytesDone: 0, validator: nil, attempts: 0, lastError: nil, createdAt: Timestamp.now(), updatedAt: Timestamp.now())
        }

        /// A partial file holding `prefix`.
        func partial(_ prefix: Data = Data()) -> Int32 {
            let path = scratch + "/partial-\(UUID().uuidString)"
            let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            prefix.withUnsafeBytes { _ = write(fd, $0.baseAddress, $0.count) }
            return fd
        }

        /// Runs one download through an engine; returns its outcome, the download and the partial's bytes.
        func download(_ entry: ManifestEntry, resumeFrom prefix: Data = Data(), validator: String? = nil) throws
            -> (outcome: String, download: Download, bytes: Data) {
            let fd = partial(prefix)
            let download = try remote.download(task: task(), entry: entry, reason: .missing, into: fd,
                                               resumeFrom: Int64(prefix.count), validator: validator)
            let engine = TransferEngine(concurrency: 2)
            defer { engine.shutdown() }
            let source = OneShot(download)
            engine.run(source)
            _ = download.syncData()
            var bytes = Data(count: Int(download.bytesOnDisk))
            bytes.withUnsafeMutableBytes { _ = pread(fd, $0.baseAddress, $0.count, 0) }
            download.close()
            return (source.outcome, download, bytes)
        }
    }

    /// Hands the engine one transfer and notes how it ended.
    final class OneShot: TransferSource, @unchecked Sendable {
        var transfer: Transfer?
        var outcome = "none"
        init(_ transfer: Transfer) { self.transfer = transfer }
        func next() -> TransferEngine.Next {
            guard let t = transfer else { return .none }
            transfer = nil
            return .start(t)
        }
        func finished(_ batch: [(Transfer, TransferOutcome)]) {
            for (_, o) in batch {
                switch o {
                case .succeeded: outcome = "succeeded"
                case .interrupted: outcome = "interrupted"
                case let .failed(f): outcome = "failed(\(f.retry.rawValue)): \(f.message)"
                }
            }
        }
        func tick(_ running: [Transfer]) {}
        var shouldStop: Bool { false }
        var limit: Int { .max }
    }

    /// The write side (push): a put under `.ferry/`, a move to a final name in directories that do
    /// not exist yet (with a name that needs encoding), a move that replaces, removes that tolerate
    /// a file already gone. Read back through the remote's own read path.
    @Test(arguments: Kind.allCases)
    func writesUnderATemporaryNameAndMovesIntoPlace(kind: Kind) throws {
        let w = try World(kind)
        let writer = try #require(w.remote as? RemoteWriting)
        let temporary = RelativePath(trusted: ".ferry/upload/1")
        let final = RelativePath(trusted: "new dir/sub/ä b#1.txt")
        func read(_ path: RelativePath) throws -> [UInt8]? {
            do {
                guard case let .fetched(bytes, _, _) = try w.remote.fetchManifest(url: w.session.remote.url(for: path), etag: nil,
                                                                                 lastModified: nil, maximumSize: 1 << 20) else { return nil }
                return bytes
            } catch {
                return nil
            }
        }
        try writer.put(Array("first\n".utf8), at: temporary)
        #expect(try read(temporary) == Array("first\n".utf8))
        try writer.move(from: temporary, to: final)
        #expect(try read(final) == Array("first\n".utf8))
        #expect(try read(temporary) == nil, "the temporary name is gone once moved")

        try writer.put(Array("second\n".utf8), at: temporary)
        try writer.move(from: temporary, to: final)
        #expect(try read(final) == Array("second\n".utf8), "a move replaces what the final name held")

        try writer.remove(final)
        #expect(try read(final) == nil)
        try writer.remove(final)
    }

    /// An upload through the engine to a temporary name, moved into place, reads back the same;
    /// a file that changes after it was hashed is not reported as sent.
    @Test(arguments: Kind.allCases)
    func uploadsAFileThroughTheEngineAndNoticesOneThatChanged(kind: Kind) throws {
        let w = try World(kind)
        let writer = try #require(w.remote as? RemoteWriting)
        let localPath = w.scratch + "/up.bin"
        let content = randomData(2_500_000, seed: 78)
        try content.write(to: URL(fileURLWithPath: localPath))
        let entry = ManifestEntry(path: RelativePath(trusted: "up/up.bin"), size: Int64(content.count), sha256: sha256(of: content))
        func stat() -> LocalEntry {
            var st = Glibc.stat()
            lstat(localPath, &st)
            return FileSystem.entry(from: st)
        }
        func send(_ stat: LocalEntry) throws -> String {
            let upload = try writer.upload(task: w.task(), entry: entry, stat: stat, hashKnown: true, localPath: localPath,
                                           to: RelativePath(trusted: ".ferry/upload/7"))
            defer { upload.close() }
            let engine = TransferEngine(concurrency: 2)
            defer { engine.shutdown() }
            let source = OneShot(upload)
            engine.run(source)
            return source.outcome
        }
        let outcome = try send(stat())
        #expect(outcome == "succeeded", "\(outcome)")
        try writer.move(from: RelativePath(trusted: ".ferry/upload/7"), to: entry.path)
        guard case let .fetched(bytes, _, _) = try w.remote.fetchManifest(url: w.session.remote.url(for: entry.path), etag: nil, lastModified: nil,
                                                                         maximumSize: 8 << 20) else {
            Issue.record("the uploaded file must read back")
            return
        }
        #expect(Data(bytes) == content)

        // Hashed, then edited: refused at open, never reported as sent.
        let hashed = stat()
        usleep(10_000)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: localPath))
        try handle.seek(toOffset: 100)
        handle.write(Data("edited".utf8))
        try handle.close()
        #expect(throws: FerryError.self) { _ = try send(hashed) }
    }

    @Test(arguments: Kind.allCases)
    func fetchesTheManifestConditionally(kind: Kind) throws {
        let w = try World(kind)
        guard case let .fetched(bytes, etag, lastModified) = try w.remote.fetchManifest(url: w.session.manifestURL, etag: nil, lastModified: nil,
                                                                                         maximumSize: 1 << 20) else {
            Issue.record("first fetch must return the manifest")
            return
        }
        #expect(bytes == w.manifest)
        #expect(etag != nil || lastModified != nil, "a validator for the next fetch")
        let again = try w.remote.fetchManifest(url: w.session.manifestURL, etag: etag, lastModified: lastModified, maximumSize: 1 << 20)
        guard case .unchanged = again else {
            Issue.record("the same manifest again must be unchanged, got \(again)")
            return
        }
    }

    @Test(arguments: Kind.allCases)
    func refusesAManifestOverTheCapAndNamesAMissingOne(kind: Kind) throws {
        let w = try World(kind)
        let tooLarge = #expect(throws: FerryError.self) {
            _ = try w.remote.fetchManifest(url: w.session.manifestURL, etag: nil, lastModified: nil, maximumSize: 10)
        }
        #expect(tooLarge?.category == .manifest && tooLarge?.message.contains("max-manifest-size") == true)
        let missing = #expect(throws: FerryError.self) {
            _ = try w.remote.fetchManifest(url: w.session.remote.url + "absent.json", etag: nil, lastModified: nil, maximumSize: 1 << 20)
        }
        #expect(missing?.category == .remote && missing?.retryClass == .never, "\(String(describing: missing))")
    }

    @Test(arguments: Kind.allCases)
    func downloadsAndVerifiesAFile(kind: Kind) throws {
        let w = try World(kind)
        let run = try w.download(w.entry)
        #expect(run.outcome == "succeeded")
        #expect(run.bytes == w.content)
        #expect(run.download.received == Int64(w.content.count))
    }

    @Test(arguments: Kind.allCases)
    func resumesFromAnOffset(kind: Kind) throws {
        let w = try World(kind)
        let first = try w.download(w.entry)
        #expect(first.outcome == "succeeded")
        let kept = w.content.prefix(1_000_000)
        let run = try w.download(w.entry, resumeFrom: kept, validator: first.download.validator)
        #expect(run.outcome == "succeeded")
        #expect(run.download.received == Int64(w.content.count - kept.count), "only the rest was read")
        #expect(run.bytes == w.content)
    }

    @Test(arguments: Kind.allCases)
    func refusesContentThatDoesNotMatchTheManifest(kind: Kind) throws {
        let w = try World(kind)
        let wrong = ManifestEntry(path: w.entry.path, size: w.entry.size, sha256: SHA256Digest(hex: String(repeating: "0", count: 64))!)
        let run = try w.download(wrong)
        #expect(run.outcome.hasPrefix("failed(never): content does not match the manifest"), "\(run.outcome)")
        let shorter = ManifestEntry(path: w.entry.path, size: 1000, sha256: w.entry.sha256)
        #expect(try w.download(shorter).outcome.hasPrefix("failed(never)"))
    }

    @Test(arguments: Kind.allCases)
    func namesAMissingFile(kind: Kind) throws {
        let w = try World(kind)
        let missing = ManifestEntry(path: RelativePath(trusted: "gone.bin"), size: 10, sha256: w.entry.sha256)
        let run = try w.download(missing)
        #expect(run.outcome.hasPrefix("failed(never)"), "\(run.outcome)")
        #expect(run.outcome.contains("404") || run.outcome.contains("No such file"), "\(run.outcome)")
    }
}

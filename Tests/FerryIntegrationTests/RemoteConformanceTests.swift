import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// The same cases against every remote: nginx over HTTP and over HTTPS (HTTP/2, private CA),
/// Apache (its WebDAV, `mod_dav_fs`), a local directory (`file://`), S3 in two implementations
/// (SeaweedFS, and moto, whose dialect differs) and OpenSSH's sshd over SFTP. In-process, through `Remotes.open` and a real
/// `TransferEngine`. The write side runs against every remote a push can write (all of them).
@Suite(.serialized)
struct RemoteConformanceTests {
    /// The remotes tried, each a `ConformanceFixture`.
    enum Kind: String, CaseIterable {
        case http, https, apache, file, s3, moto, sftp

        func fixture() throws -> any ConformanceFixture {
            switch self {
            case .http: try NginxFixture(tls: false)
            case .https: try NginxFixture(tls: true)
            case .apache: try ApacheFixture()
            case .file: DirectoryFixture()
            case .s3: try S3Fixture(.seaweedfs)
            case .moto: try S3Fixture(.moto)
            case .sftp: try SFTPFixture()
            }
        }

        /// Where its store answers differently (without starting it).
        var dialect: ConformanceDialect {
            switch self {
            case .http, .https: NginxFixture.dialect
            case .apache: ApacheFixture.dialect
            case .file: DirectoryFixture.dialect
            case .s3: S3Fixture.dialect(.seaweedfs)
            case .moto: S3Fixture.dialect(.moto)
            case .sftp: SFTPFixture.dialect
            }
        }

        /// What its backend can do, as the backend itself says (without starting a server).
        var abilities: RemoteAbilities {
            let scheme = ["http": "http", "https": "https", "apache": "http", "file": "file", "s3": "s3", "moto": "s3", "sftp": "sftp"][rawValue]!
            return Backends.descriptions.first { $0.schemes.contains(scheme) }!.abilities
        }
    }
    /// The remotes a push can publish to: every one.
    static let writers: [Kind] = Kind.allCases
    /// The remotes whose backend replaces a small object on a condition, atomically.
    static let conditional: [Kind] = Kind.allCases.filter { $0.abilities.contains(.conditionalWrites) }
    /// The remotes whose backend sends a large file in parts, each signed over its own hash.
    static let multipart: [Kind] = Kind.allCases.filter { $0.abilities.contains(.hashesBeforeSending) }

    /// A published tree (a manifest and a 3 MB file) and the session that reaches it.
    final class World {
        let kind: Kind
        let fixture: any ConformanceFixture
        /// The remote's directory: where the tree is written (and, `writesUnderRoot`, where writes land).
        var root: String { fixture.root }
        let session: SessionConfig
        let remote: Remote
        let content = randomData(3_000_000, seed: 77)
        let manifest: [UInt8]
        let scratch = Harness.temporaryDirectory("conformance")
        var entry: ManifestEntry

        init(_ kind: Kind, partSize: String? = nil) throws {
            self.kind = kind
            fixture = try kind.fixture()
            let root = fixture.root
            try content.write(to: URL(fileURLWithPath: root + "/data.bin"))
            entry = ManifestEntry(path: RelativePath(trusted: "data.bin"), size: Int64(content.count), sha256: sha256(of: content))
            manifest = Array(ManifestWriter.render(version: 1, generated: SystemClock().now(), entries: [entry]).utf8)
            try Data(manifest).write(to: URL(fileURLWithPath: root + "/manifest.json"))
            // Published an hour ago: validators of a file changed within the last second do not
            // hold (`ResponsePolicy.validatorsHold`), and that has a case of its own.
            for name in ["data.bin", "manifest.json"] { World.age(root + "/" + name) }
            var lines = ["[agent]", "state = \(scratch)/state", "", "[session c]", "local = \(scratch)/local"]
            lines += try fixture.publish(scratch: scratch)
            if let partSize { lines.append("upload-part-size = \(partSize)") }
            session = try ConfigParser.parse(lines.joined(separator: "\n") + "\n", path: scratch + "/ferry.conf").sessions[0]
            remote = try Remotes.open(session, clock: SystemClock())
        }

        deinit {
            fixture.stop()
            Harness.remove(scratch)
        }

        /// Whether `bytes` are the published file's (a plain `==` in an expectation would have a
        /// failure diff two 3 MB values, which takes minutes).
        func holdsContent(_ bytes: Data) -> Bool { bytes == content }

        /// Sets a file's mtime an hour back.
        static func age(_ path: String) {
            var times = [timespec(tv_sec: time(nil) - 3600, tv_nsec: 0), timespec(tv_sec: time(nil) - 3600, tv_nsec: 0)]
            utimensat(AT_FDCWD, path, &times, 0)
        }

        func task() -> TransferTask {
            TransferTask(id: 1, session: "c", path: entry.path, direction: .pull, state: .queued, size: entry.size, sha256: entry.sha256.hex,
                         bytesDone: 0, validator: nil, attempts: 0, lastError: nil, createdAt: SystemClock().now(), updatedAt: SystemClock().now())
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
            let download = try remote.download(task: task(), entry: entry, from: entry.path, reason: .missing, into: PartialFile(fd: fd, length: Int64(prefix.count)),
                                               resumeFrom: Int64(prefix.count), validator: validator)
            let engine = try! TransferEngine(concurrency: 2, clock: SystemClock())
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

    /// Hands the engine one transfer and notes how it ended; past `deadline` (monotonic seconds)
    /// the transfer is stopped ("interrupted").
    final class OneShot: TransferSource, @unchecked Sendable {
        var transfer: Transfer?
        var outcome = "none"
        var failure: TransferFailure?
        let deadline: Double
        init(_ transfer: Transfer, deadline: Double = .infinity) {
            self.transfer = transfer
            self.deadline = deadline
        }

        /// Runs `transfer` alone through an engine that steps a waiting transfer only when what it
        /// waits for is ready (no sweep for a minute): one that says it waits on a socket with
        /// nothing to come, or waits on nothing it can be woken by, does not end within the 45 s.
        static func alone(_ transfer: Transfer) throws -> OneShot {
            let engine = try TransferEngine(concurrency: 2, clock: SystemClock())
            defer { engine.shutdown() }
            engine.sweepInterval = 60
            let source = OneShot(transfer, deadline: SystemClock().monotonic() + 45)
            engine.run(source)
            return source
        }
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
                case let .failed(f):
                    outcome = "failed(\(f.retry.rawValue)): \(f.message)"
                    failure = f
                }
            }
        }
        func tick(_ running: [Transfer]) {}
        var shouldStop: Bool { SystemClock().monotonic() > deadline }
        var limit: Int { .max }
    }

    /// Reads a file of the remote through its own read path; nil when it is not there.
    func read(_ w: World, _ path: RelativePath) -> [UInt8]? {
        guard case let .fetched(bytes, _, _, _)? = try? w.remote.fetchManifest(url: w.session.remote.url(for: path), etag: nil,
                                                                           lastModified: nil, maximumSize: 64 << 20) else { return nil }
        return bytes
    }

    /// What a push left on the remote (`ConformanceFixture.leftovers`).
    func leftovers(_ w: World) -> [String] { w.fixture.leftovers(w.remote) }

    /// A server the tests start leaves the directories above its own as they were, but for the
    /// search bit its user needs: /tmp stays 1777.
    @Test func apacheLeavesItsParentsModesAlone() throws {
        func modes(above directory: String) -> [String: mode_t] {
            var out: [String: mode_t] = [:]
            var path = (directory as NSString).deletingLastPathComponent
            while path != "/" && !path.isEmpty {
                var st = Glibc.stat()
                if stat(path, &st) == 0 { out[path] = st.st_mode & 0o7777 }
                path = (path as NSString).deletingLastPathComponent
            }
            return out
        }
        let probe = Harness.temporaryDirectory("probe")
        defer { Harness.remove(probe) }
        let before = modes(above: probe)
        let apache = try ApacheServer()
        defer { apache.stop() }
        let after = modes(above: apache.root)
        for (path, mode) in before where after[path] != nil {
            #expect(after[path]! == mode | (getuid() == 0 ? 0o001 : 0), "\(path): \(String(mode, radix: 8)) became \(String(after[path]!, radix: 8))")
        }
        #expect(!before.isEmpty)
    }

    /// The write side (push): an atomic write to a final name in directories that do not exist yet
    /// (with a name that needs encoding), one that replaces, removes that tolerate a file already
    /// gone, and a directory removed only once it holds nothing (S3 has none). Read back through
    /// the remote's own read path.
    @Test(arguments: writers)
    func writesAtomicallyAndRemoves(kind: Kind) throws {
        let w = try World(kind)
        let writer = try #require(w.remote as? RemoteWriting)
        let final = RelativePath(trusted: "new dir/sub/ä b#1.txt")
        #expect(try writer.write(Array("first\n".utf8), at: final, condition: .none) == .written)
        #expect(read(w, final) == Array("first\n".utf8))
        if w.fixture.dialect.writesUnderRoot {
            #expect(FileManager.default.contents(atPath: w.root + "/new dir/sub/ä b#1.txt") == Data("first\n".utf8), "written where the server keeps it")
        }
        #expect(leftovers(w).isEmpty, "nothing left beside it: \(leftovers(w))")

        #expect(try writer.write(Array("second\n".utf8), at: final, condition: .none) == .written)
        #expect(read(w, final) == Array("second\n".utf8), "a write replaces what the final name held")

        let directory = RelativePath(trusted: "new dir/sub")
        #expect(try writer.removeDirectoryIfEmpty(directory) == !w.fixture.dialect.hasDirectories, "a directory holding a file stays")
        #expect(read(w, final) == Array("second\n".utf8))
        try writer.remove(final)
        #expect(read(w, final) == nil)
        try writer.remove(final)
        #expect(try writer.removeDirectoryIfEmpty(directory) == true, "an empty directory goes")
        if w.fixture.dialect.writesUnderRoot { #expect(!FileManager.default.fileExists(atPath: w.root + "/new dir/sub")) }
        #expect(try writer.removeDirectoryIfEmpty(directory) == true, "one already gone is gone")
    }

    /// A `file://` write that fails removes its own temporary file only: in a directory many
    /// machines write at once (a report location), another's is theirs to put in place. One an
    /// hour older than a write is a killed writer's: the write removes it.
    @Test func aDirectoryWriteLeavesAnotherWritersTemporaryFileAndClearsAKilledOnes() throws {
        let w = try World(.file)
        let writer = try #require(w.remote as? RemoteWriting)
        #expect(try writer.write(Array("a\n".utf8), at: RelativePath(trusted: "a.report"), condition: .none) == .written)
        let other = w.root + "/.ferry/upload/manifest-0123456789abcdef"
        try Data("another machine's report\n".utf8).write(to: URL(fileURLWithPath: other))
        // A directory holding a file where the write's final name is: its rename fails.
        try FileManager.default.createDirectory(atPath: w.root + "/b.report/inside", withIntermediateDirectories: true)
        #expect(throws: FerryError.self) { try writer.write(Array("b\n".utf8), at: RelativePath(trusted: "b.report"), condition: .none) }
        #expect(leftovers(w) == ["upload/manifest-0123456789abcdef"], "its own temporary file gone, the other's kept: \(leftovers(w))")

        // That one left two hours ago (its writer killed); another being written now.
        var times = [timeval(tv_sec: time(nil) - 7200, tv_usec: 0), timeval(tv_sec: time(nil) - 7200, tv_usec: 0)]
        #expect(utimes(other, &times) == 0)
        try Data("written now\n".utf8).write(to: URL(fileURLWithPath: w.root + "/.ferry/upload/manifest-fedcba9876543210"))
        #expect(try writer.write(Array("c\n".utf8), at: RelativePath(trusted: "c.report"), condition: .none) == .written)
        #expect(leftovers(w) == ["upload/manifest-fedcba9876543210"], "the abandoned one gone, the one under way kept: \(leftovers(w))")
    }

    /// Where the remote writes conditionally (S3), a write for "nothing there" fails once something
    /// is, and one for the ETag read fails once another writer replaced it: as a value, not an error.
    @Test(arguments: conditional)
    func writesConditionallyWhereTheRemoteCan(kind: Kind) throws {
        let w = try World(kind)
        let writer = try #require(w.remote as? RemoteWriting)
        let path = RelativePath(trusted: "cond/manifest.json")
        #expect(try writer.write(Array("mine\n".utf8), at: path, condition: .absent) == .written)
        #expect(try writer.write(Array("theirs\n".utf8), at: path, condition: .absent) == .preconditionFailed)
        #expect(read(w, path) == Array("mine\n".utf8), "the first write stays")
        guard case let .fetched(_, etag?, _, _) = try w.remote.fetchManifest(url: w.session.remote.url(for: path), etag: nil, lastModified: nil,
                                                                        maximumSize: 1 << 20) else {
            Issue.record("an S3 object has an ETag")
            return
        }
        #expect(try writer.write(Array("other writer\n".utf8), at: path, condition: .none) == .written)
        #expect(try writer.write(Array("stale\n".utf8), at: path, condition: .matches(etag)) == .preconditionFailed)
        #expect(read(w, path) == Array("other writer\n".utf8), "another writer's object is never overwritten")
        guard case let .fetched(_, now?, _, _) = try w.remote.fetchManifest(url: w.session.remote.url(for: path), etag: nil, lastModified: nil,
                                                                       maximumSize: 1 << 20) else { return }
        #expect(try writer.write(Array("next\n".utf8), at: path, condition: .matches(now)) == .written)
        #expect(read(w, path) == Array("next\n".utf8))
    }

    /// Runs a placement's steps through an engine, one at a time, as a push does (a failed step the
    /// placement can mend is mended), until it is placed, a step fails, or `stopAfter` steps ran (a
    /// crash: the placement is dropped without ending).
    /// Returns how it ended and the bytes it sent.
    func place(_ w: World, _ file: LocalUpload, store: StateStore, stopAfter: Int = .max) throws -> (String, Int64) {
        let writer = try #require(w.remote as? RemoteWriting)
        let placement = try writer.placement(for: file, journal: UploadJournal(store: store, task: file.task))
        var step = try placement.next(after: nil)
        var steps = 0
        while let current = step {
            if steps == stopAfter { return ("stopped", placement.sent) }
            steps += 1
            let source = try OneShot.alone(current)
            if let failure = source.failure, let mended = placement.mend(current, failure) {
                step = mended
                continue
            }
            guard source.outcome == "succeeded" else {
                placement.end(placed: false, keep: false)
                return (source.outcome, placement.sent)
            }
            step = try placement.next(after: current)
        }
        placement.end(placed: true, keep: false)
        return ("placed", placement.sent)
    }

    /// A task row for an upload of `entry` (the journal of a placement in parts lives in it).
    func uploadTask(_ store: StateStore, _ entry: ManifestEntry) throws -> TransferTask {
        try #require(try store.queueUploads(session: "c", entries: [entry])[entry.path])
    }

    /// What ferry reads back of a placed file (a GET, hashed as it comes).
    func readBack(_ w: World, _ entry: ManifestEntry) throws -> RemoteFileState {
        let writer = try #require(w.remote as? RemoteWriting)
        guard case let .probe(probe) = writer.readBack(entry.path, limit: entry.size ?? 0) else { throw TestFailure("a read-back is a transfer") }
        let source = try OneShot.alone(probe)
        #expect(source.outcome == "succeeded", "\(source.outcome)")
        return try #require(probe.state)
    }

    func statOf(_ path: String) -> LocalEntry {
        var st = Glibc.stat()
        lstat(path, &st)
        return FileSystem.entry(from: st)
    }

    /// A placement through the engine (to a temporary name and moved, or straight to its key)
    /// reads back the same (with the manifest's mode, where the remote keeps modes), leaves nothing
    /// behind and is what the remote then says it holds; a file that changes after it was hashed
    /// is not reported as placed.
    @Test(arguments: writers)
    func placesAFileThroughTheEngineAndNoticesOneThatChanged(kind: Kind) throws {
        let w = try World(kind)
        let store = try StateStore(directory: w.scratch + "/state", clock: SystemClock())
        let localPath = w.scratch + "/up.bin"
        let content = randomData(2_500_000, seed: 78)
        try content.write(to: URL(fileURLWithPath: localPath))
        let entry = ManifestEntry(path: RelativePath(trusted: "up/up.bin"), size: Int64(content.count), sha256: sha256(of: content), mode: 0o640)
        let task = try uploadTask(store, entry)
        func send(_ stat: LocalEntry) throws -> String {
            try place(w, LocalUpload(task: task, entry: entry, destination: entry.path, stat: stat, hashKnown: true, file: open(localPath, O_RDONLY | O_CLOEXEC)), store: store).0
        }
        #expect(try send(statOf(localPath)) == "placed")
        #expect(read(w, entry.path).map { Data($0) } == content)
        #expect(leftovers(w).isEmpty, "\(leftovers(w))")
        if w.fixture.dialect.keepsModes {
            var st = Glibc.stat()
            #expect(lstat(w.root + "/up/up.bin", &st) == 0 && st.st_mode & 0o777 == 0o640)
        }
        // What the remote says it holds now matches what was sent.
        let writer = try #require(w.remote as? RemoteWriting)
        let states = try RemoteProbes.run([entry.path], writer: writer, session: w.session, engine: TransferEngine(concurrency: 2, clock: SystemClock()))
        let state = try #require(states[entry.path])
        #expect(state.mismatch(with: entry) == nil, "\(state)")
        if w.fixture.dialect.saysSHA256 { #expect(state.sha256 == entry.sha256, "the store gives back the SHA-256 it checked") }
        if w.fixture.dialect.keepsUnsignedBody {
            // moto computes no checksum of what it keeps (it neither checks nor keeps the
            // `x-amz-checksum-sha256` of a PUT): it says none, so a push reads the object back.
            #expect(state.sha256 == nil, "moto says no SHA-256: \(state)")
        }
        // Read back by ferry (what a push does where the store computes no checksum).
        let back = try readBack(w, entry)
        #expect(back.sha256 == entry.sha256 && back.verified == .readBack && back.mismatch(with: entry) == nil, "\(back)")

        // Hashed, then edited: never reported as placed.
        let hashed = statOf(localPath)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: localPath))
        try handle.seek(toOffset: 100)
        handle.write(Data("edited".utf8))
        try handle.close()
        // Edited "in the same instant": a later mtime all the same, as any edit gets.
        var times = [timespec(tv_sec: 0, tv_nsec: LocalRoot.utimeOmit), timespec(tv_sec: Int(hashed.mtime.seconds) + 1, tv_nsec: 0)]
        utimensat(AT_FDCWD, localPath, &times, 0)
        let changed = try send(hashed)
        // Seen as the file's change (so the push hashes it again and resends), whether the upload
        // noticed it or the store refused the body for its hash (S3).
        #expect(changed.hasPrefix("failed") && changed.contains("changed while it was sent"), "\(changed)")
        #expect(leftovers(w).isEmpty, "\(leftovers(w))")
        if w.fixture.dialect.keepsUnsignedBody {
            // S3 refuses a body that is not the one signed (`x-amz-content-sha256`, and
            // `x-amz-checksum-sha256`): SeaweedFS does, AWS does (BadDigest). moto checks neither
            // and keeps the edited bytes at the key, which a single PUT goes straight to. What ferry
            // does all the same: the file is not placed, and its read-back (moto computes no
            // checksum, so a push reads back) sees that the key holds other bytes than the manifest
            // entry, so nothing vouches for them; the push hashes the file again and resends it.
            let edited = try Data(contentsOf: URL(fileURLWithPath: localPath))
            #expect(read(w, entry.path).map { Data($0) } == edited, "moto kept the body it was sent")
            let back = try readBack(w, entry)
            #expect(back.sha256 == sha256(of: edited) && back.mismatch(with: entry) != nil, "\(back)")
        } else {
            #expect(read(w, entry.path).map { Data($0) } == content, "the file placed before stays whole")
        }
    }

    /// S3, above `upload-part-size`: a multipart upload whose parts are journaled as the store
    /// acknowledges them. Dropped after its second part (a `kill -9`), the next placement asks the
    /// store what it holds and sends only the last part; one for other content (the file changed)
    /// aborts the recorded upload, so nothing is left pending.
    @Test(arguments: multipart)
    func resumesAnUploadInPartsAndAbortsOneForOtherContent(kind: Kind) throws {
        let w = try World(kind, partSize: "5M")
        let store = try StateStore(directory: w.scratch + "/state", clock: SystemClock())
        let localPath = w.scratch + "/big.bin"
        var content = randomData(12 << 20, seed: 79)
        try content.write(to: URL(fileURLWithPath: localPath))
        var entry = ManifestEntry(path: RelativePath(trusted: "big/big.bin"), size: Int64(content.count), sha256: sha256(of: content))
        var task = try uploadTask(store, entry)
        func upload(stopAfter: Int = .max) throws -> (String, Int64) {
            try place(w, LocalUpload(task: task, entry: entry, destination: entry.path, stat: statOf(localPath), hashKnown: true, file: open(localPath, O_RDONLY | O_CLOEXEC)),
                      store: store, stopAfter: stopAfter)
        }
        // create, hash 1, part 1, hash 2, part 2: then the process dies.
        #expect(try upload(stopAfter: 5).0 == "stopped")
        let journaled = try #require(try store.journaledUpload(task: task.id))
        #expect(journaled.parts.map(\.number) == [1, 2])
        #expect(leftovers(w) == ["pre+fix~/big/big.bin"], "the upload waits on the store")
        #expect(read(w, entry.path) == nil, "nothing at the final key before it completes")

        let (resumed, sent) = try upload()
        #expect(resumed == "placed")
        #expect(sent == Int64(content.count) - 2 * (5 << 20), "only the part the store did not hold went again: \(sent)")
        #expect(read(w, entry.path).map { Data($0) } == content)
        #expect(leftovers(w).isEmpty, "\(leftovers(w))")
        #expect(try store.journaledUpload(task: task.id) == nil, "the journal is cleared once complete")

        // Started, then the file changes: the next placement gives the recorded upload up.
        content = randomData(11 << 20, seed: 80)
        #expect(try upload(stopAfter: 3).0 == "stopped")
        try content.write(to: URL(fileURLWithPath: localPath))
        entry = ManifestEntry(path: entry.path, size: Int64(content.count), sha256: sha256(of: content))
        task = try uploadTask(store, entry)
        #expect(try upload().0 == "placed")
        #expect(read(w, entry.path).map { Data($0) } == content)
        #expect(leftovers(w).isEmpty, "the upload for the old content was aborted: \(leftovers(w))")
    }

    /// Validators of a manifest that changed within the second before the answer do not hold: the
    /// answer gives none, so the next fetch asks for the whole manifest instead of trusting a 304
    /// (nginx derives its ETag from the mtime in seconds and the size). A local directory's
    /// validator has nanoseconds and the inode, and always holds.
    @Test(arguments: Kind.allCases.filter(\.dialect.validatorsInSeconds))
    func givesNoValidatorsForAManifestChangedWithinTheSecond(kind: Kind) throws {
        let w = try World(kind)
        var times = [timespec(tv_sec: time(nil) + 30, tv_nsec: 0), timespec(tv_sec: time(nil) + 30, tv_nsec: 0)]
        utimensat(AT_FDCWD, w.root + "/manifest.json", &times, 0)
        guard case let .fetched(_, etag, lastModified, _) = try w.remote.fetchManifest(url: w.session.manifestURL, etag: nil, lastModified: nil,
                                                                                     maximumSize: 1 << 20) else {
            Issue.record("a fetch without validators returns the manifest")
            return
        }
        #expect(etag == nil && lastModified == nil, "\(String(describing: etag)) \(String(describing: lastModified))")
    }

    @Test(arguments: Kind.allCases)
    func fetchesTheManifestConditionally(kind: Kind) throws {
        let w = try World(kind)
        guard case let .fetched(bytes, etag, lastModified, _) = try w.remote.fetchManifest(url: w.session.manifestURL, etag: nil, lastModified: nil,
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
        // "Not found" is a value (a push reads it as "nothing published yet"), carrying the error a
        // reader that needs the manifest says.
        guard case let .missing(missing) = try w.remote.fetchManifest(url: w.session.remote.url + "absent.json", etag: nil, lastModified: nil,
                                                                      maximumSize: 1 << 20) else {
            Issue.record("a manifest that is not there is .missing")
            return
        }
        #expect(missing.category == .remote && missing.retryClass == .never && missing.message.contains("absent.json"), "\(missing)")
    }

    @Test(arguments: Kind.allCases)
    func downloadsAndVerifiesAFile(kind: Kind) throws {
        let w = try World(kind)
        let run = try w.download(w.entry)
        #expect(run.outcome == "succeeded")
        #expect(w.holdsContent(run.bytes), "\(run.bytes.count) bytes, not the file's \(w.content.count)")
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
        #expect(w.holdsContent(run.bytes), "\(run.bytes.count) bytes, not the file's \(w.content.count)")
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
        if let word = w.fixture.dialect.missingWord { #expect(run.outcome.contains(word), "the store's own error code is said: \(run.outcome)") }
    }

    /// A delta (`DeltaAssembly`) on every remote: the published file assembled from an older
    /// version held locally and ranges of the remote (or reads at offsets), run alone on an engine
    /// that sweeps once a minute; the old version is damaged after it was planned from, so a
    /// piece built from local bytes fails its check and is fetched whole; the result is the
    /// published file, and about what changed crossed the network.
    @Test(arguments: Kind.allCases)
    func assemblesADeltaFromLocalBytesAndTheRemote(kind: Kind) throws {
        let w = try World(kind)
        let fd = open(w.root + "/data.bin", O_RDONLY)
        let indexed = try ContentScan.index(fd, what: "data.bin")
        close(fd)
        let store = Dictionary(indexed.index!.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        let pieces = try ContentIndex.resolve(indexed.index!.reference, size: indexed.size, source: "data.bin") { $0.map { store[$0] ?? [] } }.pieces
        var old = w.content
        old.replaceSubrange(500_000..<510_000, with: randomData(10_000, seed: 5))
        old.replaceSubrange(2_000_000..<2_004_096, with: randomData(4096, seed: 6))
        let oldPath = w.scratch + "/old.bin"
        try old.write(to: URL(fileURLWithPath: oldPath))
        let oldFD = open(oldPath, O_RDWR)
        let plan = DeltaPlan(pieces: pieces, local: try ContentScan.localChunks(oldFD, file: 0, what: "old.bin"))
        #expect(plan.worthIt && plan.fetched < 60_000, "\(plan.fetched)")
        var junk = [UInt8](repeating: 0xA5, count: 64)
        _ = pwrite(oldFD, &junk, 64, 1_500_000)
        let entry = ManifestEntry(path: w.entry.path, size: w.entry.size, sha256: w.entry.sha256, index: indexed.index!.reference)
        let partial = w.partial()
        let delta = try DeltaAssembly.download(task: w.task(), entry: entry, reason: .changed,
                                               origin: w.remote.origin(of: entry.path),
                                               partial: PartialFile(fd: partial, length: 0), resumeFrom: 0, plan: plan,
                                               sources: [oldFD], clock: SystemClock())
        let run = try OneShot.alone(delta)
        _ = delta.syncData()
        var bytes = Data(count: Int(delta.bytesOnDisk))
        bytes.withUnsafeMutableBytes { _ = pread(partial, $0.baseAddress, $0.count, 0) }
        delta.close()
        #expect(run.outcome == "succeeded", "\(run.outcome)")
        #expect(w.holdsContent(bytes), "\(bytes.count) bytes")
        let damagedPiece = pieces.first { $0.offset <= 1_500_000 && $0.offset + Int64($0.length) > 1_500_000 }!
        // What came over the network: the changes and the damaged piece (and, where the ranges were
        // asked at once, the multipart framing of the answer).
        // (The answer cut short to fetch the damaged piece whole counts too.)
        #expect(delta.received >= Int64(damagedPiece.length) && delta.received < plan.fetched + Int64(damagedPiece.length) + 20_000,
                "the changes and the damaged piece came from the remote: \(delta.received)")
        #expect(delta.reused + delta.received >= Int64(w.content.count) && delta.reused + delta.received < Int64(w.content.count) + 20_000)
    }

    /// A partial kept under a validator the remote no longer holds (the file was replaced since)
    /// is never continued with the new file's bytes: nginx answers the `If-Range` with the whole
    /// new file; S3 refuses the `If-Match` (412) and the file starts again from zero.
    @Test(arguments: Kind.allCases.filter { $0.dialect.staleRange != nil })
    func aResumeUnderAStaleValidatorNeverMixesVersions(kind: Kind) throws {
        let w = try World(kind)
        let answer = try #require(kind.dialect.staleRange)
        let kept = w.content.prefix(1_000_000)
        let stale = "\"0123456789abcdef0123456789abcdef\""
        let run = try w.download(w.entry, resumeFrom: kept, validator: stale)
        if answer == .refused {
            #expect(run.outcome.hasPrefix("failed(later)") && run.outcome.contains("412"), "\(run.outcome)")
            #expect(run.download.received == 0)
            let again = try w.download(w.entry)
            #expect(again.outcome == "succeeded" && w.holdsContent(again.bytes), "\(again.outcome)")
        } else {
            #expect(run.outcome == "succeeded", "\(run.outcome)")
            #expect(run.download.received == Int64(w.content.count), "the whole file came again")
            #expect(w.holdsContent(run.bytes), "\(run.bytes.count) bytes, not the file's \(w.content.count)")
        }
    }
}

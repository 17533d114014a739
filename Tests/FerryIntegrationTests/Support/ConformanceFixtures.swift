import Foundation
@testable import FerryRuntime
import FerryCore

/// One remote for `RemoteConformanceTests`: the server (or directory, or bucket) a backend is
/// tried against. It serves the tree a test writes into `root`, says how a session reaches it,
/// and what a push left on it. One per backend, and one more per store whose dialect differs
/// (moto beside SeaweedFS); a new backend adds one and a `Kind`.
protocol ConformanceFixture: AnyObject {
    /// The directory the published tree is written into before `publish`.
    var root: String { get }
    /// What this store says and does that others do not.
    var dialect: ConformanceDialect { get }
    /// Makes the tree in `root` the remote's; returns the config lines that reach it.
    func publish(scratch: String) throws -> [String]
    /// What a push left on the remote beside what it placed (temporary uploads; pending multipart uploads).
    func leftovers(_ remote: Remote) -> [String]
    func stop()
}

/// Where stores of one protocol answer differently, said once per fixture instead of as tests of
/// its name in the cases.
struct ConformanceDialect {
    /// What the remote writes lands under `root`, where a test can look (WebDAV, `file://`); an
    /// object store copies `root` in and writes elsewhere.
    var writesUnderRoot = true
    /// The remote has directories: one that holds a file cannot be removed (an object store has
    /// none, and says a "directory" is gone).
    var hasDirectories = true
    /// The remote keeps the mode a placement gives a file (`file://`).
    var keepsModes = false
    /// What the store says it holds carries the SHA-256 it computed (SeaweedFS).
    var saysSHA256 = false
    /// The store keeps a body other than the one signed instead of refusing it (moto).
    var keepsUnsignedBody = false
    /// The word a missing file's error carries besides its status (S3's `NoSuchKey`).
    var missingWord: String?
    /// The manifest's validators come from its mtime in seconds (nginx), so a manifest changed
    /// within the second must get none.
    var validatorsInSeconds = false
    /// How a ranged read under a validator the file no longer has is answered: the whole new file
    /// (`If-Range`), or a refusal (412 to `If-Match`); nil where no case covers it.
    var staleRange: StaleRange?

    enum StaleRange { case wholeFile, refused }
}

/// nginx over HTTP, or over HTTPS with HTTP/2 and a private CA; WebDAV for writes.
final class NginxFixture: ConformanceFixture {
    let server: NginxServer
    let tls: Bool
    var root: String { server.root }
    static let dialect = ConformanceDialect(validatorsInSeconds: true, staleRange: .wholeFile)
    var dialect: ConformanceDialect { Self.dialect }

    init(tls: Bool) throws {
        server = try NginxServer()
        self.tls = tls
    }

    func publish(scratch: String) throws -> [String] {
        tls ? ["remote = \(server.tlsURL)", "ca-file = \(try TestCertificates.shared().caCertificate)"] : ["remote = \(server.url)"]
    }

    func leftovers(_ remote: Remote) -> [String] { filesUnder(root + "/.ferry") }
    func stop() { server.stop() }
}

/// Apache's WebDAV (`mod_dav_fs`).
final class ApacheFixture: ConformanceFixture {
    let server: ApacheServer
    var root: String { server.root }
    static let dialect = ConformanceDialect()
    var dialect: ConformanceDialect { Self.dialect }

    init() throws { server = try ApacheServer() }
    func publish(scratch: String) throws -> [String] { ["remote = \(server.url)"] }
    func leftovers(_ remote: Remote) -> [String] { filesUnder(root + "/.ferry") }
    func stop() { server.stop() }
}

/// A local directory (`file://`).
final class DirectoryFixture: ConformanceFixture {
    let root = Harness.temporaryDirectory("conformance-remote")
    static let dialect = ConformanceDialect(keepsModes: true)
    var dialect: ConformanceDialect { Self.dialect }

    func publish(scratch: String) throws -> [String] { ["remote = file://" + root + "/"] }
    func leftovers(_ remote: Remote) -> [String] { filesUnder(root + "/.ferry") }
    func stop() { Harness.remove(root) }
}

/// An S3 store (SeaweedFS, or moto, whose dialect differs): the tree is put into a bucket of the
/// test's own, under a prefix that needs encoding.
final class S3Fixture: ConformanceFixture {
    let store: any S3TestStore
    let root = Harness.temporaryDirectory("conformance-remote")
    let dialect: ConformanceDialect
    var bucket = ""
    let prefix = "pre+fix~/"

    init(_ implementation: S3Implementation) throws {
        store = try implementation.shared()
        dialect = Self.dialect(implementation)
    }

    static func dialect(_ implementation: S3Implementation) -> ConformanceDialect {
        ConformanceDialect(writesUnderRoot: false, hasDirectories: false, saysSHA256: implementation == .seaweedfs,
                           keepsUnsignedBody: implementation == .moto, missingWord: "NoSuchKey", staleRange: .refused)
    }

    func publish(scratch: String) throws -> [String] {
        bucket = try store.newBucket("conformance")
        try store.putTree(root, bucket: bucket, prefix: prefix)
        return ["remote = s3://\(bucket)/\(prefix)", "s3-endpoint = \(store.endpoint)", "s3-credentials = \(try store.credentialsFile(in: scratch))"]
    }

    /// The multipart uploads still pending in the bucket.
    func leftovers(_ remote: Remote) -> [String] {
        guard let s3 = remote as? S3Remote,
              let answer = try? S3Exchange.perform(s3.request("GET", key: nil, query: [("uploads", "")]), what: "list uploads") else { return ["?"] }
        return S3XML.blocks("Upload", in: answer.body).map { S3XML.element("Key", in: $0) ?? "?" }
    }

    func stop() { Harness.remove(root) }
}

/// OpenSSH's sshd (`SSHServer`) over SFTP, logged in with a key of the test's own and checked
/// against a known_hosts file that holds the server's key. The manifest's validator is its
/// content's hash, so a change within the second is seen.
final class SFTPFixture: ConformanceFixture {
    let server: SSHServer
    var root: String { server.root }
    static let dialect = ConformanceDialect(keepsModes: true, staleRange: .wholeFile)
    var dialect: ConformanceDialect { Self.dialect }

    init() throws { server = try SSHServer() }
    func publish(scratch: String) throws -> [String] {
        ["remote = \(server.url)", "sftp-key = \(server.clientKey)", "sftp-known-hosts = \(server.knownHosts)"]
    }
    func leftovers(_ remote: Remote) -> [String] { filesUnder(root + "/.ferry") }
    func stop() { server.stop() }
}

/// The files (not directories) under `directory`, relative to it.
private func filesUnder(_ directory: String) -> [String] {
    guard let walker = FileManager.default.enumerator(atPath: directory) else { return [] }
    var out: [String] = []
    while let p = walker.nextObject() as? String {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory + "/" + p, isDirectory: &isDirectory), !isDirectory.boolValue { out.append(p) }
    }
    return out
}

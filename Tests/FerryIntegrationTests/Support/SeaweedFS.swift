import Foundation
@testable import FerryRuntime
import FerryCore
import Synchronization

/// SeaweedFS (`weed mini`: master, volume, filer and S3 gateway in one process) on 127.0.0.1, one
/// per test process, with SigV4 credentials of its own (`-s3.config`). Tests take a bucket each.
/// It answers path-style requests at 127.0.0.1 and virtual-hosted ones at `BUCKET.localhost`
/// (`-s3.domainName`; libcurl resolves `*.localhost` to the loopback itself).
/// Objects are put and read with curl's own SigV4 (`--aws-sigv4`), not ferry's, so a test sees
/// what the store holds through a second client. `weed` comes from scripts/setup.sh (`.venv/`).
final class SeaweedFS: S3TestStore, Sendable {
    static let accessKey = "FERRYTESTKEY"
    static let secretKey = "ferry-test-secret/+K7"
    /// Two more identities with the same rights, for keys a test's credentials source hands out
    /// (the second after a refresh): the store's answers say whether each signs.
    static let handedOutKeys = [(accessKey: "FERRYHANDEDOUT1", secretKey: "handed-out-secret-1/+"),
                                (accessKey: "FERRYHANDEDOUT2", secretKey: "handed-out-secret-2/+")]
    let directory: String
    let port: UInt16
    private let pid: pid_t

    var endpoint: String { "http://127.0.0.1:\(port)" }

    static var binary: String {
        ProcessInfo.processInfo.environment["FERRY_WEED"] ?? Harness.packageRoot + "/.venv/bin/weed"
    }

    private static let started: Result<SeaweedFS, TestFailure> = {
        do { return .success(try SeaweedFS()) } catch let error as TestFailure { return .failure(error) } catch {
            return .failure(TestFailure("\(error)"))
        }
    }()

    /// The test process's store, started on first use and stopped when the process exits.
    static func shared() throws -> SeaweedFS { try started.get() }

    private init() throws {
        directory = Harness.temporaryDirectory("seaweedfs")
        let identities = """
            {"identities":[{"name":"ferry","credentials":[{"accessKey":"\(Self.accessKey)","secretKey":"\(Self.secretKey)"}],
            "actions":["Admin","Read","Write","List","Tagging"]}\(Self.handedOutKeys.enumerated().map { i, keys in
                #",{"name":"handed-out-\#(i + 1)","credentials":[{"accessKey":"\#(keys.accessKey)","secretKey":"\#(keys.secretKey)"}],"actions":["Admin","Read","Write","List"]}"#
            }.joined())]}
            """
        try identities.writeReplacing(directory + "/s3.json")
        let directory = self.directory
        // Every port it listens on is named: two test processes (or a bench) must not meet on a default one.
        let names = ["s3.port", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
                     "admin.port", "admin.port.grpc"]
        let started = try startListening("SeaweedFS (\(Self.binary); run scripts/setup.sh)", ports: names.count, timeout: 60) { ports in
            Self.removeSockets(ports)
            Harness.remove(directory + "/data")
            try FileManager.default.createDirectory(atPath: directory + "/data", withIntermediateDirectories: true)
            let arguments = ["mini", "-dir=\(directory)/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
                             "-s3.config=\(directory)/s3.json", "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                             "-s3.domainName=localhost", "-s3.localSocket=\(directory)/s3.sock", "-filer.localSocket=\(directory)/filer.sock"]
                + zip(names, ports).map { "-\($0)=\($1)" }
            return (try Child(Self.binary, arguments, stdout: directory + "/weed.log", stderr: directory + "/weed.log"), [directory + "/weed.log"])
        }
        let child = started.child
        (port, pid) = (started.ports[0], child.pid)
        SeaweedFS.running.withLock { $0 = (child.pid, directory, started.ports) }
        atexit { SeaweedFS.stopAtExit() }
        // Ready when the S3 gateway answers (403 to an unsigned request) and a bucket can be made.
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if (try? makeBucket("ready-check")) != nil { return }
            guard child.isRunning else { break }
            usleep(50_000)
        }
        let log = (try? String(contentsOfFile: directory + "/weed.log", encoding: .utf8)) ?? ""
        throw TestFailure("SeaweedFS did not start (\(Self.binary); run scripts/setup.sh): \(log.suffix(2000))")
    }

    /// The process to stop at exit, and its directory.
    private static let running = Mutex<(pid_t, String, [UInt16])?>(nil)

    /// SIGTERM, then SIGKILL when it has not ended within a second (weed can ignore SIGTERM).
    private static func stopAtExit() {
        guard let (pid, directory, ports) = running.withLock({ $0 }) else { return }
        kill(pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<100 {
            if waitpid(pid, &status, WNOHANG) == pid { break }
            usleep(10_000)
        }
        if waitpid(pid, &status, WNOHANG) == 0 {
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
        }
        Harness.remove(directory)
        removeSockets(ports)
    }

    /// weed names its gRPC sockets after their ports, always in /tmp (no flag moves them).
    static func removeSockets(_ ports: [UInt16]) {
        for port in ports {
            for name in ["master-grpc", "volume-grpc", "filer-grpc", "s3-grpc", "s3", "filer"] { unlink("/tmp/seaweedfs-\(name)-\(port).sock") }
        }
    }
}

/// An S3 store the tests put objects into and read them from, with curl's own SigV4.
protocol S3TestStore {
    var endpoint: String { get }
}

/// The S3 implementations the cases that hold for any S3 store run against, each one store per
/// test process: SeaweedFS, and moto, whose dialect differs (it computes no checksum of a single
/// PUT and checks none it is sent).
enum S3Implementation: String, CaseIterable {
    case seaweedfs, moto

    func shared() throws -> any S3TestStore {
        switch self {
        case .seaweedfs: try SeaweedFS.shared()
        case .moto: try MotoServer.shared()
        }
    }
}

extension S3TestStore {
    /// A new bucket with a name no other test uses.
    func newBucket(_ label: String) throws -> String {
        let name = "\(label.lowercased())-\(UUID().uuidString.prefix(8).lowercased())"
        try makeBucket(name)
        return name
    }

    func makeBucket(_ name: String) throws {
        let run = curl(["-X", "PUT", endpoint + "/" + name])
        guard run.status == 200 || run.status == 409 else { throw TestFailure("cannot make bucket \(name): \(run.status) \(run.body)") }
    }

    /// The URL of `key` in `bucket` (each segment percent-encoded).
    func url(_ bucket: String, _ key: String) -> String {
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
        allowed.insert(charactersIn: "-_.~/")
        return endpoint + "/" + bucket + "/" + key.addingPercentEncoding(withAllowedCharacters: allowed)!
    }

    func put(_ bucket: String, _ key: String, file: String) throws {
        let run = curl(["-T", file, url(bucket, key)])
        guard run.status == 200 else { throw TestFailure("cannot put \(key): \(run.status) \(run.body)") }
    }

    func put(_ bucket: String, _ key: String, data: Data) throws {
        let file = Harness.temporaryDirectory("put") + "/body"
        defer { Harness.remove(String(file.dropLast(5))) }
        try data.write(to: URL(fileURLWithPath: file))
        try put(bucket, key, file: file)
    }

    /// Puts every regular file under `directory` at `prefix` + its relative path.
    func putTree(_ directory: String, bucket: String, prefix: String) throws {
        let walker = FileManager.default.enumerator(atPath: directory)!
        while let relative = walker.nextObject() as? String {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory + "/" + relative, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
            try put(bucket, prefix + relative, file: directory + "/" + relative)
        }
    }

    /// The object's bytes, or nil when the store has none at `key`.
    func get(_ bucket: String, _ key: String) -> Data? {
        let file = Harness.temporaryDirectory("get") + "/body"
        defer { Harness.remove(String(file.dropLast(5))) }
        let run = curl(["-o", file, url(bucket, key)])
        return run.status == 200 ? try? Data(contentsOf: URL(fileURLWithPath: file)) : nil
    }

    /// The keys under `prefix` in `bucket` (up to 1,000: the tests' trees are smaller).
    func keys(_ bucket: String, prefix: String = "") -> [String] {
        let run = curl([endpoint + "/" + bucket + "?list-type=2&max-keys=1000&prefix=" + (prefix.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")])
        return S3XML.blocks("Contents", in: Array(run.body.utf8)).compactMap { S3XML.element("Key", in: $0) }
    }

    /// The keys of the multipart uploads pending in `bucket` (asked through ferry's own signer:
    /// curl's cannot sign the empty `uploads` parameter).
    func pendingUploads(_ bucket: String) throws -> [String] {
        let directory = Harness.temporaryDirectory("uploads")
        defer { Harness.remove(directory) }
        let text = """
            [agent]
            state = \(directory)/state
            [session s]
            remote = s3://\(bucket)/
            local = \(directory)/local
            s3-endpoint = \(endpoint)
            s3-credentials = \(try credentialsFile(in: directory))

            """
        let remote = try S3Remote(session: ConfigParser.parse(text, path: directory + "/ferry.conf").sessions[0], clock: SystemClock())
        let answer = try S3Exchange.perform(remote.request("GET", key: nil, query: [("uploads", "")]), what: "list uploads")
        guard answer.headers.status == 200 else { throw TestFailure("cannot list uploads: \(answer.headers.status)") }
        return S3XML.blocks("Upload", in: answer.body).map { S3XML.element("Key", in: $0) ?? "?" }
    }

    /// A shared-credentials file holding the store's keys under `profile`, mode 0600.
    func credentialsFile(in directory: String, profile: String = "default") throws -> String {
        let path = directory + "/aws-credentials"
        try "[\(profile)]\naws_access_key_id = \(SeaweedFS.accessKey)\naws_secret_access_key = \(SeaweedFS.secretKey)\n".writeReplacing(path)
        chmod(path, 0o600)
        return path
    }

    /// One signed request through curl: the status and the body (or what curl said).
    func curl(_ arguments: [String]) -> (status: Int, body: String) {
        let run = runProcess("/usr/bin/curl", ["-s", "-S", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "\(SeaweedFS.accessKey):\(SeaweedFS.secretKey)",
                                                 "-w", "\n%{http_code}"] + arguments, timeout: 60)
        let lines = run.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n") + run.stderr)
    }
}

/// SeaweedFS as a real distributed store, each part its own process: a master, two volume servers
/// (replication 001: every object on both), a filer and an S3 gateway, all on 127.0.0.1 with ports
/// of their own and everything under one directory. A volume server can be stopped and started
/// again while ferry runs. Stopped at the end of its test (SIGTERM, SIGKILL after a second).
final class SeaweedCluster: S3TestStore {
    let directory: String
    private(set) var s3Port: UInt16 = 0
    private var masterAddress = ""
    private var processes: [String: Child] = [:]
    private var volumeArguments: [[String]] = []
    /// Every port it was given: weed names sockets in /tmp after them.
    private var ports: [UInt16] = []

    var endpoint: String { "http://127.0.0.1:\(s3Port)" }

    init() throws {
        directory = Harness.temporaryDirectory("weed-cluster")
        for part in ["master", "volume0", "volume1", "filer"] {
            try FileManager.default.createDirectory(atPath: directory + "/" + part, withIntermediateDirectories: true)
        }
        try """
            {"identities":[{"name":"ferry","credentials":[{"accessKey":"\(SeaweedFS.accessKey)","secretKey":"\(SeaweedFS.secretKey)"}],
            "actions":["Admin","Read","Write","List","Tagging"]}]}
            """.writeReplacing(directory + "/s3.json")
        do {
            let master = try launch("master") { ["master", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-port=\($0[0])", "-port.grpc=\($0[1])",
                                                 "-mdir=\(self.directory)/master", "-defaultReplication=001", "-telemetry=false", "-volumeSizeLimitMB=64", "-peers=none"] }
            masterAddress = "127.0.0.1:\(master[0]).\(master[1])"
            for i in 0..<2 {
                let address = masterAddress
                _ = try launch("volume\(i)") { ["volume", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-port=\($0[0])", "-port.grpc=\($0[1])",
                                                "-dir=\(self.directory)/volume\(i)", "-master=\(address)", "-max=30", "-rack=r1", "-dataCenter=dc1"] }
            }
            let address = masterAddress
            let filer = try launch("filer") { ["filer", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-port=\($0[0])", "-port.grpc=\($0[1])", "-master=\(address)",
                                               "-defaultStoreDir=\(self.directory)/filer", "-localSocket=\(self.directory)/filer.sock", "-defaultReplicaPlacement=001"] }
            s3Port = try launch("s3") { ["s3", "-ip.bind=127.0.0.1", "-port=\($0[0])", "-port.grpc=\($0[1])", "-port.iceberg=0", "-port.lance=0",
                                         "-filer=127.0.0.1:\(filer[0]).\(filer[1])", "-config=\(self.directory)/s3.json", "-localSocket=\(self.directory)/s3.sock"] }[0]
            // Ready when a bucket can be made and an object put: the master then knows both volume
            // servers (a write with replication 001 needs two).
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline {
                if (try? makeBucket("ready-check")) != nil, (try? put("ready-check", "probe", data: Data("probe".utf8))) != nil { return }
                usleep(50_000)
            }
            throw failure("the cluster did not take a write")
        } catch {
            stop()
            throw error
        }
    }

    /// Starts part `name` on two fresh ports (HTTP and gRPC) that `arguments` puts in its command
    /// line, once it listens on both; returns them.
    private func launch(_ name: String, _ arguments: ([UInt16]) -> [String]) throws -> [UInt16] {
        let log = directory + "/\(name).log"
        let started = try startListening("SeaweedFS cluster: the \(name) (\(SeaweedFS.binary); run scripts/setup.sh)", ports: 2) { given in
            ports += given
            return (try Child(SeaweedFS.binary, arguments(given), stdout: log, stderr: log), [log])
        }
        processes[name] = started.child
        if name.hasPrefix("volume") { volumeArguments.append(arguments(started.ports)) }
        return started.ports
    }

    private func failure(_ what: String) -> TestFailure {
        let logs = ["master", "volume0", "volume1", "filer", "s3"].map { name in
            "\(name): " + String(((try? String(contentsOfFile: directory + "/\(name).log", encoding: .utf8)) ?? "").suffix(600))
        }
        return TestFailure("SeaweedFS cluster: \(what) (\(SeaweedFS.binary); run scripts/setup.sh)\n" + logs.joined(separator: "\n"))
    }

    /// Starts volume server `i` again on its ports, after `stopVolume`.
    func startVolume(_ i: Int) throws {
        let log = directory + "/volume\(i).log"
        processes["volume\(i)"] = try Child(SeaweedFS.binary, volumeArguments[i], stdout: log, stderr: log)
    }

    /// Stops a volume server as an outage would: SIGTERM, then SIGKILL after a second.
    func stopVolume(_ i: Int) { Self.end(processes.removeValue(forKey: "volume\(i)")) }

    private static func end(_ child: Child?) {
        guard let child else { return }
        child.signal(SIGTERM)
        if child.wait(timeout: 1) == nil {
            child.signal(SIGKILL)
            child.wait(timeout: 10)
        }
    }

    func stop() {
        for name in ["s3", "filer", "volume0", "volume1", "master"] { Self.end(processes.removeValue(forKey: name)) }
        Harness.remove(directory)
        SeaweedFS.removeSockets(ports)
    }

    deinit { stop() }
}

/// A hostile S3 store of the project's own (scripts/s3faults.py): a proxy in front of a real
/// one that passes everything through unless a rule says to lie (another checksum, none, other
/// bytes, a refusal, a listing that never ends). Its log has every request it saw.
final class S3FaultProxy: S3TestStore {
    let port: UInt16
    let upstream: any S3TestStore
    let directory: String
    var log: String { directory + "/requests.jsonl" }
    private var faultsFile: String { directory + "/faults.json" }
    private let process: Child

    init(before store: any S3TestStore, upstreamPort: UInt16) throws {
        upstream = store
        let directory = Harness.temporaryDirectory("s3faults")
        self.directory = directory
        (port, process) = try startScript("the S3 fault proxy", "s3faults.py", in: directory, log: "proxy.log") {
            ["--upstream", String(upstreamPort), "--port", String($0), "--log", directory + "/requests.jsonl", "--faults", directory + "/faults.json"]
        }
    }

    var endpoint: String { "http://127.0.0.1:\(port)" }

    /// Replaces the rules (see scripts/s3faults.py).
    func setFaults(_ rules: [[String: Any]]) {
        let data = try! JSONSerialization.data(withJSONObject: rules)
        try! data.write(to: URL(fileURLWithPath: faultsFile + ".tmp"))
        rename(faultsFile + ".tmp", faultsFile)
    }

    func clearLog() { try? "".write(toFile: log, atomically: false, encoding: .utf8) }

    /// The requests it saw: method, path, query, status.
    func requests() -> [(method: String, path: String, query: String, status: Int)] {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            return (o["method"] as? String ?? "", o["path"] as? String ?? "", o["query"] as? String ?? "", o["status"] as? Int ?? 0)
        }
    }

    /// The `Range` header of each GET of a key under `path` it saw ("whole": none), in order.
    func ranges(of path: String) -> [String] {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  o["method"] as? String == "GET", (o["path"] as? String ?? "").hasSuffix(path) else { return nil }
            return o["range"] as? String ?? "whole"
        }
    }

    /// The `Expect` header of each request it saw (nil: none), with its method and path.
    func expectations() -> [(method: String, path: String, expect: String?)] {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            return (o["method"] as? String ?? "", o["path"] as? String ?? "", o["expect"] as? String)
        }
    }

    func stop() {
        process.stop()
        Harness.remove(directory)
    }

    deinit { stop() }
}

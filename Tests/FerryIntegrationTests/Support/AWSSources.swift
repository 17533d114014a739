import Foundation
import Synchronization

/// scripts/credserver.py on 127.0.0.1: the EC2 instance metadata service (IMDSv2: a GET without a
/// valid session token gets 401) and a container credentials endpoint, handing out the
/// credentials `configure` gives, each answer logged with the access key and expiration it held.
final class CredentialServer {
    let port: UInt16
    let directory: String
    private let process: Child
    var configFile: String { directory + "/config.json" }
    var log: String { directory + "/requests.jsonl" }

    init() throws {
        let directory = Harness.temporaryDirectory("credserver")
        self.directory = directory
        (port, process) = try startScript("credserver.py", "credserver.py", in: directory, log: "server.log") {
            ["--port", String($0), "--config", directory + "/config.json", "--log", directory + "/requests.jsonl"]
        }
    }

    /// The instance metadata endpoint (`AWS_EC2_METADATA_SERVICE_ENDPOINT`).
    var endpoint: String { "http://127.0.0.1:\(port)" }
    /// A container credentials URL (`AWS_CONTAINER_CREDENTIALS_FULL_URI`).
    var containerURL: String { "http://127.0.0.1:\(port)/container/v2/credentials/ferry" }

    /// Replaces what the server hands out (see scripts/credserver.py), at once for the next request.
    func configure(_ settings: [String: Any]) {
        let data = try! JSONSerialization.data(withJSONObject: settings)
        try! data.write(to: URL(fileURLWithPath: configFile + ".tmp"))
        rename(configFile + ".tmp", configFile)
    }

    /// The requests it answered, in order.
    func requests() -> [[String: Any]] {
        (fileContents(log) ?? "").split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// The answers that handed out credentials: when, which access key, which expiration.
    func handedOut() -> [(time: Double, accessKey: String, expiration: String)] {
        requests().compactMap { r in
            guard let key = r["access_key"] as? String, let time = r["time"] as? Double, let expiration = r["expiration"] as? String else { return nil }
            return (time, key, expiration)
        }
    }

    func stop() {
        process.stop()
        Harness.remove(directory)
    }

    deinit { stop() }
}

/// moto's server (`moto[server]` from scripts/setup.sh) on 127.0.0.1: a real STS that answers
/// `AssumeRoleWithWebIdentity` with fresh temporary credentials, and an S3 that takes any
/// signature: a second S3 implementation, whose dialect differs from SeaweedFS's (it computes no
/// checksum of what it keeps; its multipart checksum is the bare composite). `shared()` is one
/// per test process, stopped when the process exits; a test that needs a fresh one makes its own.
final class MotoServer: S3TestStore, Sendable {
    let port: UInt16
    let directory: String
    /// The server; a lock only to make the handle shareable between tests (it is stopped once).
    private let process: Mutex<Child>

    init() throws {
        let directory = Harness.temporaryDirectory("moto")
        self.directory = directory
        let binary = Harness.packageRoot + "/.venv/bin/moto_server"
        let started: (ports: [UInt16], child: Child)
        do {
            started = try startListening("moto_server (\(binary); run scripts/setup.sh)", ports: 1, timeout: 60) { ports in
                let child = try Child(binary, ["-H", "127.0.0.1", "-p", String(ports[0])], stdout: directory + "/moto.log", stderr: directory + "/moto.log")
                return (child, [directory + "/moto.log"])
            }
        } catch {
            Harness.remove(directory)
            throw error
        }
        port = started.ports[0]
        process = Mutex(started.child)
        // Ready when it answers HTTP (the port may open before the app is loaded): any status.
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline && process.withLock({ $0.isRunning }) {
            let probe = runProcess("/usr/bin/curl", ["-s", "-o", "/dev/null", "-m", "2", "-w", "%{http_code}",
                                                     "http://127.0.0.1:\(port)/?Action=GetCallerIdentity&Version=2011-06-15"])
            if probe.stdout != "000" && !probe.stdout.isEmpty { return }
            usleep(50_000)
        }
        process.withLock { $0.stop() }
        throw TestFailure("moto_server did not start (\(binary); run scripts/setup.sh): \(fileContents(directory + "/moto.log") ?? "")")
    }

    private static let started: Result<MotoServer, TestFailure> = {
        do {
            let moto = try MotoServer()
            atexit { if case let .success(moto) = MotoServer.started { moto.stop() } }
            return .success(moto)
        } catch let error as TestFailure { return .failure(error) } catch {
            return .failure(TestFailure("\(error)"))
        }
    }()

    /// The test process's moto, started on first use and stopped when the process exits. Its
    /// state lives in memory only: tests take a bucket each, as on SeaweedFS.
    static func shared() throws -> MotoServer { try started.get() }

    var endpoint: String { "http://127.0.0.1:\(port)" }

    func stop() {
        process.withLock { $0.stop() }
        Harness.remove(directory)
    }

    deinit { stop() }
}

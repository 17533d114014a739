import Foundation
import Synchronization
import Testing

/// A real nginx on 127.0.0.1 serving `root` over HTTP (ranges, ETags, WebDAV PUT/DELETE/MOVE, and
/// PROPFIND through Debian's dav-ext module), and
/// over HTTPS with HTTP/2 using a certificate from the test CA. `/basic/` needs basic auth
/// (`ferry:s3cret`), `/bearer/` a bearer token (`tok3n`); `/to-plain/X` redirects (302) to
/// `http://…/X` on the plain port, as a server that downgrades would, and `/to-localhost/X` to
/// `https://localhost:…/X` (another host name, as a mirror's redirect to a CDN). Every request lands in `accessLog`.
final class NginxServer {
    let directory: String
    let root: String
    private(set) var port: UInt16 = 0
    private(set) var tlsPort: UInt16 = 0
    let accessLog: String
    private var process: Child?

    static let basicUser = "ferry"
    static let basicPassword = "s3cret"
    static let bearerToken = "tok3n"

    /// `proxyTo`: instead of serving files, pass every request on to that port on 127.0.0.1 (with
    /// its Host header, so a signature over it holds), logging each: a count of what a client asks
    /// of a store that keeps no access log of its own, with the credential each was signed with
    /// (`signedRequests`).
    /// `cacheFor`: a site cache in front of the server on that port (`proxy_cache`: each object
    /// fetched from it once however many clients miss at once, ranges served from the cache),
    /// as `examples/site-cache/` runs one; its log says HIT or MISS (`cacheStatuses`).
    init(proxyTo upstream: UInt16? = nil, cacheFor origin: UInt16? = nil) throws {
        directory = Harness.temporaryDirectory("nginx")
        root = directory + "/www"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        accessLog = directory + "/access.log"
        try "\(Self.basicUser):{PLAIN}\(Self.basicPassword)\n".writeReplacing(directory + "/htpasswd")
        do {
            process = try startListening("nginx", ports: 2) { ports in
                (port, tlsPort) = (ports[0], ports[1])
                try writeConfiguration(proxyTo: upstream, cacheFor: origin)
                return (try launch(), [directory + "/error.log"])
            }.child
        } catch {
            stop()
            throw error
        }
    }

    /// nginx.conf for the ports it has (see `init`).
    private func writeConfiguration(proxyTo upstream: UInt16?, cacheFor origin: UInt16?) throws {
        let tls = try TestCertificates.shared()
        let user = getuid() == 0 ? "user root;" : ""
        let dav = "dav_methods PUT DELETE MKCOL COPY MOVE; dav_ext_methods PROPFIND OPTIONS; create_full_put_path on;"
        // The site cache is the one examples/site-cache/ ships, as shipped.
        let cache = try origin.map { origin throws in
            try String(contentsOfFile: Harness.packageRoot + "/examples/site-cache/site-cache.conf", encoding: .utf8)
                .replacingOccurrences(of: "@LISTEN@", with: "127.0.0.1:\(port)")
                .replacingOccurrences(of: "@ORIGIN@", with: "http://127.0.0.1:\(origin)")
                .replacingOccurrences(of: "@CACHE@", with: directory + "/cache")
        } ?? ""
        let locations = origin.map { _ in """
                location / { return 404; }
            """ } ?? upstream.map { """
                location / { proxy_pass http://127.0.0.1:\($0); proxy_set_header Host $http_host; proxy_http_version 1.1;
                             proxy_set_header Connection ""; proxy_request_buffering off; proxy_buffering off; }
            """ } ?? """
                root \(root);
                location / { \(dav) }
                location /basic/ { auth_basic "ferry"; auth_basic_user_file \(directory)/htpasswd; \(dav) }
                location /bearer/ { if ($http_authorization != "Bearer \(Self.bearerToken)") { return 401; } \(dav) }
                location ~ ^/to-plain/(.*)$ { return 302 http://127.0.0.1:\(port)/$1; }
                location ~ ^/to-localhost/(.*)$ { return 302 https://localhost:\(tlsPort)/$1; }
            """
        let config = """
            load_module \(Self.davExtModule);
            \(user)
            daemon off;
            worker_processes 1;
            pid \(directory)/nginx.pid;
            error_log \(directory)/error.log;
            events { worker_connections 512; }
            http {
                log_format signed '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" '
                                  '"$http_user_agent" "$http_authorization" "$http_x_amz_security_token"';
                log_format cached '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" '
                                  '"$http_user_agent" "$upstream_cache_status"';
                log_format ranged '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" '
                                  '"$http_user_agent" "$http_range"';
                access_log \(accessLog) \(upstream != nil ? "signed" : origin != nil ? "cached" : "ranged");
            \(cache)
                client_body_temp_path \(directory)/body;
                client_max_body_size 0;
                proxy_temp_path \(directory)/proxy;
                fastcgi_temp_path \(directory)/fastcgi;
                uwsgi_temp_path \(directory)/uwsgi;
                scgi_temp_path \(directory)/scgi;
                default_type application/octet-stream;
                sendfile on;
                keepalive_requests 100000;
            \(origin == nil ? "server {\n        listen 127.0.0.1:\(port);\n        location = /.nginx-status { stub_status; access_log off; }\n\(locations)\n    }" : "")
                server {
                    listen 127.0.0.1:\(tlsPort) ssl http2;
                    ssl_certificate \(tls.serverCertificate);
                    ssl_certificate_key \(tls.serverKey);
            \(locations)
                }
            }
            """
        try config.writeReplacing(directory + "/nginx.conf")
    }

    private func launch() throws -> Child {
        try Child(Self.binary, ["-c", directory + "/nginx.conf", "-p", directory + "/", "-e", directory + "/error.log"])
    }

    /// Stops serving (connections are refused) and keeps everything for `comeBack()`.
    func goAway() {
        process?.stop()
        process = nil
    }

    /// Serves again on the same ports, as a remote that returns after an outage.
    func comeBack() throws {
        let child = try launch()
        process = child
        try awaitListeningAgain("nginx", child, [port, tlsPort], logs: [directory + "/error.log"])
    }

    /// Debian's `libnginx-mod-http-dav-ext` (PROPFIND), which scripts/setup.sh installs.
    static let davExtModule = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so"

    static var binary: String {
        for candidate in ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"] where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        return "nginx"
    }

    var url: String { "http://127.0.0.1:\(port)/" }
    var tlsURL: String { "https://127.0.0.1:\(tlsPort)/" }

    /// Request lines (method, path, status) from the access log since `from` lines.
    func requests() -> [(method: String, path: String, status: Int)] {
        guard let text = try? String(contentsOfFile: accessLog, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let quoted = line.split(separator: "\"")
            guard quoted.count >= 3 else { return nil }
            let request = quoted[1].split(separator: " ")
            let status = Int(quoted[2].split(separator: " ").first ?? "") ?? 0
            guard request.count >= 2 else { return nil }
            return (String(request[0]), String(request[1]), status)
        }
    }

    /// The `Range` header of each request that had one (`bytes=0-9,20-29`), in order.
    func ranges() -> [String] {
        guard let text = try? String(contentsOfFile: accessLog, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let quoted = line.split(separator: "\"", omittingEmptySubsequences: false)
            guard quoted.count >= 2, let last = quoted.dropLast().last, last.hasPrefix("bytes=") else { return nil }
            return String(last)
        }
    }

    /// The raw request lines (`GET /path HTTP/2.0`).
    func requestLines() -> [String] {
        guard let text = try? String(contentsOfFile: accessLog, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let quoted = line.split(separator: "\"")
            return quoted.count >= 2 ? String(quoted[1]) : nil
        }
    }

    func clearLog() { try? "".write(toFile: accessLog, atomically: false, encoding: .utf8) }

    /// Waits until nginx has no request in progress but the one asking, so that every request cut
    /// off by a client (a stopped run, a spent budget) is in the log; false when `timeout` passes.
    /// nginx logs a request whose client went away only once it notices, which on a busy host
    /// can be after the client's run returned.
    func awaitIdle(timeout: Double = 20) -> Bool {
        eventually(timeout) {
            let probe = runProcess("/usr/bin/curl", ["-s", "-m", "2", url + ".nginx-status"], timeout: 5)
            return probe.exitCode == 0 && probe.stdout.contains("Reading: 0 Writing: 1 ")
        }
    }

    /// The body bytes nginx sent (its own count, `$body_bytes_sent`) for requests whose path
    /// `matches`, and how many requests those were.
    func bytesSent(_ matches: (String) -> Bool) -> (bytes: Int, requests: Int) {
        guard let text = try? String(contentsOfFile: accessLog, encoding: .utf8) else { return (0, 0) }
        var total = (bytes: 0, requests: 0)
        for line in text.split(separator: "\n") {
            let quoted = line.split(separator: "\"")
            guard quoted.count >= 3 else { continue }
            let request = quoted[1].split(separator: " ")
            let fields = quoted[2].split(separator: " ")
            guard request.count >= 2, matches(String(request[1])), fields.count >= 2, let bytes = Int(fields[1]) else { continue }
            total.bytes += bytes
            total.requests += 1
        }
        return total
    }

    /// A proxy's requests with what signed them: the access key and region of the SigV4
    /// `Authorization` header (nil: unsigned) and the session token sent (nil: none).
    func signedRequests() -> [(method: String, path: String, status: Int, accessKey: String?, region: String?, token: String?)] {
        guard let text = try? String(contentsOfFile: accessLog, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let quoted = line.split(separator: "\"", omittingEmptySubsequences: false)
            guard quoted.count >= 11 else { return nil }
            let request = quoted[1].split(separator: " ")
            let status = Int(quoted[2].split(separator: " ").first ?? "") ?? 0
            guard request.count >= 2 else { return nil }
            // Credential=KEY/DATE/REGION/s3/aws4_request
            let scope = quoted[7].firstMatch(of: /Credential=([^\/,]+)\/[0-9]+\/([^\/,]+)\//)
            let token = quoted[9] == "-" || quoted[9].isEmpty ? nil : String(quoted[9])
            return (String(request[0]), String(request[1]), status, scope.map { String($0.1) }, scope.map { String($0.2) }, token)
        }
    }

    func stop() {
        process?.stop()
        process = nil
        Harness.remove(directory)
    }

    deinit { stop() }
}

/// ferry's own test server (scripts/testserver.py) or plain `python3 -m http.server`.
final class PythonServer {
    let port: UInt16
    let log: String
    private let process: Child
    private let logDirectory: String

    /// The fault table the server reads on every request (see scripts/testserver.py).
    let faultsFile: String

    init(directory: String, extra: [String] = [], plain: Bool = false) throws {
        let logDirectory = Harness.temporaryDirectory("pylog")
        (log, faultsFile, self.logDirectory) = (logDirectory + "/requests.jsonl", logDirectory + "/faults.json", logDirectory)
        let arguments = { (port: UInt16) in
            plain ? ["-m", "http.server", String(port), "--bind", "127.0.0.1", "--directory", directory]
                : [Harness.packageRoot + "/scripts/testserver.py", "--port", String(port), "--directory", directory,
                   "--log", logDirectory + "/requests.jsonl", "--faults", logDirectory + "/faults.json"] + extra
        }
        do {
            let started = try startListening("python server", ports: 1) { ports in
                (try Child("python3", arguments(ports[0]), stderr: logDirectory + "/server.log"), [logDirectory + "/server.log"])
            }
            (port, process) = (started.ports[0], started.child)
        } catch {
            Harness.remove(logDirectory)
            throw error
        }
    }

    var url: String { "http://127.0.0.1:\(port)/" }

    /// Replaces the fault table: path (or "*") → fault → value.
    func setFaults(_ faults: [String: [String: Any]]) {
        let data = try! JSONSerialization.data(withJSONObject: faults)
        try! data.write(to: URL(fileURLWithPath: faultsFile + ".tmp"))
        rename(faultsFile + ".tmp", faultsFile)
    }

    func clearLog() { try? "".write(toFile: log, atomically: false, encoding: .utf8) }

    /// Waits until a request for `path` has arrived (a transfer under way), or `timeout` passes.
    func waitForRequest(_ path: String, timeout: Double = 20) {
        let deadline = Date().addingTimeInterval(timeout)
        while !requests().contains(where: { $0["path"] as? String == path }) && Date() < deadline { usleep(10_000) }
    }

    /// The requests the server saw, one dictionary each.
    func requests() -> [[String: Any]] {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    func stop() {
        process.stop()
        Harness.remove(logDirectory)
    }

    deinit { stop() }
}

/// A private CA and a server certificate for 127.0.0.1, made once per test process with openssl.
struct TestCertificates: Sendable {
    let directory: String
    var caCertificate: String { directory + "/ca.pem" }
    var serverCertificate: String { directory + "/server.pem" }
    var serverKey: String { directory + "/server.key" }
    var otherCA: String { directory + "/other-ca.pem" }

    private static let made: Result<TestCertificates, TestFailure> = {
        let dir = Harness.temporaryDirectory("tls")
        // Made once for the test process, and removed when it exits.
        CertificateDirectory.path.withLock { $0 = dir }
        atexit { CertificateDirectory.path.withLock { $0.map { Harness.remove($0) } } }
        let script = """
            set -e
            cd '\(dir)'
            openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -subj /CN=ferry-test-ca -days 2 2>/dev/null
            openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem -subj /CN=other-ca -days 2 2>/dev/null
            openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 2>/dev/null
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext.cnf
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext.cnf 2>/dev/null
            """
        let run = runProcess("/bin/sh", ["-c", script])
        guard run.exitCode == 0 else { return .failure(TestFailure("openssl failed: \(run.output)")) }
        return .success(TestCertificates(directory: dir))
    }()

    static func shared() throws -> TestCertificates { try made.get() }
}

/// Where the test process's certificates are, for their removal at exit.
private enum CertificateDirectory {
    static let path = Mutex<String?>(nil)
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// Apache httpd with mod_dav (Debian's apache2), on a free port of 127.0.0.1, serving and
/// accepting WebDAV writes under `root`. Apache will not serve as root, so its children run as
/// www-data, which owns the served tree.
final class ApacheServer {
    let directory: String
    let root: String
    private(set) var port: UInt16 = 0
    private var process: Child?

    init() throws {
        directory = Harness.temporaryDirectory("apache")
        root = directory + "/www"
        for d in [root, directory + "/lock"] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        let user = getuid() == 0 ? "User www-data\nGroup www-data" : ""
        if getuid() == 0 {
            // www-data must reach the tree through every parent, and own what it writes. Its
            // own directory is opened to it; a parent only gains the search bit it lacks, every
            // other bit kept (a chmod 0755 of each parent once took /tmp's 1777 away, sticky bit
            // and all).
            chmod(directory, 0o755)
            var path = (directory as NSString).deletingLastPathComponent
            while path != "/" && !path.isEmpty {
                var st = stat()
                if stat(path, &st) == 0 && st.st_mode & 0o001 == 0 { chmod(path, (st.st_mode & 0o7777) | 0o001) }
                path = (path as NSString).deletingLastPathComponent
            }
            for d in [root, directory + "/lock"] { _ = runProcess("/bin/chown", ["-R", "www-data:www-data", d]) }
        }
        let modules = "/usr/lib/apache2/modules"
        let config = """
            ServerName 127.0.0.1
            Listen 127.0.0.1:@PORT@
            PidFile \(directory)/httpd.pid
            ErrorLog \(directory)/error.log
            \(user)
            LoadModule mpm_event_module \(modules)/mod_mpm_event.so
            LoadModule authz_core_module \(modules)/mod_authz_core.so
            LoadModule dav_module \(modules)/mod_dav.so
            LoadModule dav_fs_module \(modules)/mod_dav_fs.so
            DavLockDB \(directory)/lock/DavLock
            DocumentRoot \(root)
            LimitRequestBody 0
            <Directory \(root)>
                Dav On
                Require all granted
            </Directory>
            """
        do {
            process = try startListening("apache", ports: 1) { ports in
                port = ports[0]
                try config.replacingOccurrences(of: "@PORT@", with: String(port)).writeReplacing(directory + "/httpd.conf")
                let child = try Child("/usr/sbin/apache2", ["-f", directory + "/httpd.conf", "-DFOREGROUND"],
                                      stdout: directory + "/stdout.log", stderr: directory + "/stderr.log")
                return (child, [directory + "/error.log", directory + "/stderr.log"])
            }.child
        } catch {
            stop()
            throw error
        }
    }

    var url: String { "http://127.0.0.1:\(port)/" }

    /// Makes a directory under the served tree that Apache may write into.
    func makeDirectory(_ relative: String) throws {
        try FileManager.default.createDirectory(atPath: root + "/" + relative, withIntermediateDirectories: true)
        if getuid() == 0 { _ = runProcess("/bin/chown", ["-R", "www-data:www-data", root]) }
    }

    func stop() {
        process?.stop()
        process = nil
        Harness.remove(directory)
    }
}

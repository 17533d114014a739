import Foundation
import Testing

/// HTTPS with a private CA, basic and bearer credentials from files, and the rules that keep
/// those credentials where they belong.
@Suite(.serialized)
struct SecurityTests {
    func secretFile(_ box: Sandbox, _ name: String, _ content: String, mode: mode_t = 0o600) -> String {
        let path = box.directory + "/" + name
        try! content.writeReplacing(path)
        chmod(path, mode)
        return path
    }

    @Test func httpsWithAPrivateCAAndBasicAuth() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let tls = try TestCertificates.shared()
        let box = Sandbox("tls", published: nginx.root + "/basic/site")
        box.publish("secure.txt", "over TLS\n")
        box.publish("big.bin", randomData(1_500_000))
        box.buildManifest()
        let credentials = secretFile(box, "basic", "\(NginxServer.basicUser):\(NginxServer.basicPassword)\n")
        let remote = nginx.tlsURL + "basic/site/"

        // The system CAs do not know the test CA: refused, with a hint.
        box.configure(remote: remote, session: ["basic-auth-file = \(credentials)"])
        let untrusted = box.sync()
        #expect(untrusted.exitCode == 4, "\(untrusted.output)")
        #expect(untrusted.stderr.contains("ca-file"), "\(untrusted.stderr)")

        // A CA that did not sign the server certificate is refused too.
        box.configure(remote: remote, session: ["basic-auth-file = \(credentials)", "ca-file = \(tls.otherCA)"])
        #expect(box.sync().exitCode == 4)

        // Wrong password: 401, exit 4, and a hint about the credentials file.
        let wrong = secretFile(box, "wrong", "\(NginxServer.basicUser):nope\n")
        box.configure(remote: remote, session: ["basic-auth-file = \(wrong)", "ca-file = \(tls.caCertificate)"])
        let denied = box.sync()
        #expect(denied.exitCode == 4)
        #expect(denied.stderr.contains("HTTP 401"))
        #expect(denied.stderr.contains("basic-auth-file"))

        box.configure(remote: remote, session: ["basic-auth-file = \(credentials)", "ca-file = \(tls.caCertificate)"])
        nginx.clearLog()
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        expectIdentical(box.published, box.local)
        let lines = nginx.requestLines()
        #expect(!lines.isEmpty && lines.allSatisfy { $0.hasSuffix("HTTP/2.0") }, "HTTP/2 over TLS: \(lines)")

        // The password appears in no output, event or status.
        let status = box.status()
        let statusJSON = box.status(["--json"])
        for text in [untrusted.output, denied.output, run.output, status.output, statusJSON.output] {
            #expect(!text.contains(NginxServer.basicPassword))
        }
    }

    /// A push over HTTPS (HTTP/2) with a private CA and basic auth: the same settings reach every
    /// request of a push (the manifest, PUT, MKCOL, MOVE), a pull with them mirrors what was
    /// published, and the password appears nowhere.
    @Test func aPushOverHTTPSWithAPrivateCAAndBasicAuth() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let tls = try TestCertificates.shared()
        let box = Sandbox("tls-push")
        let src = box.directory + "/src"
        for (path, data) in [("index.html", Data("<p>over TLS</p>\n".utf8)), ("deep/dir/big.bin", randomData(1_500_000, seed: 71))] {
            let full = src + "/" + path
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try data.write(to: URL(fileURLWithPath: full))
        }
        let credentials = secretFile(box, "basic", "\(NginxServer.basicUser):\(NginxServer.basicPassword)\n")
        let wrong = secretFile(box, "wrong", "\(NginxServer.basicUser):nope\n")
        func configure(_ settings: String) throws {
            try """
                [agent]
                state = \(box.state)
                [session up]
                direction = push
                remote = \(nginx.tlsURL)basic/site/
                local = \(src)
                \(settings)
                [session down]
                remote = \(nginx.tlsURL)basic/site/
                local = \(box.directory)/dst
                \(settings)
                """.writeReplacing(box.config)
        }

        try configure("basic-auth-file = \(credentials)")
        let untrusted = box.sync(["--session", "up"])
        #expect(untrusted.exitCode == 4 && untrusted.stderr.contains("ca-file"), "\(untrusted.output)")
        try configure("basic-auth-file = \(wrong)\nca-file = \(tls.caCertificate)")
        let denied = box.sync(["--session", "up"])
        #expect(denied.exitCode == 4 && denied.stderr.contains("HTTP 401") && denied.stderr.contains("basic-auth-file"), "\(denied.output)")
        #expect(!FileManager.default.fileExists(atPath: nginx.root + "/basic/site"), "nothing was written")

        try configure("basic-auth-file = \(credentials)\nca-file = \(tls.caCertificate)")
        nginx.clearLog()
        let pushed = box.sync(["--session", "up", "--json"])
        #expect(pushed.exitCode == 0, "\(pushed.output)")
        let lines = nginx.requestLines()
        for method in ["PUT", "MOVE", "MKCOL"] {
            #expect(lines.contains { $0.hasPrefix(method + " /basic/site/") && $0.hasSuffix("HTTP/2.0") }, "\(method) over HTTP/2: \(lines)")
        }
        let pulled = box.sync(["--session", "down"])
        #expect(pulled.exitCode == 0, "\(pulled.output)")
        expectIdentical(src, box.directory + "/dst")
        for text in [untrusted.output, denied.output, pushed.output, pulled.output, box.status().output, box.status(["--json"]).output] {
            #expect(!text.contains(NginxServer.basicPassword))
        }
    }

    @Test func bearerTokenFromAFile() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let tls = try TestCertificates.shared()
        let box = Sandbox("bearer", published: nginx.root + "/bearer/site")
        box.publish("token.txt", "for token holders\n")
        box.buildManifest()
        let token = secretFile(box, "token", NginxServer.bearerToken + "\n")
        box.configure(remote: nginx.tlsURL + "bearer/site/", session: ["bearer-token-file = \(token)", "ca-file = \(tls.caCertificate)"])
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(fileContents(box.localPath("token.txt")) == "for token holders\n")
        #expect(!run.output.contains(NginxServer.bearerToken))

        let bad = secretFile(box, "badtoken", "wrong-token\n")
        box.configure(remote: nginx.tlsURL + "bearer/site/", session: ["bearer-token-file = \(bad)", "ca-file = \(tls.caCertificate)"])
        let denied = box.sync()
        #expect(denied.exitCode == 4)
        #expect(!denied.output.contains("wrong-token"))
    }

    @Test func credentialsAreNeverSentToAnotherHostOnRedirect() throws {
        let box = Sandbox("redirect")
        // Server B holds the files; server A holds the manifest and redirects /files/ to B.
        let otherRoot = box.directory + "/other"
        try FileManager.default.createDirectory(atPath: otherRoot + "/files", withIntermediateDirectories: true)
        box.publish("files/a.txt", "redirected content\n")
        try "redirected content\n".writeReplacing(otherRoot + "/files/a.txt")
        box.buildManifest()
        let b = try PythonServer(directory: otherRoot)
        defer { b.stop() }
        let a = try PythonServer(directory: box.published, extra: ["--redirect", "/files/=\(b.url)files/"])
        defer { a.stop() }
        let credentials = secretFile(box, "basic", "user:pa55word\n")
        box.configure(remote: a.url, session: ["basic-auth-file = \(credentials)"])
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(fileContents(box.localPath("files/a.txt")) == "redirected content\n")
        let toA = a.requests()
        let toB = b.requests()
        #expect(toA.contains { ($0["path"] as? String) == "/manifest.json" && ($0["authorization"] as? String)?.hasPrefix("Basic ") == true },
                "the configured host gets the credentials")
        #expect(!toB.isEmpty)
        #expect(toB.allSatisfy { $0["authorization"] is NSNull || $0["authorization"] == nil }, "another host never does: \(toB)")
    }

    @Test func warnsWhenACredentialsFileIsReadableByOthers() throws {
        let box = Sandbox("perms")
        let credentials = secretFile(box, "basic", "user:pw\n", mode: 0o644)
        box.configure(remote: "https://mirror.example.net/", session: ["basic-auth-file = \(credentials)"])
        let check = ferry(["config", "check", "--config", box.config])
        #expect(check.exitCode == 0, "\(check.output)")
        #expect(check.stderr.contains("is readable by every user; run: chmod 600 \(credentials)"))
        chmod(credentials, 0o600)
        #expect(!ferry(["config", "check", "--config", box.config]).stderr.contains("readable"))
    }
}

import Foundation
import Testing

/// `ferry config check --online`: what the first run would meet at each remote and mirror is found
/// before it — a server that is down, S3 keys the store refuses, an SSH host key not known — one
/// line each, while the offline check (the default) asks nothing of the network.
@Suite(.serialized)
struct OnlineCheckTests {
    @Test func aHealthyRemoteAndAnEmptyMirrorPassAndADeadOneFails() throws {
        let origin = try NginxServer()
        defer { origin.stop() }
        let box = Sandbox("online-http", published: origin.root)
        box.publish("a.txt", "a\n")
        box.buildManifest()
        let empty = box.directory + "/empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let mirror = try PythonServer(directory: empty)
        defer { mirror.stop() }
        box.configure(remote: origin.url, session: ["mirrors = \(mirror.url)"])
        let good = ferry(["config", "check", "--config", box.config, "--online"])
        #expect(good.exitCode == 0, "\(good.output)")
        #expect(good.stdout.contains("online: remote \(origin.url): answered: manifest.json ("), "\(good.output)")
        #expect(good.stdout.contains("online: mirror \(mirror.url): reached; no manifest.json there yet"), "\(good.output)")
        #expect(good.stdout.contains("online: remote \(origin.url): ranges: answered (206)"), "\(good.output)")
        #expect(good.stdout.contains("online: remote \(origin.url): clock: within a minute of the server's"), "\(good.output)")

        let dead = "http://127.0.0.1:\(freePort())/"
        box.configure(remote: dead)
        #expect(ferry(["config", "check", "--config", box.config]).exitCode == 0, "offline, nothing is asked")
        let down = ferry(["config", "check", "--config", box.config, "--online"])
        #expect(down.exitCode == 2 && down.stderr.contains("[session test] remote \(dead): "), "\(down.output)")
        #expect(!down.stdout.contains("OK"), "\(down.output)")
    }

    /// A server that ignores ranges is said (a pull still works, resuming from zero), and a server
    /// clock minutes off is said; 20 minutes off is a problem (S3 refuses such signatures).
    @Test func rangesAndTheServersClockAreChecked() throws {
        let box = Sandbox("online-range")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        let plain = try PythonServer(directory: box.published, plain: true)
        defer { plain.stop() }
        box.configure(remote: plain.url)
        let noRanges = ferry(["config", "check", "--config", box.config, "--online"])
        #expect(noRanges.exitCode == 0, "\(noRanges.output)")
        #expect(noRanges.stdout.contains("online: remote \(plain.url): ranges: not answered (HTTP 200 to a range): an interrupted download starts again"),
                "\(noRanges.output)")

        let skewed = try PythonServer(directory: box.published)
        defer { skewed.stop() }
        box.configure(remote: skewed.url)
        skewed.setFaults(["*": ["date_offset": 180]])
        let minutes = ferry(["config", "check", "--config", box.config, "--online"])
        #expect(minutes.exitCode == 0 && minutes.stdout.contains("online: remote \(skewed.url): ranges: answered (206)"), "\(minutes.output)")
        #expect(minutes.stdout.contains("online: remote \(skewed.url): clock: this machine's clock is 2m5")
                || minutes.stdout.contains("online: remote \(skewed.url): clock: this machine's clock is 3m0"), "\(minutes.output)")
        #expect(minutes.stdout.contains("behind the server's; check its time"), "\(minutes.output)")
        skewed.setFaults(["*": ["date_offset": -1200]])
        let far = ferry(["config", "check", "--config", box.config, "--online"])
        #expect(far.exitCode == 2 && (far.stderr.contains("clock: this machine's clock is 19m5") || far.stderr.contains("clock: this machine's clock is 20m0")),
                "\(far.output)")
        #expect(far.stderr.contains("ahead of the server's: S3 refuses") && far.stderr.contains("NTP"), "\(far.output)")
    }

    /// Static S3 keys the store does not know: config check found the file readable and said OK;
    /// online, the store's refusal is named.
    @Test func wrongStaticS3KeysAreFound() throws {
        let store = try SeaweedFS.shared()
        let bucket = try store.newBucket("online")
        let box = Sandbox("online-s3")
        let keys = box.directory + "/aws-credentials"
        try "[default]\naws_access_key_id = NOSUCHKEY\naws_secret_access_key = wrong-secret\n".writeReplacing(keys)
        chmod(keys, 0o600)
        box.configure(remote: "s3://\(bucket)/site/", session: ["s3-endpoint = \(store.endpoint)", "s3-credentials = \(keys)"])
        #expect(ferry(["config", "check", "--config", box.config]).exitCode == 0, "offline, the keys look fine")
        let run = ferry(["config", "check", "--config", box.config, "--online"])
        #expect(run.exitCode == 2 && run.stderr.contains("[session test] remote s3://\(bucket)/site/: "), "\(run.output)")
        #expect(run.stderr.contains("InvalidAccessKeyId") || run.stderr.contains("AccessDenied") || run.stderr.contains("403"), "\(run.output)")
        #expect(!run.output.contains("wrong-secret"))

        _ = try store.credentialsFile(in: box.directory)
        box.configure(remote: "s3://\(bucket)/site/", session: ["s3-endpoint = \(store.endpoint)", "s3-credentials = \(box.directory)/aws-credentials"])
        let right = ferry(["config", "check", "--config", box.config, "--online"])
        #expect(right.exitCode == 2 && !right.stderr.contains("InvalidAccessKeyId") && right.stderr.contains("[session test] remote s3://\(bucket)/site/: "),
                "a pull with no manifest there yet is a problem: \(right.output)")
    }

    /// An SSH server whose host key the known_hosts file does not hold: found online, with the
    /// fingerprint and the ssh-keyscan that shows it.
    @Test func anUnknownHostKeyIsFound() throws {
        let server = try SSHServer()
        defer { server.stop() }
        let box = Sandbox("online-sftp", published: server.root)
        box.publish("a.txt", "hello\n")
        box.buildManifest()
        let empty = server.directory + "/empty_known_hosts"
        try "".writeReplacing(empty)
        box.configure(remote: server.url, session: ["sftp-key = \(server.clientKey)", "sftp-known-hosts = \(empty)"])
        #expect(ferry(["config", "check", "--config", box.config]).exitCode == 0)
        let run = ferry(["config", "check", "--config", box.config, "--online"])
        #expect(run.exitCode == 2 && run.stderr.contains("holds no key") && run.stderr.contains("ssh-keyscan"), "\(run.output)")
        box.configure(remote: server.url, session: ["sftp-key = \(server.clientKey)", "sftp-known-hosts = \(server.knownHosts)"])
        let good = ferry(["config", "check", "--config", box.config, "--online"])
        #expect(good.exitCode == 0 && good.stdout.contains("online: remote \(server.url): answered: manifest.json"), "\(good.output)")
    }
}

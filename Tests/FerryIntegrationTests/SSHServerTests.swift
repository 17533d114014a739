import Foundation
import Testing

/// The SFTP test server itself, seen through a second client: the curl CLI, on the same libcurl
/// (and libssh2) as ferry. It serves what is put in its root to its client key only, and curl
/// refuses it when the known_hosts file names another host key.
@Suite struct SSHServerTests {
    @Test func servesItsRootToItsClientKeyAndIsKnownOnlyByItsHostKey() throws {
        let server = try SSHServer()
        defer { server.stop() }
        let data = randomData(100_000, seed: 9)
        try FileManager.default.createDirectory(atPath: server.root + "/dir with space", withIntermediateDirectories: true)
        try data.write(to: URL(fileURLWithPath: server.root + "/dir with space/file.bin"))
        let home = Harness.temporaryDirectory("ssh-home")
        defer { Harness.remove(home) }
        try FileManager.default.createDirectory(atPath: home + "/.ssh", withIntermediateDirectories: true)
        let output = home + "/downloaded"

        // The curl CLI takes no known_hosts option: it reads $HOME/.ssh/known_hosts (and checks
        // nothing at all when that file is missing, so each run here has one).
        func download(knownHosts: String, key: String) throws -> FerryRun {
            unlink(output)
            try String(contentsOfFile: knownHosts, encoding: .utf8).writeReplacing(home + "/.ssh/known_hosts")
            return runProcess("/usr/bin/curl", ["-sS", "--key", key, "-o", output, server.url + "dir%20with%20space/file.bin"],
                              environment: ["HOME": home], timeout: 60)
        }

        let good = try download(knownHosts: server.knownHosts, key: server.clientKey)
        #expect(good.exitCode == 0, "\(good.output)")
        #expect(FileManager.default.contents(atPath: output) == data)

        let otherHost = try download(knownHosts: server.otherKnownHosts, key: server.clientKey)
        #expect(otherHost.exitCode == 60, "CURLE_PEER_FAILED_VERIFICATION expected: \(otherHost.output)")
        #expect(!FileManager.default.fileExists(atPath: output))

        // A key the server was not given (the other host key will do) is refused.
        let otherKey = try download(knownHosts: server.knownHosts, key: server.directory + "/other_host_key")
        #expect(otherKey.exitCode == 67, "CURLE_LOGIN_DENIED expected: \(otherKey.output)")
        #expect(!FileManager.default.fileExists(atPath: output))
    }
}

import Testing
@testable import FerryRuntime
import FerryCore

/// What an `sftp://` remote takes in a config: `[USER@]HOST[:PORT]/PATH/`, a key file that must
/// be given, never a password (refused without being quoted), and a known_hosts file.
struct SFTPConfigTests {
    func parse(_ remote: String, _ extra: String = "sftp-key = /k\n") throws -> SessionConfig {
        try ConfigParser.parse("[session a]\nremote = \(remote)\nlocal = /y\n" + extra, path: "f").sessions[0]
    }

    @Test func readsUserHostPortAndPath() throws {
        let a = try SFTPAddress("deploy@mirror.example:2222/srv/content%20v2/")
        #expect(a.user == "deploy" && a.host == "mirror.example" && a.port == 2222 && a.path == "/srv/content v2/")
        let b = try SFTPAddress("[::1]/data")
        #expect(b.user == nil && b.host == "::1" && b.port == 22 && b.path == "/data/")
        #expect(try SFTPAddress("h/~/").path == "" && SFTPAddress("h/~/pub/").path == "pub/")
        let session = try parse("sftp://u@h:2222/srv/", "sftp-key = /keys/id\nsftp-known-hosts = /keys/kh\n")
        #expect(session.remoteOptions["sftp-key"] == "/keys/id" && session.remoteOptions["sftp-known-hosts"] == "/keys/kh")
    }

    @Test(arguments: [
        ("sftp://u:hunter2@h/srv/", "carries no password"),
        ("sftp://h", "needs a path"),
        ("sftp://h:0/srv/", "is not a port"),
        ("sftp://h:99999/srv/", "is not a port"),
        ("sftp://[::1/srv/", "never closes"),
        ("sftp://h/srv/../etc/", "'..'"),
        ("sftp://bad host/srv/", "whitespace"),
        ("sftp://u$er@h/srv/", "login name"),
    ])
    func refusesAnAddressItCannotUse(remote: String, words: String) {
        let error = #expect(throws: FerryError.self) { try parse(remote) }
        #expect(error?.message.contains(words) == true, "\(String(describing: error))")
        #expect(error?.message.contains("hunter2") != true, "a password is never quoted")
    }

    @Test func needsAKeyAndAManifestUnderTheRemote() {
        let noKey = #expect(throws: FerryError.self) { try parse("sftp://h/srv/", "") }
        #expect(noKey?.message.contains("sftp-key") == true && noKey?.hint?.contains("ssh-keygen") == true, "\(String(describing: noKey))")
        let elsewhere = #expect(throws: FerryError.self) { try parse("sftp://h/srv/", "sftp-key = /k\nmanifest = https://x/m.json\n") }
        #expect(elsewhere?.message.contains("named relative to it") == true, "\(String(describing: elsewhere))")
        let transport = #expect(throws: FerryError.self) { try parse("sftp://h/srv/", "sftp-key = /k\nca-file = /ca\n") }
        #expect(transport?.message.contains("does not take it") == true, "\(String(describing: transport))")
    }
}

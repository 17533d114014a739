import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Signed manifests (continued): what the config's keys must be, a member given twice inside what
/// is signed, which signer is shown, expiry, and a version that cannot go past the largest.
@Suite
struct SignedManifestEdgeTests {
    @Test func keysInTheConfigAreChecked() throws {
        let box = SignedManifestTests.world("config-keys")
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = ed25519:notbase64!"])
        let bad = box.sync()
        #expect(bad.exitCode == 2 && bad.stderr.contains("key 'trusted-keys': 'ed25519:notbase64!' is not a public key"), "\(bad.output)")
        box.configure(remote: "file://" + box.published, session: ["sign-key = /nonexistent.key"])
        let pullSigns = box.sync()
        #expect(pullSigns.exitCode == 2 && pullSigns.stderr.contains("key 'sign-key': applies to a push session"), "\(pullSigns.output)")
        // A threshold needs trusted keys, and no more than they are.
        let one = SignedManifestTests.generateKey(box.directory + "/one.key")
        box.configure(remote: "file://" + box.published, session: ["trust-threshold = 2"])
        #expect(box.sync().stderr.contains("key 'trust-threshold': applies to a session with trusted-keys"))
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(one)", "trust-threshold = 2"])
        let unreachable = box.sync()
        #expect(unreachable.exitCode == 2 && unreachable.stderr.contains("asks for 2 signatures, but trusted-keys lists 1 key"), "\(unreachable.output)")
        // A signing key others can read is said once, when the config is read.
        let key = box.directory + "/open.key"
        _ = SignedManifestTests.generateKey(key)
        chmod(key, 0o640)
        try """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = file://\(box.directory)/remote
            local = \(box.published)
            sign-key = \(key)
            """.writeReplacing(box.config)
        let check = ferry(["config", "check", "--config", box.config])
        #expect(check.stderr.contains("sign-key of session 'up': the signing key \(key) can be read by users other than its owner; run: chmod 600 \(key)"),
                "\(check.output)")
        let missing = ferry(["manifest", "build", box.published, "--sign", box.directory + "/none.key"])
        #expect(missing.exitCode == 2 && missing.stderr.contains("--sign: cannot read the signing key"), "\(missing.output)")
        #expect(!FileManager.default.fileExists(atPath: box.published + "/manifest.json"), "nothing was written")
    }

    /// A member given twice inside what was signed is refused, though the signature is good: the
    /// reader would otherwise take one reading of it and another tool (`jq`, Python) another.
    @Test func aSignedManifestWithAMemberGivenTwiceIsRefused() throws {
        let box = SignedManifestTests.world("signed-duplicate")
        let key = box.directory + "/publisher.key"
        let trusted = SignedManifestTests.generateKey(key)
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(trusted)"])
        let charlie = SignedManifestTests.digest("charlie\n").description, evil = SignedManifestTests.digest("evil\n").description
        let edits: [(String, (String) -> String)] = [
            // A second file list: every JSON tool sees only the last one.
            ("files", { $0.replacingOccurrences(of: "\"files\": [", with: "\"files\": [],\n  \"files\": [") }),
            // A hash given twice in one entry.
            ("sha256", { $0.replacingOccurrences(of: "\"sha256\": \"\(charlie)\"", with: "\"sha256\": \"\(evil)\", \"sha256\": \"\(charlie)\"") }),
            ("version", { $0.replacingOccurrences(of: "\"version\": 10,", with: "\"version\": 10, \"version\": 11,") }),
        ]
        for (member, edit) in edits {
            let text = try SignedManifestTests.signed(box, key: key, version: 10, edit: edit)
            #expect(text.components(separatedBy: "\"\(member)\":").count == 3 || member == "sha256", "the edit took: \(text)")
            try box.writeManifest(text)
            try SignedManifestTests.expectNothingChanged(box, box.sync(), saying: "member \"\(member)\" is given twice in one object", saysNothingChanged: false)
        }
        try box.writeManifest(SignedManifestTests.signed(box, key: key, version: 10))
        #expect(box.sync().exitCode == 0, "the same manifest without the duplicate is taken")
        #expect(fileContents(box.localPath("dir/sub/c.txt")) == "charlie\n")
    }

    /// An envelope signed by an untrusted key first and the trusted one second: what ferry shows
    /// as the signer (events, status, ls) is the trusted key, the one it took the manifest on.
    @Test func theSignerShownIsTheTrustedKeyThatVerified() throws {
        let box = SignedManifestTests.world("signer-shown")
        let key = box.directory + "/publisher.key", foreign = box.directory + "/foreign.key"
        let trusted = SignedManifestTests.generateKey(key), other = SignedManifestTests.generateKey(foreign)
        let body = ManifestEnvelope.signedBytes(of: Array(SignedManifestTests.rendered(version: 10).utf8))
        var signatures: [(key: PublicKey, signature: [UInt8])] = []
        for file in [foreign, key] {
            let signing = try SigningKey(file: file, use: "test")
            signatures.append((signing.publicKey, try signing.sign(body)))
        }
        let envelope = ManifestEnvelope.wrap(body, signatures: signatures)
        try box.writeManifest(String(decoding: envelope, as: UTF8.self))
        let parsed = try Manifests.parse(envelope, source: "test")
        #expect(parsed.signatures.map(\.check) == [.valid, .valid] && parsed.signatures.map(\.key.description) == [other, trusted],
                "both signatures verify, the untrusted one first")

        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(trusted)"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "manifest-fetched").first?["signed_by"] as? String == trusted, "\(run.stdout)")
        let status = box.statusText()
        #expect(status.contains("signed by \(trusted)") && !status.contains(other), "\(status)")
        #expect(box.statusSessions().first?["manifest_signer"] as? String == trusted)
        let listing = ferry(["ls", "--config", box.config])
        #expect(listing.exitCode == 0 && listing.stdout.contains("signed by \(trusted)") && !listing.output.contains(other), "\(listing.output)")
        // An agent's unchanged poll stands for the manifest taken: its signer is still trusted.
        let again = box.sync(["--json"])
        #expect(again.exitCode == 0 && again.events(named: "manifest-fetched").first?["signed_by"] as? String == trusted, "\(again.stdout)")
    }

    /// `manifest build --sign` sets an expiry of 7 days unless told otherwise; a session with
    /// trusted-keys refuses a signed root without one unless its config says require-expiry = no.
    /// A push session with sign-key publishes with the same default.
    @Test func aSignedManifestExpiresUnlessToldOtherwise() throws {
        let box = SignedManifestTests.world("signed-expiry")
        let key = box.directory + "/publisher.key"
        let trusted = SignedManifestTests.generateKey(key)
        let week: Int64 = 7 * 86_400

        box.buildManifest(["--sign", key, "--expires", "never"])
        #expect(try readPublished(box.published).expires == nil, "--expires never: no expiry")
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(trusted)"])
        try SignedManifestTests.expectNothingChanged(box, box.sync(), saying: "carries no \"expires\", and session 'test' takes only signed manifests that do")
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(trusted)", "require-expiry = no"])
        #expect(ferry(["config", "show", "--config", box.config]).stdout.contains("require-expiry = no"))
        let optedOut = box.sync()
        #expect(optedOut.exitCode == 0, "require-expiry = no takes it: \(optedOut.output)")
        #expect(fileContents(box.localPath("dir/sub/c.txt")) == "charlie\n")

        let before = Int64(time(nil))
        box.publish("d.txt", "delta\n")
        box.buildManifest(["--sign", key])
        let root = try readPublished(box.published)
        let expires = try #require(root.expires, "--sign sets an expiry by default")
        #expect(expires.seconds >= before + week && expires.seconds <= Int64(time(nil)) + week, "7 days from now: \(expires.rfc3339)")
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(trusted)"])
        #expect(box.sync().exitCode == 0)
        #expect(fileContents(box.localPath("d.txt")) == "delta\n")
        // Without trusted-keys the key has nothing to say.
        box.configure(remote: "file://" + box.published, session: ["require-expiry = yes"])
        let alone = box.sync()
        #expect(alone.exitCode == 2 && alone.stderr.contains("key 'require-expiry': applies to a session with trusted-keys"), "\(alone.output)")

        // A push session signs with the same default; expires = never opts out.
        let remote = box.directory + "/remote"
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        for never in [false, true] {
            try """
                [agent]
                state = \(box.state)-\(never)
                [session up]
                direction = push
                remote = file://\(remote)-\(never)
                local = \(box.published)
                sign-key = \(key)
                \(never ? "expires = never" : "")
                """.writeReplacing(box.config)
            try FileManager.default.createDirectory(atPath: "\(remote)-\(never)", withIntermediateDirectories: true)
            let pushed = Int64(time(nil))
            let push = ferry(["sync", "now", "--config", box.config])
            #expect(push.exitCode == 0, "\(push.output)")
            let published = try readPublished("\(remote)-\(never)")
            #expect(published.signer(trusting: []) == PublicKey(text: trusted))
            if never {
                #expect(published.expires == nil)
            } else {
                #expect((published.expires?.seconds ?? 0) >= pushed + week, "\(String(describing: published.expires))")
            }
        }
    }

    /// The version never saturates: past 2^53 − 1 neither `manifest build` nor a push publishes new
    /// content under the same version (exit 4, nothing written or uploaded), and a pull refuses a
    /// version beyond it.
    @Test func theVersionNeverSaturates() throws {
        let box = Sandbox("version-ceiling")
        let remote = box.directory + "/remote", src = box.directory + "/src"
        for dir in [remote, src] { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        try "a\n".writeReplacing(remote + "/a.txt")
        try "a\n".writeReplacing(src + "/a.txt")
        try "b\n".writeReplacing(src + "/b.txt")
        let top = Manifest.maximumVersion
        let built = ferry(["manifest", "build", remote, "--version", String(top)])
        #expect(built.exitCode == 0, "\(built.output)")
        let atTop = try #require(FileManager.default.contents(atPath: remote + "/manifest.json"))

        let next = ferry(["manifest", "build", remote])
        #expect(next.exitCode == 4 && next.stderr.contains("has version \(top), the largest a manifest may carry (2^53 − 1): no later version exists"), "\(next.output)")
        #expect(next.stderr.contains("hint: ") && next.stderr.contains("--allow-rollback"), "\(next.output)")
        #expect(FileManager.default.contents(atPath: remote + "/manifest.json") == atTop, "the manifest is as it was")

        try """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = file://\(remote)
            local = \(src)
            """.writeReplacing(box.config)
        let push = ferry(["sync", "now", "--config", box.config])
        #expect(push.exitCode == 4 && push.stderr.contains("the remote's manifest file://\(remote)/manifest.json has version \(top), the largest"), "\(push.output)")
        #expect(FileManager.default.contents(atPath: remote + "/manifest.json") == atTop, "nothing published")
        #expect(!FileManager.default.fileExists(atPath: remote + "/b.txt"), "nothing uploaded for a version that cannot be published")

        // A pull takes the largest version, and refuses one past it (rollback protection holds).
        box.configure(remote: "file://" + remote)
        #expect(box.sync().exitCode == 0)
        #expect(try StateStore(directory: box.state, clock: SystemClock()).session("test")?.manifestVersion == top)
        try "{\"format\": \"ferry-manifest/1\", \"version\": \(top + 1), \"files\": []}".writeReplacing(remote + "/manifest.json")
        let beyond = box.sync()
        #expect(beyond.exitCode == 4 && beyond.stderr.contains("\"version\" \(top + 1) is larger than \(top)"), "\(beyond.output)")
        #expect(try StateStore(directory: box.state, clock: SystemClock()).session("test")?.manifestVersion == top)
    }
}

import Foundation
import Testing

/// `ferry manifest show`: what a published manifest says — version, expiry, every signer and
/// whether it is trusted, key set, rollout, counts — from a directory, a URL or a session, judged
/// but never refused, and nothing written.
@Suite(.serialized)
struct ManifestShowTests {
    static func show(_ arguments: [String]) -> [String: Any] {
        let run = ferry(["manifest", "show", "--json"] + arguments)
        #expect(run.exitCode == 0, "\(run.output)")
        return (try? JSONSerialization.jsonObject(with: Data(run.stdout.utf8))) as? [String: Any] ?? [:]
    }

    @Test func aSignedRolloutIsShownFromADirectoryAURLAndASession() throws {
        let origin = try NginxServer()
        defer { origin.stop() }
        let box = Sandbox("manifest-show", published: origin.root)
        let key = box.directory + "/publisher.key", other = box.directory + "/other.key"
        let publicKey = SignedManifestTests.generateKey(key), otherKey = SignedManifestTests.generateKey(other)
        box.publish("a.txt", "release 1\n")
        #expect(ferry(["manifest", "build", origin.root, "--version", "7", "--sign", key]).exitCode == 0)
        box.publish("a.txt", "release 2\n")
        box.publish("big.bin", randomData(3 << 20, seed: 5))
        let built = ferry(["manifest", "build", origin.root, "--version", "8", "--sign", key, "--sign", other, "--rollout", "10%"])
        #expect(built.exitCode == 0, "\(built.output)")

        // A directory, judged by one of the two keys.
        let dir = Self.show([origin.root, "--trusted-key", publicKey])
        #expect(dir["version"] as? Int == 8 && dir["format"] as? String == "ferry-manifest/2" && dir["expired"] as? Bool == false, "\(dir)")
        let signers = dir["signers"] as? [[String: Any]] ?? []
        #expect(signers.count == 2 && signers.allSatisfy { $0["valid"] as? Bool == true }, "\(signers)")
        #expect(signers.first { $0["key"] as? String == publicKey }?["trusted"] as? Bool == true
                && signers.first { $0["key"] as? String == otherKey }?["trusted"] as? Bool == false, "\(signers)")
        let rollout = dir["rollout"] as? [String: Any]
        #expect(rollout?["percent"] as? Int == 10 && rollout?["previous_version"] as? Int == 7, "\(dir)")
        #expect(dir["files"] as? Int == 2 && dir["bytes"] as? Int == (3 << 20) + 10 && dir["indexed_files"] as? Int == 1, "\(dir)")

        // The same over HTTP, in words.
        let text = ferry(["manifest", "show", origin.url + "manifest.json", "--trusted-key", otherKey])
        #expect(text.exitCode == 0, "\(text.output)")
        for line in ["version    8, ferry-manifest/2", "\(publicKey) (not trusted here)", "\(otherKey) (trusted)",
                     "rollout    version 8 goes to 10% of machines; the others stay on version 7", "files      2 files, 3.00 MiB, 1 indexed for deltas"] {
            #expect(text.stdout.contains(line), "\(line): \(text.stdout)")
        }

        // A session of the config: its remote and its trusted-keys; its state untouched.
        box.configure(remote: origin.url, session: ["trusted-keys = \(publicKey)"])
        let session = Self.show(["--config", box.config, "--session", "test"])
        #expect((session["signers"] as? [[String: Any]])?.filter { $0["trusted"] as? Bool == true }.count == 1, "\(session)")
        #expect(!FileManager.default.fileExists(atPath: box.state + "/manifests"), "nothing written to the state")

        // Expired is shown, not refused: an unsigned flat manifest whose expiry has passed.
        let old = box.directory + "/old"
        try FileManager.default.createDirectory(atPath: old, withIntermediateDirectories: true)
        try "x\n".writeReplacing(old + "/a.txt")
        #expect(ferry(["manifest", "build", old, "--format", "1", "--expires", "2h"]).exitCode == 0)
        let flat = try #require(fileContents(old + "/manifest.json"))
        let expires = try #require(flat.range(of: #""expires": "[^"]*""#, options: .regularExpression))
        try flat.replacingCharacters(in: expires, with: #""expires": "2020-01-01T00:00:00Z""#).writeReplacing(old + "/manifest.json")
        let expired = ferry(["manifest", "show", old + "/manifest.json"])
        #expect(expired.exitCode == 0 && expired.stdout.contains("(expired)") && expired.stdout.contains("nobody (unsigned)")
                && expired.stdout.contains("ferry-manifest/1"), "\(expired.output)")
        #expect(Self.show([old])["expired"] as? Bool == true)

        // Asked wrong: one source or a session, a key that is a key.
        #expect(ferry(["manifest", "show"]).exitCode == 2)
        let badKey = ferry(["manifest", "show", origin.root, "--trusted-key", "ed25519:nope"])
        #expect(badKey.exitCode == 2 && badKey.stderr.contains("is not a public key"), "\(badKey.output)")
        #expect(ferry(["manifest", "show", box.directory + "/nothing-here"]).exitCode == 4)
    }
}

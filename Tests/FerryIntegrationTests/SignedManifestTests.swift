import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// Signed manifests (issue 20 §1): Ed25519 keys that work with openssl both ways, `manifest build
/// --sign` and a push session's `sign-key`, and pull sessions with `trusted-keys` that take only
/// what their keys signed: unsigned, foreign-signed, altered, expired and rolled-back manifests
/// are refused with exit 4, and nothing changes (no file, no task row, no cached manifest).
@Suite
struct SignedManifestTests {
    /// A published tree of three files served as a file:// remote.
    static func world(_ label: String) -> Sandbox {
        let box = Sandbox(label)
        box.publish("a.txt", "alpha\n")
        box.publish("dir/b.txt", "bravo\n")
        box.publish("dir/sub/c.txt", "charlie\n")
        return box
    }

    /// `ferry key generate`: the key file, and the public key it printed.
    static func generateKey(_ path: String) -> String {
        let run = ferry(["key", "generate", "--output", path])
        #expect(run.exitCode == 0, "\(run.output)")
        return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The public key openssl derives from a private key file, in ferry's notation (the last 32
    /// bytes of the DER SubjectPublicKeyInfo are the raw key).
    static func opensslPublicKey(_ key: String, in dir: String) -> String {
        let der = dir + "/pub-\(UUID().uuidString.prefix(6)).der"
        let run = runProcess("/usr/bin/openssl", ["pkey", "-in", key, "-pubout", "-outform", "DER", "-out", der])
        #expect(run.exitCode == 0, "\(run.output)")
        let bytes = FileManager.default.contents(atPath: der) ?? Data()
        return "ed25519:" + bytes.suffix(32).base64EncodedString()
    }

    /// A config of two sessions over one file:// remote: `up` pushes `src` there, `down` pulls it
    /// into `dst`, each with its own extra lines.
    static func publisherAndMirror(_ box: Sandbox, remote: String, src: String, dst: String, up: [String], down: [String]) throws {
        try (["[agent]", "state = \(box.state)", "[session up]", "direction = push", "remote = file://\(remote)", "local = \(src)"] + up
             + ["[session down]", "remote = file://\(remote)", "local = \(dst)"] + down).joined(separator: "\n").appending("\n").writeReplacing(box.config)
    }

    /// A manifest of the published tree signed by `key` (through ferry's own signing code), expiring
    /// in an hour unless `expires` says otherwise, with `edit` applied to the rendered manifest
    /// before it is signed.
    static func signed(_ box: Sandbox, key: String, version: Int64, expires: Timestamp? = inAnHour(),
                       edit: (String) -> String = { $0 }) throws -> String {
        let bytes = try SigningKey.sign(manifest: Array(edit(rendered(version: version, expires: expires)).utf8), with: [SigningKey(file: key, use: "test")])
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The published tree's manifest as `manifest build` renders it (format 1).
    static func rendered(version: Int64, expires: Timestamp? = inAnHour(), generated: Timestamp = SystemClock().now(), keySet: Int64? = nil) -> String {
        let entries = ["a.txt": "alpha\n", "dir/b.txt": "bravo\n", "dir/sub/c.txt": "charlie\n"].map { path, text in
            ManifestEntry(path: RelativePath(trusted: path), size: Int64(text.utf8.count), sha256: digest(text), mode: 0o644)
        }
        return ManifestWriter.render(version: version, generated: generated, expires: expires, keySet: keySet, entries: entries)
    }

    static func inAnHour() -> Timestamp { Timestamp(seconds: Int64(time(nil)) + 3600) }

    static func digest(_ text: String) -> SHA256Digest {
        let hasher = SHA256Hasher()
        Array(text.utf8).withUnsafeBytes { hasher.update($0.baseAddress!, count: $0.count) }
        return hasher.finalize()
    }

    /// Nothing of a refused manifest stays: no mirrored file, no task row, no cached manifest, no
    /// version. A refusal of what a manifest says also says so (`saysNothingChanged`; one that
    /// does not parse is refused as any malformed manifest is).
    static func expectNothingChanged(_ box: Sandbox, _ run: FerryRun, saying text: String, saysNothingChanged: Bool = true,
                                     sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(run.exitCode == 4, "\(run.output)", sourceLocation: sourceLocation)
        #expect(run.stderr.contains(text), "\(run.stderr)", sourceLocation: sourceLocation)
        #expect(!saysNothingChanged || run.stderr.contains("nothing was changed"), "\(run.stderr)", sourceLocation: sourceLocation)
        #expect(treeSnapshot(box.local).isEmpty, "no file was mirrored", sourceLocation: sourceLocation)
        let store = try StateStore(directory: box.state, clock: SystemClock())
        #expect(try store.tasks(session: "test").isEmpty, "no task row", sourceLocation: sourceLocation)
        #expect(try store.session("test")?.manifestVersion == nil, "no version recorded", sourceLocation: sourceLocation)
        let cached = (try? FileManager.default.contentsOfDirectory(atPath: box.state + "/manifests")) ?? []
        #expect(cached.isEmpty, "no cached manifest a later run would trust: \(cached)", sourceLocation: sourceLocation)
    }

    /// The bytes a signature covers and the signature, cut out of a signed manifest as design.md says.
    static func signedBytesAndSignature(_ manifest: Data) throws -> (Data, Data) {
        let json = try JSONSerialization.jsonObject(with: manifest) as! [String: Any]
        let signature = Data(base64Encoded: ((json["signatures"] as! [[String: Any]])[0]["sig"] as! String))!
        let start = manifest.range(of: Data("{\"signed\": ".utf8))!.upperBound
        let end = manifest.range(of: Data(",\n\"signatures\"".utf8))!.lowerBound
        return (manifest.subdata(in: start..<end), signature)
    }

    @Test func keysWorkWithOpenSSLBothWays() throws {
        let box = Self.world("keys-openssl")
        let mine = box.directory + "/ferry.key"
        let printed = Self.generateKey(mine)
        var st = stat()
        #expect(stat(mine, &st) == 0 && st.st_mode & 0o777 == 0o600, "the key is its owner's alone")
        #expect(fileContents(mine)?.hasPrefix("-----BEGIN PRIVATE KEY-----\n") == true, "PKCS#8 PEM")
        #expect(printed.hasPrefix("ed25519:") && printed == Self.opensslPublicKey(mine, in: box.directory), "openssl reads ferry's key: \(printed)")
        #expect(ferry(["key", "public", mine]).stdout == printed + "\n")
        let again = ferry(["key", "generate", "--output", mine])
        #expect(again.exitCode == 2 && again.stderr.contains("already exists"), "a key is never overwritten: \(again.output)")
        #expect(ferry(["key", "public", mine]).stdout == printed + "\n")

        // openssl checks what ferry signed, and refuses it changed by one byte.
        box.buildManifest(["--sign", mine])
        let (message, signature) = try Self.signedBytesAndSignature(FileManager.default.contents(atPath: box.published + "/manifest.json")!)
        try message.write(to: URL(fileURLWithPath: box.directory + "/signed.bin"))
        try signature.write(to: URL(fileURLWithPath: box.directory + "/sig.bin"))
        #expect(runProcess("/usr/bin/openssl", ["pkey", "-in", mine, "-pubout", "-out", box.directory + "/pub.pem"]).exitCode == 0)
        let verify = ["pkeyutl", "-verify", "-pubin", "-inkey", box.directory + "/pub.pem", "-rawin", "-in", box.directory + "/signed.bin",
                      "-sigfile", box.directory + "/sig.bin"]
        let verified = runProcess("/usr/bin/openssl", verify)
        #expect(verified.exitCode == 0 && verified.stdout.contains("Signature Verified Successfully"), "\(verified.output)")
        var altered = message
        altered[altered.count / 2] ^= 0x01
        try altered.write(to: URL(fileURLWithPath: box.directory + "/signed.bin"))
        #expect(runProcess("/usr/bin/openssl", verify).exitCode != 0, "openssl refuses the altered bytes")

        // ferry checks what openssl signed, with a key openssl made.
        let theirs = box.directory + "/openssl.key"
        #expect(runProcess("/usr/bin/openssl", ["genpkey", "-algorithm", "ed25519", "-out", theirs]).exitCode == 0)
        let theirPublic = ferry(["key", "public", theirs]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(theirPublic == Self.opensslPublicKey(theirs, in: box.directory))
        box.buildManifest(["--expires", "1h"])
        let unsigned = FileManager.default.contents(atPath: box.published + "/manifest.json")!
        var body = unsigned
        while let last = body.last, last == 0x0A || last == 0x20 { body.removeLast() }
        try body.write(to: URL(fileURLWithPath: box.directory + "/body.bin"))
        let signing = runProcess("/usr/bin/openssl", ["pkeyutl", "-sign", "-inkey", theirs, "-rawin", "-in", box.directory + "/body.bin",
                                                      "-out", box.directory + "/their.sig"])
        #expect(signing.exitCode == 0, "\(signing.output)")
        let theirSignature = FileManager.default.contents(atPath: box.directory + "/their.sig")!.base64EncodedString()
        try box.writeManifest("{\"signed\": " + String(decoding: body, as: UTF8.self)
                              + ",\n\"signatures\": [{\"key\": \"\(theirPublic)\", \"sig\": \"\(theirSignature)\"}]}\n")
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(theirPublic)"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(fileContents(box.localPath("dir/sub/c.txt")) == "charlie\n")
        #expect(run.events(named: "manifest-fetched").first?["signed_by"] as? String == theirPublic, "\(run.stdout)")
    }

    @Test func aTrustingSessionTakesOnlyWhatItsKeySigned() throws {
        let box = Self.world("trust")
        let key = box.directory + "/publisher.key", foreign = box.directory + "/foreign.key"
        let trusted = Self.generateKey(key)
        let other = Self.generateKey(foreign)
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(trusted)", "delete = yes"])

        box.buildManifest()
        try Self.expectNothingChanged(box, box.sync(), saying: "is not signed, and session 'test' trusts \(trusted)")

        try box.writeManifest(Self.signed(box, key: foreign, version: 10))
        try Self.expectNothingChanged(box, box.sync(), saying: "is signed by \(other), which session 'test' trusts \(trusted) does not trust")

        // Altered after signing: a file's hash swapped for another's, and the version raised.
        let good = try Self.signed(box, key: key, version: 10)
        let alphaHash = Self.digest("alpha\n").description, bravoHash = Self.digest("bravo\n").description
        for tampered in [good.replacingOccurrences(of: alphaHash, with: bravoHash), good.replacingOccurrences(of: "\"version\": 10", with: "\"version\": 11")] {
            #expect(tampered != good)
            try box.writeManifest(tampered)
            try Self.expectNothingChanged(box, box.sync(), saying: "signature by the trusted key \(trusted) that does not match its content")
        }
        // A signature moved under another key's name.
        try box.writeManifest(good.replacingOccurrences(of: trusted, with: other))
        try Self.expectNothingChanged(box, box.sync(), saying: "is signed by \(other)")

        try box.writeManifest(Self.signed(box, key: key, version: 10, expires: Timestamp(seconds: Int64(time(nil)) - 60)))
        try Self.expectNothingChanged(box, box.sync(), saying: "expired at")

        try box.writeManifest(good)
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        for (path, text) in ["a.txt": "alpha\n", "dir/b.txt": "bravo\n", "dir/sub/c.txt": "charlie\n"] { #expect(fileContents(box.localPath(path)) == text) }
        #expect(run.events(named: "manifest-fetched").first?["signed_by"] as? String == trusted)
        #expect(box.statusText().contains("signed by \(trusted)"), "\(box.statusText())")
        let status = try JSONSerialization.jsonObject(with: Data(box.status(["--json"]).stdout.utf8)) as? [String: Any]
        let sessions = status?["sessions"] as? [[String: Any]]
        #expect(sessions?.first?["manifest_signer"] as? String == trusted, "\(String(describing: status))")

        // A replayed older version, properly signed, is a rollback.
        try box.writeManifest(Self.signed(box, key: key, version: 9))
        let replay = box.sync()
        #expect(replay.exitCode == 4 && replay.stderr.contains("refused as a rollback"), "\(replay.output)")
        #expect(treeSnapshot(box.local).count == 3)
    }

    /// k-of-n (`trust-threshold`): with three trusted keys and a threshold of 2, a manifest one
    /// of them signed is refused naming how many valid signatures it had, two signatures by the
    /// same key count once, a foreign key's signature counts for nothing, and two trusted
    /// signatures are taken. `manifest build --sign A --sign B` and a push with two sign-key
    /// files make such manifests; an unchanged poll stands only while the threshold still holds.
    @Test func twoOfThreeTrustedKeysMustSign() throws {
        let box = Self.world("threshold")
        var keys: [String] = [], publics: [String] = []
        for name in ["k1", "k2", "k3", "foreign"] {
            keys.append(box.directory + "/\(name).key")
            publics.append(Self.generateKey(keys.last!))
        }
        let trusted = ["trusted-keys = \(publics[0]) \(publics[1]) \(publics[2])", "trust-threshold = 2"]
        box.configure(remote: "file://" + box.published, session: trusted)
        func signed(by which: [Int]) throws -> String {
            let bytes = try SigningKey.sign(manifest: Array(Self.rendered(version: 10).utf8), with: which.map { try SigningKey(file: keys[$0], use: "test") })
            return String(decoding: bytes, as: UTF8.self)
        }
        try box.writeManifest(signed(by: [0]))
        try Self.expectNothingChanged(box, box.sync(), saying: "carries 1 valid signature by a trusted key (\(publics[0])), and session 'test' takes only manifests signed by 2 of its 3 trusted keys")
        try box.writeManifest(signed(by: [0, 0]))
        try Self.expectNothingChanged(box, box.sync(), saying: "carries 1 valid signature by a trusted key")
        try box.writeManifest(signed(by: [1, 3]))
        try Self.expectNothingChanged(box, box.sync(), saying: "carries 1 valid signature by a trusted key (\(publics[1]))")
        // A second trusted signature altered after signing is no signature.
        let altered = try signed(by: [0, 2])
        let json = try JSONSerialization.jsonObject(with: Data(altered.utf8)) as! [String: Any]
        let second = (json["signatures"] as! [[String: Any]])[1]["sig"] as! String
        var sig = Array(Data(base64Encoded: second)!)
        sig[0] ^= 1
        try box.writeManifest(altered.replacingOccurrences(of: second, with: Data(sig).base64EncodedString()))
        try Self.expectNothingChanged(box, box.sync(), saying: "carries 1 valid signature by a trusted key (\(publics[0]))")

        try box.writeManifest(signed(by: [2, 3, 0]))
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "manifest-fetched").first?["signed_by"] as? String == "\(publics[2]) \(publics[0])")
        let status = try JSONSerialization.jsonObject(with: Data(box.status(["--json"]).stdout.utf8)) as? [String: Any]
        let session = (status?["sessions"] as? [[String: Any]])?.first
        #expect(session?["manifest_signers"] as? [String] == [publics[2], publics[0]], "\(String(describing: session))")
        #expect(box.statusText(["-v"]).contains("signed by \(publics[2]) and \(publics[0])"), "\(box.statusText(["-v"]))")
        // The manifest unchanged, but the config no longer trusts one of its two signers: not taken as it stands.
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(publics[0]) \(publics[1])", "trust-threshold = 2"])
        let unchanged = box.sync()
        #expect(unchanged.exitCode == 4 && unchanged.stderr.contains("carries 1 valid signature by a trusted key"), "\(unchanged.output)")

        // manifest build with two keys.
        box.configure(remote: "file://" + box.published, session: trusted)
        let built = ferry(["manifest", "build", box.published, "--version", "11", "--sign", keys[1], "--sign", keys[2], "--json"])
        #expect(built.exitCode == 0, "\(built.output)")
        #expect(built.events(named: "manifest-built").first?["signed_by"] as? String == "\(publics[1]) \(publics[2])")
        #expect(box.sync().exitCode == 0)
        #expect(ferry(["manifest", "build", box.published, "--sign", keys[1], "--sign", keys[1]]).output.contains("names one key twice"))

        // A push signing with two keys, pulled by a session that wants two.
        let remote = box.directory + "/pushed", src = box.directory + "/src", dst = box.directory + "/dst"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try "pushed\n".writeReplacing(src + "/p.txt")
        try Self.publisherAndMirror(box, remote: remote, src: src, dst: dst, up: ["sign-key = \(keys[0]) \(keys[1])"],
                                    down: ["trusted-keys = \(publics[0]) \(publics[1]) \(publics[2])", "trust-threshold = 2"])
        #expect(ferry(["sync", "now", "--config", box.config, "--session", "up"]).exitCode == 0)
        let pulled = ferry(["sync", "now", "--config", box.config, "--session", "down"])
        #expect(pulled.exitCode == 0 && fileContents(dst + "/p.txt") == "pushed\n", "\(pulled.output)")
        // Nothing changed: not published again while the same two keys sign.
        let quiet = ferry(["sync", "now", "--config", box.config, "--session", "up", "--json"])
        #expect(quiet.exitCode == 0 && quiet.events(named: "manifest-built").isEmpty, "\(quiet.stdout)")
    }

    /// The time floor: a session with trusted-keys never takes a manifest generated (by its signed
    /// time) before the newest it took, whatever its version or allow-rollback say, and judges
    /// expiry by the later of its clock and that time. A publisher whose clock runs ahead raises
    /// the floor only to this machine's time, so its next manifests are still taken.
    @Test func aManifestOlderThanOneTakenIsRefusedByTheTimeFloor() throws {
        let box = Self.world("time-floor")
        let key = box.directory + "/publisher.key"
        let trusted = Self.generateKey(key)
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(trusted)", "allow-rollback = yes"])
        let now = Int64(time(nil))
        func signed(version: Int64, generated: Int64, expires: Int64) throws -> String {
            let text = Self.rendered(version: version, expires: Timestamp(seconds: expires), generated: Timestamp(seconds: generated))
            return String(decoding: try SigningKey.sign(manifest: Array(text.utf8), with: [SigningKey(file: key, use: "test")]), as: UTF8.self)
        }
        let older = try signed(version: 20, generated: now - 7200, expires: now + 3600)
        try box.writeManifest(signed(version: 10, generated: now - 60, expires: now + 3600))
        #expect(box.sync().exitCode == 0)
        // A higher version, allow-rollback or not: signed two hours ago, before the one taken.
        try box.writeManifest(older)
        let replay = box.sync()
        #expect(replay.exitCode == 4 && replay.stderr.contains("refused as a replay of an older one"), "\(replay.output)")
        #expect(try StateStore(directory: box.state, clock: SystemClock()).session("test")?.manifestVersion == 10, "nothing was taken")

        // A publisher a day ahead: taken, and the floor stops at this machine's time.
        try box.writeManifest(signed(version: 30, generated: now + 86_400, expires: now + 90_000))
        #expect(box.sync().exitCode == 0)
        let floor = try StateStore(directory: box.state, clock: SystemClock()).session("test")?.trustFloor?.seconds ?? 0
        #expect(floor >= now && floor <= Int64(time(nil)), "the floor is this machine's time when it took it: \(floor - now)")
        try box.writeManifest(signed(version: 31, generated: Int64(time(nil)) + 1, expires: now + 3600))
        #expect(box.sync().exitCode == 0, "the publisher's next manifest, on a right clock, is taken")

        // This machine's clock set back three hours: the older manifest is still refused, though
        // by that clock it would be fresh, and the one taken expires by the floor's time, not the clock's.
        try box.writeManifest(older)
        let config = try ConfigLoader.load(path: box.config)
        let clock = ManualClock(wall: Timestamp(seconds: now - 3 * 3600))
        let job = SessionRunner.Job(session: config.sessions[0], options: SyncOptions(stop: StopCondition(clock: clock, maxDuration: nil)))
        let result = try SessionRunner(agent: config.agent, clock: clock).run([job], sinks: [])[0]
        #expect(result.exitCode == .remoteOrManifest && (result.message ?? "").contains("refused as a replay"), "\(String(describing: result.message))")
        let acceptance = ManifestAcceptance(session: "test", now: Timestamp(seconds: now - 3 * 3600), appliedVersion: nil, localFiles: 0,
                                            allowRollback: true, allowEmpty: true, trustedKeys: [PublicKey(text: trusted)!],
                                            floor: Timestamp(seconds: now))
        let stale = try Manifests.parse(Array(signed(version: 40, generated: now, expires: now - 60).utf8), source: "stale")
        #expect(throws: FerryError.self) { try acceptance.check(stale, source: "stale") }
        #expect(acceptance.judgedNow == Timestamp(seconds: now))
    }

    /// Keys that change in band (`ferry key set`): the mirrors start from 2-of-{K1, K2, K3}; the
    /// publisher writes key set 2 = 2-of-{K2, K3, K4} signed by K2, K3 and K4, and builds with K2 and
    /// K4. The mirror takes set 2 at its next run without a config change, and from then on a root
    /// signed by K1 and K2 is refused (under set 2, or under set 1), one by K2 and K4 taken; a set 3
    /// signed by the revoked K1 is refused; the chain is kept in the state, and edited trusted-keys
    /// start it again.
    @Test func keysRotateInBandAndARevokedKeySignsNothing() throws {
        let box = Self.world("rotation")
        var keys: [String] = [], publics: [String] = []
        for name in ["k1", "k2", "k3", "k4", "k5"] {
            keys.append(box.directory + "/\(name).key")
            publics.append(Self.generateKey(keys.last!))
        }
        let config = ["trusted-keys = \(publics[0]) \(publics[1]) \(publics[2])", "trust-threshold = 2"]
        box.configure(remote: "file://" + box.published, session: config)
        func build(_ version: Int, signedBy which: [Int]) -> FerryRun {
            ferry(["manifest", "build", box.published, "--version", String(version)] + which.flatMap { ["--sign", keys[$0]] })
        }
        #expect(build(10, signedBy: [0, 1]).exitCode == 0)
        #expect(box.sync().exitCode == 0)

        let keysDir = box.published + "/.ferry/keys"
        // Not enough of the new set's own keys: refused before anything is written.
        let short = ferry(["key", "set", keysDir, "--key", publics[1], "--key", publics[2], "--key", publics[3], "--threshold", "2", "--sign", keys[1]])
        #expect(short.exitCode == 2 && short.stderr.contains("would be refused by mirrors"), "\(short.output)")
        let written = ferry(["key", "set", keysDir, "--key", publics[1], "--key", publics[2], "--key", publics[3], "--threshold", "2",
                             "--sign", keys[1], "--sign", keys[2], "--sign", keys[3], "--json"])
        #expect(written.exitCode == 0 && written.stdout.contains("\"version\":2"), "\(written.output)")
        // The publisher cannot build a manifest the new set would refuse.
        let stale = build(11, signedBy: [0, 1])
        #expect(stale.exitCode == 2 && stale.stderr.contains("would be refused by mirrors that took key set 2"), "\(stale.output)")
        #expect(build(11, signedBy: [1, 3]).exitCode == 0)
        #expect(fileContents(box.published + "/manifest.json")?.contains("\"keys\": 2") == true)

        let moved = box.sync(["--json"])
        #expect(moved.exitCode == 0, "\(moved.output)")
        #expect(moved.events(named: "warning").contains { ($0["message"] as? String)?.contains("took key set 2") == true }, "\(moved.stdout)")
        #expect(FileManager.default.fileExists(atPath: box.state + "/manifests/test.manifest.keys/2.json"), "the chain is kept")
        #expect(box.statusText(["-v"]).contains("key set 2 (taken from the publisher): 2 of \(publics[1]), \(publics[2]), \(publics[3])"), "\(box.statusText(["-v"]))")
        let status = try JSONSerialization.jsonObject(with: Data(box.status(["--json"]).stdout.utf8)) as? [String: Any]
        let keySet = ((status?["sessions"] as? [[String: Any]])?.first?["key_set"] as? [String: Any])
        #expect(keySet?["version"] as? Int == 2 && keySet?["threshold"] as? Int == 2, "\(String(describing: keySet))")
        // config show and config check say the set in force, not only the config's.
        let inForce = "in force: key set 2 (rotated in band from these), trust-threshold 2 of \(publics[1]) \(publics[2]) \(publics[3])"
        let shown = ferry(["config", "show", "--config", box.config])
        #expect(shown.stdout.contains("trusted-keys = \(publics[0]) \(publics[1]) \(publics[2])\n#   " + inForce), "\(shown.output)")
        #expect(ferry(["config", "check", "--config", box.config]).stdout.contains("    " + inForce))

        // K1 is revoked: with K2, under set 2 or under set 1, it is one signature short or refused.
        func publish(_ version: Int64, keySet: Int64?, signedBy which: [Int]) throws {
            let text = Self.rendered(version: version, keySet: keySet)
            let bytes = try SigningKey.sign(manifest: Array(text.utf8), with: which.map { try SigningKey(file: keys[$0], use: "test") })
            try box.writeManifest(String(decoding: bytes, as: UTF8.self))
        }
        try publish(12, keySet: 2, signedBy: [0, 1])
        let underTwo = box.sync()
        #expect(underTwo.exitCode == 4 && underTwo.stderr.contains("carries 1 valid signature by a trusted key (\(publics[1]))"), "\(underTwo.output)")
        try publish(12, keySet: nil, signedBy: [0, 1])
        let underOne = box.sync()
        #expect(underOne.exitCode == 4 && underOne.stderr.contains("signed under key set 1, but session 'test' has moved on to key set 2"), "\(underOne.output)")
        try publish(12, keySet: 2, signedBy: [3, 1])
        #expect(box.sync().exitCode == 0, "K2 and the new K4: taken")

        // A set 3 signed by the revoked K1 and a new K5 alone: refused, the session stays on set 2.
        let forged = box.directory + "/forged"
        try FileManager.default.createDirectory(atPath: forged, withIntermediateDirectories: true)
        let unsigned = KeySet(version: 3, keys: [PublicKey(text: publics[4])!, PublicKey(text: publics[0])!], threshold: 1)
        let forgedBytes = try SigningKey.sign(manifest: Array(unsigned.render().utf8), with: [SigningKey(file: keys[0], use: "t"), SigningKey(file: keys[4], use: "t")])
        try Data(forgedBytes).write(to: URL(fileURLWithPath: keysDir + "/3.json"))
        try publish(13, keySet: 3, signedBy: [4])
        let takeover = box.sync()
        #expect(takeover.exitCode == 4 && takeover.stderr.contains("key set") && takeover.stderr.contains("is refused: it carries 0 valid signatures by the keys of key set 2"),
                "\(takeover.output)")
        #expect(!FileManager.default.fileExists(atPath: box.state + "/manifests/test.manifest.keys/3.json"))
        // Endless data: a key set larger than 64 KiB is not read.
        try Data(repeating: 0x20, count: 200_000).write(to: URL(fileURLWithPath: keysDir + "/3.json"))
        let endless = box.sync()
        #expect(endless.exitCode == 4 && endless.stderr.contains("key set 3, which manifest") && endless.stderr.contains("cannot be had"), "\(endless.output)")

        // Edited trusted-keys: the chain starts again from them.
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(publics[4])"])
        try publish(14, keySet: nil, signedBy: [4])
        #expect(box.sync().exitCode == 0, "the operator's keys are where trust starts")
        #expect(!FileManager.default.fileExists(atPath: box.state + "/manifests/test.manifest.keys/2.json"))
    }

    /// A push session with keys-dir publishes the key sets beside its manifest and names the
    /// newest; a new set re-issues the manifest though no file changed, and the mirror follows.
    @Test func aPushPublishesItsKeySets() throws {
        let box = Sandbox("push-rotation")
        let remote = box.directory + "/remote", src = box.directory + "/src", dst = box.directory + "/dst", keysDir = box.directory + "/keys"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try "pushed\n".writeReplacing(src + "/p.txt")
        let a = box.directory + "/a.key", b = box.directory + "/b.key"
        let aPublic = Self.generateKey(a), bPublic = Self.generateKey(b)
        func configure(signKey: String) throws {
            try Self.publisherAndMirror(box, remote: remote, src: src, dst: dst, up: ["sign-key = \(signKey)", "keys-dir = \(keysDir)"],
                                        down: ["trusted-keys = \(aPublic)"])
        }
        try configure(signKey: a)
        #expect(ferry(["sync", "now", "--config", box.config, "--session", "up"]).exitCode == 0)
        #expect(ferry(["sync", "now", "--config", box.config, "--session", "down"]).exitCode == 0)
        // Key set 2: A or B, signed by A (the set before) and B; the manifest names it at once.
        #expect(ferry(["key", "set", keysDir, "--key", aPublic, "--key", bPublic, "--sign", a, "--sign", b]).exitCode == 0)
        let reissued = ferry(["sync", "now", "--config", box.config, "--session", "up", "--json"])
        #expect(reissued.exitCode == 0 && reissued.stdout.contains("names key set 1, and keys-dir holds key set 2"), "\(reissued.output)")
        #expect(FileManager.default.fileExists(atPath: remote + "/.ferry/keys/2.json"))
        #expect(ferry(["sync", "now", "--config", box.config, "--session", "down"]).exitCode == 0)
        // Set 3: B alone. The mirror follows to it with the next manifest, B's.
        #expect(ferry(["key", "set", keysDir, "--key", bPublic, "--sign", a, "--sign", b]).exitCode == 0)
        try configure(signKey: b)
        try "changed\n".writeReplacing(src + "/p.txt")
        #expect(ferry(["sync", "now", "--config", box.config, "--session", "up"]).exitCode == 0)
        let pulled = ferry(["sync", "now", "--config", box.config, "--session", "down"])
        #expect(pulled.exitCode == 0 && fileContents(dst + "/p.txt") == "changed\n", "\(pulled.output)")
        #expect(FileManager.default.fileExists(atPath: box.state + "/manifests/down.manifest.keys/3.json"))
    }

    /// A mirror 70 key sets behind (more than the 64 a run follows) catches up: the first run takes
    /// sets 2 to 65, each checked and kept, and refuses the manifest for now saying so; the next
    /// goes on from 65 and takes the manifest. Before, each run refused with no progress, for ever.
    @Test func aMirrorFarBehindOnKeySetsCatchesUpOverRuns() throws {
        let box = Sandbox("key-chain-long")
        let remote = box.directory + "/remote", src = box.directory + "/src", dst = box.directory + "/dst", keysDir = box.directory + "/keys"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try "signed far along\n".writeReplacing(src + "/p.txt")
        let a = box.directory + "/a.key"
        let aPublic = Self.generateKey(a)
        for _ in 2...71 { #expect(ferry(["key", "set", keysDir, "--key", aPublic, "--sign", a]).exitCode == 0) }
        try Self.publisherAndMirror(box, remote: remote, src: src, dst: dst, up: ["sign-key = \(a)", "keys-dir = \(keysDir)"],
                                    down: ["trusted-keys = \(aPublic)"])
        #expect(ferry(["sync", "now", "--config", box.config, "--session", "up"]).exitCode == 0)
        let first = ferry(["sync", "now", "--config", box.config, "--session", "down"])
        #expect(first.exitCode == 4, "\(first.output)")
        #expect(first.stderr.contains("names key set 71, 70 sets after the one session 'down' trusted (1)")
                && first.stderr.contains("took key sets 2 to 65") && first.stderr.contains("the next run goes on from key set 65"), "\(first.output)")
        #expect(FileManager.default.fileExists(atPath: box.state + "/manifests/down.manifest.keys/65.json"))
        #expect(!FileManager.default.fileExists(atPath: dst + "/p.txt"))
        let second = ferry(["sync", "now", "--config", box.config, "--session", "down"])
        #expect(second.exitCode == 0, "\(second.output)")
        #expect(fileContents(dst + "/p.txt") == "signed far along\n")
        #expect(FileManager.default.fileExists(atPath: box.state + "/manifests/down.manifest.keys/71.json"))
    }

    /// Rotation: trust the new key beside the old, sign with the new, then drop the old one; a
    /// manifest only the old key signed is then refused, even the one already taken.
    @Test func keysRotate() throws {
        let box = Self.world("rotate")
        let old = box.directory + "/old.key", new = box.directory + "/new.key"
        let oldPublic = Self.generateKey(old), newPublic = Self.generateKey(new)
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(oldPublic)"])
        try box.writeManifest(Self.signed(box, key: old, version: 20))
        #expect(box.sync().exitCode == 0)

        try box.writeManifest(Self.signed(box, key: new, version: 21))
        #expect(box.sync().exitCode == 4, "not trusted yet")
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(oldPublic) \(newPublic)"])
        #expect(box.sync().exitCode == 0, "both trusted during the rotation")
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = \(newPublic)"])
        #expect(box.sync().exitCode == 0, "the new key alone")

        try box.writeManifest(Self.signed(box, key: old, version: 22))
        let refused = box.sync()
        #expect(refused.exitCode == 4 && refused.stderr.contains("is signed by \(oldPublic)"), "\(refused.output)")
        #expect(try StateStore(directory: box.state, clock: SystemClock()).session("test")?.manifestVersion == 21)
    }

    /// A push session signs what it publishes (with an expiry), and a trusting pull takes it; a new
    /// sign-key re-issues the manifest though no file changed.
    @Test func aSignedPushIsPulledByATrustingSession() throws {
        let box = Sandbox("signed-push")
        let remote = box.directory + "/remote", src = box.directory + "/src", dst = box.directory + "/dst"
        for dir in [remote, src + "/d"] { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        try "one\n".writeReplacing(src + "/one.txt")
        try "two\n".writeReplacing(src + "/d/two.txt")
        let first = box.directory + "/first.key", second = box.directory + "/second.key"
        let firstPublic = Self.generateKey(first), secondPublic = Self.generateKey(second)
        func configure(signKey: String, trusting: String, expires: String = "1h") throws {
            try Self.publisherAndMirror(box, remote: remote, src: src, dst: dst, up: ["sign-key = \(signKey)", "expires = \(expires)"],
                                        down: ["trusted-keys = \(trusting)"])
        }
        try configure(signKey: first, trusting: firstPublic)
        let push = ferry(["sync", "now", "--config", box.config, "--session", "up"])
        #expect(push.exitCode == 0, "\(push.output)")
        let published = try String(contentsOfFile: remote + "/manifest.json", encoding: .utf8)
        #expect(published.hasPrefix("{\"signed\": {") && published.contains(firstPublic) && published.contains("\"expires\": "), "\(published)")
        let pull = ferry(["sync", "now", "--config", box.config, "--session", "down"])
        #expect(pull.exitCode == 0, "\(pull.output)")
        #expect(treeSnapshot(dst).keys.sorted() == ["d/two.txt", "one.txt"])
        #expect(fileContents(dst + "/one.txt") == "one\n" && fileContents(dst + "/d/two.txt") == "two\n")

        try configure(signKey: second, trusting: secondPublic)
        let reissue = ferry(["sync", "now", "--config", box.config, "--session", "up"])
        #expect(reissue.exitCode == 0 && reissue.output.contains("is not signed by sign-key (\(secondPublic))"), "\(reissue.output)")
        let again = try readPublished(remote)
        #expect(again.signer(trusting: []) == PublicKey(text: secondPublic) && again.entries.count == 2)
        #expect(ferry(["sync", "now", "--config", box.config, "--session", "down"]).exitCode == 0, "the mirror takes the new key's manifest")
        let quiet = ferry(["sync", "now", "--config", box.config, "--session", "up", "--json"])
        #expect(quiet.exitCode == 0 && quiet.events(named: "manifest-built").isEmpty, "nothing to re-issue now: \(quiet.stdout)")

        // The published manifest expires in an hour; with expires = 3h it is past half its time.
        try configure(signKey: second, trusting: secondPublic, expires: "3h")
        let renewed = ferry(["sync", "now", "--config", box.config, "--session", "up", "--json"])
        #expect(renewed.exitCode == 0 && renewed.stdout.contains("expires at"), "\(renewed.stdout)")
        let fresh = try Manifests.parse(Array(FileManager.default.contents(atPath: remote + "/manifest.json")!), source: "test")
        #expect((fresh.expires?.seconds ?? 0) > Int64(time(nil)) + 2 * 3600 && fresh.version! > again.version!)
    }
}

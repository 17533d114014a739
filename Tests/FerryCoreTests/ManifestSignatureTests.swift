import Testing
@testable import FerryCore

/// The signed-manifest envelope as the core reads it: what bytes a verifier is given, how the
/// envelope may and may not be shaped, and what `trusted-keys` makes of each signature.
struct ManifestSignatureTests {
    /// Records the message it is asked about and answers "valid" for signatures of 64 × `good`.
    final class Recorder: SignatureVerifier, @unchecked Sendable {
        var messages: [String] = []
        func verify(signature: [UInt8], by key: PublicKey, of message: UnsafeBufferPointer<UInt8>) -> Bool {
            messages.append(String(decoding: message, as: UTF8.self))
            return signature == [UInt8](repeating: 7, count: 64)
        }
    }

    static let keyA = PublicKey(raw: [UInt8](repeating: 1, count: 32))!
    static let keyB = PublicKey(raw: [UInt8](repeating: 2, count: 32))!
    static let good = [UInt8](repeating: 7, count: 64)
    static let bad = [UInt8](repeating: 9, count: 64)
    static let body = "{\"format\": \"ferry-manifest/1\", \"version\": 5, \"files\": [{\"path\": \"a\", \"size\": 1, \"sha256\": \"\(String(repeating: "a", count: 64))\"}]}"

    func parse(_ text: String, _ recorder: Recorder = Recorder()) throws(FerryError) -> Manifest {
        try Manifest.parse(Array(text.utf8), source: "m", verifier: recorder)
    }

    @Test func publicKeysAreEd25519AndBase64Of32Bytes() {
        #expect(Self.keyA.description == "ed25519:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
        #expect(PublicKey(text: Self.keyA.description) == Self.keyA)
        for bad in ["AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=", "ed25519:AQEB", "rsa:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=",
                    "ed25519:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE", "ed25519:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=x"] {
            #expect(PublicKey(text: bad) == nil, "\(bad)")
        }
    }

    /// The verifier gets the `signed` value's bytes exactly as written, whitespace inside included.
    @Test func theSignedBytesAreTheSignedValueAsWritten() throws {
        let recorder = Recorder()
        let text = String(decoding: ManifestEnvelope.wrap(Array((Self.body + "\n\n").utf8), signatures: [(Self.keyA, Self.good), (Self.keyB, Self.bad)]),
                          as: UTF8.self)
        let m = try parse(text, recorder)
        #expect(recorder.messages == [Self.body, Self.body])
        #expect(m.signatures == [ManifestSignature(key: Self.keyA, check: .valid), ManifestSignature(key: Self.keyB, check: .invalid)])
        #expect(m.signer(trusting: []) == Self.keyA && m.version == 5 && m.entries.count == 1)
        // The members in another order, with other spacing: the same bytes are checked.
        let reordered = "{ \"signatures\": [{\"sig\": \"\(Base64.encode(Self.good))\", \"key\": \"\(Self.keyA)\"}],\n \"signed\":   \(Self.body) }"
        let r2 = Recorder()
        #expect(try parse(reordered, r2).signer(trusting: []) == Self.keyA)
        #expect(r2.messages == [Self.body])
        // Members ferry does not know may stand beside the envelope's, before or after `signed`.
        for extra in ["{\"comment\": [1], \"signed\": \(Self.body), \"signatures\": []}", "{\"signed\": \(Self.body), \"comment\": {\"version\": 1}}"] {
            #expect(try parse(extra).version == 5, "\(extra)")
        }
        // Without a verifier nothing is claimed.
        #expect(try Manifest.parse(Array(text.utf8), source: "m").signatures.map(\.check) == [.unchecked, .unchecked])
    }

    @Test(arguments: [
        ("{\"signatures\": [], \"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": []}", "no \"signed\" member"),
        ("{\"signed\": \(body), \"version\": 9}", "one \"signed\" member and no other manifest fields"),
        ("{\"version\": 9, \"signed\": \(body)}", "one \"signed\" member and no other manifest fields"),
        ("{\"signed\": [1], \"signatures\": []}", "\"signed\" must be the manifest object"),
        ("{\"signed\": \(body), \"signatures\": [{\"key\": \"ed25519:AQEB\", \"sig\": \"\"}]}", "signatures[0].key must be"),
        ("{\"signed\": \(body), \"signatures\": [{\"key\": \"\(keyA)\", \"sig\": \"AAAA\"}]}", "signatures[0].sig must be"),
        ("{\"signed\": \(body), \"signatures\": [" + Array(repeating: "{\"key\": \"\(keyA)\", \"sig\": \"\(Base64.encode(good))\"}", count: 9).joined(separator: ",") + "]}",
         "more than 8 signatures"),
    ])
    func malformedEnvelopesAreRefused(text: String, message: String) {
        #expect(throws: FerryError.self) { try parse(text) }
        do { _ = try parse(text) } catch { #expect(error.message.contains(message), "\(error.message)") }
    }

    @Test func trustedKeysDecide() throws {
        // The body carries no expiry: what the keys decide is checked apart from require-expiry.
        func acceptance(_ keys: [PublicKey]) -> ManifestAcceptance {
            ManifestAcceptance(session: "s", now: Timestamp(seconds: 1000), appliedVersion: nil, localFiles: 0, allowRollback: false,
                               allowEmpty: false, trustedKeys: keys, requireExpiry: false)
        }
        let unsigned = try parse(Self.body)
        let byA = try parse(String(decoding: ManifestEnvelope.wrap(Array(Self.body.utf8), signatures: [(Self.keyA, Self.good)]), as: UTF8.self))
        let brokenA = try parse(String(decoding: ManifestEnvelope.wrap(Array(Self.body.utf8), signatures: [(Self.keyA, Self.bad)]), as: UTF8.self))
        let both = try parse(String(decoding: ManifestEnvelope.wrap(Array(Self.body.utf8), signatures: [(Self.keyB, Self.bad), (Self.keyA, Self.good)]),
                                    as: UTF8.self))
        // Without trusted keys, anything goes (signatures are informational).
        for m in [unsigned, byA, brokenA] { try acceptance([]).check(m, source: "m") }
        try acceptance([Self.keyA]).check(byA, source: "m")
        try acceptance([Self.keyA]).check(both, source: "m")
        try acceptance([Self.keyB, Self.keyA]).check(byA, source: "m")
        func refusal(_ keys: [PublicKey], _ m: Manifest) -> String {
            do { try acceptance(keys).check(m, source: "m") } catch { return error.message }
            return "accepted"
        }
        #expect(refusal([Self.keyA], unsigned).contains("is not signed"))
        #expect(refusal([Self.keyA], brokenA).contains("does not match its content"))
        #expect(refusal([Self.keyB], byA).contains("is signed by \(Self.keyA), which session 's' trusts \(Self.keyB) does not trust"))
    }

    func envelope(_ body: String, _ signatures: [(PublicKey, [UInt8])]) throws -> Manifest {
        try parse(String(decoding: ManifestEnvelope.wrap(Array(body.utf8), signatures: signatures), as: UTF8.self))
    }

    /// The signer shown is the key the session took the manifest on, not whichever valid
    /// signature comes first in the envelope.
    @Test func theSignerShownIsTheTrustedKeyThatVerified() throws {
        let keyC = PublicKey(raw: [UInt8](repeating: 3, count: 32))!
        let untrustedFirst = try envelope(Self.body, [(Self.keyB, Self.good), (Self.keyA, Self.good)])
        #expect(untrustedFirst.signer(trusting: [Self.keyA]) == Self.keyA)
        #expect(untrustedFirst.signer(trusting: [keyC, Self.keyA]) == Self.keyA)
        #expect(untrustedFirst.signer(trusting: [keyC]) == nil, "no trusted key verified")
        #expect(untrustedFirst.signer(trusting: []) == Self.keyB, "without trusted keys: the first that verified, informational")
        // A trusted key whose signature does not verify is never the signer.
        let brokenFirst = try envelope(Self.body, [(Self.keyA, Self.bad), (Self.keyB, Self.good)])
        #expect(brokenFirst.signer(trusting: [Self.keyA, Self.keyB]) == Self.keyB)
        #expect(brokenFirst.signer(trusting: [Self.keyA]) == nil)
        // Parsed without a verifier, nothing vouches.
        let unchecked = try Manifest.parse(ManifestEnvelope.wrap(Array(Self.body.utf8), signatures: [(Self.keyA, Self.good)]), source: "m")
        #expect(unchecked.signer(trusting: []) == nil && unchecked.signer(trusting: [Self.keyA]) == nil)
    }

    /// With trusted-keys, a manifest without `expires` is refused unless require-expiry = no.
    @Test func aTrustingSessionRequiresAnExpiry() throws {
        func acceptance(_ keys: [PublicKey], requireExpiry: Bool = true) -> ManifestAcceptance {
            ManifestAcceptance(session: "s", now: Timestamp(seconds: 1000), appliedVersion: nil, localFiles: 0, allowRollback: false,
                               allowEmpty: false, trustedKeys: keys, requireExpiry: requireExpiry)
        }
        let withoutExpiry = try envelope(Self.body, [(Self.keyA, Self.good)])
        let expiring = try envelope(Self.body.replacingOccurrences(of: "\"version\": 5,", with: "\"version\": 5, \"expires\": \"1970-01-01T01:00:00Z\","),
                                    [(Self.keyA, Self.good)])
        #expect(expiring.expires == Timestamp(seconds: 3600))
        let refused = #expect(throws: FerryError.self) { try acceptance([Self.keyA]).check(withoutExpiry, source: "m") }
        #expect(refused?.exitCode == .remoteOrManifest && refused?.message.contains("manifest m carries no \"expires\", and session 's' takes only signed manifests that do") == true,
                "\(String(describing: refused))")
        #expect(refused?.hint?.contains("require-expiry = no") == true)
        try acceptance([Self.keyA], requireExpiry: false).check(withoutExpiry, source: "m")
        try acceptance([Self.keyA]).check(expiring, source: "m")
        // Without trusted keys there is no signed word to hold to: nothing is required.
        try acceptance([]).check(withoutExpiry, source: "m")
        try acceptance([]).check(try parse(Self.body), source: "m")
        // Trust comes first: an untrusted manifest is refused for that, whatever its expiry.
        let foreign = #expect(throws: FerryError.self) { try acceptance([Self.keyB]).check(withoutExpiry, source: "m") }
        #expect(foreign?.message.contains("which session 's' trusts") == true, "\(String(describing: foreign))")
    }
}

/// An Ed25519 public key as ferry names it: `ed25519:` and the base64 of its 32 raw bytes (what
/// `ferry key generate` and `ferry key public` print, and `trusted-keys` lists).
public struct PublicKey: Hashable, Sendable, CustomStringConvertible {
    public static let prefix = "ed25519:"
    /// The 32 raw bytes.
    public let raw: [UInt8]

    public init?(raw: [UInt8]) {
        guard raw.count == 32 else { return nil }
        self.raw = raw
    }

    /// Parses `ed25519:BASE64`; nil for anything else.
    public init?(text: String) {
        guard text.hasPrefix(PublicKey.prefix), let raw = Base64.decode(String(text.dropFirst(PublicKey.prefix.count))),
              Base64.encode(raw) == String(text.dropFirst(PublicKey.prefix.count)) else { return nil }
        self.init(raw: raw)
    }

    public var description: String { PublicKey.prefix + Base64.encode(raw) }
}

/// Checks an Ed25519 signature (libcrypto does it in the runtime; the core stays free of I/O and C).
public protocol SignatureVerifier: Sendable {
    func verify(signature: [UInt8], by key: PublicKey, of message: UnsafeBufferPointer<UInt8>) -> Bool
}

/// One signature a manifest carries, and whether it verified over the signed bytes.
public struct ManifestSignature: Sendable, Equatable {
    public enum Check: Sendable, Equatable {
        case valid, invalid
        /// Parsed without a verifier (tools that only read the file list).
        case unchecked
    }

    public let key: PublicKey
    public let check: Check

    public init(key: PublicKey, check: Check) {
        self.key = key
        self.check = check
    }
}

/// A signed manifest (design.md, "Signed manifests"): one JSON object with two members,
///
///     {"signed": <the manifest, exactly as written>,
///      "signatures": [{"key": "ed25519:BASE64", "sig": "BASE64"}]}
///
/// What is signed are the bytes of the `signed` value as they stand in the file, from its `{` to
/// its `}`: a verifier never serialises anything again, so there is no canonical form to get wrong.
/// `openssl pkeyutl -verify -rawin` checks the same bytes.
public enum ManifestEnvelope {
    /// The most signatures one manifest may carry (each costs a verification): a publisher needs
    /// two while it rotates keys.
    public static let maximumSignatures = 8
    /// How long a signed manifest stays valid when its publisher says nothing (`manifest build
    /// --sign` without `--expires`, a push session with `sign-key` and no `expires`): a week, so a
    /// server stuck on one manifest is noticed, and a push re-issues it twice in that time.
    public static let defaultLifetime: Double = 7 * 86_400

    /// The envelope around `manifest` (a rendered manifest; trailing whitespace is not signed and
    /// is dropped) with its signatures, each made over `signedBytes(of: manifest)`.
    public static func wrap(_ manifest: [UInt8], signatures: [(key: PublicKey, signature: [UInt8])]) -> [UInt8] {
        var out = Array("{\"signed\": ".utf8)
        out += signedBytes(of: manifest)
        out += Array(",\n\"signatures\": [".utf8)
        for (i, s) in signatures.enumerated() {
            out += Array("\(i == 0 ? "" : ", "){\"key\": \"\(s.key)\", \"sig\": \"\(Base64.encode(s.signature))\"}".utf8)
        }
        out += Array("]}\n".utf8)
        return out
    }

    /// The `signatures` member: at most `maximumSignatures` objects `{"key": "ed25519:…", "sig": "…"}`.
    static func readSignatures(_ r: inout JSONReader) throws(JSONReader.Failure) -> [(key: PublicKey, signature: [UInt8])] {
        var signatures: [(key: PublicKey, signature: [UInt8])] = []
        try r.readArray { (r: inout JSONReader, i: Int) throws(JSONReader.Failure) in
            if i >= maximumSignatures { throw r.problem("carries more than \(maximumSignatures) signatures") }
            var keyText: String?, sigText: String?
            try r.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                switch key {
                case "key": keyText = try r.readString()
                case "sig": sigText = try r.readString()
                default: try r.skipValue()
                }
            }
            guard let keyText, let key = PublicKey(text: keyText) else {
                throw r.problem("signatures[\(i)].key must be \"ed25519:\" and the base64 of 32 bytes")
            }
            guard let sigText, let sig = Base64.decode(sigText), sig.count == 64 else {
                throw r.problem("signatures[\(i)].sig must be the base64 of a 64-byte Ed25519 signature")
            }
            signatures.append((key, sig))
        }
        return signatures
    }

    /// Each signature checked over `message` (`.unchecked` without a verifier).
    static func check(_ signatures: [(key: PublicKey, signature: [UInt8])], over message: UnsafeBufferPointer<UInt8>,
                      verifier: (any SignatureVerifier)?) -> [ManifestSignature] {
        signatures.map { s in
            ManifestSignature(key: s.key, check: verifier.map { $0.verify(signature: s.signature, by: s.key, of: message) ? .valid : .invalid } ?? .unchecked)
        }
    }

    /// The bytes a signature over `manifest` covers: the rendered manifest without trailing whitespace.
    public static func signedBytes(of manifest: [UInt8]) -> [UInt8] {
        var end = manifest.count
        while end > 0, [0x20, 0x0A, 0x0D, 0x09].contains(manifest[end - 1]) { end -= 1 }
        return Array(manifest[0..<end])
    }
}

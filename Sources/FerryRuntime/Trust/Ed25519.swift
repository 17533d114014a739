import CCrypto
import Glibc
import FerryCore

/// Checks Ed25519 signatures with libcrypto (`EVP_DigestVerify`, the one-shot form Ed25519 takes).
public struct Ed25519Verifier: SignatureVerifier {
    public init() {}

    public func verify(signature: [UInt8], by key: PublicKey, of message: UnsafeBufferPointer<UInt8>) -> Bool {
        guard signature.count == 64, let pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, key.raw, key.raw.count) else { return false }
        defer { EVP_PKEY_free(pkey) }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, nil, nil, pkey) == 1 else { return false }
        // A message of 0 bytes still needs a pointer libcrypto may read nothing from.
        var empty: UInt8 = 0
        return withUnsafePointer(to: &empty) { fallback in
            EVP_DigestVerify(context, signature, signature.count, message.baseAddress ?? fallback, message.count) == 1
        }
    }
}

/// An Ed25519 private key, as `ferry key generate` writes it and `openssl genpkey -algorithm
/// ed25519` does: PKCS#8 in PEM (`-----BEGIN PRIVATE KEY-----`), unencrypted, mode 0600. Either
/// tool's key works with the other. The key bytes never leave this object but as that file.
public final class SigningKey: @unchecked Sendable {
    /// Owned; freed in deinit. libcrypto's key objects are safe to use from any thread for signing.
    private let pkey: OpaquePointer
    public let publicKey: PublicKey

    private init(pkey: OpaquePointer) throws(FerryError) {
        self.pkey = pkey
        var raw = [UInt8](repeating: 0, count: 32)
        var length = raw.count
        guard EVP_PKEY_get_raw_public_key(pkey, &raw, &length) == 1, length == 32, let key = PublicKey(raw: raw) else {
            EVP_PKEY_free(pkey)
            throw .usage("libcrypto could not give the public half of an Ed25519 key")
        }
        publicKey = key
    }

    deinit { EVP_PKEY_free(pkey) }

    /// A new random key.
    public static func generate() throws(FerryError) -> SigningKey {
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil) else { throw .usage("libcrypto cannot make Ed25519 keys here") }
        defer { EVP_PKEY_CTX_free(context) }
        var pkey: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_keygen(context, &pkey) == 1, let pkey else {
            throw .usage("libcrypto could not make an Ed25519 key")
        }
        return try SigningKey(pkey: pkey)
    }

    /// Reads a PEM private key file (PKCS#8, as ferry or openssl write it). `use` names what the
    /// key is for in errors (`sign-key of session 'x'`, `--sign`).
    public convenience init(file: String, use: String) throws(FerryError) {
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(file, limit: 1 << 16) } catch {
            // One that is there but not this user's to read needs an owner, not a new key.
            var st = stat()
            let there = stat(file, &st) == 0
            let user = StateOwner.userName(geteuid())
            throw .usage("\(use): cannot read the signing key \(Printable.name(file)) as \(user): \(error.message)",
                         hint: there ? "it is \(StateOwner.userName(st.st_uid))'s (mode 0\(String(st.st_mode & 0o777, radix: 8))); let \(user) read it: chown \(user): \(file)"
                                     : "make one with: ferry key generate --output \(file)")
        }
        let text = String(decoding: bytes, as: UTF8.self)
        if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
            throw .usage("\(use): the signing key \(Printable.name(file)) is encrypted with a passphrase, which ferry cannot ask for",
                         hint: "keep the key unencrypted and readable only by the publishing user (mode 0600): openssl pkey -in KEY -out PLAIN")
        }
        let bio = bytes.withUnsafeBytes { BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }
        defer { BIO_free(bio) }
        // No passphrase callback may prompt on a terminal: one that gives none.
        guard let pkey = PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in 0 }, nil) else {
            throw .usage("\(use): \(Printable.name(file)) is not a PEM private key",
                         hint: "ferry key generate --output FILE makes one (as does openssl genpkey -algorithm ed25519 -out FILE)")
        }
        guard EVP_PKEY_get_id(pkey) == EVP_PKEY_ED25519 else {
            EVP_PKEY_free(pkey)
            throw .usage("\(use): \(Printable.name(file)) is a private key, but not an Ed25519 one: ferry signs with Ed25519 only",
                         hint: "make one with: ferry key generate --output FILE (or openssl genpkey -algorithm ed25519 -out FILE)")
        }
        try self.init(pkey: pkey)
    }

    /// How a session's key is named in errors and warnings.
    public static func use(in session: SessionConfig) -> String { "sign-key of session '\(session.name)'" }

    /// A warning when others may read the key file (nil when only its owner can).
    public static func exposure(of file: String, use: String) -> String? {
        var st = stat()
        guard stat(file, &st) == 0, st.st_mode & 0o077 != 0 else { return nil }
        return "\(use): the signing key \(file) can be read by users other than its owner; run: chmod 600 \(file)"
    }

    /// The key as PKCS#8 PEM.
    public func pem() throws(FerryError) -> [UInt8] {
        guard let bio = BIO_new(BIO_s_mem()) else { throw .usage("libcrypto could not write the key") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1 else { throw .usage("libcrypto could not write the key") }
        let pending = Int(BIO_ctrl(bio, BIO_CTRL_PENDING, 0, nil))
        var out = [UInt8](repeating: 0, count: pending)
        let n = out.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32(pending)) }
        guard n == pending else { throw .usage("libcrypto could not write the key") }
        return out
    }

    /// Writes the key to a new file, mode 0600; an existing file is never replaced (it may be the
    /// only copy of a key mirrors trust).
    public func write(to path: String) throws(FerryError) {
        let bytes = try pem()
        do { try FileSystem.writeAtomically(path, bytes: bytes, mode: 0o600, replacing: false) } catch {
            throw FerryError(.usage, error.message, hint: FileSystem.exists(path)
                ? "a key file is never overwritten (mirrors may trust its key): choose another --output, or remove the old file first" : nil)
        }
    }

    /// The Ed25519 signature (64 bytes) of `message`.
    public func sign(_ message: [UInt8]) throws(FerryError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw .usage("libcrypto could not sign") }
        defer { EVP_MD_CTX_free(context) }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = signature.count
        guard EVP_DigestSignInit(context, nil, nil, nil, pkey) == 1,
              EVP_DigestSign(context, &signature, &length, message, message.count) == 1, length == 64 else {
            throw .usage("libcrypto could not sign with the Ed25519 key")
        }
        return signature
    }

    /// `manifest`, rendered, wrapped in a signed envelope (`ManifestEnvelope`) with a signature by each of `keys`.
    public static func sign(manifest: [UInt8], with keys: [SigningKey]) throws(FerryError) -> [UInt8] {
        let message = ManifestEnvelope.signedBytes(of: manifest)
        var signatures: [(key: PublicKey, signature: [UInt8])] = []
        for key in keys { signatures.append((key.publicKey, try key.sign(message))) }
        return ManifestEnvelope.wrap(manifest, signatures: signatures)
    }
}

/// The one place the runtime parses a manifest: every signature it carries is checked with
/// libcrypto as it is read, so no caller can forget to.
public enum Manifests {
    public static func parse(_ bytes: [UInt8], source: String) throws(FerryError) -> Manifest {
        try Manifest.parse(bytes, source: source, verifier: Ed25519Verifier())
    }

    /// Parses the manifest in `file`, giving back its pages as the parser passes them; with
    /// `hashing`, also the SHA-256 of its bytes, each hashed just before it is given back.
    static func parse(_ file: MappedFile, source: String, hashing: Bool) throws(FerryError) -> (Manifest, SHA256Digest?) {
        try file.withBytes { (bytes) throws(FerryError) -> (Manifest, SHA256Digest?) in
            let hasher = hashing ? SHA256Hasher() : nil
            var hashed = 0
            func hash(to offset: Int) {
                if let hasher, let base = bytes.baseAddress, offset > hashed { hasher.update(base + hashed, count: offset - hashed) }
                hashed = max(hashed, offset)
            }
            let manifest = try Manifest.parse(bytes, source: source, verifier: Ed25519Verifier()) { offset in
                hash(to: offset)
                file.release(before: offset)
            }
            hash(to: bytes.count)
            return (manifest, hasher?.finalize())
        }
    }

    /// A manifest as `manifest build` and a push publish it: generated `now`, expiring `lifetime`
    /// seconds later when one is given, signed by `keys` when any are given; format 2 (a root
    /// and the tree of objects it names) unless `format` is 1. `entries` are in path order.
    /// Signed by each of `keys`.
    static func publishable(version: Int64, entries: [ManifestEntry], lifetime: Double?, keys: [SigningKey], keySet: Int64? = nil,
                            rollout: Rollout? = nil, format: Int = 2, layout: RemoteLayout = .tree, packs: ObjectBundle.Named? = nil,
                            now: Timestamp) throws(FerryError) -> (bytes: [UInt8], expires: Timestamp?, tree: ManifestTree.Built?) {
        let expires = lifetime.map { Timestamp(seconds: now.seconds + Int64($0)) }
        var tree: ManifestTree.Built?
        let text: [UInt8]
        if format == 1 {
            text = Array(ManifestWriter.render(version: version, generated: now, expires: expires, layout: layout, keySet: keySet, entries: entries).utf8)
        } else {
            let hasher = SHA256Hasher()
            let built = ManifestTree.build(entries) { hasher.digest(of: $0) }
            tree = built
            text = Array(ManifestWriter.renderRoot(version: version, generated: now, expires: expires, layout: layout,
                                                   keySet: keySet, rollout: rollout, tree: built.root,
                                                   bundles: built.bundles, packs: packs).utf8)
        }
        return (keys.isEmpty ? text : try SigningKey.sign(manifest: text, with: keys), expires, tree)
    }
}

/// A set of keys a session trusts, and how many of them must sign (`trust-threshold`): the
/// config's `trusted-keys` are key set 1; a publisher moves its mirrors on to the next set with a
/// key-set document (`ferry-keys/1`) published beside the manifest at `.ferry/keys/<N>.json`, in
/// the signed envelope manifests use:
///
///     {"signed": {"format": "ferry-keys/1", "version": 2, "threshold": 2,
///                 "keys": ["ed25519:…", "ed25519:…", "ed25519:…"]},
///      "signatures": [{"key": "ed25519:…", "sig": "…"}, …]}
///
/// Set N+1 is taken only from set N: signed by N's threshold of N's keys (those who were trusted
/// agree) and by its own threshold of its own keys (the new keys exist and are held). A root
/// names the set it is signed under (`"keys": N`; none: set 1); a mirror that took set N+1 trusts
/// only it from then on, so a key it dropped signs nothing any more, and a root under an older set
/// is refused. TUF's root rotation is the model.
public struct KeySet: Sendable, Equatable {
    public static let formatName = "ferry-keys/1"
    /// The most keys a set may list.
    public static let maximumKeys = 32
    /// The most key-set documents a run follows at once (a chain longer than that waits for the next run).
    public static let maximumSteps = 64
    /// The largest key-set document read.
    public static let maximumSize = 64 << 10

    public let version: Int64
    public let keys: [PublicKey]
    public let threshold: Int
    /// The signatures its document carries, each checked when it was parsed (none for set 1).
    public let signatures: [ManifestSignature]

    public init(version: Int64, keys: [PublicKey], threshold: Int, signatures: [ManifestSignature] = []) {
        self.version = version
        self.keys = keys
        self.threshold = threshold
        self.signatures = signatures
    }

    /// Where set `version` is published, relative to the manifest's directory.
    public static func path(_ version: Int64) -> String { ".ferry/keys/\(version).json" }

    /// The unsigned document (`SigningKey.sign(manifest:with:)` wraps and signs it).
    public func render() -> String {
        "{\n  \"format\": \"\(KeySet.formatName)\",\n  \"version\": \(version),\n  \"threshold\": \(threshold),\n  \"keys\": ["
            + keys.map { "\"\($0)\"" }.joined(separator: ", ") + "]\n}\n"
    }

    /// The keys of `among` whose signatures verified, each once.
    public func signers(among keys: [PublicKey]) -> [PublicKey] {
        var out: [PublicKey] = []
        for s in signatures where s.check == .valid && keys.contains(s.key) && !out.contains(s.key) { out.append(s.key) }
        return out
    }

    /// Whether `next` may follow this set; the reason when it may not.
    public func refusal(of next: KeySet) -> String? {
        if next.version != version + 1 { return "it is key set \(next.version), and the one after key set \(version) was expected" }
        let old = next.signers(among: keys)
        if old.count < threshold {
            return "it carries \(Plural.count(old.count, "valid signature")) by the keys of key set \(version), which needs \(threshold)"
        }
        let new = next.signers(among: next.keys)
        if new.count < next.threshold {
            return "it carries \(Plural.count(new.count, "valid signature")) by its own keys, and says \(next.threshold) must sign"
        }
        return nil
    }

    /// A key-set document, its signatures checked with `verifier`; anything else is refused.
    public static func parse(_ bytes: [UInt8], source: String, verifier: (any SignatureVerifier)?) throws(FerryError) -> KeySet {
        try bytes.withUnsafeBufferPointer { (buffer) throws(FerryError) -> KeySet in
            var reader = JSONReader(buffer)
            var signed: Range<Int>?
            var signatures: [(key: PublicKey, signature: [UInt8])] = []
            var format: String?, version: Int64?, threshold: Int64?, keys: [PublicKey]?
            do throws(JSONReader.Failure) {
                try reader.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                    switch key {
                    case "signed":
                        let start = try r.valueStart()
                        guard try r.peekKind() == .object else { throw r.problem("\"signed\" must be the key set object") }
                        try r.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                            switch key {
                            case "format": format = try r.readString()
                            case "version": version = try r.readCount("\"version\"")
                            case "threshold": threshold = try r.readCount("\"threshold\"")
                            case "keys":
                                var list: [PublicKey] = []
                                try r.readArray { (r: inout JSONReader, i: Int) throws(JSONReader.Failure) in
                                    if i >= maximumKeys { throw r.problem("lists more than \(maximumKeys) keys") }
                                    let text = try r.readString()
                                    guard let key = PublicKey(text: text) else { throw r.problem("keys[\(i)] must be \"ed25519:\" and the base64 of 32 bytes") }
                                    if list.contains(key) { throw r.problem("lists \(text) twice") }
                                    list.append(key)
                                }
                                keys = list
                            default: try r.skipValue()
                            }
                        }
                        signed = start..<r.offset
                    case "signatures":
                        signatures = try ManifestEnvelope.readSignatures(&r)
                    default:
                        try r.skipValue()
                    }
                }
                try reader.expectEnd()
            } catch {
                throw .manifest("key set \(source) is not one ferry reads (line \(error.line), column \(error.column)): \(error.message)")
            }
            guard let signed, format == formatName else { throw .manifest("key set \(source) is not a signed \(formatName) document") }
            guard let version, version >= 2, version <= Manifest.maximumVersion else { throw .manifest("key set \(source) has no version from 2 on") }
            guard let keys, !keys.isEmpty, let threshold, threshold >= 1, threshold <= keys.count else {
                throw .manifest("key set \(source) must list keys and a threshold from 1 to their number")
            }
            return KeySet(version: version, keys: keys, threshold: Int(threshold),
                          signatures: ManifestEnvelope.check(signatures, over: UnsafeBufferPointer(rebasing: buffer[signed]), verifier: verifier))
        }
    }
}

import Glibc
import FerryCore

/// The key sets a pull session has trusted (`KeySet`), kept in its state: `<state>/manifests/
/// <session>.keys/` holds each key-set document it took (`<N>.json`) and `base`, the config's
/// `trusted-keys` and `trust-threshold` the chain starts from. The session trusts the last set
/// of the chain. Edited `trusted-keys` start a new chain (the operator's word is where trust
/// starts); each document is verified again from the base whenever the chain is read, so a
/// document altered on this disk ends the chain where it is.
public struct KeyChain {
    let directory: String
    private(set) var current: KeySet
    /// Dry runs follow a chain in memory only.
    private let keeps: Bool
    /// The config's set as `base` records it (`stamp`).
    private let baseStamp: [UInt8]

    init(session: SessionConfig, state: String, keeps: Bool = true) {
        directory = StatePaths.cachedManifest(state: state, session: session.name) + ".keys"
        self.keeps = keeps
        let base = KeySet(version: 1, keys: session.trustedKeys, threshold: session.trustThreshold)
        current = base
        baseStamp = Array(KeyChain.stamp(base).utf8)
        guard !session.trustedKeys.isEmpty else { return }
        guard (try? FileSystem.readFile(directory + "/base", limit: 4096)) == baseStamp else {
            // Another starting point (or none yet): what was followed from the old one goes.
            if keeps { for name in FileSystem.names(in: directory) { unlink(directory + "/" + name) } }
            return
        }
        while current.version < Int64(Int32.max),
              let bytes = try? FileSystem.readFile(directory + "/\(current.version + 1).json", limit: KeySet.maximumSize),
              let next = try? KeySet.parse(bytes, source: "the state's copy", verifier: Ed25519Verifier()), current.refusal(of: next) == nil {
            current = next
        }
    }

    /// The key set a pull session trusts now, as its state keeps the chain (read only; for status).
    public static func trusted(by session: SessionConfig, state: String) -> KeySet {
        KeyChain(session: session, state: state, keeps: false).current
    }

    /// The config's set as `base` records it.
    private static func stamp(_ base: KeySet) -> String {
        "threshold \(base.threshold)\n" + base.keys.map { $0.description + "\n" }.joined()
    }

    /// Moves the chain on to set `target` (a root names it), each set after the current one
    /// fetched with `fetch` (its document's bytes), checked against the one before and kept.
    /// A root under an older set than the current one is refused: the keys dropped since sign
    /// nothing. A root more than `KeySet.maximumSteps` sets ahead is refused after that many were
    /// taken and kept, so the next run goes on from there. Returns the versions taken.
    mutating func advance(to target: Int64, source: String, session: String,
                          fetch: (Int64) throws(FerryError) -> [UInt8]) throws(FerryError) -> [Int64] {
        if target < current.version {
            throw .manifest("manifest \(source) is signed under key set \(target), but session '\(session)' has moved on to key set \(current.version): the keys dropped since sign nothing; refused, nothing was changed",
                            hint: "the publisher must sign with the keys of key set \(current.version) and name it (ferry manifest build finds it in .ferry/keys/ beside the manifest; a push in keys-dir)")
        }
        // At most `maximumSteps` sets a run, each checked against the one before and kept: a mirror
        // far behind catches up over a few runs, and a manifest naming an absurd set costs a run
        // no more than that many fetches.
        let start = current.version
        let goal = min(target, start + Int64(KeySet.maximumSteps))
        var taken: [Int64] = []
        while current.version < goal {
            let version = current.version + 1
            let bytes = try fetch(version)
            let where_ = "\(KeySet.path(version)) beside \(source)"
            let next = try KeySet.parse(bytes, source: where_, verifier: Ed25519Verifier())
            if let why = current.refusal(of: next) {
                throw .manifest("key set \(where_) is refused: \(why); the session goes on trusting key set \(current.version), and refuses manifest \(source); nothing was changed",
                                hint: "the publisher must sign the new key set with enough keys of the old one and of the new one (ferry key set --sign)")
            }
            if keeps {
                try FileSystem.makePrivateDirectory(directory)
                try FileSystem.writeAtomically(directory + "/base", bytes: baseStamp, mode: 0o600)
                try FileSystem.writeAtomically(directory + "/\(version).json", bytes: bytes, mode: 0o600)
            }
            current = next
            taken.append(version)
        }
        if goal < target {
            throw .manifest("manifest \(source) names key set \(target), \(target - start) sets after the one session '\(session)' trusted (\(start)); ferry follows at most \(KeySet.maximumSteps) a run, and took key sets \(start + 1) to \(goal), each checked against the one before: the manifest is refused for now, and the next run goes on from key set \(goal)",
                            hint: "run again until the session reaches key set \(target) (or start the mirrors from a newer set: put its keys in trusted-keys)")
        }
        return taken
    }
}

/// A publisher's key-set documents: a directory of `<N>.json` (`.ferry/keys/` beside a manifest
/// `manifest build` writes, or a push session's `keys-dir`).
public enum KeySets {
    /// The newest document in `directory` (nil: none, the mirrors' `trusted-keys` stand).
    public static func newest(in directory: String) throws(FerryError) -> KeySet? {
        let versions = FileSystem.names(in: directory).compactMap { name -> Int64? in
            guard name.hasSuffix(".json") else { return nil }
            return Int64(name.dropLast(5)).flatMap { $0 >= 2 ? $0 : nil }
        }
        guard let version = versions.max() else { return nil }
        let path = directory + "/\(version).json"
        return try KeySet.parse(try FileSystem.readFile(path, limit: KeySet.maximumSize), source: path, verifier: Ed25519Verifier())
    }

    /// Writes the next key set into `directory`, signed by each of `signers`: checked as a mirror
    /// would check it against the newest one there (none: against the mirrors' own `trusted-keys`,
    /// which this machine cannot see), and against itself.
    public static func write(into directory: String, keys: [PublicKey], threshold: Int, signers: [SigningKey]) throws(FerryError) -> (path: String, set: KeySet, previous: KeySet?) {
        let previous = try newest(in: directory)
        let version = (previous?.version ?? 1) + 1
        let unsigned = KeySet(version: version, keys: keys, threshold: threshold)
        let bytes = try SigningKey.sign(manifest: Array(unsigned.render().utf8), with: signers)
        let next = try KeySet.parse(bytes, source: "the new key set", verifier: Ed25519Verifier())
        let base = previous ?? KeySet(version: 1, keys: signers.map(\.publicKey), threshold: 1)
        if let why = base.refusal(of: next) {
            throw .usage("ferry key set: key set \(version) would be refused by mirrors: \(why)",
                         hint: previous == nil ? "sign it with --sign for each key it lists, up to --threshold" : "sign it with --sign for enough keys of key set \(previous!.version) and of the new one")
        }
        try FileSystem.makeDirectories(directory)
        let path = directory + "/\(version).json"
        try FileSystem.writeAtomically(path, bytes: bytes, replacing: false)
        return (path, next, previous)
    }

    /// Refuses a manifest `signers` would sign when mirrors that took `set` would refuse it.
    public static func check(signers: [SigningKey], against set: KeySet, what: String) throws(FerryError) {
        let signing = signers.map(\.publicKey).filter(set.keys.contains)
        guard signing.count < set.threshold else { return }
        throw .usage("\(what) would be refused by mirrors that took key set \(set.version): it needs signatures by \(set.threshold) of its keys, and \(Plural.count(signing.count, "signing key")) \(signing.count == 1 ? "is" : "are") among them",
                     hint: "sign with keys key set \(set.version) lists (\(set.keys.map(\.description).joined(separator: ", ")))")
    }
}

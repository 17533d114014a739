import Glibc
import Synchronization
import FerryCore

/// The metadata and index objects the remote sent other bytes for than their names say: each is
/// remembered, so that a damaged object costs one request, not one on every poll. It is not
/// fetched again while the root that named it is the one being read and `verify-interval` has not
/// passed since (a new root may name it again after a publisher repaired it: it is then tried).
/// Kept in `<state>/manifests/<session>.manifest.bad-objects`, a line `<object> <root> <Unix
/// seconds>` each; a dry run keeps it in memory. Asked from the fetching lanes, several at once.
final class BadObjects: Sendable {
    struct Entry: Sendable {
        let root: SHA256Digest
        let seconds: Int64
    }

    private let path: String
    private let keeps: Bool
    private let clock: any Clock
    private let interval: Double
    private let state: Mutex<(entries: [SHA256Digest: Entry], root: SHA256Digest?, new: [SHA256Digest])>

    init(path: String, keeps: Bool, clock: any Clock, interval: Double) {
        self.path = path
        self.keeps = keeps
        self.clock = clock
        self.interval = interval
        var entries: [SHA256Digest: Entry] = [:]
        if let bytes = try? FileSystem.readFile(path, limit: 1 << 20) {
            for line in bytes.split(separator: 0x0A) {
                let fields = line.split(separator: 0x20).map { String(decoding: $0, as: UTF8.self) }
                guard fields.count == 3, let object = SHA256Digest(hex: fields[0]),
                    let root = SHA256Digest(hex: fields[1]),
                      let seconds = Int64(fields[2]) else { continue }
                entries[object] = Entry(root: root, seconds: seconds)
            }
        }
        state = Mutex((entries, nil, []))
    }

    /// The root manifest being read (the hash of its bytes): objects remembered under another
    /// root are tried again.
    func reading(root: SHA256Digest) { state.withLock { $0.root = root } }

    /// When `object` was found bad under the root being read, if that still stands.
    func knownBad(_ object: SHA256Digest) -> Timestamp? {
        let now = clock.now().seconds
        return state.withLock { s -> Timestamp? in
            guard let entry = s.entries[object], entry.root == s.root, Double(now - entry.seconds) < interval else {
                return nil
            }
            return Timestamp(seconds: entry.seconds)
        }
    }

    /// `object` came with other bytes than its name says, under the root being read.
    func remember(_ object: SHA256Digest) {
        let now = clock.now().seconds
        let text: String? = state.withLock { s in
            guard let root = s.root else { return nil }
            if s.entries[object]?.root != root { s.new.append(object) }
            s.entries[object] = Entry(root: root, seconds: now)
            return s.entries.sorted { $0.key.hex < $1.key.hex }.map { "\($0.key.hex) \($0.value.root.hex) "
                                                                      + "\($0.value.seconds)\n" }.joined()
        }
        guard keeps, let text else { return }
        if let slash = path.lastIndex(of: "/") { try? FileSystem.makePrivateDirectory(String(path[..<slash])) }
        try? FileSystem.writeAtomically(path, bytes: Array(text.utf8), mode: 0o600, synced: false)
    }

    /// The objects found bad since the last call (each to be said once).
    func takeNew() -> [SHA256Digest] { state.withLock { s in defer { s.new = [] }; return s.new } }
}

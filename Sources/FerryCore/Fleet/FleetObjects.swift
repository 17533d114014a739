/// The report objects a reader took at its last read, each with the stamp the listing gave it
/// (S3: ETag and size; file://: size, modification time and inode). Listed again with the same
/// stamp, an object is not fetched again: its kept bytes are parsed, checked and judged as a
/// fetched object is, so a read of a location where few machines reported since is mostly a
/// listing. Kept beside the ledger as text, a line per object: `<name> <stamp> <object in base64>`.
/// Only objects taken are kept; a line that does not parse is dropped (its object is fetched).
public struct FleetObjects: Sendable, Equatable {
    public struct Kept: Sendable, Equatable {
        public var stamp: String
        public var bytes: [UInt8]
    }

    public private(set) var objects: [String: Kept] = [:]

    public init() {}

    public init(text: String) {
        var read: [String: Kept] = [:]
        WordLines.each(text, maxSplits: 3) { w in
            guard w.count == 3, let bytes = Base64.decode(w[2]), bytes.count <= StatusReport.maximumSize else { return }
            read[w[0]] = Kept(stamp: w[1], bytes: bytes)
        }
        objects = read
    }

    public var text: String {
        objects.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value.stamp) \(Base64.encode($0.value.bytes))\n" }.joined()
    }

    /// The bytes kept for `name` if its listing's `stamp` is the one they were kept with.
    public func bytes(_ name: String, stamp: String?) -> [UInt8]? {
        guard let stamp, let kept = objects[name], kept.stamp == stamp else { return nil }
        return kept.bytes
    }

    /// Keeps a taken object read under `stamp`; nothing when the listing gave none, or when the
    /// name or stamp could not be written as one word of a line.
    public mutating func keep(_ name: String, stamp: String?, bytes: [UInt8]) {
        guard let stamp, FleetObjects.isWord(name), FleetObjects.isWord(stamp) else { return }
        objects[name] = Kept(stamp: stamp, bytes: bytes)
    }

    static func isWord(_ s: String) -> Bool { !s.isEmpty && s.utf8.allSatisfy { $0 > 0x20 && $0 != 0x7F } }
}

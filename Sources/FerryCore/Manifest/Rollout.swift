/// A phased rollout: the publisher says what share of the fleet takes a release (`manifest build
/// --rollout P%`, a push's `rollout = P%`), inside the signed root, which then also names the
/// release the other machines stay on, or move to (`previous`: the last one published to every
/// machine, by version and the hash of its tree, whose objects the publisher keeps while a root
/// names it). Each machine decides alone, by a stable hash of its identity (`[agent] machine-id`)
/// and the release's tree (`takes`): raising the share of one release only adds machines, and
/// each release picks its own first machines.
public struct Rollout: Sendable, Equatable {
    /// The share of machines that take the release, in percent: 1 to 99 (100 is no rollout).
    public let percent: Int
    public let previous: Previous

    /// The release before, as the root names it.
    public struct Previous: Sendable, Equatable {
        public let version: Int64
        public let layout: RemoteLayout
        public let tree: ManifestTree.Reference

        public init(version: Int64, layout: RemoteLayout, tree: ManifestTree.Reference) {
            self.version = version
            self.layout = layout
            self.tree = tree
        }
    }

    public init(percent: Int, previous: Previous) {
        self.percent = percent
        self.previous = previous
    }

    public static let percents = 1...99

    /// Where machine `machineID` falls for release `tree`: 0 to 9,999, from the first 8 bytes of a
    /// SHA-256 (`hash`) of both.
    public static func bucket(machineID: String, release tree: SHA256Digest, hash: ([UInt8]) -> SHA256Digest) -> Int {
        let digest = hash(Array("ferry-rollout\n\(machineID)\n\(tree.hex)".utf8))
        let first = digest.bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Int(first % 10_000)
    }

    /// Whether machine `machineID` takes release `tree` at this share.
    public func takes(machineID: String, release tree: SHA256Digest, hash: ([UInt8]) -> SHA256Digest) -> Bool {
        Rollout.bucket(machineID: machineID, release: tree, hash: hash) < percent * 100
    }

    /// What a publisher names as the release before, replacing `published` (nil: nothing was
    /// published): the published release when every machine took it, else the one its rollout
    /// kept the others on.
    public static func previous(replacing published: Manifest?) -> Previous? {
        guard let published, let version = published.version else { return nil }
        if let rollout = published.rollout { return rollout.previous }
        guard let tree = published.tree else { return nil }
        return Previous(version: version, layout: published.layout, tree: tree)
    }

    /// `"rollout": P, "previous": {...}` as the root writes them.
    func rendered() -> String {
        "\n  \"rollout\": \(percent),\n  \"previous\": {\"version\": \(previous.version), \"layout\": \"\(previous.layout.rawValue)\", "
            + "\"tree\": {\"sha256\": \"\(previous.tree.sha256)\", \"level\": \(previous.tree.level), \"files\": \(previous.tree.files)}},"
    }
}

/// This machine's place in a phased rollout, as the state keeps it for status:
/// `<version> <percent> in|out <version taken>`.
public struct RolloutStanding: Sendable, Equatable {
    public let version: Int64
    public let percent: Int
    public let inside: Bool
    public let taking: Int64

    public var text: String { "\(version) \(percent) \(inside ? "in" : "out") \(taking)" }

    public init(version: Int64, percent: Int, inside: Bool, taking: Int64) {
        self.version = version
        self.percent = percent
        self.inside = inside
        self.taking = taking
    }

    public init?(text: String) {
        let w = text.split(separator: " ").map(String.init)
        guard w.count == 4, let version = Int64(w[0]), let percent = Int(w[1]), w[2] == "in" || w[2] == "out",
              let taking = Int64(w[3]) else { return nil }
        self.init(version: version, percent: percent, inside: w[2] == "in", taking: taking)
    }
}

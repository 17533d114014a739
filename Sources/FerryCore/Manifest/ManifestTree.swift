/// Format 2 of a manifest (`ferry-manifest/2`, design.md "Format 2"): the root (`manifest.json`)
/// names by SHA-256 one object of a tree of immutable metadata objects kept under `.ferry/meta/`
/// beside it. Leaves hold the entries in path order; a node at level k holds the hashes of its
/// children at level k − 1. Where one object ends is decided by the paths it holds (a hash of the
/// last path, and a size cap), not by positions, so one changed file rewrites one leaf and the
/// nodes above it, and an added or removed file moves boundaries only near it. Pure: the caller
/// hashes (`hash`) and fetches.
public enum ManifestTree {
    public static let formatName = "ferry-manifest/2"
    /// Where the objects live, relative to the directory that holds the manifest.
    public static let objectDirectory = ".ferry/meta"

    /// The objects' directory for the manifest at `manifest` (a URL, a path relative to a
    /// remote, or a local path): `.ferry/meta` in the directory that holds it.
    public static func objectDirectory(beside manifest: String) -> String { beside(manifest, objectDirectory) }

    /// `relative` in the directory that holds the manifest at `manifest` (a URL, a path relative
    /// to a remote, or a local path).
    public static func beside(_ manifest: String, _ relative: String) -> String {
        (manifest.lastIndex(of: "/").map { String(manifest[...$0]) } ?? "") + relative
    }
    /// No object ferry writes comes near this (a leaf stops growing at 16 KiB of paths).
    public static let maximumObjectSize = 1 << 20
    public static let maximumLevel = 24

    /// What the root names: the top object, its level (0: a leaf) and the files under it.
    public struct Reference: Sendable, Equatable {
        public let sha256: SHA256Digest
        public let level: Int
        public let files: Int

        public init(sha256: SHA256Digest, level: Int, files: Int) {
            self.sha256 = sha256
            self.level = level
            self.files = files
        }
    }

    /// A tree as `build` makes it: its root reference and every object, each once.
    public struct Built: Sendable {
        public let root: Reference
        /// Every object, each once: the tree's, then its bundles and their list.
        public internal(set) var objects: [(sha256: SHA256Digest, bytes: [UInt8])]
        /// The list of the tree's bundles (`ManifestTree.bundled`), which the root names; nil
        /// for a tree of one object.
        public internal(set) var bundles: ObjectBundle.Named? = nil
    }

    // MARK: where objects end

    /// A leaf ends after an entry whose path's key is 0 mod 4 once it holds 6 entries, and at 24
    /// entries or 16 KiB; a node ends likewise after a child whose last path's key (at the
    /// node's level) is 0 mod 8 once it holds 8, and at 32 children. The figures come from the
    /// bar of issue 20: one change costs a 1,000,000-file mirror about 3 KB, 100 scattered changes
    /// a 100,000-file one about 150 KB, a cold mirror about 0.4 of the flat manifest.
    struct Boundary {
        let minimum: Int, odds: UInt64, maximum: Int, maximumBytes: Int
        func ends(count: Int, bytes: Int, key: UInt64) -> Bool {
            count >= maximum || bytes >= maximumBytes || (count >= minimum && key % odds == 0)
        }
    }
    static let leafBoundary = Boundary(minimum: 6, odds: 4, maximum: 24, maximumBytes: 16 << 10)
    static let nodeBoundary = Boundary(minimum: 8, odds: 8, maximum: 32, maximumBytes: 64 << 10)

    /// FNV-1a over the path's bytes and the level, mixed (SplitMix64's finalizer): the same on
    /// every machine and every run, unlike Swift's seeded `Hasher`.
    static func key(_ path: RelativePath, level: Int) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        path.withBytes { for b in $0 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 } }
        h ^= UInt64(level) &* 0x9e37_79b9_7f4a_7c15
        h = (h ^ (h >> 30)) &* 0xbf58_476d_1ce4_e5b9
        h = (h ^ (h >> 27)) &* 0x94d0_49bb_1331_11eb
        return h ^ (h >> 31)
    }

    // MARK: building

    /// The tree of `entries` (in path order, each path once, as `Manifest.entries` are).
    public static func build(_ entries: [ManifestEntry], hash: (UnsafeRawBufferPointer) -> SHA256Digest) -> Built {
        var objects: [(sha256: SHA256Digest, bytes: [UInt8])] = []
        func seal(_ bytes: [UInt8]) -> SHA256Digest {
            let digest = bytes.withUnsafeBytes { hash($0) }
            objects.append((digest, bytes))
            return digest
        }
        var level: [Child] = []
        var leaf = ObjectWriter(magic: leafMagic)
        var previous: RelativePath?
        for e in entries {
            leaf.addEntry(e, after: previous)
            previous = e.path
            if leafBoundary.ends(count: leaf.count, bytes: leaf.body.count, key: key(e.path, level: 0)) {
                level.append(Child(sha256: seal(leaf.finish()), files: leaf.count, last: e.path))
                leaf = ObjectWriter(magic: leafMagic)
                previous = nil
            }
        }
        if leaf.count > 0 || level.isEmpty {
            level.append(Child(sha256: seal(leaf.finish()), files: leaf.count, last: previous ?? RelativePath(trusted: "")))
        }
        var height = 0
        while level.count > 1 {
            height += 1
            var next: [Child] = []
            var node = ObjectWriter(magic: nodeMagic, level: height)
            var files = 0
            for child in level {
                node.addChild(child)
                files += child.files
                if nodeBoundary.ends(count: node.count, bytes: node.body.count, key: key(child.last, level: height)) {
                    next.append(Child(sha256: seal(node.finish()), files: files, last: child.last))
                    node = ObjectWriter(magic: nodeMagic, level: height)
                    files = 0
                }
            }
            if node.count > 0 { next.append(Child(sha256: seal(node.finish()), files: files, last: level[level.count - 1].last)) }
            level = next
        }
        return Built(root: Reference(sha256: level[0].sha256, level: height, files: entries.count), objects: objects)
            .bundled(hash: hash)
    }

    struct Child {
        let sha256: SHA256Digest
        let files: Int
        let last: RelativePath
    }

    // Objects start with 4 bytes saying what they are: "fm2L" (a leaf), "fm2N" (a node, then one
    // byte: its level); then the count of records (LEB128), then the records.
    static let leafMagic: [UInt8] = Array("fm2L".utf8)
    static let nodeMagic: [UInt8] = Array("fm2N".utf8)

    struct ObjectWriter {
        let header: [UInt8]
        var body: [UInt8] = []
        var count = 0

        init(magic: [UInt8], level: Int? = nil) {
            header = magic + (level.map { [UInt8($0)] } ?? [])
            body.reserveCapacity(2048)
        }

        /// A leaf record: the length of the path it shares with the entry before it in the leaf,
        /// the rest of its path (length, bytes), the SHA-256 (32 bytes), the size, a flags byte
        /// (1: an mtime follows, 2: a mode follows, 4: a content index follows, 8: with it, the
        /// file is stored as its pieces), the mtime (seconds zigzag-encoded, nanoseconds), the
        /// mode, the index's top object (32 bytes) and level.
        mutating func addEntry(_ e: ManifestEntry, after previous: RelativePath?) {
            count += 1
            e.path.withBytes { path in
                var shared = 0
                previous?.withBytes { p in
                    while shared < p.count && shared < path.count && p[shared] == path[shared] { shared += 1 }
                }
                putVarint(UInt64(shared))
                putVarint(UInt64(path.count - shared))
                body.append(contentsOf: path[shared...])
            }
            body.append(contentsOf: e.sha256.bytes)
            putVarint(UInt64(e.size ?? 0))
            body.append((e.mtime == nil ? 0 : 1) | (e.mode == nil ? 0 : 2) | (e.index == nil ? 0 : 4) | (e.index?.storedAsPieces == true ? 8 : 0))
            if let m = e.mtime {
                putVarint(UInt64(bitPattern: (m.seconds << 1) ^ (m.seconds >> 63)))
                putVarint(UInt64(m.nanoseconds))
            }
            if let mode = e.mode { putVarint(UInt64(mode)) }
            if let index = e.index {
                body.append(contentsOf: index.sha256.bytes)
                putVarint(UInt64(index.level))
            }
        }

        /// A node record: the child's SHA-256 (32 bytes), the files under it.
        mutating func addChild(_ c: Child) {
            count += 1
            body.append(contentsOf: c.sha256.bytes)
            putVarint(UInt64(c.files))
        }

        mutating func putVarint(_ value: UInt64) { ObjectWriter.varint(value, into: &body) }

        static func varint(_ value: UInt64, into out: inout [UInt8]) {
            var v = value
            while v >= 0x80 {
                out.append(UInt8(v & 0x7F) | 0x80)
                v >>= 7
            }
            out.append(UInt8(v))
        }

        func finish() -> [UInt8] {
            var out = header
            out.reserveCapacity(header.count + 5 + body.count)
            ObjectWriter.varint(UInt64(count), into: &out)
            out += body
            return out
        }
    }

    // MARK: reading

    /// Why an object is refused, in words for the error that names it.
    struct Problem: Error { let text: String }

    struct ObjectReader {
        let bytes: UnsafeBufferPointer<UInt8>
        var i = 0

        init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        var atEnd: Bool { i == bytes.count }

        mutating func byte() throws(Problem) -> UInt8 {
            guard i < bytes.count else { throw Problem(text: "it ends early") }
            defer { i += 1 }
            return bytes[i]
        }

        mutating func take(_ n: Int) throws(Problem) -> UnsafeBufferPointer<UInt8> {
            guard n >= 0, n <= bytes.count - i else { throw Problem(text: "it ends early") }
            defer { i += n }
            return UnsafeBufferPointer(rebasing: bytes[i..<(i + n)])
        }

        /// `what` is built only for an error (it names the entry, and a leaf reads 1,000,000 of them).
        mutating func varint(max: UInt64 = UInt64.max, _ what: @autoclosure () -> String) throws(Problem) -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let b = try byte()
                if shift == 63 && b > 1 { throw Problem(text: "\(what()) does not fit in 64 bits") }
                value |= UInt64(b & 0x7F) << shift
                if b & 0x80 == 0 { break }
                shift += 7
                if shift > 63 { throw Problem(text: "\(what()) does not fit in 64 bits") }
            }
            guard value <= max else { throw Problem(text: "\(what()) is \(value), more than \(max)") }
            return value
        }

        mutating func digest() throws(Problem) -> SHA256Digest {
            SHA256Digest(bytes: UnsafeRawBufferPointer(try take(32)))
        }

        mutating func expect(_ magic: [UInt8], _ what: String) throws(Problem) {
            guard bytes.count - i >= magic.count, Array(bytes[i..<(i + magic.count)]) == magic else {
                throw Problem(text: "it is not \(what)")
            }
            i += magic.count
        }
    }

    /// The children of a node at `level` that must hold `files` files.
    static func readNode(_ bytes: UnsafeBufferPointer<UInt8>, level: Int, files: Int) throws(Problem) -> [(SHA256Digest, Int)] {
        var r = ObjectReader(bytes)
        try r.expect(nodeMagic, "a node (level \(level))")
        let stated = Int(try r.byte())
        guard stated == level else { throw Problem(text: "it says it is at level \(stated) where level \(level) belongs") }
        let count = Int(try r.varint(max: UInt64(bytes.count / 33), "its count of children"))
        guard count > 0 else { throw Problem(text: "it is a node without children") }
        var children: [(SHA256Digest, Int)] = []
        children.reserveCapacity(count)
        var sum = 0
        for _ in 0..<count {
            let digest = try r.digest()
            let n = Int(try r.varint(max: UInt64(files), "a child's count of files"))
            guard n > 0 else { throw Problem(text: "it names a child without files") }
            sum += n
            guard sum <= files else { throw Problem(text: "its children hold more files than the \(files) its parent says") }
            children.append((digest, n))
        }
        guard sum == files else { throw Problem(text: "its children hold \(sum) files, not the \(files) its parent says") }
        guard r.atEnd else { throw Problem(text: "it has bytes after its last child") }
        return children
    }

    /// The entries of a leaf that must hold `files` entries, each after `previous` in path order.
    static func readLeaf(_ bytes: UnsafeBufferPointer<UInt8>, files: Int, previous: inout RelativePath?, totalSize: inout Int64,
                        into entries: inout [ManifestEntry]) throws(Problem) {
        var r = ObjectReader(bytes)
        try r.expect(leafMagic, "a leaf")
        let count = Int(try r.varint(max: UInt64(bytes.count), "its count of entries"))
        guard count == files else { throw Problem(text: "it holds \(count) entries, not the \(files) its parent says") }
        var path: [UInt8] = []
        path.reserveCapacity(256)
        for n in 0..<count {
            let shared = Int(try r.varint(max: UInt64(n == 0 ? 0 : path.count), "entry \(n)'s shared length"))
            let rest = Int(try r.varint(max: 4096, "entry \(n)'s path length"))
            path.removeSubrange(shared...)
            path.append(contentsOf: try r.take(rest))
            guard let text = String(validating: path, as: UTF8.self) else { throw Problem(text: "entry \(n)'s path is not UTF-8") }
            let checked: RelativePath
            do { checked = try RelativePath(validating: text) } catch {
                throw Problem(text: "entry \(n)'s path \(Printable.quoted(text)) is refused: \(error)")
            }
            if let previous, previous.compare(checked) >= 0 {
                throw Problem(text: "\(Printable.quoted(text)) does not come after \(Printable.quoted(previous.string)): entries must be in path order, each once")
            }
            previous = checked
            let digest = try r.digest()
            let size = Int64(try r.varint(max: UInt64(Manifest.maximumFileSize), "the size of \(Printable.quoted(text))"))
            totalSize += size
            guard totalSize <= Manifest.maximumTotalSize else { throw Problem(text: "the sizes of its files add up to more than 4 EiB") }
            let flags = try r.byte()
            guard flags & ~15 == 0, flags & 12 != 8 else { throw Problem(text: "entry \(n) has unknown flags \(flags)") }
            var mtime: Timestamp?
            if flags & 1 != 0 {
                let z = try r.varint("an mtime")
                let seconds = Int64(bitPattern: z >> 1) ^ -Int64(bitPattern: z & 1)
                let nanoseconds = Int32(try r.varint(max: 999_999_999, "an mtime's nanoseconds"))
                guard Timestamp.representable(seconds: seconds) else { throw Problem(text: "the mtime of \(Printable.quoted(text)) is outside the years 0000–9999") }
                mtime = Timestamp(seconds: seconds, nanoseconds: nanoseconds)
            }
            var mode: UInt32?
            if flags & 2 != 0 { mode = UInt32(try r.varint(max: 0o777, "the mode of \(Printable.quoted(text))")) }
            var index: ContentIndex.Reference?
            if flags & 4 != 0 {
                let top = try r.digest()
                let level = Int(try r.varint(max: UInt64(ContentIndex.maximumLevel), "the index level of \(Printable.quoted(text))"))
                guard size > 0 else { throw Problem(text: "the empty file \(Printable.quoted(text)) names a content index") }
                index = ContentIndex.Reference(sha256: top, level: level, storedAsPieces: flags & 8 != 0)
            }
            entries.append(ManifestEntry(path: checked, size: size, sha256: digest, mtime: mtime, mode: mode, index: index))
        }
        guard r.atEnd else { throw Problem(text: "it has bytes after its last entry") }
    }

    /// An object no root names any more goes once `grace` seconds passed since the last root that
    /// named it was replaced (readers that took that root a moment ago still find it).
    public static func expired(since: Timestamp, now: Timestamp, grace: Double) -> Bool {
        Double(now.seconds - since.seconds) >= grace
    }

    /// The entries of the tree `root` names, in path order, and the hash of every object in it.
    /// `load` gives the bytes of a batch of objects (at most 1,024), each already checked against
    /// its hash; `maximumBytes` bounds what the whole tree may take. Every object is checked as
    /// it is read: its kind and level, its counts against what its parent says, paths in order
    /// across the whole tree.
    public static func resolve(_ root: Reference, source: String, maximumBytes: Int64,
                               load: ([SHA256Digest]) throws(FerryError) -> [[UInt8]]) throws(FerryError) -> (entries: [ManifestEntry], objects: [SHA256Digest]) {
        func refused(_ digest: SHA256Digest, _ problem: Problem) -> FerryError {
            .manifest("metadata object \(digest.hex) of manifest \(source) is refused: \(problem.text); nothing was changed",
                      hint: "the publisher's tree is damaged or was tampered with: publish it again (ferry manifest build, or a push)")
        }
        // No entry takes fewer than 36 bytes of a leaf, so the byte bound bounds the files.
        guard root.level <= maximumLevel, root.files >= 0, Int64(root.files) <= maximumBytes / 36 else {
            throw .manifest("manifest \(source) names a tree of level \(root.level) holding \(root.files) files: more than ferry reads (level \(maximumLevel), max-manifest-size); refused, nothing was changed")
        }
        var entries: [ManifestEntry] = []
        entries.reserveCapacity(min(root.files, 1 << 22))
        var objects: [SHA256Digest] = []
        var loaded: Int64 = 0
        var level = root.level
        var current: [(SHA256Digest, Int)] = [(root.sha256, root.files)]
        var previous: RelativePath?
        var totalSize: Int64 = 0
        // Every child holds files and every path is listed once, so a tree that names an object
        // twice is refused where the second name is read, before anything is fetched for it:
        // each object is fetched once (a node naming one leaf 1,000 times is a bomb, not a tree).
        var named: Set<SHA256Digest> = [root.sha256]
        while true {
            var next: [(SHA256Digest, Int)] = []
            var start = 0
            while start < current.count {
                // What a batch may bring stays within what is left of `maximumBytes` (an object
                // takes up to 1 MiB), so the objects read stay within twice the bound.
                let room = Int(max(0, maximumBytes - loaded) / Int64(maximumObjectSize))
                let batch = Array(current[start..<min(start + min(1024, max(1, room)), current.count)])
                start += batch.count
                let bodies = try load(batch.map(\.0))
                for ((digest, files), bytes) in zip(batch, bodies) {
                    objects.append(digest)
                    loaded += Int64(bytes.count)
                    if loaded > maximumBytes {
                        throw .manifest("the metadata objects of manifest \(source) add up to more than max-manifest-size = \(Units.formatBytes(maximumBytes)); refused, nothing was changed",
                                        hint: "if a tree this large is intended, raise max-manifest-size for the session")
                    }
                    do throws(Problem) {
                        try bytes.withUnsafeBufferPointer { (b) throws(Problem) in
                            if level == 0 {
                                try readLeaf(b, files: files, previous: &previous, totalSize: &totalSize, into: &entries)
                            } else {
                                for child in try readNode(b, level: level, files: files) {
                                    guard named.insert(child.0).inserted else {
                                        throw Problem(text: "it names object \(child.0.hex), which the tree names already: a tree names each object once")
                                    }
                                    next.append(child)
                                }
                            }
                        }
                    } catch {
                        throw refused(digest, error)
                    }
                }
            }
            if level == 0 { break }
            level -= 1
            current = next
        }
        return (entries, objects)
    }
}

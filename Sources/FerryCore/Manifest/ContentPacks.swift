/// Small files in few requests (design.md "Packs"): with `remote-layout = objects`, each small
/// content is its own object, so a cold mirror of 10,000 small files is 10,000 requests. A push
/// therefore also writes the small contents of what it publishes a second time, one after another
/// in **packs** (the bundle format, `ObjectBundle`; about 2 MiB, at most 4 MiB), kept beside the
/// metadata objects, and the root names their list (`"packs"`). A pull that needs enough of a pack
/// fetches it whole and takes from it each member a file needs; the rest come one by one, as
/// before. Nothing in a pack is trusted for being there: each member is checked against its
/// file's hash, so a pack that lies costs only the requests it was meant to save.
///
/// Which contents a pack holds follows from the manifest alone: its distinct contents of 1 byte to
/// `largest` bytes (no content index), in the order of the first file of each (path order, so the
/// files of one directory, which tend to change together, share packs), cut after a member whose
/// name says so (`cutsAfter`) and before one that would take a pack past `maximumSize`. So the
/// list (`fdP1`: `largest`, the count of packs, then each pack's name and count of members) names
/// no member: a reader finds them from the manifest it has, and a publisher knows which packs of
/// the last version it can name again without reading a file. A pack the publisher could not make
/// (a file that changed while it read it) is named by 32 zero bytes: its members come one by one.
public enum ContentPacks {
    static let listMagic: [UInt8] = Array("fdP1".utf8)
    /// The largest content a pack holds, by default: above it a request costs little next to its bytes.
    public static let defaultLargest = 64 << 10
    /// The most `largest` a list may say.
    public static let largestAllowed = 256 << 10
    /// What a pack holds on average (below the bound, which cuts about one pack in seven).
    static let target = 2 << 20
    /// No pack is larger: fetched whole, a few are held in memory at once.
    public static let maximumSize = 4 << 20

    /// A content a pack may hold: its name and size.
    public struct Member: Sendable, Equatable {
        public let sha256: SHA256Digest
        public let size: Int
    }

    /// A pack as a list names it: its object (nil: the publisher could not make it), its members
    /// (a range of `members(of:)`), and its size (what its members make).
    public struct Pack: Sendable, Equatable {
        public let name: SHA256Digest?
        public let members: Range<Int>
        public let size: Int
    }

    /// The contents packs hold for `entries` (in path order), in the order packs hold them.
    public static func members(of entries: [ManifestEntry], largest: Int = defaultLargest) -> [Member] {
        var seen = Set<SHA256Digest>()
        var out: [Member] = []
        for e in entries {
            guard e.index == nil, let size = e.size, size > 0, size <= Int64(largest), seen.insert(e.sha256).inserted else { continue }
            out.append(Member(sha256: e.sha256, size: Int(size)))
        }
        return out
    }

    /// Where `members` are cut into packs: after a member whose name says so (`cutsAfter`), and
    /// before one that would take a pack past `maximumSize`.
    public static func groups(_ members: [Member]) -> [Range<Int>] {
        var out: [Range<Int>] = []
        var start = 0
        var count = 0
        for (i, m) in members.enumerated() {
            if i > start && estimate(members: i - start + 1, bytes: count + m.size) > maximumSize {
                out.append(start..<i)
                (start, count) = (i, 0)
            }
            count += m.size
            if cutsAfter(m) {
                out.append(start..<(i + 1))
                (start, count) = (i + 1, 0)
            }
        }
        if start < members.count { out.append(start..<members.count) }
        return out
    }

    /// Whether a pack ends after `member`: with a chance of its size in `target` bytes, read from
    /// its name's bytes 8 to 11 (bytes 0 to 7 place it in a cache's fan-out). It depends on the
    /// member alone, so where packs end does not move when a member before changes: a change
    /// rewrites the pack that holds it, and the one after only where the bound cut it.
    static func cutsAfter(_ member: Member) -> Bool {
        let h = (UInt64(member.sha256.byte(8)) << 24) | (UInt64(member.sha256.byte(9)) << 16)
            | (UInt64(member.sha256.byte(10)) << 8) | UInt64(member.sha256.byte(11))
        return h < (UInt64(member.size) << 32) / UInt64(target)
    }

    /// No less than the size of a pack of `members` holding `bytes`: its magic, its count, each
    /// member's length (up to 256 KiB: at most 3 bytes each, and the count at most 3 for 1 MiB).
    static func estimate(members: Int, bytes: Int) -> Int { ObjectBundle.magic.count + 3 + members * 3 + bytes }

    /// The exact size of a pack of `sizes`, and where each member's bytes start in it.
    public static func layout(_ sizes: [Int]) -> (size: Int, offsets: [Int]) {
        var at = ObjectBundle.magic.count + varintLength(UInt64(sizes.count))
        var offsets: [Int] = []
        offsets.reserveCapacity(sizes.count)
        for s in sizes {
            at += varintLength(UInt64(s))
            offsets.append(at)
            at += s
        }
        return (at, offsets)
    }

    static func varintLength(_ v: UInt64) -> Int {
        var n = 1
        var v = v >> 7
        while v > 0 { n += 1; v >>= 7 }
        return n
    }

    /// A pack of `members`' bytes, in order (a bundle).
    public static func pack(_ members: [[UInt8]]) -> [UInt8] { ObjectBundle.encode(members) }

    /// The list of `packs` (each its name, or nil, and its count of members).
    public static func list(largest: Int = defaultLargest, _ packs: [(name: SHA256Digest?, count: Int)]) -> [UInt8] {
        var bytes = listMagic
        ContentIndex.varint(UInt64(largest), into: &bytes)
        ContentIndex.varint(UInt64(packs.count), into: &bytes)
        let none = [UInt8](repeating: 0, count: 32)
        for p in packs {
            bytes += p.name?.bytes ?? none
            ContentIndex.varint(UInt64(p.count), into: &bytes)
        }
        return bytes
    }

    /// The packs a list names for `entries`, with the members packs hold; nil when the bytes are
    /// not a list, or not one of these entries (its counts do not add up to their contents, a pack
    /// would be larger than a bundle may be).
    public static func read(list bytes: [UInt8], for entries: [ManifestEntry]) -> (packs: [Pack], members: [Member])? {
        bytes.withUnsafeBufferPointer { b -> ([Pack], [Member])? in
            var r = ManifestTree.ObjectReader(b)
            guard (try? r.expect(listMagic, "")) != nil,
                  let largest = try? r.varint(max: UInt64(largestAllowed), ""), largest > 0,
                  let count = try? r.varint(max: UInt64(b.count / 33), "") else { return nil }
            let members = ContentPacks.members(of: entries, largest: Int(largest))
            var packs: [Pack] = []
            var at = 0
            for _ in 0..<count {
                guard let digest = try? r.digest(), let n = try? r.varint(max: UInt64(members.count - at), ""), n > 0 else {
                    return nil
                }
                let range = at..<(at + Int(n))
                let size = layout(members[range].map(\.size)).size
                guard size <= maximumSize else { return nil }
                let name: SHA256Digest? = digest.bytes.allSatisfy({ $0 == 0 }) ? nil : digest
                packs.append(Pack(name: name, members: range, size: size))
                at += Int(n)
            }
            return r.atEnd && at == members.count ? (packs, members) : nil
        }
    }
}

import Testing
@testable import FerryCore

/// The format-2 tree on its own: built and read back, what a change rewrites, and objects a
/// hostile publisher could write, each refused with the reason.
struct ManifestTreeTests {
    /// Not SHA-256 (FerryCore has none): a stand-in that is just as deterministic, and distinct for these inputs.
    static func digest(_ bytes: UnsafeRawBufferPointer) -> SHA256Digest {
        var out = [UInt8](repeating: 0, count: 32)
        for lane in 0..<4 {
            var h: UInt64 = 0xcbf2_9ce4_8422_2325 &+ UInt64(lane) &* 0x9e37_79b9_7f4a_7c15
            for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
            for k in 0..<8 { out[lane * 8 + k] = UInt8(truncatingIfNeeded: h >> (8 * UInt64(k))) }
        }
        return out.withUnsafeBytes { SHA256Digest(bytes: $0) }
    }

    static func entries(_ count: Int, changed: Set<Int> = []) -> [ManifestEntry] {
        (0..<count).map { i in
            let path = RelativePath(trusted: "dir\(i % 37)/sub/file-\(String(i, radix: 16)).bin")
            let content = changed.contains(i) ? "changed \(i)" : "file \(i)"
            return ManifestEntry(path: path, size: Int64(i * 10), sha256: Array(content.utf8).withUnsafeBytes { digest($0) },
                                 mtime: Timestamp(seconds: 1_700_000_000 + Int64(i), nanoseconds: Int32(i % 1000)), mode: i % 5 == 0 ? nil : 0o644)
        }.sorted { $0.path < $1.path }
    }

    static func resolve(_ built: ManifestTree.Built) throws(FerryError) -> [ManifestEntry] {
        let store = Dictionary(built.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
        return try ManifestTree.resolve(built.root, source: "test", maximumBytes: 1 << 30) { batch in batch.map { store[$0] ?? [] } }.entries
    }

    /// The tree's own objects (not its bundles or their list).
    static func tree(_ built: ManifestTree.Built) -> [(sha256: SHA256Digest, bytes: [UInt8])] {
        built.objects.filter {
            !$0.bytes.starts(with: ObjectBundle.magic) && !$0.bytes.starts(with: ManifestTree.bundleListMagic)
        }
    }

    @Test(arguments: [0, 1, 7, 300, 20_000])
    func aTreeReadsBackAsTheEntriesItWasBuiltFrom(count: Int) throws {
        let entries = Self.entries(count)
        let built = ManifestTree.build(entries, hash: Self.digest)
        #expect(built.root.files == count)
        #expect(try Self.resolve(built) == entries)
        #expect(Set(built.objects.map(\.sha256)).count == built.objects.count, "each object once")
        #expect(Self.tree(built).allSatisfy { $0.bytes.count < 4096 }, "small objects")
        #expect((built.bundles == nil) == (built.objects.count == 1), "bundles for a tree of more than one object")
        #expect(ManifestTree.build(entries, hash: Self.digest).objects.map(\.sha256) == built.objects.map(\.sha256), "the same tree every time")
    }

    @Test func aChangeRewritesOneObjectPerLevelAndAnInsertOnlyItsNeighbourhood() throws {
        let old = ManifestTree.build(Self.entries(20_000), hash: Self.digest)
        let names = Set(old.objects.map(\.sha256))
        let changed = ManifestTree.build(Self.entries(20_000, changed: [12_345]), hash: Self.digest)
        #expect(Self.tree(changed).filter { !names.contains($0.sha256) }.count == changed.root.level + 1)
        // The bundles that hold the changed leaf and nodes, and their list: not all of them.
        let bundles = changed.objects.filter { !names.contains($0.sha256) }.count - (changed.root.level + 1)
        let all = changed.objects.count - Self.tree(changed).count
        #expect(bundles >= 2 && bundles <= changed.root.level + 2 && bundles < all, "\(bundles) of \(all)")
        var grown = Self.entries(20_000)
        grown.append(ManifestEntry(path: RelativePath(trusted: "dir3/sub/zz-new.bin"), size: 1, sha256: grown[0].sha256))
        grown.sort { $0.path < $1.path }
        let inserted = ManifestTree.build(grown, hash: Self.digest)
        #expect(inserted.objects.filter { !names.contains($0.sha256) }.count <= 3 * (inserted.root.level + 1))
    }

    /// Builds a one-leaf tree from `leaf` bytes the test writes, and reads it.
    static func readLeaf(_ bytes: [UInt8], files: Int) -> String? {
        let d = bytes.withUnsafeBytes { digest($0) }
        do {
            _ = try ManifestTree.resolve(ManifestTree.Reference(sha256: d, level: 0, files: files), source: "t", maximumBytes: 1 << 20) { _ in [bytes] }
            return nil
        } catch { return error.message }
    }

    static func leaf(_ records: [[UInt8]]) -> [UInt8] { Array("fm2L".utf8) + [UInt8(records.count)] + records.flatMap { $0 } }
    static func record(shared: UInt8 = 0, _ path: String, flags: UInt8 = 0) -> [UInt8] {
        [shared, UInt8(path.utf8.count)] + Array(path.utf8) + [UInt8](repeating: 7, count: 32) + [5, flags]
    }

    @Test func hostileObjectsAreRefusedWithTheirReason() {
        #expect(Self.readLeaf(Self.leaf([Self.record("a.txt")]), files: 1) == nil, "the well-formed one is read")
        let cases: [([UInt8], Int, String)] = [
            (Self.leaf([Self.record("a.txt")]), 2, "holds 1 entries, not the 2"),
            (Self.leaf([Self.record("../etc/passwd")]), 1, "is refused"),
            (Self.leaf([Self.record(".ferry/x")]), 1, "is refused"),
            (Self.leaf([Self.record("b.txt"), Self.record("a.txt")]), 2, "does not come after"),
            (Self.leaf([Self.record("a.txt"), Self.record("a.txt")]), 2, "does not come after"),
            (Self.leaf([Self.record(shared: 3, "a.txt")]), 1, "shared length"),
            (Self.leaf([Self.record("a.txt", flags: 8)]), 1, "unknown flags"),
            (Self.leaf([Self.record("a.txt", flags: 4)]), 1, "it ends early"),
            (Array(Self.leaf([Self.record("a.txt")]).dropLast()), 1, "ends early"),
            (Self.leaf([Self.record("a.txt")]) + [0], 1, "bytes after"),
            (Array("fm2N".utf8) + [0, 1] + [UInt8](repeating: 1, count: 32) + [1], 1, "is not a leaf"),
            (Array("fm2L".utf8) + [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F], 1, "64 bits"),
        ]
        for (bytes, files, needle) in cases {
            let message = Self.readLeaf(bytes, files: files)
            #expect(message?.contains(needle) == true && message?.contains("nothing was changed") == true, "\(needle): \(message ?? "read")")
        }
        // A node whose children hold other counts than it says, or at the wrong level.
        let child = [UInt8](repeating: 9, count: 32)
        for (node, needle) in [(Array("fm2N".utf8) + [1, 1] + child + [3], "is 3, more than 2"),
                               (Array("fm2N".utf8) + [2, 1] + child + [2], "at level 2 where level 1"),
                               (Array("fm2N".utf8) + [1, 0], "without children")] {
            let d = node.withUnsafeBytes { Self.digest($0) }
            let message: String? = {
                do {
                    _ = try ManifestTree.resolve(ManifestTree.Reference(sha256: d, level: 1, files: 2), source: "t", maximumBytes: 1 << 20) { batch in
                        batch.map { $0 == d ? node : Self.leaf([Self.record("a"), Self.record("b")]) }
                    }
                    return nil
                } catch { return (error as? FerryError)?.message }
            }()
            #expect(message?.contains(needle) == true, "\(needle): \(message ?? "read")")
        }
        // A root that claims more files than the byte bound allows is refused before anything is read.
        do {
            _ = try ManifestTree.resolve(ManifestTree.Reference(sha256: child.withUnsafeBytes { Self.digest($0) }, level: 3, files: 1 << 30),
                                         source: "t", maximumBytes: 1 << 20) { _ in Issue.record("nothing is loaded"); return [] }
            Issue.record("refused")
        } catch {
            #expect(error.message.contains("more than ferry reads"))
        }
    }

    /// A node that names one leaf 100 times (the object bomb) is refused at its second name,
    /// before the leaf is asked for more than once; and what one batch asks for stays within what
    /// is left of the byte bound (an object takes up to 1 MiB), so memory stays within about
    /// twice `max-manifest-size`.
    @Test func anObjectNamedTwiceIsFetchedOnceAndBatchesStayWithinTheBound() {
        let leaf = Self.leaf([Self.record("a.txt")])
        let l = leaf.withUnsafeBytes { Self.digest($0) }
        func node(_ children: [SHA256Digest]) -> [UInt8] {
            Array("fm2N".utf8) + [1, UInt8(children.count)] + children.flatMap { $0.bytes + [1] }
        }
        let bomb = node([SHA256Digest](repeating: l, count: 100))
        let b = bomb.withUnsafeBytes { Self.digest($0) }
        var asked: [SHA256Digest: Int] = [:]
        do {
            _ = try ManifestTree.resolve(ManifestTree.Reference(sha256: b, level: 1, files: 100), source: "t", maximumBytes: 1 << 30) { batch in
                for d in batch { asked[d, default: 0] += 1 }
                return batch.map { $0 == b ? bomb : leaf }
            }
            Issue.record("the bomb was accepted")
        } catch {
            #expect(error.message.contains("which the tree names already"), "\(error.message)")
        }
        #expect((asked[l] ?? 0) <= 1 && asked[b] == 1, "\(asked)")

        // 100 distinct leaves under a 3 MiB bound: no batch asks for more than 3 objects.
        let leaves = (0..<100).map { Self.leaf([Self.record(String(format: "f%03d", $0))]) }
        let digests = leaves.map { bytes in bytes.withUnsafeBytes { Self.digest($0) } }
        let wide = node(digests)
        let w = wide.withUnsafeBytes { Self.digest($0) }
        let byDigest = Dictionary(uniqueKeysWithValues: zip(digests, leaves))
        var largest = 0
        do {
            let entries = try ManifestTree.resolve(ManifestTree.Reference(sha256: w, level: 1, files: 100), source: "t", maximumBytes: 3 << 20) { batch in
                largest = max(largest, batch.count)
                return batch.map { $0 == w ? wide : byDigest[$0] ?? [] }
            }.entries
            #expect(entries.count == 100)
        } catch {
            Issue.record("\(error.message)")
        }
        #expect((1...3).contains(largest), "\(largest)")
    }

    @Test func theRootNamesTheTreeAndFormatOneStaysFlat() throws {
        let built = ManifestTree.build(Self.entries(50), hash: Self.digest)
        let text = ManifestWriter.renderRoot(version: 3, generated: Timestamp(seconds: 0), tree: built.root)
        let root = try Manifest.parse(Array(text.utf8), source: "t")
        #expect(root.format == .tree && root.tree == built.root && root.entries.isEmpty && root.fileCount == 50 && root.version == 3)
        let whole = try root.resolving(try Self.resolve(built), source: "t")
        #expect(whole.entries == Self.entries(50) && whole.lists(Self.entries(50)[7].path))
        let flat = try Manifest.parse(Array(ManifestWriter.render(version: 1, generated: Timestamp(seconds: 0), entries: Self.entries(5)).utf8), source: "t")
        #expect(flat.format == .ferry && flat.tree == nil && flat.fileCount == 5)
    }

    /// The root names the list of the tree's bundles, kept when its tree is read; a list named
    /// with a size no list can have, or a name that is not one, refuses the root.
    @Test func theRootNamesItsBundlesAndAMalformedListIsRefused() throws {
        let built = ManifestTree.build(Self.entries(50), hash: Self.digest)
        let bundles = try #require(built.bundles)
        let text = ManifestWriter.renderRoot(version: 3, generated: Timestamp(seconds: 0), tree: built.root,
                                             bundles: bundles)
        let root = try Manifest.parse(Array(text.utf8), source: "t")
        #expect(root.treeBundles == bundles)
        #expect(try root.resolving(try Self.resolve(built), source: "t").treeBundles == bundles)
        let named = "{\"sha256\": \"\(bundles.sha256)\", \"size\": \(bundles.size)}"
        for (wrong, said) in [("{\"sha256\": \"\(bundles.sha256)\", \"size\": 4}", "\"bundles\".size must be"),
                              ("{\"sha256\": \"\(bundles.sha256)\", \"size\": \(2 << 20)}", "\"bundles\".size must be"),
                              ("{\"sha256\": \"xyz\", \"size\": 100}", "\"bundles\".sha256 must be")] {
            let hostile = text.replacingOccurrences(of: named, with: wrong)
            #expect(hostile != text)
            do {
                _ = try Manifest.parse(Array(hostile.utf8), source: "t")
                Issue.record("taken: \(wrong)")
            } catch {
                #expect(error.message.contains(said), "\(error.message)")
            }
        }
    }
}

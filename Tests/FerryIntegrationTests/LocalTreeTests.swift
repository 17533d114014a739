import Foundation
import Glibc
import Testing
@testable import FerryRuntime
import FerryCore

/// The scan emits the local tree in byte order without sorting it, and the hash cache joins it in
/// one pass: both rest on every piece agreeing on one order, which names around '/' test.
struct LocalTreeTests {
    let dir = Harness.temporaryDirectory("local-tree")

    /// Names that sort just before and after '/' (0x2F): '-' and '.' below it, '0' above, a space,
    /// and UTF-8 above ASCII, in directories nested so that a directory's contents must come after
    /// `<name>.txt` and before `<name>0`.
    let files = ["a.txt", "a/b", "a/b.c", "a/b/c", "a-x", "a0", "a b", "é", "é/x", "z/a.txt", "z/a/deep/er", "z/a0"]

    func make() throws -> [String] {
        var made: [String] = []
        for f in files {
            let full = dir + "/root/" + f
            // A name that is a file in one entry and a directory in another is a directory.
            if files.contains(where: { $0.hasPrefix(f + "/") }) {
                try FileManager.default.createDirectory(atPath: full, withIntermediateDirectories: true)
            } else {
                try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try Data(f.utf8).write(to: URL(fileURLWithPath: full))
            }
            made.append(f)
        }
        for f in files { for a in RelativePath(trusted: f).ancestors { made.append(a.string) } }
        return Array(Set(made))
    }

    func byteSorted(_ paths: [String]) -> [String] {
        paths.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
    }

    /// A directory of many entries is stat'ed in parts on several threads: each name still gets
    /// its own answer, in order (a symlink as a symlink, a FIFO, a directory, a name gone since
    /// the listing as ENOENT), and the scan of it is what a plain lstat of each name says.
    @Test func aLargeDirectoryIsStatedInPartsEachNameItsOwnAnswer() throws {
        defer { Harness.remove(dir) }
        let big = dir + "/big"
        try FileManager.default.createDirectory(atPath: big + "/sub", withIntermediateDirectories: true)
        var names: [String] = []
        for i in 0..<700 {
            let name = String(format: "f%04d", i)
            try Data(repeating: 7, count: i).write(to: URL(fileURLWithPath: big + "/" + name))
            names.append(name)
        }
        symlink("f0001", big + "/link")
        mkfifo(big + "/fifo", 0o600)
        names += ["link", "fifo", "sub", "gone-1", "gone-2"]
        names.shuffle()
        let fd = open(big, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        let results = LocalRoot.statAll(names, in: fd)
        #expect(results.count == names.count)
        for (name, result) in zip(names, results) {
            var st = stat()
            if lstat(big + "/" + name, &st) != 0 {
                guard case .failed(ENOENT) = result else { Issue.record("\(name): \(result), not ENOENT"); continue }
                continue
            }
            guard case let .entry(entry) = result else { Issue.record("\(name): \(result)"); continue }
            #expect(entry == FileSystem.entry(from: st), "\(name)")
        }
        let root = try LocalRoot(path: big, create: false)
        let tree = try root.scan().tree
        #expect(tree.items.count == 703, "700 files, a symlink, a FIFO and a directory")
        #expect(tree[RelativePath(trusted: "link")]?.kind == .symlink && tree[RelativePath(trusted: "fifo")]?.kind == .other)
        #expect(tree[RelativePath(trusted: "f0699")]?.size == 699 && tree[RelativePath(trusted: "sub")]?.kind == .directory)
    }

    @Test func theScanComesOutInByteOrder() throws {
        defer { Harness.remove(dir) }
        let expected = byteSorted(try make())
        let root = try LocalRoot(path: dir + "/root", create: false)
        let tree = try root.scan().tree
        #expect(tree.items.map(\.path.string) == expected)
        #expect(tree[RelativePath(trusted: "a")]?.kind == .directory)
        #expect(tree[RelativePath(trusted: "a/b.c")]?.kind == .file)
        #expect(tree[RelativePath(trusted: "missing")] == nil)
        let regular = files.filter { f in !files.contains { $0.hasPrefix(f + "/") } }
        #expect(tree.fileCount == regular.count)
    }

    /// Hashes join only files whose stat still matches; rows for paths the tree lacks, for
    /// directories and for edited files vouch for nothing.
    @Test func theHashCacheJoinsOnlyWhatIsStillValid() throws {
        defer { Harness.remove(dir) }
        _ = try make()
        let root = try LocalRoot(path: dir + "/root", create: false)
        var rows: [(RelativePath, CachedHash)] = []
        for item in try root.scan().tree.items where item.entry.kind == .file {
            rows.append((item.path, try root.hash(item.path)))
        }
        let digest = SHA256Digest(hex: String(repeating: "ab", count: 32))!
        let someStat = CachedHash(size: 1, mtime: Timestamp(seconds: 1), ctime: Timestamp(seconds: 1), inode: 1, sha256: digest)
        rows.append((RelativePath(trusted: "a-gone"), someStat))
        rows.append((RelativePath(trusted: "z"), someStat))
        let store = try StateStore(directory: dir + "/state", clock: SystemClock())
        try store.saveHashes(session: "s", rows)

        // Edited after hashing: same size, another mtime.
        let edited = dir + "/root/a/b.c"
        var times = [timespec(tv_sec: 1_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, edited, &times, 0) == 0)

        var tree = try root.scan().tree
        try store.loadHashes(session: "s", into: &tree)
        let verified = Dictionary(uniqueKeysWithValues: tree.items.compactMap { i in i.verified.map { (i.path.string, $0) } })
        let files = rows.filter { tree[$0.0]?.kind == .file && $0.0.string != "a/b.c" }
        #expect(verified.count == files.count)
        for (path, hash) in files { #expect(verified[path.string] == hash.sha256, "\(path)") }
        #expect(verified["a/b.c"] == nil && verified["z"] == nil && verified["a-gone"] == nil)
    }
}

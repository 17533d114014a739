import Dispatch
import Glibc
import FerryCore

/// Scanning a root: its tree in byte order of the paths, each directory's entries stat'ed by the
/// CPUs at once.
extension LocalRoot {
    /// Every file, directory and symlink under the root but `.ferry/`, in byte order of the paths
    /// (`LocalTree`). Names that are not UTF-8 cannot be in a manifest; they are reported as
    /// warnings and left alone. `expecting`: about how many files there are (the hash cache's count).
    public func scan(expecting: Int = 0) throws(FerryError) -> (tree: LocalTree, warnings: [String]) {
        var items: [LocalTree.Item] = []
        // `expecting` counts files; room for directories too, or the array is copied at the very
        // end (briefly twice its size). Room not used is never touched, so costs no memory.
        items.reserveCapacity(expecting + expecting / 4)
        var warnings: [String] = []
        try scanDirectory(fd: dup(rootFD), prefix: nil, into: &items, warnings: &warnings)
        return (LocalTree(sorted: items), warnings)
    }

    /// Lists one directory and emits its children in byte order of their full paths, each
    /// directory's contents right where `<name>/` sorts (after `<name>.txt`, say, which sorts
    /// before `/`), so the whole scan comes out sorted without sorting it.
    private func scanDirectory(fd: Int32, prefix: RelativePath?, into items: inout [LocalTree.Item], warnings: inout [String]) throws(FerryError) {
        guard let dir = fdopendir(fd) else {
            close(fd)
            throw .localIO("cannot list \(display(prefix)): \(FileSystem.errorText())")
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let ent = readdir(dir) {
            let name: String? = withUnsafePointer(to: &ent.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(validatingCString: $0) }
            }
            guard let name else {
                let shown = withUnsafePointer(to: &ent.pointee.d_name) {
                    $0.withMemoryRebound(to: UInt8.self, capacity: 256) { Printable.name(bytes: UnsafeBufferPointer(start: $0, count: strlen(UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self)))) }
                }
                warnings.append("\(display(prefix))/\(shown): the name is not UTF-8, so no manifest can list it; ferry leaves it alone")
                continue
            }
            if name == "." || name == ".." { continue }
            if prefix == nil && name == RelativePath.reservedTopLevel { continue }
            names.append(name)
        }
        var children: [(name: RelativePath, entry: LocalEntry)] = []
        children.reserveCapacity(names.count)
        var hasDirectories = false
        for (name, result) in zip(names, LocalRoot.statAll(names, in: dirfd(dir))) {
            guard case let .entry(entry) = result else {
                guard case let .failed(code) = result, code != ENOENT else { continue }
                errno = code
                throw .localIO("cannot stat \(display(prefix.map { $0.appending(name) } ?? RelativePath(trusted: name))): \(FileSystem.errorText())")
            }
            if entry.kind == .directory { hasDirectories = true }
            children.append((RelativePath(trusted: name), entry))
        }
        // Each child sorts by its name; what a directory holds sorts by `<name>/`.
        var order: [(key: RelativePath, child: Int, contents: Bool)] = []
        order.reserveCapacity(children.count + (hasDirectories ? 16 : 0))
        for (i, c) in children.enumerated() {
            order.append((c.name, i, false))
            if c.entry.kind == .directory { order.append((RelativePath(trusted: c.name.string + "/"), i, true)) }
        }
        order.sort { $0.key < $1.key }
        for o in order {
            let (name, entry) = children[o.child]
            let path = prefix.map { $0.appending(name.string) } ?? name
            guard o.contents else {
                items.append(LocalTree.Item(path: path, entry: entry))
                continue
            }
            let child = openat(dirfd(dir), name.string, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard child >= 0 else { throw .localIO("cannot open directory \(display(path)): \(FileSystem.errorText())") }
            try scanDirectory(fd: child, prefix: path, into: &items, warnings: &warnings)
        }
    }

    /// What `fstatat` (not following a symlink) says of each of `names` in the directory `fd`, or
    /// its errno. A directory of many entries is stat'ed by the CPUs at once: the path lookups are
    /// most of a scan's time, and the scan otherwise runs on one core while another sits idle.
    static func statAll(_ names: [String], in fd: Int32) -> [StatResult] {
        var out = [StatResult](repeating: .failed(0), count: names.count)
        let chunks = names.count >= 256 ? min(LocalRoot.processors, names.count / 128) : 1
        out.withUnsafeMutableBufferPointer { buffer in
            let slots = UncheckedSlots(buffer)
            @Sendable func stat(_ range: Range<Int>) {
                for i in range {
                    var st = Glibc.stat()
                    slots.buffer[i] = fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 ? .entry(FileSystem.entry(from: st)) : .failed(errno)
                }
            }
            guard chunks > 1 else { return stat(0..<names.count) }
            DispatchQueue.concurrentPerform(iterations: chunks) { k in
                stat(names.count * k / chunks..<names.count * (k + 1) / chunks)
            }
        }
        return out
    }

    enum StatResult {
        case entry(LocalEntry)
        case failed(Int32)
    }

    /// The CPUs this process may run on (at least 1).
    static let processors = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))

    /// Slots of a buffer that threads fill at indices no two of them share.
    private struct UncheckedSlots<T>: @unchecked Sendable {
        let buffer: UnsafeMutableBufferPointer<T>
        init(_ buffer: UnsafeMutableBufferPointer<T>) { self.buffer = buffer }
    }
}

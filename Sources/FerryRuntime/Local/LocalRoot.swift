import CSystem
import Dispatch
import Glibc
import FerryCore

/// A directory ferry reads and writes, opened once: a session's local directory, or a `file://`
/// remote (`Role`). All reads and writes go through here, and they never follow a symlink: every
/// directory on the way to a file is opened with `O_NOFOLLOW` relative to its parent, so a symlink
/// planted in the tree cannot redirect a read or a write outside the root (docs/design.md,
/// data-safety rule 6), and a path longer than PATH_MAX is reached one name at a time. Files are
/// opened without blocking, and anything but a regular file is refused (a FIFO never holds a thread).
/// Partial files live in `<root>/.ferry/`, on the same filesystem, so the final `rename` is atomic
/// (data-safety rule 1).
public final class LocalRoot {
    /// Whether a failure to open a file says it is no longer a regular file at that path (gone, a
    /// symlink or something else now, or under a file): for a push's local tree and for a
    /// `file://` remote alike.
    static func isGone(_ cause: FailureCause?) -> Bool {
        switch cause {
        case .sourceChanged?: return true
        case let .local(code)?: return code == ENOENT || code == ENOTDIR || code == ELOOP || code == EINVAL
        default: return false
        }
    }

    /// What the directory is to ferry.
    public enum Role: Sendable {
        /// The session's own directory: partial files in `.ferry/partial/` are kept across runs as
        /// resume data, and a file, symlink or special file where a listed file needs a directory
        /// is replaced (the manifest is the authority over the paths it lists).
        case local
        /// A `file://` remote, which others may write too: uploads wait in `.ferry/upload/` under
        /// names created exclusively and never reused, and anything but a directory where one is
        /// needed is refused, never replaced or followed.
        case remote
    }

    public let path: String
    public let role: Role
    let rootFD: Int32
    private var stagingFD: Int32 = -1
    private var directories: [RelativePath: Int32] = [:]
    private var unsyncedDirectories = Set<RelativePath?>()
    private let defaultMode: UInt32

    /// Directories in the way of listed files that may be removed when their file is placed, with
    /// the files the plan found in each (and counted against `max-delete`). Any other directory in
    /// the way stays, and so does one that holds anything else by then.
    public var replaceableDirectories: [RelativePath: Set<RelativePath>] = [:]

    /// The root is a generation being built (`layout = generations`): its files may be hard links
    /// into other generations, so a file with other links is copied before its mode or mtime
    /// changes. Downloads never write into a placed file; they are renamed over it.
    public var sharesInodes = false

    /// What placing files changed besides the files themselves, for the caller to report.
    public enum Change {
        /// A file, symlink or special file where the manifest needs a directory was removed (never
        /// followed) and a directory made in its place.
        case replacedByDirectory(RelativePath, was: LocalEntry.Kind)
        /// A file was removed from a directory in the way of a listed file.
        case removed(RelativePath)
        /// A directory in the way of a listed file is gone, and the file is in its place.
        case replacedDirectory(RelativePath)
        /// Something of ferry's own (`.ferry/`, a partial file) was not what ferry left there.
        case repaired(String)
    }
    private var changes: [Change] = []

    public var hasChanges: Bool { !changes.isEmpty }

    /// The changes since the last call.
    public func takeChanges() -> [Change] {
        defer { changes.removeAll() }
        return changes
    }

    public static let stagingPath = ".ferry/partial"
    /// Where a `file://` remote's uploads wait until they are moved into place.
    public static let uploadPath = ".ferry/upload"
    /// This root's staging directory: `stagingPath` or `uploadPath`.
    var ownStaging: String { role == .local ? LocalRoot.stagingPath : LocalRoot.uploadPath }
    /// `UTIME_OMIT` from <sys/stat.h> (a macro Swift does not import): leave that time alone.
    static let utimeOmit = (1 << 30) - 2

    public init(path: String, create: Bool, role: Role = .local) throws(FerryError) {
        self.path = path
        self.role = role
        if create { try FileSystem.makeDirectories(path) }
        let fd = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if role == .remote {
                throw FerryError(.remote, "cannot open the remote directory \(Printable.name(path)): \(FileSystem.errorText(code))",
                                 hint: code == ENOENT ? "check 'remote =' in the config" : nil, cause: .local(errno: code))
            }
            throw .localIO("cannot open the local directory \(path): \(FileSystem.errorText(code))",
                           hint: code == ENOENT ? "create it, or fix 'local =' in the config" : nil)
        }
        rootFD = fd
        let mask = umask(0o022)
        umask(mask)
        defaultMode = 0o666 & ~UInt32(mask)
    }

    deinit {
        for fd in directories.values { close(fd) }
        if stagingFD >= 0 { close(stagingFD) }
        close(rootFD)
    }

    // MARK: scanning

    /// Every file, directory and symlink under the root, except `.ferry/`. Names that are not UTF-8
    /// cannot be in a manifest; they are reported as warnings and left alone.
    /// `expecting`: about how many entries there will be (room is made for them at once).
    /// Everything under the root but `.ferry/`, in byte order of the paths (`LocalTree`).
    /// `expecting`: about how many files there are (the hash cache's count).
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

    /// A path under the root as messages show it: escaped and shortened (`Printable`).
    private func display(_ p: RelativePath?) -> String { Printable.name(p.map { path + "/" + $0.string } ?? path) }

    /// Keeps the cache of open directories bounded (a tree may hold more directories than a process
    /// may open files). Called where no directory descriptor is held yet; `syncDirectories` reopens
    /// what it needs.
    private func boundDirectoryCache() {
        guard directories.count > 256 else { return }
        for fd in directories.values { close(fd) }
        directories.removeAll()
    }

    public func stat(_ relative: RelativePath) -> LocalEntry? {
        boundDirectoryCache()
        guard let dir = try? directoryFD(relative.parent, create: false) else { return nil }
        var st = Glibc.stat()
        guard fstatat(dir, baseName(relative), &st, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        return FileSystem.entry(from: st)
    }

    /// SHA-256 of a file, opened as `open` opens it, with the stat it was taken at.
    public func hash(_ relative: RelativePath) throws(FerryError) -> CachedHash {
        let fd = try open(relative, for: "to hash it")
        defer { close(fd) }
        var before = Glibc.stat()
        fstat(fd, &before)
        let hasher = SHA256Hasher()
        do { try hasher.update(fileDescriptor: fd) } catch {
            throw FerryError(.localIO, "cannot read \(display(relative)) to hash it: \(error.message)", cause: .local(errno: EIO))
        }
        return CachedHash(FileSystem.entry(from: before), sha256: hasher.finalize(), wanted: nil)
    }

    /// Opens a regular file for reading, never through a symlink (neither the file nor a directory
    /// on the way) and without blocking: a FIFO or device put in a file's place is refused, never
    /// waited on. Errors carry the errno as their cause (`ENOENT`, `ENOTDIR` and `ELOOP`: the path
    /// no longer leads to a file; `EINVAL`: it is not a regular file).
    public func open(_ relative: RelativePath, for purpose: String) throws(FerryError) -> Int32 {
        boundDirectoryCache()
        let dir: Int32
        do { dir = try directoryFD(relative.parent, create: false) } catch {
            // A directory on the way is gone, or is a symlink or a file now.
            throw FerryError(error.category == .transfer ? .transfer : .localIO, "cannot open \(display(relative)) \(purpose): \(error.message)",
                             hint: error.hint, cause: error.cause ?? .local(errno: ENOTDIR))
        }
        let fd = openat(dir, baseName(relative), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            let why = code == ELOOP ? "it is a symlink, and ferry never reads through symlinks" : FileSystem.errorText(code)
            throw FerryError(.localIO, "cannot open \(display(relative)) \(purpose): \(why)", cause: .local(errno: code))
        }
        var st = Glibc.stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            let kind = FileSystem.entry(from: st).kind
            throw FerryError(.localIO, "cannot open \(display(relative)) \(purpose): it is a \(kind == .other ? "special file (a FIFO, socket or device)" : kind.rawValue), not a regular file",
                             cause: .local(errno: EINVAL))
        }
        // Reads of a regular file never block; the flag only kept the open from waiting.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return fd
    }

    // MARK: directories, never through symlinks

    /// The open directory holding `relative`'s children (`nil` = the root). With `create` (only
    /// when placing a listed file) missing directories are made, and a file, symlink or special
    /// file where one must be is replaced: the manifest is the authority over the paths it lists.
    /// Nothing is ever followed through a symlink.
    func directoryFD(_ relative: RelativePath?, create: Bool) throws(FerryError) -> Int32 {
        guard let relative else { return rootFD }
        if let fd = directories[relative] { return fd }
        let parentFD = try directoryFD(relative.parent, create: create)
        let name = baseName(relative)
        let fd: Int32
        if create {
            let made = try LocalRoot.openOrMakeDirectory(in: parentFD, name, mode: 0o755, shown: display(relative), replacing: role == .local)
            if let was = made.replaced { changes.append(.replacedByDirectory(relative, was: was)) }
            if made.changed { unsyncedDirectories.insert(relative.parent) }
            fd = made.fd
        } else {
            fd = openat(parentFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        }
        guard fd >= 0 else {
            let code = errno
            var st = Glibc.stat()
            if fstatat(parentFD, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (st.st_mode & S_IFMT) == S_IFLNK {
                throw FerryError(.transfer, "\(display(relative)) is a symlink; ferry never reads or writes through symlinks",
                               hint: "replace the symlink with a real directory", cause: .local(errno: ELOOP))
            }
            if code == ENOTDIR {
                throw FerryError(.transfer, "\(display(relative)) is a file where the manifest needs a directory",
                               hint: "remove it, or set delete = yes so ferry mirrors the remote exactly", cause: .local(errno: ENOTDIR))
            }
            throw FerryError(.localIO, "cannot open directory \(display(relative)): \(FileSystem.errorText(code))", cause: .local(errno: code))
        }
        directories[relative] = fd
        return fd
    }

    /// Opens directory `name` in `parent`, never through a symlink, making it with `mode` when it
    /// is missing. With `replacing`, a file, symlink or special file in its place is removed first
    /// (a symlink as a link, never what it points to) and returned as `replaced`; without, it is
    /// refused. `fd` is -1, with errno set, when the directory cannot be opened; `changed` says
    /// whether `parent` gained or lost an entry.
    static func openOrMakeDirectory(in parent: Int32, _ name: String, mode: mode_t, shown: String, replacing: Bool) throws(FerryError)
        -> (fd: Int32, replaced: LocalEntry.Kind?, changed: Bool) {
        let fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd < 0 else { return (fd, nil, false) }
        var code = errno
        var replaced: LocalEntry.Kind?
        var st = Glibc.stat()
        if (code == ENOTDIR || code == ELOOP) && fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (st.st_mode & S_IFMT) != S_IFDIR {
            guard replacing else {
                let kind = FileSystem.entry(from: st).kind
                // A refusal that trying again cannot change: its errno says so (`FailureCause.retryClass`).
                throw FerryError(.transfer, "\(shown) is a \(kind == .other ? "special file" : kind.rawValue) on the remote where a directory is needed; ferry neither writes through it nor replaces it",
                                 hint: "remove it from the remote, or make it a real directory; the next run places the files under it",
                                 cause: .local(errno: kind == .symlink ? ELOOP : ENOTDIR))
            }
            guard unlinkat(parent, name, 0) == 0 || errno == ENOENT else {
                throw .localIO("cannot remove \(shown) to make the directory needed there: \(FileSystem.errorText())")
            }
            replaced = FileSystem.entry(from: st).kind
            code = ENOENT
        }
        guard code == ENOENT else {
            errno = code
            return (-1, nil, false)
        }
        if mkdirat(parent, name, mode) != 0 && errno != EEXIST {
            throw .localIO("cannot create directory \(shown): \(FileSystem.errorText())")
        }
        return (openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), replaced, true)
    }

    /// Removes a directory in the way of a listed file, but only if it holds exactly files the
    /// plan counted (`expected`): a file that appeared since, or a name ferry cannot list (not
    /// UTF-8), keeps the whole directory, and that listed file fails this run.
    private func clearDirectory(in parentFD: Int32, _ name: String, _ relative: RelativePath, expected: Set<RelativePath>) throws(FerryError) {
        var files: [RelativePath] = []
        var unlistable = 0
        try inventory(in: parentFD, Array(name.utf8CString), relative, files: &files, unlistable: &unlistable)
        let uncounted = files.filter { !expected.contains($0) }
        guard uncounted.isEmpty && unlistable == 0 else {
            let example = uncounted.first.map { " (\(Printable.name($0.string)))" } ?? ""
            let what = unlistable > 0 ? "\(Plural.count(unlistable, "name")) that \(unlistable == 1 ? "is" : "are") not UTF-8" : "\(Plural.count(uncounted.count, "file")) the plan did not count\(example)"
            throw FerryError(.transfer, "\(display(relative)) is a directory where the manifest has a file, and it holds \(what); nothing in it was removed",
                             hint: "move them away; the next run places the file")
        }
        try removeTree(in: parentFD, Array(name.utf8CString), relative, record: true)
    }

    /// The files under a directory (never following a symlink), and how many names it could not list.
    private func inventory(in parentFD: Int32, _ name: [CChar], _ relative: RelativePath, files: inout [RelativePath], unlistable: inout Int) throws(FerryError) {
        let fd = openat(parentFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0, let dir = fdopendir(fd) else {
            if fd >= 0 { close(fd) }
            throw .localIO("cannot list \(display(relative)): \(FileSystem.errorText())")
        }
        defer { closedir(dir) }
        for raw in LocalRoot.names(dir) {
            guard let text = String(validating: raw.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self) else {
                unlistable += 1
                continue
            }
            let child = relative.appending(text)
            var st = Glibc.stat()
            guard fstatat(dirfd(dir), raw, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            if (st.st_mode & S_IFMT) == S_IFDIR {
                try inventory(in: dirfd(dir), raw, child, files: &files, unlistable: &unlistable)
            } else {
                files.append(child)
            }
        }
    }

    /// Every name in an open directory but `.` and `..`, as NUL-terminated bytes (not always UTF-8).
    private static func names(_ dir: OpaquePointer) -> [[CChar]] {
        var names: [[CChar]] = []
        while let ent = readdir(dir) {
            let raw: [CChar] = withUnsafePointer(to: &ent.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { Array(UnsafeBufferPointer(start: $0, count: strlen($0) + 1)) }
            }
            if raw == [0x2E, 0] || raw == [0x2E, 0x2E, 0] { continue }
            names.append(raw)
        }
        return names
    }

    /// Removes a directory and everything in it, relative to its parent's descriptor, never
    /// following a symlink (a symlink inside is removed as a link). With `record`, each file
    /// removed is a `Change` as soon as it is gone, so a failure half way still reports them.
    private func removeTree(in parentFD: Int32, _ name: [CChar], _ relative: RelativePath, record: Bool) throws(FerryError) {
        let fd = openat(parentFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return }
            throw .localIO("cannot open directory \(display(relative)) to remove it: \(FileSystem.errorText())")
        }
        guard let dir = fdopendir(fd) else {
            close(fd)
            throw .localIO("cannot list \(display(relative)) to remove it: \(FileSystem.errorText())")
        }
        defer { closedir(dir) }
        for raw in LocalRoot.names(dir) {
            let child = relative.appending(String(decoding: raw.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self))
            var st = Glibc.stat()
            guard fstatat(dirfd(dir), raw, &st, AT_SYMLINK_NOFOLLOW) == 0 else {
                if errno == ENOENT { continue }
                throw .localIO("cannot stat \(display(child)): \(FileSystem.errorText())")
            }
            if (st.st_mode & S_IFMT) == S_IFDIR {
                try removeTree(in: dirfd(dir), raw, child, record: record)
            } else {
                guard unlinkat(dirfd(dir), raw, 0) == 0 || errno == ENOENT else {
                    throw .localIO("cannot delete \(display(child)): \(FileSystem.errorText())")
                }
                if record { changes.append(.removed(child)) }
            }
        }
        guard unlinkat(parentFD, name, AT_REMOVEDIR) == 0 || errno == ENOENT else {
            throw .localIO("cannot remove directory \(display(relative)): \(FileSystem.errorText())")
        }
    }

    /// Closes cached descriptors of a removed directory and of everything under it.
    private func forgetDirectories(under relative: RelativePath) {
        let prefix = relative.string + "/"
        for (key, fd) in directories where key == relative || key.string.hasPrefix(prefix) {
            close(fd)
            directories.removeValue(forKey: key)
        }
        unsyncedDirectories = unsyncedDirectories.filter { key in
            guard let key else { return true }
            return !(key == relative || key.string.hasPrefix(prefix))
        }
    }

    private func baseName(_ p: RelativePath) -> String {
        guard let slash = p.string.utf8.lastIndex(of: UInt8(ascii: "/")) else { return p.string }
        return String(p.string.utf8[p.string.utf8.index(after: slash)...])!
    }

    // MARK: partial files

    /// Opens (making it when needed) the directory of partial files now, so that other threads
    /// can open and remove partial files while one places them.
    public func openStaging() throws(FerryError) { _ = try staging() }

    private func staging() throws(FerryError) -> Int32 {
        if stagingFD >= 0 { return stagingFD }
        // Each level is opened relative to its parent's descriptor, never through a path that a
        // symlinked `.ferry` could redirect.
        let ferry = try ownDirectory(in: rootFD, ".ferry", shown: path + "/.ferry")
        defer { close(ferry) }
        stagingFD = try ownDirectory(in: ferry, role == .local ? "partial" : "upload", shown: path + "/" + ownStaging)
        return stagingFD
    }

    /// Opens (creating) one of ferry's own directories. The name is reserved for ferry: a symlink,
    /// file or anything else found there is removed (a symlink as a link, never followed).
    private func ownDirectory(in parent: Int32, _ name: String, shown: String) throws(FerryError) -> Int32 {
        let shown = Printable.name(shown)
        let made = try LocalRoot.openOrMakeDirectory(in: parent, name, mode: 0o700, shown: shown, replacing: true)
        if let was = made.replaced {
            changes.append(.repaired("\(shown) was a \(was.rawValue), not ferry's directory; removed it (not followed)"))
        }
        guard made.fd >= 0 else { throw .localIO("cannot open \(shown): \(FileSystem.errorText())") }
        return made.fd
    }

    static func partialName(_ taskID: Int64) -> String { "\(taskID).part" }

    /// Opens (creating) the partial file of a task for reading and writing. Anything but a regular
    /// file under its name (a symlink, a FIFO, a directory) is removed without being followed, and
    /// `stray` says what it was: that file then starts again from zero.
    public func openPartial(taskID: Int64) throws(FerryError) -> (partial: PartialFile, stray: LocalEntry.Kind?) {
        precondition(role == .local, "a remote's uploads are created with createUpload")
        let staging = try staging()
        let name = LocalRoot.partialName(taskID)
        let flags = O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
        // Most tasks have no partial yet: created exclusively, the new file is known to be a
        // regular, empty one without a look first.
        let created = openat(staging, name, flags | O_EXCL, 0o600)
        if created >= 0 { return (PartialFile(fd: created, length: 0), nil) }
        guard errno == EEXIST else {
            throw .localIO("cannot create a partial file in \(Printable.name(path))/\(ownStaging): \(FileSystem.errorText())")
        }
        var stray: LocalEntry.Kind?
        var st = Glibc.stat()
        if fstatat(staging, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (st.st_mode & S_IFMT) != S_IFREG {
            stray = FileSystem.entry(from: st).kind
            if stray == .directory {
                try removeTree(in: staging, Array(name.utf8CString), RelativePath(trusted: ownStaging + "/" + name), record: false)
            } else if unlinkat(staging, name, 0) != 0 && errno != ENOENT {
                throw .localIO("cannot remove the stray \(stray!.rawValue) \(Printable.name(path))/\(ownStaging)/\(name): \(FileSystem.errorText())")
            }
        }
        let fd = openat(staging, name, flags, 0o600)
        guard fd >= 0 else {
            throw .localIO("cannot create a partial file in \(Printable.name(path))/\(ownStaging): \(FileSystem.errorText())")
        }
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw .localIO("\(Printable.name(path))/\(ownStaging)/\(name) is not a regular file (something replaced it while ferry worked)")
        }
        return (PartialFile(fd: fd, length: Int64(st.st_size)), stray)
    }

    public func removePartial(taskID: Int64) {
        if let fd = try? staging() { unlinkat(fd, LocalRoot.partialName(taskID), 0) }
    }

    /// Removes partial files no task owns any more.
    public func removePartials(keeping ids: Set<Int64>) {
        guard let fd = try? staging(), let dir = fdopendir(dup(fd)) else { return }
        defer { closedir(dir) }
        var stale: [String] = []
        while let ent = readdir(dir) {
            let name = withUnsafePointer(to: &ent.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            guard name.hasSuffix(".part"), let id = Int64(name.dropLast(5)) else { continue }
            if !ids.contains(id) { stale.append(name) }
        }
        for name in stale { unlinkat(fd, name, 0) }
    }

    // MARK: a remote's uploads

    /// `.remote`: a new, empty file for an upload of `owner` (a task id, or a name like `manifest`),
    /// created exclusively under a name no one can guess (`<owner>-<random>`), so nothing planted
    /// in the remote's `.ferry/` (a symlink, a hard link to another file) is ever written through.
    /// Returns the descriptor and the name, which `commit` takes.
    public func createUpload(owner: String) throws(FerryError) -> (fd: Int32, name: String) {
        let staging = try staging()
        for _ in 0..<8 {
            let name = "\(owner)-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
            let fd = openat(staging, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
            if fd >= 0 { return (fd, name) }
            if errno != EEXIST { break }
        }
        let code = errno
        throw FerryError(.remote, "cannot create a temporary upload in \(Printable.name(path))/\(ownStaging): \(FileSystem.errorText(code))",
                         cause: .local(errno: code))
    }

    /// `.remote`: removes the temporary uploads of `owner` (a crash, a failure or a stop left them).
    public func removeUploads(owner: String) { removeUploads(owners: [owner]) }

    /// `.remote`: removes the temporary uploads of each of `owners`.
    public func removeUploads(owners: Set<String>) {
        guard let fd = try? staging(), let dir = fdopendir(dup(fd)) else { return }
        defer { closedir(dir) }
        var stale: [[CChar]] = []
        for raw in LocalRoot.names(dir) {
            let name = String(decoding: raw.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let owner = name.firstIndex(of: "-").map { String(name[..<$0]) } ?? name
            if owners.contains(owner) { stale.append(raw) }
        }
        for name in stale { unlinkat(fd, name, 0) }
    }

    /// Puts a verified file staged under `staged` in this root's staging directory in place: mode
    /// and mtime set, file fsynced, renamed over the final path (`lost` is called when its data
    /// could not be made durable). The directory fsync is deferred to `syncDirectories()` so a
    /// batch of files shares it; callers mark tasks done only after that. Returns the stat of the
    /// file now in place. (A pull commits its files in groups: `setMetadata`, `syncPartials`, `place`.)
    public func commit(partialFD fd: Int32, staged: String, to relative: RelativePath, mode: UInt32?, mtime: Timestamp?,
                       lost: () -> Void) throws(FerryError) -> LocalEntry {
        try setMetadata(partialFD: fd, of: relative, mode: mode, mtime: mtime)
        if fsync(fd) != 0 {
            let code = errno
            lost()
            throw lostData(relative, code)
        }
        return try place(staged: staged, at: relative)
    }

    /// Gives a verified partial file the mode and mtime of its final path (the first step of a commit).
    public func setMetadata(partialFD fd: Int32, of relative: RelativePath, mode: UInt32?, mtime: Timestamp?) throws(FerryError) {
        if fchmod(fd, mode_t(mode ?? defaultMode)) != 0 {
            throw .localIO("cannot set the mode of \(display(relative)): \(FileSystem.errorText())")
        }
        if let mtime {
            var times = [timespec(tv_sec: 0, tv_nsec: LocalRoot.utimeOmit), mtime.timespecValue]
            if futimens(fd, &times) != 0 {
                throw .localIO("cannot set the mtime of \(display(relative)): \(FileSystem.errorText())")
            }
        }
    }

    /// Makes a group of partial files durable (data and metadata) before any of them is renamed
    /// into place: one `syncfs` for the filesystem, which since Linux 5.8 reports a writeback error
    /// of any file on it; when it reports one (or the kernel is older), each file's own fsync says
    /// which failed. Returns, by index in `fds`, the errno of each that could not be synced.
    public func syncPartials(_ fds: [Int32]) -> [Int: Int32] {
        guard !fds.isEmpty else { return [:] }
        if fds.count > 1, LocalRoot.syncfsReportsErrors, let staging = try? staging(), ferry_syncfs(staging) == 0 { return [:] }
        var failed: [Int: Int32] = [:]
        for (i, fd) in fds.enumerated() where fsync(fd) != 0 { failed[i] = errno }
        return failed
    }

    /// Whether `syncfs` returns writeback errors (Linux 5.8 and later; before, it always succeeds).
    static let syncfsReportsErrors: Bool = {
        var name = utsname()
        uname(&name)
        let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let numbers = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
        guard numbers.count == 2 else { return false }
        return (numbers[0], numbers[1]) >= (5, 8)
    }()

    /// The error for the partial file of `relative` whose data could not be made durable.
    public func lostData(_ relative: RelativePath, _ code: Int32) -> FerryError {
        .localIO("fsync of the partial file for \(display(relative)) failed (\(FileSystem.errorText(code))); it will be fetched again")
    }

    /// Renames the partial file of `taskID`, its data synced, over `relative`.
    public func place(taskID: Int64, at relative: RelativePath) throws(FerryError) -> LocalEntry {
        try place(staged: LocalRoot.partialName(taskID), at: relative)
    }

    /// Renames a staged file whose data is synced over its final path (replacing a directory in
    /// the way that the plan allowed to go). Returns the stat of the file now in place.
    private func place(staged: String, at relative: RelativePath) throws(FerryError) -> LocalEntry {
        boundDirectoryCache()
        let dir = try directoryFD(relative.parent, create: true)
        let name = baseName(relative)
        var renamed = renameat(try staging(), staged, dir, name) == 0
        if !renamed && (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST), let expected = replaceableDirectories[relative] {
            // The directory in the way goes only now, when its replacement is verified and synced.
            forgetDirectories(under: relative)
            try clearDirectory(in: dir, name, relative, expected: expected)
            renamed = renameat(try staging(), staged, dir, name) == 0
            if renamed { changes.append(.replacedDirectory(relative)) }
        }
        if !renamed {
            let code = errno
            if code == EISDIR || code == ENOTEMPTY || code == EEXIST {
                throw FerryError(.transfer, "\(display(relative)) is a directory where the manifest has a file",
                               hint: "remove the directory, or set delete = yes")
            }
            if code == EXDEV {
                throw .localIO("\(display(relative)) is on another filesystem than \(path)/.ferry; ferry cannot place it atomically")
            }
            throw .localIO("cannot rename the partial file to \(display(relative)): \(FileSystem.errorText(code))")
        }
        unsyncedDirectories.insert(relative.parent)
        var st = Glibc.stat()
        guard fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else {
            throw .localIO("cannot stat \(display(relative)) after placing it: \(FileSystem.errorText())")
        }
        return FileSystem.entry(from: st)
    }

    /// fsyncs every directory that gained or lost an entry since the last call.
    public func syncDirectories() throws(FerryError) {
        for relative in unsyncedDirectories {
            let fd = try directoryFD(relative, create: false)
            if fsync(fd) != 0 {
                throw .localIO("fsync of directory \(display(relative)) failed: \(FileSystem.errorText())")
            }
        }
        unsyncedDirectories.removeAll(keepingCapacity: true)
        boundDirectoryCache()
    }

    // MARK: metadata and deletion

    public func setMetadata(_ relative: RelativePath, mode: UInt32?, mtime: Timestamp?) throws(FerryError) -> LocalEntry {
        boundDirectoryCache()
        let dir = try directoryFD(relative.parent, create: false)
        var fd = openat(dir, baseName(relative), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw .localIO("cannot open \(display(relative)): \(FileSystem.errorText())") }
        defer { close(fd) }
        var st = Glibc.stat()
        if sharesInodes, fstat(fd, &st) == 0, st.st_nlink > 1 {
            let copy = try unsharedCopy(of: fd, stat: st, to: relative, in: dir)
            close(fd)
            fd = copy
        }
        if let mode, fchmod(fd, mode_t(mode)) != 0 { throw .localIO("cannot set the mode of \(display(relative)): \(FileSystem.errorText())") }
        if let mtime {
            var times = [timespec(tv_sec: 0, tv_nsec: LocalRoot.utimeOmit), mtime.timespecValue]
            if futimens(fd, &times) != 0 { throw .localIO("cannot set the mtime of \(display(relative)): \(FileSystem.errorText())") }
        }
        fstat(fd, &st)
        return FileSystem.entry(from: st)
    }

    /// A copy of the open file `fd` (stat `st`) put in its place at `relative`, so that a change
    /// to the copy's mode or mtime reaches no other name of the file (a hard link into another
    /// generation). Returns the copy, open.
    private func unsharedCopy(of fd: Int32, stat st: Glibc.stat, to relative: RelativePath, in dir: Int32) throws(FerryError) -> Int32 {
        let staging = try staging()
        let name = "copy-\(getpid())-\(st.st_ino).tmp"
        unlinkat(staging, name, 0)
        let copy = openat(staging, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode_t(st.st_mode & 0o7777))
        guard copy >= 0 else { throw .localIO("cannot copy \(display(relative)) to change its metadata alone: \(FileSystem.errorText())") }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var failed = false
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 {
                failed = n < 0
                break
            }
            var done = 0
            while done < n {
                let w = buffer.withUnsafeBytes { Glibc.write(copy, $0.baseAddress! + done, n - done) }
                if w < 0 && errno == EINTR { continue }
                guard w > 0 else { failed = true; break }
                done += w
            }
            if failed { break }
        }
        var times = [timespec(tv_sec: 0, tv_nsec: LocalRoot.utimeOmit), st.st_mtim]
        if failed || fchmod(copy, mode_t(st.st_mode & 0o7777)) != 0 || futimens(copy, &times) != 0 || fsync(copy) != 0
            || renameat(staging, name, dir, baseName(relative)) != 0 {
            let code = errno
            close(copy)
            unlinkat(staging, name, 0)
            throw .localIO("cannot copy \(display(relative)) to change its metadata alone: \(FileSystem.errorText(code))")
        }
        unsyncedDirectories.insert(relative.parent)
        return copy
    }

    /// Removes a file or symlink (never what a symlink points to). A path whose directory is gone
    /// holds nothing to remove.
    public func delete(_ relative: RelativePath) throws(FerryError) {
        boundDirectoryCache()
        let dir: Int32
        do { dir = try directoryFD(relative.parent, create: false) } catch {
            if error.cause == .local(errno: ENOENT) { return }
            throw error
        }
        if unlinkat(dir, baseName(relative), 0) != 0 && errno != ENOENT {
            throw .localIO("cannot delete \(display(relative)): \(FileSystem.errorText())")
        }
        unsyncedDirectories.insert(relative.parent)
    }

    /// Removes a directory if it is empty; returns whether it did.
    @discardableResult
    public func removeDirectoryIfEmpty(_ relative: RelativePath) -> Bool {
        guard let dir = try? directoryFD(relative.parent, create: false) else { return false }
        guard unlinkat(dir, baseName(relative), AT_REMOVEDIR) == 0 else { return false }
        if let fd = directories.removeValue(forKey: relative) { close(fd) }
        unsyncedDirectories.remove(relative)
        unsyncedDirectories.insert(relative.parent)
        return true
    }
}

/// A download's partial file as it was opened: its descriptor and its length then (an empty one
/// is written from offset 0, where it was opened).
public struct PartialFile {
    public let fd: Int32
    public let length: Int64

    public init(fd: Int32, length: Int64) {
        self.fd = fd
        self.length = length
    }
}

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
/// (data-safety rule 1). Here: opening the root, its files and its directories; scanning is in
/// `LocalRoot+Scan.swift`, writing (partial files, placing, metadata, deletion) in `LocalRoot+Writing.swift`.
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
    var stagingFD: Int32 = -1
    var directories: [RelativePath: Int32] = [:]
    var unsyncedDirectories = Set<RelativePath?>()
    let defaultMode: UInt32

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
    var changes: [Change] = []

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

    /// A path under the root as messages show it: escaped and shortened (`Printable`).
    func display(_ p: RelativePath?) -> String { Printable.name(p.map { path + "/" + $0.string } ?? path) }

    /// Keeps the cache of open directories bounded (a tree may hold more directories than a process
    /// may open files). Called where no directory descriptor is held yet; `syncDirectories` reopens
    /// what it needs.
    func boundDirectoryCache() {
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

    func baseName(_ p: RelativePath) -> String {
        guard let slash = p.string.utf8.lastIndex(of: UInt8(ascii: "/")) else { return p.string }
        return String(p.string.utf8[p.string.utf8.index(after: slash)...])!
    }
}

/// A download's partial file as it was opened: its descriptor and its length then (an empty one
/// is written from offset 0, where it was opened).
public struct PartialFile {
    public let fd: Int32
    public let length: Int64
    /// The SHA-256 of all `length` bytes, where the one who wrote them in this process hashed them
    /// as it wrote (a pack's member): the download then does not read them back to hash them.
    public var wholeDigest: SHA256Digest?

    public init(fd: Int32, length: Int64) {
        self.fd = fd
        self.length = length
    }
}

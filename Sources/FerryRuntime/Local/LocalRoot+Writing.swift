import CSystem
import Glibc
import FerryCore

/// Writing under a root: partial files and a remote's uploads staged in `.ferry/`, put in place
/// (one rename each) and made durable; metadata; deletions; a directory in the way of a listed
/// file cleared. Never through a symlink, as everything of `LocalRoot`.
extension LocalRoot {
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
    /// `stray` says what it was: that file then starts again from zero. `existing`: the caller
    /// expects the file to be there (a pack wrote it), so it is opened as it is first, without the
    /// creating lookup that locks the directory; anything else there takes the usual way.
    public func openPartial(taskID: Int64, existing: Bool = false) throws(FerryError) -> (partial: PartialFile, stray: LocalEntry.Kind?) {
        precondition(role == .local, "a remote's uploads are created with createUpload")
        let staging = try staging()
        let name = LocalRoot.partialName(taskID)
        if existing, let found = LocalRoot.openRegular(in: staging, name) { return (found, nil) }
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

    /// The regular file `name` in `directory`, opened for reading and writing as it is; nil for
    /// anything else or nothing (a symlink is not followed, a FIFO does not block).
    private static func openRegular(in directory: Int32, _ name: String) -> PartialFile? {
        let fd = openat(directory, name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var st = Glibc.stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            return nil
        }
        return PartialFile(fd: fd, length: Int64(st.st_size))
    }

    public func removePartial(taskID: Int64) {
        if let fd = try? staging() { unlinkat(fd, LocalRoot.partialName(taskID), 0) }
    }

    /// Removes partial files no task owns any more.
    public func removePartials(keeping ids: Set<Int64>) {
        guard let (fd, partials) = stagedPartials() else { return }
        for (raw, id) in partials where !ids.contains(id) { unlinkat(fd, raw, 0) }
    }

    /// The length of each task's partial file that is a regular file, by task.
    public func partialLengths() -> [Int64: Int64] {
        guard let (fd, partials) = stagedPartials() else { return [:] }
        var out: [Int64: Int64] = [:]
        for (raw, id) in partials {
            var st = Glibc.stat()
            guard fstatat(fd, raw, &st, AT_SYMLINK_NOFOLLOW) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            out[id] = Int64(st.st_size)
        }
        return out
    }

    /// The staging directory's descriptor and the names in it that are a task's partial file
    /// (`partialName`), each NUL-terminated, with its task.
    private func stagedPartials() -> (fd: Int32, partials: [(raw: [CChar], id: Int64)])? {
        guard let (fd, names) = stagingNames() else { return nil }
        return (fd, names.compactMap { raw in
            let name = String(decoding: raw.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard name.hasSuffix(".part"), let id = Int64(name.dropLast(5)) else { return nil }
            return (raw, id)
        })
    }

    /// The staging directory's descriptor and the names in it (each NUL-terminated). Listed from
    /// its start: the listing reads a duplicate of the descriptor, which shares its position with
    /// every earlier listing, left at the end.
    private func stagingNames() -> (fd: Int32, names: [[CChar]])? {
        guard let fd = try? staging(), let dir = fdopendir(dup(fd)) else { return nil }
        defer { closedir(dir) }
        rewinddir(dir)
        return (fd, LocalRoot.names(dir))
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

    /// `.remote`: removes the one temporary upload `name` (`createUpload`'s): in a directory others
    /// write too (a report location), theirs of the same owner are left to them.
    public func removeUpload(named name: String) {
        guard let fd = try? staging() else { return }
        unlinkat(fd, name, 0)
    }

    /// `.remote`: removes the temporary uploads of each of `owners`; with `writtenBefore` (seconds
    /// since the epoch, the file system's time), only those last written before it.
    public func removeUploads(owners: Set<String>, writtenBefore cutoff: Double? = nil) {
        guard let (fd, names) = stagingNames() else { return }
        for raw in names {
            let name = String(decoding: raw.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let owner = name.firstIndex(of: "-").map { String(name[..<$0]) } ?? name
            guard owners.contains(owner) else { continue }
            if let cutoff {
                var st = Glibc.stat()
                guard fstatat(fd, raw, &st, AT_SYMLINK_NOFOLLOW) == 0, Timestamp(st.st_mtim).timeInterval < cutoff else { continue }
            }
            unlinkat(fd, raw, 0)
        }
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
        return try place(staged: staged, at: relative, fd: fd)
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

    /// Renames the partial file of `taskID` (open as `fd`), its data synced, over `relative`.
    public func place(taskID: Int64, at relative: RelativePath, fd: Int32) throws(FerryError) -> LocalEntry {
        try place(staged: LocalRoot.partialName(taskID), at: relative, fd: fd)
    }

    /// Renames a staged file whose data is synced over its final path (replacing a directory in
    /// the way that the plan allowed to go). Returns the stat of the file now in place, taken
    /// through `fd`, the staged file open: the inode renamed, with no second lookup of its path.
    private func place(staged: String, at relative: RelativePath, fd: Int32) throws(FerryError) -> LocalEntry {
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
        guard fstat(fd, &st) == 0 else {
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

    // MARK: a directory in the way of a listed file

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
}

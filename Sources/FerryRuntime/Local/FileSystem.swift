import Glibc
import FerryCore

/// Small POSIX helpers shared by the runtime. Errors name the path and the system's reason.
public enum FileSystem {
    public static func errorText(_ code: Int32 = errno) -> String { String(cString: strerror(code)) }

    /// Writes `text` to stderr as it is (for warnings from below the command line's output).
    public static func writeStderr(_ text: String) {
        var copy = text
        copy.withUTF8 { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }

    /// `mkdir -p`.
    public static func makeDirectories(_ path: String, mode: mode_t = 0o755) throws(FerryError) {
        var current = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            current += "/" + part
            if mkdir(current, mode) != 0 && errno != EEXIST {
                let code = errno
                throw .localIO("cannot create directory \(current): \(errorText(code))",
                               hint: code == EACCES ? "run as a user that may write there, or choose another path" : nil)
            }
        }
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
            throw .localIO("\(path) exists but is not a directory")
        }
    }

    /// A directory only its owner may enter (ferry's state, and the directories in it): made with
    /// mode 0700, and brought back to 0700 when an earlier ferry or another umask left it wider.
    public static func makePrivateDirectory(_ path: String) throws(FerryError) {
        try makeDirectories(path, mode: 0o700)
        var st = stat()
        if stat(path, &st) == 0 && st.st_mode & 0o077 != 0 && chmod(path, 0o700) != 0 {
            throw .localIO("cannot make \(Printable.name(path)) private (mode 0700): \(errorText())",
                           hint: "run ferry as the directory's owner, or choose another [agent] state")
        }
    }

    /// Makes an existing file private to its owner (mode 0600); a missing one is left missing.
    public static func makePrivate(_ path: String) {
        var st = stat()
        if lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG && st.st_mode & 0o077 != 0 { chmod(path, 0o600) }
    }

    /// The whole file, refusing anything larger than `limit` bytes (and anything but a regular file).
    public static func readFile(_ path: String, limit: Int = 64 << 20) throws(FerryError) -> [UInt8] {
        let fd = try openRegularFile(path)
        defer { close(fd) }
        return try read(fd: fd, limit: limit, shown: path)
    }

    /// Opens `path` for reading without blocking, and only if it is a regular file: a FIFO or a
    /// device where a file was expected is refused at once instead of holding the thread in
    /// `open` or `read`. The errno is the error's cause.
    public static func openRegularFile(_ path: String) throws(FerryError) -> Int32 {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            throw FerryError(.localIO, "cannot read \(Printable.name(path)): \(errorText(code))", cause: .local(errno: code))
        }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            let what = (st.st_mode & S_IFMT) == S_IFDIR ? "a directory" : "not a regular file (a FIFO, socket or device)"
            throw FerryError(.localIO, "cannot read \(Printable.name(path)): it is \(what)", cause: .local(errno: EINVAL))
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return fd
    }

    /// A file read or mapped that holds more than `limit` bytes.
    static func tooLarge(_ path: String, limit: Int) -> FerryError {
        .localIO("\(Printable.name(path)) is larger than \(Units.formatBytes(Int64(limit)))")
    }

    /// The rest of an open file, refusing anything larger than `limit` bytes.
    public static func read(fd: Int32, limit: Int, shown path: String) throws(FerryError) -> [UInt8] {
        var out: [UInt8] = []
        var st = stat()
        if fstat(fd, &st) == 0 && st.st_size > 0 && Int(st.st_size) <= limit { out.reserveCapacity(Int(st.st_size)) }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .localIO("cannot read \(Printable.name(path)): \(errorText())")
            }
            if n == 0 { break }
            out.append(contentsOf: buffer[0..<n])
            if out.count > limit { throw tooLarge(path, limit: limit) }
        }
        return out
    }

    /// Up to `count` bytes of `fd` at `offset` (fewer where it ends or cannot be read).
    public static func read(fd: Int32, at offset: Int64, count: Int64) -> [UInt8] {
        guard count > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: Int(count))
        var got = 0
        out.withUnsafeMutableBytes { raw in
            while got < raw.count {
                let n = pread(fd, raw.baseAddress! + got, raw.count - got, off_t(offset) + off_t(got))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                got += n
            }
        }
        return Array(out.prefix(got))
    }

    /// Writes all of `count` bytes from `bytes` to `fd` at `offset`; false when it could not.
    public static func write(fd: Int32, _ bytes: UnsafeRawPointer, count: Int, at offset: Int64) -> Bool {
        var done = 0
        while done < count {
            let n = pwrite(fd, bytes + done, count - done, off_t(offset) + off_t(done))
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            done += n
        }
        return true
    }

    /// Writes all of `bytes` to an open file.
    public static func write(fd: Int32, bytes: [UInt8], shown path: String) throws(FerryError) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                throw FerryError(.localIO, "cannot write \(Printable.name(path)): \(errorText(code))", cause: .local(errno: code))
            }
            offset += n
        }
    }

    /// Creates a file for writing beside `path` (in the same directory, so a rename moves it into
    /// place atomically): exclusively, never through a symlink, under a name no one can guess, so
    /// a symlink or a hard link planted in a directory others can write is never written through
    /// (docs/design.md, data-safety rule 12). Its mode is `mode` whatever the umask.
    public static func createTemporary(beside path: String, mode: mode_t) throws(FerryError) -> (fd: Int32, path: String) {
        // By bytes: a search by Character walks grapheme clusters (thousands of instructions a path).
        let slash = path.utf8.lastIndex(of: UInt8(ascii: "/"))
        let directory = slash.map { String(path[...$0]) } ?? ""
        let name = slash.map { String(path[path.utf8.index(after: $0)...]) } ?? path
        for _ in 0..<8 {
            let temporary = directory + "." + name + ".tmp-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
            let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
            if fd >= 0 {
                fchmod(fd, mode)
                return (fd, temporary)
            }
            if errno != EEXIST { break }
        }
        let code = errno
        throw FerryError(.localIO, "cannot create a temporary file beside \(Printable.name(path)): \(errorText(code))",
                         hint: code == EACCES || code == EROFS ? "check that ferry may write to that directory" : nil, cause: .local(errno: code))
    }

    /// Writes a file so that readers see the old content or the new, never a mix: a temporary file
    /// (`createTemporary`), fsync, rename over `path` (a symlink there is replaced, not followed),
    /// fsync of the directory. With `replacing: false` an existing `path` is left alone and refused
    /// (the new file is linked into place, which fails when the name is taken). With `synced: false`
    /// nothing is synced: for files whose name checks their content (a crash that tears one is
    /// found, not trusted), written many at a time and synced once by the caller if at all.
    public static func writeAtomically(_ path: String, bytes: [UInt8], mode: mode_t = 0o644, replacing: Bool = true,
                                       synced: Bool = true) throws(FerryError) {
        let (fd, temp) = try createTemporary(beside: path, mode: mode)
        do throws(FerryError) {
            try write(fd: fd, bytes: bytes, shown: temp)
            if synced && fsync(fd) != 0 { throw FerryError(.localIO, "cannot sync \(Printable.name(temp)): \(errorText())") }
        } catch {
            close(fd)
            unlink(temp)
            throw error
        }
        close(fd)
        if !replacing {
            defer { unlink(temp) }
            guard link(temp, path) == 0 else {
                let code = errno
                throw FerryError(.localIO, "cannot write \(Printable.name(path)): \(code == EEXIST ? "it already exists" : errorText(code))",
                                 cause: .local(errno: code))
            }
            if synced { syncDirectory(containing: path) }
            return
        }
        guard rename(temp, path) == 0 else {
            let code = errno
            unlink(temp)
            throw .localIO("cannot rename \(Printable.name(temp)) to \(Printable.name(path)): \(errorText(code))")
        }
        if synced { syncDirectory(containing: path) }
    }

    /// Moves `source` over `path` (same directory) and syncs the directory, so the change survives a crash.
    public static func replace(_ path: String, with source: String) throws(FerryError) {
        guard rename(source, path) == 0 else { throw .localIO("cannot rename \(source) to \(path): \(errorText())") }
        syncDirectory(containing: path)
    }

    public static func syncDirectory(containing path: String) {
        let dir = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 {
            fsync(fd)
            close(fd)
        }
    }

    /// Flushes everything written so far to disk (many files, one call: Glibc does not export
    /// `syncfs` to Swift, so `sync`), then the directory `path`.
    public static func syncEverything(then path: String) {
        sync()
        syncDirectory(containing: path + "/.")
    }

    /// The names in a directory (not `.` and `..`); none when it cannot be read.
    public static func names(in directory: String) -> [String] {
        var out: [String] = []
        forEachName(in: directory) { out.append($0) }
        return out
    }

    /// Each name in `directory` but `.` and `..`, one at a time (a cache of 60,000 objects is not
    /// held as 60,000 strings at once).
    public static func forEachName(in directory: String, _ body: (String) -> Void) {
        guard let dir = opendir(directory) else { return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = name(of: entry)
            if name != "." && name != ".." { body(name) }
        }
    }

    /// The name in a directory entry, read where `readdir` put it. A record in glibc's buffer ends
    /// with its name's NUL: a copy of the whole `dirent` (or of `d_name`'s 256 bytes) reads past
    /// it, and where the buffer ends at a page no one mapped after it, the process crashes (seen
    /// under load: SIGSEGV in about half the runs of an unchanged pull sweeping its object cache).
    public static func name(of entry: UnsafeMutablePointer<dirent>) -> String {
        withUnsafePointer(to: &entry.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
    }

    /// Lets a process keep many files and directories open at once.
    public static func raiseOpenFileLimit() {
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = min(limit.rlim_max, 65536)
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
    }

    /// A file's mtime in seconds since the epoch, or nil when it cannot be read.
    public static func modificationTime(_ path: String) -> Double? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return Timestamp(st.st_mtim).timeInterval
    }

    public static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    static func entry(from st: stat) -> LocalEntry {
        let kind: LocalEntry.Kind
        switch st.st_mode & S_IFMT {
        case S_IFREG: kind = .file
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symlink
        default: kind = .other
        }
        return LocalEntry(kind: kind, size: Int64(st.st_size), mtime: Timestamp(st.st_mtim), ctime: Timestamp(st.st_ctim),
                          inode: UInt64(st.st_ino), mode: UInt32(st.st_mode & 0o7777))
    }
}

/// A time as the kernel gives and takes it (`stat`, `futimens`).
extension Timestamp {
    init(_ ts: timespec) {
        self.init(seconds: Int64(ts.tv_sec), nanoseconds: Int32(ts.tv_nsec))
    }

    var timespecValue: timespec { timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds)) }
}

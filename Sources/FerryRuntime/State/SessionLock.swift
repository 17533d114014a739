import Glibc
import FerryCore

/// One writer per session: an exclusive `flock` on `<state>/locks/<session>.lock`. The kernel drops
/// the lock when the holder dies, so a lock left by a crashed process is recovered by itself.
public final class SessionLock {
    private let fd: Int32

    public convenience init(stateDirectory: String, session: String) throws(FerryError) {
        try self.init(stateDirectory: stateDirectory, name: session) { holder in
            FerryError(.busy, "session '\(session)' is busy: ferry (pid \(holder)) is transferring for it",
                       hint: "wait for that run to finish, or stop it (kill -TERM \(holder)) and run again")
        }
    }

    /// The one `ferry agent` of a state directory (`_agent` is a name no session can have).
    public static func agent(stateDirectory: String) throws(FerryError) -> SessionLock {
        try SessionLock(stateDirectory: stateDirectory, name: "_agent") { holder in
            FerryError(.busy, "a ferry agent (pid \(holder)) already runs with the state directory \(stateDirectory)",
                       hint: "one agent runs every session of a config; stop that one first (kill -TERM \(holder)), or give this config its own [agent] state")
        }
    }

    /// One push at a time to one remote among the sessions of a state directory (two sessions, or
    /// two configs sharing a state, naming the same remote and manifest): the remote's manifest
    /// and the objects a push collects are the publisher's alone.
    public static func publisher(stateDirectory: String, remote: String, manifest: String, session: String) throws(FerryError) -> SessionLock {
        let name = "publish-" + String(SHA256Hasher.digest(of: Array((remote + "\n" + manifest).utf8)).hex.prefix(24))
        return try SessionLock(stateDirectory: stateDirectory, name: name, note: session) { holder in
            FerryError(.busy, "another push to \(Printable.name(remote)) is running (\(holder)): one publisher of a remote at a time",
                       hint: "wait for it to finish; two sessions that publish to one remote take turns")
        }
    }

    /// One publisher of a local directory at a time: `ferry manifest build` of the directory, and a
    /// push to it as a `file://` remote, take an exclusive `flock` on `<directory>/.ferry/publish.lock`
    /// (opened without following a symlink at `.ferry` or at the lock). Two cron jobs building one
    /// tree would otherwise each remove objects the other's root names.
    public static func publisher(directory: String, what: String) throws(FerryError) -> SessionLock {
        let dirFD = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard dirFD >= 0 else { throw .localIO("cannot open \(Printable.name(directory)) to lock it: \(FileSystem.errorText())") }
        defer { close(dirFD) }
        // Something else planted at ferry's reserved name (a symlink, a file) is removed, never
        // followed, as `LocalRoot` repairs it; readable by all, as `manifest build` serves `.ferry/meta`.
        let shown = Printable.name(directory + "/" + RelativePath.reservedTopLevel)
        let own = try LocalRoot.openOrMakeDirectory(in: dirFD, RelativePath.reservedTopLevel, mode: 0o755, shown: shown, replacing: true).fd
        guard own >= 0 else { throw .localIO("cannot open \(shown) to lock it: \(FileSystem.errorText())") }
        defer { close(own) }
        let path = directory + "/" + RelativePath.reservedTopLevel + "/publish.lock"
        let fd = openat(own, "publish.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw .localIO("cannot open the lock \(Printable.name(path)): \(FileSystem.errorText())") }
        return try SessionLock(fd: fd, path: path, note: what) { holder in
            FerryError(.busy, "\(Printable.name(directory)) is being published by another process (\(holder)): one publisher of a directory at a time",
                       hint: "wait for it to finish and run again; schedule the jobs that publish this directory so they do not overlap")
        }
    }

    private convenience init(stateDirectory: String, name: String, note: String? = nil, busy: (String) -> FerryError) throws(FerryError) {
        let dir = stateDirectory + "/locks"
        try FileSystem.makePrivateDirectory(dir)
        let path = dir + "/" + name + ".lock"
        let fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .localIO("cannot open the session lock \(path): \(FileSystem.errorText())") }
        fchmod(fd, 0o600)
        try self.init(fd: fd, path: path, note: note, busy: busy)
    }

    /// Takes the lock on `fd` (owned from now on) or throws `busy` with what the holder wrote.
    private init(fd: Int32, path: String, note: String?, busy: (String) -> FerryError) throws(FerryError) {
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            var buffer = [UInt8](repeating: 0, count: 128)
            let n = pread(fd, &buffer, 127, 0)
            close(fd)
            guard code == EWOULDBLOCK else { throw .localIO("cannot lock \(path): \(FileSystem.errorText(code))") }
            let said = n > 0 ? Printable.name(String(decoding: buffer[0..<n], as: UTF8.self).trimmingSpaces()) : ""
            throw busy(said.isEmpty ? "another process" : said)
        }
        let pid = Array((note.map { "pid \(getpid()), \($0)" } ?? "\(getpid())").utf8 + [0x0A])
        ftruncate(fd, 0)
        _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        self.fd = fd
    }

    deinit {
        ftruncate(fd, 0)
        flock(fd, LOCK_UN)
        close(fd)
    }
}

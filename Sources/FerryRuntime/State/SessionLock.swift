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

    private init(stateDirectory: String, name: String, busy: (String) -> FerryError) throws(FerryError) {
        let dir = stateDirectory + "/locks"
        try FileSystem.makePrivateDirectory(dir)
        let path = dir + "/" + name + ".lock"
        let fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .localIO("cannot open the session lock \(path): \(FileSystem.errorText())") }
        fchmod(fd, 0o600)
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            var buffer = [UInt8](repeating: 0, count: 32)
            let n = pread(fd, &buffer, 31, 0)
            close(fd)
            guard code == EWOULDBLOCK else { throw .localIO("cannot lock \(path): \(FileSystem.errorText(code))") }
            let holder = n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self).trimmingSpaces() : "another process"
            throw busy(holder)
        }
        let pid = Array("\(getpid())\n".utf8)
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

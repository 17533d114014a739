import Foundation

/// A child process started with `posix_spawn` and a clean signal mask. (Foundation's `Process`
/// spawns from dispatch threads, whose blocked signals the child inherits: SIGTERM would not reach it.)
final class Child {
    let pid: pid_t
    private(set) var status: Int32?

    init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
         stdout: String = "/dev/null", stderr: String = "/dev/null") throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigfillset(&defaults)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)
        let env = environment ?? TestEnvironment.variables
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else { throw TestFailure("cannot start \(executable): \(String(cString: strerror(rc)))") }
        self.pid = pid
    }

    /// Waits for exit; returns the exit status (128 + signal when killed), or nil at the timeout.
    @discardableResult
    func wait(timeout: Double) -> Int32? {
        if let status { return status }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            var raw: Int32 = 0
            let rc = waitpid(pid, &raw, WNOHANG)
            if rc == pid {
                let signal = raw & 0x7F
                status = signal == 0 ? (raw >> 8) & 0xFF : 128 + signal
                return status
            }
            if rc < 0 { status = -1; return status }
            if Date() >= deadline { return nil }
            usleep(2_000)
        }
    }

    var isRunning: Bool { status == nil && wait(timeout: 0) == nil }

    func signal(_ sig: Int32) { if status == nil { kill(pid, sig) } }

    /// SIGTERM, then SIGKILL if it lingers; always reaped.
    func stop() {
        guard status == nil else { return }
        signal(SIGTERM)
        if wait(timeout: 5) == nil {
            signal(SIGKILL)
            wait(timeout: 5)
        }
    }
}

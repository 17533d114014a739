import CSystem
import Glibc
import FerryCore

/// One run of a hook's program (or of a helper ferry asks, like `busctl`): spawned with the
/// caller's environment plus `environment`, waited for, stopped at `timeout`.
enum HookProcess {
    enum Result: Equatable {
        case exited(Int32)
        case signalled(Int32)
        case timedOut
        case cannotStart(String)
    }

    /// Its output goes to ferry's stderr. `timeout` is measured on `clock`.
    static func run(_ command: HookCommand, environment: [String], timeout: Double, clock: any Clock) -> Result {
        run(command, environment: environment, timeout: timeout, clock: clock, capture: nil)
    }

    /// Its standard output (the first 64 KiB) is returned; its stderr is ferry's.
    static func output(of command: HookCommand, timeout: Double, clock: any Clock) -> (Result, [UInt8]) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return (.cannotStart(FileSystem.errorText()), []) }
        // pipe2 is not exported to Swift here; the end of the child's output is its exit, not EOF.
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var output: [UInt8] = []
        let result = run(command, environment: [], timeout: timeout, clock: clock, capture: (fds[0], fds[1], { output += $0 }))
        close(fds[0])
        return (result, output)
    }

    /// Variables of ferry's environment a hook does not get: ferry's own (`FERRY_*`, which the
    /// hook's event sets), systemd's for ferry's process alone (notify, watchdog, sockets), and
    /// secrets — every `AWS_*` (keys, session tokens, the container token and where credentials
    /// come from) and systemd's `CREDENTIALS_DIRECTORY`. A hook that needs a secret reads it itself.
    static func withheld(_ name: String) -> Bool {
        name.hasPrefix("FERRY_") || name.hasPrefix("AWS_")
            || ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "CREDENTIALS_DIRECTORY"].contains(name)
    }

    /// Where a captured child's stdout goes: the pipe's ends, and what takes its bytes.
    private typealias Capture = (read: Int32, write: Int32, take: ([UInt8]) -> Void)

    private static func run(_ command: HookCommand, environment: [String], timeout: Double, clock: any Clock, capture: Capture?) -> Result {
        let (pid, rc) = spawn(command, environment: environment, capture: capture)
        guard rc == 0 else { return .cannotStart(String(cString: strerror(rc))) }
        return waitForExit(of: pid, timeout: timeout, clock: clock, capture: capture)
    }

    /// Starts the child in a group of its own with only stdin, stdout, stderr; returns its pid and posix_spawnp's result.
    private static func spawn(_ command: HookCommand, environment: [String], capture: Capture?) -> (pid_t, Int32) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if let capture {
            posix_spawn_file_actions_adddup2(&actions, capture.write, 1)
        } else {
            posix_spawn_file_actions_adddup2(&actions, 2, 1)
        }
        // Nothing of ferry's but stdin, stdout and stderr: not its connections to the remote, not
        // libcurl's socketpair, not the state database (a daemonizing hook would keep them open).
        ferry_spawn_close_from(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigfillset(&defaults)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        // A group of its own, so a timeout stops what the hook started too.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)

        let argv = command.arguments.map { strdup($0) } + [nil]
        let envp = (inherited(besides: environment) + environment).map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, command.program, &actions, &attributes, argv, envp)
        if let capture {
            close(capture.write)
            _ = fcntl(capture.read, F_SETFL, fcntl(capture.read, F_GETFL) | O_NONBLOCK)
        }
        return (pid, rc)
    }

    /// The variables of ferry's environment the child gets: neither withheld nor set by `environment`.
    private static func inherited(besides environment: [String]) -> [String] {
        let names = Set(environment.compactMap { $0.split(separator: "=", maxSplits: 1).first.map(String.init) })
        var inherited: [String] = []
        var p = environ
        while let entry = p.pointee {
            let text = String(cString: entry)
            let name = text.split(separator: "=", maxSplits: 1).first.map(String.init) ?? text
            if !names.contains(name) && !withheld(name) { inherited.append(text) }
            p += 1
        }
        return inherited
    }

    /// How the child ended, its output taken as it comes; at `timeout` its group gets SIGTERM, 2 s later SIGKILL.
    private static func waitForExit(of pid: pid_t, timeout: Double, clock: any Clock, capture: Capture?) -> Result {
        var taken = 0
        /// Takes what the child wrote so far (its pipe must not fill up while we wait).
        func drain() {
            guard let capture else { return }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(capture.read, &buffer, buffer.count)
                guard n > 0 else { return }
                if taken < 65_536 { capture.take(Array(buffer[0..<min(n, 65_536 - taken)])) }
                taken += n
            }
        }

        let deadline = clock.monotonic() + timeout
        var killAt: Double?
        var pause: UInt32 = 1_000
        while true {
            var status: Int32 = 0
            drain()
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid {
                drain()
                if killAt != nil { return .timedOut }
                let signal = status & 0x7F
                return signal == 0 ? .exited((status >> 8) & 0xFF) : .signalled(signal)
            }
            if r < 0 && errno != EINTR { return .cannotStart("lost track of it: \(String(cString: strerror(errno)))") }
            let now = clock.monotonic()
            if killAt == nil && now >= deadline {
                kill(-pid, SIGTERM)
                killAt = now + 2
            } else if let at = killAt, now >= at {
                kill(-pid, SIGKILL)
                killAt = .infinity
            }
            usleep(pause)
            pause = min(pause * 2, 50_000)
        }
    }
}

import Foundation
import Synchronization
import Testing

/// Runs the real `ferry` binary and inspects what it did.
enum Harness {
    /// The package's root directory (this file is Tests/FerryIntegrationTests/Support/Harness.swift).
    static let packageRoot: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<4 { url.deleteLastPathComponent() }
        return url.path
    }()

    /// `ferry`, built next to the test bundle by `swift build --build-tests`; `FERRY_TEST_BINARY`
    /// names another one (an earlier build, to see a test fail without the fix it tests).
    static let ferryBinary: String = {
        if let other = ProcessInfo.processInfo.environment["FERRY_TEST_BINARY"], !other.isEmpty { return other }
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("ferry").path
        if FileManager.default.isExecutableFile(atPath: beside) { return beside }
        return packageRoot + "/.build/debug/ferry"
    }()

    /// Where the tests' directories go; removed when the test process exits, if nothing is left in it.
    static let base: String = {
        let base = (ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp") + "/ferry-tests"
        atexit { rmdir(Harness.base) }
        return base
    }()

    /// A fresh directory for one test, removed by the caller's `defer`.
    static func temporaryDirectory(_ label: String) -> String {
        // Nearly every test makes one first: the test process is isolated from then on.
        _ = TestEnvironment.variables
        try? FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        let path = base + "/\(label)-\(UUID().uuidString.prefix(8))"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    static func remove(_ path: String) { try? FileManager.default.removeItem(atPath: path) }
}

/// The environment of every process the tests start, and of the test process itself (what runs
/// in it, an `S3Remote` a test makes, reads the same): no `AWS_*` variable of the developer's or
/// CI's (a profile or keys would sign with real credentials, a container credentials URI would
/// send requests off this machine), the EC2 instance metadata service off (ferry would ask
/// 169.254.169.254 for credentials), and a HOME of its own without `~/.aws`. A test that wants a
/// source sets its variables (or its own HOME) for the ferry it runs.
enum TestEnvironment {
    /// An empty directory, removed at exit with whatever a program run there left in it (fish,
    /// say, makes ~/.local/share/fish).
    static let home: String = {
        let path = Harness.base + "/home-\(getpid())"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        atexit { Harness.remove(TestEnvironment.home) }
        return path
    }()

    static let variables: [String: String] = {
        var env = ProcessInfo.processInfo.environment
        env.removeValue(forKey: "FERRY_CONFIG")
        for key in env.keys where key.hasPrefix("AWS_") {
            env.removeValue(forKey: key)
            unsetenv(key)
        }
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        env["HOME"] = home
        setenv("AWS_EC2_METADATA_DISABLED", "true", 1)
        setenv("HOME", home, 1)
        return env
    }()
}

/// What one `ferry` invocation did.
struct FerryRun {
    let exitCode: Int32
    let stdout: String
    let stderr: String

    /// stdout parsed as JSON lines (for --json runs).
    var events: [[String: Any]] {
        stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    func events(named name: String) -> [[String: Any]] { events.filter { $0["event"] as? String == name } }

    var output: String { stdout + stderr }
}

/// Runs a program to completion (or kills it at the timeout) with output captured in files.
@discardableResult
func runProcess(_ executable: String, _ arguments: [String], environment: [String: String] = [:], timeout: Double = 120) -> FerryRun {
    let dir = Harness.temporaryDirectory("proc")
    defer { Harness.remove(dir) }
    var env = TestEnvironment.variables
    for (k, v) in environment { env[k] = v }
    let child: Child
    do { child = try Child(executable, arguments, environment: env, stdout: dir + "/out", stderr: dir + "/err") } catch {
        return FerryRun(exitCode: -1, stdout: "", stderr: "\(error)")
    }
    var status = child.wait(timeout: timeout)
    if status == nil {
        child.signal(SIGKILL)
        status = child.wait(timeout: 10)
        Issue.record("\(executable) \(arguments.joined(separator: " ")) did not finish within \(timeout)s")
    }
    // Decoded leniently: a stray byte that is not UTF-8 must not turn the whole output into "".
    let out = FileManager.default.contents(atPath: dir + "/out").map { String(decoding: $0, as: UTF8.self) } ?? ""
    let err = FileManager.default.contents(atPath: dir + "/err").map { String(decoding: $0, as: UTF8.self) } ?? ""
    return FerryRun(exitCode: status ?? -1, stdout: out, stderr: err)
}

@discardableResult
func ferry(_ arguments: [String], environment: [String: String] = [:], timeout: Double = 120) -> FerryRun {
    runProcess(Harness.ferryBinary, arguments, environment: environment, timeout: timeout)
}

/// Runs ferry and measures its peak resident set size (KiB). The child is forked from a small
/// python3 process: `posix_spawn` shares the caller's memory until exec, and Linux counts that
/// memory in the child's peak, so measuring from the test process itself would count the test.
func ferryWithPeakRSS(_ arguments: [String], timeout: Double = 120) -> (run: FerryRun, peakKiB: Int) {
    let script = """
        import os, sys
        pid = os.fork()
        if pid == 0:
            os.execv(sys.argv[1], sys.argv[1:])
        _, status, usage = os.wait4(pid, 0)
        sys.stderr.write("\\nFERRY_PEAK_RSS_KIB=%d\\n" % usage.ru_maxrss)
        sys.exit(os.waitstatus_to_exitcode(status))
        """
    let run = runProcess("python3", ["-c", script, Harness.ferryBinary] + arguments, timeout: timeout)
    var peak = -1
    var stderr = run.stderr
    if let marker = stderr.range(of: "\nFERRY_PEAK_RSS_KIB=") {
        peak = Int(stderr[marker.upperBound...].trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        stderr.removeSubrange(marker.lowerBound...)
    }
    return (FerryRun(exitCode: run.exitCode, stdout: run.stdout, stderr: stderr), peak)
}

extension String {
    /// Writes the text to a temporary name beside `path` and renames it into place: atomic, like
    /// Foundation's `atomically: true`, without the `/tmp/TemporaryDirectory.*` that leaves behind.
    /// The file is opened close-on-exec (Foundation's writer is not): a server or ferry that another
    /// test starts meanwhile must not inherit it open for writing, or running it as a script (a hook,
    /// a fake `busctl`) fails with ETXTBSY for as long as that process lives.
    func writeReplacing(_ path: String, mode: mode_t = 0o644) throws {
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let bytes = Array(utf8)
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let code = errno
                close(fd)
                unlink(temporary)
                throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
            }
            written += n
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
    }
}

/// Waits until `condition` holds (polling every 50 ms), or `timeout` passes; returns whether it held.
func eventually(_ timeout: Double = 20, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        usleep(50_000)
    }
    return condition()
}

import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// One test's world: a published tree (the remote), a local mirror, ferry's state and a config
/// file, all under a fresh temporary directory.
final class Sandbox {
    let directory: String
    /// Where the remote content is published (served by a server, or used as a file:// remote).
    let published: String
    let local: String
    let state: String
    let config: String

    init(_ label: String, published: String? = nil) {
        directory = Harness.temporaryDirectory(label)
        self.published = published ?? directory + "/published"
        local = directory + "/mirror"
        state = directory + "/state"
        config = directory + "/ferry.conf"
        try? FileManager.default.createDirectory(atPath: self.published, withIntermediateDirectories: true)
    }

    deinit { Harness.remove(directory) }

    /// Writes the config for one session `test` pulling from `remote`.
    /// A config with one push session, `up`, publishing `src` to `remote` with `lines` added.
    func configure(push remote: String, from src: String, _ lines: [String]) throws {
        try (["[agent]", "state = \(state)", "[session up]", "direction = push", "remote = \(remote)", "local = \(src)"] + lines)
            .joined(separator: "\n").appending("\n").writeReplacing(config)
    }

    func configure(remote: String, session: [String] = [], agent: [String] = []) {
        let text = (["[agent]", "state = \(state)", "transfers = 4"] + agent
            + ["", "[session test]", "remote = \(remote)", "local = \(local)"] + session).joined(separator: "\n") + "\n"
        try! text.writeReplacing(config)
    }

    @discardableResult
    func publish(_ path: String, _ content: String, mode: Int? = nil) -> String {
        publish(path, Data(content.utf8), mode: mode)
    }

    @discardableResult
    func publish(_ path: String, _ data: Data, mode: Int? = nil) -> String {
        let full = published + "/" + path
        try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try! data.write(to: URL(fileURLWithPath: full))
        if let mode { chmod(full, mode_t(mode)) }
        markRepublished(path)
        return full
    }

    func unpublish(_ path: String) { try! FileManager.default.removeItem(atPath: published + "/" + path) }

    /// The publication clock: a day ago, one second later at each publication.
    private var publications = 0
    private let clockStart = time(nil) - 86_400

    /// Publishes a manifest (the mtime of each publication comes from `markRepublished`).
    @discardableResult
    func buildManifest(_ extra: [String] = []) -> FerryRun {
        let run = ferry(["manifest", "build", published] + extra)
        #expect(run.exitCode == 0, "manifest build failed: \(run.output)")
        markRepublished()
        return run
    }

    /// Publishes a manifest written by hand (as a publishing mistake or a hostile remote would).
    func writeManifest(_ text: String, as name: String = "manifest.json") throws {
        try text.writeReplacing(published + "/" + name)
        markRepublished(name)
    }

    /// Gives a published file the next mtime of the publication clock, which starts a day ago and
    /// moves one second per publication: as on a real origin, files were published a while before a
    /// mirror asks for them (validators of a file changed within the last second do not hold, and a
    /// test of that says so itself), and each publication gets validators of its own (nginx derives
    /// ETag and Last-Modified from the mtime in seconds and the size).
    func markRepublished(_ name: String = "manifest.json") {
        publications += 1
        let when = clockStart + publications
        var times = [timespec(tv_sec: when, tv_nsec: 0), timespec(tv_sec: when, tv_nsec: 0)]
        utimensat(AT_FDCWD, published + "/" + name, &times, 0)
    }

    func sync(_ extra: [String] = [], environment: [String: String] = [:], timeout: Double = 120) -> FerryRun {
        ferry(["sync", "now", "--config", config] + extra, environment: environment, timeout: timeout)
    }

    func status(_ extra: [String] = []) -> FerryRun { ferry(["status", "--config", config] + extra) }

    /// `ferry status`'s stdout with each wrapped text on one line again (a text longer than the
    /// width goes on in lines indented to its column), for checks of what a line says.
    func statusText(_ extra: [String] = []) -> String {
        status(extra).stdout.replacingOccurrences(of: "\n" + String(repeating: " ", count: 13), with: " ")
    }

    /// Polls `ferry status` until its output (`statusText`) holds `text` (or `timeout` passes);
    /// returns the last output.
    @discardableResult
    func waitForStatus(containing text: String, timeout: Double = 20) -> String {
        let deadline = Date().addingTimeInterval(timeout)
        var seen = statusText()
        while !seen.contains(text) && Date() < deadline {
            usleep(50_000)
            seen = statusText()
        }
        return seen
    }

    func localPath(_ p: String) -> String { local + "/" + p }

    /// Bytes in the mirror's partial files: how far the transfers in flight have got.
    func partialBytes() -> Int {
        let dir = localPath(".ferry/partial")
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).reduce(0) { total, name in
            var st = stat()
            return total + (lstat(dir + "/" + name, &st) == 0 ? Int(st.st_size) : 0)
        }
    }

    /// The sessions of `ferry status --json` (and `extra`: `--files` adds each session's tasks),
    /// as dictionaries.
    func statusSessions(_ extra: [String] = []) -> [[String: Any]] {
        let json = try? JSONSerialization.jsonObject(with: Data(status(["--json"] + extra).stdout.utf8)) as? [String: Any]
        return json?["sessions"] as? [[String: Any]] ?? []
    }

    /// Every task of every session (`status --json --files`), as dictionaries.
    func statusTasks() -> [[String: Any]] {
        statusSessions(["--files"]).flatMap { ($0["tasks"] as? [[String: Any]]) ?? [] }
    }

    /// The id of the task of `path`, as `ferry cancel` and `ferry resume` take it.
    func taskID(_ path: String) -> String? {
        (statusTasks().first { $0["path"] as? String == path }?["id"] as? Int).map(String.init)
    }

    /// Waits until some task of `session` is `running` (a transfer is under way), or `timeout`.
    @discardableResult
    func waitForRunningTask(session: String? = nil, timeout: Double = 20) -> Bool {
        eventually(timeout) {
            statusSessions().contains { s in
                (session == nil || s["name"] as? String == session) && ((s["task_counts"] as? [String: Any])?["running"] as? Int ?? 0) > 0
            }
        }
    }

    /// Waits until the latest `not_before` of the session's delayed tasks has passed (the time
    /// they were delayed to, read from the task table, not guessed).
    func waitUntilDelayedTasksAreDue() {
        let times = statusTasks().compactMap { ($0["not_before"] as? String).flatMap(Timestamp.init(rfc3339:)) }
        guard let latest = times.max() else { return }
        waitUntil(latest.timeInterval)
    }

    /// Waits until the tasks of the session were created at least `seconds` ago (for
    /// resource-timeout, which counts from then).
    func waitUntilTasksAreOlderThan(_ seconds: Double) {
        let times = statusTasks().compactMap { ($0["created_at"] as? String).flatMap(Timestamp.init(rfc3339:)) }
        guard let newest = times.max() else { return }
        waitUntil(newest.timeInterval + seconds)
    }
}

/// Polls the clock until it passes `unixTime` (a time a test's subject recorded): a wait for that
/// moment, not a guess of how long things take.
func waitUntil(_ unixTime: Double) {
    while Date().timeIntervalSince1970 < unixTime + 0.05 { usleep(20_000) }
}

/// The SHA-256 of `data`, through ferry's own hasher.
func sha256(of data: Data) -> SHA256Digest { SHA256Hasher.digest(of: Array(data)) }

/// Random bytes (deterministic per seed) for test files.
func randomData(_ count: Int, seed: UInt64 = 1) -> Data {
    var state = seed &* 0x9E3779B97F4A7C15 | 1
    var out = Data(count: count)
    out.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) in
        var i = 0
        while i < count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            var word = state
            for _ in 0..<8 where i < count {
                buffer[i] = UInt8(truncatingIfNeeded: word)
                word >>= 8
                i += 1
            }
        }
    }
    return out
}

/// Content, permission bits and mtime (whole seconds) of every regular file under `root`, keyed by
/// relative path; `.ferry/` and the manifest are left out. Symlinks and other kinds are recorded by
/// kind; directories are not (a mirror holds files: a remote's empty directories are not in a manifest).
func treeSnapshot(_ root: String, excluding: Set<String> = ["manifest.json"]) -> [String: String] {
    var out: [String: String] = [:]
    guard let walker = FileManager.default.enumerator(atPath: root) else { return out }
    while let rel = walker.nextObject() as? String {
        if rel == ".ferry" || rel.hasPrefix(".ferry/") || excluding.contains(rel) { continue }
        var st = stat()
        guard lstat(root + "/" + rel, &st) == 0 else { continue }
        switch st.st_mode & S_IFMT {
        case S_IFREG:
            let data = FileManager.default.contents(atPath: root + "/" + rel) ?? Data()
            out[rel] = "file mode=\(String(st.st_mode & 0o7777, radix: 8)) mtime=\(st.st_mtim.tv_sec) size=\(data.count) fnv=\(fnv1a(data))"
        case S_IFDIR: break
        case S_IFLNK: out[rel] = "symlink"
        default: out[rel] = "other"
        }
    }
    return out
}

/// Asserts two trees hold the same files, byte for byte, with the same modes and mtimes.
func expectIdentical(_ a: String, _ b: String, sourceLocation: SourceLocation = #_sourceLocation) {
    let left = treeSnapshot(a)
    let right = treeSnapshot(b)
    if left != right {
        let keys = Set(left.keys).union(right.keys).sorted()
        let differing = keys.filter { left[$0] != right[$0] }.prefix(10)
        let lines: [String] = differing.map { key in key + ": " + (left[key] ?? "absent") + " vs " + (right[key] ?? "absent") }
        Issue.record(Comment(rawValue: "trees differ:\n" + lines.joined(separator: "\n")), sourceLocation: sourceLocation)
    }
}

func fileContents(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

/// The `version` of the manifest at `path`; nil when there is none.
func manifestVersion(_ path: String) -> Int64? {
    (fileContents(path)?.firstMatch(of: /"version": ([0-9]+)/)).flatMap { Int64($0.1) }
}

/// The Unix time in seconds: a push or a build without `--version` publishes no version below it.
func unixSeconds() -> Int64 { Int64(Date().timeIntervalSince1970) }

/// FNV-1a over every byte (Data's own hashValue looks at a prefix only).
func fnv1a(_ data: Data) -> UInt64 {
    var h: UInt64 = 0xcbf29ce484222325
    data.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) in
        for b in buffer {
            h ^= UInt64(b)
            h = h &* 0x100000001b3
        }
    }
    return h
}

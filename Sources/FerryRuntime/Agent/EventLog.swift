import Glibc
import FerryCore

/// The event log of every session, kept in the state directory for `ferry events`: one file per
/// session, `<state>/events/<session>.jsonl`, one event per line in the `--json` form. It is
/// bounded: when a file would pass `maxFileSize` it becomes `<session>.jsonl.1` (replacing the
/// one before) and a new file begins, so a session keeps its latest 4–8 MiB of events. Events not
/// tied to a session (a refused reload) go to `_agent.jsonl`, a name no session can have.
///
/// Events are buffered and written a batch at a time (appended with O_APPEND, so two processes
/// writing different sessions, or one after another, never interleave within a line): at a run's
/// end, when 64 KiB have gathered, or a quarter of a second after the last write.
public final class EventLog: EventSink {
    public static let maxFileSize = 4 << 20
    static let agentFile = "_agent"

    public let directory: String
    private var pending: [String: [UInt8]] = [:]
    private var pendingBytes = 0
    /// The quarter of a second between writes goes by it.
    private let clock: any Clock
    private var lastFlush: Double
    private var reportedError = false

    public init(state: String, clock: any Clock) {
        directory = state + "/events"
        self.clock = clock
        lastFlush = clock.monotonic()
    }

    deinit { flush() }

    /// The file holding `session`'s newest events (nil: the agent's own).
    public static func path(state: String, session: String?) -> String {
        state + "/events/" + (session ?? agentFile) + ".jsonl"
    }

    public func event(_ event: Event) {
        let key = event.session.isEmpty ? EventLog.agentFile : event.session
        // One lookup of the session's buffer an event (a run logs two a file).
        let added = pending[key, default: []].appendLine(event)
        pendingBytes += added
        if case .syncFinished = event.body {
            flush()
        } else if pendingBytes >= 64 << 10 || clock.monotonic() - lastFlush >= 0.25 {
            flush()
        }
    }

    public func progress(_ progress: SyncProgress) {
        if pendingBytes > 0 && clock.monotonic() - lastFlush >= 0.25 { flush() }
    }

    /// Writes what is buffered.
    public func flush() {
        lastFlush = clock.monotonic()
        guard pendingBytes > 0 else { return }
        for (name, bytes) in pending where !bytes.isEmpty { append(bytes, to: directory + "/" + name + ".jsonl") }
        pending.removeAll(keepingCapacity: true)
        pendingBytes = 0
    }

    private func append(_ bytes: [UInt8], to path: String) {
        do throws(FerryError) {
            try FileSystem.makePrivateDirectory(directory)
            var fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw .localIO("cannot open the event log \(path): \(FileSystem.errorText())") }
            var st = stat()
            if fstat(fd, &st) == 0 && st.st_mode & 0o077 != 0 { fchmod(fd, 0o600) }
            if fstat(fd, &st) == 0 && Int(st.st_size) > 0 && Int(st.st_size) + bytes.count > EventLog.maxFileSize {
                close(fd)
                rename(path, path + ".1")
                fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
                guard fd >= 0 else { throw .localIO("cannot open the event log \(path): \(FileSystem.errorText())") }
            }
            defer { close(fd) }
            let failed = bytes.withUnsafeBytes { buffer -> Bool in
                var offset = 0
                while offset < buffer.count {
                    let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                    if n < 0 {
                        if errno == EINTR { continue }
                        return true
                    }
                    offset += n
                }
                return false
            }
            if failed { throw .localIO("cannot write the event log \(path): \(FileSystem.errorText())") }
        } catch {
            // The log is a record, not the state: a full disk must not stop transfers. Said once.
            if !reportedError {
                reportedError = true
                FileSystem.writeStderr("ferry: warning: \(error.message); events are not logged until it can be written\n")
            }
        }
    }
}

/// Reads a session's event log: what it holds now, then (following) lines as they are appended,
/// across the rotation to `.1`.
public final class EventLogReader {
    public let path: String
    private var fd: Int32 = -1
    private var inode: ino_t = 0
    private var partial: [UInt8] = []

    public init(path: String) { self.path = path }
    deinit { if fd >= 0 { close(fd) } }

    /// Every complete line the log holds now, oldest first (the rotated file's, then the current's).
    public func readAll() -> [[UInt8]] {
        var lines = EventLogReader.lines(of: path + ".1")
        lines += readNew()
        return lines
    }

    /// Lines appended since the last call. After a rotation, the rest of the old file comes first.
    public func readNew() -> [[UInt8]] {
        var out: [[UInt8]] = []
        if fd < 0 {
            fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return out }
            var st = stat()
            fstat(fd, &st)
            inode = st.st_ino
        }
        out += drain()
        var st = stat()
        if stat(path, &st) == 0 && st.st_ino != inode {
            // Rotated: the old file is finished (drained above); go on with the new one.
            close(fd)
            fd = -1
            partial.removeAll()
            out += readNew()
        }
        return out
    }

    private func drain() -> [[UInt8]] {
        var out: [[UInt8]] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            partial += buffer[0..<n]
            while let newline = partial.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(partial[..<newline])
                partial.removeSubrange(...newline)
                if !line.isEmpty { out.append(line) }
            }
        }
        return out
    }

    private static func lines(of path: String) -> [[UInt8]] {
        guard let bytes = try? FileSystem.readFile(path, limit: EventLog.maxFileSize * 2) else { return [] }
        return bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).map(Array.init)
    }
}

private extension [UInt8] {
    /// Appends `event` as a line; returns how many bytes that took.
    mutating func appendLine(_ event: Event) -> Int {
        let before = count
        event.appendJSON(to: &self)
        append(UInt8(ascii: "\n"))
        return count - before
    }
}

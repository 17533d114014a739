import Glibc
import FerryCore

/// Where ferry writes: results and JSON to stdout, progress, warnings and errors to stderr.
/// Human text passes through `Printable.text` on its way out, so a control byte that reached a
/// message (a server's reason phrase, say) never reaches the terminal raw; names inside messages
/// were already escaped where the message was composed (`Printable.name`).
enum Console {
    /// Prefix each human line with its syslog priority (`<6>` info, `<4>` warning, `<3>` error),
    /// which journald reads from a service's output. Set for any command whose stderr is the
    /// journal (`stderrIsTheJournal`), and by `ferry agent` when stderr is not a terminal; JSON
    /// lines are left as they are.
    nonisolated(unsafe) static var priorityPrefixes = false

    static func out(_ text: String) { writeAll(1, prefixed(Printable.text(text), "<6>")) }
    static func err(_ text: String) { writeAll(2, prefixed(Printable.text(text), "<3>")) }
    /// One JSON document per line (already escaped as JSON).
    static func json(_ text: String) { writeAll(1, text + "\n") }
    /// Terminal control sequences of ferry's own (progress bars), composed from escaped parts.
    static func rawErr(_ text: String) { writeAll(2, text) }

    static var stderrIsTerminal: Bool { isatty(2) == 1 && (getenv("TERM").map { String(cString: $0) } ?? "") != "dumb" }

    /// Whether stderr is the journal's stream (systemd sets `JOURNAL_STREAM` to its device and
    /// inode for a service, as the timer's unit runs `sync now`): then lines carry priorities.
    static var stderrIsTheJournal: Bool {
        guard let value = getenv("JOURNAL_STREAM").map({ String(cString: $0) }) else { return false }
        let parts = value.split(separator: ":")
        var st = stat()
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]), fstat(2, &st) == 0 else { return false }
        return UInt64(st.st_dev) == device && UInt64(st.st_ino) == inode
    }

    static func error(_ error: FerryError) {
        err("ferry: error: \(error.message)")
        if let hint = error.hint { err("  hint: \(hint)") }
    }

    static func warning(_ text: String) { writeAll(2, prefixed(Printable.text("ferry: warning: \(text)"), "<4>")) }

    private static func prefixed(_ text: String, _ priority: String) -> String {
        guard priorityPrefixes else { return text + "\n" }
        return text.split(separator: "\n", omittingEmptySubsequences: false).map { priority + $0 }.joined(separator: "\n") + "\n"
    }

    private static func writeAll(_ fd: Int32, _ text: String) {
        var copy = text
        copy.withUTF8 { buffer in
            var offset = 0
            while offset < buffer.count {
                let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += n
            }
        }
    }
}

/// How a command reports: human text (with progress bars on a terminal), JSON lines, or quiet.
enum OutputMode {
    case human
    case json
    case quiet

    init(arguments: Arguments) {
        if arguments.has("--json") { self = .json } else if arguments.has("--quiet") { self = .quiet } else { self = .human }
    }
}

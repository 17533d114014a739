import FerryCore
import FerryRuntime

/// Shows a run to its user: JSON lines, human lines plus progress bars on a terminal, or nothing.
final class SyncReporter: SyncObserver {
    let mode: OutputMode
    private let bars: ProgressBars?

    init(mode: OutputMode) {
        self.mode = mode
        bars = (mode == .human && Console.stderrIsTerminal) ? ProgressBars() : nil
    }

    func event(_ event: Event) {
        switch mode {
        case .json:
            Console.out(event.json)
        case .quiet:
            if case let .fileFailed(path, error) = event.body { Console.err("ferry: \(event.session): \(path): \(error)") }
        case .human:
            human(event)
        }
    }

    func progress(_ progress: SyncProgress) {
        bars?.update(progress, force: progress.active.isEmpty)
    }

    private func line(_ text: String) {
        bars?.clear()
        Console.out(text)
    }

    private func human(_ event: Event) {
        let s = event.session
        switch event.body {
        case let .manifestFetched(url, version, files, unchanged):
            let v = version.map { "version \($0), " } ?? ""
            line("\(s): manifest \(v)\(files) files\(unchanged ? " (unchanged)" : "") from \(url)")
        case let .planned(downloads, bytes, fixes, deletions, upToDate, hashed, extras):
            var parts = ["\(downloads) to download (\(Units.formatBytes(bytes)))"]
            if fixes > 0 { parts.append("\(fixes) to fix mode/mtime") }
            if deletions > 0 { parts.append("\(deletions) to delete") }
            parts.append("\(upToDate) up to date")
            if hashed > 0 { parts.append("\(hashed) hashed") }
            if extras > 0 { parts.append("\(extras) extra local files kept (delete = no)") }
            line("\(s): " + parts.joined(separator: ", "))
        case let .fileResumed(path, offset):
            line("\(s): resuming \(path) at \(Units.formatBytes(offset)) (offset \(offset))")
        case let .fileRestarted(path, reason):
            line("\(s): \(path): \(reason)")
        case let .fileFailed(path, error):
            bars?.clear()
            Console.err("ferry: \(s): \(path): \(error)")
        case let .fileDeleted(path):
            line("\(s): deleted \(path)")
        case let .warning(message):
            bars?.clear()
            Console.warning("\(s): \(message)")
        case let .syncFinished(code, downloaded, failed, deleted, bytes, seconds, message):
            bars?.clear()
            let rate = seconds > 0 ? "  \(Units.formatBytes(Int64(Double(bytes) / seconds)))/s" : ""
            var text = "\(s): "
            switch ExitCode(rawValue: code) {
            case .inSync?: text += "in sync"
            case .someFilesFailed?: text += "finished with errors"
            case .incomplete?: text += "stopped, work remains (resumes next run)"
            default: text += "failed"
            }
            if downloaded == 0 && deleted == 0 && failed == 0 {
                text += " — nothing to transfer (\(Units.formatFixed(seconds, digits: 2))s)"
            } else {
                text += " — \(downloaded) downloaded (\(Units.formatBytes(bytes)) in \(Units.formatFixed(seconds, digits: 2))s\(rate)), \(deleted) deleted, \(failed) failed"
            }
            if let message, code != 0 { text += "\n\(s): \(message)" }
            Console.out(text)
        case let .fileRetrying(path, attempt, delay, error):
            line("\(s): \(path): \(error); try \(attempt) in \(Units.formatFixed(delay, digits: 1))s")
        case let .fileWaiting(path, error):
            bars?.clear()
            Console.warning("\(s): \(path): waiting for connectivity (\(error)); the next run tries again")
        case let .fileDelayed(path, until):
            line("\(s): \(path): delayed until \(until.rfc3339)")
        case let .delayedDue(path, disposition, reason):
            line("\(s): \(path): delayed download due: \(disposition.rawValue) (\(reason))")
        case let .fileSuspended(path, offset):
            line("\(s): \(path): suspended by ferry cancel at \(Units.formatBytes(offset)); ferry resume continues it")
        case let .fileInterrupted(path, offset):
            line("\(s): \(path): stopped at \(Units.formatBytes(offset)), kept for the next run")
        case .syncStarted, .fileStarted, .fileDone, .metadataFixed:
            break
        }
    }
}

import FerryCore
import FerryRuntime

/// Progress bars on a terminal (stderr): one for the whole run and one per file in flight, with
/// bytes, rate and ETA. Redrawn in place at most ten times a second, erased when the run ends.
final class ProgressBars {
    private var linesDrawn = 0
    private var lastDraw = 0.0
    private let width = 24
    private let maxFileLines = 4

    /// The latest progress of each session running, in the order they first reported.
    private var sessions: [SyncProgress] = []
    private var samples: [String: [(time: Double, bytes: Int64)]] = [:]

    /// Takes one session's progress and redraws every session's bars (several sessions of one
    /// run transfer at the same time). A session leaves the bars when its run ends (`remove`).
    func update(_ p: SyncProgress, force: Bool = false) {
        if let i = sessions.firstIndex(where: { $0.session == p.session }) { sessions[i] = p } else { sessions.append(p) }
        let now = MonotonicClock.seconds()
        var history = samples[p.session] ?? []
        history.append((now, p.bytesDone))
        while let first = history.first, now - first.time > 3, history.count > 2 { history.removeFirst() }
        samples[p.session] = history
        guard force || now - lastDraw >= 0.1 else { return }
        lastDraw = now
        let perSession = sessions.count > 1 ? 1 : maxFileLines
        redraw(sessions.flatMap { lines(for: $0, now: now, fileLines: perSession) })
    }

    private func lines(for p: SyncProgress, now: Double, fileLines: Int) -> [String] {
        let rate: Double
        if let first = samples[p.session]?.first, now - first.time > 0.05 {
            rate = Double(p.bytesDone - first.bytes) / (now - first.time)
        } else {
            rate = 0
        }
        var lines: [String] = []
        let fraction: Double
        if p.bytesTotal > 0 {
            fraction = Double(p.bytesDone) / Double(p.bytesTotal)
        } else if p.filesTotal > 0 {
            fraction = Double(p.filesDone) / Double(p.filesTotal)
        } else {
            fraction = 1
        }
        let eta = rate > 0 ? Units.formatDuration(Double(max(0, p.bytesTotal - p.bytesDone)) / rate) : "--"
        var head = "\(Printable.name(p.session)) " + bar(fraction) + " " + percent(fraction)
        head += "  \(Units.formatBytes(p.bytesDone))/\(Units.formatBytes(p.bytesTotal))"
        head += "  \(Units.formatBytes(Int64(rate)))/s  ETA \(eta)  files \(p.filesDone)/\(p.filesTotal)"
        if p.filesFailed > 0 { head += "  failed \(p.filesFailed)" }
        lines.append(head)
        let shown = p.active.sorted { ($0.size ?? 0) > ($1.size ?? 0) }.prefix(fileLines)
        for a in shown {
            let f = a.size.map { $0 > 0 ? Double(a.done) / Double($0) : 1 } ?? 0
            lines.append("  " + bar(f) + " " + percent(f) + "  " + Units.formatBytes(a.done).padding(to: 10) + " " + shorten(a.path.string, 50))
        }
        if p.active.count > shown.count { lines.append("  … and \(p.active.count - shown.count) more") }
        return lines
    }

    /// Drops a session whose run ended.
    func remove(session: String) {
        sessions.removeAll { $0.session == session }
        samples[session] = nil
    }

    /// Removes the bars so the summary prints on a clean screen.
    func clear() {
        redraw([])
    }

    private func redraw(_ lines: [String]) {
        var out = ""
        if linesDrawn > 0 { out += "\u{1B}[\(linesDrawn)A\r" }
        for l in lines { out += "\u{1B}[2K" + l + "\n" }
        if lines.count < linesDrawn {
            for _ in lines.count..<linesDrawn { out += "\u{1B}[2K\n" }
            out += "\u{1B}[\(linesDrawn - lines.count)A"
        }
        linesDrawn = lines.count
        Console.rawErr(out)
    }

    private func bar(_ fraction: Double) -> String {
        let f = min(1, max(0, fraction))
        let filled = Int((f * Double(width)).rounded(.down))
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "]"
    }

    private func percent(_ fraction: Double) -> String {
        let p = Int((min(1, max(0, fraction)) * 100).rounded(.down))
        return (p < 10 ? "  " : p < 100 ? " " : "") + "\(p)%"
    }

    /// The end of a path (escaped), which names the file best, in at most `n` characters.
    private func shorten(_ path: String, _ n: Int) -> String {
        let s = Printable.name(path)
        return s.count <= n ? s : "…" + s.suffix(n - 1)
    }
}

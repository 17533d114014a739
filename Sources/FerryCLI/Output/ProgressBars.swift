import Glibc
import FerryCore
import FerryRuntime

/// Progress bars on a terminal (stderr): one for the whole run and one per file in flight, each
/// with bytes, rate and ETA. Redrawn in place at most ten times a second, erased when the run
/// ends. Every line fits the terminal's width as it is at each redraw (a resized terminal is
/// followed): a line that wrapped would break the redraw. What does not fit goes, least useful
/// first, and a long name is shortened in the middle.
final class ProgressBars {
    /// Rates, ETAs and the redraw interval go by it.
    private let clock: any Clock
    private var linesDrawn = 0
    private var lastDraw = 0.0
    private let maxFileLines = 4

    /// The latest progress of each session running, in the order they first reported.
    private var sessions: [SyncProgress] = []
    /// Recent (time, bytes) samples, for rates: per session, and per file in flight.
    private var samples: [String: [(time: Double, bytes: Int64)]] = [:]
    private var fileSamples: [String: [(time: Double, bytes: Int64)]] = [:]

    /// The width to draw in: the terminal's columns, read at each redraw; `COLUMNS` where the
    /// terminal does not say; 80 otherwise.
    var width: () -> Int = {
        var size = winsize()
        if ioctl(2, UInt(TIOCGWINSZ), &size) == 0 && size.ws_col > 0 { return Int(size.ws_col) }
        if let columns = getenv("COLUMNS").flatMap({ Int(String(cString: $0)) }), columns > 0 { return columns }
        return 80
    }

    init(clock: any Clock) { self.clock = clock }

    /// Takes one session's progress and redraws every session's bars (several sessions of one
    /// run transfer at the same time). A session leaves the bars when its run ends (`remove`).
    func update(_ p: SyncProgress, force: Bool = false) {
        if let i = sessions.firstIndex(where: { $0.session == p.session }) { sessions[i] = p } else { sessions.append(p) }
        let now = clock.monotonic()
        ProgressBars.sample(&samples[p.session, default: []], now, p.bytesDone)
        let active = Set(p.active.map { p.session + "/" + $0.path.string })
        for a in p.active { ProgressBars.sample(&fileSamples[p.session + "/" + a.path.string, default: []], now, a.done) }
        for key in fileSamples.keys where key.hasPrefix(p.session + "/") && !active.contains(key) { fileSamples[key] = nil }
        guard force || now - lastDraw >= 0.1 else { return }
        lastDraw = now
        let perSession = sessions.count > 1 ? 1 : maxFileLines
        let columns = max(20, width())
        redraw(sessions.flatMap { lines(for: $0, now: now, fileLines: perSession) }.map { Columns.fit($0, columns - 1) })
    }

    /// Keeps the last three seconds of samples (at least two).
    private static func sample(_ history: inout [(time: Double, bytes: Int64)], _ now: Double, _ bytes: Int64) {
        history.append((now, bytes))
        while let first = history.first, now - first.time > 3, history.count > 2 { history.removeFirst() }
    }

    private static func rate(_ history: [(time: Double, bytes: Int64)]?, now: Double) -> Double {
        guard let first = history?.first, let last = history?.last, now - first.time > 0.05 else { return 0 }
        return max(0, Double(last.bytes - first.bytes) / (now - first.time))
    }

    private func lines(for p: SyncProgress, now: Double, fileLines: Int) -> [String] {
        let columns = max(20, width()) - 1
        let rate = ProgressBars.rate(samples[p.session], now: now)
        let fraction: Double
        if p.bytesTotal > 0 {
            fraction = Double(p.bytesDone) / Double(p.bytesTotal)
        } else if p.filesTotal > 0 {
            fraction = Double(p.filesDone) / Double(p.filesTotal)
        } else {
            fraction = 1
        }
        // The parts of the head line, most useful first; the bar takes what room is left.
        var parts = [percent(fraction), "\(Units.formatBytes(p.bytesDone))/\(Units.formatBytes(p.bytesTotal))",
                     "\(Units.formatBytes(Int64(rate)))/s", "ETA " + eta(p.bytesTotal - p.bytesDone, rate),
                     "files \(p.filesDone)/\(p.filesTotal)"]
        if p.filesFailed > 0 { parts.insert("failed \(p.filesFailed)", at: 2) }
        let session = Printable.name(p.session)
        var lines = [compose(prefix: Columns.middle(session, 16) + " ", fraction: fraction, parts: parts, columns: columns)]
        let shown = p.active.sorted { ($0.size ?? 0) > ($1.size ?? 0) }.prefix(fileLines)
        for a in shown {
            let f = a.size.map { $0 > 0 ? Double(a.done) / Double($0) : 1 } ?? 0
            let r = ProgressBars.rate(fileSamples[p.session + "/" + a.path.string], now: now)
            let fileParts = [percent(f), Units.formatBytes(a.done), "\(Units.formatBytes(Int64(r)))/s",
                             "ETA " + eta(a.size.map { $0 - a.done } ?? -1, r)]
            lines.append(compose(prefix: "  ", fraction: f, parts: fileParts, columns: columns, name: Printable.name(a.path.string)))
        }
        let more = p.active.count + p.moreActive - shown.count
        if more > 0 { lines.append("  … and \(more) more") }
        return lines
    }

    /// `prefix [bar] part  part  …  name` in at most `columns`: parts are dropped from the end
    /// while the line with a bar of at least 10 and a name of at least 12 does not fit; the bar
    /// gets up to 24 of what is left, and the name the rest (shortened in the middle).
    private func compose(prefix: String, fraction: Double, parts: [String], columns: Int, name: String? = nil) -> String {
        var parts = parts
        func fixed(_ parts: [String]) -> Int { Columns.columns(prefix) + 2 + parts.reduce(0) { $0 + Columns.columns($1) + 2 } }
        let nameRoom = name == nil ? 0 : min(12, Columns.columns(name!))
        while parts.count > 1 && fixed(parts) + 10 + nameRoom > columns { parts.removeLast() }
        let barWidth = max(4, min(24, columns - fixed(parts) - nameRoom))
        var line = prefix + bar(fraction, barWidth) + " " + parts.joined(separator: "  ")
        if let name {
            let room = columns - Columns.columns(line) - 2
            if room > 0 { line += "  " + Columns.middle(name, room) }
        }
        return line
    }

    private func eta(_ remaining: Int64, _ rate: Double) -> String {
        rate > 0 && remaining >= 0 ? Units.formatDuration(Double(remaining) / rate) : "--"
    }

    /// Drops a session whose run ended.
    func remove(session: String) {
        sessions.removeAll { $0.session == session }
        samples[session] = nil
        for key in fileSamples.keys where key.hasPrefix(session + "/") { fileSamples[key] = nil }
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

    private func bar(_ fraction: Double, _ width: Int) -> String {
        let f = min(1, max(0, fraction))
        let filled = Int((f * Double(width)).rounded(.down))
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "]"
    }

    private func percent(_ fraction: Double) -> String {
        let p = Int((min(1, max(0, fraction)) * 100).rounded(.down))
        return (p < 10 ? "  " : p < 100 ? " " : "") + "\(p)%"
    }
}

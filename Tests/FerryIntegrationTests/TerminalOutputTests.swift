import Foundation
import Testing

/// Names come from remotes and from local trees, so they are hostile. Every name ferry prints is
/// escaped (`\x1b`, `\n`, `\u{202e}`, `\xe9` for bytes that are not UTF-8), on a terminal and in
/// logs alike, and `--json` stays valid JSON carrying the exact name.
@Suite(.serialized)
struct TerminalOutputTests {
    /// No raw control byte, no bidi override and no invalid UTF-8 reaches the output.
    func expectHarmless(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let bad = text.unicodeScalars.filter { ($0.value < 0x20 && $0 != "\n") || $0.value == 0x7F || (0x80...0x9F).contains($0.value)
            || (0x202A...0x202E).contains($0.value) || (0x2066...0x2069).contains($0.value) }
        #expect(bad.isEmpty, "raw bytes in the output: \(bad.map { String($0.value, radix: 16) })", sourceLocation: sourceLocation)
    }

    @Test func hostileLocalNamesAreEscapedWhenDeletedAndWarnedAbout() throws {
        let w = try SyncedMirror("hostile-names", session: ["delete = yes"],
                                 files: Dictionary(uniqueKeysWithValues: (0..<6).map { ("f\($0).txt", "\($0)\n") }))
        let box = w.box
        let hostile = ["\u{1B}[8mhidden", "new\nline", "bidi\u{202E}gpj.exe"]
        for name in hostile { try "x\n".write(toFile: box.localPath(name), atomically: false, encoding: .utf8) }
        createFile(in: box.local, named: Array("caf".utf8) + [0xE9])

        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        expectHarmless(run.output)
        #expect(run.stdout.contains("deleted \\x1b[8mhidden"), "\(run.stdout)")
        #expect(run.stdout.contains("deleted new\\nline"))
        #expect(run.stdout.contains("deleted bidi\\u{202e}gpj.exe"))
        #expect(run.stdout.split(separator: "\n").filter { $0.contains("deleted ") }.count == 3, "one line per deleted file")
        #expect(run.stderr.contains("/caf\\xe9: the name is not UTF-8, so no manifest can list it; ferry leaves it alone"), "\(run.stderr)")

        // --json carries the exact names, as valid JSON, one object per line.
        for name in hostile { try "x\n".write(toFile: box.localPath(name), atomically: false, encoding: .utf8) }
        let json = box.sync(["--json"])
        #expect(json.exitCode == 0)
        let lines = json.stdout.split(separator: "\n")
        #expect(lines.count == json.events.count, "every line parses as JSON")
        let deleted = Set(json.events(named: "file-deleted").compactMap { $0["path"] as? String })
        #expect(deleted == Set(hostile))
        expectHarmless(json.stdout)
    }

    @Test func manifestBuildWarningsAreEscaped() throws {
        let box = Sandbox("build-warnings")
        box.publish("ok.txt", "ok\n")
        try FileManager.default.createSymbolicLink(atPath: box.published + "/\u{1B}]0;pwned\u{07}link", withDestinationPath: "ok.txt")
        #expect(mkfifo(box.published + "/fi\nfo", 0o644) == 0)
        createFile(in: box.published, named: Array("na".utf8) + [0xEF, 0xBF] + Array("ve".utf8))
        let run = ferry(["manifest", "build", box.published])
        #expect(run.exitCode == 0, "\(run.output)")
        expectHarmless(run.output)
        #expect(run.stderr.contains("skipped symlink \\x1b]0;pwned\\x07link"), "\(run.stderr)")
        #expect(run.stderr.contains("skipped fi\\nfo: not a regular file"))
        #expect(run.stderr.contains("/na\\xef\\xbfve: the name is not UTF-8"))
        let json = ferry(["manifest", "build", box.published, "--json"])
        #expect(json.events.count == json.stdout.split(separator: "\n").count, "valid JSON: \(json.stdout)")
    }

    /// Manifest paths may hold bidi overrides (they are not control bytes): status, errors and the
    /// server's own reason phrase are shown escaped.
    @Test func statusErrorsAndReasonPhrasesAreEscaped() throws {
        let box = Sandbox("status-names")
        let name = "x\u{202E}txt.exe"
        box.publish(name, "gone soon\n")
        box.publish("reason.txt", "r\n")
        box.buildManifest()
        box.unpublish(name)
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["/reason.txt": ["statuses": [404], "reason": "Not\u{1B}[2JFound"]])
        box.configure(remote: server.url)
        let run = box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        expectHarmless(run.output)
        #expect(run.stderr.contains("x\\u{202e}txt.exe: HTTP 404"), "\(run.stderr)")
        #expect(run.stderr.contains("reason.txt: HTTP 404 Not\\x1b[2JFound"), "\(run.stderr)")
        let status = box.status(["-v"])
        expectHarmless(status.output)
        #expect(status.stdout.contains("x\\u{202e}txt.exe"), "\(status.stdout)")
        #expect(status.stdout.contains("HTTP 404 Not\\x1b[2JFound"), "\(status.stdout)")
        let json = box.status(["--json"])
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        let failed = ((object?["sessions"] as? [[String: Any]])?.first?["failed_tasks"] as? [[String: Any]]) ?? []
        #expect(failed.contains { $0["path"] as? String == name }, "the exact name in --json: \(json.stdout)")
    }

    /// Progress bars on a terminal (a pty from `script`) show names escaped too.
    @Test func progressBarsShowEscapedNames() throws {
        let box = Sandbox("tty")
        let name = "slow\u{202E}fdp.exe"
        box.publish(name, randomData(600_000, seed: 3))
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["*": ["rate": 500_000]])
        box.configure(remote: server.url)
        let command = "TERM=xterm '\(Harness.ferryBinary)' sync now --config '\(box.config)'"
        let run = runProcess("/usr/bin/script", ["-q", "-e", "-c", command, "/dev/null"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stdout.contains("\u{1B}[2K"), "progress bars were drawn: \(run.stdout.debugDescription)")
        #expect(run.stdout.contains("slow\\u{202e}fdp.exe"), "\(run.stdout.debugDescription)")
        #expect(!run.stdout.unicodeScalars.contains { $0.value == 0x202E }, "no raw bidi override")
        #expect(run.stdout.contains("in sync"))
    }

    /// What a terminal of `columns` shows for a run: every line ferry drew (control sequences
    /// removed, split where the cursor went back).
    func drawnLines(_ box: Sandbox, columns: Int) -> (FerryRun, [String]) {
        let command = "stty cols \(columns) rows 30; TERM=xterm '\(Harness.ferryBinary)' sync now --config '\(box.config)'"
        let run = runProcess("/usr/bin/script", ["-q", "-e", "-c", command, "/dev/null"])
        let plain = run.stdout.replacing(/\x1B\[[0-9;]*[A-Za-z]/, with: "")
        return (run, plain.components(separatedBy: CharacterSet.newlines).filter { !$0.isEmpty })
    }

    /// Progress bars fit the terminal (80 columns, 60, 40) whatever the names: a line that wrapped
    /// would make each redraw leave stale bars behind. Per-file lines carry a rate and an ETA, and a
    /// long name is shortened in its middle.
    @Test(arguments: [80, 60, 40])
    func progressBarsFitTheTerminal(columns: Int) throws {
        let box = Sandbox("tty-width-\(columns)")
        let long = "a-rather-long-directory-name/with-a-subdirectory/and-a-very-long-file-name-that-goes-on-\(columns).bin"
        box.publish(long, randomData(900_000, seed: 4))
        box.publish("short.bin", randomData(900_000, seed: 5))
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["*": ["rate": 600_000]])
        box.configure(remote: server.url)
        let (run, lines) = drawnLines(box, columns: columns)
        #expect(run.exitCode == 0, "\(run.output)")
        // The bars (the log lines around them are printed once, and may wrap).
        let bars = lines.filter { $0.contains("[#") || $0.contains("[-") }
        #expect(!bars.isEmpty, "bars were drawn: \(lines)")
        let tooWide = bars.filter { $0.count > columns - 1 }
        #expect(tooWide.isEmpty, "lines wider than \(columns): \(tooWide)")
        let fileLines = lines.filter { $0.hasPrefix("  [") }
        #expect(!fileLines.isEmpty, "per-file bars were drawn: \(lines)")
        if columns >= 80 {
            #expect(fileLines.contains { $0.contains("/s") && $0.contains("ETA") }, "a file line has its rate and ETA: \(fileLines)")
            #expect(fileLines.contains { $0.contains("…") && $0.hasSuffix(".bin") }, "the long name keeps its end: \(fileLines)")
        }
    }
}

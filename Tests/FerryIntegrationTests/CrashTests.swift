import Foundation
import Testing

/// Crash safety, proven by crashing: `kill -9` at random moments of multi-file syncs (transfers,
/// checkpoints, verify, rename, SQLite commits), then relaunch. At every point each file at a final
/// path holds exactly a version the remote published, and a relaunch resumes partial files instead
/// of fetching them from zero.
///
/// 12 kills by default; FERRY_SOAK=1 makes it 60, FERRY_KILLS=N sets N. FERRY_SEED=S replays a run.
@Suite(.serialized)
struct CrashTests {
    struct SeededRandom: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            var z = state
            z = (z ^ (z >> 33)) &* 0xff51afd7ed558ccd
            return z ^ (z >> 33)
        }
    }

    /// `kill -9` of `child` after a random delay in `seconds`; its exit status (0: it finished
    /// first), and the moment, said for messages.
    static func kill(_ child: Child, within seconds: ClosedRange<Double>, using random: inout SeededRandom) -> (Int32?, String) {
        let delay = Double.random(in: seconds, using: &random)
        usleep(UInt32(delay * 1_000_000))
        child.signal(SIGKILL)
        let status = child.wait(timeout: 30)
        return (status, "at \(Int(delay * 1000)) ms (exit \(status ?? -1))")
    }

    /// What a kill loop published, by path: every version of each, to check the files at final
    /// paths against (`expectVersions`).
    final class Published {
        let box: Sandbox
        private(set) var versions: [String: Set<UInt64>] = [:]
        init(_ box: Sandbox) { self.box = box }

        /// Publishes `data` at `path` in the box and records it as one of the path's versions.
        func callAsFunction(_ path: String, _ data: Data) {
            box.publish(path, data)
            versions[path, default: []].insert(fnv1a(data))
        }
    }

    /// Every regular file under `root` (outside .ferry/, but for `except`) holds one of the
    /// versions recorded for its path; `message` names the path at `%@`.
    static func expectVersions(under root: String, _ versions: [String: Set<UInt64>], _ message: String, except: String? = nil) {
        guard let walker = FileManager.default.enumerator(atPath: root) else { return }
        while let rel = walker.nextObject() as? String {
            if rel == ".ferry" { walker.skipDescendants(); continue }
            var st = stat()
            guard rel != except, lstat(root + "/" + rel, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            let data = FileManager.default.contents(atPath: root + "/" + rel) ?? Data()
            #expect(versions[rel]?.contains(fnv1a(data)) == true, "\(message.replacingOccurrences(of: "%@", with: rel))")
        }
    }

    /// After a kill loop whose runs wrote `outputs` (`--json`): a last run completes and leaves
    /// the mirror identical to what was published; every resume started past zero, and a resumed
    /// file that finished in the same run fetched only the rest; the task table holds nothing
    /// open. Returns the number of resumes.
    static func finishAndCheckResumes(_ box: Sandbox, outputs: [String], seed: UInt64, timeout: Double = 120) -> Int {
        let final = box.sync(["--json"], timeout: timeout)
        #expect(final.exitCode == 0, "\(final.output)")
        let outputs = outputs + [box.directory + "/final.jsonl"]
        try? final.stdout.writeReplacing(outputs.last!)
        expectIdentical(box.published, box.local)
        var resumed = 0
        for out in outputs {
            let events = FerryRun(exitCode: 0, stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "", stderr: "").events
            for r in events where r["event"] as? String == "file-resumed" {
                let offset = r["offset"] as? Int ?? 0
                #expect(offset > 0)
                resumed += 1
                let path = r["path"] as? String
                if let done = events.first(where: { $0["event"] as? String == "file-done" && $0["path"] as? String == path }),
                   events.contains(where: { $0["event"] as? String == "file-restarted" && $0["path"] as? String == path }) == false {
                    // A delta takes some of the rest from local data, and what it fetches in one
                    // multipart answer comes with the answer's framing (well under 64 KiB).
                    let (fetched, reused, rest) = (done["fetched"] as? Int ?? 0, done["reused"] as? Int ?? 0, (done["size"] as? Int ?? 0) - offset)
                    #expect(reused == 0 ? fetched == rest : fetched + reused >= rest && fetched + reused < rest + 65_536, "\(path ?? ""): fetched only the rest")
                }
            }
        }
        #expect(resumed > 0, "at least one kill left resume data that a relaunch used (seed \(seed))")
        // Whatever the kills left in the task table, the run that completed settled it.
        let counts = box.statusSessions().first?["task_counts"] as? [String: Int] ?? [:]
        #expect(counts.filter { $0.key != "done" }.allSatisfy { $0.value == 0 }, "no task left open: \(counts) (seed \(seed))")
        return resumed
    }

    @Test func killNineAtRandomMomentsNeverLeavesABadFileAndResumes() throws {
        let env = ProcessInfo.processInfo.environment
        let kills = Int(env["FERRY_KILLS"] ?? "") ?? (env["FERRY_SOAK"] != nil ? 60 : 12)
        let seed = UInt64(env["FERRY_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970 * 1000)
        var random = SeededRandom(state: seed)
        print("kill -9 test: \(kills) kills, FERRY_SEED=\(seed)")

        let box = Sandbox("kill9")
        let publish = Published(box)
        publish("big/one.bin", randomData(16_000_000, seed: seed &+ 1))
        publish("big/two.bin", randomData(12_000_000, seed: seed &+ 2))
        for i in 0..<5 { publish("medium/m\(i).bin", randomData(1_000_000 + i * 1000, seed: seed &+ 10 &+ UInt64(i))) }
        for i in 0..<300 { publish("small/d\(i % 10)/s\(i).txt", randomData(2000 + i * 13, seed: seed &+ 100 &+ UInt64(i))) }
        box.buildManifest()
        let server = try PythonServer(directory: box.published)
        defer { server.stop() }
        server.setFaults(["*": ["rate": 4_000_000]])
        box.configure(remote: server.url, session: ["delete = yes"])

        /// Every file at a final path is a version the remote published for that path.
        func checkTree(_ moment: String) {
            CrashTests.expectVersions(under: box.local, publish.versions, "after \(moment): %@ holds bytes the remote never published")
        }

        var outputs: [String] = []
        var completed = 0
        for i in 0..<kills {
            let out = box.directory + "/run\(i).jsonl"
            outputs.append(out)
            let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--json"], stdout: out, stderr: box.directory + "/err\(i)")
            let (status, moment) = CrashTests.kill(child, within: 0.05...1.5, using: &random)
            checkTree("kill \(i + 1) \(moment)")
            if status == 0 {
                // The run finished before the kill: give the next runs new work.
                completed += 1
                publish("big/two.bin", randomData(12_000_000, seed: seed &+ 1000 &+ UInt64(i)))
                for k in 0..<20 { publish("small/d\(k % 10)/s\(k).txt", randomData(3000 + i, seed: seed &+ 2000 &+ UInt64(i * 100 + k))) }
                box.buildManifest()
            }
        }

        server.setFaults([:])
        let resumed = CrashTests.finishAndCheckResumes(box, outputs: outputs, seed: seed)
        print("kill -9 test: \(kills) kills, \(completed) runs finished before their kill, \(resumed) resumes")
    }

    /// The thread an strace line names (`[pid N] `, `N ` or, the first one, not at all; strace
    /// pads short pids with spaces) and the call after it.
    static func thread(of raw: Substring) -> (pid: String, line: String) {
        var rest = raw
        var pid = "first"
        if rest.hasPrefix("[pid"), let close = rest.firstIndex(of: "]") {
            pid = String(rest[..<close])
            rest = rest[rest.index(after: close)...].drop { $0 == " " }
        } else if rest.first?.isNumber == true, let space = rest.firstIndex(of: " ") {
            pid = String(rest[..<space])
            rest = rest[space...].drop { $0 == " " }
        }
        return (pid, String(rest))
    }

    /// What a kill -9 cannot show (the page cache outlives the process), the order of system
    /// calls can: traced with strace, every partial file renamed into place had its bytes synced
    /// (its own fsync, or a syncfs of the filesystem) after its last write and before the rename,
    /// so a power cut never leaves a file at a final path whose data is not on disk (docs/design.md,
    /// data-safety rule 2). 300 small files go in groups: fewer syncs than files.
    @Test func everyPartialIsSyncedBeforeItIsRenamedIntoPlace() throws {
        let server = try NginxServer()
        defer { server.stop() }
        let box = Sandbox("sync-order", published: server.root)
        for i in 0..<300 { box.publish("d\(i % 6)/f\(i).bin", randomData(1000 + i * 7, seed: UInt64(i))) }
        box.buildManifest()
        box.configure(remote: server.url)
        // The trace comes on strace's stderr (ferry, --quiet, writes nothing there when it succeeds).
        let run = runProcess("/usr/bin/strace", ["-f", "-qq", "-e", "trace=openat,write,pwrite64,close,fsync,fdatasync,syncfs,renameat,renameat2",
                                                Harness.ferryBinary, "sync", "now", "--config", box.config, "--quiet"])
        #expect(run.exitCode == 0, "\(run.stdout)\(run.stderr.suffix(2000))")
        expectIdentical(box.published, box.local)

        // Replays the trace in the order strace saw the calls end (a call one thread began before
        // another's is resumed later): a rename is checked when it begins.
        let text = run.stderr
        var step = 0
        var nameOf: [Int: String] = [:]          // descriptor → partial file name
        var lastWrite: [String: Int] = [:]        // partial → step its last write ended
        var lastOwnSync: [String: Int] = [:]      // partial → step its last fsync/fdatasync ended
        var lastSyncfs = -1
        var pending: [String: String] = [:]       // pid → call begun, not yet ended
        var renamed = 0, syncs = 0
        func firstNumber(_ s: Substring) -> Int? { Int(s.prefix { $0.isNumber }) }
        func check(_ line: String) {
            let quoted = line.split(separator: "\"")
            guard quoted.count > 1, quoted[1].hasSuffix(".part") else { return }
            let name = String(quoted[1])
            renamed += 1
            let written = lastWrite[name] ?? -1
            #expect(max(lastSyncfs, lastOwnSync[name] ?? -1) > written, "\(name) was renamed into place before its data was synced: \(line)")
        }
        for raw in text.split(separator: "\n") {
            step += 1
            var (pid, line) = Self.thread(of: raw)
            var resumed = false
            if line.hasPrefix("<... ") {
                guard let begun = pending.removeValue(forKey: pid), let close = line.range(of: "resumed>") else { continue }
                line = begun + line[close.upperBound...]
                resumed = true
            } else if let cut = line.range(of: " <unfinished ...>") {
                pending[pid] = String(line[..<cut.lowerBound])
                line = String(line[..<cut.lowerBound])
                if line.hasPrefix("renameat") { check(line) }
                continue
            }
            // `call(args)`, maybe padded with spaces, then ` = result`.
            guard let open = line.firstIndex(of: "("), let equals = line.range(of: " = ", options: .backwards),
                  let close = line[..<equals.lowerBound].lastIndex(of: ")"), open < close else { continue }
            let call = line[..<open]
            let args = line[line.index(after: open)..<close]
            let result = firstNumber(line[equals.upperBound...]) ?? -1
            let fd = firstNumber(args) ?? -1
            switch call {
            case "openat":
                if result >= 0, let name = args.split(separator: "\"").dropFirst().first, name.hasSuffix(".part") { nameOf[result] = String(name) }
            case "write", "pwrite64":
                if let name = nameOf[fd] { lastWrite[name] = step }
            case "fsync", "fdatasync":
                if let name = nameOf[fd] { lastOwnSync[name] = step; syncs += 1 }
            case "syncfs":
                if result == 0 { lastSyncfs = step; syncs += 1 }
            case "close":
                nameOf.removeValue(forKey: fd)
            case "renameat", "renameat2":
                if !resumed { check(line) }  // checked when it began
            default:
                break
            }
        }
        let renameLines = text.split(separator: "\n").filter { $0.contains("rename") }
        #expect(renamed == 300, "every file was placed by a rename of its partial (\(renamed)); the trace has \(step) lines, \(renameLines.count) with a rename, the first: \(renameLines.first ?? "none"); its first line: \(text.prefix(300))")
        #expect(syncs < 300, "the partials were synced in groups, not one by one (\(syncs) syncs)")
    }

    /// The same for push: `kill -9` at random moments of a push to nginx WebDAV (uploads, moves,
    /// deletions, the manifest's publication), then relaunch. After every kill each file at a final
    /// name on the remote holds a version the local tree had, never a partial upload; the manifest
    /// there, if any, parses; at the end one run completes, the remote is the local tree, nothing
    /// is left under .ferry/upload, and a pull of it is byte-identical.
    ///
    /// 8 kills by default; FERRY_SOAK=1 makes it 40, FERRY_KILLS=N sets N. FERRY_SEED=S replays a run.
    @Test func killNineDuringAPushNeverLeavesAPartialFileAndTheNextRunCompletes() throws {
        let server = try NginxServer()
        defer { server.stop() }
        try Self.pushKillLoop("push-kill9", remote: server.url + "site/", keys: [], remoteRoot: server.root + "/site")
    }

    /// The push kill loop against the remote `remote` (with its session `keys`), whose files a
    /// test reads under `remoteRoot`.
    static func pushKillLoop(_ label: String, remote: String, keys: [String], remoteRoot: String) throws {
        let env = ProcessInfo.processInfo.environment
        let kills = Int(env["FERRY_KILLS"] ?? "") ?? (env["FERRY_SOAK"] != nil ? 40 : 8)
        let seed = UInt64(env["FERRY_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970 * 1000)
        var random = SeededRandom(state: seed)
        print("push kill -9 test (\(label)): \(kills) kills, FERRY_SEED=\(seed)")

        let box = Sandbox(label)
        let src = box.directory + "/src"
        var versions: [String: Set<UInt64>] = [:]
        func write(_ path: String, _ data: Data) {
            let full = src + "/" + path
            try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try! data.write(to: URL(fileURLWithPath: full))
            versions[path, default: []].insert(fnv1a(data))
        }
        write("big/one.bin", randomData(9_000_000, seed: seed &+ 1))
        for i in 0..<4 { write("medium/m\(i).bin", randomData(700_000 + i * 1000, seed: seed &+ 10 &+ UInt64(i))) }
        for i in 0..<200 { write("small/d\(i % 10)/s\(i).txt", randomData(1500 + i * 7, seed: seed &+ 100 &+ UInt64(i))) }
        let extra = keys.map { $0 + "\n" }.joined()
        try """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = \(remote)
            local = \(src)
            delete = yes
            bwlimit = 6M
            \(extra)[session down]
            remote = \(remote)
            local = \(box.directory)/dst
            delete = yes
            \(extra)
            """.writeReplacing(box.config)

        func checkRemote(_ moment: String) {
            CrashTests.expectVersions(under: remoteRoot, versions, "after \(moment): %@ on the remote holds bytes the local tree never had",
                                      except: "manifest.json")
            if let manifest = FileManager.default.contents(atPath: remoteRoot + "/manifest.json") {
                #expect(String(data: manifest, encoding: .utf8)?.contains("\"version\"") == true, "after \(moment): the manifest is whole")
            }
        }

        var completed = 0
        for i in 0..<kills {
            let child = try Child(Harness.ferryBinary, ["sync", "now", "--config", box.config, "--session", "up"],
                                  stdout: box.directory + "/out\(i)", stderr: box.directory + "/err\(i)")
            // Up to about the length of a whole push (2 s at bwlimit), so some finish and publish.
            let (status, moment) = CrashTests.kill(child, within: 0.05...2.8, using: &random)
            checkRemote("kill \(i + 1) \(moment)")
            if status == 0 {
                // The push finished before the kill: change, add and delete files for the next runs.
                completed += 1
                write("big/one.bin", randomData(9_000_000, seed: seed &+ 1000 &+ UInt64(i)))
                for k in 0..<15 { write("small/d\(k % 10)/s\(k).txt", randomData(2500 + i, seed: seed &+ 2000 &+ UInt64(i * 100 + k))) }
                write("new/n\(i).txt", randomData(1000, seed: seed &+ 3000 &+ UInt64(i)))
                try? FileManager.default.removeItem(atPath: src + "/small/d\(i % 10)/s\(150 + i).txt")
            }
        }

        let final = box.sync(["--session", "up"])
        #expect(final.exitCode == 0, "\(final.output)")
        let leftovers = (try? FileManager.default.contentsOfDirectory(atPath: remoteRoot + "/.ferry/upload")) ?? []
        #expect(leftovers.isEmpty, "no temporary upload is left: \(leftovers)")
        let down = box.sync(["--session", "down"])
        #expect(down.exitCode == 0, "the published manifest matches the remote: \(down.output)")
        expectIdentical(src, box.directory + "/dst")
        print("push kill -9 test (\(label)): \(kills) kills, \(completed) pushes finished before their kill")
    }
}

import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// The agent's memory over hours of change (issue 39 §8). One `ferry agent` (transfers = 8, the
/// default) runs three sessions: `web` pushes a tree of 3,000 files to nginx over HTTPS (WebDAV,
/// HTTP/2), `mirror` pulls what it published into `layout = generations`, and `s3` pushes a second
/// tree to SeaweedFS. The test changes both trees cycle after cycle (files rewritten, one added, one
/// deleted); a cycle ends when the mirror's new generation equals the source and the manifest on S3
/// lists the second tree as it now is, and then the agent's VmRSS is read. glibc keeps what the
/// cycles' threads freed in its arenas unless the agent caps them (two) and gives what they hold
/// free back after each cycle (`malloc_trim`): after the warm-up every sample stays within 64 MiB,
/// and the samples at the end are within `allowedGrowth` of those just after the warm-up. The tree
/// is that large because what glibc keeps grows with what a cycle allocates: with neither measure
/// an agent syncing 300 files stays near 34 MiB while one syncing 3,000 passes 64 MiB within 40
/// cycles, and with the trim alone it still climbs by 9 to 10 MiB over the 30 after the warm-up.
///
/// 40 cycles back to back by default (a minute or two). `FERRY_SOAK_MINUTES=N` runs cycles for N
/// minutes instead, one every `FERRY_SOAK_CYCLE` seconds (default 30), as a publisher would; every
/// sample is written to stderr as it is taken, so the run's log carries the curve.
@Suite(.serialized)
struct AgentMemoryTests {
    static let ceiling = 64 << 20
    /// How far the end may sit above the start: below what an agent with glibc's default arenas
    /// adds over the 30 cycles after the warm-up (8 to 10 MiB here, trimmed or not), above what
    /// the medians of a flat one wander (under 1 MiB; single samples 2).
    static let allowedGrowth = 5 << 20
    /// Cycles whose samples count for neither bound: the first sync and the caches filling up.
    static let warmUp = 5
    /// Samples whose median stands for the start (after the warm-up) and for the end.
    static let window = 5

    /// How many cycles run, and how far apart they begin (0: each as soon as the last ended).
    struct Plan {
        let cycles: Int
        let spacing: Double

        static func fromEnvironment() throws -> Plan {
            let env = ProcessInfo.processInfo.environment
            guard let minutesText = env["FERRY_SOAK_MINUTES"], !minutesText.isEmpty else { return Plan(cycles: 40, spacing: 0) }
            guard let minutes = Double(minutesText), minutes > 0, minutes <= 24 * 60 else {
                throw TestFailure("FERRY_SOAK_MINUTES=\(minutesText) is not a length in minutes: give 1 to 1440")
            }
            let spacingText = env["FERRY_SOAK_CYCLE"].flatMap { $0.isEmpty ? nil : $0 } ?? "30"
            guard let spacing = Double(spacingText), spacing >= 1, spacing <= 3600 else {
                throw TestFailure("FERRY_SOAK_CYCLE=\(spacingText) is not a number of seconds between changes: give 1 to 3600")
            }
            let cycles = Int(minutes * 60 / spacing)
            guard cycles >= warmUp + 2 * window else {
                throw TestFailure("FERRY_SOAK_MINUTES=\(minutesText) at FERRY_SOAK_CYCLE=\(spacingText) makes \(cycles) cycles: the trend needs \(warmUp + 2 * window); run longer or change more often")
            }
            return Plan(cycles: cycles, spacing: spacing)
        }
    }

    /// A tree the test changes, and the SHA-256 of each file it holds.
    final class Source {
        let root: String
        /// Every file but `big.bin`, which is rewritten every fifth cycle and never deleted.
        private(set) var files: [String] = []
        private(set) var digests: [String: SHA256Digest] = [:]
        private var random: CrashTests.SeededRandom

        init(_ root: String, files count: Int, seed: UInt64) {
            self.root = root
            random = CrashTests.SeededRandom(state: seed)
            for i in 0..<count {
                // Two levels of directories, and some files at the top.
                let directory = i % 7 == 0 ? "" : "d\(i % 10)/" + (i % 3 == 0 ? "e\(i % 4)/" : "")
                files.append(directory + "f\(i).txt")
                write(files[i])
            }
            write("big.bin", size: 1 << 20)
        }

        /// New bytes for `path`, of a new size unless given.
        func write(_ path: String, size: Int? = nil) {
            let data = randomData(size ?? Int.random(in: 100...16_000, using: &random), seed: random.next())
            let full = root + "/" + path
            try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try! data.write(to: URL(fileURLWithPath: full))
            digests[path] = sha256(of: data)
        }

        /// One cycle's change: a file deleted, `rewrites` others given new bytes, a file added.
        /// Returns the paths written.
        @discardableResult
        func change(cycle: Int, rewrites: Int) -> Set<String> {
            let gone = files.remove(at: Int.random(in: 0..<files.count, using: &random))
            unlink(root + "/" + gone)
            digests[gone] = nil
            var written: Set<String> = []
            for _ in 0..<rewrites { written.insert(files.randomElement(using: &random)!) }
            let added = "d\(cycle % 10)/n\(cycle).txt"
            files.append(added)
            written.insert(added)
            if cycle % 5 == 0 { written.insert("big.bin") }
            for path in written { write(path, size: path == "big.bin" ? 1 << 20 : nil) }
            return written
        }
    }

    /// One reading of the agent's memory.
    struct Sample {
        let cycle: Int
        let seconds: Double
        let rss: Int
    }

    /// A field of /proc/`pid`/status in bytes (`VmRSS`, `VmHWM`); nil when the process or the
    /// field is gone or does not read as "<n> kB".
    static func memory(_ field: String, of pid: pid_t) -> Int? {
        guard let text = fileContents("/proc/\(pid)/status") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            let words = line.split(whereSeparator: \.isWhitespace)
            guard words.count == 3, words[2] == "kB", let kib = Int(words[1]), kib >= 0, kib < 1 << 40 else { return nil }
            return kib * 1024
        }
        return nil
    }

    static func mib(_ bytes: Int) -> String { String(format: "%.1f MiB", Double(bytes) / 1_048_576) }

    static func say(_ line: String) { FileHandle.standardError.write(Data(("agent memory: " + line + "\n").utf8)) }

    static func median(_ samples: ArraySlice<Sample>) -> Int {
        let sorted = samples.map(\.rss).sorted()
        return sorted[sorted.count / 2]
    }

    /// A push over HTTPS to nginx, a pull of it into generations, and a push to S3, in one agent.
    static func configure(_ box: Sandbox, nginx: NginxServer, store: SeaweedFS, bucket: String, web: Source, s3: Source,
                          mirror: String) throws {
        let tls = try TestCertificates.shared()
        // poll = 1s: between changes every session polls over and over, each poll a cycle of its
        // own. keep-versions and object-grace small: objects no manifest names go within the run.
        let pushed = ["delete = yes", "poll = 1s", "keep-versions = 3", "object-grace = 30s"]
        let web = ["", "[session web]", "direction = push", "remote = \(nginx.tlsURL)site/", "local = \(web.root)",
                   "ca-file = \(tls.caCertificate)"] + pushed
        let pull = ["", "[session mirror]", "remote = \(nginx.tlsURL)site/", "local = \(mirror)",
                    "ca-file = \(tls.caCertificate)", "layout = generations", "delete = yes", "poll = 1s"]
        let credentials = try store.credentialsFile(in: box.directory)
        let s3 = ["", "[session s3]", "direction = push", "remote = s3://\(bucket)/site/", "local = \(s3.root)",
                  "s3-endpoint = \(store.endpoint)", "s3-credentials = \(credentials)"] + pushed
        try (["[agent]", "state = \(box.state)", "transfers = 8"] + web + pull + s3)
            .joined(separator: "\n").appending("\n").writeReplacing(box.config)
    }

    /// The RSS after the warm-up against the end: within the ceiling, and grown no more than allowed.
    static func judge(_ samples: [Sample], peak: Int, cycles: Int) {
        // Cycle 0 is the first sync; the warm-up cycles follow it.
        let measured = samples.dropFirst(1 + Self.warmUp)
        guard samples.count == cycles + 1, measured.count >= 2 * Self.window else { return }
        let start = Self.median(measured.prefix(Self.window))
        let end = Self.median(measured.suffix(Self.window))
        let highest = measured.max { $0.rss < $1.rss }!
        let first = measured.first!.cycle
        Self.say("after the warm-up \(Self.mib(start)) (median of cycles \(first)-\(first + Self.window - 1)), "
                 + "at the end \(Self.mib(end)) (median of the last \(Self.window)), "
                 + "highest \(Self.mib(highest.rss)) in cycle \(highest.cycle), "
                 + "VmHWM \(Self.mib(peak)) over \(String(format: "%.0f", samples.last!.seconds)) s")
        let (highestRSS, ceiling) = (Self.mib(highest.rss), Self.mib(Self.ceiling))
        #expect(highest.rss <= Self.ceiling, "cycle \(highest.cycle): the agent's RSS is \(highestRSS), above \(ceiling)")
        let series = samples.map { "\($0.cycle):\($0.rss >> 10)" }.joined(separator: " ")
        let grew = "\(Self.mib(end - start)) from \(Self.mib(start)) after the warm-up to \(Self.mib(end)) at the end"
        #expect(end - start <= Self.allowedGrowth, "the agent's RSS grew by \(grew): \(series) KiB")
    }

    /// Why a cycle did not settle: the files the mirror and the S3 manifest show otherwise.
    static func unsettled(_ cycle: Int, mirror: String, at generation: String?, expected: [String: String], s3: Source,
                          listing: [String: SHA256Digest]?) -> String {
        let now = generation.map { treeSnapshot((mirror as NSString).deletingLastPathComponent + "/" + $0) } ?? [:]
        let differing = Set(expected.keys).union(now.keys).filter { expected[$0] != now[$0] }.sorted().prefix(10)
        let s3Differing = Set(s3.digests.keys).union((listing ?? [:]).keys).filter { s3.digests[$0] != listing?[$0] }
            .sorted().prefix(10)
        let lists = listing.map { "\($0.count) files" } ?? "no readable manifest"
        return "cycle \(cycle) did not settle within 90 s: the mirror is at \(generation ?? "no generation") "
            + "(differing: \(differing.joined(separator: ", "))); S3 lists \(lists) "
            + "(differing: \(s3Differing.joined(separator: ", ")))"
    }

    @Test func stayFlatOverCyclesOfPushAndGenerationPull() throws {
        let plan = try Plan.fromEnvironment()
        let seed = UInt64(ProcessInfo.processInfo.environment["FERRY_SEED"] ?? "") ?? UInt64(Date().timeIntervalSince1970 * 1000)
        Self.say("\(plan.cycles) cycles" + (plan.spacing > 0 ? ", one every \(plan.spacing) s" : ", back to back") + ", FERRY_SEED=\(seed), \(Harness.ferryBinary)")

        let nginx = try NginxServer()
        defer { nginx.stop() }
        let store = try SeaweedFS.shared()
        let bucket = try store.newBucket("memory")
        let box = Sandbox("agent-memory")
        let web = Source(box.directory + "/web", files: 3_000, seed: seed)
        let s3 = Source(box.directory + "/s3", files: 100, seed: seed &+ 1)
        let mirror = box.directory + "/mirror"
        let published = nginx.root + "/site"
        try Self.configure(box, nginx: nginx, store: store, bucket: bucket, web: web, s3: s3, mirror: mirror)

        let agent = try AgentTests.RunningAgent(box)
        let pid = agent.child.pid
        let started = Date()
        var samples: [Sample] = []
        // The generation last compared with the source, and the S3 root last read (with what it
        // lists, path by path): each is looked at once, not on every turn of the wait.
        var comparedGeneration: String?
        var mirrorMatches = false
        var s3Root = Data()
        var s3Listing: [String: SHA256Digest]?

        for cycle in 0...plan.cycles {
            var s3Written: Set<String> = []
            if cycle > 0 {
                if plan.spacing > 0 { waitUntil(started.timeIntervalSince1970 + Double(cycle) * plan.spacing) }
                web.change(cycle: cycle, rewrites: 6)
                s3Written = s3.change(cycle: cycle, rewrites: 3)
            }
            let expected = treeSnapshot(web.root)
            let before = comparedGeneration
            mirrorMatches = false
            let settled = eventually(90) {
                guard agent.child.isRunning else { return true }
                if let target = Generations.readLink(mirror), target != comparedGeneration {
                    comparedGeneration = target
                    mirrorMatches = treeSnapshot((mirror as NSString).deletingLastPathComponent + "/" + target) == expected
                }
                guard mirrorMatches else { return false }
                if let root = store.get(bucket, "site/manifest.json"), root != s3Root {
                    s3Root = root
                    s3Listing = (try? publishedTree(root: root, name: "manifest.json") { store.get(bucket, "site/.ferry/meta/" + $0) })
                        .map { Dictionary($0.manifest.entries.map { ($0.path.string, $0.sha256) }, uniquingKeysWith: { a, _ in a }) }
                }
                return s3Listing == s3.digests
            }
            try #require(agent.child.isRunning, "the agent ended in cycle \(cycle): \(agent.output.suffix(3000))")
            guard settled else {
                let why = Self.unsettled(cycle, mirror: mirror, at: comparedGeneration, expected: expected, s3: s3,
                                         listing: s3Listing)
                Issue.record(Comment(rawValue: why + "; agent: \(agent.output.suffix(3000))"))
                break
            }
            if cycle > 0 {
                #expect(comparedGeneration != before, "cycle \(cycle) made a new generation")
            }
            // The manifest on nginx lists the web tree as it now is, and the files the S3 manifest
            // lists are in the bucket: those this cycle wrote, byte for byte.
            let listed = try readPublished(published).entries.map { ($0.path.string, $0.sha256) }
            #expect(Dictionary(listed, uniquingKeysWith: { a, _ in a }) == web.digests, "cycle \(cycle): the manifest pushed to nginx")
            for path in s3Written.sorted() {
                #expect(store.get(bucket, "site/" + path).map(sha256(of:)) == s3.digests[path], "cycle \(cycle): s3://\(bucket)/site/\(path)")
            }
            let rss = try #require(Self.memory("VmRSS", of: pid), "the agent's /proc/\(pid)/status has no VmRSS")
            let sample = Sample(cycle: cycle, seconds: Date().timeIntervalSince(started), rss: rss)
            samples.append(sample)
            Self.say("cycle \(cycle) at \(String(format: "%.1f", sample.seconds)) s: VmRSS \(Self.mib(rss)) (\(comparedGeneration ?? "no generation"))")
        }
        let peak = Self.memory("VmHWM", of: pid) ?? -1
        agent.child.signal(SIGTERM)
        #expect(agent.child.wait(timeout: 20) == 0, "the agent stops in order: \(agent.output.suffix(3000))")

        Self.judge(samples, peak: peak, cycles: plan.cycles)
    }
}

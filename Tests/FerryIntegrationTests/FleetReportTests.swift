import Foundation
import Testing
import FerryCore
import Synchronization

/// Signed status reports (`report = URL`) and `ferry fleet`: each machine publishes what it
/// serves, signed by its own key; the reader counts versions and refuses what is forged, replayed
/// or malformed — counted and named, never merged.
@Suite(.serialized)
struct FleetReportTests {
    /// `count` machines pulling `remote`, each reporting to `reports`.
    struct Machines {
        let root: String
        let count: Int

        init(_ label: String, count: Int, remote: String, reports: String, session: [String] = []) throws {
            root = Harness.temporaryDirectory(label)
            self.count = count
            for i in 0..<count { try Self.write(root: root, i, id: "machine-\(i)", remote: remote, reports: reports, session: session) }
        }

        static func write(root: String, _ i: Int, id: String, remote: String, reports: String, session: [String]) throws {
            try FileManager.default.createDirectory(atPath: root + "/m\(i)", withIntermediateDirectories: true)
            try (["[agent]", "state = \(root)/m\(i)/state", "machine-id = \(id)", "[session fleet]", "remote = \(remote)",
                  "local = \(root)/m\(i)/mirror", "report = \(reports)"] + session).joined(separator: "\n").appending("\n")
                .writeReplacing(root + "/m\(i)/ferry.conf")
        }

        func config(_ i: Int) -> String { root + "/m\(i)/ferry.conf" }

        func sync() -> [Int32] { (0..<count).map { ferry(["sync", "now", "--config", config($0), "--quiet"]).exitCode } }

        /// Machine `i`'s last report, as `status --json` tells it.
        func report(_ i: Int) -> [String: Any] {
            let json = (try? JSONSerialization.jsonObject(with: Data(ferry(["status", "--config", config(i), "--json"]).stdout.utf8))) as? [String: Any]
            return ((json?["sessions"] as? [[String: Any]])?.first?["report"] as? [String: Any]) ?? [:]
        }
    }

    static func fleet(_ arguments: [String]) -> [String: Any] {
        let run = ferry(["fleet", "--json"] + arguments)
        #expect(run.exitCode == 0, "\(run.output)")
        return (try? JSONSerialization.jsonObject(with: Data(run.stdout.utf8))) as? [String: Any] ?? [:]
    }

    static func refused(_ view: [String: Any], _ kind: String) -> [[String: Any]] {
        (view["refused"] as? [[String: Any]] ?? []).filter { $0["kind"] as? String == kind }
    }

    static func served(_ view: [String: Any]) -> [Int: Int] {
        var out: [Int: Int] = [:]
        for s in view["served"] as? [[String: Any]] ?? [] { out[s["version"] as? Int ?? -1] = s["machines"] as? Int }
        return out
    }

    @Test func machinesReportWhatTheyServeAndForgedReplayedOrMalformedReportsAreRefused() throws {
        let box = Sandbox("fleet-reports")
        box.publish("a.txt", "release 3\n")
        #expect(ferry(["manifest", "build", box.published, "--version", "3"]).exitCode == 0)
        let reports = box.directory + "/reports"
        let machines = try Machines("fleet-machines", count: 3, remote: "file://" + box.published, reports: "file://\(reports)/")
        defer { Harness.remove(machines.root) }
        #expect(machines.sync() == [0, 0, 0])
        let ledger = box.directory + "/ledger"
        var view = Self.fleet(["file://" + reports, "--ledger", ledger])
        #expect(view["listed"] as? Int == 3 && view["taken"] as? Int == 3 && Self.served(view) == [3: 3], "\(view)")
        #expect((view["first_seen"] as? [String])?.count == 3, "trusted on first report, said: \(view)")
        let names = try FileManager.default.contentsOfDirectory(atPath: reports).filter { $0.hasSuffix(".report") }.sorted()
        #expect(names.count == 3)
        for name in names {
            let size = try FileManager.default.attributesOfItem(atPath: reports + "/" + name)[.size] as? Int ?? 0
            #expect(size > 0 && size <= 512, "\(name): \(size) bytes")
        }

        // Nothing changed: no new report (the sequence stays), and a read again fetches nothing;
        // a new release: a new one.
        #expect(machines.report(0)["seq"] as? Int == 1)
        #expect(machines.sync() == [0, 0, 0])
        #expect(machines.report(0)["seq"] as? Int == 1, "an unchanged machine publishes again only after report-interval")
        view = Self.fleet(["file://" + reports, "--ledger", ledger])
        #expect(view["unchanged"] as? Int == 3 && view["taken"] as? Int == 3 && Self.served(view) == [3: 3], "\(view)")
        let key0 = try #require(machines.report(0)["key"] as? String)
        let name0 = try #require(names.first { (try? String(contentsOfFile: reports + "/" + $0, encoding: .utf8))?.contains(key0) == true })
        let old0 = try Data(contentsOf: URL(fileURLWithPath: reports + "/" + name0))
        box.publish("a.txt", "release 4\n")
        #expect(ferry(["manifest", "build", box.published, "--version", "4"]).exitCode == 0)
        #expect(machines.sync() == [0, 0, 0])
        #expect(machines.report(0)["seq"] as? Int == 2)
        view = Self.fleet(["file://" + reports, "--ledger", ledger])
        #expect(Self.served(view) == [4: 3] && view["refused"] as? [Any] != nil && Self.refused(view, "forged").isEmpty, "\(view)")
        #expect(view["unchanged"] as? Int == 0, "each machine published again: each report fetched: \(view)")
        let release = (view["releases"] as? [[String: Any]])?.first { $0["version"] as? Int == 4 } ?? [:]
        #expect(release["eligible"] as? Int == 3 && release["took"] as? Int == 3 && release["passed"] as? Int == 3, "\(release)")

        // Replayed: machine 0's report of release 3 put back over its newer one (then the newer
        // one back: the machine publishes again only when something changes).
        let new0 = try Data(contentsOf: URL(fileURLWithPath: reports + "/" + name0))
        try old0.write(to: URL(fileURLWithPath: reports + "/" + name0))
        view = Self.fleet(["file://" + reports, "--ledger", ledger])
        #expect(Self.refused(view, "replayed").map { $0["name"] as? String } == [name0] && view["taken"] as? Int == 2
                && Self.served(view) == [4: 2], "\(view)")
        try new0.write(to: URL(fileURLWithPath: reports + "/" + name0))

        // Forged: machine 1's body altered (its signature no longer holds); machine 2's report
        // copied under another name; a file that is no report.
        let name1 = try #require(names.first { $0 != name0 })
        let text1 = try String(contentsOfFile: reports + "/" + name1, encoding: .utf8)
        try text1.replacingOccurrences(of: "\"served\":4", with: "\"served\":5").writeReplacing(reports + "/" + name1)
        let name2 = try #require(names.first { $0 != name0 && $0 != name1 })
        try FileManager.default.copyItem(atPath: reports + "/" + name2, toPath: reports + "/00000000000000000000000000000000.fleet.report")
        try "not a report\n".writeReplacing(reports + "/junk.report")
        try String(repeating: "x", count: 600).writeReplacing(reports + "/big.report")
        view = Self.fleet(["file://" + reports, "--ledger", ledger])
        let forged = Self.refused(view, "forged")
        #expect(Set(forged.compactMap { $0["name"] as? String }) == [name1, "00000000000000000000000000000000.fleet.report"], "\(view)")
        #expect(forged.contains { ($0["reason"] as? String)?.contains("does not verify") == true }, "\(forged)")
        #expect(Self.refused(view, "malformed").map { $0["name"] as? String } == ["big.report", "junk.report"], "\(view)")
        #expect(Self.refused(view, "malformed").first { $0["name"] as? String == "big.report" }?["reason"] as? String
                == "it is larger than 512 bytes, the most a report can be", "\(view)")
        #expect(Self.served(view) == [4: 2] && (view["machines"] as? [[String: Any]])?.contains { $0["served"] as? Int == 5 } == false, "never merged: \(view)")
        let text = ferry(["fleet", "file://" + reports, "--ledger", ledger])
        #expect(text.exitCode == 0 && text.stdout.contains("served     v4: 2 machines") && text.stdout.contains("refused    forged " + name1)
                && text.stdout.contains("refused    malformed junk.report"), "\(text.output)")

        try Self.keysAndFilters(box, machines, reports: reports, ledger: ledger)
    }

    /// A new key claiming a machine the ledger knows is refused; with a file of machine keys, only
    /// the keys listed count; the filters.
    private static func keysAndFilters(_ box: Sandbox, _ machines: Machines, reports: String, ledger: String) throws {
        var view: [String: Any]
        try Machines.write(root: machines.root, 3, id: "machine-2", remote: "file://" + box.published, reports: "file://\(reports)/", session: [])
        #expect(ferry(["sync", "now", "--config", machines.config(3), "--quiet"]).exitCode == 0)
        let key3 = try #require(machines.report(3)["key"] as? String)
        view = fleet(["file://" + reports, "--ledger", ledger])
        #expect(refused(view, "forged").contains { ($0["reason"] as? String)?.contains("reported with key") == true
                                                       && ($0["reason"] as? String)?.contains(key3) == true }, "\(view)")
        let keys = box.directory + "/machine-keys"
        try "# the one machine trusted\n\(key3) machine-2\n".writeReplacing(keys)
        view = fleet(["file://" + reports, "--ledger", box.directory + "/ledger2", "--machine-keys", keys])
        #expect(view["taken"] as? Int == 1 && (view["machines"] as? [[String: Any]])?.first?["key"] as? String == key3, "\(view)")
        #expect(refused(view, "forged").filter { ($0["reason"] as? String)?.contains("not in the file of machine keys") == true }.count == 2, "\(view)")

        // Filters.
        view = fleet(["file://" + reports, "--ledger", box.directory + "/ledger3", "--machine", "machine-0"])
        #expect((view["machines"] as? [[String: Any]])?.map { $0["machine"] as? String } == ["machine-0"], "\(view)")
        view = fleet(["file://" + reports, "--ledger", box.directory + "/ledger4", "--version", "3"])
        #expect((view["machines"] as? [Any])?.isEmpty == true && served(view).isEmpty, "\(view)")
        try unreadableLedgerAndKeptReports(box, reports: reports)
    }

    /// A ledger that exists but cannot be read (a FIFO where it was) stops the read, untouched:
    /// reading on would take replays as new and write over it. The reports kept between reads
    /// are only a saving: unreadable, every report is fetched, said once.
    private static func unreadableLedgerAndKeptReports(_ box: Sandbox, reports: String) throws {
        let ledger = box.directory + "/ledger-fifo"
        #expect(mkfifo(ledger, 0o600) == 0)
        var run = ferry(["fleet", "file://" + reports, "--ledger", ledger])
        #expect(run.exitCode == 2 && run.stderr.contains("cannot read the ledger") && run.stderr.contains("not a regular file")
                && run.stderr.contains("--ledger FILE"), "\(run.output)")
        var st = stat()
        #expect(lstat(ledger, &st) == 0 && (st.st_mode & S_IFMT) == S_IFIFO, "the ledger is left as it was")

        let kept = box.directory + "/ledger5"
        var view = fleet(["file://" + reports, "--ledger", kept])
        let taken = view["taken"] as? Int
        #expect(unlink(kept + ".objects") == 0 && mkfifo(kept + ".objects", 0o600) == 0)
        run = ferry(["fleet", "file://" + reports, "--ledger", kept, "--json"])
        view = (try? JSONSerialization.jsonObject(with: Data(run.stdout.utf8))) as? [String: Any] ?? [:]
        #expect(run.exitCode == 0 && view["unchanged"] as? Int == 0 && view["taken"] as? Int == taken, "\(run.output)")
        #expect(run.stderr.components(separatedBy: "warning").count == 2
                && run.stderr.contains("reports kept from the last read cannot be read") && run.stderr.contains("every report is fetched"), "\(run.stderr)")
        view = fleet(["file://" + reports, "--ledger", kept])
        #expect(view["unchanged"] as? Int == taken && view["taken"] as? Int == taken, "kept again after: \(view)")
    }

    /// Reports in S3 (SeaweedFS), from a push and a pull of one machine, read with the session's
    /// credentials; a location that cannot be written costs the run nothing but one warning.
    @Test func reportsGoToS3AndAnUnwritableLocationIsSaidOnce() throws {
        let store = try SeaweedFS.shared()
        let bucket = try store.newBucket("fleet")
        let box = Sandbox("fleet-s3")
        let src = box.directory + "/src"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try "hello\n".writeReplacing(src + "/a.txt")
        let s3 = ["s3-endpoint = \(store.endpoint)", "s3-credentials = \(try store.credentialsFile(in: box.directory))",
                  "report = s3://\(bucket)/fleet/"]
        try (["[agent]", "state = \(box.state)", "machine-id = s3-machine", "[session up]", "direction = push", "remote = s3://\(bucket)/tree/",
              "local = \(src)"] + s3 + ["", "[session down]", "remote = s3://\(bucket)/tree/", "local = \(box.local)"] + s3)
            .joined(separator: "\n").appending("\n").writeReplacing(box.config)
        #expect(box.sync(["--session", "up"]).exitCode == 0)
        #expect(box.sync(["--session", "down"]).exitCode == 0)
        #expect(store.keys(bucket, prefix: "fleet/").count == 2, "\(store.keys(bucket, prefix: "fleet/"))")
        var view = Self.fleet(["--config", box.config, "--session", "down", "--ledger", box.directory + "/ledger"])
        #expect(view["unchanged"] as? Int == 0, "\(view)")
        // Read again: both listed with the ETags they had, neither fetched; one kept object
        // altered by hand no longer hashes to what the ledger took, so its signature is checked (and fails).
        let again = Self.fleet(["--config", box.config, "--session", "down", "--ledger", box.directory + "/ledger"])
        #expect(again["unchanged"] as? Int == 2 && again["taken"] as? Int == 2, "\(again)")
        let kept = try String(contentsOfFile: box.directory + "/ledger.objects", encoding: .utf8)
        let lines = kept.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(kept)")
        let words = lines[0].split(separator: " ").map(String.init)
        // Its sequence number raised: the body still parses, its signature no longer holds.
        let body = String(decoding: Base64.decode(words[2]) ?? [], as: UTF8.self).replacingOccurrences(of: "\"seq\":", with: "\"seq\":9")
        try ([words[0], words[1], Base64.encode(Array(body.utf8))].joined(separator: " ") + "\n" + lines[1] + "\n").writeReplacing(box.directory + "/ledger.objects")
        view = Self.fleet(["--config", box.config, "--session", "down", "--ledger", box.directory + "/ledger"])
        #expect(Self.refused(view, "forged").count == 1 && view["taken"] as? Int == 1, "a kept object is checked as a fetched one: \(view)")
        view = Self.fleet(["--config", box.config, "--session", "down", "--ledger", box.directory + "/ledger"])
        #expect(view["taken"] as? Int == 2 && view["unchanged"] as? Int == 1, "the refused one is fetched again: \(view)")
        let served = (view["served"] as? [[String: Any]] ?? []).map { "\($0["session"] ?? "") \($0["version"] as? Int ?? -1)" }.sorted()
        let published = try #require((view["machines"] as? [[String: Any]])?.first?["served"] as? Int)
        #expect(view["taken"] as? Int == 2 && served == ["down \(published)", "up \(published)"], "the version pushed is the one pulled: \(view)")
        #expect(Set((view["machines"] as? [[String: Any]] ?? []).compactMap { $0["key"] as? String }).count == 1, "one machine key for both sessions")
        // A push serves what it published: its status says the version its report says.
        let up = (try? JSONSerialization.jsonObject(with: Data(ferry(["status", "--config", box.config, "--session", "up", "--json"]).stdout.utf8))) as? [String: Any]
        #expect((up?["sessions"] as? [[String: Any]])?.first?["served_version"] as? Int == published, "\(String(describing: up))")

        // A location that cannot be written: the run is in sync, says so once, and status tells why.
        let text = try String(contentsOfFile: box.config, encoding: .utf8).replacingOccurrences(of: "report = s3://\(bucket)/fleet/", with: "report = file:///dev/null/reports/")
        try text.writeReplacing(box.config)
        try "changed\n".writeReplacing(src + "/a.txt")
        let first = box.sync(["--session", "up", "--json"])
        #expect(first.exitCode == 0 && first.events(named: "warning").filter { ($0["message"] as? String)?.contains("status report cannot be published") == true }.count == 1, "\(first.output)")
        try "changed again\n".writeReplacing(src + "/a.txt")
        let second = box.sync(["--session", "up", "--json"])
        #expect(second.exitCode == 0 && second.events(named: "warning").allSatisfy { ($0["message"] as? String)?.contains("status report") != true }, "said once: \(second.output)")
        let status = ferry(["status", "--config", box.config, "--session", "up", "--json"])
        let report = ((try? JSONSerialization.jsonObject(with: Data(status.stdout.utf8))) as? [String: Any]).flatMap { ($0["sessions"] as? [[String: Any]])?.first?["report"] as? [String: Any] }
        #expect((report?["failure"] as? String)?.contains("/dev/null/reports") == true && report?["seq"] as? Int == 3, "\(status.output)")
    }

    /// A report location that takes the report and never answers (a hung WebDAV server) costs
    /// the run the report's patience, not the session's minute of stall-timeout, and one warning.
    @Test func aHungReportLocationCostsTheRunItsPatienceOnce() throws {
        let box = Sandbox("fleet-hung")
        box.publish("a.txt", "hello\n")
        box.buildManifest()
        let root = box.directory + "/dav"
        try FileManager.default.createDirectory(atPath: root + "/reports", withIntermediateDirectories: true)
        let server = try PythonServer(directory: root, extra: ["--dav"])
        defer { server.stop() }
        server.setFaults(["*": ["hang": true]])
        box.configure(remote: "file://" + box.published, session: ["report = \(server.url)reports/", "stall-timeout = 60s"])
        let run = box.sync(["--json"])
        let said = run.events(named: "warning").compactMap { $0["message"] as? String }.filter { $0.contains("status report") }
        #expect(run.exitCode == 0 && said.count == 1, "\(run.output)")
        print("hung report location: \(said)")
        let puts = server.requests().filter { $0["method"] as? String == "PUT" }
        #expect(!puts.isEmpty && puts.allSatisfy { $0["status"] as? Int == 0 }, "\(server.requests())")
    }

    /// Eight machines publishing their reports at once to one WebDAV collection (nginx): each
    /// report goes through a temporary name of its own, so none carries another machine's bytes,
    /// and `ferry fleet` lists the collection with PROPFIND and takes all eight, every round.
    @Test func machinesWritingToOneWebDAVCollectionAtOnceKeepTheirOwnReports() throws {
        let box = Sandbox("fleet-webdav")
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let url = "http://127.0.0.1:\(nginx.port)/reports/"
        let machines = try Machines("fleet-webdav-machines", count: 8, remote: "file://" + box.published, reports: url)
        defer { Harness.remove(machines.root) }
        for round in 1...3 {
            box.publish("a.txt", "round \(round)\n")
            #expect(ferry(["manifest", "build", box.published, "--version", "\(round)"]).exitCode == 0)
            let codes = Mutex([Int32](repeating: -1, count: machines.count))
            DispatchQueue.concurrentPerform(iterations: machines.count) { i in
                let code = ferry(["sync", "now", "--config", machines.config(i), "--quiet"]).exitCode
                codes.withLock { $0[i] = code }
            }
            #expect(codes.withLock { $0 }.allSatisfy { $0 == 0 }, "round \(round): \(codes.withLock { $0 })")
            let view = Self.fleet([url, "--ledger", box.directory + "/ledger"])
            #expect(view["listed"] as? Int == 8 && view["taken"] as? Int == 8 && (view["refused"] as? [Any])?.isEmpty == true
                    && Self.served(view) == [round: 8], "round \(round): \(view)")
        }
    }

    /// Reports to an SFTP location (OpenSSH): written with the session's sftp-key and known
    /// hosts, listed with READDIR and read with them by `ferry fleet --session`. SFTP listings
    /// carry no stamp ferry keeps, so a read again fetches each report again.
    @Test func reportsGoToSFTPAndAreListedThere() throws {
        let server = try SSHServer()
        defer { server.stop() }
        let box = Sandbox("fleet-sftp")
        box.publish("a.txt", "hello\n")
        #expect(ferry(["manifest", "build", box.published, "--version", "7"]).exitCode == 0)
        let keys = ["sftp-key = \(server.clientKey)", "sftp-known-hosts = \(server.knownHosts)"]
        let machines = try Machines("fleet-sftp-machines", count: 2, remote: "file://" + box.published, reports: server.url + "reports/", session: keys)
        defer { Harness.remove(machines.root) }
        #expect(machines.sync() == [0, 0])
        let names = try FileManager.default.contentsOfDirectory(atPath: server.root + "/reports").filter { $0.hasSuffix(".report") }
        #expect(names.count == 2, "\(names)")
        for _ in 0..<2 {
            let view = Self.fleet(["--config", machines.config(0), "--session", "fleet", "--ledger", box.directory + "/ledger"])
            #expect(view["listed"] as? Int == 2 && view["taken"] as? Int == 2 && view["unchanged"] as? Int == 0 && Self.served(view) == [7: 2], "\(view)")
        }
    }
}

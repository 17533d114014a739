import Testing
import FerryCore

/// The signed status report's form, the reader's ledger and the fleet view, without I/O.
struct StatusReportTests {
    static let key = PublicKey(raw: [UInt8](repeating: 7, count: 32))!
    static let otherKey = PublicKey(raw: [UInt8](repeating: 9, count: 32))!
    static let signature = [UInt8](repeating: 1, count: 64)

    static func report(seq: Int64 = 1, time: Int64 = 1_800_000_000, machine: String = "m1", served: Int64? = 7, seen: Int64? = 7,
                       rollout: RolloutStanding? = nil, health: String = "passed", rejected: Int64? = nil, error: String? = nil,
                       key: PublicKey = key) -> StatusReport {
        StatusReport(machine: machine, host: "host-" + machine, key: key, session: "assets", seq: seq, time: Timestamp(seconds: time),
                     served: served, tree: "0123456789abcdef01234567", seen: seen, rollout: rollout, health: health, rejected: rejected,
                     exit: error == nil ? 0 : 4, error: error, originBytes: 100, mirrorBytes: 2_000)
    }

    @Test func theLongestReportFitsIn512BytesAndReadsBack() throws {
        let big = Int64.max
        let longest = StatusReport(machine: String(repeating: "m", count: 300), host: String(repeating: "h", count: 300), key: Self.key,
                                   session: String(repeating: "s", count: 64), seq: big, time: Timestamp(seconds: 253_402_300_799),
                                   served: big, tree: String(repeating: "f", count: 24), seen: big,
                                   rollout: RolloutStanding(version: big, percent: 100, inside: false, taking: big), health: "checking",
                                   rejected: big, exit: 255, error: "remote-or-manifest", originBytes: big, mirrorBytes: big)
        let bytes = StatusReport.signed(body: longest.body(), signature: Self.signature)
        #expect(bytes.count <= StatusReport.maximumSize, "\(bytes.count) bytes")
        let parsed = try StatusReport.parse(bytes)
        #expect(parsed.report.seq == big && parsed.report.session == longest.session && parsed.signature == Self.signature)

        let usual = Self.report(rollout: RolloutStanding(version: 8, percent: 10, inside: false, taking: 7))
        let read = try StatusReport.parse(StatusReport.signed(body: usual.body(), signature: Self.signature)).report
        #expect(read == usual, "every field reads back")
        #expect(usual.objectName == "07070707070707070707070707070707.assets.report")
    }

    @Test func aReportNotAsFerryWritesOneIsMalformed() {
        let body = Array(Self.report().body())
        let valid = StatusReport.signed(body: body, signature: Self.signature)
        #expect(throws: StatusReport.Malformed.self) { try StatusReport.parse(Array(valid.dropLast())) }
        #expect(throws: StatusReport.Malformed.self) { try StatusReport.parse(body + [0x0A]) }
        #expect(throws: StatusReport.Malformed.self) { try StatusReport.parse(valid + [UInt8](repeating: 0x20, count: 400)) }
        let extra = Array(String(decoding: body, as: UTF8.self).replacingOccurrences(of: "\"exit\":0", with: "\"exit\":0,\"admin\":true").utf8)
        #expect(throws: StatusReport.Malformed.self) { try StatusReport.parse(StatusReport.signed(body: extra, signature: Self.signature)) }
        let twice = Array(String(decoding: body, as: UTF8.self).replacingOccurrences(of: "\"served\":7", with: "\"served\":7,\"served\":9").utf8)
        #expect(throws: StatusReport.Malformed.self) { try StatusReport.parse(StatusReport.signed(body: twice, signature: Self.signature)) }
    }

    @Test func theLedgerRefusesReplaysForgeriesAndReportsFromTheFuture() {
        var ledger = FleetLedger()
        let now = Timestamp(seconds: 1_800_000_100)
        #expect(ledger.judge(Self.report(seq: 5), digest: "d1", machineKeys: nil, now: now) == .taken(new: true))
        #expect(ledger.judge(Self.report(seq: 5), digest: "d1", machineKeys: nil, now: now) == .taken(new: false), "read again")
        guard case .replayed = ledger.judge(Self.report(seq: 4), digest: "d2", machineKeys: nil, now: now) else {
            Issue.record("an older sequence number is a replay"); return
        }
        guard case .forged = ledger.judge(Self.report(seq: 5, served: 9), digest: "d3", machineKeys: nil, now: now) else {
            Issue.record("a second report with the same number is forged"); return
        }
        guard case .replayed = ledger.judge(Self.report(seq: 6, time: 1_700_000_000), digest: "d1", machineKeys: nil, now: now) else {
            Issue.record("a newer number with an older time is a replay"); return
        }
        guard case .forged = ledger.judge(Self.report(seq: 7, time: now.seconds + 3_600), digest: "d1", machineKeys: nil, now: now) else {
            Issue.record("an hour ahead is refused"); return
        }
        guard case .forged = ledger.judge(Self.report(key: Self.otherKey), digest: "d1", machineKeys: nil, now: now) else {
            Issue.record("machine m1 is bound to its first key"); return
        }
        #expect(ledger.judge(Self.report(seq: 8), digest: "d1", machineKeys: nil, now: now) == .taken(new: false))
        #expect(FleetLedger(text: ledger.text) == ledger, "the ledger reads back")
        var strict = FleetLedger()
        guard case .forged = strict.judge(Self.report(), digest: "d1", machineKeys: [Self.otherKey: ""], now: now) else {
            Issue.record("a key not listed is refused"); return
        }
        guard case .forged = strict.judge(Self.report(), digest: "d1", machineKeys: [Self.key: "m2"], now: now) else {
            Issue.record("a key listed for another machine is refused"); return
        }
        #expect(strict.judge(Self.report(), digest: "d1", machineKeys: [Self.key: "m1"], now: now) == .taken(new: true))
    }

    @Test func theViewCountsEachReleasesRollout() {
        func key(_ i: Int) -> PublicKey { PublicKey(raw: [UInt8](repeating: UInt8(i), count: 32))! }
        let rollout8 = { (inside: Bool) in RolloutStanding(version: 8, percent: 50, inside: inside, taking: inside ? 8 : 7) }
        let reports = [
            Self.report(machine: "a", served: 8, seen: 8, rollout: rollout8(true), key: key(1)),
            Self.report(machine: "b", served: 8, seen: 8, rollout: rollout8(true), key: key(2)),
            Self.report(machine: "c", served: 7, seen: 8, rollout: rollout8(true), health: "failed", rejected: 8, key: key(3)),
            Self.report(machine: "d", served: 7, seen: 8, rollout: rollout8(false), key: key(4)),
            Self.report(time: 1_700_000_000, machine: "e", served: 7, seen: 7, error: "remote-or-manifest", key: key(5)),
        ]
        let view = FleetView(reports, now: Timestamp(seconds: 1_800_000_000), silentAfter: 3600)
        #expect(view.served.map { [$0.version ?? -1, Int64($0.machines)] } == [[8, 2], [7, 3]])
        let eight = view.releases.first { $0.version == 8 }
        #expect(eight.map { [$0.percent, $0.eligible, $0.took, $0.passed, $0.rolledBack] } == [50, 3, 3, 2, 1], "\(String(describing: eight))")
        #expect(view.releases.first { $0.version == 7 }?.passed == 5)
        #expect(view.silent.map(\.machine) == ["e"] && view.errors.map(\.error) == ["remote-or-manifest"])
        #expect(view.originBytes == 500 && view.mirrorBytes == 10_000)
    }

    @Test func keptObjectsAreGivenBackOnlyUnderTheirStamp() {
        var objects = FleetObjects()
        objects.keep("a.fleet.report", stamp: "\"etag1\"-368", bytes: Array("one\n".utf8))
        objects.keep("b.fleet.report", stamp: nil, bytes: Array("no stamp\n".utf8))
        objects.keep("c d.report", stamp: "s", bytes: Array("a name with a space\n".utf8))
        objects.keep("e.report", stamp: "two words", bytes: Array("a stamp with a space\n".utf8))
        #expect(objects.objects.keys.sorted() == ["a.fleet.report"], "only what a line can hold is kept")
        let read = FleetObjects(text: objects.text + "junk line\nx.report s !!notbase64\n")
        #expect(read == objects, "read back, the lines that do not parse dropped")
        #expect(read.bytes("a.fleet.report", stamp: "\"etag1\"-368") == Array("one\n".utf8))
        #expect(read.bytes("a.fleet.report", stamp: "\"etag2\"-368") == nil && read.bytes("a.fleet.report", stamp: nil) == nil)
        #expect(FleetObjects(text: "big.report s " + Base64.encode([UInt8](repeating: 65, count: 513)) + "\n").objects.isEmpty,
                "nothing over a report's size is taken back")
    }
}

import Testing
@testable import FerryCore

struct UnitsTests {
    @Test(arguments: [("90s", 90.0), ("15m", 900), ("2h", 7200), ("7d", 604800), ("1h30m", 5400), ("45", 45), ("0.5s", 0.5)])
    func parsesDurations(text: String, seconds: Double) {
        #expect(Units.parseDuration(text) == seconds)
    }

    @Test(arguments: ["", "abc", "5x", "m", "-5s", "5 m s", "1h30", "1e19", "99999999999d", "inf"])
    func refusesBadDurations(text: String) {
        #expect(Units.parseDuration(text) == nil)
    }

    @Test(arguments: [("512K", Int64(524288)), ("20M", 20971520), ("1G", 1073741824), ("4096", 4096), ("1.5K", 1536), ("2MiB", 2097152)])
    func parsesSizes(text: String, bytes: Int64) {
        #expect(Units.parseSize(text) == bytes)
    }

    @Test(arguments: ["", "12Q", "K", "-1M", "1e400"])
    func refusesBadSizes(text: String) {
        #expect(Units.parseSize(text) == nil)
    }

    @Test func formatsForPeople() {
        #expect(Units.formatBytes(512) == "512 B")
        #expect(Units.formatBytes(1536) == "1.50 KiB")
        #expect(Units.formatBytes(200 * 1024 * 1024) == "200.0 MiB")
        #expect(Units.formatDuration(5) == "5s")
        #expect(Units.formatDuration(185) == "3m05s")
        #expect(Units.formatDuration(7800) == "2h10m")
    }

    @Test(arguments: [(0, "0"), (999, "999"), (1_000, "1,000"), (1_530, "1,530"), (212_000, "212,000"), (1_234_567, "1,234,567"), (-4_200, "-4,200")])
    func groupsCounts(n: Int, text: String) {
        #expect(Units.formatCount(n) == text)
    }

    /// `--transfers` and the handed-over limits the agent reads: the config's range, no more.
    @Test func runLimitsParseAndSayThemselves() throws {
        #expect(try RunLimits.transfers(parsing: "256") == 256)
        for bad in ["0", "257", "x", "-1", ""] { #expect(throws: ConfigProblem.self) { try RunLimits.transfers(parsing: bad) } }
        let limits = RunLimits(bandwidth: try BandwidthSchedule(parsing: "512K"), transfers: 2)
        #expect(limits.description == "bwlimit 512K and 2 transfers" && !limits.isEmpty && RunLimits().isEmpty)
    }
}

struct TimestampTests {
    @Test func roundTripsRFC3339() throws {
        let t = try #require(Timestamp(rfc3339: "2026-11-20T08:00:00Z"))
        #expect(t.seconds == 1_795_161_600)
        #expect(t.rfc3339 == "2026-11-20T08:00:00Z")
        let frac = try #require(Timestamp(rfc3339: "2026-11-20T08:00:00.123456789Z"))
        #expect(frac.nanoseconds == 123_456_789)
        #expect(frac.rfc3339 == "2026-11-20T08:00:00.123456789Z")
        let offset = try #require(Timestamp(rfc3339: "2026-11-20T10:00:00+02:00"))
        #expect(offset == t)
        #expect(Timestamp(rfc3339: "1969-12-31T23:59:59Z")?.seconds == -1)
        #expect(Timestamp(rfc3339: "2024-02-29T00:00:00Z") != nil)
    }

    @Test func formatsEveryRange() {
        #expect(Timestamp(seconds: -1).rfc3339 == "1969-12-31T23:59:59Z")
        #expect(Timestamp(seconds: 0, nanoseconds: 500_000_000).rfc3339 == "1970-01-01T00:00:00.5Z")
        #expect(Timestamp(seconds: 4_102_444_800, nanoseconds: 1).rfc3339 == "2100-01-01T00:00:00.000000001Z")
        #expect(Timestamp(seconds: 253_402_300_800).rfc3339 == "10000-01-01T00:00:00Z")
        for seconds: Int64 in [-62_135_596_800, -1, 0, 951_782_400, 1_795_161_599, 253_402_300_799] {
            let t = Timestamp(seconds: seconds, nanoseconds: 120_000)
            #expect(Timestamp(rfc3339: t.rfc3339) == t, "\(t.rfc3339)")
        }
    }

    @Test func parsesHTTPDates() throws {
        let t = try #require(Timestamp(httpDate: "Fri, 20 Nov 2026 08:00:00 GMT"))
        #expect(t == Timestamp(rfc3339: "2026-11-20T08:00:00Z"))
        #expect(Timestamp(httpDate: "Sun, 6 Nov 1994 08:49:37 GMT") == Timestamp(rfc3339: "1994-11-06T08:49:37Z"))
        #expect(Timestamp(httpDate: "Thu, 29 Feb 2024 23:59:59 GMT") == Timestamp(rfc3339: "2024-02-29T23:59:59Z"))
        #expect(Timestamp(httpDate: "Sun,  06 Nov 1994 08:49:37 GMT") == Timestamp(rfc3339: "1994-11-06T08:49:37Z"))
    }

    @Test(arguments: ["", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Nox 1994 08:49:37 GMT",
                      "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 94 08:49:37 GMT",
                      "Sun, 006 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 8:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT extra",
                      "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, -6 Nov 1994 08:49:37 GMT",
                      "Sun, 06 Nov 99999 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:3x GMT"])
    func refusesMalformedHTTPDates(text: String) {
        #expect(Timestamp(httpDate: text) == nil)
    }

    @Test(arguments: ["", "2026-11-20", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-11-20T25:00:00Z",
                      "2026-11-20T08:00:00", "2026-11-20T08:00:00Zjunk", "2026-11-20T08:00:00.Z"])
    func refusesMalformedTimes(text: String) {
        #expect(Timestamp(rfc3339: text) == nil)
    }
}

struct RelativePathTests {
    @Test(arguments: ["a", "css/site.css", "dir with spaces/file name.txt", "ünïcødé/ç é.txt", "a/.hidden", "...", "a/..b", ".ferryx/file"])
    func acceptsSafePaths(text: String) throws {
        #expect(try RelativePath(validating: text).string == text)
    }

    @Test(arguments: [
        ("", RelativePath.Problem.empty), ("/etc/passwd", .absolute), ("../x", .dotSegment("..")), ("a/../../x", .dotSegment("..")),
        ("a/./b", .dotSegment(".")), ("a//b", .emptySegment), ("a/", .emptySegment), ("a\u{0}b", .controlCharacter(0)),
        ("a\nb", .controlCharacter(10)), ("a\u{7F}", .controlCharacter(0x7F)), (".ferry/partial/1.part", .reserved), (".ferry", .reserved),
    ])
    func refusesHostilePaths(text: String, problem: RelativePath.Problem) {
        #expect(throws: problem) { try RelativePath(validating: text) }
    }

    @Test func refusesOverlongSegments() {
        #expect(throws: RelativePath.Problem.tooLong) { try RelativePath(validating: String(repeating: "x", count: 256)) }
    }

    @Test func comparesBytesNotCanonicalEquivalence() throws {
        let nfc = try RelativePath(validating: "caf\u{E9}")
        let nfd = try RelativePath(validating: "cafe\u{301}")
        #expect(nfc != nfd)
        #expect(Set([nfc, nfd]).count == 2)
    }

    @Test func percentEncodesEachSegment() throws {
        #expect(try RelativePath(validating: "dir with spaces/ç?#%.txt").percentEncoded == "dir%20with%20spaces/%C3%A7%3F%23%25.txt")
        #expect(try RelativePath(validating: "a-b_c.d~e/F9").percentEncoded == "a-b_c.d~e/F9")
    }

    @Test func knowsItsAncestors() throws {
        let p = try RelativePath(validating: "a/b/c.txt")
        #expect(p.ancestors.map(\.string) == ["a/b", "a"])
        #expect(p.parent?.string == "a/b")
        #expect(try RelativePath(validating: "top").parent == nil)
    }
}

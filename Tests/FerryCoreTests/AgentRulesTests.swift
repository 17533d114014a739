import Testing
@testable import FerryCore
import FerryRuntime

/// The agent's schedule and its hooks' command lines: pure rules, checked as tables.
struct PollScheduleTests {
    @Test func pollsOneIntervalAfterAPollThatReachedTheRemoteNeverLater() {
        var s = PollSchedule(interval: 900, firstRetry: 1)
        #expect(s.delay(after: .reached, random: 0) == 900)
        #expect(s.delay(after: .reached, random: 0.5) == 855)
        #expect(s.delay(after: .reached, random: 0.999_999) > 810)
        #expect(s.delay(after: .reached, random: 7) == 810, "jitter is clamped: at most 10% early")
    }

    @Test func backsOffExponentiallyAfterFailuresCappedAtTheInterval() {
        var s = PollSchedule(interval: 60, firstRetry: 1)
        let delays = (0..<9).map { _ in s.delay(after: .failed, random: 0) }
        #expect(delays == [1, 2, 4, 8, 16, 32, 60, 60, 60])
        #expect(s.failures == 9)
        #expect(s.delay(after: .reached, random: 0) == 60)
        #expect(s.failures == 0, "a poll that reaches the remote ends the backoff")
        #expect(s.delay(after: .failed, random: 0) == 1, "the next outage starts from retry-delay again")
    }

    @Test func aShortIntervalCapsTheBackoffAndRetryDelayZeroStillWaitsASecond() {
        var s = PollSchedule(interval: 2, firstRetry: 0)
        #expect((0..<4).map { _ in s.delay(after: .failed, random: 0) } == [1, 2, 2, 2])
        var long = PollSchedule(interval: 3600, firstRetry: 5)
        for _ in 0..<40 { _ = long.delay(after: .failed, random: 0) }
        #expect(long.delay(after: .failed, random: 0) == 3600, "no overflow after many failures")
    }

    @Test func aBusySessionIsAskedAgainSoon() {
        var s = PollSchedule(interval: 900, firstRetry: 1)
        #expect(s.delay(after: .busy, random: 0) == PollSchedule.busyDelay)
        var short = PollSchedule(interval: 2, firstRetry: 1)
        #expect(short.delay(after: .busy, random: 0) == 2)
    }

    @Test(arguments: [
        (ExitCode.inSync, 0, PollSchedule.Outcome.reached),
        (.someFilesFailed, 0, .reached),
        (.incomplete, 0, .reached),
        (.incomplete, 2, .failed),
        (.remoteOrManifest, 0, .failed),
        (.localIO, 0, .failed),
        (.usage, 0, .failed),
        (.sessionBusy, 0, .busy),
    ])
    func whatARunMeansForTheSchedule(code: ExitCode, waiting: Int, expected: PollSchedule.Outcome) {
        #expect(PollSchedule.outcome(exitCode: code, waiting: waiting) == expected)
    }

    /// What the agent says of a session is written as this text (the store, `session-state`
    /// events) and read by status, the journal and scripts: each state reads back from it.
    @Test func aPollStateIsWrittenAsItWasAndReadBack() {
        let states: [(PollState, String)] = [
            (.starting, "starting"), (.idle, "idle"), (.busy, "busy: another ferry process holds the session"),
            (.held("3 files wait for AC power"), "held: 3 files wait for AC power"),
            (.waiting("HTTP 503"), "waiting for connectivity: HTTP 503"), (.failed("HTTP 403: refused"), "failed: HTTP 403: refused"),
        ]
        for (state, text) in states {
            #expect(state.text == text)
            #expect(PollState(text: text) == state, "\(text)")
        }
        #expect(states.map { $0.0.lastPollFailed } == [false, false, false, false, true, true])
        for text in ["", "failed", "waiting: no route", "Idle", "busy", "held"] { #expect(PollState(text: text) == nil, "\(text)") }
    }
}

struct HookCommandTests {
    @Test(arguments: [
        ("/usr/bin/notify", ["/usr/bin/notify"]),
        ("  notify   --quiet\tx ", ["notify", "--quiet", "x"]),
        ("notify 'two words' \"and three more\"", ["notify", "two words", "and three more"]),
        ("notify '$HOME' $HOME ; rm -rf * | cat", ["notify", "$HOME", "$HOME", ";", "rm", "-rf", "*", "|", "cat"]),
        ("notify \"say \\\"hi\\\" \\\\ \\n\"", ["notify", "say \"hi\" \\ \\n"]),
        ("notify a\\ b 'it'\\''s' ''", ["notify", "a b", "it's", ""]),
    ])
    func splitsWordsWithoutExpansion(text: String, expected: [String]) throws {
        let command = try HookCommand(parsing: text)
        #expect(command.arguments == expected)
        #expect(try HookCommand(parsing: command.description).arguments == expected, "description reads back the same")
    }

    @Test(arguments: [
        ("notify 'open", "' quote is not closed"),
        ("notify \"open", "\" quote is not closed"),
        ("notify \\", "lone backslash"),
        ("   ", "empty"),
        ("'' x", "empty"),
        ("notify \u{1b}[2J", "control character"),
    ])
    func refusesWhatCannotBeACommand(text: String, problem: String) {
        #expect {
            _ = try HookCommand(parsing: text)
        } throws: { error in
            (error as? ConfigProblem)?.message.contains(problem) == true
        }
    }

    @Test func configReadsHooksAndTheirTimeout() throws {
        let text = """
            [session s]
            remote = https://example.net/
            local = /srv/s
            on-file-done = /usr/local/bin/reindex --file   # the path comes as $FERRY_PATH
            on-session-done = systemctl reload 'my web'
            hook-timeout = 2m
            """
        let config = try ConfigParser.parse(text, path: "/etc/ferry/ferry.conf")
        let s = try #require(config.sessions.first)
        #expect(s.onFileDone?.arguments == ["/usr/local/bin/reindex", "--file"])
        #expect(s.onSessionDone?.arguments == ["systemctl", "reload", "my web"])
        #expect(s.hookTimeout == 120)
    }

    @Test func metricsMustBeATextfileTheCollectorReads() throws {
        let session = "\n[session s]\nremote = https://example.net/\nlocal = /srv/s\n"
        let ok = try ConfigParser.parse("[agent]\nmetrics = prom/ferry.prom\n" + session, path: "/etc/ferry/ferry.conf")
        #expect(ok.agent.metrics == "/etc/ferry/prom/ferry.prom")
        #expect {
            _ = try ConfigParser.parse("[agent]\nmetrics = /var/lib/ferry.txt\n" + session, path: "/etc/ferry/ferry.conf")
        } throws: { error in
            (error as? FerryError)?.message == "/etc/ferry/ferry.conf:2: [agent] key 'metrics': '/var/lib/ferry.txt' does not end in .prom"
        }
    }
}

/// Events survive their JSON form: what a client of the agent's control socket reads back is the
/// event the agent emitted.
struct EventDecodingTests {
    static let time = Timestamp(rfc3339: "2026-11-23T10:00:00.5Z")!
    static let path = RelativePath(trusted: "dir/\u{1b}odd \"name\".txt")
    static let bodies: [Event.Body] = [
        .syncStarted(direction: .pull, dryRun: false),
        .manifestFetched(url: "http://h/m.json", version: 7, files: 3, unchanged: true),
        .manifestFetched(url: "http://h/m.json", version: nil, files: 0, unchanged: false),
        .manifestRetrying(url: "http://h/m.json", attempt: 2, delay: 1.5, error: "timeout"),
        .planned(PlanSummary(transfers: 1, bytes: 2, unknownSizes: 8, metadataFixes: 3, deletions: 4, upToDate: 5, hashed: 6, extrasKept: 7, skipped: 9)),
        .planItem(action: "download", path: path, reason: "missing", size: 10),
        .planItem(action: "delete", path: path, reason: nil, size: nil),
        .replaced(path: path, was: "directory", now: "file"),
        .fileStarted(path: path, size: 99, reason: .changed),
        .fileResumed(path: path, offset: 5), .fileInterrupted(path: path, offset: 6), .fileSuspended(path: path, offset: 7),
        .fileRestarted(path: path, reason: "the server sent 200"),
        .fileRetrying(path: path, attempt: 3, delay: 0.25, error: "reset"),
        .fileWaiting(path: path, error: "refused"),
        .sessionHeld(files: 4, waitsFor: "AC power (the machine runs on battery)"),
        .fileDelayed(path: path, until: time),
        .delayedDue(path: path, disposition: .replace, reason: "changed"),
        .fileDone(path: path, size: 10, fetched: 4),
        .fileFailed(path: path, error: "404"),
        .metadataFixed(path: path), .fileDeleted(path: path),
        .generationSwitched(generation: "g4", directory: "/srv/m.generations/g4", previous: "g3", changed: 2),
        .generationSwitched(generation: "g1", directory: "/srv/m.generations/g1", previous: nil, changed: 0),
        .warning(message: "line one\nline two"),
        .sourceServed(SourceCount(source: "http://cache/", bytes: 5, requests: 2, demoted: "sent nothing for 8s",
                                  firstByte: 0.0123, slowestFirstByte: 0.8), share: 0.25),
        .sourceServed(SourceCount(source: "origin", bytes: 0, requests: 0), share: 0),
        .manifestBuilt(output: "/m.json", version: 2, files: 3, bytes: 4),
        .manifestBuilt(output: "/m.json", version: 2, files: 3, bytes: 4, signedBy: "ed25519:AAAA", sha256sums: "/SHA256SUMS"),
        .checked(version: 3, listed: 4, hashed: 5, differ: 1, unnoticed: 0),
        .sessionState(state: .waiting("refused"), nextPoll: time),
        .sessionState(state: .held("1 file waits for AC power"), nextPoll: nil),
        .agent(action: "reloaded", message: "2 sessions"),
        .syncFinished(exitCode: 4, transferred: 1, failed: 2, deleted: 3, bytes: 4, seconds: 1.25, message: "why", hint: "do", dryRun: false),
        .syncFinished(exitCode: 0, transferred: 0, failed: 0, deleted: 0, bytes: 0, seconds: 0, message: nil, hint: nil, dryRun: true),
    ]

    @Test func everyEventReadsBackAsItself() throws {
        for body in Self.bodies {
            let event = Event(time: Self.time, session: "s", body: body)
            let json = event.json
            let fields = try JSONReader.flatFields(Array(json.utf8))
            let back = try #require(Event(fields: fields), "\(json) did not read back")
            #expect(back.json == json)
            #expect(Event.names.contains(event.name), "\(event.name) is listed for ferry events --type")
        }
    }

    @Test func linesThatAreNotFerryEventsAreNotEvents() {
        for text in ["{}", "{\"time\":\"x\",\"session\":\"s\",\"event\":\"file-done\"}",
                     "{\"time\":\"2026-11-23T10:00:00Z\",\"session\":\"s\",\"event\":\"no-such-event\"}",
                     "{\"time\":\"2026-11-23T10:00:00Z\",\"session\":\"s\",\"event\":\"session-state\",\"state\":\"asleep\"}",
                     "{\"time\":\"2026-11-23T10:00:00Z\",\"session\":\"s\",\"event\":\"file-done\",\"path\":\"a\",\"size\":\"big\",\"fetched\":1}",
                     // Counts as RFC 8259 writes a number of 0 or more, not as Int() reads one.
                     "{\"time\":\"2026-11-23T10:00:00Z\",\"session\":\"s\",\"event\":\"file-done\",\"path\":\"a\",\"size\":\"+5\",\"fetched\":1}",
                     "{\"time\":\"2026-11-23T10:00:00Z\",\"session\":\"s\",\"event\":\"file-done\",\"path\":\"a\",\"size\":\"05\",\"fetched\":1}",
                     "{\"time\":\"2026-11-23T10:00:00Z\",\"session\":\"s\",\"event\":\"file-done\",\"path\":\"a\",\"size\":-0,\"fetched\":1}"] {
            let fields = try! JSONReader.flatFields(Array(text.utf8))
            #expect(Event(fields: fields) == nil, "\(text)")
        }
    }
}

/// Discretionary conditions and bandwidth schedules: the rules a discretionary session and the
/// engine's limits follow, given the machine's state by hand.
struct DiscretionTests {
    func at(_ time: String) -> Int { TimeOfDay.parse(time)! }

    @Test func aWindowMayPassMidnightAndOpensAtItsStart() throws {
        let night = try TimeWindow(parsing: "22:00-06:00")
        #expect(night.contains(at("22:00")) && night.contains(at("23:59:59")) && night.contains(at("00:00")) && night.contains(at("05:59:59")))
        #expect(!night.contains(at("06:00")) && !night.contains(at("12:00")) && !night.contains(at("21:59:59")))
        #expect(night.secondsUntilOpen(from: at("21:00")) == 3600)
        #expect(night.secondsUntilOpen(from: at("06:00")) == 16 * 3600)
        #expect(night.secondsUntilOpen(from: at("23:00")) == 0)
        let day = try TimeWindow(parsing: "09:00-24:00")
        #expect(day.contains(at("23:59:59")) && !day.contains(at("00:00")) && !day.contains(at("08:59:59")))
        #expect(TimeOfDay.parse("24:00") == nil, "24:00 only ends a window")
        #expect(TimeOfDay.format(at("07:05:09")) == "07:05:09" && TimeOfDay.format(at("07:05")) == "07:05")
    }

    @Test func namesEveryConditionThatDoesNotHold() throws {
        var d = Discretion()
        d.windows = [try TimeWindow(parsing: "01:00-05:00")]
        d.maxLoad = 2
        d.minFree = .percent(10)
        var host = HostState(secondOfDay: at("00:30"))
        host.onACPower = false
        host.metered = true
        host.meteredSource = "NetworkManager"
        host.load = 3.5
        host.freeBytes = 5 << 30
        host.totalBytes = 100 << 30
        #expect(d.unmet(host) == [
            "the time window 01:00-05:00 (opens in 30m00s)",
            "AC power (the machine runs on battery)",
            "an unmetered network (NetworkManager says the network is metered)",
            "a load below 2.00 (the 1-minute load is 3.50)",
            "10.0 GiB free on the local filesystem (5.00 GiB free)",
        ])
        host = HostState(secondOfDay: at("02:00"))
        host.load = 1.9
        host.freeBytes = 11 << 30
        host.totalBytes = 100 << 30
        #expect(d.unmet(host).isEmpty)
        host.load = nil
        host.freeBytes = nil
        #expect(d.unmet(host).isEmpty, "what cannot be read does not hold work back")
        d.requireACPower = false
        d.requireUnmetered = false
        host.onACPower = false
        host.metered = true
        #expect(d.unmet(host).isEmpty, "battery and metered are allowed when the config says so")
    }

    @Test func aScheduleHoldsEachRateUntilTheNextAndWrapsAtMidnight() throws {
        let s = try BandwidthSchedule(parsing: "19:00,off 08:00,512K 12:00,2M/s")
        #expect(s.entries.map(\.start) == [at("08:00"), at("12:00"), at("19:00")], "sorted by time")
        #expect(s.rate(at: at("07:59:59")) == nil, "before the first entry the last one holds")
        #expect(s.rate(at: at("08:00")) == 512 << 10)
        #expect(s.rate(at: at("11:59")) == 512 << 10)
        #expect(s.rate(at: at("12:00")) == 2 << 20)
        #expect(s.rate(at: at("19:00")) == nil)
        #expect(s.lowest == 512 << 10)
        #expect(try BandwidthSchedule(parsing: "1M").rate(at: at("03:00")) == 1 << 20)
        #expect(try BandwidthSchedule(parsing: "off").lowest == nil)
        #expect(s.description == "08:00,512K 12:00,2M 19:00,off")
    }
}

/// What each source served, as the state keeps it for `status`: read back as written, times
/// and all, and lines kept before the times were still read.
struct SourceCountTextTests {
    @Test func countsReadBackAsWritten() {
        let counts = [SourceCount(source: "http://cache:8080/m/", bytes: 1 << 20, requests: 12, demoted: "sent wrong bytes\nfor 2 files",
                                  firstByte: 0.0042, slowestFirstByte: 1.5),
                      SourceCount(source: "origin", bytes: 7, requests: 1)]
        let back = SourceCount.parse(SourceCount.text(counts))
        #expect(back.count == 2)
        #expect(back[0].source == "http://cache:8080/m/" && back[0].bytes == 1 << 20 && back[0].requests == 12)
        #expect(back[0].firstByte == 0.0042 && back[0].slowestFirstByte == 1.5 && back[0].demoted == "sent wrong bytes for 2 files")
        #expect(back[1] == counts[1])
        let old = SourceCount.parse("10 2 http://m/\tsent nothing for 5s\n3 1 origin")
        #expect(old == [SourceCount(source: "http://m/", bytes: 10, requests: 2, demoted: "sent nothing for 5s"),
                        SourceCount(source: "origin", bytes: 3, requests: 1)])
        #expect(SourceCount.parse("10 2 x/y http://m/").isEmpty, "times that are not two numbers are not read as a source")
        #expect(SourceCount.seconds(0.0042) == "4 ms" && SourceCount.seconds(12.34) == "12.3 s")
    }
}

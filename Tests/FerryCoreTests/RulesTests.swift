import Testing
@testable import FerryCore

/// The runtime's rules, each a pure function, each a table.
struct RunOutcomeTests {
    @Test(arguments: [
        (RunOutcome(), ExitCode.inSync),
        (RunOutcome(counts: TransferCounts(failed: 1)), .someFilesFailed),
        (RunOutcome(deletionsRefused: true), .someFilesFailed),
        (RunOutcome(counts: TransferCounts(waiting: 2)), .remoteOrManifest),
        // A 404 on one file and an unreachable remote for another: the remote needs attention first,
        // in one session exactly as across two.
        (RunOutcome(counts: TransferCounts(failed: 1, waiting: 1)), .remoteOrManifest),
        (RunOutcome(localIOFailed: true, counts: TransferCounts(failed: 3, waiting: 1)), .localIO),
        (RunOutcome(stopped: true), .incomplete),
        (RunOutcome(counts: TransferCounts(suspended: 1)), .incomplete),
        (RunOutcome(counts: TransferCounts(delayed: 4)), .incomplete),
        (RunOutcome(counts: TransferCounts(held: 2, heldFor: "ac-power")), .incomplete),
        // What was transferred or deleted decides nothing.
        (RunOutcome(counts: TransferCounts(transferred: 3, deleted: 2, bytes: 9)), .inSync),
        (RunOutcome(counts: TransferCounts(failed: 1), stopped: true), .someFilesFailed),
        (RunOutcome(error: .busy), .sessionBusy),
        (RunOutcome(error: .manifest), .remoteOrManifest),
        (RunOutcome(error: .usage), .usage),
        (RunOutcome(error: .stopped), .incomplete),
    ])
    func mapsEachConditionToOneExitCode(outcome: RunOutcome, expected: ExitCode) {
        #expect(outcome.exitCode == expected)
    }

    @Test func oneRuleWithinAndAcrossSessions() {
        let a = RunOutcome(counts: TransferCounts(failed: 1))
        let b = RunOutcome(counts: TransferCounts(waiting: 1))
        var both = a
        both.counts.waiting = b.counts.waiting
        #expect(ExitCode.worst([a.exitCode, b.exitCode]) == both.exitCode)
        #expect(ExitCode.worst([]) == .inSync)
        #expect(ExitCode.worst([.incomplete, .sessionBusy, .someFilesFailed]) == .sessionBusy)
    }

    @Test func aStagesCountsAddToTheRunsWithTheEarliestBegin() {
        let early = Timestamp(seconds: 1_000), late = Timestamp(seconds: 2_000)
        var run = TransferCounts(failed: 1, deleted: 2, delayed: 1, nextBegin: late)
        run += TransferCounts(transferred: 3, failed: 1, deleted: 1, bytes: 40, waiting: 1, suspended: 2, delayed: 1, nextBegin: early,
                              held: 1, heldFor: "ac-power")
        #expect(run == TransferCounts(transferred: 3, failed: 2, deleted: 3, bytes: 40, waiting: 1, suspended: 2, delayed: 2, nextBegin: early,
                                      held: 1, heldFor: "ac-power"))
        #expect(run.notDone == 6)
        run += TransferCounts()
        #expect(run.nextBegin == early && run.heldFor == "ac-power", "a stage that delays and holds nothing keeps what the run said")
    }
}

struct TaskStateMachineTests {
    typealias Row = (from: TaskState, event: TaskEvent, to: TaskState?)
    static let table: [Row] = [
        (.queued, .start, .running), (.waiting, .start, .running), (.failed, .start, .running),
        (.running, .retry, .queued), (.running, .wait, .waiting), (.running, .fail, .failed), (.running, .complete, .done),
        (.queued, .suspend, .suspended), (.running, .suspend, .suspended), (.delayed, .suspend, .suspended),
        (.done, .suspend, nil), (.suspended, .suspend, nil),
        // A suspended task stays so whatever a running transfer reports, until resumed...
        (.suspended, .start, nil), (.suspended, .retry, nil), (.suspended, .wait, nil), (.suspended, .fail, nil),
        (.suspended, .queue, nil), (.suspended, .delay, nil), (.suspended, .resume, .queued),
        // ...but a file committed before the cancel reached it is done.
        (.suspended, .complete, .done),
        (.queued, .resume, nil), (.running, .resume, nil),
        (.delayed, .due, .queued), (.queued, .due, nil),
        (.done, .start, nil), (.done, .retry, nil), (.done, .fail, nil), (.done, .queue, .queued), (.done, .delay, .delayed),
        (.failed, .queue, .queued), (.waiting, .delay, .delayed),
    ]

    @Test func transitions() {
        for row in Self.table {
            #expect(row.from.after(row.event) == row.to, "\(row.from) on \(row.event)")
        }
    }

    @Test func everyEventLeadsToOneState() {
        for event in TaskEvent.allCases {
            let targets = Set(TaskState.applying(event).compactMap { $0.after(event) })
            #expect(targets.count == 1, "\(event) leads to \(targets)")
        }
    }
}

struct RetryRulesTests {
    @Test(arguments: [
        (FailureCause.network(curlCode: 7), RetryClass.connectivity),  // couldn't connect
        (.network(curlCode: 6), .connectivity),  // couldn't resolve host
        (.network(curlCode: 28), .later),  // timed out (a stall)
        (.network(curlCode: 56), .later),  // connection reset
        (.network(curlCode: 18), .later),  // partial file
        (.network(curlCode: 60), .never),  // certificate not trusted
        (.http(status: 503), .later), (.http(status: 429), .later), (.http(status: 416), .later),
        (.http(status: 404), .never), (.http(status: 403), .never), (.http(status: 501), .never),
        (.local(errno: 28), .never),  // ENOSPC
        (.truncated, .later), (.rangeNotHonoured, .later), (.wrongLength, .never), (.unusable, .never),
        (.contentMismatch(afterResume: true), .later), (.contentMismatch(afterResume: false), .never),
    ])
    func classifies(cause: FailureCause, expected: RetryClass) {
        #expect(cause.retryClass == expected)
    }

    @Test func errorsWithoutARequestAreNotRetried() {
        #expect(FerryError.manifest("bad").retryClass == .never)
        #expect(FerryError(.remote, "x", cause: .http(status: 502)).retryClass == .later)
    }

    @Test func backoffDoublesIsCappedAndHonoursRetryAfter() {
        #expect(retryDelay(attempt: 1, baseDelay: 1, retryAfter: nil, jitter: 1) == 1)
        #expect(retryDelay(attempt: 4, baseDelay: 1, retryAfter: nil, jitter: 1) == 8)
        #expect(retryDelay(attempt: 4, baseDelay: 1, retryAfter: nil, jitter: 0.5) == 4)
        #expect(retryDelay(attempt: 40, baseDelay: 1, retryAfter: nil, jitter: 1) == 60)
        #expect(retryDelay(attempt: 1, baseDelay: 1, retryAfter: 30, jitter: 1) == 30)
        // A server's Retry-After is honoured up to 5 minutes a wait, never an hour or a year.
        #expect(retryDelay(attempt: 1, baseDelay: 1, retryAfter: 3600, jitter: 1) == 300)
        #expect(retryDelay(attempt: 1, baseDelay: 1, retryAfter: 1e9, jitter: 1) == 300)
        #expect(retryDelay(attempt: 1, baseDelay: 1, retryAfter: .infinity, jitter: 1) == 1)
    }

    @Test func oneRetryRuleDecidesForDownloadsAndUploads() {
        let rule = RetryRule(retries: 2, baseDelay: 1, resourceTimeout: 3600)
        func decide(_ retry: RetryClass, tries: Int, queuedFor: Double = 10) -> RetryDecision {
            rule.decide(message: "boom", retry: retry, retryAfter: nil, triesThisRun: tries, queuedFor: queuedFor, jitter: 1)
        }
        #expect(decide(.later, tries: 1) == .retry(after: 1))
        #expect(decide(.later, tries: 2) == .retry(after: 2))
        #expect(decide(.later, tries: 3) == .giveUp(message: "boom (after 3 tries)"))
        #expect(decide(.connectivity, tries: 2) == .retry(after: 2))
        #expect(decide(.connectivity, tries: 3) == .waitForConnectivity, "out of tries, the task waits for the remote")
        #expect(decide(.never, tries: 1) == .giveUp(message: "boom"))
        // resource-timeout counts from when the task was queued, across runs, whatever the class.
        guard case let .giveUp(message) = decide(.connectivity, tries: 1, queuedFor: 3601) else {
            Issue.record("a task past its resource-timeout is given up")
            return
        }
        #expect(message.contains("resource-timeout") && message.hasPrefix("boom"))
        #expect(decide(.never, tries: 1, queuedFor: 3601) == .giveUp(message: "boom"), "a failure that will not change says only what it is")
    }
}

/// A full disk (or spent quota) is the disk's failure, said once per run; any other is the file's.
struct SharedCauseTests {
    @Test func aFullDiskIsOneCauseForEveryFile() {
        #expect(SharedCause.of("cannot write /srv/m/a.bin: No space left on device") == "No space left on device")
        #expect(SharedCause.of("cannot sync /srv/m/b.bin: No space left on device") == "No space left on device")
        #expect(SharedCause.of("cannot write /home/u/c: Disk quota exceeded") == "Disk quota exceeded")
        #expect(SharedCause.of("cannot open /srv/m/d: Permission denied") == nil)
        #expect(SharedCause.of("HTTP 404 Not Found") == nil)
    }

    /// Two tries of one failure differ only in the time libcurl says they took: one failure.
    /// Another port, another status, another cause stay apart.
    @Test func aRetriedFailureIsTheSameWhateverTimeItTook() {
        let connect = { (port: Int, ms: Int) in
            "cannot fetch the manifest http://127.0.0.1:\(port)/m.json: Failed to connect to 127.0.0.1 port \(port) after \(ms) ms: Couldn't connect to server"
        }
        #expect(SharedCause.retryIdentity(connect(13835, 3)) == SharedCause.retryIdentity(connect(13835, 0)))
        #expect(SharedCause.retryIdentity(connect(13835, 3)) != SharedCause.retryIdentity(connect(13836, 3)))
        #expect(SharedCause.retryIdentity("Operation timed out after 30001 milliseconds with 0 bytes received")
                == SharedCause.retryIdentity("Operation timed out after 30002 milliseconds with 0 bytes received"))
        #expect(SharedCause.retryIdentity("HTTP 503 Service Unavailable") != SharedCause.retryIdentity("HTTP 500 Internal Server Error"))
    }
}

struct ResponsePolicyTests {
    typealias Asked = ResponsePolicy.Asked
    typealias Answer = ResponsePolicy.Answer
    static let v = "\"v1\""

    @Test func aWholeFileIsTakenWhenItsLengthMatches() {
        #expect(ResponsePolicy.decide(Asked(offset: 0, ifRange: nil, size: 100), Answer(status: 200, contentLength: 100, validator: Self.v))
                == .replace(validator: Self.v, restart: nil))
        #expect(ResponsePolicy.decide(Asked(offset: 0, ifRange: nil, size: nil), Answer(status: 200)) == .replace(validator: nil, restart: nil))
        guard case .refuse(_, .wrongLength) = ResponsePolicy.decide(Asked(offset: 0, ifRange: nil, size: 100), Answer(status: 200, contentLength: 99)) else {
            Issue.record("a length other than the manifest's is refused")
            return
        }
    }

    @Test func aRangeContinuesOnlyFromTheAskedOffsetUnderTheSameValidator() {
        let asked = Asked(offset: 40, ifRange: Self.v, size: 100)
        #expect(ResponsePolicy.decide(asked, Answer(status: 206, contentRange: "bytes 40-99/100", validator: Self.v)) == .append(validator: Self.v))
        #expect(ResponsePolicy.decide(asked, Answer(status: 206, contentRange: "bytes 40-99/*")) == .append(validator: Self.v))
        let refused: [(Answer, FailureCause)] = [
            (Answer(status: 206, contentRange: "bytes 0-99/100"), .rangeNotHonoured),
            (Answer(status: 206, contentRange: nil), .rangeNotHonoured),
            (Answer(status: 206, contentRange: "bytes 40-x/100"), .rangeNotHonoured),
            (Answer(status: 206, contentRange: "bytes 40-99/120"), .wrongLength),
            (Answer(status: 206, contentRange: "bytes 40-99/100", validator: "\"v2\""), .rangeNotHonoured),
        ]
        for (answer, cause) in refused {
            guard case let .refuse(_, got) = ResponsePolicy.decide(asked, answer) else {
                Issue.record("\(answer) must be refused")
                continue
            }
            #expect(got == cause, "\(answer)")
        }
        // A 206 nobody asked for is refused too.
        guard case .refuse = ResponsePolicy.decide(Asked(offset: 0, ifRange: nil, size: 100), Answer(status: 206, contentRange: "bytes 0-99/100")) else {
            Issue.record("an unasked 206 is refused")
            return
        }
    }

    @Test func a200ToARangeRequestStartsAgainAndSaysWhy() {
        let decision = ResponsePolicy.decide(Asked(offset: 40, ifRange: Self.v, size: 100), Answer(status: 200, contentLength: 100, validator: "\"v2\""))
        guard case let .replace(validator, restart?) = decision else {
            Issue.record("\(decision)")
            return
        }
        #expect(validator == "\"v2\"" && restart.contains("did not resume"))
    }

    @Test(arguments: [404, 416, 500, 503, 301])
    func otherStatusesAreErrors(status: Int) {
        #expect(ResponsePolicy.decide(Asked(offset: 10, ifRange: Self.v, size: 100), Answer(status: status)) == .errorStatus)
    }
}

struct StopConditionTests {
    @Test func aDeadlinePassesOnTheInjectedClockWithoutSleeping() {
        let clock = ManualClock()
        let stop = StopCondition(clock: clock, maxDuration: 90)
        #expect(stop.reason == nil)
        clock.advance(by: 89)
        #expect(stop.reason == nil)
        clock.advance(by: 1)
        #expect(stop.reason?.contains("deadline") == true)
    }

    @Test func theEarlierDeadlineWinsAndTheTokenIsShared() {
        let clock = ManualClock()
        let token = StopToken()
        let run = StopCondition(token: token, clock: clock, maxDuration: 60)
        let session = run.limited(to: 10)
        #expect(session.deadline == clock.monotonic() + 10)
        #expect(run.limited(to: 600).deadline == run.deadline)
        #expect(run.limited(to: nil).deadline == run.deadline)
        token.request("stopped by SIGTERM")
        token.request("stopped by SIGINT")
        #expect(session.reason == "stopped by SIGTERM", "the first reason stays, seen by every condition holding the token")
    }

    @Test func theDeadlineShownIsOnTheInjectedWallClockWhichMovesWithTheMonotonicOne() {
        let clock = ManualClock(50, wall: Timestamp(seconds: 2_000_000_000, nanoseconds: 900_000_000))
        let stop = StopCondition(clock: clock, maxDuration: 89.5)
        #expect(stop.deadlineTime == Timestamp(seconds: 2_000_000_090, nanoseconds: 900_000_000), "max-duration rounded up to the second, from the clock's now")
        clock.advance(by: 0.25)
        #expect(clock.now() == Timestamp(seconds: 2_000_000_001, nanoseconds: 150_000_000))
        #expect(clock.wait(until: 60, interrupted: { false }))
        #expect(clock.monotonic() == 60 && clock.now() == Timestamp(seconds: 2_000_000_010, nanoseconds: 900_000_000))
    }

    @Test func aWaitEndsAtOnceOnAManualClockAndEarlyWhenInterrupted() {
        let clock = ManualClock(0)
        #expect(clock.wait(until: 3600, interrupted: { false }))
        #expect(clock.monotonic() == 3600)
        #expect(!SystemClock().wait(until: SystemClock().monotonic() + 3600, interrupted: { true }))
    }
}

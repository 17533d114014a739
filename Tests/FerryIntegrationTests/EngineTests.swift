import CCurl
import Dispatch
import Foundation
import Synchronization
import Testing
@testable import FerryRuntime
import FerryCore

/// The transfer engine with stub transfers (local steps, no network): its global limit, the turns
/// sources take, stops, cancels and backoffs. In-process; every stub call comes on the engine thread.
struct EngineTests {
    /// Succeeds after `steps` steps; notes how many stubs of its board run at once.
    final class Stub: Transfer {
        let name: String
        var steps: Int
        let board: Board
        var cancelRequested = false
        var throttle: Throttle?
        init(_ name: String, steps: Int, board: Board) {
            self.name = name
            self.steps = steps
            self.board = board
        }
        var mode: TransferMode { .steps }
        func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {}
        func finish(code: CURLcode, errorText: String?) -> TransferOutcome { .succeeded }
        func step() -> TransferOutcome? {
            if !board.started.contains(name) { board.started.append(name) }
            if !board.announced.contains(name) { board.unannounced.append(name) }
            board.running.insert(name)
            board.peak = max(board.peak, board.running.count)
            board.seenTogether.formUnion(board.running.count > 1 ? [Set(board.running.map { String($0.prefix(1)) })] : [])
            steps -= 1
            usleep(500)
            guard steps <= 0 else { return nil }
            board.running.remove(name)
            return .succeeded
        }
    }

    /// What the stubs saw, shared by every source of a test (touched on the engine thread only).
    final class Board: @unchecked Sendable {
        var running = Set<String>()
        var peak = 0
        /// Sets of source prefixes that had transfers running at the same moment.
        var seenTogether = Set<Set<String>>()
        /// Stubs in the order they first ran.
        var started: [String] = []
        /// Stubs their source was told had started (`TransferSource.started`), and the size of each
        /// such batch; stubs that ran a step before that.
        var announced = Set<String>()
        var batches: [Int] = []
        var unannounced: [String] = []
    }

    final class Source: TransferSource, @unchecked Sendable {
        var pending: [Stub]
        var outcomes: [String: String] = [:]
        var ticks = 0
        var notYetUntil: Double = 0
        var stopAfterSteps: Int?
        var limit: Int
        var priority: Int
        let board: Board
        init(_ prefix: String, count: Int, steps: Int, board: Board, limit: Int = .max, priority: Int = 0) {
            self.board = board
            self.limit = limit
            self.priority = priority
            pending = (0..<count).map { Stub("\(prefix)\($0)", steps: steps, board: board) }
        }
        private var handedOut: [String] = []
        func next() -> TransferEngine.Next {
            if SystemClock().monotonic() < notYetUntil { return .notYet }
            guard !pending.isEmpty else { return .none }
            handedOut.append(pending[0].name)
            return .start(pending.removeFirst())
        }
        func started() {
            board.batches.append(handedOut.count)
            board.announced.formUnion(handedOut)
            handedOut.removeAll()
        }
        func finished(_ batch: [(Transfer, TransferOutcome)]) {
            for (t, outcome) in batch {
                let stub = t as! Stub
                board.running.remove(stub.name)
                switch outcome {
                case .succeeded: outcomes[stub.name] = "succeeded"
                case .interrupted: outcomes[stub.name] = "interrupted"
                case .failed: outcomes[stub.name] = "failed"
                }
            }
        }
        func tick(_ running: [Transfer]) { ticks += 1 }
        var shouldStop: Bool {
            guard let stopAfterSteps else { return false }
            return board.peak > 0 && ticks >= stopAfterSteps
        }
    }

    func runTogether(_ engine: TransferEngine, _ sources: [Source]) {
        let group = DispatchGroup()
        for source in sources {
            group.enter()
            let handoff = UncheckedBox(source)
            Thread {
                engine.run(handoff.value)
                group.leave()
            }.start()
        }
        group.wait()
    }

    @Test func runsNoMoreThanTheGlobalLimit() {
        let engine = try! TransferEngine(concurrency: 3, clock: SystemClock())
        defer { engine.shutdown() }
        let board = Board()
        let source = Source("a", count: 10, steps: 20, board: board)
        engine.run(source)
        #expect(source.outcomes.count == 10 && source.outcomes.values.allSatisfy { $0 == "succeeded" })
        #expect(board.peak == 3)
    }

    /// A source hears which of its transfers started, in one call per round, before any of them
    /// runs (a push records them running there, in one transaction).
    @Test func aSourceHearsOfWhatStartedBeforeItRuns() {
        let engine = try! TransferEngine(concurrency: 3, clock: SystemClock())
        let board = Board()
        let source = Source("a", count: 9, steps: 2, board: board)
        runTogether(engine, [source])
        #expect(board.unannounced.isEmpty, "ran before their source heard they started: \(board.unannounced)")
        #expect(board.announced.count == 9)
        #expect(board.batches.first == 3, "the first round's three in one call: \(board.batches)")
        #expect(board.batches.reduce(0, +) == 9 && !board.batches.contains(0))
    }

    /// Work spread over lanes: every item runs once, on more than one thread; a lane stops at its
    /// first error, the others go on, and the error is returned.
    @Test func lanesRunEveryItemAndALaneStopsAtItsError() {
        let threads = Mutex(Set<UInt>())
        let (results, error) = Lanes.run(20, lanes: 4, name: "test-lane") { i throws(FerryError) -> Int in
            threads.withLock { _ = $0.insert(UInt(pthread_self())) }
            usleep(2000)
            if i == 6 { throw FerryError(.remote, "item 6 failed") }
            return i * 10
        }
        #expect(error?.message == "item 6 failed")
        // Lane 2 took 2, 6, 10, 14, 18 and stopped at 6.
        for i in 0..<20 {
            let lost = i % 4 == 2 && i >= 6
            #expect(results[i] == (lost ? nil : i * 10), "item \(i)")
        }
        #expect(threads.withLock { $0.count } > 1, "the lanes ran on threads of their own")
        let none = Lanes.run(0, lanes: 8, name: "test-lane") { i throws(FerryError) -> Int in i }
        #expect(none.results.isEmpty && none.error == nil)
    }

    @Test func sourcesTakeTurns() {
        let engine = try! TransferEngine(concurrency: 2, clock: SystemClock())
        defer { engine.shutdown() }
        let board = Board()
        let a = Source("a", count: 6, steps: 60, board: board)
        let b = Source("b", count: 6, steps: 60, board: board)
        runTogether(engine, [a, b])
        #expect(a.outcomes.count == 6 && b.outcomes.count == 6)
        // Round robin: once both are in, free slots alternate; b does not wait for all of a.
        #expect(board.started.prefix(4).contains { $0.hasPrefix("b") } && board.started.prefix(4).contains { $0.hasPrefix("a") },
                "\(board.started)")
        #expect(board.seenTogether.contains(["a", "b"]), "both sessions ran at once: \(board.seenTogether)")
        #expect(board.peak == 2)
    }

    /// A free slot goes to the highest priority with work due: a high-priority session that arrives
    /// while a low one transfers takes every slot that frees up until it is done.
    @Test func aHigherPriorityTakesFreeSlotsFirst() {
        let engine = try! TransferEngine(concurrency: 1, clock: SystemClock())
        defer { engine.shutdown() }
        let board = Board()
        let low = Source("l", count: 4, steps: 60, board: board, priority: 0)
        let high = Source("h", count: 3, steps: 60, board: board, priority: 5)
        let group = DispatchGroup()
        for (source, delay) in [(low, 0), (high, 5_000)] as [(Source, UInt32)] {
            group.enter()
            let box = UncheckedBox(source)
            Thread {
                usleep(delay)
                engine.run(box.value)
                group.leave()
            }.start()
        }
        group.wait()
        #expect(low.outcomes.count == 4 && high.outcomes.count == 3)
        let lastHigh = board.started.lastIndex { $0.hasPrefix("h") }!
        let lowAfterFirst = board.started.firstIndex { $0.hasPrefix("l") && $0 != board.started.first { $0.hasPrefix("l") } }!
        #expect(lastHigh < lowAfterFirst, "only the low transfer already running may come before the high ones: \(board.started)")
        #expect(board.peak == 1)
    }

    @Test func aSourceLimitHoldsWithinTheGlobalOne() {
        let engine = try! TransferEngine(concurrency: 4, clock: SystemClock())
        defer { engine.shutdown() }
        let board = Board()
        let source = Source("a", count: 6, steps: 20, board: board, limit: 1)
        engine.run(source)
        #expect(source.outcomes.count == 6)
        #expect(board.peak == 1)
    }

    @Test func aStoppingSourceEndsItsTransfersAsInterruptedAndLeavesOthersRunning() {
        let engine = try! TransferEngine(concurrency: 4, clock: SystemClock())
        defer { engine.shutdown() }
        let board = Board()
        let stopping = Source("s", count: 2, steps: 1_000_000, board: board)
        stopping.stopAfterSteps = 3
        let other = Source("o", count: 2, steps: 200, board: board)
        runTogether(engine, [stopping, other])
        #expect(stopping.outcomes == ["s0": "interrupted", "s1": "interrupted"])
        #expect(other.outcomes == ["o0": "succeeded", "o1": "succeeded"])
    }

    @Test func aCancelledTransferEndsInterrupted() {
        let engine = try! TransferEngine(concurrency: 2, clock: SystemClock())
        defer { engine.shutdown() }
        let board = Board()
        let source = Source("c", count: 1, steps: 1_000_000, board: board)
        let stub = source.pending[0]
        final class Canceller: TransferSource, @unchecked Sendable {
            let inner: Source
            let stub: Stub
            init(_ inner: Source, _ stub: Stub) { self.inner = inner; self.stub = stub }
            func next() -> TransferEngine.Next { inner.next() }
            func finished(_ batch: [(Transfer, TransferOutcome)]) { inner.finished(batch) }
            func tick(_ running: [Transfer]) {
                inner.tick(running)
                if inner.ticks >= 2 { stub.cancelRequested = true }
            }
            var shouldStop: Bool { false }
            var limit: Int { .max }
        }
        engine.run(Canceller(source, stub))
        #expect(source.outcomes == ["c0": "interrupted"])
    }

    /// A source whose work all waits out a backoff keeps getting ticks (so a cancel is heard), and
    /// its work starts once due; no sleeping loop in the source.
    @Test func aSourceWaitingOutABackoffIsTickedAndResumes() {
        let engine = try! TransferEngine(concurrency: 2, clock: SystemClock())
        defer { engine.shutdown() }
        let board = Board()
        let source = Source("w", count: 1, steps: 5, board: board)
        source.notYetUntil = SystemClock().monotonic() + 0.5
        engine.run(source)
        #expect(source.outcomes == ["w0": "succeeded"])
        #expect(source.ticks >= 3, "ticked while waiting: \(source.ticks)")
    }

    /// A step that waits on a socket of its own (an SFTP download) is not stepped while it waits
    /// (the engine polls its descriptor), and is stepped once its descriptor is ready: here a pipe
    /// its source writes to after about a second of ticks. The sweep that steps waiting transfers
    /// regardless is set to a minute, so only the descriptor's readiness can have woken it.
    @Test func aStepWaitingOnADescriptorDoesNotSpinAndRunsWhenItIsReady() {
        final class Waiter: Transfer {
            let fd: Int32
            var steps = 0
            var cancelRequested = false
            var throttle: Throttle?
            init(fd: Int32) { self.fd = fd }
            var mode: TransferMode { .steps }
            var waitingOn: (fd: Int32, events: Int16)? { (fd, Int16(POLLIN)) }
            func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {}
            func finish(code: CURLcode, errorText: String?) -> TransferOutcome { .succeeded }
            func step() -> TransferOutcome? {
                steps += 1
                var byte: UInt8 = 0
                return read(fd, &byte, 1) == 1 ? .succeeded : nil
            }
        }
        final class Feeder: TransferSource, @unchecked Sendable {
            var waiter: Waiter?
            let writeEnd: Int32
            var ticks = 0, stepsWhenFed = -1, ticksToFinish = -1
            var outcome = "none"
            let running: Waiter
            init(_ waiter: Waiter, writeEnd: Int32) {
                self.waiter = waiter
                running = waiter
                self.writeEnd = writeEnd
            }
            func next() -> TransferEngine.Next {
                guard let w = waiter else { return .none }
                waiter = nil
                return .start(w)
            }
            func finished(_ batch: [(Transfer, TransferOutcome)]) {
                if case .succeeded = batch[0].1 { outcome = "succeeded" } else { outcome = "other" }
                ticksToFinish = ticks - 10
            }
            func tick(_ running: [Transfer]) {
                ticks += 1
                if ticks == 10 {
                    stepsWhenFed = self.running.steps
                    var byte: UInt8 = 1
                    _ = write(writeEnd, &byte, 1)
                }
            }
            var shouldStop: Bool { false }
            var limit: Int { 1 }
        }
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        _ = fcntl(fds[0], F_SETFL, O_NONBLOCK)
        defer { close(fds[0]); close(fds[1]) }
        let engine = try! TransferEngine(concurrency: 2, clock: SystemClock())
        defer { engine.shutdown() }
        engine.sweepInterval = 60
        let waiter = Waiter(fd: fds[0])
        let source = Feeder(waiter, writeEnd: fds[1])
        engine.run(source)
        #expect(source.outcome == "succeeded")
        // One first step while it waited (a loop that spun would have stepped thousands of times),
        // one once the pipe was readable, within a few ticks (the sweep would take 600).
        #expect(source.stepsWhenFed == 1, "stepped \(source.stepsWhenFed) times while it waited")
        #expect(waiter.steps == 2, "stepped \(waiter.steps) times in all")
        #expect(source.ticksToFinish >= 0 && source.ticksToFinish <= 50, "finished \(source.ticksToFinish) ticks after its descriptor was ready")
    }
}

/// Hands a value to another thread that alone uses it from then on.
struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

import CCurl
import Dispatch
import Glibc
import Synchronization
import FerryCore

/// Runs the transfers of every session through one libcurl multi handle, on one thread of its own
/// for the life of the process: at most `concurrency` at once across all sessions (`transfers`),
/// connections kept alive and reused, HTTP/2 multiplexed over TLS. Sessions hand it their work as
/// `TransferSource`s through a small locked inbox, and new work wakes the loop
/// (`curl_multi_wakeup`); with nothing to do it sleeps in `curl_multi_poll` until woken.
///
/// Sources take turns (round robin), so two sessions transfer at the same time and one large
/// session cannot starve another — among sources of the same priority: a free slot goes to the
/// highest priority that has work due. A source's calls all come on the engine thread.
///
/// Bandwidth limits (`bwlimit`, global and per source, each on a daily schedule) are token
/// buckets: a transfer over a limit pauses (libcurl holds the bytes) and is continued when the
/// buckets refill, so running transfers slow down or speed up when the schedule turns, without
/// a restart. A source whose run has limits of its own (`RunLimits`) counts its transfers
/// against those instead of the global `transfers` and `bwlimit`.
final class TransferEngine: @unchecked Sendable {
    /// What a source has for the engine next.
    enum Next {
        case start(Transfer)
        /// Nothing is due yet (retries are waiting out their backoff); ask again shortly.
        case notYet
        /// Nothing more will come.
        case none
    }

    /// Checkpoints: every 2 MiB, or every second for slower transfers, a transfer's data is
    /// fdatasync'ed and its length recorded, which bounds what a crash makes ferry fetch again.
    static let checkpointInterval: Int64 = 2 << 20
    static let checkpointSeconds = 1.0

    /// A source handed over from another thread, and how to tell that thread it ended. The source
    /// is touched only by the engine thread from `submit` until `done` is signalled.
    private struct Handoff: @unchecked Sendable {
        let source: TransferSource
        let done: DispatchSemaphore
    }

    private struct Inbox {
        var arrivals: [Handoff] = []
        var shuttingDown = false
    }

    private let inbox = Mutex(Inbox())
    private let multi: UnsafeMutableRawPointer
    private let limit: Atomic<Int>
    /// The global `transfers` limit; a reload may change it (running transfers go on, no new one
    /// starts above the new limit).
    var concurrency: Int {
        get { limit.load(ordering: .relaxed) }
        set { limit.store(max(1, newValue), ordering: .relaxed); curl_multi_wakeup(multi) }
    }
    private let stopped = DispatchSemaphore(value: 0)
    /// The buckets, the ticks and the bandwidth schedule's time of day go by it.
    private let clock: any Clock
    private let globalSchedule = Mutex<BandwidthSchedule?>(nil)
    /// The global `bwlimit`; a reload may change it (running transfers follow the new rate).
    var bandwidth: BandwidthSchedule? {
        get { globalSchedule.withLock { $0 } }
        set { globalSchedule.withLock { $0 = newValue }; curl_multi_wakeup(multi) }
    }

    private let budgetMeter = Mutex<(any TransferBudget)?>(nil)
    /// The machine's byte budget, charged by the transfers of sources it counts (nil: none); a
    /// reload may change it (running transfers keep the one they started with).
    var budget: (any TransferBudget)? {
        get { budgetMeter.withLock { $0 } }
        set { budgetMeter.withLock { $0 = newValue } }
    }

    // Engine thread only.
    private final class Turn {
        let handoff: Handoff
        /// Returned `.none`: nothing more until one of its transfers ends (a failure may retry).
        var exhausted = false
        var stopping = false
        var finished: [(Transfer, TransferOutcome)] = []
        /// The slot units its running transfers hold (`Depth.slot` each, less for short requests
        /// on a far path; none: nothing runs), and what its path's round trip lets short requests share.
        var units = 0
        var depth = Depth()
        /// One it handed over that found no room (a large one where only a short one fitted):
        /// started before it is asked for more.
        var held: Transfer?
        /// The source's own bandwidth limit.
        let bucket: RateBucket
        /// Its run's own limits, in place of the global ones (`RunLimits`): a rate with its own
        /// bucket, and a count of transfers that the global count leaves out.
        let runBandwidth: BandwidthSchedule?
        let runBucket: RateBucket?
        let runTransfers: Int?
        init(_ handoff: Handoff, now: Double) {
            self.handoff = handoff
            bucket = RateBucket(now: now)
            let limits = handoff.source.runLimits
            runBandwidth = limits?.bandwidth
            runBucket = runBandwidth == nil ? nil : RateBucket(now: now)
            runTransfers = limits?.transfers
        }
        var source: TransferSource { handoff.source }
    }
    private struct Active {
        /// nil for a `.steps` transfer.
        let easy: EasyHandle?
        let transfer: Transfer
        let retained: Unmanaged<AnyObject>
        let turn: Turn
        let units: Int
    }
    private var turns: [Turn] = []
    /// The next turn to ask within each priority (round robin among equals).
    private var cursors: [Int: Int] = [:]
    private lazy var global = RateBucket(now: clock.monotonic())
    /// When the rates in force were last set from the schedules.
    private var ratesSet = -Double.infinity
    /// Running transfers by easy handle (`.curl`) or by their own address (`.steps`).
    private var active: [UnsafeMutableRawPointer: Active] = [:]
    /// The slot units `active` holds (`Depth`), and those of them that count against their run's
    /// own `transfers`, not the global limit.
    private var activeUnits = 0
    private var ownUnits = 0
    private var stepping = 0
    /// Running transfers that have a `Throttle` (any bandwidth limit was configured when they
    /// started): without any, the loop does no bucket work.
    private var throttled = 0
    private var idle: [EasyHandle] = []
    private var lastTick = 0.0
    /// `.steps` transfers waiting on a socket (`Transfer.waitingOn`) that the last poll found
    /// ready, and when the waiting ones were last stepped regardless (so one can see it stalled).
    private var ready = Set<UnsafeMutableRawPointer>()
    private var lastSweep = 0.0
    /// Transfers that ended as they started (`outcomeWithoutRequest`: a file a pack or a killed run
    /// left whole) in this `fill`, and whether it stopped at `finishedPerFill` with more due: those
    /// are handed on a group at a time, so that they are placed while the next are verified.
    private var finishedThisFill = 0
    private var moreDue = false
    static let finishedPerFill = 64
    /// How often the waiting ones are stepped regardless (seconds); set before any `run`.
    var sweepInterval = 0.5

    /// How many sessions share the engine (the sessions of a `sync now`, or of the agent's config):
    /// each source of the global pool leaves a slot for each of the others, up to half of the
    /// slots, so a remote whose answers hang cannot hold the slots a healthy one needs.
    var sessions: Int {
        get { sharing.load(ordering: .relaxed) }
        set { sharing.store(max(1, newValue), ordering: .relaxed); curl_multi_wakeup(multi) }
    }
    private let sharing = Atomic(1)

    /// The most global slots one source may hold: `transfers` less one for each other session
    /// sharing the engine, never less than half of them (nor less than one).
    static func share(transfers: Int, sessions: Int) -> Int {
        max(1, transfers - min(sessions - 1, transfers / 2))
    }

    init(concurrency: Int, clock: any Clock) throws(FerryError) {
        self.clock = clock
        limit = Atomic(max(1, concurrency))
        multi = curl_multi_init()
        ferry_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        ferry_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, max(max(1, concurrency) * 2, Depth.most))
        try Threads.start(name: "ferry-engine") { [self] in loop() }
    }

    /// Runs `source` until it has nothing more to do or must stop; blocks the calling thread
    /// meanwhile. Other threads may run their sources at the same time.
    func run(_ source: TransferSource) {
        let handoff = Handoff(source: source, done: DispatchSemaphore(value: 0))
        inbox.withLock { $0.arrivals.append(handoff) }
        curl_multi_wakeup(multi)
        handoff.done.wait()
    }

    /// Has the engine ask its sources for work again now (another thread made some ready).
    func wake() { curl_multi_wakeup(multi) }

    /// Ends the engine thread once the sources it has are done. Call once, before the process exits.
    func shutdown() {
        inbox.withLock { $0.shuttingDown = true }
        curl_multi_wakeup(multi)
        stopped.wait()
        idle.removeAll()
        curl_multi_cleanup(multi)
    }

    private func loop() {
        while true {
            let (arrivals, shuttingDown) = inbox.withLock { inbox in
                defer { inbox.arrivals.removeAll() }
                return (inbox.arrivals, inbox.shuttingDown)
            }
            let now = clock.monotonic()
            turns += arrivals.map { Turn($0, now: now) }
            if shuttingDown && turns.isEmpty { break }
            if !arrivals.isEmpty { ratesSet = -Double.infinity }
            let throttled = refillBuckets(now)

            stopSourcesThatMust()
            for (handle, a) in active where a.transfer.cancelRequested { end(handle, a, .interrupted) }
            for turn in turns where turn.held?.cancelRequested == true { release(heldBy: turn) }
            fill()
            deliver()

            if active.isEmpty {
                tick(now)
                if moreDue { continue }
                // Nothing running: sleep until woken by new work, or until the next tick is due
                // for sources that wait out a backoff.
                var numfds: Int32 = 0
                curl_multi_poll(multi, nil, 0, turns.isEmpty ? 10_000 : 50, &numfds)
                continue
            }
            var running: Int32 = 0
            curl_multi_perform(multi, &running)
            var left: Int32 = 0
            while let message = curl_multi_info_read(multi, &left) {
                guard ferry_msg_is_done(message) != 0, let handle = ferry_msg_easy(message), let a = active[handle] else { continue }
                a.easy?.recordFirstByte()
                if let seconds = a.easy?.requestToFirstByte { a.turn.depth.saw(seconds) }
                end(handle, a, a.transfer.finish(code: ferry_msg_result(message), errorText: a.easy?.errorText))
            }
            var stepped = false
            if stepping > 0 {
                let sweep = now - lastSweep >= sweepInterval
                if sweep { lastSweep = now }
                for (key, a) in active where a.easy == nil && a.transfer.throttle?.open != false {
                    if a.transfer.waitingOn != nil && !ready.contains(key) && !sweep { continue }
                    if let outcome = a.transfer.step() { end(key, a, outcome) } else if a.transfer.waitingOn == nil { stepped = true }
                }
                ready.removeAll()
            }
            deliver()
            // A source that what it was just handed made stop stops now; the slots that freed up
            // start their next transfers now too, not after the poll below.
            stopSourcesThatMust()
            fill()
            let after = clock.monotonic()
            for a in active.values { a.transfer.tick() }
            tick(after)
            let stepsDue = self.stepsDue()
            // Steps that wait on a socket of their own (`Transfer.waitingOn`) are polled with libcurl's.
            var waits: [curl_waitfd] = []
            var waiting: [UnsafeMutableRawPointer] = []
            for (key, a) in active where a.easy == nil && a.transfer.throttle?.open != false {
                guard let (fd, events) = a.transfer.waitingOn else { continue }
                waits.append(curl_waitfd(fd: fd, events: events, revents: 0))
                waiting.append(key)
            }
            if !active.isEmpty && (running > 0 || !stepsDue || !waits.isEmpty) {
                // Local steps keep going between polls: with one due (including one `fill` just
                // started), only look for network readiness. Waiting here instead held each new
                // step up to 100 ms: an S3 part's hash (`RangeHash`) for every part of a multipart
                // push, 16-18 s instead of 9-11 s for 1 GiB. A step taken this round may have
                // emptied its bucket: the next round, at once, refills the buckets and sees it held.
                // Paused transfers are looked at again soon, when their buckets have refilled.
                var numfds: Int32 = 0
                let timeout: Int32 = stepsDue || stepped || moreDue ? 0 : (throttled ? 10 : 100)
                _ = waits.withUnsafeMutableBufferPointer { curl_multi_poll(multi, $0.baseAddress, UInt32($0.count), timeout, &numfds) }
                for (i, wait) in waits.enumerated() where wait.revents != 0 { ready.insert(waiting[i]) }
            }
        }
        stopped.signal()
    }

    /// Whether a running `.steps` transfer may take a step now: its bandwidth allows it and it
    /// waits on no socket.
    private func stepsDue() -> Bool {
        stepping > 0 && active.values.contains { $0.easy == nil && $0.transfer.throttle?.open != false && $0.transfer.waitingOn == nil }
    }

    /// Stops the sources that must stop (a deadline, a signal, a failing store): their running
    /// transfers are interrupted and they start no more.
    private func stopSourcesThatMust() {
        for turn in turns where !turn.stopping && turn.source.shouldStop {
            turn.stopping = true
            for (handle, a) in active where a.turn === turn { end(handle, a, .interrupted) }
            release(heldBy: turn)
        }
    }

    /// Hands a held transfer back to its source as interrupted (it never ran).
    private func release(heldBy turn: Turn) {
        guard let held = turn.held else { return }
        turn.held = nil
        turn.finished.append((held, .interrupted))
    }

    /// Starts transfers until the limits are reached or no source has anything due: the
    /// highest priority first, taking turns among the sources of one priority.
    private func fill() {
        let concurrency = self.concurrency
        let share = TransferEngine.share(transfers: concurrency, sessions: sessions)
        func fits(_ used: Int, _ units: Int, _ slots: Int) -> Bool { slots >= Int.max / Depth.slot || used + units <= slots * Depth.slot }
        // Whether `turn` may start one taking `units`: within its session's limit, and within its
        // run's own limit or else the global one and its share of it.
        func room(_ turn: Turn, _ units: Int) -> Bool {
            guard fits(turn.units, units, turn.source.limit) else { return false }
            if let own = turn.runTransfers { return fits(turn.units, units, own) }
            return fits(activeUnits - ownUnits, units, concurrency) && fits(turn.units, units, share)
        }
        func units(_ turn: Turn, short: Bool) -> Int { turn.depth.units(short: short, transfers: turn.runTransfers ?? concurrency) }
        // Room for the least it could take (a short request); what it takes is known once handed over.
        func anyRoom(_ turn: Turn) -> Bool { room(turn, units(turn, short: true)) }
        finishedThisFill = 0
        moreDue = false
        let priorities = Set(turns.map { $0.source.priority }).sorted(by: >)
        for priority in priorities where !moreDue {
            let group = turns.filter { $0.source.priority == priority }
            guard group.contains(where: anyRoom) else { continue }
            var cursor = cursors[priority] ?? 0
            var asked = Set<ObjectIdentifier>()
            var starting: [Turn] = []
            defer { for turn in starting { turn.source.started() } }
            while true {
                var started = false
                for step in 0..<group.count {
                    let turn = group[(cursor + step) % group.count]
                    let id = ObjectIdentifier(turn)
                    guard !turn.stopping, !turn.exhausted, !asked.contains(id), anyRoom(turn) else { continue }
                    if let held = turn.held {
                        let taking = units(turn, short: held.isShortRequest)
                        guard room(turn, taking) else { asked.insert(id); continue }
                        turn.held = nil
                        start(held, for: turn, units: taking)
                        started = true
                        if !starting.contains(where: { $0 === turn }) { starting.append(turn) }
                        continue
                    }
                    switch turn.source.next() {
                    case .start(let transfer):
                        let taking = units(turn, short: transfer.isShortRequest)
                        guard room(turn, taking) else {
                            turn.held = transfer
                            asked.insert(id)
                            continue
                        }
                        start(transfer, for: turn, units: taking)
                        started = true
                        if !starting.contains(where: { $0 === turn }) { starting.append(turn) }
                    case .notYet:
                        asked.insert(id)
                    case .none:
                        turn.exhausted = true
                    }
                }
                cursor = (cursor + 1) % group.count
                if finishedThisFill >= TransferEngine.finishedPerFill { moreDue = true }
                if !started || moreDue { break }
            }
            cursors[priority] = cursor
        }
    }

    private func start(_ transfer: Transfer, for turn: Turn, units: Int) {
        if let outcome = transfer.outcomeWithoutRequest() {
            turn.finished.append((transfer, outcome))
            finishedThisFill += 1
            return
        }
        let retained = Unmanaged<AnyObject>.passRetained(transfer)
        let role = turn.source.budgetRole
        let budget = role == .none ? nil : self.budget
        if bandwidth != nil || turn.runBucket != nil || turn.source.bandwidth != nil || budget != nil {
            transfer.throttle = Throttle([turn.runBucket ?? global, turn.bucket], budget: budget, holds: role == .held)
            throttled += 1
        }
        attach(transfer, retained, turn, units: units)
        turn.units += units
        activeUnits += units
        if turn.runTransfers != nil { ownUnits += units }
    }

    private func end(_ handle: UnsafeMutableRawPointer, _ a: Active, _ outcome: TransferOutcome) {
        var outcome = outcome
        if let easy = a.easy {
            curl_multi_remove_handle(multi, handle)
            idle.append(easy)
        } else {
            stepping -= 1
        }
        active.removeValue(forKey: handle)
        // One that goes on (`Transfer.continues`) starts its next request or steps in the slot
        // it holds: its turn, throttle and counts stay as they are.
        if case .succeeded = outcome, a.transfer.continues {
            guard let now = a.transfer.outcomeWithoutRequest() else {
                attach(a.transfer, a.retained, a.turn, units: a.units)
                return
            }
            outcome = now
        }
        if a.transfer.throttle != nil { throttled -= 1 }
        a.turn.units -= a.units
        activeUnits -= a.units
        if a.turn.runTransfers != nil { ownUnits -= a.units }
        a.turn.finished.append((a.transfer, outcome))
        a.retained.release()
    }

    /// Runs a started transfer as its `mode` says: an easy handle in the multi handle, or steps.
    private func attach(_ transfer: Transfer, _ retained: Unmanaged<AnyObject>, _ turn: Turn, units: Int) {
        switch transfer.mode {
        case .curl:
            let easy = idle.popLast() ?? EasyHandle()
            transfer.prepare(easy, context: retained.toOpaque())
            curl_multi_add_handle(multi, easy.handle)
            active[easy.handle] = Active(easy: easy, transfer: transfer, retained: retained, turn: turn, units: units)
        case .steps:
            active[retained.toOpaque()] = Active(easy: nil, transfer: transfer, retained: retained, turn: turn, units: units)
            stepping += 1
        }
    }

    /// Refills the bandwidth buckets (setting the rates in force from the schedules once a second)
    /// and continues the paused transfers whose buckets are open again. Returns whether a running
    /// transfer is still held back by a limit.
    private func refillBuckets(_ now: Double) -> Bool {
        if now - ratesSet >= 1 {
            ratesSet = now
            let secondOfDay = HostProbe.localSecondOfDay(clock.now())
            global.set(rate: bandwidth?.rate(at: secondOfDay), now: now)
            for turn in turns {
                turn.bucket.set(rate: turn.source.bandwidth?.rate(at: secondOfDay), now: now)
                turn.runBucket?.set(rate: turn.runBandwidth?.rate(at: secondOfDay), now: now)
            }
        }
        // A bucket refilled late holds what it would have held (refills are capped).
        guard throttled > 0 else { return false }
        global.refill(now: now)
        for turn in turns {
            turn.bucket.refill(now: now)
            turn.runBucket?.refill(now: now)
        }
        var held = false
        for (handle, a) in active {
            guard let throttle = a.transfer.throttle else { continue }
            if throttle.paused && throttle.open {
                throttle.paused = false
                // libcurl may offer the held bytes again from inside this call.
                if a.easy != nil { curl_easy_pause(handle, 0) }
            }
            if throttle.paused || !throttle.open { held = true }
        }
        return held
    }

    /// Hands each source the transfers of its that ended; ends the sources that are done.
    private func deliver() {
        for turn in turns where !turn.finished.isEmpty {
            let batch = turn.finished
            turn.finished.removeAll()
            turn.source.finished(batch)
            turn.exhausted = false  // a failure may have scheduled a retry
        }
        let done = turns.filter { ($0.exhausted || $0.stopping) && $0.units == 0 && $0.held == nil && $0.finished.isEmpty }
        guard !done.isEmpty else { return }
        turns.removeAll { turn in done.contains { $0 === turn } }
        for turn in done { turn.handoff.done.signal() }
    }

    /// Progress, cancel requests and group commits: at most ten times a second per source.
    private func tick(_ now: Double) {
        guard now - lastTick >= 0.1 else { return }
        lastTick = now
        for turn in turns {
            turn.source.tick(active.values.filter { $0.turn === turn }.map(\.transfer))
            turn.exhausted = false  // a tick may give the source work again (a task resumed by ferry resume)
        }
    }
}

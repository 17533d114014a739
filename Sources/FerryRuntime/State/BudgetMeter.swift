import Synchronization
import FerryCore

/// The machine's byte budget (`[agent] budget`) as a process spends it: every transfer of the
/// engine charges the bytes it moves (`Throttle.take`), a run charges its manifests and metadata,
/// and the books in the state database are brought up to date at most once a second, adding this
/// process's bytes to those of every other process on the same state. While the period's bytes
/// are spent, a counted session's transfers are closed (`open`): they stop at the next read, their
/// data checkpointed, and the session is held until the period ends (`hold`). A transfer may take
/// one read past the budget (16 KiB with a budget in force: `Throttle.limiting`), so a period ends
/// at most a read per running transfer above it.
public final class BudgetMeter: TransferBudget {
    private struct Books {
        var store: StateStore?
        var window: ByteBudget.Window
        /// What the state said the period used, at the last look.
        var saved: Int64 = 0
        /// Charged since then, not yet in the state.
        var pending: Int64 = 0
        var lastSync = -Double.infinity
    }

    public let budget: ByteBudget
    private let directory: String
    private let clock: any Clock
    private let books: Mutex<Books>

    public init(budget: ByteBudget, state: String, clock: any Clock) {
        self.budget = budget
        directory = state
        self.clock = clock
        books = Mutex(Books(window: budget.window(at: clock.now())))
    }

    /// Counts bytes moved (any thread).
    func charge(_ bytes: Int) {
        guard bytes > 0 else { return }
        books.withLock { $0.pending += Int64(bytes) }
    }

    /// Whether counted transfers may take more bytes now, by what was last seen (no state access).
    var open: Bool { books.withLock { $0.saved + $0.pending < budget.bytes } }

    /// The hold on counted sessions while the period's bytes are spent; nil while some are left.
    /// Brings the books up to date first when a second has passed or the period turned.
    func hold() -> BudgetHold? {
        books.withLock { b in
            sync(&b, force: false)
            guard let reason = budget.spent(used: b.saved + b.pending, window: b.window) else { return nil }
            return BudgetHold(reason: reason, until: b.window.end)
        }
    }

    /// Puts what was charged in the state now (at the end of a run's transfers).
    func save() { books.withLock { sync(&$0, force: true) } }

    /// The period now and what it used, all processes together (for status and metrics).
    public func standing() -> (window: ByteBudget.Window, used: Int64) {
        books.withLock { b in
            sync(&b, force: true)
            return (b.window, b.saved + b.pending)
        }
    }

    /// A state that cannot be opened or written keeps the budget in this process only: the run's
    /// own store reports the same fault as its error.
    /// Asked on every turn of the engine's loop (`hold`): the period is worked out again only when
    /// the books are brought up to date, not on each call.
    private func sync(_ b: inout Books, force: Bool) {
        let now = clock.monotonic()
        guard force || now - b.lastSync >= 1 || clock.now() >= b.window.end else { return }
        b.lastSync = now
        let window = budget.window(at: clock.now())
        do throws(FerryError) {
            if b.store == nil { b.store = try StateStore(directory: directory, clock: clock) }
            guard let store = b.store else { return }
            if window.key != b.window.key {
                // What was charged before the turn belongs to the period that ended.
                _ = try store.addBudgetUse(period: b.window.key, bytes: b.pending)
                b.pending = 0
                b.window = window
            }
            // Nothing charged since: read, not a write per scrape of /metrics.
            b.saved = b.pending == 0 ? try store.budgetUsed(period: window.key) : try store.addBudgetUse(period: window.key, bytes: b.pending)
            b.pending = 0
        } catch {
            if window.key != b.window.key {
                b.window = window
                b.saved = 0
                b.pending = 0
            }
        }
    }
}

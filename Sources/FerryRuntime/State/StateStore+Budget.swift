import FerryCore

/// The byte budget's books (`BudgetMeter`): bytes used per period, by every process of this state.
extension StateStore {
    /// Adds `bytes` to what `period` used and returns its total, in one transaction, so processes
    /// that share the state add up rather than overwrite each other. Earlier periods of the same
    /// kind go: only the current one is ever asked for.
    public func addBudgetUse(period: String, bytes: Int64) throws(FerryError) -> Int64 {
        try db.transaction { () throws(FerryError) -> Int64 in
            try db.cached("DELETE FROM budget WHERE period < ?1 AND substr(period, 1, 4) = substr(?1, 1, 4)").bind(.text(period)).run()
            try db.cached("INSERT INTO budget (period, used) VALUES (?, ?) ON CONFLICT (period) DO UPDATE SET used = used + excluded.used")
                .bind(.text(period), .int(max(0, bytes))).run()
            let s = try db.cached("SELECT used FROM budget WHERE period = ?").bind(.text(period))
            defer { s.reset() }
            return try s.step() ? s.int(0) : 0
        }
    }

    /// What `period` used so far (0 when nothing was recorded for it).
    public func budgetUsed(period: String) throws(FerryError) -> Int64 {
        let s = try db.prepare("SELECT used FROM budget WHERE period = ?").bind(.text(period))
        return try s.step() ? s.int(0) : 0
    }
}

import FerryCore

/// A session's signed status report, as the state keeps it between runs.
public struct ReportRecord: Sendable, Equatable {
    /// The last report's sequence number (0: none went yet).
    public var seq: Int64
    /// What it said, apart from its time and sequence (`StatusReport.substance`).
    public var substance: String?
    public var time: Timestamp?
    /// Why the last try to publish failed (nil: it did not).
    public var failure: String?
}

extension StateStore {
    public func report(session: String) throws(FerryError) -> ReportRecord {
        let s = try db.prepare("SELECT report_seq, report_substance, report_time, report_failure FROM sessions WHERE name = ?").bind(.text(session))
        guard try s.step() else { return ReportRecord(seq: 0) }
        return ReportRecord(seq: s.int(0), substance: s.text(1), time: s.text(2).flatMap(Timestamp.init(rfc3339:)), failure: s.text(3))
    }

    /// The sequence number of the report about to go, taken before it goes: a report that reached
    /// the remote though its answer was lost is never followed by another with its number.
    public func takeReportSeq(session: String) throws(FerryError) -> Int64 {
        try ensureSession(session)
        var seq: Int64 = 0
        try db.transaction { () throws(FerryError) in
            try db.prepare("UPDATE sessions SET report_seq = report_seq + 1 WHERE name = ?").bind(.text(session)).run()
            let s = try db.prepare("SELECT report_seq FROM sessions WHERE name = ?").bind(.text(session))
            if try s.step() { seq = s.int(0) }
        }
        return seq
    }

    /// A report went (`failure` nil) saying `substance` at `time`; or the try failed, and why (the
    /// substance and time stay those of the last report that went, so the next run tries again).
    public func recordReport(session: String, substance: String, time: Timestamp, failure: String?) throws(FerryError) {
        try ensureSession(session)
        if let failure {
            try db.prepare("UPDATE sessions SET report_failure = ? WHERE name = ?").bind(.text(failure), .text(session)).run()
        } else {
            try db.prepare("UPDATE sessions SET report_substance = ?, report_time = ?, report_failure = NULL WHERE name = ?")
                .bind(.text(substance), .text(time.rfc3339), .text(session)).run()
        }
    }
}

import FerryCore
import FerryRuntime

extension StatusCommand {
    /// The `report` line: the last signed status report (its number, when, where, the machine's
    /// key) and why the last try failed.
    static func reportText(_ row: Row) -> String? {
        guard let location = row.session.report, let (record, key) = row.report else { return nil }
        var text = record.time.map { "#\(record.seq) sent \(LocalTime.text($0)) to \(location.url)" } ?? "none sent yet to \(location.url)"
        if let key { text += ", signed by \(key)" }
        if let failure = record.failure { text += "; the last try failed: \(failure)" }
        return text
    }

    static func reportJSON(_ row: Row) -> String {
        guard let location = row.session.report, let (record, key) = row.report else { return "null" }
        return "{\"location\":\(JSONText.quote(location.url)),\"seq\":\(record.seq),"
            + "\"time\":\(record.time.map { JSONText.quote($0.rfc3339) } ?? "null"),"
            + "\"key\":\(key.map { JSONText.quote($0.description) } ?? "null"),"
            + "\"failure\":\(record.failure.map(JSONText.quote) ?? "null")}"
    }
}

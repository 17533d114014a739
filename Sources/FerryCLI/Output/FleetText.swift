import FerryCore
import FerryRuntime

/// `ferry fleet`'s two forms: lines for a person, one JSON object for a program.
enum FleetText {
    static func lines(_ view: FleetView, read: FleetRead, location: String, trusting: Bool) -> [String] {
        var out = ["fleet      \(Printable.name(location)): \(Units.formatCount(read.listed)) \(Plural.noun(read.listed, "report")), "
                   + "\(Units.formatCount(read.taken.count)) taken, \(Units.formatCount(read.refused.count)) refused"
                   + (read.unchanged > 0 ? " (\(Units.formatCount(read.unchanged)) unchanged since the last read, not fetched again)" : "")]
        let sessions = Set(view.served.map(\.session)).count
        func named(_ session: String) -> String { sessions > 1 ? "\(session) " : "" }
        if view.served.isEmpty { out.append("served     no machine reports") }
        for (i, s) in view.served.enumerated() {
            out.append((i == 0 ? "served     " : "           ") + named(s.session) + (s.version.map { "v\($0)" } ?? "nothing yet")
                       + ": \(s.machines) \(Plural.noun(s.machines, "machine"))")
        }
        for r in view.releases {
            out.append("release    \(named(r.session))v\(r.version)" + (r.percent.map { " (rollout \($0)%)" } ?? "")
                       + ": \(r.eligible) eligible, \(r.took) took it, \(r.passed) passed the health gate, \(r.rolledBack) rolled back")
        }
        for s in view.silent.prefix(20) {
            out.append("silent     \(Printable.name(s.host ?? s.machine)) (\(s.session)): last report \(LocalTime.text(s.last))")
        }
        if view.silent.count > 20 { out.append("           and \(view.silent.count - 20) more") }
        for e in view.errors.prefix(5) {
            let few = e.machines.prefix(3).map(Printable.name).joined(separator: ", ") + (e.machines.count > 3 ? ", ..." : "")
            out.append("errors     \(e.error): \(e.machines.count) \(Plural.noun(e.machines.count, "machine")) (\(few))")
        }
        out.append("bytes      origin \(Units.formatBytes(view.originBytes)), mirrors \(Units.formatBytes(view.mirrorBytes)) (each machine's last run)")
        for r in read.refused.prefix(20) { out.append("refused    \(r.kind) \(Printable.name(r.name)): \(Printable.name(r.reason))") }
        if read.refused.count > 20 { out.append("           and \(read.refused.count - 20) more (see --json)") }
        if !read.firstSeen.isEmpty && !trusting {
            out.append("warning    \(read.firstSeen.count) \(Plural.noun(read.firstSeen.count, "machine")) trusted on first report "
                       + "(no --machine-keys): from now on each is bound to the key it reported with")
        }
        return out
    }

    /// One machine's report, as `--json` lists it.
    private static func machine(_ r: StatusReport) -> String {
        func q(_ s: String) -> String { JSONText.quote(s) }
        func n(_ v: Int64?) -> String { v.map(String.init) ?? "null" }
        var f = ["\"machine\":\(q(r.machine))", "\"host\":\(r.host.map(q) ?? "null")", "\"session\":\(q(r.session))"]
        f += ["\"key\":\(q(r.key.description))", "\"seq\":\(r.seq)", "\"time\":\(q(r.time.rfc3339))"]
        f += ["\"served\":\(n(r.served))", "\"seen\":\(n(r.seen))", "\"inside\":\(r.rollout.map { "\($0.inside)" } ?? "null")"]
        f += ["\"health\":\(q(r.health))", "\"rejected\":\(n(r.rejected))", "\"error\":\(r.error.map(q) ?? "null")"]
        f += ["\"origin_bytes\":\(r.originBytes)", "\"mirror_bytes\":\(r.mirrorBytes)"]
        return "{" + f.joined(separator: ",") + "}"
    }

    static func json(_ view: FleetView, read: FleetRead, shown: [StatusReport], location: String) -> String {
        func q(_ s: String) -> String { JSONText.quote(s) }
        func n(_ v: Int64?) -> String { v.map(String.init) ?? "null" }
        var f = ["\"location\":\(q(location))", "\"listed\":\(read.listed)", "\"taken\":\(read.taken.count)", "\"unchanged\":\(read.unchanged)"]
        f.append("\"served\":[" + view.served.map { "{\"session\":\(q($0.session)),\"version\":\(n($0.version)),\"machines\":\($0.machines)}" }
            .joined(separator: ",") + "]")
        f.append("\"releases\":[" + view.releases.map { r in
            "{\"session\":\(q(r.session)),\"version\":\(r.version),\"percent\":\(r.percent.map(String.init) ?? "null"),"
                + "\"eligible\":\(r.eligible),\"took\":\(r.took),\"passed\":\(r.passed),\"rolled_back\":\(r.rolledBack)}"
        }.joined(separator: ",") + "]")
        f.append("\"silent\":[" + view.silent.map { "{\"machine\":\(q($0.machine)),\"session\":\(q($0.session)),\"last\":\(q($0.last.rfc3339))}" }
            .joined(separator: ",") + "]")
        f.append("\"errors\":[" + view.errors.map { "{\"error\":\(q($0.error)),\"machines\":[\($0.machines.map(q).joined(separator: ","))]}" }
            .joined(separator: ",") + "]")
        f.append("\"bytes\":{\"origin\":\(view.originBytes),\"mirrors\":\(view.mirrorBytes)}")
        f.append("\"machines\":[" + shown.map(machine).joined(separator: ",") + "]")
        f.append("\"refused\":[" + read.refused.map { "{\"kind\":\(q($0.kind)),\"name\":\(q($0.name)),\"reason\":\(q($0.reason))}" }
            .joined(separator: ",") + "]")
        f.append("\"first_seen\":[" + read.firstSeen.map { q($0.machine) }.joined(separator: ",") + "]")
        return "{" + f.joined(separator: ",") + "}"
    }
}

import Foundation
import Testing

/// The Prometheus rules ferry ships (examples/prometheus): valid for Debian's promtool, their own
/// unit tests pass (a stuck rollout, rollbacks rising, a rejected or expired release served, a
/// source down, delta fallbacks, polls, disk, budget), and every series they name is one ferry
/// writes, so a renamed metric cannot leave an alert silently watching nothing.
struct PrometheusRulesTests {
    static let directory = Harness.packageRoot + "/examples/prometheus"

    @Test func theShippedRulesAreValidAndPassTheirTests() {
        let check = runProcess("/usr/bin/promtool", ["check", "rules", Self.directory + "/ferry.rules.yml"])
        #expect(check.exitCode == 0 && check.output.contains("SUCCESS"), "\(check.output)")
        let tests = runProcess("/usr/bin/promtool", ["test", "rules", Self.directory + "/ferry.rules.test.yml"])
        #expect(tests.exitCode == 0 && tests.output.contains("SUCCESS"), "\(tests.output)")
    }

    @Test func everySeriesTheRulesNameIsOneFerryWrites() throws {
        let rules = try String(contentsOfFile: Self.directory + "/ferry.rules.yml", encoding: .utf8)
        let source = try String(contentsOfFile: Harness.packageRoot + "/Sources/FerryRuntime/Agent/Metrics.swift", encoding: .utf8)
        let written = Set(Self.names(in: source, after: "metric(\""))
        #expect(written.count > 20, "\(written)")
        let named = Set(Self.names(in: rules, after: "")).filter { !$0.hasPrefix("ferry:") }
        #expect(!named.isEmpty)
        for name in named.sorted() { #expect(written.contains(name), "the rules name \(name), which ferry does not write") }
    }

    /// The `ferry_…` names in `text`, each right after `prefix`.
    static func names(in text: String, after prefix: String) -> [String] {
        let pattern = try! NSRegularExpression(pattern: NSRegularExpression.escapedPattern(for: prefix) + "(ferry_[a-z_]+)")
        let range = NSRange(text.startIndex..., in: text)
        return pattern.matches(in: text, range: range).compactMap { Range($0.range(at: 1), in: text).map { String(text[$0]) } }
    }
}

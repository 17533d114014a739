import Foundation
import Testing

/// The systemd units in config/ pass `systemd-analyze verify` (which prints what it ignores, so
/// any output fails the test) and carry the settings the agent relies on.
struct UnitFileTests {
    static let units = ["ferry.service", "ferry-sync.service", "ferry-sync.timer"]

    @Test func unitsVerify() throws {
        let dir = Harness.temporaryDirectory("units")
        defer { Harness.remove(dir) }
        for name in Self.units {
            let text = try String(contentsOfFile: Harness.packageRoot + "/config/" + name, encoding: .utf8)
            // verify checks that ExecStart's program exists: point it at the ferry just built.
            try text.replacingOccurrences(of: "/usr/local/bin/ferry", with: Harness.ferryBinary).writeReplacing(dir + "/" + name)
        }
        let run = runProcess("/usr/bin/systemd-analyze", ["verify"] + Self.units.map { dir + "/" + $0 })
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.output.isEmpty, "systemd-analyze has remarks: \(run.output)")
    }

    @Test func theAgentUnitSaysWhatTheAgentDoes() throws {
        let service = try String(contentsOfFile: Harness.packageRoot + "/config/ferry.service", encoding: .utf8)
        for line in ["Type=notify", "WatchdogSec=", "ProtectSystem=strict", "StateDirectory=ferry", "NoNewPrivileges=yes",
                     "ReadWritePaths=", "ExecReload=/bin/kill -HUP $MAINPID", "ExecStart=/usr/local/bin/ferry agent --config /etc/ferry/ferry.conf"] {
            #expect(service.contains("\n" + line), "ferry.service lacks \(line)")
        }
        let timer = try String(contentsOfFile: Harness.packageRoot + "/config/ferry-sync.timer", encoding: .utf8)
        for line in ["RandomizedDelaySec=", "Persistent=true", "OnCalendar="] { #expect(timer.contains("\n" + line)) }
        let oneShot = try String(contentsOfFile: Harness.packageRoot + "/config/ferry-sync.service", encoding: .utf8)
        #expect(oneShot.contains("\nExecStart=/usr/local/bin/ferry sync now --config /etc/ferry/ferry.conf"))
        #expect(oneShot.contains("\nType=oneshot"))
        // The commands the units run exist with these options.
        #expect(ferry(["agent", "--help"]).exitCode == 0)
        #expect(ferry(["sync", "now", "--help"]).exitCode == 0)
    }
}

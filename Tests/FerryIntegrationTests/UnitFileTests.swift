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
            try text.replacingOccurrences(of: "/usr/bin/ferry", with: Harness.ferryBinary).writeReplacing(dir + "/" + name)
        }
        let run = runProcess("/usr/bin/systemd-analyze", ["verify"] + Self.units.map { dir + "/" + $0 })
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.output.isEmpty, "systemd-analyze has remarks: \(run.output)")
    }

    /// `ferry config units` for local directories named with quotes, a space, a `%` and a
    /// right-to-left override: systemd takes every line (a raw quote made it drop the line, so the
    /// drop-in granted less than it said), and the output shows no character raw that turns text
    /// around on a terminal.
    @Test func theDropInOfOddPathsVerifies() throws {
        let box = Sandbox("units-odd")
        let odd = ["it's", "say \"hi\"", "100% done", "bidi\u{202E}txt"]
        var text = "[agent]\nstate = \(box.state)\n"
        for (i, name) in odd.enumerated() { text += "[session s\(i)]\nremote = http://127.0.0.1:1/\nlocal = /srv/\(name)\n" }
        try text.writeReplacing(box.config)
        let units = ferry(["config", "units", "--config", box.config])
        #expect(units.exitCode == 0, "\(units.output)")
        #expect(!units.stdout.unicodeScalars.contains { $0.value == 0x202E }, "\(units.stdout)")
        #expect(units.stdout.contains("ReadWritePaths=/srv/it\\x27s\n") && units.stdout.contains("ReadWritePaths=/srv/say\\x20\\x22hi\\x22\n")
                && units.stdout.contains("ReadWritePaths=/srv/100%%\\x20done\n") && units.stdout.contains("ReadWritePaths=/srv/bidi\\u202etxt\n"),
                "\(units.stdout)")
        let unit = box.directory + "/odd.service"
        try ("[Service]\nExecStart=\(Harness.ferryBinary) agent\n" + units.stdout.split(separator: "\n").drop { !$0.hasPrefix("[Service]") }.dropFirst()
            .joined(separator: "\n") + "\n").writeReplacing(unit)
        let run = runProcess("/usr/bin/systemd-analyze", ["verify", unit])
        #expect(run.output.isEmpty, "systemd takes every line: \(run.output)")
    }

    @Test func theAgentUnitSaysWhatTheAgentDoes() throws {
        let service = try String(contentsOfFile: Harness.packageRoot + "/config/ferry.service", encoding: .utf8)
        for line in ["Type=notify", "WatchdogSec=", "ProtectSystem=strict", "StateDirectory=ferry", "NoNewPrivileges=yes",
                     "ExecReload=/usr/bin/ferry reload --config /etc/ferry/ferry.conf", "ExecStart=/usr/bin/ferry agent --config /etc/ferry/ferry.conf"] {
            #expect(service.contains("\n" + line), "ferry.service lacks \(line)")
        }
        let timer = try String(contentsOfFile: Harness.packageRoot + "/config/ferry-sync.timer", encoding: .utf8)
        for line in ["RandomizedDelaySec=", "Persistent=true", "OnCalendar="] { #expect(timer.contains("\n" + line)) }
        let oneShot = try String(contentsOfFile: Harness.packageRoot + "/config/ferry-sync.service", encoding: .utf8)
        #expect(oneShot.contains("\nExecStart=/usr/bin/ferry sync now --config /etc/ferry/ferry.conf"))
        #expect(oneShot.contains("\nType=oneshot"))
        // The commands the units run exist with these options.
        #expect(ferry(["agent", "--help"]).exitCode == 0)
        #expect(ferry(["sync", "now", "--help"]).exitCode == 0)
    }

    /// Issue 22 §2: both services run as `ferry`, unprivileged and sandboxed, at an exposure of at
    /// most 2.0 by systemd's own measure.
    @Test(arguments: ["ferry.service", "ferry-sync.service"])
    func theServicesRunUnprivilegedAndHardened(unit: String) throws {
        let text = try String(contentsOfFile: Harness.packageRoot + "/config/" + unit, encoding: .utf8)
        for line in ["User=ferry", "Group=ferry", "CapabilityBoundingSet=\n", "AmbientCapabilities=\n", "NoNewPrivileges=yes",
                     "SystemCallFilter=@system-service", "SystemCallFilter=~@privileged", "PrivateUsers=yes", "ProtectProc=invisible",
                     "MemoryDenyWriteExecute=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateDevices=yes", "RestrictNamespaces=yes",
                     "StateDirectory=ferry", "StateDirectoryMode=0700", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"] {
            #expect(text.contains("\n" + line), "\(unit) lacks \(line)")
        }
        let run = runProcess("/usr/bin/systemd-analyze", ["security", "--offline=yes", Harness.packageRoot + "/config/" + unit])
        let overall = run.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }
        let score = overall.flatMap { line in line.split(separator: ":").last?.split(separator: " ").first.flatMap { Double($0) } }
        #expect(score != nil && score! <= 2.0, "\(unit): \(overall.map(String.init) ?? run.output)")
        // The user the units name is the one the package makes.
        let sysusers = try String(contentsOfFile: Harness.packageRoot + "/config/ferry.sysusers", encoding: .utf8)
        #expect(sysusers.split(separator: "\n").contains { $0.hasPrefix("u ferry ") && $0.hasSuffix("/var/lib/ferry") })
    }
}

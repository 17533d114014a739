import Foundation
import Testing
import FerryCore
import FerryRuntime

/// The manual pages and the completion are made from the help text (issue 22 §1): these tests
/// read what `ferry help` prints for each command and fail when a page or the completion does not
/// carry it.
struct ManualTests {
    /// Every command, by its words, as `ferry help` lists them, with the options its help lists.
    static func commandsFromHelp() -> [(words: String, options: [String])] {
        let overview = ferry(["help"]).stdout
        let names = overview.split(separator: "\n").drop { !$0.hasPrefix("commands:") }.dropFirst()
            .prefix { $0.hasPrefix("  ") }
            .map { line -> String in
                let text = line.dropFirst(2)
                // The name is padded to 16 columns, or longer and followed by its summary.
                return String(text.prefix(16)).trimmingCharacters(in: .whitespaces)
            }
        return names.map { name in
            let help = ferry(["help"] + name.split(separator: " ").map(String.init)).stdout
            let options = help.split(separator: "\n").drop { $0 != "options:" }.dropFirst()
                .compactMap { $0.split(separator: " ").first.map(String.init) }
            return (name, options)
        }
    }

    /// PATH with the ferry just built first: the completion scripts call `ferry`.
    static var pathWithFerry: String {
        (Harness.ferryBinary as NSString).deletingLastPathComponent + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
    }

    @Test func ferry1CarriesEveryCommandAndOptionAndRendersCleanly() throws {
        let commands = Self.commandsFromHelp()
        #expect(commands.count >= 16 && commands.contains { $0.words == "sync now" } && commands.contains { $0.words == "ls" }, "\(commands.map(\.words))")
        let page = ferry(["help", "--man", "--date", "2026-11-24"])
        #expect(page.exitCode == 0 && page.stdout.hasPrefix(".TH FERRY 1 \"2026-11-24\""))
        let dir = Harness.temporaryDirectory("man")
        defer { Harness.remove(dir) }
        try page.stdout.writeReplacing(dir + "/ferry.1")
        let lint = runProcess("/usr/bin/groff", ["-man", "-Tutf8", "-ww", "-z", dir + "/ferry.1"])
        #expect(lint.exitCode == 0 && lint.output.isEmpty, "groff warns: \(lint.output)")
        let rendered = runProcess("/usr/bin/groff", ["-man", "-Tascii", "-P", "-cbou", "-rLL=300n", dir + "/ferry.1"]).stdout
        for c in commands {
            #expect(rendered.contains("\n   \(c.words)\n"), "ferry(1) has no section for \(c.words)")
            let usage = ferry(["help"] + c.words.split(separator: " ").map(String.init)).stdout.split(separator: "\n").first!.dropFirst("usage: ".count)
            #expect(rendered.contains(String(usage)), "ferry(1) lacks the usage of \(c.words): \(usage)")
            for o in c.options { #expect(rendered.contains("       \(o)"), "ferry(1) lacks \(c.words) \(o)") }
        }
        // REMOTES: each backend as it describes itself, with every key only it takes.
        let remotes = rendered.components(separatedBy: "\nREMOTES\n").last?.components(separatedBy: "\nENVIRONMENT\n").first ?? ""
        for backend in Backends.descriptions {
            #expect(remotes.contains("remote = \(backend.example)"), "ferry(1) REMOTES lack \(backend.name)")
            for key in backend.keys { #expect(remotes.contains("\n       \(key.name)\n"), "ferry(1) REMOTES lack \(key.name)") }
            for ability in backend.abilities.names { #expect(remotes.contains(ability), "ferry(1) REMOTES lack \(backend.name)'s \(ability)") }
        }
        #expect(remotes.contains("s3-endpoint") && remotes.contains("EC2 instance metadata"), "\(remotes)")
        // EXAMPLES: each of the things an operator does first, as commands and config lines.
        let examples = rendered.components(separatedBy: "\nEXAMPLES\n").last?.components(separatedBy: "\nSEE ALSO\n").first ?? ""
        for wanted in ["ferry sync now", "trusted-keys", "layout = generations", "remote = s3://", "direction = push", "ferry config units",
                       "metrics-listen", "--dry-run", "systemctl reload ferry"] {
            #expect(examples.contains(wanted), "ferry(1) EXAMPLES lack \(wanted)")
        }
    }

    @Test func bashCompletionOffersWhatEachCommandTakes() throws {
        let script = ferry(["completion", "bash"])
        #expect(script.exitCode == 0)
        let dir = Harness.temporaryDirectory("completion")
        defer { Harness.remove(dir) }
        try script.stdout.writeReplacing(dir + "/ferry")
        func complete(_ line: String) -> [String] {
            let run = runProcess("/bin/bash", ["-c", """
                source "$1"; read -ra w <<< "$2"; [[ "$2" == *" " ]] && w+=("")
                COMP_WORDS=("${w[@]}"); COMP_CWORD=$((${#w[@]}-1)); COMPREPLY=(); _ferry; printf '%s\\n' "${COMPREPLY[@]}"
                """, "bash", dir + "/ferry", line], environment: ["PATH": ManualTests.pathWithFerry])
            return run.stdout.split(separator: "\n").map(String.init)
        }
        let commands = Self.commandsFromHelp()
        let firsts = Set(commands.map { String($0.words.split(separator: " ")[0]) })
        #expect(firsts.isSubset(of: Set(complete("ferry "))), "\(complete("ferry "))")
        for c in commands {
            let offered = Set(complete("ferry \(c.words) --"))
            let wanted = Set(c.options.filter { $0.hasPrefix("--") })
            #expect(offered == wanted, "ferry \(c.words): completion offers \(offered.sorted()), help lists \(wanted.sorted())")
        }
        #expect(complete("ferry --config /etc/ferry/ferry.conf sync ") == ["now"])
        #expect(Set(complete("ferry agent --log-level ")) == ["error", "warning", "info", "debug"])
        #expect(ferry(["completion", "tcsh"]).exitCode == 2)
        // Session names after --session, from the config the line names.
        try "[session alpha]\nremote = file:///srv/a/\nlocal = /srv/a-m\n[session beta]\nremote = file:///srv/b/\nlocal = /srv/b-m\n".writeReplacing(dir + "/s.conf")
        #expect(complete("ferry status --config \(dir)/s.conf --session ") == ["alpha", "beta"], "\(complete("ferry status --config \(dir)/s.conf --session "))")
    }

    /// zsh's and fish's completion come from the same registry: every command's options, the
    /// groups' words, fixed values, and session names after --session.
    @Test func zshAndFishCompletionOfferWhatEachCommandTakes() throws {
        let dir = Harness.temporaryDirectory("completion-zsh-fish")
        defer { Harness.remove(dir) }
        let zsh = ferry(["completion", "zsh"]), fish = ferry(["completion", "fish"])
        #expect(zsh.exitCode == 0 && zsh.stdout.hasPrefix("#compdef ferry") && fish.exitCode == 0)
        try zsh.stdout.writeReplacing(dir + "/_ferry")
        try fish.stdout.writeReplacing(dir + "/ferry.fish")
        try "[session alpha]\nremote = file:///srv/a/\nlocal = /srv/a-m\n[session beta]\nremote = file:///srv/b/\nlocal = /srv/b-m\n".writeReplacing(dir + "/s.conf")
        // The scripts call `ferry`: the one just built comes first on PATH.
        let path = ManualTests.pathWithFerry
        // zsh: the function runs with compadd and _files standing in for the completion system's.
        try """
            compadd() { while [[ $1 == -* && $1 != -- ]]; do shift; done; [[ $1 == -- ]] && shift; print -l -- "$@"; }
            _files() { print -- "<files>"; }
            script=$1; shift; words=("$@"); CURRENT=${#words}
            source $script
            """.writeReplacing(dir + "/driver.zsh")
        func zshComplete(_ line: String) -> [String] {
            var words = line.split(separator: " ").map(String.init)
            if line.hasSuffix(" ") { words.append("") }
            let run = runProcess("/usr/bin/zsh", ["-f", dir + "/driver.zsh", dir + "/_ferry"] + words, environment: ["PATH": path, "HOME": dir])
            return run.stdout.split(separator: "\n").map(String.init)
        }
        func fishComplete(_ line: String) -> [String] {
            // fish writes its history and variables under HOME: the test's own directory.
            let run = runProcess("/usr/bin/fish", ["-N", "-c", "source \(dir)/ferry.fish; complete -C '\(line)'"], environment: ["PATH": path, "HOME": dir])
            return run.stdout.split(separator: "\n").map { String($0.split(separator: "\t").first ?? "") }
        }
        let commands = ManualTests.commandsFromHelp()
        let firsts = Set(commands.map { String($0.words.split(separator: " ")[0]) })
        #expect(firsts.isSubset(of: Set(zshComplete("ferry "))), "\(zshComplete("ferry "))")
        #expect(firsts.isSubset(of: Set(fishComplete("ferry "))), "\(fishComplete("ferry "))")
        for c in commands {
            let wanted = Set(c.options.filter { $0.hasPrefix("--") })
            let z = Set(zshComplete("ferry \(c.words) --").filter { $0.hasPrefix("--") })
            #expect(z == wanted, "zsh, ferry \(c.words): \(z.sorted()) against \(wanted.sorted())")
            let f = Set(fishComplete("ferry \(c.words) --"))
            #expect(f == wanted, "fish, ferry \(c.words): \(f.sorted()) against \(wanted.sorted())")
        }
        #expect(zshComplete("ferry config ") == ["check", "show", "units"])
        #expect(Set(fishComplete("ferry config ")) == ["check", "show", "units"])
        #expect(Set(zshComplete("ferry agent --log-level ")) == ["error", "warning", "info", "debug"])
        #expect(Set(fishComplete("ferry agent --log-level ")) == ["error", "warning", "info", "debug"])
        #expect(zshComplete("ferry sync now --config \(dir)/s.conf --session ") == ["alpha", "beta"])
        #expect(fishComplete("ferry sync now --config \(dir)/s.conf --session ") == ["alpha", "beta"])
    }

    @Test func ferryConf5DocumentsEveryKeyAndRendersCleanly() throws {
        let dir = Harness.temporaryDirectory("manconf")
        defer { Harness.remove(dir) }
        let page = runProcess("/usr/bin/python3", [Harness.packageRoot + "/scripts/manconf.py", Harness.packageRoot + "/config/ferry.conf", "0.0", "2026-11-24"])
        #expect(page.exitCode == 0, "\(page.output)")
        try page.stdout.writeReplacing(dir + "/ferry.conf.5")
        let lint = runProcess("/usr/bin/groff", ["-man", "-Tutf8", "-ww", "-z", dir + "/ferry.conf.5"])
        #expect(lint.exitCode == 0 && lint.output.isEmpty, "groff warns: \(lint.output)")
        // Every key config show knows (all of them, for a push and a pull session) is an entry.
        try """
            [agent]
            state = /var/lib/ferry
            [session p]
            remote = s3://bucket/x/
            local = /srv/p
            discretionary = yes
            trusted-keys = ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=
            [session q]
            direction = push
            remote = s3://bucket/y/
            local = /srv/q
            [session h]
            remote = https://example.net/
            local = /srv/h
            layout = generations
            [session s]
            remote = sftp://deploy@mirror.example:2222/srv/content/
            local = /srv/s
            sftp-key = /etc/ferry/sftp_ed25519
            """.writeReplacing(dir + "/all.conf")
        let shown = ferry(["config", "show", "--config", dir + "/all.conf"]).stdout
        let keys = Set(shown.split(separator: "\n").compactMap { line -> String? in
            let l = line.hasPrefix("# ") ? line.dropFirst(2) : line[...]
            return l.range(of: " =").map { String(l[..<$0.lowerBound]) }
        })
        #expect(keys == Set(ConfigParser.allKeys).subtracting(["metadata-grace"]),
                "config show leaves out \(Set(ConfigParser.allKeys).subtracting(keys).sorted())")
        let entries = Set(page.stdout.split(separator: "\n").filter { $0.hasPrefix(".B ") }.compactMap { line -> String? in
            line.dropFirst(3).range(of: " = ").map { String(line.dropFirst(3)[..<$0.lowerBound]).replacingOccurrences(of: "\\-", with: "-") }
        })
        #expect(keys.subtracting(entries).isEmpty, "ferry.conf(5) lacks \(keys.subtracting(entries).sorted())")
        // Every entry has text of its own: a .TP whose key lines are followed by words, not by the next entry.
        let lines = page.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        var bare: [String] = []
        for (i, line) in lines.enumerated() where line == ".TP" {
            var j = i + 1
            while j < lines.count && (lines[j].hasPrefix(".B ") || lines[j] == ".TQ") { j += 1 }
            if j >= lines.count || lines[j].hasPrefix(".TP") || lines[j].hasPrefix(".SH") { bare.append(String(lines[i + 1])) }
        }
        #expect(bare.isEmpty, "entries without text: \(bare)")
        #expect(page.stdout.contains(".SH EXAMPLES") && page.stdout.contains("remote = s3://"), "ferry.conf(5) has examples")
        #expect(entries.subtracting(keys).subtracting(["metadata-grace"]).isEmpty, "ferry.conf(5) has entries that are not keys: \(entries.subtracting(keys).sorted())")
    }
}

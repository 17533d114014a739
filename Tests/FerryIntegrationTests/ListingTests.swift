import Foundation
import Testing

/// `ferry ls` and `ferry config show` (issue 22 §3): what the remote lists and what the config
/// says, without syncing.
@Suite(.serialized)
struct ListingTests {
    @Test func lsListsWhatTheRemoteManifestListsAndChangesNothing() throws {
        let box = Sandbox("ls")
        box.publish("css/site.css", "body { }\n", mode: 0o644)
        box.publish("css/print.css", "@media print { }\n", mode: 0o600)
        box.publish("index.html", "<html>\n", mode: 0o755)
        box.publish("notes.tmp", "scratch\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["exclude = *.tmp"])
        let run = ferry(["ls", "--config", box.config])
        #expect(run.exitCode == 0, "\(run.output)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("session test: file://\(box.published)/manifest.json, version ") == true && lines.first?.contains(", 4 files") == true,
                "\(run.output)")
        let hash = sha256(of: Data("body { }\n".utf8)).hex
        let css = try #require(lines.first { $0.hasSuffix(" css/site.css") })
        #expect(css.hasPrefix("-rw-r--r--") && css.contains("  9  ") && css.contains(String(hash.prefix(12))), "\(css)")
        #expect(lines.contains { $0.hasPrefix("-rw-------") && $0.hasSuffix(" css/print.css") })
        #expect(lines.contains { $0.hasPrefix("-rwxr-xr-x") && $0.hasSuffix(" index.html") })
        #expect(lines.contains { $0.hasSuffix(" notes.tmp  (excluded)") }, "\(run.output)")
        // One directory, one file, or nothing there.
        let dir = ferry(["ls", "--config", box.config, "css/", "--json"])
        #expect(dir.exitCode == 0 && dir.events.compactMap { $0["path"] as? String } == ["css/print.css", "css/site.css"], "\(dir.output)")
        let one = try #require(ferry(["ls", "--config", box.config, "--session", "test", "css/site.css", "--json"]).events.first)
        #expect(one["size"] as? Int == 9 && one["mode"] as? String == "0644" && one["sha256"] as? String == hash && one["version"] is Int
                && one["excluded"] as? Bool == false && (one["mtime"] as? String)?.hasSuffix("Z") == true, "\(one)")
        let none = ferry(["ls", "--config", box.config, "css/nothing"])
        #expect(none.exitCode == 1 && none.stderr.contains("lists nothing at css/nothing"), "\(none.output)")
        let bad = ferry(["ls", "--config", box.config, "../etc"])
        #expect(bad.exitCode == 2, "\(bad.output)")
        // Nothing was synced or recorded.
        #expect(!FileManager.default.fileExists(atPath: box.local))
        #expect(!FileManager.default.fileExists(atPath: box.state + "/manifests/test.manifest"))
        #expect(box.sync().exitCode == 0, "and the first sync takes the manifest as new")
    }

    @Test func lsRefusesAManifestTheSessionWouldRefuse() throws {
        let box = Sandbox("ls-trust")
        box.publish("a.txt", "alpha\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["trusted-keys = ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="])
        let run = ferry(["ls", "--config", box.config])
        #expect(run.exitCode == 4 && run.stderr.contains("is not signed") && run.stdout.isEmpty, "\(run.output)")
        box.configure(remote: "file://" + box.directory + "/nowhere")
        let missing = ferry(["ls", "--config", box.config])
        #expect(missing.exitCode == 4 && missing.stderr.contains("session 'test'"), "\(missing.output)")
    }

    @Test func configShowFillsInDefaultsAndNeverPrintsASecret() throws {
        let box = Sandbox("config-show")
        try """
            [agent]
            state = state
            [session media]
            direction = push
            remote = s3://bucket/prefix/
            s3-endpoint = http://127.0.0.1:8333
            local = src
            [session assets]
            remote = https://example.net/assets/
            local = /srv/assets
            """.writeReplacing(box.config)
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        let run = ferry(["config", "show", "--config", box.config],
                        environment: ["AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY": secret])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(!run.output.contains(secret) && !run.output.contains("AKIAIOSFODNN7EXAMPLE"), "\(run.output)")
        #expect(run.stdout.contains("(the AWS chain: environment, access key AKIA…MPLE)"), "\(run.stdout)")
        #expect(run.stdout.contains("\nstate = \(box.directory)/state\n"), "relative paths resolved: \(run.stdout)")
        #expect(run.stdout.contains("\n[session media]\n") && run.stdout.contains("\nupload-part-size = 16M\n"))
        #expect(run.stdout.contains("\npoll = 15m\n") && run.stdout.contains("\n# exclude ="))
        // The output is a config: ferry reads it back, and shows it the same way.
        try run.stdout.writeReplacing(box.directory + "/shown.conf")
        let again = ferry(["config", "show", "--config", box.directory + "/shown.conf"],
                          environment: ["AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY": secret])
        #expect(again.stdout.split(separator: "\n").dropFirst() == run.stdout.split(separator: "\n").dropFirst(), "\(again.output)")
        let one = ferry(["config", "show", "--config", box.config, "--session", "assets"])
        #expect(one.exitCode == 0 && !one.stdout.contains("[session media]") && one.stdout.contains("[session assets]"))
    }
}

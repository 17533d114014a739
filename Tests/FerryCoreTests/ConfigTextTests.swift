import Testing
@testable import FerryCore
@testable import FerryRuntime

/// `ferry config show` (issue 22 §3): the effective config, written so that it reads back the same.
struct ConfigTextTests {
    static let text = """
        [agent]
        state = /var/lib/ferry
        metrics-listen = [::1]:9469
        log-level = debug
        bwlimit = 08:00,512K 19:00,off

        [session pull]
        remote = https://example.net/a/
        local = /srv/a
        exclude = *.tmp with\\ space .git/
        include = *.iso docs/
        discretionary = yes
        window = 01:00-05:00, 22:00-23:00
        require-ac-power = no
        max-load = 1.5
        min-free-space = 5%
        retry-delay = 0.5
        poll = 90m
        earliest-begin = 2026-11-24T02:00:00Z
        on-file-done = /bin/echo 'two words' "$FERRY_PATH"
        trusted-keys = ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=
        layout = generations
        keep-generations = 4
        mode-mask = 077
        max-delete = 1000
        ca-file = /etc/ferry/ca.pem

        [session push]
        direction = push
        remote = s3://bucket/prefix/
        s3-endpoint = http://10.0.0.5:8333
        s3-credentials = /etc/ferry/aws
        local = /srv/b
        upload-part-size = 32M
        sign-key = /etc/ferry/publisher.key
        expires = 7d
        remote-layout = objects
        conflict = local-wins
        session-transfers = 3
        max-duration = 1h30m

        [session sftp]
        remote = sftp://deploy@mirror.example:2222/srv/content/
        local = /srv/s
        sftp-key = /etc/ferry/sftp_ed25519
        """

    @Test func theShownConfigReadsBackToTheSameSettings() throws {
        let config = try ConfigParser.parse(Self.text, path: "/etc/ferry/ferry.conf")
        let shown = ConfigText.render(config, sessions: config.sessions)
        let again = try ConfigParser.parse(shown, path: "/etc/ferry/ferry.conf")
        #expect(again.agent == config.agent)
        #expect(ConfigText.render(again, sessions: again.sessions) == shown)
        // Values read back, not just text: a few that a careless rendering would bend.
        let pull = try #require(again.session(named: "pull"))
        #expect(pull.retryDelay == 0.5 && pull.poll == 5400 && pull.modeMask == 0o077 && pull.keepGenerations == 4)
        #expect(pull.filter.excludes.map(\.text) == ["*.tmp", "with\\ space", ".git/"])
        #expect(pull.discretion?.windows.count == 2 && pull.discretion?.requireACPower == false && pull.discretion?.maxLoad == 1.5)
        #expect(pull.onFileDone?.arguments == ["/bin/echo", "two words", "$FERRY_PATH"])
        #expect(pull.earliestBegin == .at(Timestamp(rfc3339: "2026-11-24T02:00:00Z")!))
        let push = try #require(again.session(named: "push"))
        #expect(push.uploadPartSize == 32 << 20 && push.expires == 7 * 86400 && push.maxDuration == 5400 && push.remoteLayout == .objects)
        #expect(push.s3.usesPathStyle && push.s3.credentials == "/etc/ferry/aws" && push.transfers == 3)
    }

    @Test func everyKeyIsShownWhereItApplies() throws {
        let config = try ConfigParser.parse(Self.text, path: "/etc/ferry/ferry.conf")
        let shown = ConfigText.render(config, sessions: config.sessions)
        let keys = Set(shown.split(separator: "\n").compactMap { line -> String? in
            let l = line.hasPrefix("# ") ? line.dropFirst(2) : line[...]
            guard let eq = l.range(of: " =") else { return nil }
            return String(l[..<eq.lowerBound])
        })
        let expected = Set(ConfigParser.allKeys).subtracting(["metadata-grace"])
        #expect(expected.subtracting(keys).isEmpty, "not shown: \(expected.subtracting(keys).sorted())")
        // Defaults are filled in.
        #expect(shown.contains("\ntransfers = 8\n") && shown.contains("\nstop-timeout = 5s\n") && shown.contains("\nmax-manifest-size = 256M\n"))
        // What does not apply is left out: no push key in the pull session, no s3 key outside s3.
        let pullSection = shown.components(separatedBy: "[session pull]")[1].components(separatedBy: "[session push]")[0]
        for key in ["sign-key", "remote-layout", "s3-region", "upload-part-size", "conflict"] {
            #expect(!pullSection.contains("\n\(key) =") && !pullSection.contains("# \(key) ="), "\(key) in a pull session")
        }
    }

    @Test func durationsAndSizesAreWrittenExactly() {
        #expect(ConfigText.duration(5400) == "1h30m" && ConfigText.duration(90) == "1m30s" && ConfigText.duration(0.25) == "0.25s")
        #expect(ConfigText.duration(0) == "0s" && ConfigText.duration(7 * 86400) == "7d")
        #expect(ConfigText.size(1536) == "1536" && ConfigText.size(3 << 20) == "3M" && ConfigText.size(1 << 30) == "1G")
        for d in [0.5, 1, 59, 61, 3599, 3601, 86_399, 86_401, 1e9] { #expect(Units.parseDuration(ConfigText.duration(d)) == d, "\(d)") }
        for b: Int64 in [1, 1023, 1024, 1025, 5 << 20, (5 << 20) + 1, 3 << 30] { #expect(Units.parseSize(ConfigText.size(b)) == b, "\(b)") }
    }
}

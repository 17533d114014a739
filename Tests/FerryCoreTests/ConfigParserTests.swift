import Testing
@testable import FerryCore
import FerryRuntime

struct ConfigParserTests {
    let minimal = """
        [session assets]
        remote = https://mirror.example.net/assets
        local = /srv/assets
        """

    @Test func parsesTheContractExample() throws {
        let text = """
            [agent]
            state = /var/lib/ferry          # SQLite state, event log
            transfers = 8                   # concurrent transfers across sessions

            [session assets]                # "assets" is the session identifier
            remote = https://mirror.example.net/assets/     # http://, https://, file://
            manifest = manifest.json        # relative to remote; a SHA256SUMS file also works
            local = /srv/assets
            direction = pull                # pull | push
            poll = 15m                      # background fetch interval (agent)
            delete = yes                    # remove local files that the manifest no longer lists
            """
        let config = try ConfigParser.parse(text, path: "/etc/ferry/ferry.conf")
        #expect(config.agent == AgentConfig(state: "/var/lib/ferry", transfers: 8))
        let s = try #require(config.session(named: "assets"))
        #expect(s.remote.url == "https://mirror.example.net/assets/")
        #expect(s.manifestURL == "https://mirror.example.net/assets/manifest.json")
        #expect(s.local == "/srv/assets")
        #expect(s.direction == .pull)
        #expect(s.poll == 900)
        #expect(s.delete)
    }

    @Test func resolvesRelativePathsAgainstTheConfigDirectory() throws {
        let text = "[agent]\nstate = state\n[session a]\nremote = file:///srv/pub\nlocal = ../mirror/./a\n"
        let config = try ConfigParser.parse(text, path: "/home/op/ferry/ferry.conf")
        #expect(config.agent.state == "/home/op/ferry/state")
        #expect(config.sessions[0].local == "/home/op/mirror/a")
        #expect(config.sessions[0].remote.localDirectory == "/srv/pub/")
    }

    /// Each bad config names the file, the line and (where there is one) the key.
    @Test(arguments: [
        ("[session a]\nremote = http://h/\nlocal = /x\npol = 5m\n", "f.conf:4: [session a] unknown key 'pol'", "did you mean 'poll'?"),
        ("[session a]\nremote = http://h/\nlocal = /x\npoll = soon\n", "f.conf:4: [session a] key 'poll': 'soon' is not a duration", nil),
        ("[session a]\nlocal = /x\n", "f.conf:1: [session a] is missing the required key 'remote'", nil),
        ("[session a]\nremote = http://h/\n", "f.conf:1: [session a] is missing the required key 'local'", nil),
        ("[session a]\nremote = ftp://h/\nlocal = /x\n", "f.conf:2: [session a] key 'remote': unsupported scheme 'ftp'", nil),
        ("[session a]\nremote = https://user:pw@h/\nlocal = /x\n", "f.conf:2: [session a] key 'remote': URL carries credentials", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\ndelete = maybe\n", "f.conf:4: [session a] key 'delete': 'maybe' is not yes or no", nil),
        ("[agent]\ntransfers = 0\n[session a]\nremote = http://h/\nlocal = /x\n", "f.conf:2: [agent] key 'transfers'", nil),
        ("remote = http://h/\n", "f.conf:1: key 'remote' is outside any section", nil),
        ("[sesion a]\n", "f.conf:1: unknown section [sesion a]", nil),
        ("[session]\n", "f.conf:1: section [session] needs exactly one session name", nil),
        ("[session a/b]\n", "f.conf:1: session name 'a/b' is not valid", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\n[session a]\n", "f.conf:4: [session a] appears twice", nil),
        ("[session a]\nremote = http://h/\nremote = http://g/\n", "f.conf:3: [session a] key 'remote' is set twice", nil),
        ("[session a]\nremote http://h/\n", "f.conf:2: expected 'key = value'", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\ndirection = sideways\n", "f.conf:4: [session a] key 'direction': 'sideways' is not pull or push", nil),
        ("[agent]\n", "f.conf: no [session NAME] section", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\n[session b]\nremote = http://h/\nlocal = /x/sub\n", "f.conf: sessions 'a' and 'b' share the local directory", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nmax-delete = 150%\n", "f.conf:4: [session a] key 'max-delete': '150%' is neither a count (1000) nor a percentage (50%)", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nmax-delete = lots\n", "f.conf:4: [session a] key 'max-delete'", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nmode-mask = 0999\n", "f.conf:4: [session a] key 'mode-mask': '0999' is not an octal mask", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nmax-manifest-size = 12\n", "f.conf:4: [session a] key 'max-manifest-size'", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nallow-empty = perhaps\n", "f.conf:4: [session a] key 'allow-empty': 'perhaps' is not yes or no", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nmax-delte = 5\n", "f.conf:4: [session a] unknown key 'max-delte'", "did you mean 'max-delete'?"),
        ("[session a]\nremote = http://h/\nlocal = /x\nwindow = 22:00-06:00\n", "f.conf:4: [session a] key 'window': applies only to a discretionary session",
         "add discretionary = yes to [session a], or remove this line"),
        ("[session a]\nremote = http://h/\nlocal = /x\ndiscretionary = yes\nwindow = 22:00-6\n", "f.conf:5: [session a] key 'window': '22:00-6' is not a window like 22:00-06:00", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\ndiscretionary = yes\nwindow = 25:00-06:00\n", "f.conf:5: [session a] key 'window': '25:00-06:00' is not a window", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\ndiscretionary = yes\nwindow = 06:00-06:00\n", "f.conf:5: [session a] key 'window': the window '06:00-06:00' starts where it ends", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\ndiscretionary = yes\nmax-load = -1\n", "f.conf:5: [session a] key 'max-load'", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\ndiscretionary = yes\nmin-free-space = 100%\n", "f.conf:5: [session a] key 'min-free-space'", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nbwlimit = fast\n", "f.conf:4: [session a] key 'bwlimit': 'fast' is not a rate", "write a rate like 512K, off, or a daily schedule like: 08:00,512K 19:00,off"),
        ("[session a]\nremote = http://h/\nlocal = /x\nbwlimit = 08:00,512K 8:00,off\n", "f.conf:4: [session a] key 'bwlimit': '8:00,off' is not an entry", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nbwlimit = 08:00,512K 08:00,off\n", "f.conf:4: [session a] key 'bwlimit': 08:00 appears twice", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nbwlimit = 100\n", "f.conf:4: [session a] key 'bwlimit': '100' is not a rate of at least 1K", nil),
        ("[agent]\nbudget = 2G\n[session a]\nremote = http://h/\nlocal = /x\n", "f.conf:2: [agent] key 'budget': '2G' is not a size per day or month",
         "write a size per day or month, like 2G/month or 100M/day, or none"),
        ("[agent]\nbudget = 2G/week\n[session a]\nremote = http://h/\nlocal = /x\n", "f.conf:2: [agent] key 'budget': '2G/week' is not a size per day or month", nil),
        ("[agent]\nbudget = 100K/day\n[session a]\nremote = http://h/\nlocal = /x\n", "f.conf:2: [agent] key 'budget': '100K' is not a size of at least 1M", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nbudget = 1G/day\n", "f.conf:4: [session a] key 'budget': '1G/day' is not exempt or counted",
         "the machine's budget is set in [agent]; budget = exempt lets a critical tree go on when it is spent"),
        ("[agent]\nnetwork-metered = sometimes\n[session a]\nremote = http://h/\nlocal = /x\n", "f.conf:2: [agent] key 'network-metered': 'sometimes' is not auto, yes or no", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\npriority = 1000\n", "f.conf:4: [session a] key 'priority': '1000' is not a whole number from -100 to 100", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nremote-layout = objects\n", "f.conf:4: [session a] key 'remote-layout': applies to a push session",
         "a pull reads the layout from the manifest; remove this line"),
        ("[session a]\ndirection = push\nremote = http://h/\nlocal = /x\nremote-layout = blobs\n", "f.conf:5: [session a] key 'remote-layout': 'blobs' is not tree or objects", nil),
        ("[session a]\ndirection = push\nremote = http://h/\nlocal = /x\nkeep-versions = 0\n", "f.conf:5: [session a] key 'keep-versions'", nil),
        ("[session a]\nremote = http://h/\nlocal = /x\nlayout = snapshots\n", "f.conf:4: [session a] key 'layout': 'snapshots' is not in-place or generations", nil),
        ("[session a]\ndirection = push\nremote = http://h/\nlocal = /x\nlayout = generations\n", "f.conf:5: [session a] key 'layout': applies to a pull session",
         "a push chooses how the remote stores files with remote-layout = tree|objects"),
        ("[session a]\nremote = http://h/\nlocal = /x\nkeep-generations = 101\n", "f.conf:4: [session a] key 'keep-generations'", nil),
        ("[session a]\nremote = http://h/\nlocal = /\nlayout = generations\n", "f.conf:4: [session a] key 'layout': needs local to be a directory with a parent", nil),
    ] as [(String, String, String?)])
    func namesFileLineAndKey(text: String, message: String, hint: String?) {
        do {
            _ = try ConfigParser.parse(text, path: "f.conf")
            Issue.record("expected an error for:\n\(text)")
        } catch {
            #expect(error.exitCode == .usage)
            #expect(error.message.hasPrefix(message), "got: \(error.message)")
            if let hint { #expect(error.hint == hint) }
        }
    }

    @Test func parsesDiscretionBandwidthAndPriority() throws {
        let config = try ConfigParser.parse("""
            [agent]
            bwlimit = 08:00,512K 19:00,off
            network-metered = yes
            [session a]
            remote = http://h/
            local = /x
            discretionary = yes
            window = 22:00-06:00, 12:00-13:00:30
            require-ac-power = no
            max-load = 2.5
            min-free-space = 10G
            bwlimit = 1M/s
            priority = -3
            [session b]
            remote = http://h/
            local = /y
            discretionary = yes
            """, path: "f.conf")
        #expect(config.agent.bwlimit?.description == "08:00,512K 19:00,off")
        #expect(config.agent.networkMetered == .yes)
        let a = try #require(config.sessions[0].discretion)
        #expect(a.windows.map(\.description) == ["22:00-06:00", "12:00-13:00:30"])
        #expect(!a.requireACPower && a.requireUnmetered)
        #expect(a.maxLoad == 2.5 && a.minFree == .bytes(10 << 30))
        #expect(config.sessions[0].bwlimit?.rate(at: 0) == 1 << 20)
        #expect(config.sessions[0].priority == -3)
        let b = try #require(config.sessions[1].discretion, "discretionary = yes alone holds for AC power and an unmetered network")
        #expect(b.windows.isEmpty && b.requireACPower && b.requireUnmetered && b.maxLoad == nil && b.minFree == nil)
        #expect(config.sessions[1].priority == 0 && config.sessions[1].bwlimit == nil)
        #expect(try ConfigParser.parse(minimal, path: "f.conf").sessions[0].discretion == nil)
    }

    @Test func warnsWhenABandwidthShareFallsBelowMinSpeed() throws {
        let low = try ConfigParser.parse("[agent]\ntransfers = 8\nbwlimit = 08:00,4K 19:00,off\n" + minimal, path: "f.conf")
        #expect(low.warnings.count == 1)
        #expect(low.warnings.first?.contains("at bwlimit 4.00 KiB/s each of its transfers may get 512 B/s, below min-speed 1.00 KiB/s") == true,
                "\(low.warnings)")
        let fine = try ConfigParser.parse("[agent]\nbwlimit = 1M\n" + minimal, path: "f.conf")
        #expect(fine.warnings.isEmpty)
    }

    @Test func parsesTheSafetyKeys() throws {
        let base = "[session a]\nremote = http://h/\nlocal = /x\n"
        func session(_ extra: String) throws -> SessionConfig { try ConfigParser.parse(base + extra, path: "f").sessions[0] }
        #expect(try session("max-delete = 50%\n").maxDelete == .percent(50))
        #expect(try session("max-delete = 12.5 %\n").maxDelete == .percent(12.5))
        #expect(try session("max-delete = 1000\n").maxDelete == .count(1000))
        #expect(try session("max-delete = 0\n").maxDelete == .count(0))
        #expect(try session("allow-empty = yes\n").allowEmpty)
        #expect(try session("mode-mask = 077\n").modeMask == 0o077)
        #expect(try session("mode-mask = 0\n").modeMask == 0)
        #expect(try session("max-manifest-size = 64M\n").maxManifestSize == 64 << 20)
        #expect(DeletionCap.percent(50).limit(managed: 5) == 2)
        #expect(DeletionCap.percent(50).limit(managed: 0) == 0)
        #expect(DeletionCap.count(7).limit(managed: 0) == 7)
        #expect("\(DeletionCap.percent(50))" == "50%" && "\(DeletionCap.count(3))" == "3")
    }

    @Test func parsesEarliestBeginAsADelayOrATime() throws {
        let base = "[session a]\nremote = http://h/\nlocal = /x\n"
        #expect(try ConfigParser.parse(base + "earliest-begin = 30m\n", path: "f").sessions[0].earliestBegin == .after(1800))
        let at = try #require(Timestamp(rfc3339: "2026-11-24T02:00:00Z"))
        #expect(try ConfigParser.parse(base + "earliest-begin = 2026-11-24T02:00:00Z\n", path: "f").sessions[0].earliestBegin == .at(at))
        #expect(throws: FerryError.self) { try ConfigParser.parse(base + "earliest-begin = soonish\n", path: "f") }
        #expect(EarliestBegin.after(90).time(from: Timestamp(seconds: 1000)) == Timestamp(seconds: 1090))
    }

    /// The keys of a push's remote layout, and the older name of `object-grace`.
    @Test func parsesTheRemoteLayoutKeys() throws {
        let base = "[session a]\ndirection = push\nremote = http://h/\nlocal = /x\n"
        let defaults = try ConfigParser.parse(base, path: "f").sessions[0]
        #expect(defaults.remoteLayout == .tree && defaults.keepVersions == 3 && defaults.objectGrace == 86_400)
        let set = try ConfigParser.parse(base + "remote-layout = objects\nkeep-versions = 5\nobject-grace = 2h\n", path: "f").sessions[0]
        #expect(set.remoteLayout == .objects && set.keepVersions == 5 && set.objectGrace == 7_200)
        #expect(try ConfigParser.parse(base + "metadata-grace = 30m\n", path: "f").sessions[0].objectGrace == 1_800)
    }

    @Test func pullLayoutKeys() throws {
        let base = "[session a]\nremote = http://h/\nlocal = /x\n"
        let defaults = try ConfigParser.parse(base, path: "f").sessions[0]
        #expect(defaults.layout == .inPlace && defaults.keepGenerations == 2)
        let set = try ConfigParser.parse(base + "layout = generations\nkeep-generations = 0\n", path: "f").sessions[0]
        #expect(set.layout == .generations && set.keepGenerations == 0)
        #expect(try ConfigParser.parse(base + "layout = In-Place\n", path: "f").sessions[0].layout == .inPlace)
    }

    /// A signed push expires in 7 days unless `expires` says otherwise (`never` included); an unsigned
    /// one does not. A pull with trusted-keys requires an expiry unless `require-expiry = no`,
    /// which is refused without trusted-keys (and in a push).
    @Test func signedManifestsExpireByDefault() throws {
        let push = "[session a]\ndirection = push\nremote = http://h/\nlocal = /x\n"
        #expect(try ConfigParser.parse(push, path: "f").sessions[0].expires == nil)
        #expect(try ConfigParser.parse(push + "sign-key = /k\n", path: "f").sessions[0].expires == 7 * 86_400)
        #expect(try ConfigParser.parse(push + "sign-key = /k\nexpires = 2h\n", path: "f").sessions[0].expires == 7_200)
        #expect(try ConfigParser.parse(push + "sign-key = /k\nexpires = Never\n", path: "f").sessions[0].expires == nil)
        let pull = "[session a]\nremote = http://h/\nlocal = /x\n"
        let trusting = pull + "trusted-keys = ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n"
        #expect(try ConfigParser.parse(trusting, path: "f").sessions[0].requireExpiry)
        #expect(try !ConfigParser.parse(trusting + "require-expiry = no\n", path: "f").sessions[0].requireExpiry)
        for (text, message) in [(pull + "require-expiry = no\n", "f:4: [session a] key 'require-expiry': applies to a session with trusted-keys"),
                                (push + "require-expiry = no\n", "key 'require-expiry': applies to a pull session"),
                                (trusting + "require-expiry = maybe\n", "'maybe' is not yes or no"),
                                (push + "expires = sometimes\n", "key 'expires'")] {
            let error = #expect(throws: FerryError.self) { try ConfigParser.parse(text, path: "f") }
            #expect(error?.message.contains(message) == true, "\(String(describing: error))")
        }
    }

    @Test func keepsHashInsideAValue() {
        #expect(ConfigParser.stripInlineComment("a#b # comment") == "a#b ")
        #expect(ConfigParser.stripInlineComment("value") == "value")
    }

    @Test func credentialsNeedAnHTTPRemote() {
        #expect(throws: FerryError.self) {
            try ConfigParser.parse("[session a]\nremote = file:///x\nlocal = /y\nbasic-auth-file = /z\n", path: "f")
        }
    }

    @Test func minimalSessionGetsDefaults() throws {
        let s = try ConfigParser.parse(minimal, path: "/f").sessions[0]
        #expect(s.delete == false)
        #expect(s.maxDelete == .percent(50))
        #expect(s.allowEmpty == false)
        #expect(s.modeMask == 0o022)
        #expect(s.maxManifestSize == 256 << 20)
        #expect(s.manifest == "manifest.json")
        #expect(s.allowRollback == false)
    }

    /// The parser knows of schemes and backend keys only what the descriptions it is given say: a
    /// backend that is a description and nothing else is parsed, checked and refused like the
    /// built-in ones.
    @Test func aBackendIsWhatItsDescriptionSays() throws {
        let demo = BackendDescription(
            name: "Demo", schemes: ["demo"], example: "demo://HOST/", called: "a demo:// remote",
            keys: [ConfigKey("demo-token", .secret, help: "a token file"),
                   ConfigKey("demo-zone", .word, help: "a zone", check: { text throws(ConfigProblem) in
                       guard text.allSatisfy(\.isLetter) else { throw ConfigProblem("'\(text)' is not a zone", hint: "letters only") }
                       return text.lowercased()
                   }),
                   ConfigKey("demo-fast", .flag, help: "go fast")],
            transportKeys: ["ca-file"], credentialSources: ["demo-token"], abilities: [.rangedReads],
            checkAddress: { rest throws(ConfigProblem) in
                if rest.hasPrefix("/") { throw ConfigProblem("a demo:// URL names a host first") }
            },
            finish: { session throws(ConfigProblem) in
                if session.direction == .push { throw ConfigProblem("a demo:// remote cannot be published to", key: "direction") }
            })
        let backends = Backends.descriptions + [demo]
        func parse(_ lines: String) throws(FerryError) -> SessionConfig {
            try ConfigParser.parse("[session d]\nlocal = /srv/d\n" + lines, path: "/etc/ferry/ferry.conf", backends: backends).sessions[0]
        }
        let s = try parse("remote = DEMO://h/x\ndemo-token = tok\ndemo-zone = North\ndemo-fast = on\nca-file = /ca.pem\n")
        #expect(s.remote.scheme == "demo" && s.remote.url == "DEMO://h/x/" && s.remote.backend.name == "Demo")
        #expect(s.remoteOptions == ["demo-token": "/etc/ferry/tok", "demo-zone": "north", "demo-fast": "yes"])
        #expect(s.secretFiles.map(\.key) == ["demo-token"] && s.caFile == "/ca.pem")
        for (lines, message) in [("remote = demo:///x\n", "names a host first"),
                                 ("remote = demo://h/\ndemo-zone = n0rth\n", "key 'demo-zone': 'n0rth' is not a zone"),
                                 ("remote = demo://h/\nbearer-token-file = /t\n", "a demo:// remote does not take it; it authenticates with demo-token"),
                                 ("remote = demo://h/\ndirection = push\n", ":4: [session d] key 'direction': a demo:// remote cannot be published to"),
                                 ("remote = https://h/\ndemo-zone = north\n", "applies only to a demo:// remote"),
                                 ("remote = demo://h/\ndemo-token = ~/t\n", "starts with ~")] {
            #expect(throws: FerryError.self) { try parse(lines) }
            do { _ = try parse(lines) } catch { #expect(error.message.contains(message), "\(error.message)") }
        }
        // Without its description the scheme and its keys are unknown.
        let without = #expect(throws: FerryError.self) {
            try ConfigParser.parse("[session d]\nlocal = /srv/d\nremote = demo://h/\n", path: "f", backends: Backends.descriptions)
        }
        #expect(without?.message.contains("unsupported scheme 'demo'") == true)
    }

    @Test func aFileRemoteTakesNoTransportKey() {
        for key in ConfigKey.transport {
            let error = #expect(throws: FerryError.self) {
                try ConfigParser.parse("[session a]\nremote = file:///x\nlocal = /y\n\(key) = /z\n", path: "f")
            }
            #expect(error?.message.contains("key '\(key)': a file:// remote does not take it") == true, "\(String(describing: error))")
        }
    }

    /// The backends ferry has do not step on each other or on the common keys: each scheme names
    /// one backend, and a backend's key is no common key and no other backend's.
    @Test func theBackendsAreConsistent() {
        let schemes = Backends.descriptions.flatMap(\.schemes)
        #expect(Set(schemes).count == schemes.count, "\(schemes)")
        let keys = Backends.descriptions.flatMap { $0.keys.map(\.name) }
        #expect(Set(keys).count == keys.count, "\(keys)")
        #expect(Set(keys).isDisjoint(with: ConfigParser.agentKeys + ConfigParser.sessionKeys), "\(keys)")
        for backend in Backends.descriptions {
            #expect(backend.transportKeys.isSubset(of: ConfigKey.transport) && !backend.credentialSources.isEmpty, "\(backend.name)")
        }
    }

    @Test func aFileURLIsADirectoryWhateverTheCaseOfItsScheme() throws {
        let s = try ConfigParser.parse("[session a]\nremote = FILE:///srv/pub\nlocal = /y\n", path: "f").sessions[0]
        #expect(s.remote.localDirectory == "/srv/pub/")
    }
}

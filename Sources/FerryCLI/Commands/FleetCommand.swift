import Glibc
import FerryCore
import FerryRuntime

/// `ferry fleet`: the fleet as its machines' signed status reports tell it.
struct FleetCommand: Command {
    static let words = ["fleet"]
    static let summary = "Show the fleet from its signed status reports: versions served, rollouts, silent machines, errors."
    static let usage = "fleet REPORT-URL [--machine-keys F] [--json] [--version V] [--machine M] [--silent-after D] | fleet --config F --session ID ..."
    static let details = """
        Reads every report in a report location (the directory sessions publish to with report = URL),
        checks each one's Ed25519 signature against the key it names and its name against that key,
        and prints the versions served by count, each release's rollout (machines eligible, that took
        it, that passed the health gate, that rolled it back), machines whose last report is older
        than --silent-after (default 1h), the commonest errors, and the bytes the last runs took from
        the origin and from mirrors.
        Which machines to believe: with --machine-keys F, only keys listed in F (a line each:
        ed25519:KEY and, optionally, the machine's id; ferry status shows a machine's key on its
        report line). Without it, a machine is trusted on its first report and bound to that key: a
        later report for the same machine under another key is refused as forged.
        A report older than one read before (by sequence number or time) is refused as replayed;
        what was read is remembered in a ledger (--ledger F; default under
        $XDG_STATE_HOME/ferry/fleet/, else ~/.local/state/ferry/fleet/), with the reports taken
        beside it (F.objects): one listed unchanged (S3 ETag, file size and time) is not fetched
        again. Refused reports are counted and named, never merged.
        Give the location as a URL (file://, s3:// with credentials from the environment, sftp://,
        or a WebDAV http(s):// collection), or as a session of the config whose report location,
        credentials and options are used (--session). Exit 0 when read, 4 when the location
        cannot be listed.
        """
    static let options = [CommonOptions.config, OptionSpec("--session", value: "ID", "read this session's report location"),
                          OptionSpec("--machine-keys", value: "F", "trust only the machine keys listed in F"),
                          OptionSpec("--version", value: "V", "only machines serving version V"),
                          OptionSpec("--machine", value: "M", "only machine M (its id or host name)"),
                          OptionSpec("--silent-after", value: "D", "a machine whose last report is older than D is silent (default 1h)"),
                          OptionSpec("--ledger", value: "F", "where what was read is remembered"),
                          CommonOptions.json, CommonOptions.help]

    let location: String?
    let configPath: String?
    let session: String?
    let machineKeysFile: String?
    let version: Int64?
    let machine: String?
    let silentAfter: Double
    let ledgerFile: String?
    let json: Bool
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...1, command: Self.name, what: "REPORT-URL")
        location = arguments.positionals.first
        configPath = arguments.value("--config")
        session = arguments.value("--session")
        machineKeysFile = arguments.value("--machine-keys")
        machine = arguments.value("--machine")
        ledgerFile = arguments.value("--ledger")
        json = arguments.has("--json")
        if let text = arguments.value("--version") {
            guard let v = Int64(text), v >= 0 else { throw .usage("ferry fleet: --version '\(Printable.name(text))' is not a version number") }
            version = v
        } else { version = nil }
        if let text = arguments.value("--silent-after") {
            guard let d = Units.parseDuration(text), d > 0 else { throw .usage("ferry fleet: --silent-after '\(Printable.name(text))' is not a duration like 30m or 2h") }
            silentAfter = d
        } else { silentAfter = 3600 }
        guard (location == nil) != (session == nil) else {
            throw .usage("ferry fleet: give a REPORT-URL, or --session ID, one of them", hint: "see: ferry help fleet")
        }
    }

    func run() throws(FerryError) -> ExitCode {
        let target = try reportSession()
        var keys: [PublicKey: String]?
        if let machineKeysFile { keys = try FleetCommand.machineKeys(machineKeysFile) }
        var ledgerPath = ledgerFile ?? ""
        if ledgerFile == nil { ledgerPath = try FleetCommand.defaultLedger(for: target.remote.url) }
        // A ledger that exists but cannot be read is an error: reading on without it would take
        // replays as new and then write over what it remembered.
        var ledger: FleetLedger
        do { ledger = FleetLedger(text: try FleetCommand.kept(ledgerPath, limit: FleetCommand.ledgerLimit)) } catch {
            throw FerryError(.usage, "ferry fleet: cannot read the ledger: \(error.message)",
                             hint: "without it replayed reports cannot be told apart: repair or move it, or give --ledger FILE to start a new one")
        }
        // The objects taken last time, beside the ledger: those listed unchanged are not fetched
        // again. Only a saving: unreadable, every report is fetched.
        var objects = FleetObjects()
        let objectsPath = ledgerPath + ".objects"
        do { objects = FleetObjects(text: try FleetCommand.kept(objectsPath, limit: FleetCommand.objectsLimit)) } catch {
            Console.err("ferry: warning: the reports kept from the last read cannot be read (\(error.message)): every report is fetched")
        }
        let read = try FleetReading.read(session: target, machineKeys: keys, ledger: &ledger, objects: &objects, clock: clock)
        do {
            try FileSystem.writeAtomically(ledgerPath, bytes: Array(ledger.text.utf8), mode: 0o600)
        } catch {
            Console.err("ferry: warning: the ledger \(Printable.name(ledgerPath)) cannot be written (\(error.message)): replays are not told apart next time")
        }
        keep(objects, at: objectsPath)
        let shown = read.taken.filter { r in
            (version == nil || r.served == version) && (machine == nil || r.machine == machine || r.host == machine)
        }
        let view = FleetView(shown, now: clock.now(), silentAfter: silentAfter)
        if json {
            Console.json(FleetText.json(view, read: read, shown: shown, location: target.remote.url))
        } else {
            for line in FleetText.lines(view, read: read, location: target.remote.url, trusting: keys != nil) { Console.out(line) }
        }
        return .inSync
    }

    /// The ledger's bound: a line is about 170 bytes, so well over the 1,000,000 reports a listing holds.
    static let ledgerLimit = 512 << 20
    /// The kept reports' bound: a report kept is about 660 bytes, so some 400,000 reports.
    static let objectsLimit = 256 << 20

    /// The text of a file kept between reads; empty when there is none yet.
    static func kept(_ path: String, limit: Int) throws(FerryError) -> String {
        do { return String(decoding: try FileSystem.readFile(path, limit: limit), as: UTF8.self) } catch {
            if error.cause == .local(errno: ENOENT) { return "" }
            throw error
        }
    }

    /// Writes the reports taken for the next read, or, past their bound, none (said once).
    private func keep(_ objects: FleetObjects, at path: String) {
        let text = Array(objects.text.utf8)
        do throws(FerryError) {
            guard text.count <= FleetCommand.objectsLimit else {
                // What the last read kept would stand for objects that have changed since.
                if unlink(path) != 0 && errno != ENOENT { throw FerryError.localIO("cannot remove \(Printable.name(path)): \(FileSystem.errorText())") }
                Console.err("ferry: warning: the \(objects.objects.count) reports taken come to more than \(Units.formatBytes(Int64(FleetCommand.objectsLimit))), "
                            + "the most kept between reads: none is kept, and the next read fetches every report")
                return
            }
            try FileSystem.writeAtomically(path, bytes: text, mode: 0o600)
        } catch {
            Console.err("ferry: warning: \(Printable.name(path)) cannot be written (\(error.message)): the next read fetches every report")
        }
    }

    /// A session whose remote is the report location: the config's (its credentials and options),
    /// or one made in memory for the URL.
    private func reportSession() throws(FerryError) -> SessionConfig {
        if let session {
            let config = try CommandConfig.load(configPath)
            guard var s = try selectSessions(config, names: [session]).first else { throw .usage("ferry fleet: no session \(session)") }
            guard let report = s.report else {
                throw .usage("ferry fleet: session '\(session)' has no report location", hint: "set report = URL in [session \(session)], or give the URL")
            }
            s.remote = report
            s.mirrors = []
            return s
        }
        var url = location ?? ""
        if !url.hasSuffix("/") { url += "/" }
        let text = "[agent]\nstate = /dev/null/ferry-fleet\n\n[session fleet]\nremote = \(url)\nlocal = /dev/null/ferry-fleet/local\n"
        return try ConfigParser.parse(text, path: "(fleet)").sessions[0]
    }

    /// The file of machine keys: `ed25519:KEY [machine id]` a line, `#` comments.
    static func machineKeys(_ path: String) throws(FerryError) -> [PublicKey: String] {
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(path, limit: 64 << 20) } catch {
            throw .usage("ferry fleet: cannot read --machine-keys \(Printable.name(path)): \(error.message)")
        }
        var keys: [PublicKey: String] = [:]
        for (n, line) in String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            guard let first = words.first, !first.hasPrefix("#") else { continue }
            guard let key = PublicKey(text: first), words.count <= 2 else {
                throw .usage("\(Printable.name(path)):\(n + 1): expected ed25519:KEY and, optionally, the machine's id")
            }
            keys[key] = words.count == 2 ? words[1] : ""
        }
        return keys
    }

    /// `$XDG_STATE_HOME/ferry/fleet/<hash of the URL>.ledger`, else under `~/.local/state`.
    static func defaultLedger(for url: String) throws(FerryError) -> String {
        let env = { (name: String) -> String? in getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } }
        guard let base = env("XDG_STATE_HOME") ?? env("HOME").map({ $0 + "/.local/state" }) else {
            throw .usage("ferry fleet: no HOME to keep the ledger in", hint: "give --ledger FILE")
        }
        let directory = base + "/ferry/fleet"
        try FileSystem.makePrivateDirectory(directory)
        return directory + "/" + String(SHA256Hasher.digest(of: Array(url.utf8)).hex.prefix(16)) + ".ledger"
    }
}

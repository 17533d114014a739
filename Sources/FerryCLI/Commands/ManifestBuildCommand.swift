import Glibc
import FerryCore
import FerryRuntime

/// `ferry manifest build DIR`: the publishing side. Hashes a directory and writes its manifest.
struct ManifestBuildCommand: Command {
    static let words = ["manifest", "build"]
    static let summary = "Write the manifest (path, size, SHA-256, mtime, mode of every file) for a directory."
    static let usage = "manifest build DIR [--output F] [--version N [--allow-rollback]] [--sign KEY]... [--rollout P%] [--expires D|never] [--format 1|2] [--grace D] [--delta-min-size SIZE|off] [--sha256sums] [--exclude PATTERN]... [--json] [--quiet|-q]"
    static let details = """
        The manifest goes to DIR/manifest.json unless --output says otherwise; it never lists itself,
        .ferry/ or anything but regular files. Without --version, the version is one more than the
        manifest already at the output path, and never less than the current Unix time in seconds,
        so a build in a fresh checkout (CI) still rises above every earlier one. A --version lower
        than the existing manifest's is refused (mirrors would refuse it as a rollback) unless
        --allow-rollback says it is intended. Serve DIR (with the manifest) over HTTP(S), or point a
        session at it with a file:// remote. --sign KEY signs it with an Ed25519 key (ferry key
        generate makes one); mirrors whose session lists the key's public half in trusted-keys then
        take only manifests that key signed. --rollout P% gives the release to P% of machines (each
        decides by its machine-id; raising P for the same files only adds machines); the others stay
        on the release before, which the signed root names. Repeat --sign for several signatures: a session
        with trust-threshold = N takes a manifest only when N of its trusted keys signed it. --expires D (like 7d) makes it expire D from now: a
        mirror refuses it after that, so an old manifest cannot be replayed forever, and a server
        stuck on one is noticed. A signed manifest expires in 7d unless --expires says otherwise
        (--expires never: no expiry, which mirrors with trusted-keys refuse unless their session
        sets require-expiry = no); build it again before then.

        Format 2 (the default) writes a small root to the output path and the file list as
        immutable objects named by their SHA-256 under .ferry/meta/ beside it: a mirror fetches
        only the objects that changed, so one changed file costs it a few KB however large the
        tree. Serve .ferry/ with the manifest (objects may be cached forever; the root must not
        be). Objects no root names any more are removed once they have been unnamed for --grace
        (default 1d), so readers that took the previous root a moment ago still find theirs.
        --format 1 writes the whole list into one ferry-manifest/1 file, which every ferry reads.

        Format 2 also describes every file from --delta-min-size (default 1M; off: none) by its
        content: a content index, kept as objects under .ferry/meta/ like the tree's. A mirror
        that holds an older version of such a file fetches only the parts that changed (range
        requests), verifies each piece against the index and the whole file against its SHA-256.
        Mirrors older than this ferry refuse a manifest with indexes: upgrade them first, or
        build with --delta-min-size off.

        --exclude PATTERN leaves out what a gitignore-style glob matches (*.tmp, .git/,
        logs/**/*.gz), as a session's exclude = does; repeat it for more patterns.
        """
    static let options = [OptionSpec("--output", value: "F", "where to write the manifest (default: DIR/manifest.json)"),
                          OptionSpec("--version", value: "N", "the manifest's version (default: previous + 1, at least the Unix time)"),
                          OptionSpec("--allow-rollback", "write a --version lower than the existing manifest's"),
                          OptionSpec("--sign", value: "KEY", repeatable: true, "sign it with this Ed25519 private key (PEM; repeat for more signatures)"),
                          OptionSpec("--rollout", value: "P%", "give this release to P% of machines (1 to 100); the others stay on the release before"),
                          OptionSpec("--expires", value: "D|never", "make it expire D from now (90m, 12h, 7d; with --sign the default is 7d)"),
                          OptionSpec("--format", value: "1|2", "2: a root and metadata objects under .ferry/meta/ (default); 1: one flat file"),
                          OptionSpec("--grace", value: "D", "format 2: keep objects no root names for D before removing them (default 1d)"),
                          OptionSpec("--delta-min-size", value: "SIZE|off", "format 2: index files from this size for delta transfers (default 1M; off: none)"),
                          OptionSpec("--sha256sums", "also write SHA256SUMS beside the manifest (coreutils sha256sum format, paths relative to DIR)"),
                          OptionSpec("--exclude", value: "PATTERN", repeatable: true, "leave out what this gitignore-style glob matches (repeat for more)"),
                          CommonOptions.json, CommonOptions.quiet, CommonOptions.help]

    let directory: String
    let filter: PathFilter
    let sha256sums: Bool
    let output: String?
    let version: Int64?
    let allowRollback: Bool
    let sign: [String]
    let rollout: Int
    let expires: Double?
    let format: Int
    let grace: Double
    /// Files from this size get a content index; nil: none.
    let deltaMinimum: Int64?
    let mode: OutputMode
    /// Every time the command reads comes from it.
    let clock: any Clock = SystemClock()

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(1...1, command: Self.name, what: "the directory to describe (DIR)")
        directory = arguments.positionals[0]
        output = arguments.value("--output")
        sha256sums = arguments.has("--sha256sums")
        if let v = arguments.value("--version") {
            guard let n = Int64(v), n >= 0 else { throw .usage("ferry manifest build: --version wants a whole number ≥ 0, got '\(v)'") }
            version = n
        } else {
            version = nil
        }
        allowRollback = arguments.has("--allow-rollback")
        if allowRollback && version == nil {
            throw .usage("ferry manifest build: --allow-rollback goes with --version N", hint: "see: ferry help manifest build")
        }
        sign = arguments.all("--sign")
        if let text = arguments.value("--rollout") {
            guard let p = Int(text.hasSuffix("%") ? String(text.dropLast()) : text), (1...100).contains(p) else {
                throw .usage("ferry manifest build: --rollout wants a share of machines from 1% to 100%, like 10%; got '\(text)'")
            }
            rollout = p
        } else {
            rollout = 100
        }
        if Set(sign).count < sign.count { throw .usage("ferry manifest build: --sign names one key twice") }
        if sign.count > ManifestEnvelope.maximumSignatures {
            throw .usage("ferry manifest build: \(sign.count) --sign keys; a manifest carries at most \(ManifestEnvelope.maximumSignatures) signatures")
        }
        if let text = arguments.value("--expires") {
            if text.lowercased() == "never" {
                expires = nil
            } else {
                guard let d = Units.parseDuration(text), d >= 60 else {
                    throw .usage("ferry manifest build: --expires wants a duration of at least a minute, like 12h or 7d (or never); got '\(text)'")
                }
                expires = d
            }
        } else {
            // A signed manifest's word stops counting after a while unless the publisher says otherwise.
            expires = sign.isEmpty ? nil : ManifestEnvelope.defaultLifetime
        }
        switch arguments.value("--format") {
        case nil, "2": format = 2
        case "1": format = 1
        case let other?: throw .usage("ferry manifest build: --format is 1 or 2, got '\(other)'")
        }
        if let text = arguments.value("--grace") {
            guard let d = Units.parseDuration(text) else {
                throw .usage("ferry manifest build: --grace wants a duration, like 1h or 1d; got '\(text)'")
            }
            grace = d
        } else {
            grace = ManifestBuilder.defaultGrace
        }
        switch arguments.value("--delta-min-size") {
        case nil: deltaMinimum = ManifestBuilder.defaultDeltaMinimum
        case "off": deltaMinimum = nil
        case let text?:
            guard let size = Units.parseSize(text), size >= Int64(ContentChunker.maximum) else {
                throw .usage("ferry manifest build: --delta-min-size wants a size of at least 12K, like 1M or 64M (or off); got '\(text)'")
            }
            deltaMinimum = size
        }
        do throws(PathFilter.PatternProblem) {
            filter = try PathFilter(exclude: arguments.all("--exclude"))
        } catch {
            throw .usage("ferry manifest build: --exclude \(error.description)", hint: "write a gitignore-style glob, like '*.tmp', '.git/' or 'logs/**/*.gz' (quoted, so the shell leaves it alone)")
        }
        mode = OutputMode(arguments: arguments)
    }

    func run() throws(FerryError) -> ExitCode {
        // Said in this command's words: there is no session here, so no 'local =' to fix.
        var st = stat()
        if stat(directory, &st) != 0 {
            throw .usage("ferry manifest build: cannot publish \(Printable.name(directory)): \(FileSystem.errorText())",
                         hint: "give the directory that holds the files to publish: ferry manifest build DIR")
        } else if (st.st_mode & S_IFMT) != S_IFDIR {
            throw .usage("ferry manifest build: \(Printable.name(directory)) is not a directory", hint: "give the directory that holds the files to publish: ferry manifest build DIR")
        }
        let bars = mode == .human && Console.stderrIsTerminal ? ProgressBars(clock: clock) : nil
        // The key is read before anything is hashed: a wrong path fails at once.
        let keys = try sign.map { (file) throws(FerryError) -> SigningKey in try SigningKey(file: file, use: "--sign") }
        let result = try ManifestBuilder(clock: clock).build(directory: directory, output: output, version: version,
                                                 allowRollback: allowRollback, signingKeys: keys, expires: expires, format: format,
                                                 grace: grace, sha256sums: sha256sums, filter: filter,
                                                 deltaMinimum: deltaMinimum, rollout: rollout) { done, total in
            var p = SyncProgress(session: "hashing")
            p.filesDone = done
            p.filesTotal = total
            bars?.update(p, force: done == total)
        }
        bars?.clear()
        // Through the same event type and sink as a sync: one renderer for human and --json output.
        let reporter = SyncReporter(mode: mode, clock: clock)
        for file in sign {
            if let warning = SigningKey.exposure(of: file, use: "--sign") { reporter.event(Event(time: clock.now(), session: "", body: .warning(message: warning))) }
        }
        for w in result.warnings { reporter.event(Event(time: clock.now(), session: "", body: .warning(message: w))) }
        reporter.event(Event(time: clock.now(), session: "", body: .manifestBuilt(output: result.output, version: result.version,
                                                                                    files: result.files, bytes: result.bytes,
                                                                                    signedBy: keys.isEmpty ? nil : keys.map(\.publicKey.description).joined(separator: " "),
                                                                                    sha256sums: result.sha256sums)))
        return .inSync
    }
}

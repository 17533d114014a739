/// ferry's configuration, as read from the INI file (docs/design.md, data-safety rule 15). Built
/// only by `ConfigParser`, which guarantees every field below is valid; the runtime trusts it.
public struct Config: Sendable {
    /// The file this came from (for messages).
    public var path: String
    public var agent: AgentConfig
    public var sessions: [SessionConfig]
    /// Non-fatal findings, such as a secret readable by others.
    public var warnings: [String]

    public func session(named name: String) -> SessionConfig? { sessions.first { $0.name == name } }
}

/// The `[agent]` section.
public struct AgentConfig: Sendable, Equatable {
    /// Directory holding the SQLite state and event log.
    public var state: String = "/var/lib/ferry"
    /// Concurrent transfers across sessions.
    public var transfers: Int = 8
    /// After SIGTERM or SIGINT, the longest a run takes to checkpoint and exit.
    public var stopTimeout: Double = 5
    /// The agent's Prometheus textfile, if it writes one.
    public var metrics: String?
    /// The rate all transfers together may use (nil: no limit).
    public var bwlimit: BandwidthSchedule?
    /// Whether the network counts as metered for discretionary sessions.
    public var networkMetered: NetworkMetered = .auto
    /// Where the agent serves `/metrics` and `/healthz` over HTTP (nil: it does not).
    public var metricsListen: ListenAddress?
    /// What the agent logs (`log-level`; `--log-level` overrides it).
    public var logLevel: LogLevel = .info
    /// This machine's identity for phased rollouts (`machine-id`; nil: /etc/machine-id's).
    public var machineID: String?
    /// The bytes all sessions together may move per day or month (`budget`; nil: no budget).
    public var budget: ByteBudget?
}

/// `log-level`: which of the agent's events reach its log (stderr, the journal under systemd).
public enum LogLevel: String, Sendable, Equatable, CaseIterable, Comparable {
    /// Failures only: a run or file that failed, a refused manifest, a config reload refused.
    case error
    /// And warnings: skipped entries, exposed credentials, retries of a manifest.
    case warning
    /// And one line per run and per file done or deleted (the default).
    case info
    /// And everything else: plan items, each file begun, resumed, retried, and the agent's scheduling.
    case debug

    public static func < (a: LogLevel, b: LogLevel) -> Bool {
        allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
    }
}

/// `metrics-listen`: an IP address and a TCP port (`127.0.0.1:9469`, `[::1]:9469`).
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public let host: String
    public let port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// `HOST:PORT` with an IPv4 address, `[HOST]:PORT` with an IPv6 one; names are refused (a
    /// listener is bound before any resolver could be trusted, and a name may mean several).
    public init(parsing text: String) throws(ConfigProblem) {
        let host: Substring, portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw ConfigProblem("'\(text)' is not [IPv6]:PORT, like [::1]:9469")
            }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw ConfigProblem("'\(text)' has no port; write ADDRESS:PORT, like 127.0.0.1:9469") }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard let port = UInt16(portText), port > 0 else { throw ConfigProblem("'\(portText)' is not a TCP port (1-65535)") }
        let isV4 = host.split(separator: ".", omittingEmptySubsequences: false).count == 4
            && host.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { UInt8($0) != nil }
        let isV6 = text.hasPrefix("[") && !host.isEmpty && host.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." }
        guard isV4 || isV6 else {
            throw ConfigProblem("'\(host)' is not an IP address; write one, like 127.0.0.1:9469 (loopback) or 0.0.0.0:9469 (every interface)")
        }
        self.host = String(host)
        self.port = port
    }

    public var isIPv6: Bool { host.contains(":") }
    public var isLoopback: Bool { host.hasPrefix("127.") || host == "::1" }
    public var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// `network-metered`: `auto` asks NetworkManager where it runs (and counts the network as
/// unmetered where it does not); `yes` and `no` say it outright.
public enum NetworkMetered: String, Sendable, Equatable {
    case auto
    case yes
    case no
}

public enum Direction: String, Sendable {
    case pull
    case push
}

/// How a pull keeps its mirror (`layout`).
public enum LocalLayout: String, Sendable {
    /// Files are renamed into `local` one by one.
    case inPlace = "in-place"
    /// `local` is a symlink to a directory holding one whole version; a sync builds the next one
    /// beside it and switches the symlink with one rename.
    case generations
}

/// Where a session's remote lives: a URL, always ending in `/`, and the backend its scheme names.
public struct RemoteLocation: Sendable, Equatable, CustomStringConvertible {
    /// The scheme, lowercase (`https`, `s3`).
    public let scheme: String
    public let url: String
    /// The backend that takes the scheme: what it can do, the keys it takes.
    public let backend: BackendDescription

    /// Parses a URL of one of `backends`' schemes; the backend checks the rest. Userinfo
    /// (`user:pass@`) is refused by each networked backend, so secrets live only in files.
    public init(parsing text: String, backends: [BackendDescription]) throws(ConfigProblem) {
        let schemes = backends.flatMap(\.schemes)
        let expected = schemes.map { $0 + "://" }.joined(separator: ", ")
        guard let sep = text.firstRange(of: "://") else {
            throw ConfigProblem("'\(text)' is not a URL; expected \(expected)")
        }
        let scheme = text[..<sep.lowerBound].lowercased()
        guard let backend = BackendDescription.of(scheme: scheme, in: backends) else {
            throw ConfigProblem("unsupported scheme '\(text[..<sep.lowerBound])'; expected \(schemes.joined(separator: ", "))")
        }
        let rest = text[sep.upperBound...]
        if rest.contains(where: { $0.isWhitespace || $0.asciiValue.map { $0 < 0x20 } == true }) {
            throw ConfigProblem("URL contains whitespace or control characters")
        }
        try backend.checkAddress(rest)
        if rest.contains("?") || rest.contains("#") {
            throw ConfigProblem("URL may not have a query or fragment")
        }
        var url = text
        if !url.hasSuffix("/") { url += "/" }
        self.scheme = scheme
        self.url = url
        self.backend = backend
    }

    public static func == (a: RemoteLocation, b: RemoteLocation) -> Bool { a.url == b.url }

    public var description: String { url }

    /// The URL of a file in the remote: the remote plus the path, each segment percent-encoded.
    public func url(for path: RelativePath) -> String { url + path.percentEncoded }

    /// The directory on this machine the remote is, if its backend keeps one (`file://`).
    public var localDirectory: String? { backend.localDirectory(self) }
}

extension SessionConfig {
    /// The session as its mirror `index` is read: that remote, with the session's keys of its kind
    /// and its `ca-file`, but none of the origin's HTTP credentials (a cache or a replica is
    /// another host: `basic-auth-file` and `bearer-token-file` are the origin's). A mirror gets
    /// `mirrorPatience` to connect and to send again, not the origin's minute: a mirror is a
    /// shortcut, the next source is always there, and a hung cache must cost seconds. (An HTTP
    /// mirror's requests wait the run's patience instead, which starts there and follows the
    /// first bytes the run has seen: `FirstBytes`.)
    public func reading(mirror index: Int) -> SessionConfig {
        var copy = self
        copy.remote = mirrors[index]
        copy.mirrors = []
        copy.basicAuthFile = nil
        copy.bearerTokenFile = nil
        copy.connectTimeout = min(connectTimeout, SessionConfig.mirrorPatience)
        copy.stallTimeout = min(stallTimeout, SessionConfig.mirrorPatience)
        return copy
    }

    /// How long a mirror may take to connect, or send nothing (below `min-speed`), before it is
    /// left for the run (`PullSources`), at least: about 50 round trips of the slowest link ferry
    /// is made for, and far above what a healthy cache takes to start an answer, even on a miss.
    public static let mirrorPatience = 5.0
}

/// One `[session NAME]` section.
public struct SessionConfig: Sendable, Equatable {
    /// The session identifier; every task row carries it.
    public var name: String
    public var remote: RemoteLocation
    /// The manifest, relative to the remote (or an absolute URL).
    public var manifest: String = "manifest.json"
    /// The local root (absolute).
    public var local: String
    public var direction: Direction = .pull
    /// Background-fetch interval for the agent, in seconds.
    public var poll: Double = 15 * 60
    /// Remove local files the manifest no longer lists.
    public var delete: Bool = false
    /// At most this many deletions per run (a count, or a share of the files the session manages);
    /// more is refused as a probable mistake.
    public var maxDelete: DeletionCap = .percent(50)
    /// Accept a manifest whose version is lower than the last one applied.
    public var allowRollback: Bool = false
    /// Accept a manifest that lists no files even when the mirror holds files.
    public var allowEmpty: Bool = false
    /// Pull: a changed large file whose manifest entry has a content index is assembled from the
    /// data the mirror holds and ranges of the remote (`DeltaPlan`).
    public var delta: Bool = true
    /// Pull: more directories whose file at the same relative path a delta may take bytes from.
    public var seeds: [String] = []
    /// Pull: copies of the remote (site caches, CDNs, replicas) tried in order for files before
    /// it; the remote stays the authority for the manifest. Any kind of remote.
    public var mirrors: [RemoteLocation] = []
    /// Where this machine publishes its signed status report after a run (`report`; nil: none):
    /// a directory on any kind of remote, read by `ferry fleet`.
    public var report: RemoteLocation?
    /// A report that says the same as the last one is published again after this long.
    public var reportInterval: Double = 900
    /// Push: files from this size get a content index in the published manifest (nil: none).
    public var deltaMinimum: Int64? = 1 << 20
    /// A manifest larger than this is refused before it is read (it is held in memory to parse).
    public var maxManifestSize: Int64 = 256 << 20
    /// Permission bits a manifest may not set (like a umask): `022` keeps files from being
    /// writable by group and others whatever the remote says.
    public var modeMask: UInt32 = 0o022
    /// PEM bundle of CAs to trust instead of the system store.
    public var caFile: String?
    /// File holding `user:password` for HTTP basic auth.
    public var basicAuthFile: String?
    /// File holding a bearer token.
    public var bearerTokenFile: String?
    /// Give up connecting after this many seconds.
    public var connectTimeout: Double = 30
    /// A transfer slower than `minSpeed` bytes/s for `stallTimeout` seconds is abandoned.
    public var minSpeed: Int64 = 1024
    public var stallTimeout: Double = 60
    /// Stop starting work after this long and exit 3 (like `--max-duration`); nil = no limit.
    public var maxDuration: Double?
    /// At most this many of the session's transfers at once, within `[agent] transfers`; nil = no
    /// limit of its own.
    public var transfers: Int?
    /// New downloads begin no earlier than this (a delay after they are queued, or a fixed time).
    public var earliestBegin: EarliestBegin?
    /// Tries per file per run after the first, for failures worth retrying.
    public var retries: Int = 5
    /// The first retry's delay; each next one doubles, up to 60 s, with jitter.
    public var retryDelay: Double = 1
    /// A task still unfinished this long after it was queued fails instead of waiting on.
    public var resourceTimeout: Double = 7 * 86400
    /// Run for every file a run finished (downloaded, or failed for good).
    public var onFileDone: HookCommand?
    /// Run when a run has finished all the session's work (the analogue of `urlSessionDidFinishEvents`).
    public var onSessionDone: HookCommand?
    /// Pull, `layout = generations`: run after each switch to a new generation; when it fails (or
    /// outlasts `hook-timeout`) the previous generation is made current again and that version is
    /// not taken again on this machine.
    public var onSwitchCheck: HookCommand?
    /// A hook (or the switch check) still running after this long is stopped and reported.
    public var hookTimeout: Double = 60
    /// The agent scans the local tree at least this often, even when inotify saw nothing.
    public var verifyInterval: Double = 3600
    /// `discretionary = yes`: transfers begin only while these conditions hold (nil: any time).
    public var discretion: Discretion?
    /// The rate this session's transfers together may use, within `[agent] bwlimit` (nil: no limit of its own).
    public var bwlimit: BandwidthSchedule?
    /// `budget = exempt`: the machine's byte budget never holds this session's transfers (what
    /// they move still counts against it).
    public var budgetExempt = false
    /// Sessions with a higher priority are given transfer slots first; equal ones take turns.
    public var priority: Int = 0
    /// Push: what to do when the remote changed since ferry last published there.
    public var conflict: ConflictPolicy = .fail
    /// Push: how the remote's copy of what was sent is verified before a manifest lists it.
    public var verifyUploads: VerifyUploads = .auto
    /// The values of the keys the remote's backend declares (`BackendDescription.keys`), checked
    /// and normalized by it; its folder reads them into its own settings.
    public var remoteOptions: [String: String] = [:]
    /// Push: a file larger than this goes in parts of this size (an S3 multipart upload).
    public var uploadPartSize: Int64 = 16 << 20
    /// Pull: accept only manifests signed by one of these keys (empty: signatures are informational).
    public var trustedKeys: [PublicKey] = []
    /// Pull, with `trusted-keys`: a manifest without `expires` is refused (a server frozen on one
    /// signed manifest would otherwise go unnoticed for ever).
    public var requireExpiry = true
    /// Pull, with `trusted-keys`: how many of them must have signed a manifest (`trust-threshold`).
    public var trustThreshold = 1
    /// Push: the Ed25519 private keys (PEM files) that each sign what is published (`sign-key`).
    public var signKeys: [String] = []
    /// Push: the directory of key-set documents (`ferry key set`) published beside the manifest;
    /// the manifest names the newest (`keys-dir`).
    public var keysDirectory: String?
    /// Push: the share of machines, in percent, that take what this session publishes (`rollout`);
    /// the others stay on the last release published at 100%.
    public var rollout = 100
    /// Push: how long a published manifest stays valid (its `expires`), in seconds; with `sign-key`
    /// `ManifestEnvelope.defaultLifetime` unless `expires = never`.
    public var expires: Double?
    /// Push: how long objects (metadata, and content with `remote-layout = objects`) that no
    /// published manifest names any more stay on the remote, at least.
    public var objectGrace: Double = 86_400
    /// Push: where the remote keeps the files' bytes (`remote-layout`).
    public var remoteLayout: RemoteLayout = .tree
    /// Push: objects stay while one of the last this many published manifests names them.
    public var keepVersions = 3
    /// Pull: how the mirror is kept (`layout`): written in place, or as generations behind a symlink.
    public var layout: LocalLayout = .inPlace
    /// Pull, `layout = generations`: how many generations before the current one stay.
    public var keepGenerations = 2
    /// `exclude =` / `include =`: the paths the session transfers (`PathFilter`).
    public var filter = PathFilter()

    /// The manifest's path relative to the remote, when it is under it (a relative `manifest`, or
    /// a URL inside the remote's); nil for a manifest elsewhere.
    public var manifestPath: String? {
        if !manifest.contains("://") { return manifest }
        guard manifest.hasPrefix(remote.url) else { return nil }
        return String(manifest.dropFirst(remote.url.count)).removingPercentEncoding()
    }

    /// The files of secrets the session names, by key: HTTP's credentials and the backend's own
    /// (`ConfigKey.Kind.secret`). Each is read only when a run needs it, and checked by `config check`.
    public var secretFiles: [(key: String, path: String)] {
        var files: [(key: String, path: String)] = [("basic-auth-file", basicAuthFile), ("bearer-token-file", bearerTokenFile)].compactMap { key, path in path.map { (key, $0) } }
        for key in remote.backend.keys where key.kind == .secret {
            if let path = remoteOptions[key.name] { files.append((key.name, path)) }
        }
        return files
    }

    /// The manifest's URL.
    public var manifestURL: String {
        if manifest.contains("://") { return manifest }
        return remote.url + manifest
    }
}

/// `max-delete`: how many deletions one run may make, as a count or as a percentage of the files
/// the session manages (those its local root holds before the run). A run that would delete more
/// deletes nothing.
public enum DeletionCap: Sendable, Equatable, CustomStringConvertible {
    case count(Int)
    case percent(Double)

    /// `1000` or `50%`.
    public init?(parsing text: String) {
        if text.hasSuffix("%") {
            guard let p = Double(String(text.dropLast()).trimmingSpaces()), p >= 0, p <= 100 else { return nil }
            self = .percent(p)
        } else {
            guard let n = Int(text), n >= 0 else { return nil }
            self = .count(n)
        }
    }

    /// The most deletions allowed when the session manages `managed` files.
    public func limit(managed: Int) -> Int {
        switch self {
        case .count(let n): return n
        case .percent(let p): return Int((Double(managed) * p / 100).rounded(.down))
        }
    }

    public var description: String {
        switch self {
        case .count(let n): return "\(n)"
        case .percent(let p): return (p.rounded() == p ? "\(Int(p))" : "\(p)") + "%"
        }
    }
}

/// A problem with one value; the parser adds file, line and key.
public struct ConfigProblem: Error, Sendable {
    public let message: String
    /// The key it is about, when a check of a whole section finds it (the parser names its line).
    public let key: String?
    public let hint: String?
    public init(_ message: String, key: String? = nil, hint: String? = nil) {
        self.message = message
        self.key = key
        self.hint = hint
    }
}

extension String {
    /// Decodes `%XX` escapes; nil if an escape is malformed or the result is not UTF-8.
    public func removingPercentEncoding() -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count)
        var it = Array(utf8)[...]
        while let b = it.popFirst() {
            if b == UInt8(ascii: "%") {
                guard it.count >= 2, let hi = hexValue(it.popFirst()!), let lo = hexValue(it.popFirst()!) else { return nil }
                bytes.append(hi << 4 | lo)
            } else {
                bytes.append(b)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }
}

func hexValue(_ b: UInt8) -> UInt8? {
    switch b {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - UInt8(ascii: "A") + 10
    default: return nil
    }
}

/// `earliest-begin` / `--not-before`: a delay from now (`30m`) or a point in time (RFC 3339).
public enum EarliestBegin: Sendable, Equatable {
    case after(Double)
    case at(Timestamp)

    public init?(parsing text: String) {
        if let t = Timestamp(rfc3339: text) ?? Timestamp(localTime: text) {
            self = .at(t)
        } else if let d = Units.parseDuration(text) {
            self = .after(d)
        } else {
            return nil
        }
    }

    public func time(from now: Timestamp) -> Timestamp {
        switch self {
        case .at(let t): return t
        case .after(let d): return Timestamp(seconds: now.seconds + Int64(d.rounded(.up)), nanoseconds: now.nanoseconds)
        }
    }
}

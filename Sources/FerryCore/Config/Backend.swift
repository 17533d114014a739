/// A kind of remote as the config, the docs and the sessions know it: the URL schemes it answers,
/// the config keys only it takes, where its credentials come from, and what it can do. Each
/// backend's folder under the runtime's `Remote/` declares one; the parser, `config show`,
/// `config check` and the manual (ferry(1), REMOTES) read them, so nothing outside that folder
/// names a scheme or a backend's key.
public struct BackendDescription: Sendable {
    /// A name for people: `S3`, `WebDAV/HTTP`.
    public let name: String
    /// The URL schemes, lowercase, without `://`.
    public let schemes: [String]
    /// A URL as a user would write one, for messages: `s3://BUCKET/PREFIX/`.
    public let example: String
    /// Its remotes in a sentence: `an s3:// remote`.
    public let called: String
    /// The keys only this backend takes (`s3-region`), in the order `config show` lists them.
    public let keys: [ConfigKey]
    /// Which of the keys every request goes through (`ConfigKey.transport`) it takes: a local
    /// directory takes none of them, S3 a CA but none of HTTP's credentials.
    public let transportKeys: Set<String>
    /// Where its credentials come from, in the order they are tried (for the docs and `config show`).
    public let credentialSources: [String]
    public let abilities: RemoteAbilities
    /// Checks what follows `scheme://` (the URL already has no whitespace, query or fragment).
    let checkAddress: @Sendable (Substring) throws(ConfigProblem) -> Void
    /// Checks a whole session once its keys are read, and fills in what depends on several
    /// (S3 addresses a dotted bucket by path). A problem names the key it is about.
    let finish: @Sendable (inout SessionConfig) throws(ConfigProblem) -> Void
    /// The directory on this machine a remote of this kind is, if it is one (`file://`): the
    /// publisher lock holds it too, and systemd's sandbox must let the service write it.
    public let localDirectory: @Sendable (RemoteLocation) -> String?

    public init(name: String, schemes: [String], example: String, called: String, keys: [ConfigKey] = [], transportKeys: Set<String>,
                credentialSources: [String], abilities: RemoteAbilities,
                checkAddress: @escaping @Sendable (Substring) throws(ConfigProblem) -> Void,
                finish: @escaping @Sendable (inout SessionConfig) throws(ConfigProblem) -> Void = { _ throws(ConfigProblem) in },
                localDirectory: @escaping @Sendable (RemoteLocation) -> String? = { _ in nil }) {
        self.name = name
        self.schemes = schemes
        self.example = example
        self.called = called
        self.keys = keys
        self.transportKeys = transportKeys
        self.credentialSources = credentialSources
        self.abilities = abilities
        self.checkAddress = checkAddress
        self.finish = finish
        self.localDirectory = localDirectory
    }

    /// The backend of `scheme` among `backends`, if one takes it.
    static func of(scheme: String, in backends: [BackendDescription]) -> BackendDescription? {
        backends.first { $0.schemes.contains(scheme) }
    }
}

/// What a backend can do: the one value the runtime asks instead of a remote's scheme or type.
public struct RemoteAbilities: OptionSet, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// A file can be read from an offset, so a download resumes (otherwise it starts again).
    public static let rangedReads = RemoteAbilities(rawValue: 1 << 0)
    /// A write can be made conditional on what the remote holds, atomically (`If-Match`), so two
    /// publishers cannot both replace the manifest; without it the push compares just before it writes.
    public static let conditionalWrites = RemoteAbilities(rawValue: 1 << 1)
    /// An upload must know its file's SHA-256 before its first byte goes (the request is signed
    /// over it, and the store checks it); otherwise a file is hashed as it is sent.
    public static let hashesBeforeSending = RemoteAbilities(rawValue: 1 << 2)
    /// What the remote holds can be checked on every run at little cost (a local directory), not
    /// only once `verify-interval` has passed.
    public static let cheapInspection = RemoteAbilities(rawValue: 1 << 3)
    /// Several ranges of a file are worth asking for together (`Remote.fetchRanges`: one request
    /// with a `multipart/byteranges` answer over HTTP; a local directory reads each at no cost),
    /// so the scattered members of a pack cost one request.
    public static let multipleRanges = RemoteAbilities(rawValue: 1 << 4)

    /// Each ability with its name, for `config show` and the docs.
    public static let named: [(RemoteAbilities, String)] = [
        (.rangedReads, "ranged-reads"), (.conditionalWrites, "conditional-writes"), (.hashesBeforeSending, "hashes-before-sending"),
        (.cheapInspection, "cheap-inspection"), (.multipleRanges, "multiple-ranges"),
    ]

    public var names: [String] { Self.named.filter { contains($0.0) }.map(\.1) }
}

/// One config key a backend declares: the kind of value it takes, what is in force while it is
/// unset, and what it does. The parser checks a value with `check`; `config show` writes it back.
public struct ConfigKey: Sendable {
    /// The kind of value, which says how the parser treats it before `check` (a path is resolved
    /// against the config's directory and may not start with `~`; a flag is `yes` or `no`) and
    /// what the shell completes.
    public enum Kind: String, Sendable {
        case path
        /// A path to a file that holds a secret: `config check` reads it, and one that every user
        /// may read is warned about.
        case secret
        case flag
        case word
        case url
    }

    public let name: String
    public let kind: Kind
    /// What the key does, one sentence (ferry(1), REMOTES).
    public let help: String
    /// The value normalized (`http://host:8333/` → `http://host:8333`), or the problem with it.
    let check: @Sendable (String) throws(ConfigProblem) -> String
    /// For `config show`: the value in force when the key is unset, written as a live line (a
    /// flag whose default depends on other keys), or nil to show the key commented out with `unset`.
    let inForce: @Sendable (SessionConfig) -> String?
    /// For `config show`: what an unset key means, in words (`the AWS chain`).
    let unset: @Sendable (SessionConfig) -> String

    public init(_ name: String, _ kind: Kind, help: String,
                check: @escaping @Sendable (String) throws(ConfigProblem) -> String = { $0 },
                inForce: @escaping @Sendable (SessionConfig) -> String? = { _ in nil },
                unset: @escaping @Sendable (SessionConfig) -> String = { _ in "not set" }) {
        self.name = name
        self.kind = kind
        self.help = help
        self.check = check
        self.inForce = inForce
        self.unset = unset
    }

    /// The keys every request of a networked remote goes through; a backend says which it takes.
    public static let transport = ["ca-file", "basic-auth-file", "bearer-token-file"]
}

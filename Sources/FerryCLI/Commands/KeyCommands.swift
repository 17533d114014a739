import Glibc
import FerryCore
import FerryRuntime

/// `ferry key generate --output F`: a new Ed25519 signing key for a publisher.
struct KeyGenerateCommand: Command {
    static let words = ["key", "generate"]
    static let summary = "Make an Ed25519 signing key for publishing signed manifests; print its public key."
    static let usage = "key generate --output F [--config F] [--json]"
    static let details = """
        Writes the private key to F as PKCS#8 PEM, readable by its owner only (mode 0600), the format
        `openssl genpkey -algorithm ed25519` writes: either tool's keys work with the other. An
        existing F is never overwritten. Prints the public key, ed25519:BASE64: list it in
        trusted-keys of the mirrors' pull sessions, and sign with F (manifest build --sign F, or
        sign-key in a push session). Run as root, it says the chown that lets the services' user
        (the owner of the config's state directory) read the key.
        """
    static let options = [OptionSpec("--output", value: "F", "where to write the private key (required)"), CommonOptions.config, CommonOptions.json,
                           CommonOptions.help]

    let output: String
    let json: Bool
    let configPath: String?

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
        guard let output = arguments.value("--output") else {
            throw .usage("ferry key generate: --output F says where to write the key", hint: "for example: ferry key generate --output /etc/ferry/publisher.key")
        }
        self.output = output
        json = arguments.has("--json")
    }

    func run() throws(FerryError) -> ExitCode {
        let key = try SigningKey.generate()
        try key.write(to: output)
        // Made by root, the key is root's: a push run by the services (as the owner of the state)
        // could not read it. Said with the chown, rather than found by the first run.
        var st = stat()
        if geteuid() == 0, let config = try? ConfigLoader.load(path: ConfigLoader.resolvePath(configPath), allowingNoSession: true),
           stat(config.agent.state, &st) == 0, st.st_uid != 0 {
            let user = StateOwner.userName(st.st_uid)
            Console.warning("\(output) is root's (mode 0600); the services run as \(user), the owner of \(config.agent.state): "
                            + "to sign with it there (sign-key), run: chown \(user): \(output)")
        }
        if json {
            Console.json("{\"event\":\"key-generated\",\"output\":\(JSONText.quote(output)),\"public_key\":\(JSONText.quote(key.publicKey.description))}")
        } else {
            Console.out(key.publicKey.description)
        }
        return .inSync
    }
}

/// `ferry key public F`: the public key of a private key file.
struct KeyPublicCommand: Command {
    static let words = ["key", "public"]
    static let summary = "Print the public key (ed25519:BASE64) of an Ed25519 private key file, ferry's or openssl's."
    static let usage = "key public F [--json]"
    static let details = "The line to put in trusted-keys of the sessions that mirror what the key signs."
    static let options = [CommonOptions.json, CommonOptions.help]

    let file: String
    let json: Bool

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(1...1, command: Self.name, what: "the private key file (F)")
        file = arguments.positionals[0]
        json = arguments.has("--json")
    }

    func run() throws(FerryError) -> ExitCode {
        let key = try SigningKey(file: file, use: "ferry key public")
        if json { Console.json("{\"public_key\":\(JSONText.quote(key.publicKey.description))}") } else { Console.out(key.publicKey.description) }
        return .inSync
    }
}

/// `ferry key set DIR`: the next key set mirrors trust, signed in band.
struct KeySetCommand: Command {
    static let words = ["key", "set"]
    static let summary = "Write the next key set (keys and threshold) mirrors move to at their next poll, without a config change."
    static let usage = "key set DIR --key PUB [--key PUB]... [--threshold N] --sign KEY [--sign KEY]... [--json]"
    static let details = """
        Mirrors start from their session's trusted-keys and trust-threshold (key set 1). To add,
        remove or replace keys, or change the threshold, write the next set into DIR: for ferry
        manifest build, the .ferry/keys directory beside the manifest; for a push session, its
        keys-dir. It is DIR/<N>.json, one after the newest there, signed with each --sign key: by
        enough keys of the set before it (its threshold) and by its own threshold of its own keys,
        or mirrors refuse it. Manifests built or pushed from then on name it and must be signed by
        its keys; a mirror takes it (and every set between) at its next poll, keeps the chain in its
        state, and from then on a key the set no longer lists signs nothing there. The first set
        written (2) is checked against its own keys only: it must also carry trust-threshold
        signatures by the keys the mirrors' trusted-keys list.
        """
    static let options = [OptionSpec("--key", value: "PUB", repeatable: true, "a public key of the new set (ed25519:BASE64; repeat for each)"),
                          OptionSpec("--threshold", value: "N", "how many of them must sign a manifest (default 1)"),
                          OptionSpec("--sign", value: "KEY", repeatable: true, "sign the set with this private key (repeat)"),
                          CommonOptions.json, CommonOptions.help]

    let directory: String
    let keys: [PublicKey]
    let threshold: Int
    let signers: [String]
    let json: Bool

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(1...1, command: Self.name, what: "the directory of key sets (DIR)")
        directory = arguments.positionals[0]
        var keys: [PublicKey] = []
        for text in arguments.all("--key") {
            guard let key = PublicKey(text: text) else {
                throw .usage("ferry key set: '\(text)' is not a public key like ed25519:BASE64", hint: "ferry key public KEYFILE prints it")
            }
            if keys.contains(key) { throw .usage("ferry key set: --key \(text) is given twice") }
            keys.append(key)
        }
        guard !keys.isEmpty, keys.count <= KeySet.maximumKeys else { throw .usage("ferry key set: list the set's keys, 1 to \(KeySet.maximumKeys), with --key") }
        let threshold = arguments.value("--threshold").map { Int($0) ?? 0 } ?? 1
        guard threshold >= 1 && threshold <= keys.count else { throw .usage("ferry key set: --threshold must be from 1 to the \(keys.count) keys listed") }
        self.keys = keys
        self.threshold = threshold
        signers = arguments.all("--sign")
        guard !signers.isEmpty else { throw .usage("ferry key set: sign it with --sign KEY (keys of the set before and of this one)") }
        json = arguments.has("--json")
    }

    func run() throws(FerryError) -> ExitCode {
        let signing = try signers.map { (file) throws(FerryError) -> SigningKey in try SigningKey(file: file, use: "--sign") }
        let (path, set, previous) = try KeySets.write(into: directory, keys: keys, threshold: threshold, signers: signing)
        if json {
            Console.json("{\"event\":\"key-set-written\",\"path\":\(JSONText.quote(path)),\"version\":\(set.version),\"threshold\":\(set.threshold),\"keys\":["
                         + set.keys.map { JSONText.quote($0.description) }.joined(separator: ",") + "]}")
        } else {
            Console.out("wrote key set \(set.version) to \(path): \(set.threshold) of \(Plural.count(set.keys.count, "key")) must sign"
                        + (previous == nil ? " (it must also carry enough signatures by the keys the mirrors' trusted-keys list)" : ""))
        }
        return .inSync
    }
}

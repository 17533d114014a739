import FerryCore
import FerryRuntime

/// `ferry key generate --output F`: a new Ed25519 signing key for a publisher.
struct KeyGenerateCommand: Command {
    static let words = ["key", "generate"]
    static let summary = "Make an Ed25519 signing key for publishing signed manifests; print its public key."
    static let usage = "key generate --output F [--json]"
    static let details = """
        Writes the private key to F as PKCS#8 PEM, readable by its owner only (mode 0600), the format
        `openssl genpkey -algorithm ed25519` writes: either tool's keys work with the other. An
        existing F is never overwritten. Prints the public key, ed25519:BASE64: list it in
        trusted-keys of the mirrors' pull sessions, and sign with F (manifest build --sign F, or
        sign-key in a push session).
        """
    static let options = [OptionSpec("--output", value: "F", "where to write the private key (required)"), CommonOptions.json, CommonOptions.help]

    let output: String
    let json: Bool

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        guard let output = arguments.value("--output") else {
            throw .usage("ferry key generate: --output F says where to write the key", hint: "for example: ferry key generate --output /etc/ferry/publisher.key")
        }
        self.output = output
        json = arguments.has("--json")
    }

    func run() throws(FerryError) -> ExitCode {
        let key = try SigningKey.generate()
        try key.write(to: output)
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

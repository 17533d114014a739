/// What one machine says of one session, signed by the machine's own key: a line of flat JSON (the
/// body) and a line with the base64 of its Ed25519 signature over the body's exact bytes. At most
/// 512 bytes in all, so a fleet of 10,000 is 5 MB to read. The object is named by the key and the
/// session (`objectName`), so a report copied under another machine's name is told apart.
///
/// A report says what is in place (`served`, and the tree that manifest's bytes hash to), apart
/// from the newest release seen (`seen`); the machine's place in the rollout of `seen`; the last
/// health check; the release rolled back; how the last run ended; the bytes it took from the
/// origin and from mirrors. `seq` rises by one with each report a machine publishes for the
/// session; with `time` it lets a reader refuse an older report put back (`FleetLedger`).
public struct StatusReport: Sendable, Equatable {
    public static let maximumSize = 512
    /// The body's room: the whole, less the signature line (88 characters of base64 and two newlines).
    public static let maximumBody = maximumSize - 90
    public static let suffix = ".report"

    public var machine: String
    public var host: String?
    public var key: PublicKey
    public var session: String
    public var seq: Int64
    public var time: Timestamp
    public var served: Int64?
    public var tree: String?
    public var seen: Int64?
    public var rollout: RolloutStanding?
    /// `passed`, `failed` (the last check rolled a release back), `checking`, or `none` (no
    /// on-switch-check).
    public var health: String
    public var rejected: Int64?
    public var exit: Int32
    /// The last run's error class (`FerryError.Category`), nil when it ended well.
    public var error: String?
    public var originBytes: Int64
    public var mirrorBytes: Int64

    public init(machine: String, host: String?, key: PublicKey, session: String, seq: Int64, time: Timestamp,
                served: Int64?, tree: String?, seen: Int64?, rollout: RolloutStanding?, health: String, rejected: Int64?,
                exit: Int32, error: String?, originBytes: Int64, mirrorBytes: Int64) {
        self.machine = String(Printable.name(machine).prefix(40))
        self.host = host.map { String(Printable.name($0).prefix(32)) }
        self.key = key
        self.session = session
        self.seq = seq
        self.time = Timestamp(seconds: time.seconds)
        self.served = served
        self.tree = tree
        self.seen = seen
        self.rollout = rollout
        self.health = health
        self.rejected = rejected
        self.exit = exit
        self.error = error
        self.originBytes = originBytes
        self.mirrorBytes = mirrorBytes
    }

    /// The name a report of `key` for `session` has in the report directory: the first 16 bytes of
    /// the key in hex, the session, `.report`.
    public static func objectName(key: PublicKey, session: String) -> String {
        key.raw.prefix(16).map { b in String(b, radix: 16).count == 1 ? "0" + String(b, radix: 16) : String(b, radix: 16) }.joined()
            + "." + session + suffix
    }

    public var objectName: String { StatusReport.objectName(key: key, session: session) }

    /// What the report says, apart from when, in which sequence and the last run's bytes: two
    /// reports that say the same have the same `substance` (a machine publishes again only when it
    /// changes, or after `report-interval`).
    public var substance: String {
        var copy = self
        copy.seq = 0
        copy.time = Timestamp(seconds: 0)
        copy.originBytes = 0
        copy.mirrorBytes = 0
        return String(decoding: copy.body(), as: UTF8.self)
    }

    /// The body as signed: flat JSON, at most `maximumBody` bytes (the host, then the tree hash, the
    /// rollout and the error class (the exit code stays), are left out of a report that would be
    /// longer, and then the machine's name is cut to 16 characters).
    public func body() -> [UInt8] {
        var copy = self
        var text = copy.render()
        for drop in [{ (r: inout StatusReport) in r.host = nil }, { $0.tree = nil }, { $0.rollout = nil }, { $0.error = nil },
                     { $0.machine = String($0.machine.prefix(16)) }] where text.utf8.count > StatusReport.maximumBody {
            drop(&copy)
            text = copy.render()
        }
        return Array(text.utf8)
    }

    private func render() -> String {
        var fields: [String] = ["\"ferry-report\":1", "\"machine\":\(JSONText.quote(machine))"]
        if let host { fields.append("\"host\":\(JSONText.quote(host))") }
        fields += ["\"key\":\"\(key)\"", "\"session\":\(JSONText.quote(session))", "\"seq\":\(seq)",
                   "\"time\":\"\(time.rfc3339)\""]
        if let served { fields.append("\"served\":\(served)") }
        if let tree { fields.append("\"tree\":\(JSONText.quote(tree))") }
        if let seen { fields.append("\"seen\":\(seen)") }
        if let rollout { fields.append("\"rollout\":\"\(rollout.text)\"") }
        fields.append("\"health\":\(JSONText.quote(health))")
        if let rejected { fields.append("\"rejected\":\(rejected)") }
        fields.append("\"exit\":\(exit)")
        if let error { fields.append("\"error\":\(JSONText.quote(error))") }
        fields += ["\"origin\":\(originBytes)", "\"mirrors\":\(mirrorBytes)"]
        return "{" + fields.joined(separator: ",") + "}"
    }

    /// The published object: the body, a newline, the signature in base64, a newline.
    public static func signed(body: [UInt8], signature: [UInt8]) -> [UInt8] {
        body + [0x0A] + Array(Base64.encode(signature).utf8) + [0x0A]
    }

    /// Why a report cannot be read as one.
    public struct Malformed: Error, Sendable, Equatable {
        public let reason: String
    }

    /// Splits a published object into the report, the body's bytes and the signature; the
    /// signature is not checked here (`FleetReading` does it with libcrypto).
    public static func parse(_ bytes: [UInt8]) throws(Malformed) -> (report: StatusReport, body: [UInt8], signature: [UInt8]) {
        guard bytes.count <= maximumSize else { throw Malformed(reason: "it is \(bytes.count) bytes, over the \(maximumSize) a report may have") }
        guard let newline = bytes.firstIndex(of: 0x0A), newline < bytes.count - 1, bytes.last == 0x0A else {
            throw Malformed(reason: "it is not a body line and a signature line")
        }
        let body = Array(bytes[..<newline])
        let sigText = String(decoding: bytes[(newline + 1)..<(bytes.count - 1)], as: UTF8.self)
        guard let signature = Base64.decode(sigText), signature.count == 64 else {
            throw Malformed(reason: "its second line is not the base64 of a 64-byte Ed25519 signature")
        }
        let f: [String: String]
        do { f = try JSONReader.flatFields(body) } catch { throw Malformed(reason: "its body is not one JSON object: \(error.message)") }
        func count(_ k: String) -> Int64? { f[k].flatMap(JSONReader.count) }
        guard f["ferry-report"] == "1" else { throw Malformed(reason: "it is not a ferry status report of format 1") }
        guard let machine = f["machine"], !machine.isEmpty, let key = f["key"].flatMap(PublicKey.init(text:)),
              let session = f["session"], !session.isEmpty, let seq = count("seq"),
              let time = f["time"].flatMap(Timestamp.init(rfc3339:)), let health = f["health"],
              let exit = count("exit"), exit < 256, let origin = count("origin"), let mirrors = count("mirrors") else {
            throw Malformed(reason: "it lacks one of machine, key, session, seq, time, health, exit, origin, mirrors, or one is not valid")
        }
        let rollout = f["rollout"].flatMap(RolloutStanding.init(text:))
        if f["rollout"] != nil && rollout == nil { throw Malformed(reason: "its rollout is not '<version> <percent> in|out <version taken>'") }
        let report = StatusReport(machine: machine, host: f["host"], key: key, session: session, seq: seq, time: time,
                                  served: count("served"), tree: f["tree"], seen: count("seen"), rollout: rollout, health: health,
                                  rejected: count("rejected"), exit: Int32(exit), error: f["error"], originBytes: origin, mirrorBytes: mirrors)
        // Read back as written: a field this reader dropped or changed is not in the body it verifies.
        guard report.body() == body else { throw Malformed(reason: "its body is not written as ferry writes one (a field is unknown, repeated or out of order)") }
        return (report, body, signature)
    }
}

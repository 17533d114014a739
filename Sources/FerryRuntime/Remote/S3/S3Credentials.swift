import Glibc
import FerryCore

/// The keys an S3 request is signed with, and until when they hold (nil: they do not expire).
/// Never printed: `description` names the access key only. Where they come from is
/// `S3CredentialChain`; `S3CredentialProvider` hands out the current ones.
struct S3Credentials: Sendable, CustomStringConvertible {
    let accessKey: String
    let secretKey: String
    let sessionToken: String?
    var expiration: Timestamp? = nil

    var description: String { "access key \(accessKey)" }

    /// The keys as a source gave them, checked: each present, of a sane length, and without control
    /// characters (they go into headers, where a line break would start another). The problem
    /// names the field, never its value.
    static func checked(accessKey: String?, secretKey: String?, sessionToken: String?, expiration: Timestamp? = nil,
                        names: (key: String, secret: String, token: String)) throws(ConfigProblem) -> S3Credentials {
        func field(_ value: String?, _ name: String, limit: Int) throws(ConfigProblem) -> String? {
            guard let value, !value.isEmpty else { return nil }
            guard value.utf8.count <= limit else { throw ConfigProblem("\(name) is longer than \(limit) bytes") }
            guard value.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else { throw ConfigProblem("\(name) holds a control character") }
            return value
        }
        guard let key = try field(accessKey, names.key, limit: 128) else { throw ConfigProblem("has no \(names.key)") }
        guard let secret = try field(secretKey, names.secret, limit: 256) else { throw ConfigProblem("has no \(names.secret)") }
        let token = try field(sessionToken, names.token, limit: 16 << 10)
        return S3Credentials(accessKey: key, secretKey: secret, sessionToken: token, expiration: expiration)
    }

    /// The names the AWS files give the three keys.
    static let fileNames = (key: "aws_access_key_id", secret: "aws_secret_access_key", token: "aws_session_token")

    /// The keys of `profile` in the text of a shared-credentials file.
    static func parse(_ text: String, profile: String) throws(ConfigProblem) -> S3Credentials {
        guard let values = AWSProfiles(text, kind: .credentials).profile(profile) else { throw ConfigProblem("has no [\(profile)] profile") }
        do {
            return try checked(accessKey: values["aws_access_key_id"], secretKey: values["aws_secret_access_key"],
                               sessionToken: values["aws_session_token"], names: fileNames)
        } catch {
            throw ConfigProblem("profile [\(profile)] \(error.message)")
        }
    }

    @Sendable static func environment(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
}

/// The profiles of an AWS shared-credentials or config file (INI: `[section]`, then `key = value`
/// lines; `#` and `;` start comments; keys are case-insensitive). The credentials file names a
/// profile `[NAME]`, the config file `[profile NAME]` (and `[default]`); a credentials file in the
/// config file's form is taken too. Lines indented under a key (the config file's nested
/// `s3 =` settings) are not ferry's and are skipped.
struct AWSProfiles {
    enum Kind { case credentials, config }
    private var sections: [String: [String: String]] = [:]
    let kind: Kind

    init(_ text: String, kind: Kind) {
        self.kind = kind
        var section: String?
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let indented = raw.first == " " || raw.first == "\t"
            let line = String(raw).trimmingSpaces()
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                let name = String(line.dropFirst().dropLast()).trimmingSpaces()
                section = name
                if sections[name] == nil { sections[name] = [:] }
                continue
            }
            guard !indented, let name = section, let eq = line.firstIndex(of: "=") else { continue }
            let key = String(line[..<eq]).trimmingSpaces().lowercased()
            sections[name]![key] = String(line[line.index(after: eq)...]).trimmingSpaces()
        }
    }

    /// The settings of `profile`, or nil when the file has no such profile.
    func profile(_ name: String) -> [String: String]? {
        switch kind {
        case .credentials:
            return sections[name] ?? sections["profile " + name]
        case .config:
            return name == "default" ? sections["default"] ?? sections["profile default"] : sections["profile " + name]
        }
    }
}

import Glibc
import FerryCore

/// The keys an S3 request is signed with: from the AWS shared-credentials file named by
/// `s3-credentials` (the `s3-profile` section), else from `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`. Never printed: `description` names the
/// access key only.
struct S3Credentials: Sendable, CustomStringConvertible {
    let accessKey: String
    let secretKey: String
    let sessionToken: String?

    var description: String { "access key \(accessKey)" }

    /// The session's credentials. From here on the process cannot dump core (it holds a secret).
    static func load(for session: SessionConfig, environment: (String) -> String? = S3Credentials.environment) throws(FerryError) -> S3Credentials {
        let options = session.s3
        guard let file = options.credentials else {
            ConfigLoader.holdingSecrets()
            guard let key = environment("AWS_ACCESS_KEY_ID"), !key.isEmpty, let secret = environment("AWS_SECRET_ACCESS_KEY"), !secret.isEmpty else {
                throw .usage("session '\(session.name)' has an s3:// remote but no credentials: no s3-credentials, and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not set",
                             hint: "name an AWS shared-credentials file with s3-credentials = (and s3-profile =), or set the AWS_* variables")
            }
            let token = environment("AWS_SESSION_TOKEN").flatMap { $0.isEmpty ? nil : $0 }
            return S3Credentials(accessKey: key, secretKey: secret, sessionToken: token)
        }
        let bytes = try ConfigLoader.readSecret(file, session: session, key: "s3-credentials", limit: 1 << 20)
        do {
            return try parse(String(decoding: bytes, as: UTF8.self), profile: options.profile)
        } catch {
            throw .usage("s3-credentials \(file) of session '\(session.name)': \(error.message)",
                         hint: "the file holds sections like [\(options.profile)] with aws_access_key_id = and aws_secret_access_key = lines")
        }
    }

    /// The keys of `profile` in the text of a shared-credentials file (INI: `[profile]`, then
    /// `aws_access_key_id`, `aws_secret_access_key`, optionally `aws_session_token`; `#` and `;`
    /// start comments).
    static func parse(_ text: String, profile: String) throws(ConfigProblem) -> S3Credentials {
        var section: String?
        var found = false
        var values: [String: String] = [:]
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = String(raw).trimmingSpaces()
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                var name = String(line.dropFirst().dropLast()).trimmingSpaces()
                // The config file's form, `[profile NAME]`, is taken too.
                if name.hasPrefix("profile ") { name = String(name.dropFirst("profile ".count)).trimmingSpaces() }
                section = name
                if name == profile { found = true }
                continue
            }
            guard section == profile, let eq = line.firstIndex(of: "=") else { continue }
            let key = String(line[..<eq]).trimmingSpaces().lowercased()
            values[key] = String(line[line.index(after: eq)...]).trimmingSpaces()
        }
        guard found else { throw ConfigProblem("has no [\(profile)] profile") }
        guard let key = values["aws_access_key_id"], !key.isEmpty else { throw ConfigProblem("profile [\(profile)] has no aws_access_key_id") }
        guard let secret = values["aws_secret_access_key"], !secret.isEmpty else {
            throw ConfigProblem("profile [\(profile)] has no aws_secret_access_key")
        }
        let token = values["aws_session_token"].flatMap { $0.isEmpty ? nil : $0 }
        return S3Credentials(accessKey: key, secretKey: secret, sessionToken: token)
    }

    @Sendable static func environment(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
}

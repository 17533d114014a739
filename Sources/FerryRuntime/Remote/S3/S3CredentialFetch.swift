import CCurl
import FerryCore

/// Fetches temporary S3 credentials from the sources that hand them out over HTTP: STS
/// (`AssumeRoleWithWebIdentity`, XML), a container credentials endpoint and the EC2 instance
/// metadata service (IMDSv2 only; both JSON). Every answer is hostile until checked: bounded in
/// size (`answerLimit`), parsed strictly (`JSONReader`, `S3XML`, RFC 3339 expirations), and every
/// error names the source and never a secret (the token sent, the keys received).
enum S3CredentialFetch {
    /// No credentials document comes near this.
    static let answerLimit = 64 << 10

    // MARK: Web identity

    static func webIdentity(role: String, tokenFile: String, sessionName: String, endpoint: String, source: String) throws(FerryError) -> S3Credentials {
        // Read at every fetch: the token is rotated in place (Kubernetes projects a new one hourly).
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(tokenFile, limit: 64 << 10) } catch {
            throw .usage("\(source): the web identity token: \(error.message)", hint: "check AWS_WEB_IDENTITY_TOKEN_FILE (or web_identity_token_file in the AWS config file)")
        }
        let token = String(decoding: bytes, as: UTF8.self).trimmingSpaces()
        guard !token.isEmpty else { throw .usage("\(source): the web identity token file \(tokenFile) is empty", hint: "check what writes the token there") }
        let form = [("Action", "AssumeRoleWithWebIdentity"), ("Version", "2011-06-15"), ("RoleArn", role), ("RoleSessionName", sessionName),
                    ("WebIdentityToken", token)]
        let body = form.map { "\($0.0)=\($0.1.percentEncoded(keepingSlashes: false))" }.joined(separator: "&")
        let answer = try exchange(endpoint + "/", method: "POST", headers: ["Content-Type: application/x-www-form-urlencoded", "Accept: text/xml", "Expect:"],
                                  body: Array(body.utf8), connectTimeout: 5, timeout: 20, direct: false, what: "ask STS for the role's credentials", source: source)
        guard answer.headers.status == 200 else {
            let (code, message, _) = S3Errors.fields(answer.body)
            let said = code.map { ": \($0)" + (message.map { ": " + $0 } ?? "") } ?? ""
            throw FerryError(.remote, "\(source): STS refused AssumeRoleWithWebIdentity: HTTP \(answer.headers.status)\(said)",
                             hint: "check the role's trust policy, and that the token in \(tokenFile) is current", cause: .http(status: answer.headers.status))
        }
        do { return try stsCredentials(answer.body) } catch {
            throw FerryError(.remote, "\(source): STS's answer \(error.message)", cause: .unusable)
        }
    }

    /// The credentials in an `AssumeRoleWithWebIdentityResponse`.
    static func stsCredentials(_ body: [UInt8]) throws(ConfigProblem) -> S3Credentials {
        guard let block = S3XML.blocks("Credentials", in: body).first else { throw ConfigProblem("holds no <Credentials>") }
        let names = (key: "AccessKeyId", secret: "SecretAccessKey", token: "SessionToken")
        let credentials = try S3Credentials.checked(accessKey: S3XML.element(names.key, in: block), secretKey: S3XML.element(names.secret, in: block),
                                                    sessionToken: S3XML.element(names.token, in: block), names: names)
        guard credentials.sessionToken != nil else { throw ConfigProblem("has no SessionToken") }
        return try expiring(credentials, S3XML.element("Expiration", in: block))
    }

    // MARK: Container credentials

    static func container(url: String, tokenFile: String?, token: String?, source: String) throws(FerryError) -> S3Credentials {
        var headers: [String] = ["Accept: application/json"]
        var authorization = token
        if let tokenFile {
            // Read at every fetch: the agent rotates it.
            do { authorization = String(decoding: try FileSystem.readFile(tokenFile, limit: 16 << 10), as: UTF8.self).trimmingSpaces() } catch {
                throw .usage("\(source): the authorization token: \(error.message)", hint: "check AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
            }
        }
        if let authorization {
            // It becomes a header: a line break in it would start another one.
            guard !authorization.isEmpty, authorization.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else {
                throw .usage("\(source): the authorization token is empty or holds a control character",
                             hint: "check AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (or AWS_CONTAINER_AUTHORIZATION_TOKEN)")
            }
            headers.append("Authorization: \(authorization)")
        }
        let answer = try exchange(url, method: "GET", headers: headers, body: nil, connectTimeout: 2, timeout: 5, direct: true,
                                  what: "fetch credentials", source: source)
        guard answer.headers.status == 200 else {
            throw FerryError(.remote, "\(source): HTTP \(answer.headers.status) \(answer.headers.reason)".trimmingSpaces(),
                             hint: answer.headers.status == 401 || answer.headers.status == 403 ? "check the container's authorization token" : nil,
                             cause: .http(status: answer.headers.status))
        }
        do { return try jsonCredentials(answer.body, requireSuccess: false) } catch {
            throw FerryError(.remote, "\(source): the answer \(error.message)", cause: .unusable)
        }
    }

    // MARK: EC2 instance metadata (IMDSv2)

    /// A session token first (`PUT /latest/api/token`), then the instance's role, then its
    /// credentials, each asked with the token. Short timeouts: off EC2 nothing answers.
    static func instanceMetadata(endpoint: String, source: String) throws(FerryError) -> S3Credentials {
        func ask(_ path: String, method: String = "GET", headers: [String], what: String) throws(FerryError) -> Exchange.Answer {
            let answer = try exchange(endpoint + path, method: method, headers: headers, body: method == "PUT" ? [] : nil,
                                      connectTimeout: 1, timeout: 3, direct: true, what: what, source: source)
            guard answer.headers.status == 200 else {
                let hint = answer.headers.status == 404 && path.hasPrefix("/latest/meta-data/iam")
                    ? "the instance has no IAM role: attach an instance profile, or use another source of credentials" : nil
                throw FerryError(.remote, "\(source): cannot \(what): HTTP \(answer.headers.status) \(answer.headers.reason)".trimmingSpaces(),
                                 hint: hint, cause: .http(status: answer.headers.status))
            }
            return answer
        }
        let tokenAnswer = try ask("/latest/api/token", method: "PUT", headers: ["X-aws-ec2-metadata-token-ttl-seconds: 21600"], what: "get a metadata session token")
        let token = String(decoding: tokenAnswer.body, as: UTF8.self).trimmingSpaces()
        guard !token.isEmpty, token.utf8.count <= 4096, token.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw FerryError(.remote, "\(source): the metadata session token is empty, too long or not printable ASCII", cause: .unusable)
        }
        let withToken = ["X-aws-ec2-metadata-token: \(token)"]
        let roles = try ask("/latest/meta-data/iam/security-credentials/", headers: withToken, what: "find the instance's IAM role")
        let role = String(String(decoding: roles.body, as: UTF8.self).split(separator: "\n").first ?? "").trimmingSpaces()
        guard (1...128).contains(role.utf8.count), role.utf8.allSatisfy({ b in
            (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || "+=,.@_-".utf8.contains(b)
        }) else {
            throw FerryError(.remote, "\(source): the instance's IAM role name is not 1 to 128 letters, digits or +=,.@_-", cause: .unusable)
        }
        let answer = try ask("/latest/meta-data/iam/security-credentials/" + role, headers: withToken, what: "fetch the credentials of role \(role)")
        do { return try jsonCredentials(answer.body, requireSuccess: true) } catch {
            throw FerryError(.remote, "\(source): the credentials of role \(role) \(error.message)", cause: .unusable)
        }
    }

    // MARK: Answers

    /// The credentials in a container or instance-metadata JSON document: `AccessKeyId`,
    /// `SecretAccessKey`, `Token`, `Expiration`. The instance metadata's `Code`, when it is there,
    /// must say `Success`; an answer without it (moto's emulation, some proxies) is taken on its
    /// four fields, as the AWS CLI takes it.
    static func jsonCredentials(_ body: [UInt8], requireSuccess: Bool) throws(ConfigProblem) -> S3Credentials {
        let fields: [String: String]
        do { fields = try JSONReader.flatFields(body) } catch {
            throw ConfigProblem("is not one JSON object as RFC 8259 writes it: \(error.message) (line \(error.line), column \(error.column))")
        }
        if requireSuccess, fields["Code"] != nil, fields["Code"] != "Success" {
            throw ConfigProblem("says Code \(fields["Code"].map { "'" + Printable.name(String($0.prefix(60))) + "'" } ?? "(none)"), not Success")
        }
        let credentials = try S3Credentials.checked(accessKey: fields["AccessKeyId"], secretKey: fields["SecretAccessKey"], sessionToken: fields["Token"],
                                                    names: (key: "AccessKeyId", secret: "SecretAccessKey", token: "Token"))
        return try expiring(credentials, fields["Expiration"])
    }

    /// The credentials with their expiration, which temporary ones must have, as an RFC 3339 time.
    private static func expiring(_ credentials: S3Credentials, _ text: String?) throws(ConfigProblem) -> S3Credentials {
        guard let text else { throw ConfigProblem("has no Expiration") }
        guard let time = Timestamp(rfc3339: text) else {
            throw ConfigProblem("has an Expiration that is not an RFC 3339 time: '\(Printable.name(String(text.prefix(60))))'")
        }
        var out = credentials
        out.expiration = time
        return out
    }

    /// One request to a credentials source, its answer bounded to `answerLimit`. `direct`: past
    /// any proxy of the environment (a link-local or loopback address, as the AWS SDKs do).
    private static func exchange(_ url: String, method: String, headers: [String], body: [UInt8]?, connectTimeout: Double, timeout: Double,
                                 direct: Bool, what: String, source: String) throws(FerryError) -> Exchange.Answer {
        let request = HTTPRequest(url: url, method: method, headers: headers, settings: HTTPSettings(connectTimeout: connectTimeout))
        let answer = EasyHandle.borrow { easy in
            Exchange.perform(easy, request, body: body, limit: answerLimit) { easy in
                easy.set(CURLOPT_TIMEOUT_MS, Int(timeout * 1000))
                if direct { easy.set(CURLOPT_NOPROXY, "*") }
            }
        }
        if answer.overflowed {
            throw FerryError(.remote, "\(source): the answer to \"\(what)\" is larger than \(answerLimit >> 10) KiB; refused", cause: .unusable)
        }
        guard answer.code == CURLE_OK else {
            throw FerryError(.remote, "\(source): cannot \(what): \(Curl.describe(answer.code, errorText: answer.errorText, headers: answer.headers))",
                             cause: Curl.cause(answer.code, errorText: answer.errorText, headers: answer.headers))
        }
        return answer
    }
}

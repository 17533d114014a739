import FerryCore

/// What an S3 error answer means, in words, with the setting to fix: S3 puts the cause in an XML
/// body (`<Error><Code>…</Code><Message>…</Message></Error>`), the status alone says little
/// (a wrong secret, an unknown key and a skewed clock are all 403).
enum S3Errors {
    /// The `Code`, `Message` and `Region` elements of an error body.
    static func fields(_ body: [UInt8]) -> (code: String?, message: String?, region: String?) {
        let text = String(decoding: body.prefix(64 << 10), as: UTF8.self)
        func element(_ name: String) -> String? {
            guard let open = text.firstRange(of: "<\(name)>"), let close = text[open.upperBound...].firstRange(of: "</\(name)>") else { return nil }
            let value = String(text[open.upperBound..<close.lowerBound])
            return value.isEmpty ? nil : Printable.name(String(value.prefix(300)))
        }
        return (element("Code"), element("Message"), element("Region"))
    }

    /// The cause of an error answer and what to do, or nil when the answer says nothing S3-specific.
    /// `credentials` names where the keys came from (`S3CredentialProvider.source`).
    static func explain(status: Int, body: [UInt8], bucket: String, key: String, region: String, credentials: String) -> (text: String, hint: String?)? {
        let (code, message, answerRegion) = fields(body)
        let name = Printable.name(key)
        switch code {
        case "InvalidAccessKeyId":
            return ("the store does not know the access key (InvalidAccessKeyId)", "check the access key id of the credentials from \(credentials)")
        case "SignatureDoesNotMatch":
            return ("the store refused the signature (SignatureDoesNotMatch): the secret key does not belong to the access key",
                    "check the secret access key of the credentials from \(credentials)")
        case "ExpiredToken", "InvalidToken", "TokenRefreshRequired":
            return ("the store refused the session token (\(code!))",
                    "check the credentials from \(credentials); ferry renews temporary ones before they expire, so check this machine's clock too")
        case "RequestTimeTooSkewed":
            return ("this machine's clock differs from the store's by more than S3 allows (RequestTimeTooSkewed)",
                    "set the clock right (timedatectl set-ntp true), then run again")
        case "NoSuchBucket":
            return ("the bucket '\(Printable.name(bucket))' does not exist (NoSuchBucket)", "check remote = s3://BUCKET/PREFIX/ and s3-endpoint")
        case "NoSuchKey":
            return ("no object \(name) (NoSuchKey)", nil)
        case "AuthorizationHeaderMalformed", "PermanentRedirect", "IncorrectEndpoint", "InvalidRegion":
            let want = answerRegion.map { "s3-region = \($0)" } ?? "s3-region (and s3-endpoint)"
            return ("the bucket is not in region \(region) (\(code!))", "set \(want) for this session")
        case "AccessDenied":
            return ("the credentials may not do this with \(name) (AccessDenied)", "grant the access key read and write on the bucket and prefix, or use another profile")
        case "SlowDown":
            return ("the store asks to slow down (SlowDown)", nil)
        case "PreconditionFailed":
            return ("the object \(name) changed (PreconditionFailed)", nil)
        case let code?:
            return ("\(code)\(message.map { ": " + $0 } ?? "")", nil)
        case nil:
            return nil
        }
    }

    /// The error of a request made on a session's thread that got `answer`.
    static func failure(_ answer: Exchange.Answer, doing what: String, bucket: String, key: String, region: String, credentials: String) -> FerryError {
        let status = answer.headers.status
        var text = "cannot \(what): HTTP \(status) \(answer.headers.reason)".trimmingSpaces()
        var hint: String?
        if let (why, advice) = explain(status: status, body: answer.body, bucket: bucket, key: key, region: region, credentials: credentials) {
            text += ": " + why
            hint = advice
        }
        if status == 404 && hint == nil && what.contains("manifest") {
            hint = "check 'remote =' and 'manifest =' in the config, and that the manifest was published"
        }
        return FerryError(.remote, text, hint: hint, cause: .http(status: status))
    }
}

import FerryCore

/// `s3://BUCKET/PREFIX/`: S3-compatible object storage (AWS, SeaweedFS, MinIO, Ceph RGW). The
/// manifest and the files are objects under the prefix; every request is signed (SigV4) with the
/// body's real SHA-256, which the store checks, and a write can be conditional on what it replaces.
enum S3Backend: Backend {
    static let description = BackendDescription(
        name: "S3", schemes: ["s3"], example: "s3://BUCKET/PREFIX/", called: "an s3:// remote",
        keys: [
            ConfigKey("s3-endpoint", .url, help: "the store's address, scheme://host[:port] without a path; unset: AWS",
                      check: { text throws(ConfigProblem) in try S3Endpoint.parse(text) },
                      unset: { s in let o = S3Options(s); return "AWS: " + o.effectiveEndpoint(region: o.region ?? "REGION") }),
            ConfigKey("s3-region", .word, help: "the region requests are signed for",
                      check: { text throws(ConfigProblem) in
                          guard S3Endpoint.isValidRegion(text) else { throw ConfigProblem("'\(text)' is not a region name like us-east-1") }
                          return text
                      },
                      unset: { _ in "the AWS profile's region, else \(S3Options.defaultRegion)" }),
            ConfigKey("s3-path-style", .flag, help: "path-style addressing (endpoint/BUCKET/KEY) rather than virtual-hosted (BUCKET.host/KEY)",
                      inForce: { s in S3Options(s).usesPathStyle ? "yes" : "no" }),
            ConfigKey("s3-credentials", .secret, help: "an AWS shared-credentials file; unset: the AWS credential chain",
                      unset: { _ in "the AWS chain" }),
            ConfigKey("s3-profile", .word, help: "the profile of the credentials and config files",
                      check: { text throws(ConfigProblem) in
                          guard !text.contains("]"), !text.contains("[") else { throw ConfigProblem("'\(text)' is not a profile name") }
                          return text
                      },
                      unset: { s in S3Options(s).credentials == nil ? "AWS_PROFILE, else default" : "default" }),
        ],
        transportKeys: ["ca-file"],
        credentialSources: ["s3-credentials (a shared-credentials file)", "the environment (AWS_ACCESS_KEY_ID...)", "~/.aws/credentials and ~/.aws/config",
                            "a web identity (STS)", "container credentials", "EC2 instance metadata (IMDSv2)"],
        abilities: [.rangedReads, .conditionalWrites, .hashesBeforeSending],
        checkAddress: { rest throws(ConfigProblem) in
            let bucket = String(rest.prefix { $0 != "/" })
            // Never quoted: what stands before an @ may be a secret.
            if bucket.contains("@") { throw ConfigProblem("an s3:// URL carries no credentials; they come from s3-credentials or the AWS chain") }
            guard isValidBucket(bucket) else {
                throw ConfigProblem("'\(bucket)' is not an S3 bucket name (3-63 letters, digits, '.', '-' or '_'); expected s3://BUCKET/PREFIX/")
            }
            if rest.contains("//") { throw ConfigProblem("an s3:// URL may not hold an empty path segment ('//')") }
        },
        finish: { session throws(ConfigProblem) in
            if session.manifest.contains("://") {
                throw ConfigProblem("an s3:// remote's manifest is an object under its prefix, named relative to it (like manifest.json)", key: "manifest")
            }
            let options = S3Options(session)
            if options.endpoint == nil, options.pathStyle == nil, session.remote.bucket.contains(".") {
                // Virtual-hosted addressing of a dotted bucket breaks AWS's TLS certificate (*.s3...).
                session.remoteOptions["s3-path-style"] = "yes"
            }
        })

    static func open(_ session: SessionConfig, clock: any Clock, stop: StopCondition?,
                     meter: FirstBytes.Meter?) throws(FerryError) -> Remote {
        try S3Remote(session: session, clock: clock, stop: stop, meter: meter)
    }

    /// Where the credentials come from and the region in force, without the network: a source
    /// that has not been asked yet is named, not fetched.
    static func describe(_ session: SessionConfig) -> [String: String] {
        let options = S3Options(session)
        let credentials: String, region: String, origin: String
        do {
            let found = try S3CredentialChain.resolve(session)
            credentials = found.provider.source + (found.provider.fixedAccessKeyHint.map { ", access key " + $0 } ?? "")
            (region, origin) = (found.region, found.regionOrigin)
        } catch {
            credentials = "none usable: " + error.message
            (region, origin) = (options.region ?? S3Options.defaultRegion, options.region == nil ? "the default" : "s3-region")
        }
        return ["s3-credentials": "the AWS chain: " + credentials, "s3-region": "\(region): \(origin)",
                "s3-endpoint": "AWS: " + options.effectiveEndpoint(region: options.region ?? region)]
    }

    /// The credentials fetched now, through the network for the sources that need it: a line
    /// naming the source, the access key and, for temporary credentials, when they expire; then
    /// the region. Never a secret.
    static func check(_ session: SessionConfig, now: Timestamp) throws(FerryError) -> [String] {
        let found = try S3CredentialChain.resolve(session)
        let credentials = try found.provider.current(now: now)
        return ["credentials: \(found.provider.source), \(credentials)" + (credentials.expiration.map { ", valid until \($0.rfc3339)" } ?? ""),
                "region: \(found.region) (\(found.regionOrigin))"]
    }

    /// S3 bucket names: 3-63 of letters, digits, `.`, `-`, `_` (AWS allows fewer; other stores more).
    static func isValidBucket(_ name: String) -> Bool {
        (3...63).contains(name.utf8.count) && name.utf8.allSatisfy { b in
            (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == UInt8(ascii: ".") || b == UInt8(ascii: "-") || b == UInt8(ascii: "_")
        }
    }
}

extension RemoteLocation {
    /// An `s3://` remote's bucket.
    var bucket: String { String(url.dropFirst("s3://".count).prefix { $0 != "/" }) }

    /// An `s3://` remote's key prefix: empty, or ending in `/` (not percent-decoded: the URL holds
    /// it as written).
    var keyPrefix: String { String(url.dropFirst("s3://".count + bucket.utf8.count + 1)) }
}

extension SessionConfig {
    /// The `s3-*` keys of a session with an `s3://` remote.
    var s3: S3Options { S3Options(self) }
}

/// The `s3-*` keys of a session with an `s3://` remote, read from the values the parser checked.
struct S3Options: Sendable, Equatable {
    /// `scheme://host[:port]` of an S3-compatible store; nil: AWS (`https://s3.REGION.amazonaws.com`).
    var endpoint: String?
    /// `s3-region`; nil: the region of the AWS profile in use, else `defaultRegion`.
    var region: String?
    /// Path-style addressing (`endpoint/BUCKET/KEY`) rather than virtual-hosted (`BUCKET.host/KEY`);
    /// nil: path-style when an endpoint is set.
    var pathStyle: Bool?
    /// An AWS shared-credentials file; nil: the AWS credential chain (environment, ~/.aws, web
    /// identity, container, EC2 instance metadata).
    var credentials: String?
    /// `s3-profile`; nil: `AWS_PROFILE`, else `default`.
    var profile: String?

    init(_ session: SessionConfig) {
        let o = session.remoteOptions
        endpoint = o["s3-endpoint"]
        region = o["s3-region"]
        pathStyle = o["s3-path-style"].map { $0 == "yes" }
        credentials = o["s3-credentials"]
        profile = o["s3-profile"]
    }

    /// The region when neither the config nor an AWS profile names one.
    static let defaultRegion = "us-east-1"

    /// Whether requests name the bucket in the path.
    var usesPathStyle: Bool { pathStyle ?? (endpoint != nil) }

    /// The endpoint requests go to, in `region` (the one in force).
    func effectiveEndpoint(region: String) -> String { endpoint ?? "https://s3.\(region).amazonaws.com" }
}

/// `s3-endpoint` and `s3-region` values.
enum S3Endpoint {
    /// `http(s)://host[:port]`, without a path, query, fragment or credentials; returned without a
    /// trailing slash.
    static func parse(_ text: String) throws(ConfigProblem) -> String {
        let lower = text.lowercased()
        guard let scheme = ["http", "https"].first(where: { lower.hasPrefix($0 + "://") }) else {
            throw ConfigProblem("expected the store's http:// or https:// address, like http://10.0.0.5:8333")
        }
        let rest = text.dropFirst(scheme.count + 3)
        let authority = rest.prefix { $0 != "/" }
        // Never quoted: what stands before an @ may be a secret.
        if authority.contains("@") { throw ConfigProblem("an endpoint carries no credentials; they come from s3-credentials or the AWS chain") }
        if authority.isEmpty || authority.contains(where: { $0 == "?" || $0 == "#" || $0.isWhitespace || $0.asciiValue.map { $0 < 0x20 } == true }) {
            throw ConfigProblem("'\(text)' is not a host and port, like http://10.0.0.5:8333 (no query or spaces)")
        }
        guard rest.dropFirst(authority.count).allSatisfy({ $0 == "/" }), rest.dropFirst(authority.count).count <= 1 else {
            throw ConfigProblem("an endpoint is a scheme, host and port, without a path (the bucket goes in remote = s3://BUCKET/)")
        }
        return scheme + "://" + authority
    }

    /// Lowercase letters, digits and `-`, like `us-east-1` (some stores take any word: `garage`).
    static func isValidRegion(_ text: String) -> Bool {
        (1...64).contains(text.utf8.count) && text.utf8.allSatisfy { b in
            (b >= 48 && b <= 57) || (b >= 97 && b <= 122) || (b >= 65 && b <= 90) || b == UInt8(ascii: "-") || b == UInt8(ascii: "_")
        }
    }
}

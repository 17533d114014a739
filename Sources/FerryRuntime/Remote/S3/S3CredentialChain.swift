import Glibc
import Synchronization
import FerryCore

/// Where an S3 session's credentials come from, and its region when the config names none.
///
/// With `s3-credentials` set: that file, the `s3-profile` section (`default`), and nothing else.
/// Without it, the chain the AWS SDKs use, first source that holds credentials wins:
/// 1. the environment: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`);
/// 2. the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`),
///    profile `AWS_PROFILE`, else `s3-profile`, else `default`;
/// 3. the config file (`AWS_CONFIG_FILE`, else `~/.aws/config`), `[profile NAME]`: static keys, or
///    `role_arn` + `web_identity_token_file` (web identity);
/// 4. web identity from `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` (STS AssumeRoleWithWebIdentity);
/// 5. container credentials (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `_FULL_URI`);
/// 6. EC2 instance metadata (IMDSv2), unless `AWS_EC2_METADATA_DISABLED=true`.
/// The profile's `region` is the session's region when it sets no `s3-region`.
///
/// Resolving reads files and the environment only: sources 4-6 fetch over the network when their
/// provider is first asked for credentials (`S3CredentialProvider`). Their providers are kept for
/// the life of the process, so an agent's runs share the temporary credentials and their refresh.
public enum S3CredentialChain {
    /// What the chain found for a session.
    struct Resolution {
        let provider: S3CredentialProvider
        let region: String
        /// Where the region comes from, in words.
        let regionOrigin: String
    }

    /// Empty values count as unset (`AWS_PROFILE=` selects nothing).
    typealias Environment = (String) -> String?

    /// The session's credentials and region: from `s3-credentials` alone when it is set, else from the AWS chain.
    static func resolve(_ session: SessionConfig, environment: @escaping Environment = S3Credentials.environment) throws(FerryError) -> Resolution {
        Secrets.holdingSecrets()
        if let file = session.s3.credentials { return try named(file, session: session) }
        return try Lookup(session.s3, environment: environment).firstSource()
    }

    /// The credentials of the file `s3-credentials` names: that file alone decides.
    private static func named(_ file: String, session: SessionConfig) throws(FerryError) -> Resolution {
        let options = session.s3
        let profile = options.profile ?? "default"
        let bytes = try Secrets.readSecret(file, session: session, key: "s3-credentials", limit: 1 << 20)
        let credentials: S3Credentials
        do { credentials = try S3Credentials.parse(String(decoding: bytes, as: UTF8.self), profile: profile) } catch {
            throw .usage("s3-credentials \(file) of session '\(session.name)': \(error.message)",
                         hint: "the file holds sections like [\(profile)] with aws_access_key_id = and aws_secret_access_key = lines")
        }
        return Resolution(provider: S3CredentialProvider(fixed: credentials, source: "s3-credentials \(file) [\(profile)]"),
                          region: options.region ?? S3Options.defaultRegion, regionOrigin: options.region == nil ? "the default" : "s3-region")
    }

    /// The AWS chain for one session: its profile, the AWS files and its region, read once for every source.
    private struct Lookup {
        /// The environment, an empty value counting as unset.
        let env: Environment
        let options: S3Options
        let profileFromEnvironment: String?
        let profile: String
        let credentialsPath: String
        let configPath: String
        let credentialsFile: AWSProfiles?
        let configFile: AWSProfiles?
        let configSection: String
        let region: String
        let regionOrigin: String

        init(_ options: S3Options, environment: @escaping Environment) throws(FerryError) {
            let env: Environment = { environment($0).flatMap { $0.isEmpty ? nil : $0 } }
            self.env = env
            self.options = options
            let home = env("HOME") ?? homeDirectory()
            profileFromEnvironment = env("AWS_PROFILE")
            profile = profileFromEnvironment ?? options.profile ?? "default"
            credentialsPath = env("AWS_SHARED_CREDENTIALS_FILE") ?? home + "/.aws/credentials"
            configPath = env("AWS_CONFIG_FILE") ?? home + "/.aws/config"
            credentialsFile = try profiles(credentialsPath, .credentials)
            configFile = try profiles(configPath, .config)
            configSection = profile == "default" ? "[default]" : "[profile \(profile)]"
            (region, regionOrigin) = try Lookup.region(options, config: configFile?.profile(profile), section: configSection, path: configPath)
        }

        /// The session's region: `s3-region`, else the profile's `region` in the config file, else the default.
        private static func region(_ options: S3Options, config: [String: String]?, section: String,
                                   path: String) throws(FerryError) -> (String, String) {
            if let explicit = options.region { return (explicit, "s3-region") }
            guard let named = config?["region"], !named.isEmpty else { return (S3Options.defaultRegion, "the default") }
            guard S3Endpoint.isValidRegion(named) else {
                throw problem("the region of \(section) in \(path) is not a region name like us-east-1", hint: "fix region = there, or set s3-region")
            }
            return (named, "region of \(section) in \(path)")
        }

        private func resolved(_ provider: S3CredentialProvider) -> Resolution { Resolution(provider: provider, region: region, regionOrigin: regionOrigin) }

        /// Static keys found in `values` under `names`: both of them, or a refusal naming `source`.
        private func fixed(_ values: [String: String], names: (key: String, secret: String, token: String), source: String) throws(FerryError) -> Resolution {
            do {
                let credentials = try S3Credentials.checked(accessKey: values[names.key], secretKey: values[names.secret], sessionToken: values[names.token], names: names)
                return resolved(S3CredentialProvider(fixed: credentials, source: source))
            } catch {
                throw problem("\(source) \(error.message)", hint: "give both the access key id and the secret access key there, or neither")
            }
        }

        /// The first of the six sources that holds credentials (those that hold none named in the last resort's hint).
        func firstSource() throws(FerryError) -> Resolution {
            let shared = credentialsFile?.profile(profile)
            let config = configFile?.profile(profile)
            var tried: [String] = []

            // 1. The environment.
            let environmentNames = (key: "AWS_ACCESS_KEY_ID", secret: "AWS_SECRET_ACCESS_KEY", token: "AWS_SESSION_TOKEN")
            if env(environmentNames.key) != nil || env(environmentNames.secret) != nil {
                var values: [String: String] = [:]
                for name in [environmentNames.key, environmentNames.secret, environmentNames.token] { values[name] = env(name) }
                return try fixed(values, names: environmentNames, source: "environment")
            }
            tried.append("the environment (AWS_ACCESS_KEY_ID is not set)")
            if shared == nil && config == nil && (profileFromEnvironment != nil || options.profile != nil) {
                let from = profileFromEnvironment != nil ? "AWS_PROFILE" : "s3-profile"
                throw problem("the profile '\(profile)' (\(from)) is neither in \(credentialsPath) nor in \(configPath)",
                              hint: "add [\(profile)] to \(credentialsPath) or \(configSection) to \(configPath), or name a profile they hold")
            }

            // 2. The shared credentials file.
            let keyNames = S3Credentials.fileNames
            if let shared, shared[keyNames.key] != nil || shared[keyNames.secret] != nil {
                return try fixed(shared, names: keyNames, source: "shared credentials file \(credentialsPath) [\(profile)]")
            }
            tried.append(credentialsFile == nil ? "\(credentialsPath) (no such file)" : "\(credentialsPath) (no keys in [\(profile)])")

            // 3. The config file.
            if let config, let found = try fromConfig(config) { return found }
            tried.append(configFile == nil ? "\(configPath) (no such file)" : "\(configPath) (no keys or web identity in \(configSection))")

            // 4. Web identity from the environment.
            if let tokenFile = env("AWS_WEB_IDENTITY_TOKEN_FILE"), let role = env("AWS_ROLE_ARN") {
                return resolved(try webIdentity(role: role, tokenFile: tokenFile, sessionName: env("AWS_ROLE_SESSION_NAME"), region: region,
                                                env: env))
            }
            tried.append("web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN are not both set)")

            // 5. Container credentials.
            if let url = try containerURL(env: env) {
                let tokenFile = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
                let token = env("AWS_CONTAINER_AUTHORIZATION_TOKEN")
                let source = "container credentials \(url)"
                return resolved(kept("container|\(url)|\(tokenFile ?? "")|\(token != nil)", source: source) { () throws(FerryError) -> S3Credentials in
                    try S3CredentialFetch.container(url: url, tokenFile: tokenFile, token: token, source: source)
                })
            }
            tried.append("container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI are not set)")
            return try instanceMetadata(tried: tried)
        }

        /// The config file's profile: static keys, a web identity, nil for neither, a refusal for a way ferry does not take.
        private func fromConfig(_ config: [String: String]) throws(FerryError) -> Resolution? {
            let keyNames = S3Credentials.fileNames
            let source = "config file \(configPath) \(configSection)"
            if config[keyNames.key] != nil || config[keyNames.secret] != nil {
                return try fixed(config, names: keyNames, source: source)
            }
            if let role = config["role_arn"] {
                guard let tokenFile = config["web_identity_token_file"] else {
                    throw problem("\(source) assumes a role from another profile or source (role_arn without web_identity_token_file), which ferry does not do",
                                  hint: "give the profile static keys or a web_identity_token_file, or put the role's credentials in the environment")
                }
                return resolved(try webIdentity(role: role, tokenFile: tokenFile, sessionName: config["role_session_name"], region: region,
                                                env: env))
            }
            if let unsupported = ["credential_process", "sso_session", "sso_start_url"].first(where: { config[$0] != nil }) {
                throw problem("\(source) gets its credentials through \(unsupported), which ferry does not run",
                              hint: "give the profile static keys or a web_identity_token_file, or put the credentials in the environment")
            }
            return nil
        }

        /// 6. EC2 instance metadata, the last resort (none when `AWS_EC2_METADATA_DISABLED=true`); `tried` names the others.
        private func instanceMetadata(tried: [String]) throws(FerryError) -> Resolution {
            if env("AWS_EC2_METADATA_DISABLED")?.lowercased() == "true" {
                throw problem("none found: the session has no s3-credentials, and no source of the AWS chain holds any",
                              hint: hint(tried + ["EC2 instance metadata (AWS_EC2_METADATA_DISABLED=true)"]))
            }
            var named = env("AWS_EC2_METADATA_SERVICE_ENDPOINT") ?? "http://169.254.169.254"
            while named.hasSuffix("/") { named.removeLast() }
            let endpoint = named
            guard endpoint.lowercased().hasPrefix("http://") || endpoint.lowercased().hasPrefix("https://") else {
                throw problem("AWS_EC2_METADATA_SERVICE_ENDPOINT is not an http:// or https:// address", hint: "fix it, or unset it for http://169.254.169.254")
            }
            let source = "EC2 instance metadata (IMDSv2) \(endpoint)"
            let lastResort = hint(tried + [source])
            return resolved(kept("imds|\(endpoint)", source: source) { () throws(FerryError) -> S3Credentials in
                do throws(FerryError) { return try S3CredentialFetch.instanceMetadata(endpoint: endpoint, source: source) } catch {
                    // Nothing answers: most often not an EC2 instance, so the other sources are worth naming too.
                    guard case .network = error.cause else { throw error }
                    throw FerryError(error.category, error.message, hint: lastResort, cause: error.cause)
                }
            })
        }
    }

    /// A refusal of the AWS chain: what it found wrong, and the fix.
    private static func problem(_ message: String, hint: String) -> FerryError {
        .usage("S3 credentials: \(message)", hint: hint)
    }

    /// The hint of a session without credentials: every source the chain looked at, and why it had none.
    private static func hint(_ tried: [String]) -> String {
        "ferry looked at, in order: " + tried.joined(separator: "; ")
            + ". Set one of them, or name an AWS credentials file with s3-credentials = (and s3-profile =)"
    }

    /// The profiles of an AWS file, or nil when there is no such file.
    private static func profiles(_ path: String, _ kind: AWSProfiles.Kind) throws(FerryError) -> AWSProfiles? {
        do {
            return AWSProfiles(String(decoding: try FileSystem.readFile(path, limit: 1 << 20), as: UTF8.self), kind: kind)
        } catch {
            if error.cause == .local(errno: ENOENT) || error.cause == .local(errno: ENOTDIR) { return nil }
            throw .usage("S3 credentials: \(error.message)", hint: "fix the file, or point \(kind == .credentials ? "AWS_SHARED_CREDENTIALS_FILE" : "AWS_CONFIG_FILE") elsewhere")
        }
    }

    /// The provider of a web identity: STS's `AssumeRoleWithWebIdentity` with the token in `tokenFile`.
    private static func webIdentity(role: String, tokenFile: String, sessionName: String?, region: String,
                                    env: Environment) throws(FerryError) -> S3CredentialProvider {
        guard role.hasPrefix("arn:"), role.utf8.count <= 2048, role.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw .usage("S3 credentials: the role to assume is not an ARN like arn:aws:iam::123456789012:role/NAME",
                         hint: "fix AWS_ROLE_ARN, or role_arn in the AWS config file")
        }
        let name = sessionName ?? "ferry-\(getpid())"
        guard (2...64).contains(name.utf8.count), name.utf8.allSatisfy({ b in
            (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || "+=,.@_-".utf8.contains(b)
        }) else {
            throw .usage("S3 credentials: the role session name is not 2 to 64 letters, digits or +=,.@_-",
                         hint: "fix AWS_ROLE_SESSION_NAME, or role_session_name in the AWS config file")
        }
        let endpoint: String
        if let named = env("AWS_ENDPOINT_URL_STS") ?? env("AWS_ENDPOINT_URL") {
            do { endpoint = try S3Endpoint.parse(named) } catch {
                throw .usage("S3 credentials: the STS endpoint \(Printable.name(named)): \(error.message)",
                             hint: "fix AWS_ENDPOINT_URL_STS (or AWS_ENDPOINT_URL)")
            }
        } else {
            endpoint = "https://sts.\(region).amazonaws.com"
        }
        let source = "web identity (role \(role)) through STS \(endpoint)"
        return kept("web-identity|\(role)|\(tokenFile)|\(name)|\(endpoint)", source: source) { () throws(FerryError) -> S3Credentials in
            try S3CredentialFetch.webIdentity(role: role, tokenFile: tokenFile, sessionName: name, endpoint: endpoint, source: source)
        }
    }

    /// The container credentials endpoint, or nil when none is set. Over plain HTTP only to the
    /// addresses the AWS SDKs allow (the ECS and EKS agents', loopback): the token goes with it.
    private static func containerURL(env: Environment) throws(FerryError) -> String? {
        if let relative = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            guard relative.hasPrefix("/"), relative.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
                throw .usage("S3 credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is not a path starting with /",
                             hint: "fix or unset it")
            }
            return "http://169.254.170.2" + relative
        }
        guard let full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI") else { return nil }
        let lower = full.lowercased()
        let refuse = FerryError.usage("S3 credentials: AWS_CONTAINER_CREDENTIALS_FULL_URI must be https://, or http:// to a loopback address or the ECS/EKS agent's",
                                      hint: "fix or unset it")
        guard full.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else { throw refuse }
        // The URL is printed as the source's name: a password in it would be printed too.
        let scheme = lower.hasPrefix("https://") ? "https://" : "http://"
        guard lower.hasPrefix(scheme) else { throw refuse }
        let authority = lower.dropFirst(scheme.count).prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard !authority.contains("@") else {
            throw .usage("S3 credentials: AWS_CONTAINER_CREDENTIALS_FULL_URI carries a user name or password",
                         hint: "give the token in AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE instead")
        }
        if scheme == "https://" { return full }
        let host: Substring
        if authority.hasPrefix("[") {
            host = authority.prefix { $0 != "]" } + "]"
        } else {
            host = authority.prefix { $0 != ":" }
        }
        let allowed = host == "localhost" || host == "[::1]" || host == "169.254.170.2" || host == "169.254.170.23" || host == "[fd00:ec2::23]"
            || (host.hasPrefix("127.") && host.split(separator: ".").count == 4 && host.split(separator: ".").allSatisfy { UInt8($0) != nil })
        guard allowed else { throw refuse }
        return full
    }

    /// Providers of temporary credentials, kept for the life of the process by what identifies
    /// their source: each run of an agent signs with the credentials the last one fetched.
    private static let providers = Mutex<[String: S3CredentialProvider]>([:])

    private static func kept(_ key: String, source: String, fetch: @escaping @Sendable () throws(FerryError) -> S3Credentials) -> S3CredentialProvider {
        providers.withLock { table in
            if let known = table[key] { return known }
            let made = S3CredentialProvider(source: source, fetch: fetch)
            table[key] = made
            return made
        }
    }

    /// The user's home directory from the password database, when `HOME` is not set.
    private static func homeDirectory() -> String { StateOwner.homeDirectory(getuid()) ?? "/" }
}

/// `ferry config show`: a config written back as text, with every key the parser knows and the
/// value in force, defaults filled in. The text is itself a config: parsed again it gives the same
/// settings (a test checks that). Keys a section does not take (a push key in a pull session, `s3-*`
/// without an `s3://` remote) are left out; optional keys that are not set are shown commented out.
/// Nothing secret is in a `Config` (URLs may not carry credentials; secrets live in the files the
/// `*-file` and `s3-credentials` keys name, which are never read here).
public enum ConfigText {
    /// What the runtime found for an S3 session's unset keys (the AWS files and environment are
    /// not read here): the credentials' source, and the region in force with where it came from.
    public struct S3Resolution: Sendable {
        public var credentials: String
        public var region: String
        public var regionOrigin: String
        public init(credentials: String, region: String, regionOrigin: String) {
            self.credentials = credentials
            self.region = region
            self.regionOrigin = regionOrigin
        }
    }

    /// `s3`: by session name, what the runtime resolved for it; a session left out is shown with
    /// the defaults as words.
    public static func render(_ config: Config, sessions: [SessionConfig], s3: [String: S3Resolution] = [:]) -> String {
        var out = "[agent]\n"
        let a = config.agent
        func line(_ key: String, _ value: String?, unset: String = "not set") {
            if let value {
                out += "\(key) = \(value)\n"
            } else {
                out += "# \(key) =".padding(toWidth: 28) + "(\(unset))\n"
            }
        }
        for key in ConfigParser.agentKeys {
            switch key {
            case "state": line(key, a.state)
            case "transfers": line(key, String(a.transfers))
            case "stop-timeout": line(key, duration(a.stopTimeout))
            case "metrics": line(key, a.metrics)
            case "metrics-listen": line(key, a.metricsListen?.description)
            case "bwlimit": line(key, a.bwlimit?.description, unset: "no limit")
            case "network-metered": line(key, a.networkMetered.rawValue)
            case "log-level": line(key, a.logLevel.rawValue)
            default: line(key, nil, unset: "not shown")
            }
        }
        for s in sessions {
            out += "\n[session \(s.name)]\n"
            for key in ConfigParser.sessionKeys where applies(key, to: s) {
                switch key {
                case "remote": line(key, s.remote.url)
                case "manifest": line(key, s.manifest)
                case "local": line(key, s.local)
                case "direction": line(key, s.direction.rawValue)
                case "poll": line(key, duration(s.poll))
                case "delete": line(key, yes(s.delete))
                case "max-delete": line(key, s.maxDelete.description)
                case "allow-rollback": line(key, yes(s.allowRollback))
                case "allow-empty": line(key, yes(s.allowEmpty))
                case "max-manifest-size": line(key, size(s.maxManifestSize))
                case "mode-mask": line(key, "0" + String(s.modeMask, radix: 8))
                case "ca-file": line(key, s.caFile, unset: "the system's CAs")
                case "basic-auth-file": line(key, s.basicAuthFile)
                case "bearer-token-file": line(key, s.bearerTokenFile)
                case "connect-timeout": line(key, duration(s.connectTimeout))
                case "min-speed": line(key, size(s.minSpeed))
                case "stall-timeout": line(key, duration(s.stallTimeout))
                case "max-duration": line(key, s.maxDuration.map(duration), unset: "no limit")
                case "retries": line(key, String(s.retries))
                case "retry-delay": line(key, duration(s.retryDelay))
                case "resource-timeout": line(key, duration(s.resourceTimeout))
                case "earliest-begin":
                    switch s.earliestBegin {
                    case nil: line(key, nil, unset: "at once")
                    case .after(let d)?: line(key, duration(d))
                    case .at(let t)?: line(key, t.rfc3339)
                    }
                case "session-transfers": line(key, s.transfers.map(String.init), unset: "within [agent] transfers")
                case "on-file-done": line(key, s.onFileDone?.description)
                case "on-session-done": line(key, s.onSessionDone?.description)
                case "hook-timeout": line(key, duration(s.hookTimeout))
                case "verify-interval": line(key, duration(s.verifyInterval))
                case "discretionary": line(key, yes(s.discretion != nil))
                case "window":
                    line(key, s.discretion.flatMap { $0.windows.isEmpty ? nil : $0.windows.map(\.description).joined(separator: ", ") }, unset: "any time")
                case "require-ac-power": line(key, s.discretion.map { yes($0.requireACPower) })
                case "require-unmetered": line(key, s.discretion.map { yes($0.requireUnmetered) })
                case "max-load": line(key, s.discretion?.maxLoad.map { Units.formatFixed($0, digits: 2) }, unset: "any load")
                case "min-free-space":
                    switch s.discretion?.minFree {
                    case nil: line(key, nil, unset: "any")
                    case .bytes(let b)?: line(key, size(b))
                    case .percent(let p)?: line(key, FreeSpaceLimit.percent(p).description)
                    }
                case "bwlimit": line(key, s.bwlimit?.description, unset: "no limit of its own")
                case "priority": line(key, String(s.priority))
                case "conflict": line(key, s.conflict.rawValue)
                case "verify-uploads": line(key, s.verifyUploads.rawValue)
                case "s3-endpoint":
                    let region = s.s3.region ?? s3[s.name]?.region ?? "REGION"
                    line(key, s.s3.endpoint, unset: "AWS: " + s.s3.effectiveEndpoint(region: region))
                case "s3-region":
                    line(key, s.s3.region, unset: s3[s.name].map { "\($0.region): \($0.regionOrigin)" }
                         ?? "the AWS profile's region, else \(S3Options.defaultRegion)")
                case "s3-path-style": line(key, yes(s.s3.usesPathStyle))
                case "s3-credentials": line(key, s.s3.credentials, unset: "the AWS chain" + (s3[s.name].map { ": " + $0.credentials } ?? ""))
                case "s3-profile": line(key, s.s3.profile, unset: s.s3.credentials == nil ? "AWS_PROFILE, else default" : "default")
                case "upload-part-size": line(key, size(s.uploadPartSize))
                case "trusted-keys": line(key, s.trustedKeys.isEmpty ? nil : s.trustedKeys.map(\.description).joined(separator: " "), unset: "signatures are not required")
                case "require-expiry": line(key, yes(s.requireExpiry))
                case "sign-key": line(key, s.signKey, unset: "unsigned")
                case "expires": line(key, s.expires.map(duration), unset: "never")
                case "object-grace": line(key, duration(s.objectGrace))
                case "remote-layout": line(key, s.remoteLayout.rawValue)
                case "keep-versions": line(key, String(s.keepVersions))
                case "layout": line(key, s.layout.rawValue)
                case "keep-generations": line(key, String(s.keepGenerations))
                case "exclude": line(key, s.filter.excludes.isEmpty ? nil : s.filter.excludes.map(\.text).joined(separator: " "), unset: "nothing")
                case "include": line(key, s.filter.includes.isEmpty ? nil : s.filter.includes.map(\.text).joined(separator: " "), unset: "everything")
                default: line(key, nil, unset: "not shown")
                }
            }
        }
        return out
    }

    /// Whether a session takes `key` at all.
    static func applies(_ key: String, to s: SessionConfig) -> Bool {
        if key == "metadata-grace" { return false }  // the old name of object-grace
        if ConfigParser.s3Keys.contains(key) { return s.remote.scheme == .s3 }
        if key == "upload-part-size" || key == "conflict" { return s.direction == .push }
        if ConfigParser.pushKeys.contains(key) { return s.direction == .push }
        if key == "require-expiry" { return s.direction == .pull && !s.trustedKeys.isEmpty }
        if ConfigParser.pullKeys.contains(key) || key == "trusted-keys" { return s.direction == .pull }
        if ConfigParser.discretionKeys.contains(key) { return s.discretion != nil }
        if ["ca-file", "basic-auth-file", "bearer-token-file"].contains(key) { return s.remote.scheme == .http || s.remote.scheme == .https }
        return true
    }

    static func yes(_ b: Bool) -> String { b ? "yes" : "no" }

    /// A size as the config writes it, exactly: `16M`, `1G`, `1536`.
    static func size(_ b: Int64) -> String {
        if b > 0 && b % (1 << 30) == 0 { return "\(b >> 30)G" }
        if b > 0 && b % (1 << 20) == 0 { return "\(b >> 20)M" }
        if b > 0 && b % 1024 == 0 { return "\(b >> 10)K" }
        return String(b)
    }

    /// A duration as the config writes it, exactly: `15m`, `1h30m`, `7d`, `0.5s`.
    static func duration(_ seconds: Double) -> String {
        guard seconds.rounded() == seconds, seconds >= 1 else { return Units.formatFixed(seconds, digits: 3).trimmingZeros() + "s" }
        var s = Int64(seconds)
        var out = ""
        for (unit, size) in [("d", Int64(86400)), ("h", 3600), ("m", 60), ("s", 1)] where s >= size {
            out += "\(s / size)\(unit)"
            s %= size
        }
        return out
    }
}

extension String {
    func padding(toWidth width: Int) -> String { count >= width ? self + " " : self + String(repeating: " ", count: width - count) }

    /// `0.500` → `0.5`, `2.000` → `2`.
    func trimmingZeros() -> String {
        guard contains(".") else { return self }
        var s = self
        while s.hasSuffix("0") { s.removeLast() }
        if s.hasSuffix(".") { s.removeLast() }
        return s
    }
}

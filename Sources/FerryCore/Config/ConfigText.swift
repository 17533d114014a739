/// `ferry config show`: a config written back as text, with every key the parser knows and the
/// value in force, defaults filled in. The text is itself a config: parsed again it gives the same
/// settings (a test checks that). Keys a section does not take (a push key in a pull session, a
/// key of another backend than the remote's) are left out; optional keys that are not set are shown commented out.
/// Nothing secret is in a `Config` (URLs may not carry credentials; secrets live in the files the
/// `*-file` keys and a backend's secret keys name, which are never read here).
public enum ConfigText {
    /// `resolved`: by session name, then by key, what the runtime found an unset backend key to
    /// mean on this machine (where S3 credentials would come from); a session left out is shown
    /// with the defaults as words. `notes`: by session name, then by key, a comment said under a
    /// key that is set (the key set in force after an in-band rotation).
    public static func render(_ config: Config, sessions: [SessionConfig], resolved: [String: [String: String]] = [:],
                              notes: [String: [String: String]] = [:]) -> String {
        var out = "[agent]\n"
        for key in ConfigParser.agentKeys { out += line(key, agentValue(key, config.agent)) }
        for s in sessions {
            out += "\n[session \(s.name)]\n"
            for key in ConfigParser.sessionKeys where applies(key, to: s) {
                out += line(key, sessionValue(key, s))
                if let note = notes[s.name]?[key] { out += "#   \(note)\n" }
                guard key == "remote" else { continue }
                // The remote's backend's own keys follow it.
                for key in s.remote.backend.keys {
                    out += line(key.name, (s.remoteOptions[key.name] ?? key.inForce(s), resolved[s.name]?[key.name] ?? key.unset(s)))
                }
            }
        }
        return out
    }

    /// A key's line: `key = value`, or commented out with what its absence means.
    private static func line(_ key: String, _ shown: (value: String?, unset: String)) -> String {
        if let value = shown.value { return "\(key) = \(value)\n" }
        return "# \(key) =".padding(toWidth: 28) + "(\(shown.unset))\n"
    }

    private static func shown(_ value: String?, unset: String = "not set") -> (value: String?, unset: String) { (value, unset) }

    /// An `[agent]` key's value in force.
    private static func agentValue(_ key: String, _ a: AgentConfig) -> (value: String?, unset: String) {
        switch key {
        case "state": return shown(a.state)
        case "transfers": return shown(String(a.transfers))
        case "stop-timeout": return shown(duration(a.stopTimeout))
        case "metrics": return shown(a.metrics)
        case "metrics-listen": return shown(a.metricsListen?.description)
        case "bwlimit": return shown(a.bwlimit?.description, unset: "no limit")
        case "budget": return shown(a.budget?.description, unset: "none")
        case "network-metered": return shown(a.networkMetered.rawValue)
        case "log-level": return shown(a.logLevel.rawValue)
        case "machine-id": return shown(a.machineID, unset: "/etc/machine-id")
        default: return shown(nil, unset: "not shown")
        }
    }

    /// A session key's value in force.
    private static func sessionValue(_ key: String, _ s: SessionConfig) -> (value: String?, unset: String) {
        switch key {
        case "remote": return shown(s.remote.url)
        case "manifest": return shown(s.manifest)
        case "local": return shown(s.local)
        case "direction": return shown(s.direction.rawValue)
        case "poll": return shown(duration(s.poll))
        case "delete": return shown(yes(s.delete))
        case "max-delete": return shown(s.maxDelete.description)
        case "allow-rollback": return shown(yes(s.allowRollback))
        case "allow-empty": return shown(yes(s.allowEmpty))
        case "delta": return shown(yes(s.delta))
        case "seed": return shown(s.seeds.isEmpty ? nil : s.seeds.joined(separator: " "), unset: "none")
        case "mirrors": return shown(s.mirrors.isEmpty ? nil : s.mirrors.map(\.url).joined(separator: " "), unset: "none: files come from remote")
        case "report": return shown(s.report?.url, unset: "none: no status report")
        case "report-interval": return shown(duration(s.reportInterval))
        case "max-manifest-size": return shown(size(s.maxManifestSize))
        case "mode-mask": return shown("0" + String(s.modeMask, radix: 8))
        case "ca-file": return shown(s.caFile, unset: "the system's CAs")
        case "basic-auth-file": return shown(s.basicAuthFile)
        case "bearer-token-file": return shown(s.bearerTokenFile)
        case "connect-timeout": return shown(duration(s.connectTimeout))
        case "min-speed": return shown(size(s.minSpeed))
        case "stall-timeout": return shown(duration(s.stallTimeout))
        case "max-duration": return shown(s.maxDuration.map(duration), unset: "no limit")
        case "retries": return shown(String(s.retries))
        case "retry-delay": return shown(duration(s.retryDelay))
        case "resource-timeout": return shown(duration(s.resourceTimeout))
        case "earliest-begin":
            switch s.earliestBegin {
            case nil: return shown(nil, unset: "at once")
            case .after(let d)?: return shown(duration(d))
            case .at(let t)?: return shown(t.rfc3339)
            }
        case "session-transfers": return shown(s.transfers.map(String.init), unset: "within [agent] transfers")
        case "on-file-done": return shown(s.onFileDone?.description)
        case "on-session-done": return shown(s.onSessionDone?.description)
        case "on-switch-check": return shown(s.onSwitchCheck?.description, unset: "none")
        case "hook-timeout": return shown(duration(s.hookTimeout))
        case "verify-interval": return shown(duration(s.verifyInterval))
        case "discretionary": return shown(yes(s.discretion != nil))
        case "window":
            return shown(s.discretion.flatMap { $0.windows.isEmpty ? nil : $0.windows.map(\.description).joined(separator: ", ") }, unset: "any time")
        case "require-ac-power": return shown(s.discretion.map { yes($0.requireACPower) })
        case "require-unmetered": return shown(s.discretion.map { yes($0.requireUnmetered) })
        case "max-load": return shown(s.discretion?.maxLoad.map { Units.formatFixed($0, digits: 2) }, unset: "any load")
        case "min-free-space":
            switch s.discretion?.minFree {
            case nil: return shown(nil, unset: "any")
            case .bytes(let b)?: return shown(size(b))
            case .percent(let p)?: return shown(FreeSpaceLimit.percent(p).description)
            }
        case "bwlimit": return shown(s.bwlimit?.description, unset: "no limit of its own")
        case "priority": return shown(String(s.priority))
        case "budget": return shown(s.budgetExempt ? "exempt" : "counted")
        case "conflict": return shown(s.conflict.rawValue)
        case "verify-uploads": return shown(s.verifyUploads.rawValue)
        case "upload-part-size": return shown(size(s.uploadPartSize))
        case "trusted-keys": return shown(s.trustedKeys.isEmpty ? nil : s.trustedKeys.map(\.description).joined(separator: " "), unset: "signatures are not required")
        case "require-expiry": return shown(yes(s.requireExpiry))
        case "trust-threshold": return shown(String(s.trustThreshold))
        case "keys-dir": return shown(s.keysDirectory, unset: "none: mirrors keep their trusted-keys")
        case "rollout": return shown("\(s.rollout)%")
        case "sign-key": return shown(s.signKeys.isEmpty ? nil : s.signKeys.joined(separator: " "), unset: "unsigned")
        case "expires": return shown(s.expires.map(duration), unset: "never")
        case "object-grace": return shown(duration(s.objectGrace))
        case "remote-layout": return shown(s.remoteLayout.rawValue)
        case "keep-versions": return shown(String(s.keepVersions))
        case "delta-min-size": return shown(s.deltaMinimum.map(size) ?? "off")
        case "layout": return shown(s.layout.rawValue)
        case "keep-generations": return shown(String(s.keepGenerations))
        case "exclude": return shown(s.filter.excludes.isEmpty ? nil : s.filter.excludes.map(\.text).joined(separator: " "), unset: "nothing")
        case "include": return shown(s.filter.includes.isEmpty ? nil : s.filter.includes.map(\.text).joined(separator: " "), unset: "everything")
        default: return shown(nil, unset: "not shown")
        }
    }

    /// Whether a session takes `key` at all.
    static func applies(_ key: String, to s: SessionConfig) -> Bool {
        if key == "metadata-grace" { return false }  // the old name of object-grace
        if key == "upload-part-size" || key == "conflict" { return s.direction == .push }
        if ConfigParser.pushKeys.contains(key) { return s.direction == .push }
        if key == "on-switch-check" { return s.direction == .pull && s.layout == .generations }
        if key == "require-expiry" || key == "trust-threshold" { return s.direction == .pull && !s.trustedKeys.isEmpty }
        if ConfigParser.pullKeys.contains(key) || key == "trusted-keys" { return s.direction == .pull }
        if ConfigParser.discretionKeys.contains(key) { return s.discretion != nil }
        if ConfigKey.transport.contains(key) { return s.remote.backend.transportKeys.contains(key) }
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

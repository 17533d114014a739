/// What ferry.service and ferry-sync.service need from systemd for the sessions of a config, as a
/// drop-in (`ferry config units`). The shipped units name no path of anyone's: under
/// `ProtectSystem=strict` everything is read-only to them but their state directory, and
/// `ProtectHome=yes` hides home directories, so each path a session writes is granted here:
///
/// - a pull's local directory, or with `layout = generations` the directory holding it (the
///   versions live beside it and a symlink replaces it);
/// - a push's `file://` remote (it writes there), and one under a home directory a pull reads;
/// - the metrics file's directory, and a state directory other than the units' own;
/// - under /home, /root or /run/user, the path is bound into an empty home (`ProtectHome=tmpfs`,
///   `BindPaths=`, or `BindReadOnlyPaths=` for a push, which only reads).
///
/// A listed path must exist when the unit starts (or the unit fails with 226/NAMESPACE): one that
/// does not gets a comment with the command that makes it, owned by the services' user.
public enum ServiceDropIn {
    /// The units' own state directory (`StateDirectory=ferry`).
    public static let unitsState = "/var/lib/ferry"
    public static let units = ["ferry.service", "ferry-sync.service"]
    public static let fileName = "ferry-paths.conf"

    /// A path the units need, and whether they write it.
    public struct Grant: Equatable, Sendable {
        public let path: String
        public let writes: Bool
        /// Why, for the comment beside it.
        public let reason: String
    }

    /// The paths the config's sessions need, each once: a path under another one listed with the
    /// same access is covered by it.
    public static func grants(for config: Config) -> [Grant] {
        var all: [Grant] = []
        if config.agent.state != unitsState {
            all.append(Grant(path: config.agent.state, writes: true, reason: "[agent] state"))
        }
        if let metrics = config.agent.metrics {
            all.append(Grant(path: ConfigParser.directoryName(of: metrics), writes: true, reason: "[agent] metrics"))
        }
        for s in config.sessions {
            // A remote that is a directory here (file://): a push writes it, a pull reads it.
            if let remote = s.remote.localDirectory.map(trimmedSlash) {
                if s.direction == .push {
                    all.append(Grant(path: remote, writes: true, reason: "session \(s.name) publishes into it (its file:// remote)"))
                } else if isUnderHome(remote) {
                    all.append(Grant(path: remote, writes: false, reason: "session \(s.name) mirrors it (its file:// remote)"))
                }
            }
            switch (s.direction, s.layout) {
            case (.push, _):
                // Read-only everywhere already, but for the hidden home directories.
                if isUnderHome(s.local) { all.append(Grant(path: s.local, writes: false, reason: "session \(s.name) publishes it")) }
            case (.pull, .generations):
                all.append(Grant(path: ConfigParser.directoryName(of: s.local), writes: true,
                                 reason: "session \(s.name): layout = generations keeps its versions beside \(escaped(s.local))"))
            case (.pull, .inPlace):
                all.append(Grant(path: s.local, writes: true, reason: "session \(s.name) mirrors into it"))
            }
        }
        var out: [Grant] = []
        for g in all {
            if all.contains(where: { $0.path != g.path && contains($0.path, g.path) && ($0.writes || !g.writes) }) { continue }
            if let i = out.firstIndex(where: { $0.path == g.path }) {
                if g.writes && !out[i].writes { out[i] = g }
                continue
            }
            out.append(g)
        }
        return out
    }

    /// The drop-in's text. `exists` says whether a path is there now (checked by the caller).
    public static func text(for config: Config, exists: (String) -> Bool) -> String {
        let grants = grants(for: config)
        let dirs = units.map { "/etc/systemd/system/\($0).d" }
        var out = """
            # Paths that \(units.joined(separator: " and ")) need for the sessions of \(config.path),
            # made by `ferry config units`. Install it for both units, then restart the agent:
            #   mkdir -p \(dirs.joined(separator: " "))
            #   ferry config units | tee \(dirs.map { "\($0)/\(fileName)" }.joined(separator: " ")) >/dev/null
            #   systemctl daemon-reload && systemctl restart ferry.service
            # Run it again whenever a session's local directory changes (a reload does not add paths).
            # A hook that writes elsewhere needs that path here too.

            """
        out += "[Service]\n"
        if grants.isEmpty {
            out += "# No session writes outside the units' own state directory: nothing to add.\n"
            return out
        }
        if grants.contains(where: { isUnderHome($0.path) }) {
            out += "# Home directories stay hidden but for the paths bound below.\nProtectHome=tmpfs\n"
        }
        for g in grants {
            out += "# \(g.reason)\n"
            if contains("/tmp", g.path) || contains("/var/tmp", g.path) {
                out += "# the units' /tmp and /var/tmp are their own (PrivateTmp=yes): this is not the directory other programs see\n"
            }
            if !exists(g.path) {
                out += "# it does not exist yet: make it before the unit starts, e.g. install -d -o ferry -g ferry \(shellQuoted(g.path))\n"
            }
            let key = isUnderHome(g.path) ? (g.writes ? "BindPaths" : "BindReadOnlyPaths") : "ReadWritePaths"
            out += "\(key)=\(escaped(g.path))\n"
        }
        return out
    }

    /// `/srv/out/` as `/srv/out`: one spelling per directory, as the settings list them.
    static func trimmedSlash(_ path: String) -> String {
        var p = path
        while p.count > 1 && p.hasSuffix("/") { p.removeLast() }
        return p
    }

    static func isUnderHome(_ path: String) -> Bool {
        ["/home", "/root", "/run/user"].contains { contains($0, path) }
    }

    /// Whether `inner` is `outer` or lies under it.
    static func contains(_ outer: String, _ inner: String) -> Bool {
        inner == outer || inner.hasPrefix(outer.hasSuffix("/") ? outer : outer + "/")
    }

    /// A path as a shell command takes it, for the comments (control and invisible characters
    /// shown as C escapes, as the setting below has them).
    static func shellQuoted(_ path: String) -> String {
        if path.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f || Printable.isHidden($0.value) }) { return escaped(path) }
        if path.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7f }) && !path.contains(where: { "'\"\\$`;&|<>()*?[]{}~#!".contains($0) }) { return path }
        return "'" + path.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'"
    }

    /// A path as a unit file takes it: systemd's specifiers (`%`) doubled; spaces, quotes, control
    /// bytes and backslashes as C escapes (the settings split on spaces and take quotes as quoting,
    /// so a raw `'` or `"` made systemd ignore the line); invisible and direction-changing
    /// characters (a U+202E would show the path reversed) as `\u` escapes, which systemd reads back.
    static func escaped(_ path: String) -> String {
        let hex = Array("0123456789abcdef")
        func digits(_ v: UInt32, _ n: Int) -> String { String((0..<n).reversed().map { hex[Int((v >> UInt32(4 * $0)) & 15)] }) }
        var out = ""
        for scalar in path.unicodeScalars {
            let v = scalar.value
            switch v {
            case 0x25: out += "%%"
            case 0x5c: out += "\\\\"
            case 0...0x20, 0x22, 0x27, 0x7f: out += "\\x" + digits(v, 2)
            case _ where Printable.isHidden(v): out += v > 0xFFFF ? "\\U" + digits(v, 8) : "\\u" + digits(v, 4)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

import Glibc
import FerryCore

/// `sftp://[USER@]HOST[:PORT]/PATH/`: a directory on an SSH server, over SFTP. The login is by key
/// only (`sftp-key`; no password ever sits in a config), and the server's host key is checked
/// against `sftp-known-hosts` before anything is sent. A path starting `/~/` is under the login
/// directory. The user defaults to the one ferry runs as, as with ssh.
enum SFTPBackend: Backend {
    static let description = BackendDescription(
        name: "SFTP", schemes: ["sftp"], example: "sftp://USER@HOST[:PORT]/PATH/", called: "an sftp:// remote",
        keys: [
            ConfigKey("sftp-key", .secret, help: "the private key to log in with (OpenSSH format, without a passphrase); required",
                      unset: { _ in "none: required" }),
            ConfigKey("sftp-known-hosts", .path, help: "the known_hosts file the server's host key must be in; unset: ~/.ssh/known_hosts",
                      unset: { _ in SFTPBackend.defaultKnownHosts() }),
        ],
        transportKeys: [], credentialSources: ["sftp-key (a private key file)"],
        abilities: [.rangedReads],
        checkAddress: { rest throws(ConfigProblem) in _ = try SFTPAddress(String(rest)) },
        finish: { session throws(ConfigProblem) in
            if session.remoteOptions["sftp-key"] == nil {
                throw ConfigProblem("an sftp:// remote needs sftp-key = FILE (the private key ferry logs in with)", key: "sftp-key",
                                    hint: "make one with ssh-keygen -t ed25519 -N '' -f FILE and add FILE.pub to the server's authorized_keys")
            }
            if session.manifest.contains("://") {
                throw ConfigProblem("an sftp:// remote's manifest is a file under its directory, named relative to it (like manifest.json)", key: "manifest")
            }
        })

    static func open(_ session: SessionConfig, clock: any Clock, stop: StopCondition?,
                     meter: FirstBytes.Meter?) throws(FerryError) -> Remote {
        let address: SFTPAddress
        do { address = try SFTPAddress(String(session.remote.url.dropFirst("sftp://".count))) } catch {
            throw FerryError(.usage, error.message)
        }
        let endpoint = SSHEndpoint(host: address.host, port: address.port, user: address.user ?? currentUser(),
                                   key: session.remoteOptions["sftp-key"] ?? "", knownHosts: session.remoteOptions["sftp-known-hosts"] ?? defaultKnownHosts())
        try checkKeyFile(endpoint.key)
        for (file, key) in [(endpoint.key, "sftp-key"), (endpoint.knownHosts, "sftp-known-hosts")] where access(file, R_OK) != 0 {
            throw FerryError(.usage, "cannot read \(Printable.name(file)) (\(key)): \(FileSystem.errorText())",
                             hint: key == "sftp-key" ? "point sftp-key at the private key ferry logs in with, readable by the user ferry runs as"
                                                     : "point sftp-known-hosts at a file holding the server's host key (ssh-keyscan prints it; check its fingerprint)")
        }
        return SFTPRemote(base: session.remote, endpoint: endpoint, directory: address.path, connections: SSHConnections(keep: 8),
                          clock: clock, stop: stop, connectTimeout: session.connectTimeout, stallTimeout: session.stallTimeout)
    }

    /// The private key is a regular file of at most 64 KiB (a FIFO or a device would hang or flood
    /// the read libssh2 makes of it) that no one else may read, as OpenSSH requires of a key: one
    /// owned by the user ferry runs as with any group or other bit, or one anyone may read.
    static func checkKeyFile(_ file: String) throws(FerryError) {
        var st = stat()
        guard stat(file, &st) == 0 else {
            throw FerryError(.usage, "cannot read \(Printable.name(file)) (sftp-key): \(FileSystem.errorText())")
        }
        let shown = Printable.name(file)
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            throw FerryError(.usage, "\(shown) (sftp-key) is not a regular file",
                             hint: "point sftp-key at the private key file itself, like one ssh-keygen -t ed25519 writes")
        }
        guard st.st_size <= 64 << 10 else {
            throw FerryError(.usage, "\(shown) (sftp-key) is \(st.st_size) bytes, more than a private key's 64 KiB",
                             hint: "point sftp-key at the private key file, like one ssh-keygen -t ed25519 writes")
        }
        let mode = st.st_mode & 0o777
        if (st.st_uid == geteuid() && mode & 0o077 != 0) || mode & 0o004 != 0 {
            throw FerryError(.usage, "\(shown) (sftp-key) may be read by others (mode 0\(String(mode, radix: 8))): OpenSSH refuses such a key, and so does ferry",
                             hint: "run: chmod 600 \(file)")
        }
        if encrypted(try FileSystem.readFile(file, limit: 64 << 10)) {
            throw FerryError(.usage, "\(shown) (sftp-key) is protected by a passphrase, which ferry cannot type: it logs in with a key that has none",
                             hint: "make a key for ferry without one (ssh-keygen -t ed25519 -N '' -f FILE) and add its .pub to the server's authorized_keys")
        }
    }

    /// Whether a private key is encrypted with a passphrase: an OpenSSH key whose cipher is not
    /// `none`, or a PEM key that says it is encrypted.
    static func encrypted(_ key: [UInt8]) -> Bool {
        let lines = String(decoding: key, as: UTF8.self).split(whereSeparator: \.isNewline).map { String($0).trimmingSpaces() }
        if lines.contains("Proc-Type: 4,ENCRYPTED") || lines.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") { return true }
        guard let b = lines.firstIndex(of: "-----BEGIN OPENSSH PRIVATE KEY-----"),
              let e = lines[b...].firstIndex(of: "-----END OPENSSH PRIVATE KEY-----"),
              let body = Base64.decode(lines[(b + 1)..<e].joined()) else { return false }
        // "openssh-key-v1\0", then the cipher's name as an SSH string (a 32-bit length first).
        let magic: [UInt8] = Array("openssh-key-v1".utf8) + [0]
        guard body.count >= magic.count + 4, Array(body[0..<magic.count]) == magic else { return false }
        let at = magic.count
        var length = 0
        for k in 0..<4 { length = length << 8 | Int(body[at + k]) }
        guard length <= 64, body.count >= at + 4 + length else { return false }
        let cipher: [UInt8] = Array(body[(at + 4)..<(at + 4 + length)])
        return cipher != Array("none".utf8)
    }


    static func describe(_ session: SessionConfig) -> [String: String] {
        ["sftp-known-hosts": defaultKnownHosts()]
    }

    /// `~/.ssh/known_hosts` of the user ferry runs as.
    static func defaultKnownHosts() -> String {
        let home = getpwuid(geteuid()).flatMap { $0.pointee.pw_dir.map { String(cString: $0) } } ?? "/root"
        return home + "/.ssh/known_hosts"
    }

    static func currentUser() -> String {
        getpwuid(geteuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "root"
    }
}

/// What an `sftp://` URL says after the scheme: `[USER@]HOST[:PORT]/PATH/`.
struct SFTPAddress {
    let user: String?
    /// A name or address; an IPv6 address is written in brackets and kept without them.
    let host: String
    let port: Int
    /// The directory on the server, percent-decoded, ending in `/`; relative to the login
    /// directory (empty for it) when the URL's path starts `/~/`.
    let path: String

    init(_ rest: String) throws(ConfigProblem) {
        guard let slash = rest.firstIndex(of: "/") else {
            throw ConfigProblem("an sftp:// URL needs a path after the host, like sftp://user@host/srv/content/")
        }
        var authority = String(rest[..<slash])
        let rawPath = String(rest[slash...])
        if let at = authority.lastIndex(of: "@") {
            let user = String(authority[..<at])
            // Never quoted: what stands before an @ may be a password.
            if user.contains(":") { throw ConfigProblem("an sftp:// URL carries no password; ferry logs in with sftp-key") }
            guard !user.isEmpty, let decoded = user.removingPercentEncoding(), decoded.allSatisfy({ $0.isLetter || $0.isNumber || "._-".contains($0) }) else {
                throw ConfigProblem("the user in an sftp:// URL must be a login name (letters, digits, '.', '_', '-')")
            }
            self.user = decoded
            authority = String(authority[authority.index(after: at)...])
        } else {
            user = nil
        }
        var port = 22
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw ConfigProblem("'\(authority)' opens an IPv6 address with '[' but never closes it") }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = Int(after.dropFirst()), (1...65535).contains(p) else { throw ConfigProblem("'\(after)' is not a port") }
                port = p
            }
        } else {
            let parts = authority.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else { throw ConfigProblem("'\(authority)' is not HOST[:PORT]; write an IPv6 address in brackets") }
            host = String(parts[0])
            if parts.count == 2 {
                guard let p = Int(parts[1]), (1...65535).contains(p) else { throw ConfigProblem("'\(parts[1])' is not a port (1-65535)") }
                port = p
            }
        }
        guard !host.isEmpty, host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || ".-:".contains($0)) }) else {
            throw ConfigProblem("'\(host)' is not a host name or address")
        }
        self.port = port
        guard let decoded = rawPath.removingPercentEncoding(), !decoded.contains("\0") else {
            throw ConfigProblem("the path of an sftp:// URL is not valid percent-encoded text")
        }
        if decoded.split(separator: "/").contains(where: { $0 == ".." || $0 == "." }) || decoded.contains("//") {
            throw ConfigProblem("the path of an sftp:// URL may not hold '.', '..' or an empty segment")
        }
        var path = decoded.hasSuffix("/") ? decoded : decoded + "/"
        if path == "/~/" { path = "" } else if path.hasPrefix("/~/") { path = String(path.dropFirst(3)) }
        self.path = path
    }
}

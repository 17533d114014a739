import CCurl
import CSSH2
import Glibc
import FerryCore

/// The server's host key, checked against `sftp-known-hosts` before anything is sent under the
/// key: a key the file holds for the host (`[host]:port` for a port other than 22) lets the
/// connection go on; another key, none, or a file that cannot be read each stop it with an error
/// of its own. The file is only read, never written (no trust on first use).
enum HostKeys {
    static func check(_ session: OpaquePointer, _ endpoint: SSHEndpoint) throws(FerryError) {
        var length = 0
        var type: Int32 = 0
        guard let key = libssh2_session_hostkey(session, &length, &type) else {
            throw SFTPErrors.lost(endpoint, "the server sent no host key")
        }
        let fingerprint = Self.fingerprint(session)
        guard let hosts = libssh2_knownhost_init(session) else { throw SFTPErrors.lost(endpoint, "cannot check the host key (out of memory)") }
        defer { libssh2_knownhost_free(hosts) }
        if libssh2_knownhost_readfile(hosts, endpoint.knownHosts, LIBSSH2_KNOWNHOST_FILE_OPENSSH) < 0 {
            throw FerryError(.usage, "cannot read the known hosts \(Printable.name(endpoint.knownHosts)) (sftp-known-hosts): libssh2 could not parse it",
                             hint: "it must be in OpenSSH's known_hosts format; point sftp-known-hosts at a file that holds the server's key")
        }
        let keyType: Int32 = switch type {
        case LIBSSH2_HOSTKEY_TYPE_RSA: LIBSSH2_KNOWNHOST_KEY_SSHRSA
        case LIBSSH2_HOSTKEY_TYPE_DSS: LIBSSH2_KNOWNHOST_KEY_SSHDSS
        case LIBSSH2_HOSTKEY_TYPE_ECDSA_256: LIBSSH2_KNOWNHOST_KEY_ECDSA_256
        case LIBSSH2_HOSTKEY_TYPE_ECDSA_384: LIBSSH2_KNOWNHOST_KEY_ECDSA_384
        case LIBSSH2_HOSTKEY_TYPE_ECDSA_521: LIBSSH2_KNOWNHOST_KEY_ECDSA_521
        case LIBSSH2_HOSTKEY_TYPE_ED25519: LIBSSH2_KNOWNHOST_KEY_ED25519
        default: LIBSSH2_KNOWNHOST_KEY_UNKNOWN
        }
        let verdict = libssh2_knownhost_checkp(hosts, endpoint.host, Int32(endpoint.port), key, length,
                                               LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | keyType, nil)
        let file = Printable.name(endpoint.knownHosts)
        let name = endpoint.port == 22 ? endpoint.host : "[\(endpoint.host)]:\(endpoint.port)"
        switch verdict {
        case LIBSSH2_KNOWNHOST_CHECK_MATCH:
            return
        case LIBSSH2_KNOWNHOST_CHECK_MISMATCH:
            throw FerryError(.remote, "the host key of \(endpoint.shown) (\(fingerprint)) is not the one \(file) holds for \(name): refused, nothing was sent",
                             hint: "the server's key changed, or this is not the server you meant; find out which before you replace the line in \(file)",
                             cause: .local(errno: EPERM))
        case LIBSSH2_KNOWNHOST_CHECK_NOTFOUND:
            throw FerryError(.remote, "\(file) holds no key of this type for \(name); the server offered \(fingerprint): refused, nothing was sent",
                             hint: "check the fingerprint with the server's operator, then add it: ssh-keyscan -p \(endpoint.port) \(endpoint.host) >> \(file)",
                             cause: .local(errno: EPERM))
        default:
            throw SFTPErrors.lost(endpoint, "cannot check the host key against \(file)")
        }
    }

    /// Before the handshake: asks the server for a host key of a type the known hosts hold for
    /// it (as ssh does), so a server with several host keys shows the one the file knows. Hashed
    /// lines name no host and are not looked at; without a plain line for the host, libssh2's own
    /// order stands.
    static func prefer(_ session: OpaquePointer, _ endpoint: SSHEndpoint) {
        guard let hosts = libssh2_knownhost_init(session) else { return }
        defer { libssh2_knownhost_free(hosts) }
        guard libssh2_knownhost_readfile(hosts, endpoint.knownHosts, LIBSSH2_KNOWNHOST_FILE_OPENSSH) > 0 else { return }
        let names: Set<String> = endpoint.port == 22 ? [endpoint.host] : ["[\(endpoint.host)]:\(endpoint.port)", endpoint.host]
        var methods: [String] = []
        var previous: UnsafeMutablePointer<libssh2_knownhost>?
        var entry: UnsafeMutablePointer<libssh2_knownhost>?
        while libssh2_knownhost_get(hosts, &entry, previous) == 0, let current = entry {
            previous = current
            guard let name = current.pointee.name.map({ String(cString: $0) }),
                  name.split(separator: ",").contains(where: { names.contains(String($0)) }) else { continue }
            let named: [String] = switch current.pointee.typemask & LIBSSH2_KNOWNHOST_KEY_MASK {
            case LIBSSH2_KNOWNHOST_KEY_ED25519: ["ssh-ed25519"]
            case LIBSSH2_KNOWNHOST_KEY_ECDSA_256: ["ecdsa-sha2-nistp256"]
            case LIBSSH2_KNOWNHOST_KEY_ECDSA_384: ["ecdsa-sha2-nistp384"]
            case LIBSSH2_KNOWNHOST_KEY_ECDSA_521: ["ecdsa-sha2-nistp521"]
            case LIBSSH2_KNOWNHOST_KEY_SSHRSA: ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]
            default: []
            }
            for method in named where !methods.contains(method) { methods.append(method) }
        }
        if !methods.isEmpty { _ = libssh2_session_method_pref(session, LIBSSH2_METHOD_HOSTKEY, methods.joined(separator: ",")) }
    }

    /// OpenSSH's form: `SHA256:` and the unpadded base64 of the key's hash.
    static func fingerprint(_ session: OpaquePointer) -> String {
        guard let hash = libssh2_hostkey_hash(session, LIBSSH2_HOSTKEY_HASH_SHA256) else { return "a key" }
        let bytes = [UInt8](UnsafeRawBufferPointer(start: hash, count: 32))
        return "SHA256:" + String(Base64.encode(bytes).prefix { $0 != "=" })
    }
}

/// What goes wrong over SFTP, as `FerryError`s that name the server and the next step. Causes:
/// a connection that failed or broke is a network failure (retried, `connectivity` when nothing
/// answered); an SFTP status is the server's errno under another name (OpenSSH maps ENOENT to
/// NO_SUCH_FILE, EACCES to PERMISSION_DENIED), so it is a `local` cause on the remote's side,
/// never retried, as a `file://` remote's are.
enum SFTPErrors {
    static func connect(_ endpoint: SSHEndpoint, errno code: Int32) -> FerryError {
        FerryError(.remote, "cannot connect to \(endpoint.shown): \(FileSystem.errorText(code))",
                   hint: "check the host and port in 'remote =' and that sshd runs there",
                   cause: .network(curlCode: Int32(CURLE_COULDNT_CONNECT.rawValue)))
    }

    static func login(_ endpoint: SSHEndpoint, libssh2 text: String) -> FerryError {
        FerryError(.remote, "\(endpoint.shown) refused the key \(Printable.name(endpoint.key)) (sftp-key): \(text)",
                   hint: "add the key's public half to ~\(endpoint.user)/.ssh/authorized_keys on the server; a key with a passphrase cannot be used",
                   cause: .local(errno: EACCES))
    }

    static func lost(_ endpoint: SSHEndpoint, _ what: String) -> FerryError {
        FerryError(.remote, "SFTP connection to \(endpoint.shown) failed: \(what)", hint: "the next run tries again",
                   cause: .network(curlCode: Int32(CURLE_RECV_ERROR.rawValue)))
    }

    static func timedOut(_ endpoint: SSHEndpoint, _ what: String) -> FerryError {
        FerryError(.remote, "stalled: \(endpoint.shown) did not answer in time (\(what))", hint: "the next run tries again",
                   cause: .network(curlCode: Int32(CURLE_OPERATION_TIMEDOUT.rawValue)))
    }

    static func malformed(_ endpoint: SSHEndpoint, _ problem: SFTP.Malformed) -> FerryError {
        FerryError(.remote, "\(endpoint.shown) sent what is not SFTP: \(problem.what); the connection was closed",
                   hint: "check that 'remote =' names an OpenSSH (or compatible) SFTP server", cause: .unusable)
    }

    /// An SFTP status other than OK for `what` on `path`.
    static func status(_ endpoint: SSHEndpoint, _ status: SFTP.Status?, code: UInt32, message: String, _ what: String, _ path: String) -> FerryError {
        let text = message.isEmpty ? (status.map { "\($0)" } ?? "status \(code)") : message
        let errno: Int32 = switch status {
        case .noSuchFile: ENOENT
        case .permissionDenied: EACCES
        case .unsupported: EOPNOTSUPP
        default: EIO
        }
        return FerryError(.remote, "cannot \(what) \(Printable.name(path)) on \(endpoint.shown): \(text)",
                          hint: status == .noSuchFile ? "check 'remote =' and that the file was published" : nil, cause: .local(errno: errno))
    }

    static func notAFile(_ endpoint: SSHEndpoint, _ path: String, _ attributes: SFTP.Attributes, _ role: String) -> FerryError {
        let what = attributes.isSymlink ? "a symlink" : attributes.isDirectory ? "a directory" : "not a regular file"
        return FerryError(.remote, "\(Printable.name(path)) on \(endpoint.shown) is \(what): refused \(role) (ferry follows no symlink on a remote)",
                          hint: "publish a regular file at that name", cause: .local(errno: attributes.isSymlink ? ELOOP : EINVAL))
    }

    static func notADirectory(_ endpoint: SSHEndpoint, _ path: String, _ attributes: SFTP.Attributes) -> FerryError {
        let what = attributes.isSymlink ? "a symlink" : "not a directory"
        return FerryError(.remote, "\(Printable.name(path)) on \(endpoint.shown) is \(what): refused as a directory of the remote (ferry follows no symlink on a remote)",
                          hint: "make it a directory, or move what is there out of the way", cause: .local(errno: attributes.isSymlink ? ELOOP : ENOTDIR))
    }

    static func noAtomicRename(_ endpoint: SSHEndpoint) -> FerryError {
        FerryError(.remote, "the SFTP server of \(endpoint.shown) lacks posix-rename@openssh.com, the atomic replace ferry publishes with: nothing was sent",
                   hint: "push to an OpenSSH server (its sftp-server has it); plain SFTP cannot replace a file without a moment where it is missing",
                   cause: .local(errno: EOPNOTSUPP))
    }

    static func dribbles(_ endpoint: SSHEndpoint, _ path: String) -> FerryError {
        FerryError(.remote, "\(endpoint.shown) answers reads of \(Printable.name(path)) a little at a time, over and over: refused",
                   hint: "check that 'remote =' names an OpenSSH (or compatible) SFTP server", cause: .unusable)
    }

    static func tooMuch(_ endpoint: SSHEndpoint, _ path: String) -> FerryError {
        FerryError(.remote, "\(endpoint.shown) sent an empty answer, or more bytes than were asked, for \(Printable.name(path)): refused",
                   hint: "check that 'remote =' names an OpenSSH (or compatible) SFTP server", cause: .unusable)
    }
}

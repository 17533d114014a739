import Foundation

/// A real OpenSSH sshd (Debian's openssh-server, which scripts/setup.sh installs) on 127.0.0.1,
/// serving SFTP (`internal-sftp`) with a host key of its own. It lets in one user, the one the
/// tests run as (an unprivileged sshd can log in no one else), with one client key of its own:
/// no password, no PAM. `knownHosts` holds its host key for its address and port, nothing else;
/// `otherKnownHosts` another key for the same address, as a server that is not the expected one
/// would present. SFTP paths are the server's absolute paths, so `url` ends in `root`.
/// Everything lives under `directory`; stopped at the end of its test.
final class SSHServer {
    let directory: String
    /// The served tree.
    let root: String
    private(set) var port: UInt16 = 0
    let user: String
    /// The private key the server accepts (OpenSSH format, no passphrase).
    let clientKey: String
    let knownHosts: String
    let otherKnownHosts: String
    private var process: Child?

    static let binary = "/usr/sbin/sshd"

    /// `sftpSubsystem`: a command sshd runs as the sftp subsystem in place of its own (a hostile
    /// server of the tests', `scripts/sftpfaults.py`).
    init(sftpSubsystem: String? = nil) throws {
        directory = Harness.temporaryDirectory("sshd")
        root = directory + "/root"
        clientKey = directory + "/client_key"
        knownHosts = directory + "/known_hosts"
        otherKnownHosts = directory + "/other_known_hosts"
        guard let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name else { throw TestFailure("no user name for uid \(geteuid())") }
        user = String(cString: name)
        do {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            for (file, comment) in [("host_key", "ferry-test-host"), ("other_host_key", "ferry-test-other-host"), ("client_key", "ferry-test-client")] {
                let run = runProcess("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", directory + "/" + file])
                guard run.exitCode == 0 else { throw TestFailure("ssh-keygen failed (run scripts/setup.sh): \(run.output)") }
            }
            try String(contentsOfFile: clientKey + ".pub", encoding: .utf8).writeReplacing(directory + "/authorized_keys")
            try start(sftpSubsystem: sftpSubsystem)
        } catch {
            stop()
            throw error
        }
    }

    /// `sftp://USER@127.0.0.1:PORT/…/root/`.
    var url: String { "sftp://\(user)@127.0.0.1:\(port)\(root)/" }

    /// OpenSSH's known_hosts form for a port other than 22: `[127.0.0.1]:PORT TYPE KEY`.
    private func knownHostsLine(_ publicKey: String) throws -> String {
        let fields = try String(contentsOfFile: publicKey, encoding: .utf8).split(separator: " ")
        guard fields.count >= 2 else { throw TestFailure("unexpected public key in \(publicKey)") }
        return "[127.0.0.1]:\(port) \(fields[0]) \(fields[1])\n"
    }

    /// Writes the configuration and known hosts for the port it is given and starts sshd there
    /// (again on another port when another program took that one).
    private func start(sftpSubsystem: String?) throws {
        process = try startListening("sshd", ports: 1) { ports in
            port = ports[0]
            try knownHostsLine(directory + "/host_key.pub").writeReplacing(knownHosts)
            try knownHostsLine(directory + "/other_host_key.pub").writeReplacing(otherKnownHosts)
            // Run as root, sshd insists on its privilege separation directory, which only the
            // package's service would otherwise make.
            if geteuid() == 0 { mkdir("/run/sshd", 0o755) }
            // StrictModes off: the keys sit in a test directory whose parents sshd would judge.
            // MaxStartups up from 10: a test that kills its client over and over leaves
            // unauthenticated connections behind, and sshd would start dropping new ones.
            try """
                ListenAddress 127.0.0.1:\(ports[0])
                HostKey \(directory)/host_key
                PidFile \(directory)/sshd.pid
                AuthorizedKeysFile \(directory)/authorized_keys
                AllowUsers \(user)
                PermitRootLogin prohibit-password
                PubkeyAuthentication yes
                PasswordAuthentication no
                KbdInteractiveAuthentication no
                UsePAM no
                StrictModes no
                MaxStartups 100
                Subsystem sftp \(sftpSubsystem ?? "internal-sftp")
                LogLevel VERBOSE

                """.writeReplacing(directory + "/sshd_config")
            // sshd re-executes itself, so it must be named by its absolute path; -D -e: foreground, log on stderr.
            return (try Child(Self.binary, ["-D", "-e", "-f", directory + "/sshd_config"], stderr: directory + "/sshd.log"), [directory + "/sshd.log"])
        }.child
    }

    func stop() {
        process?.stop()
        process = nil
        Harness.remove(directory)
    }

    deinit { stop() }
}

import CSystem
import Glibc
import FerryCore

extension HTTPSettings {
    /// The session's HTTP settings with its credentials read from their files, and its `ca-file`
    /// checked (a missing one is named as such, not taken for an untrusted server).
    public static func of(_ session: SessionConfig) throws(FerryError) -> HTTPSettings {
        var basic: String?
        var bearer: String?
        if let ca = session.caFile {
            do { _ = try FileSystem.readFile(ca, limit: 16 << 20) } catch {
                throw .usage("ca-file of session '\(session.name)': \(error.message)", hint: "fix 'ca-file =' in [session \(session.name)], or put the CA's certificate (PEM) there")
            }
        }
        if let file = session.basicAuthFile {
            let line = try Secrets.firstLine(of: file, session: session, key: "basic-auth-file")
            guard line.contains(":") else {
                throw .usage("basic-auth-file \(file) of session '\(session.name)' must hold 'user:password' on its first line")
            }
            basic = line
        }
        if let file = session.bearerTokenFile {
            bearer = try Secrets.firstLine(of: file, session: session, key: "bearer-token-file")
        }
        return HTTPSettings(session: session, basicAuth: basic, bearerToken: bearer)
    }
}

/// The files of secrets a session names (HTTP's credentials, S3's credentials file): read only
/// when a run needs them, by a process that from then on cannot dump core or be read by its user.
enum Secrets {
    /// Reads a credential's first line.
    static func firstLine(of file: String, session: SessionConfig, key: String) throws(FerryError) -> String {
        let bytes = try readSecret(file, session: session, key: key, limit: 64 << 10)
        let text = String(decoding: bytes, as: UTF8.self)
        let line = String(text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "").trimmingSpaces()
        guard !line.isEmpty else { throw .usage("\(key) \(file) of session '\(session.name)' is empty") }
        return line
    }

    /// Reads a file of secrets named by `key` (up to `limit` bytes), after `holdingSecrets`.
    static func readSecret(_ file: String, session: SessionConfig, key: String, limit: Int) throws(FerryError) -> [UInt8] {
        holdingSecrets()
        do { return try FileSystem.readFile(file, limit: limit) } catch {
            throw .usage("\(key) of session '\(session.name)': \(error.message)", hint: unreadableHint(file, key: key))
        }
    }

    /// What to do about a credentials file that cannot be read: make it when it is missing, let
    /// this user read it when it exists (kept from other users: it holds a secret).
    static func unreadableHint(_ file: String, key: String) -> String {
        var st = stat()
        guard stat(file, &st) == 0 else { return "create the file, or fix '\(key) =' in the config" }
        let user = StateOwner.userName(geteuid())
        return "let \(user) read it, and no one else: chgrp \(user) \(file) && chmod 640 \(file) (or run ferry as its owner)"
    }

    /// Called before the process takes in its first secret (from a file or the environment): from
    /// then on it cannot dump core (a core would hold the secret) and its memory cannot be read
    /// through /proc or ptrace by its user, for the rest of its life.
    static func holdingSecrets() { _ = ferry_set_dumpable(0) }
}

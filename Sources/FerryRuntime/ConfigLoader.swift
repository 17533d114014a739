import CSystem
import Glibc
import FerryCore

/// Reads the config file and the credential files it names. The only config code that does I/O.
public enum ConfigLoader {
    /// `--config`, else `$FERRY_CONFIG`, else `/etc/ferry/ferry.conf`.
    public static func resolvePath(_ explicit: String?) -> String {
        if let explicit { return explicit }
        if let env = getenv("FERRY_CONFIG"), env.pointee != 0 { return String(cString: env) }
        return "/etc/ferry/ferry.conf"
    }

    public static func load(path: String) throws(FerryError) -> Config {
        var st = stat()
        guard stat(path, &st) == 0 else {
            throw .usage("cannot read the config file \(path): \(FileSystem.errorText())",
                         hint: "pass --config FILE or set FERRY_CONFIG; config/ferry.conf in the ferry sources documents every key")
        }
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(path, limit: 4 << 20) } catch { throw .usage(error.message) }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .usage("\(path) is not UTF-8 text") }
        let absolute = path.hasPrefix("/") ? path : currentDirectory() + "/" + path
        var config = try ConfigParser.parse(text, path: absolute)
        config.path = path
        for session in config.sessions {
            for file in [session.basicAuthFile, session.bearerTokenFile].compactMap({ $0 }) {
                var fs = stat()
                if stat(file, &fs) == 0 && (fs.st_mode & 0o004) != 0 {
                    config.warnings.append("credentials file \(file) of session '\(session.name)' is readable by every user; run: chmod 600 \(file)")
                }
            }
        }
        return config
    }

    /// The session's HTTP settings with its credentials read from their files.
    public static func httpSettings(for session: SessionConfig) throws(FerryError) -> HTTPSettings {
        var basic: String?
        var bearer: String?
        if let file = session.basicAuthFile {
            let line = try firstLine(of: file, session: session, key: "basic-auth-file")
            guard line.contains(":") else {
                throw .usage("basic-auth-file \(file) of session '\(session.name)' must hold 'user:password' on its first line")
            }
            basic = line
        }
        if let file = session.bearerTokenFile {
            bearer = try firstLine(of: file, session: session, key: "bearer-token-file")
        }
        return HTTPSettings(session: session, basicAuth: basic, bearerToken: bearer)
    }

    /// Reads a credential's first line. From the first secret on, the process cannot dump core (a
    /// core would hold the secret) and its memory cannot be read through /proc or ptrace by its
    /// user, for the rest of its life.
    private static func firstLine(of file: String, session: SessionConfig, key: String) throws(FerryError) -> String {
        _ = ferry_set_dumpable(0)
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(file, limit: 64 << 10) } catch {
            throw .usage("\(key) of session '\(session.name)': \(error.message)", hint: "create the file, or fix '\(key) =' in the config")
        }
        let text = String(decoding: bytes, as: UTF8.self)
        let line = String(text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "").trimmingSpaces()
        guard !line.isEmpty else { throw .usage("\(key) \(file) of session '\(session.name)' is empty") }
        return line
    }

    static func currentDirectory() -> String {
        guard let cwd = getcwd(nil, 0) else { return "." }
        defer { free(cwd) }
        return String(cString: cwd)
    }
}

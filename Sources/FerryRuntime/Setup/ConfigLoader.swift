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

    /// `allowingNoSession`: see `ConfigParser.parse`.
    public static func load(path: String, allowingNoSession: Bool = false) throws(FerryError) -> Config {
        var st = stat()
        guard stat(path, &st) == 0 else {
            throw .usage("cannot read the config file \(path): \(FileSystem.errorText())",
                         hint: "pass --config FILE or set FERRY_CONFIG; config/ferry.conf in the ferry sources documents every key")
        }
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(path, limit: 4 << 20) } catch { throw .usage(error.message) }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .usage("\(path) is not UTF-8 text") }
        let absolute = path.hasPrefix("/") ? path : currentDirectory() + "/" + path
        var config = try ConfigParser.parse(text, path: absolute, backends: Backends.descriptions, allowingNoSession: allowingNoSession)
        config.path = path
        for session in config.sessions {
            for (_, file) in session.secretFiles {
                var fs = stat()
                if stat(file, &fs) == 0 && (fs.st_mode & 0o004) != 0 {
                    config.warnings.append("credentials file \(file) of session '\(session.name)' is readable by every user; run: chmod 600 \(file)")
                }
            }
            for key in session.signKeys {
                if let warning = SigningKey.exposure(of: key, use: SigningKey.use(in: session)) { config.warnings.append(warning) }
            }
        }
        return config
    }

    /// Everything about a config that can be checked without the network (`ferry config check`):
    /// the state directory, each session's local directory, the files and programs it names, the
    /// metrics directory. One problem per entry, each naming the key and what to do.
    public static func problems(in config: Config) -> [FerryError] {
        var out: [FerryError] = []
        let agent = "[agent]"
        if let why = writableDirectory(config.agent.state) {
            out.append(.usage("\(agent) state = \(config.agent.state): \(why)", hint: "choose a directory ferry may create and write (it keeps its database, locks and event logs there)"))
        }
        if let metrics = config.agent.metrics {
            let directory = ConfigParser.directoryName(of: metrics)
            var st = stat()
            if stat(directory, &st) != 0 || (st.st_mode & S_IFMT) != S_IFDIR {
                out.append(.usage("\(agent) metrics = \(metrics): the directory \(directory) does not exist", hint: "create it (node_exporter's textfile collector directory), or fix 'metrics ='"))
            } else if access(directory, W_OK | X_OK) != 0 {
                out.append(.usage("\(agent) metrics = \(metrics): cannot write to \(directory): \(FileSystem.errorText())", hint: "let ferry's user write there, or choose another directory"))
            }
        }
        for session in config.sessions {
            let where_ = "[session \(session.name)]"
            if session.direction == .push {
                var st = stat()
                if stat(session.local, &st) != 0 {
                    out.append(.usage("\(where_) local = \(session.local): \(FileSystem.errorText())", hint: "a push publishes this directory: it must exist"))
                } else if (st.st_mode & S_IFMT) != S_IFDIR || access(session.local, R_OK | X_OK) != 0 {
                    out.append(.usage("\(where_) local = \(session.local): not a directory ferry can read", hint: "fix 'local =', or let ferry's user read it"))
                }
            } else if let why = writableDirectory(session.local) {
                let user = StateOwner.userName(geteuid())
                out.append(.usage("\(where_) local = \(session.local): \(why)",
                                  hint: "a pull writes this directory as \(user): chown -R \(user): \(session.local) (or a group; README: \"Sessions that write where ferry cannot\"), or choose another"))
            } else if session.layout == .generations, let why = writableDirectory(ConfigParser.directoryName(of: session.local)) {
                out.append(.usage("\(where_) local = \(session.local): layout = generations keeps its versions beside it, in \(session.local).generations, and replaces it with a symlink, but its directory: \(why)",
                                  hint: "let ferry's user write the directory holding local, or set layout = in-place"))
            }
            for (key, file) in (session.caFile.map { [("ca-file", $0)] } ?? []) + session.secretFiles {
                do { _ = try FileSystem.readFile(file, limit: 16 << 20) } catch {
                    out.append(.usage("\(where_) \(key) = \(file): \(error.message)", hint: key == "ca-file" ? "create the file, or fix '\(key) ='" : Secrets.unreadableHint(file, key: key)))
                }
            }
            if let key = session.remoteOptions["sftp-key"] {
                // What the run would refuse: a key that is not a regular file, or that others may read.
                do { try SFTPBackend.checkKeyFile(key) } catch { out.append(.usage("\(where_) \(error.message)", hint: error.hint)) }
                let known = session.remoteOptions["sftp-known-hosts"] ?? SFTPBackend.defaultKnownHosts()
                if access(known, R_OK) != 0 {
                    out.append(.usage("\(where_) sftp-known-hosts = \(known): \(FileSystem.errorText())",
                                      hint: "point sftp-known-hosts at a file holding the server's host key (ssh-keyscan prints it; check its fingerprint)"))
                }
            }
            for key in session.signKeys where session.direction == .push {
                // Read as the runs read it (config check runs as the state's owner).
                do { _ = try SigningKey(file: key, use: "\(where_) sign-key") } catch { out.append(error) }
            }
            if session.direction == .push, let target = session.remote.localDirectory, let why = writableDirectory(target) {
                out.append(.usage("\(where_) remote = \(session.remote.url): a push writes there, but \(why)",
                                  hint: "let \(StateOwner.userName(geteuid())) write \(target) (chown or a group), or push elsewhere"))
            }
            for (key, hook) in [("on-file-done", session.onFileDone), ("on-session-done", session.onSessionDone)] {
                guard let hook, let why = unrunnable(hook.program) else { continue }
                out.append(.usage("\(where_) \(key): \(why)", hint: "install it, or give its full path"))
            }
        }
        return out
    }

    /// Why `path` cannot be (or become) a directory ferry writes, or nil when it can: it is a
    /// directory ferry may write, or it does not exist and its nearest existing parent is one.
    static func writableDirectory(_ path: String) -> String? {
        var st = stat()
        if lstat(path, &st) == 0 || stat(path, &st) == 0 {
            if stat(path, &st) != 0 { return "it is a symlink to nothing" }
            guard (st.st_mode & S_IFMT) == S_IFDIR else { return "it is a file, not a directory" }
            return access(path, W_OK | X_OK) == 0 ? nil : "cannot write there: \(FileSystem.errorText())"
        }
        var parent = ConfigParser.directoryName(of: path)
        while stat(parent, &st) != 0 {
            let up = ConfigParser.directoryName(of: parent)
            if up == parent { return "none of its parent directories exists" }
            parent = up
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else { return "\(parent) is a file, so the directory cannot be made" }
        return access(parent, W_OK | X_OK) == 0 ? nil : "cannot create it: \(parent) is not writable (\(FileSystem.errorText()))"
    }

    /// Why a hook's program cannot be run, or nil: found (on PATH when it has no slash) and executable.
    static func unrunnable(_ program: String) -> String? {
        if program.contains("/") {
            return access(program, X_OK) == 0 ? nil : "the program \(program) cannot be run: \(FileSystem.errorText())"
        }
        let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") where access(directory + "/" + program, X_OK) == 0 { return nil }
        return "the program \(program) is not on PATH (\(path))"
    }

    static func currentDirectory() -> String {
        guard let cwd = getcwd(nil, 0) else { return "." }
        defer { free(cwd) }
        return String(cString: cwd)
    }
}

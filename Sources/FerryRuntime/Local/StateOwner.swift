import Glibc
import FerryCore

/// Who may act on a state directory. The state belongs to one user (the service's, `ferry`, for
/// the package's `/var/lib/ferry`); a file another user leaves there, root above all, is one the
/// service can no longer write, and every later run of the service fails on it. So:
///
/// - root running a command on a state directory owned by another user runs it as that user
///   (`adopt`): its groups, its uid, its HOME, before the command touches anything;
/// - another user whose state directory it is not is refused with the command that would work;
/// - a state directory already holding entries of another owner is named, with the `chown` that
///   repairs it, in one error (`checkEntries`).
public enum StateOwner {
    /// The user a command switched to, when it did.
    public struct Switch: Sendable, Equatable {
        public let user: String
        public let uid: uid_t
    }

    /// Runs the rest of this process as the owner of `state` when it is root and the directory
    /// belongs to someone else; refuses a user who is neither; then checks the directory's
    /// entries. A state directory that does not exist yet is left to the command (it makes it).
    @discardableResult
    public static func adopt(state: String) throws(FerryError) -> Switch? {
        var st = stat()
        guard stat(state, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else { return nil }
        let me = geteuid()
        var switched: Switch?
        if st.st_uid != me {
            if me == 0 {
                switched = try become(uid: st.st_uid, gid: st.st_gid, state: state)
            } else if access(state, R_OK | W_OK | X_OK) != 0 {
                let owner = userName(st.st_uid)
                throw .localIO("the state directory \(state) belongs to \(owner), and this command runs as \(userName(me)), which cannot use it",
                               hint: "run it as \(owner): sudo -u \(owner) ferry \(commandLine())")
            }
        }
        try checkEntries(state: state, owner: st.st_uid, group: st.st_gid)
        return switched
    }

    /// Fails when the directory or the entries ferry keeps in it (one level down) belong to another
    /// user than its owner: a run as root before this rule existed, or by hand. One error for all.
    static func checkEntries(state: String, owner: uid_t, group: gid_t) throws(FerryError) {
        var strangers: [String] = []
        var strangerOwners: Set<uid_t> = []
        var seen = 0
        func look(_ directory: String, depth: Int) {
            FileSystem.forEachName(in: directory) { name in
                // At most this many lstat calls, whatever a state directory grew to.
                guard seen < 100_000 else { return }
                seen += 1
                let path = directory + "/" + name
                var st = stat()
                guard lstat(path, &st) == 0 else { return }
                if st.st_uid != owner {
                    strangerOwners.insert(st.st_uid)
                    if strangers.count < 4 { strangers.append(String(path.dropFirst(state.count + 1))) }
                    else if strangers.count == 4 { strangers.append("…") }
                }
                if depth == 0 && (st.st_mode & S_IFMT) == S_IFDIR { look(path, depth: 1) }
            }
        }
        look(state, depth: 0)
        guard !strangers.isEmpty else { return }
        let owners = strangerOwners.sorted().map(userName).joined(separator: ", ")
        let user = userName(owner)
        throw .localIO("the state directory \(state) belongs to \(user) but holds entries of \(owners) (\(strangers.joined(separator: ", "))), which \(user) cannot write: a ferry command ran as another user",
                       hint: "as root, give them back: chown -R \(user):\(groupName(group)) \(state)")
    }

    /// Drops root for the owner of the state directory: its supplementary groups (its own, from
    /// the user database; none when the uid has no entry), its group, its uid, for every thread.
    private static func become(uid: uid_t, gid: gid_t, state: String) throws(FerryError) -> Switch {
        let entry = passwdEntry(uid)
        let name = entry?.name ?? String(uid)
        let groupID = entry?.gid ?? gid
        let groupsSet = entry.map { initgroups($0.name, groupID) == 0 } ?? (setgroups(0, nil) == 0)
        guard groupsSet, setgid(groupID) == 0, setuid(uid) == 0 else {
            throw .localIO("cannot run as \(name), the owner of the state directory \(state): \(FileSystem.errorText())",
                           hint: "run the command as \(name): sudo -u \(name) ferry \(commandLine())")
        }
        // The owner's own view: its home (where ~/.aws is), its name; none of root's session
        // (its runtime directory, agent socket, sudo's record), which hooks would inherit. The
        // working directory stays: a relative --config is read again on a reload.
        for name in ["XDG_RUNTIME_DIR", "SSH_AUTH_SOCK", "SUDO_COMMAND", "SUDO_USER", "SUDO_UID", "SUDO_GID", "MAIL", "DBUS_SESSION_BUS_ADDRESS"] {
            unsetenv(name)
        }
        if let home = entry?.home { setenv("HOME", home, 1) }
        setenv("USER", name, 1)
        setenv("LOGNAME", name, 1)
        return Switch(user: name, uid: uid)
    }

    private struct PasswdEntry {
        let name: String
        let gid: gid_t
        let home: String
    }

    private static func passwdEntry(_ uid: uid_t) -> PasswdEntry? {
        var pw = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 << 10)
        guard getpwuid_r(uid, &pw, &buffer, buffer.count, &result) == 0, result != nil, let namePointer = pw.pw_name else { return nil }
        return PasswdEntry(name: String(cString: namePointer), gid: pw.pw_gid, home: pw.pw_dir.map { String(cString: $0) } ?? "/")
    }

    /// A user's home directory from the password database, or nil when the uid has no entry.
    static func homeDirectory(_ uid: uid_t) -> String? { passwdEntry(uid)?.home }

    /// A user's name, or its number when it has none.
    public static func userName(_ uid: uid_t) -> String { passwdEntry(uid)?.name ?? String(uid) }

    static func groupName(_ gid: gid_t) -> String {
        var gr = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 16 << 10)
        guard getgrgid_r(gid, &gr, &buffer, buffer.count, &result) == 0, result != nil, let name = gr.gr_name else { return String(gid) }
        return String(cString: name)
    }

    /// This process's arguments, for a hint that repeats the command.
    private static func commandLine() -> String {
        CommandLine.arguments.dropFirst().map { arg in
            arg.allSatisfy({ $0.isLetter || $0.isNumber || "-_./=:,@".contains($0) }) && !arg.isEmpty ? arg : "'" + arg.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'"
        }.joined(separator: " ")
    }
}

import Glibc
import Synchronization
import FerryCore

/// The directories of an `sftp://` remote seen to be directories (not symlinks), or made, by
/// this run: each is looked at once. Shared by the threads of a run.
final class SFTPDirectories: Sendable {
    private let known = Mutex(Set<String>())

    func contains(_ path: String) -> Bool { known.withLock { $0.contains(path) } }
    func insert(_ path: String) { _ = known.withLock { $0.insert(path) } }
    /// A directory removed: it and everything under it are looked at again.
    func forget(_ path: String) { known.withLock { $0 = $0.filter { $0 != path && !$0.hasPrefix(path + "/") } } }
}

extension SFTPRemote {
    /// The server paths of the directories `path` (relative to the remote) lies in, outermost first.
    func parents(of path: String) -> [String] {
        let parts = path.split(separator: "/")
        return (1..<max(parts.count, 1)).map { directory + parts[..<$0].joined(separator: "/") }
    }

    /// The directories every upload goes through: the remote's own, `.ferry`, `.ferry/upload`.
    var sharedDirectories: [String] { (ownDirectory.map { [$0] } ?? []) + parents(of: LocalRoot.uploadPath + "/x") }

    /// The remote's own directory, which may be a symlink (the operator's choice, like the
    /// directory a `file://` remote names): nil for the login directory.
    var ownDirectory: String? {
        let own = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        return own.isEmpty ? nil : own
    }
}

/// Makes sure a directory of the remote is one, a request at a time: looks at it (STAT for the
/// remote's own directory, which may be a symlink to one, the operator's choice; LSTAT under it,
/// where a symlink is refused), makes it when it is missing, and looks again when making it
/// failed (another upload may have made it first; if it is still missing, the MKDIR's failure
/// is the error).
struct SFTPDirectoryCheck {
    let path: String
    private let follow: Bool
    private enum Look { case look, make, again(FerryError) }
    private var look = Look.look

    init(_ path: String, _ remote: SFTPRemote) {
        self.path = path
        follow = path == remote.ownDirectory
    }

    /// The next request's kind and fields.
    var kind: SFTP.Kind {
        if case .make = look { return .mkdir }
        return follow ? .stat : .lstat
    }

    func fields(_ packet: inout SFTP.Packet) {
        packet.string(path)
        if case .make = look { packet.attributes(SFTP.Attributes(permissions: 0o755)) }
    }

    /// Takes the reply to the last request: true once the directory is one; false when another
    /// request is due (`kind`, `fields`).
    mutating func take(_ reply: SFTP.Reply, _ calls: SFTPCalls) throws(FerryError) -> Bool {
        switch (look, reply) {
        case (.make, .status(_, .ok, _, _)):
            return true
        case (.make, _):
            do throws(FerryError) { try calls.requireOK(reply, "make the directory", path) } catch {
                look = .again(error)
            }
            return false
        case let (_, .attrs(_, attributes)):
            guard attributes.isDirectory else { throw SFTPErrors.notADirectory(calls.endpoint, path, attributes) }
            return true
        case let (.again(failure), .status(_, .noSuchFile, _, _)):
            throw failure
        case (.look, .status(_, .noSuchFile, _, _)):
            look = .make
            return false
        default:
            try calls.requireOK(reply, "look at", path)
            throw calls.unexpected(reply, "LSTAT")
        }
    }
}

extension SFTPCalls {
    /// Makes sure `path` is a directory (`SFTPDirectoryCheck`), on the calling thread.
    func makeSureOfDirectory(_ path: String) throws(FerryError) {
        guard !remote.directories.contains(path) else { return }
        var check = SFTPDirectoryCheck(path, remote)
        while try !check.take(call(check.kind, check.fields), self) {}
        remote.directories.insert(path)
    }

    /// LSTAT, nil when nothing is at the name.
    func lstatIfPresent(_ full: String, for what: String) throws(FerryError) -> SFTP.Attributes? {
        let reply = try call(.lstat) { $0.string(full) }
        if case let .attrs(_, attributes) = reply { return attributes }
        if case .status(_, .noSuchFile, _, _) = reply { return nil }
        try requireOK(reply, what, full)
        throw unexpected(reply, "LSTAT")
    }

    /// Whether the directories `path` lies in are all there; a symlink among them is refused (a
    /// write or a removal through it would reach outside the remote).
    func directoriesHold(_ path: String) throws(FerryError) -> Bool {
        for parent in remote.parents(of: path) where !remote.directories.contains(parent) {
            guard let attributes = try lstatIfPresent(parent, for: "look at") else { return false }
            guard attributes.isDirectory else {
                if attributes.isSymlink { throw SFTPErrors.notADirectory(endpoint, parent, attributes) }
                return false
            }
            remote.directories.insert(parent)
        }
        return true
    }

    /// The names in a directory (OPENDIR, READDIR to its end), at most `limit`: each a counted
    /// string from the server, those that are not a plain name (empty, `.`, `..`, with `/` or NUL) left out.
    func names(in full: String, limit: Int = 1_000_000) throws(FerryError) -> [String] {
        let opened = try call(.opendir) { $0.string(full) }
        guard case let .handle(_, handle) = opened else {
            try requireOK(opened, "list", full)
            throw unexpected(opened, "OPENDIR")
        }
        var names: [String] = []
        var failure: FerryError?
        listing: while names.count < limit {
            let reply = try call(.readdir) { $0.string(handle) }
            switch reply {
            case let .name(_, entries):
                for (raw, _) in entries where !raw.isEmpty && raw != [0x2e] && raw != [0x2e, 0x2e] && !raw.contains(0x2f) && !raw.contains(0) {
                    names.append(String(decoding: raw, as: UTF8.self))
                }
            case .status(_, .eof, _, _): break listing
            case let .status(_, status, code, message):
                failure = SFTPErrors.status(endpoint, status, code: code, message: message, "list", full)
                break listing
            default:
                failure = unexpected(reply, "READDIR")
                break listing
            }
        }
        try close(handle, full)
        if let failure { throw failure }
        return names
    }
}

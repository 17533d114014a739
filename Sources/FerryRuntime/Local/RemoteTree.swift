import Synchronization
import FerryCore

/// The directory of a `file://` remote, opened on first use and shared by the session's thread and
/// the engine's, one call at a time.
final class RemoteTree: @unchecked Sendable {
    let path: String
    /// Touched only under `lock`.
    private var root: LocalRoot?
    private let lock = Mutex(())

    init(path: String) { self.path = path }

    /// Runs `body` with the remote's directory; `create` makes it first when it is missing (a push
    /// makes its remote directory, a pull never does).
    func withRoot<T>(create: Bool, _ body: (LocalRoot) throws(FerryError) -> T) throws(FerryError) -> T {
        try lock.withLock { _ throws(FerryError) -> T in
            if root == nil { root = try LocalRoot(path: path, create: create, role: .remote) }
            return try body(root!)
        }
    }

    /// Opens a file of the remote for reading (`LocalRoot.open`); -1 with errno set when it cannot.
    func openForReading(_ relative: RelativePath) -> (fd: Int32, error: FerryError?) {
        do {
            return (try withRoot(create: false) { root throws(FerryError) in try root.open(relative, for: "to read it") }, nil)
        } catch {
            return (-1, error)
        }
    }
}

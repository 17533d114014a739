import Glibc
import FerryCore

/// Notices changes under a local root with inotify, so that `ferry agent` can skip the scan of a
/// tree nothing touched when the manifest is unchanged (a 304): a watch on every directory (not
/// `.ferry/`) for anything that changes a name, a file's bytes or its attributes. Once anything
/// happens — or the kernel's event queue overflows — the watch stays changed for good, and the
/// agent scans and starts a new one. It cannot be set up (no such root, watches exhausted:
/// `fs.inotify.max_user_watches`) → nil, and the agent scans every poll instead.
final class LocalWatch {
    private let fd: Int32
    private var changedForGood = false
    private var rootWatch: Int32 = -1

    /// The root as it was when the watch began: a root that is a symlink (`layout = generations`)
    /// is watched where it points, and a switch to another directory counts as a change.
    private let root: String
    private let watched: (device: UInt64, inode: UInt64)

    init?(root: String) {
        self.root = root
        var st = stat()
        guard stat(root, &st) == 0, let resolved = realpath(root, nil) else { return nil }
        defer { free(resolved) }
        watched = (UInt64(st.st_dev), UInt64(st.st_ino))
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { return nil }
        guard add(String(cString: resolved), isRoot: true) else {
            close(fd)
            return nil
        }
    }

    deinit { close(fd) }

    private static let mask: UInt32 = UInt32(IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM
                                             | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF) | UInt32(IN_ONLYDIR) | UInt32(IN_DONT_FOLLOW)

    /// Watches `directory` and every directory below it; false when a watch cannot be added.
    private func add(_ directory: String, isRoot: Bool) -> Bool {
        let wd = inotify_add_watch(fd, directory, LocalWatch.mask)
        guard wd >= 0 else { return false }
        if isRoot { rootWatch = wd }
        guard let dir = opendir(directory) else { return false }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let type = entry.pointee.d_type
            guard type == UInt8(DT_DIR) || type == UInt8(DT_UNKNOWN) else { continue }
            let name = FileSystem.name(of: entry)
            if name == "." || name == ".." || (isRoot && name == ".ferry") { continue }
            let path = directory + "/" + name
            if type == UInt8(DT_UNKNOWN) {
                var st = stat()
                guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { continue }
            }
            guard add(path, isRoot: false) else { return false }
        }
        return true
    }

    /// Whether anything under the root changed since the watch began.
    var changed: Bool {
        guard !changedForGood else { return true }
        var st = stat()
        if stat(root, &st) != 0 || (UInt64(st.st_dev), UInt64(st.st_ino)) != watched {
            changedForGood = true
            return true
        }
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return changedForGood }
            var offset = 0
            buffer.withUnsafeBytes { raw in
                while offset + MemoryLayout<inotify_event>.size <= n {
                    let wd = raw.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                    let mask = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                    let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    let nameStart = offset + MemoryLayout<inotify_event>.size
                    var name = ""
                    if length > 0 {
                        let bytes = raw[nameStart..<min(n, nameStart + length)].prefix { $0 != 0 }
                        name = String(decoding: bytes, as: UTF8.self)
                    }
                    offset = nameStart + length
                    // ferry's own work area in the root does not count.
                    if wd == rootWatch && name == ".ferry" && mask & UInt32(IN_Q_OVERFLOW) == 0 { continue }
                    changedForGood = true
                }
            }
        }
    }
}

import CSystem
import Glibc
import FerryCore

/// `layout = generations` on disk. `local` is a relative symlink to `<name>.generations/g<N>`, a
/// directory holding one whole, verified version. The directory `<local>.generations` sits beside
/// `local` (same parent, so same filesystem: hard links and renames work between them) and holds
///
///     g<N>            the current generation, the previous ones kept (lower numbers), and at
///                     most one being built (the one number above all others)
///     g<N>.deleting   a generation being removed; an interrupted removal goes on next time
///     .switch         the new symlink between its creation and its rename over `local`
///
/// A switch is one `rename` of a new symlink over `local`, after everything in the generation is
/// on disk: a reader that opened `local` keeps the version it opened, one that resolves the path
/// again sees the old version until the rename and the new one after, and a crash at any moment
/// leaves `local` naming a whole generation.
struct Generations {
    let local: String
    /// `<local>.generations`.
    let directory: String
    private let baseName: String

    /// `local` is absolute and normalized (the config parser makes it so), and not `/`.
    init(local: String) {
        self.local = local
        let slash = local.lastIndex(of: "/") ?? local.startIndex
        baseName = String(local[local.index(after: slash)...])
        directory = local + ".generations"
    }

    /// What is at `local` now.
    enum Current: Equatable {
        /// Nothing: the first sync builds generation 1.
        case none
        /// A real directory: a mirror kept in place until now (it becomes a previous generation).
        case directory
        /// The symlink ferry made, to generation N (whose directory may have been removed by hand).
        case generation(Int)
        /// Something ferry did not make: a symlink elsewhere, a file.
        case foreign(String)
    }

    func current() -> Current {
        var st = stat()
        guard lstat(local, &st) == 0 else { return .none }
        switch st.st_mode & S_IFMT {
        case S_IFDIR: return .directory
        case S_IFLNK:
            let target = Generations.readLink(local) ?? ""
            let prefix = baseName + ".generations/"
            if target.hasPrefix(prefix), let n = Generations.number(String(target.dropFirst(prefix.count))) { return .generation(n) }
            return .foreign("a symlink to \(Printable.name(target))")
        default:
            return .foreign("not a directory")
        }
    }

    func path(_ n: Int) -> String { directory + "/g\(n)" }
    func name(_ n: Int) -> String { GenerationName.of(n) }

    /// `g<N>` → N (`GenerationName`).
    static func number(_ name: String) -> Int? { GenerationName.number(name) }

    /// The generations present, by number: directories named `g<N>` (a conversion back to in
    /// place leaves a symlink under such a name for a moment).
    func present() -> [Int] {
        FileSystem.names(in: directory).compactMap { name -> Int? in
            var st = stat()
            guard let n = Generations.number(name), lstat(directory + "/" + name, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { return nil }
            return n
        }.sorted()
    }

    /// Whether everything in the generations directory has a name ferry gives (so that a
    /// directory someone else named like it is never removed as ferry's).
    func holdsOnlyGenerations() -> Bool {
        FileSystem.names(in: directory).allSatisfy { name in
            name == ".switch" || Generations.number(name) != nil || (name.hasSuffix(".deleting") && Generations.number(String(name.dropLast(9))) != nil)
        }
    }

    /// Whether `tidy` would remove anything: a removal cut short, a `.switch` left behind, an
    /// entry named like a generation that is not a directory, or more than one build.
    func untidy(current: Int?) -> Bool {
        let names = FileSystem.names(in: directory)
        if names.contains(where: { $0.hasSuffix(".deleting") || $0 == ".switch" }) { return true }
        let present = present()
        if names.filter({ Generations.number($0) != nil }).count != present.count { return true }
        return present.filter { current == nil || $0 > current! }.count > 1
    }

    /// Clears what an interrupted run left: removals to finish, a switch link never renamed (or
    /// the old mirror a conversion had not yet named), and every build but the newest. Returns
    /// the build to go on with: the newest generation above `current` (any, when there is none).
    func tidy(current: Int?) throws(FerryError) -> Int? {
        var st = stat()
        guard lstat(directory, &st) == 0 else { return nil }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            throw .localIO("\(Printable.name(directory)) is not a directory, and layout = generations keeps the mirror's versions there",
                           hint: "move it away")
        }
        try refuseUnlessOwned(st)
        if let current, isDirectory(directory + "/.switch"), !FileSystem.exists(path(current - 1)) {
            // A conversion from in place cut short after the exchange: `.switch` is the directory
            // the mirror was, and becomes the generation before, as the conversion would have made it.
            rename(directory + "/.switch", path(current - 1))
        }
        let directories = Set(present().map(name))
        for name in FileSystem.names(in: directory)
        where name.hasSuffix(".deleting") || name == ".switch" || (Generations.number(name) != nil && !directories.contains(name)) {
            try remove(name)
        }
        let builds = present().filter { current == nil || $0 > current! }
        for n in builds.dropLast() { try remove(name(n)) }
        return builds.last
    }

    /// Makes the directory of a new build, numbered above every generation present (a number is
    /// never used twice while its directory may still be open somewhere).
    func startBuild(above current: Int?, leavingRoomBelow: Bool) throws(FerryError) -> Int {
        do throws(FerryError) { try FileSystem.makeDirectories(directory) } catch {
            throw FerryError(error.category, error.message, hint: writeHint)
        }
        var st = stat()
        guard lstat(directory, &st) == 0 else {
            throw .localIO("cannot look at \(Printable.name(directory)): \(FileSystem.errorText())", hint: writeHint)
        }
        try refuseUnlessOwned(st)
        let n = max(present().last ?? 0, current ?? 0) + (leavingRoomBelow ? 2 : 1)
        guard mkdir(path(n), 0o755) == 0 else {
            throw .localIO("cannot create \(Printable.name(path(n))) for the next generation: \(FileSystem.errorText())", hint: writeHint)
        }
        return n
    }

    /// What goes into `<local>.generations` goes live at the next switch: only ferry's user may
    /// write there. A directory another user owns, or that its group or others may write, is
    /// refused (`st` is its `lstat`) with the command that makes it ferry's alone.
    private func refuseUnlessOwned(_ st: stat) throws(FerryError) {
        let me = geteuid()
        let mode = String(st.st_mode & 0o7777, radix: 8)
        if st.st_uid != me {
            throw .localIO("\(Printable.name(directory)) is owned by \(StateOwner.userName(st.st_uid)) (uid \(st.st_uid)), not by \(StateOwner.userName(me)) that runs ferry: "
                           + "anything another user puts there would go live at the next switch; nothing was changed",
                           hint: "if its contents are ferry's, chown -R \(StateOwner.userName(me)) \(Printable.name(directory)) and chmod go-w \(Printable.name(directory)); otherwise move it away")
        }
        if st.st_mode & 0o022 != 0 {
            throw .localIO("\(Printable.name(directory)) may be written by its group or others (mode \(mode)): "
                           + "anything another user puts there would go live at the next switch; nothing was changed",
                           hint: "chmod go-w \(Printable.name(directory))")
        }
    }

    /// What a refused write here needs: the directory holding `local`, not only `local`.
    private var writeHint: String {
        "layout = generations keeps its versions beside \(Printable.name(local)) and replaces it with a symlink: let \(StateOwner.userName(geteuid())) write "
            + "\(Printable.name(ConfigParser.directoryName(of: local))) (ferry config check says what it cannot write; ferry config units, what the units need)"
    }

    /// Makes generation `n` current: everything in it flushed to disk, then a symlink to it
    /// renamed over `local` and `local`'s directory flushed. A real directory at `local` (the
    /// mirror kept in place until now) is exchanged with the symlink in the same step and becomes
    /// generation `n - 1`, so readers never find `local` missing.
    func switchTo(_ n: Int, from current: Current) throws(FerryError) {
        let fd = Glibc.open(path(n), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .localIO("cannot open \(Printable.name(path(n))) to switch to it: \(FileSystem.errorText())") }
        let synced = ferry_syncfs(fd)
        let syncError = errno
        close(fd)
        guard synced == 0 else {
            throw .localIO("cannot flush generation \(name(n)) to disk (\(FileSystem.errorText(syncError))); \(Printable.name(local)) still shows the previous one")
        }
        let link = directory + "/.switch"
        unlink(link)
        guard symlink(baseName + ".generations/" + name(n), link) == 0 else {
            throw .localIO("cannot create the symlink to generation \(name(n)) in \(Printable.name(directory)): \(FileSystem.errorText())", hint: writeHint)
        }
        if current == .directory {
            if ferry_rename_exchange(AT_FDCWD, link, AT_FDCWD, local) != 0 {
                // A filesystem without RENAME_EXCHANGE: the old directory goes first, and `local`
                // is missing until the symlink takes its place, an instant later.
                guard errno == EINVAL, rename(local, path(n - 1)) == 0, rename(link, local) == 0 else {
                    throw .localIO("cannot turn \(Printable.name(local)) into a symlink to generation \(name(n)): \(FileSystem.errorText())", hint: writeHint)
                }
            } else if rename(link, path(n - 1)) != 0 {
                throw .localIO("cannot move the directory \(Printable.name(local)) was to \(Printable.name(path(n - 1))): \(FileSystem.errorText())")
            }
        } else if rename(link, local) != 0 {
            throw .localIO("cannot switch \(Printable.name(local)) to generation \(name(n)): \(FileSystem.errorText())", hint: writeHint)
        }
        FileSystem.syncDirectory(containing: local)
        FileSystem.syncDirectory(containing: link)
    }

    /// Turns the symlink to generation `n` back into a real directory at `local` (`layout =
    /// in-place` again): the two are exchanged in one step. The other generations stay for the
    /// caller to remove (`removeAll`).
    func makeInPlace(current n: Int) throws(FerryError) {
        if ferry_rename_exchange(AT_FDCWD, path(n), AT_FDCWD, local) != 0 {
            guard errno == EINVAL, unlink(local) == 0, rename(path(n), local) == 0 else {
                throw .localIO("cannot make \(Printable.name(local)) a directory again (it is a symlink to generation \(name(n))): \(FileSystem.errorText())",
                               hint: "check that ferry's user may write \(Printable.name(directory)) and the directory holding it")
            }
        }
        FileSystem.syncDirectory(containing: local)
    }

    /// The generations but the current and the `keep` before it.
    func prunable(current n: Int, keep: Int) -> [Int] {
        Array(present().filter { $0 < n }.sorted(by: >).dropFirst(keep))
    }

    /// Removes every generation but the current and the `keep` before it.
    func prune(current n: Int, keep: Int) throws(FerryError) {
        for k in prunable(current: n, keep: keep) { try remove(name(k)) }
    }

    private func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR
    }

    /// Removes a build no longer needed.
    func discard(_ n: Int) throws(FerryError) { try remove(name(n)) }

    /// Removes `<local>.generations` and everything in it.
    func removeAll() throws(FerryError) {
        for name in FileSystem.names(in: directory) { try remove(name) }
        rmdir(directory)
    }

    /// Removes one entry of the generations directory: renamed to `.deleting` first, so a removal
    /// cut short is recognized and finished, and never taken for a generation.
    private func remove(_ name: String) throws(FerryError) {
        var doomed = name
        if Generations.number(name) != nil {
            doomed = name + ".deleting"
            guard rename(directory + "/" + name, directory + "/" + doomed) == 0 else {
                throw .localIO("cannot remove \(Printable.name(directory + "/" + name)): \(FileSystem.errorText())")
            }
        }
        let fd = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .localIO("cannot open \(Printable.name(directory)): \(FileSystem.errorText())") }
        defer { close(fd) }
        try Generations.removeTree(in: fd, doomed, shown: directory + "/" + name)
    }

    /// Removes `name` in `parent` and, for a directory, everything in it, never following a symlink.
    static func removeTree(in parent: Int32, _ name: String, shown: String) throws(FerryError) {
        if unlinkat(parent, name, 0) == 0 || errno == ENOENT { return }
        guard errno == EISDIR || errno == EPERM else { throw .localIO("cannot remove \(Printable.name(shown)): \(FileSystem.errorText())") }
        let fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0, let dir = fdopendir(fd) else {
            if fd >= 0 { close(fd) }
            throw .localIO("cannot open \(Printable.name(shown)) to remove it: \(FileSystem.errorText())")
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let child = FileSystem.name(of: entry)
            if child != "." && child != ".." { names.append(child) }
        }
        for child in names { try removeTree(in: dirfd(dir), child, shown: shown + "/" + child) }
        guard unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT else {
            throw .localIO("cannot remove directory \(Printable.name(shown)): \(FileSystem.errorText())")
        }
    }

    static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(path, &buffer, buffer.count - 1)
        guard n >= 0 else { return nil }
        return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Hard-links a scanned tree into a generation being built: directories made, files, symlinks
/// and special files linked (never followed), each directory opened once, relative to its parent,
/// with no symlink followed on the way. The scan's order puts every directory's contents together,
/// so only the directories on the current path are open at a time.
struct TreeLinker {
    let source: Int32
    let target: Int32
    let shownTarget: String
    private var open: [(path: RelativePath, source: Int32, target: Int32)] = []

    init(source: Int32, target: Int32, shownTarget: String) {
        self.source = source
        self.target = target
        self.shownTarget = shownTarget
    }

    /// Links `tree` (a scan of `source`) into `target`, leaving out what `skip` says. Returns the
    /// tree the target now holds (`LocalTree.carried`: hashes carried to the links); `linked`
    /// gets each file linked with a verified hash, as a cache row for its stat in the target
    /// (the link moved its ctime).
    mutating func link(_ tree: LocalTree, skip: (LocalTree.Item) -> Bool,
                       linked: (RelativePath, CachedHash) throws(FerryError) -> Void) throws(FerryError) -> LocalTree {
        defer { closeAll(keeping: 0) }
        return try tree.carried { (item: LocalTree.Item) throws(FerryError) -> LocalEntry? in
            if item.entry.kind != .directory && skip(item) { return nil }
            guard let (from, to) = try directories(for: item.path.parent) else { return nil }
            let name = item.path.name
            if item.entry.kind == .directory {
                if mkdirat(to, name, mode_t(item.entry.mode & 0o7777)) != 0 && errno != EEXIST {
                    throw .localIO("cannot create directory \(Printable.name(shownTarget + "/" + item.path.string)): \(FileSystem.errorText())")
                }
            } else if linkat(from, name, to, name, 0) != 0 {
                switch errno {
                case EEXIST: break                  // a build resumed: what it holds stays
                case ENOENT, EMLINK: return nil     // gone since the scan; or linked too often: fetched anew
                default:
                    throw .localIO("cannot link \(Printable.name(item.path.string)) into \(Printable.name(shownTarget)): \(FileSystem.errorText())",
                                   hint: errno == EXDEV ? "the generations directory must be on the filesystem of local's directory" : nil)
                }
            }
            var st = stat()
            guard fstatat(to, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
            let now = FileSystem.entry(from: st)
            if let sha = item.verified, now.kind == .file, now.inode == item.entry.inode, now.size == item.entry.size, now.mtime == item.entry.mtime {
                try linked(item.path, CachedHash(now, sha256: sha, wanted: tree.wantedMtime(item.path)))
            }
            return now
        }
    }

    /// The open source and target directories holding `parent`'s children; nil when the source
    /// has none there any more.
    private mutating func directories(for parent: RelativePath?) throws(FerryError) -> (Int32, Int32)? {
        guard let parent else {
            closeAll(keeping: 0)
            return (source, target)
        }
        // Close what is not on the way to `parent`.
        var keep = open.count
        while keep > 0, !(open[keep - 1].path == parent || parent.string.hasPrefix(open[keep - 1].path.string + "/")) { keep -= 1 }
        closeAll(keeping: keep)
        if let top = open.last, top.path == parent { return (top.source, top.target) }
        let base = open.last?.path
        for dir in ([parent] + parent.ancestors).reversed() where base == nil || dir.string.count > base!.string.count {
            let (from, to) = open.last.map { ($0.source, $0.target) } ?? (source, target)
            let s = openat(from, dir.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard s >= 0 else { return nil }
            let t = openat(to, dir.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard t >= 0 else {
                let code = errno
                close(s)
                // A resumed build holds something else there now: its plan sees to it.
                if code == ENOTDIR || code == ELOOP || code == ENOENT { return nil }
                errno = code
                throw .localIO("cannot open \(Printable.name(shownTarget + "/" + dir.string)) in the generation being built: \(FileSystem.errorText())")
            }
            open.append((dir, s, t))
        }
        return (open.last!.source, open.last!.target)
    }

    private mutating func closeAll(keeping count: Int) {
        while open.count > count {
            let last = open.removeLast()
            close(last.source)
            close(last.target)
        }
    }
}

/// What `ferry status` says of a mirror kept as generations (`layout = generations`).
public struct GenerationStatus: Sendable {
    /// The generation `local` names (nil: none yet, or `local` is something else).
    public let current: String?
    /// The previous generations kept, oldest first.
    public let kept: [String]
    /// One an interrupted or incomplete run is building.
    public let building: String?

    public init(local: String) {
        let g = Generations(local: local)
        let present = g.present()
        var number: Int?
        if case let .generation(n) = g.current(), present.contains(n) { number = n }
        current = number.map(g.name)
        kept = present.filter { number == nil || $0 < number! }.map(g.name)
        building = present.last.flatMap { number != nil && $0 > number! ? g.name($0) : nil }
    }
}

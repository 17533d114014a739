import Glibc
import FerryCore

/// Files at their paths on a push's remote: whether they are still what this session placed, and
/// their removal (paths that changed type, deletions, the directories they emptied).
extension PushSync {
    /// The files this run would replace or delete that are not what ferry placed there (someone
    /// edited, replaced or removed them on the remote), with what is wrong with each. Every placed
    /// file is checked when the remote is a local directory (cheap), and over HTTP once
    /// `verify-interval` has passed since the last such check (a file left alone by the local tree
    /// but changed on the remote is found too).
    func editedOnRemote(plan: PushPlan, placed: [RelativePath: PlacedFile], everything: Bool, writer: RemoteWriting,
                                store: StateStore) throws(FerryError) -> [RelativePath: String] {
        guard !placed.isEmpty else { return [:] }
        var paths: [RelativePath]
        if everything {
            paths = Array(placed.keys)
        } else {
            let changing = plan.uploads.filter { $0.reason == .changed }.map(\.entry.path) + plan.deletions + plan.replacements
            paths = changing.filter { placed[$0] != nil }
        }
        guard !paths.isEmpty else { return [:] }
        paths.sort()
        let states = try RemoteProbes.run(paths, writer: writer, session: session, engine: engine)
        // A run killed between moving a file into place and recording it left the remote holding
        // that upload: the file is this session's, not someone else's change.
        var interrupted: [RelativePath: TransferTask] = [:]
        for task in try store.tasks(session: session.name) where task.state != .done { interrupted[task.path] = task }
        func mine(_ state: RemoteFileState, _ path: RelativePath) -> Bool {
            guard let task = interrupted[path], state.exists, state.size == task.size else { return false }
            return state.sha256.map { $0.hex == task.sha256 } ?? true
        }
        var edited: [RelativePath: String] = [:]
        for path in paths {
            guard let record = placed[path], let state = states[path], !state.matches(record), !mine(state, path) else { continue }
            edited[path] = state.exists
                ? "changed on the remote since ferry placed it (\(state.size.map { "\($0) bytes" } ?? "size unknown") now, \(record.size) placed)"
                : "gone from the remote since ferry placed it"
        }
        return edited
    }

    /// Removes what is in the way of the uploads (paths that changed type): remote files where the
    /// local tree now has a directory, and directories (holding only files ferry published, which
    /// go first) where it now has a file. A directory that holds anything else, or a removal the
    /// remote refuses, blocks the one upload that needs the place; the rest goes on. Not while the
    /// session's conditions hold its uploads back: the remote keeps them meanwhile. Returns the
    /// blocked paths and why.
    func clearTheWay(_ plan: PushPlan, local: Set<RelativePath>, writer: RemoteWriting, store: StateStore, held: Bool,
                             result: inout SyncResult) throws(FerryError) -> [RelativePath: String] {
        guard !held, !plan.replacements.isEmpty else { return [:] }
        var blocked: [RelativePath: String] = [:]
        try removeFiles(plan.replacements, writer: writer, store: store, result: &result) { path, error throws(FerryError) in
            if error.retryClass == .connectivity { throw error }
            for upload in [path] + path.ancestors where local.contains(upload) {
                blocked[upload] = "cannot remove \(Printable.name(path.string)) from the remote, which is in its way: \(error.message)"
            }
        }
        // The directories that now have to be files, and the ones in them the removals emptied,
        // deepest first.
        let directories = Set(plan.replacements.flatMap(\.ancestors)).filter { d in
            local.contains(d) || d.ancestors.contains(where: local.contains)
        }
        for directory in directories.sorted(by: >) {
            let needed = [directory] + directory.ancestors
            guard let file = needed.first(where: local.contains), blocked[file] == nil else { continue }
            do throws(FerryError) {
                if try !writer.removeDirectoryIfEmpty(directory) {
                    blocked[file] = "\(Printable.name(directory.string)) is a directory on the remote that still holds files ferry did not publish (or the server cannot list it); nothing in it was removed"
                }
            } catch {
                if error.retryClass == .connectivity { throw error }
                blocked[file] = "cannot remove the directory \(Printable.name(directory.string)) from the remote, which is in its way: \(error.message)"
            }
        }
        return blocked
    }

    /// Deletes remote files the local tree no longer has; returns how many failed.
    func delete(_ paths: [RelativePath], writer: RemoteWriting, store: StateStore, result: inout SyncResult) throws(FerryError) -> Int {
        var failed = 0
        try removeFiles(paths, writer: writer, store: store, result: &result) { path, error in
            failed += 1
            emit(.fileFailed(path: path, error: error.message))
        }
        result.counts.failed += failed
        return failed
    }

    /// Removes files from the remote, each said and no longer recorded as placed; `failure`
    /// decides about one the remote would not remove.
    func removeFiles(_ paths: [RelativePath], writer: RemoteWriting, store: StateStore, result: inout SyncResult,
                             failure: (RelativePath, FerryError) throws(FerryError) -> Void) throws(FerryError) {
        // Forgotten first: a run killed after a removal must not find the record of a file that is
        // gone and take it for someone else's removal.
        try store.forgetPlaced(session: session.name, paths)
        for path in paths {
            do throws(FerryError) {
                try writer.remove(path)
                result.counts.deleted += 1
                emit(.fileDeleted(path: path))
            } catch {
                try failure(path, error)
            }
        }
    }

    /// Removes the directories that held files the old manifest listed and hold none the new one
    /// lists, deepest first, each only if it is empty now (a directory someone else keeps files in
    /// stays).
    func removeEmptiedDirectories(_ gone: [RelativePath], listed entries: [ManifestEntry], writer: RemoteWriting) throws(FerryError) {
        guard !gone.isEmpty else { return }
        var listed = Set<RelativePath>()
        for entry in entries { listed.formUnion(entry.path.ancestors) }
        let candidates = Set(gone.flatMap(\.ancestors)).subtracting(listed).filter { $0.string != RelativePath.reservedTopLevel }
        for directory in candidates.sorted(by: >) {
            do throws(FerryError) { _ = try writer.removeDirectoryIfEmpty(directory) } catch {
                if error.retryClass == .connectivity { throw error }
                emit(.warning(message: "the emptied directory \(Printable.name(directory.string)) stays on the remote: \(error.message)"))
            }
        }
    }
}

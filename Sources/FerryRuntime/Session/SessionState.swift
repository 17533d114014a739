import Glibc
import FerryCore

/// What a run keeps on this machine for its session, besides the files it syncs: its records in
/// the state store, its files in the state directory (the manifest waiting to be accepted, the
/// metadata objects, the key sets followed, the mark of ctimes about to move) and its locks.
/// The stages of a cycle keep everything through this; a dry run keeps nothing, and is this with
/// every write declined (`DryRun`), so no stage asks whether it is a dry run. Reads go to the
/// store (`store`) and the session's files (`ManifestSource`) as they are.
protocol SessionState: AnyObject {
    var store: StateStore { get }
    /// The session's one writer (`SessionLock`), and the run recorded as started; nil: none taken.
    func beginRun(pid: Int32, deadline: Timestamp?) throws(FerryError) -> SessionLock?
    /// The run recorded as finished, with what it moved, and what its held files wait for.
    func endRun(_ result: SyncResult)
    /// One publisher of the session's remote at a time (`SessionLock.publisher`): held for the cycle.
    func lockPublisher() throws(FerryError) -> [SessionLock]

    func saveHashes(_ rows: [(RelativePath, CachedHash)]) throws(FerryError)
    func recordRollout(_ standing: RolloutStanding?) throws(FerryError)
    func forgetPlaced(_ paths: [RelativePath]) throws(FerryError)
    func recordRemoteChecked(at time: Timestamp) throws(FerryError)
    /// Whether the run may change what the remote holds outside its transfers (repair objects).
    var repairsRemote: Bool { get }

    /// A new manifest put aside until it is accepted; where (nil: not kept).
    func stage(_ manifest: [UInt8]) throws(FerryError) -> String?
    /// The session's metadata objects: what is fetched is kept in the cache, or in memory only.
    func objects(remote: Remote?, mirrors: ObjectMirrors?) -> ManifestObjects
    /// The key sets the session trusts (`KeyChain`): those followed are kept, or in memory only.
    func keyChain() -> KeyChain
    /// Marks, durably, that ferry is about to move the ctime of files whose rows the hash cache
    /// holds (removing hard links they share with the current generation): if the run is cut
    /// short before it writes their rows again, the next scan takes rows that differ from the
    /// file in ctime alone, and writes them again, instead of hashing every file.
    func expectCtimeMoves() throws(FerryError)
    /// The rows are written again: what `expectCtimeMoves` marked is done.
    func ctimesRenewed()
    var renewalPending: Bool { get }
}

/// The session's state as a run that changes things keeps it.
final class StoredState: SessionState {
    let store: StateStore
    private let session: SessionConfig
    private let manifests: ManifestSource
    private let stateDirectory: String

    init(store: StateStore, session: SessionConfig, stateDirectory: String) {
        self.store = store
        self.session = session
        self.stateDirectory = stateDirectory
        manifests = ManifestSource(session: session, state: stateDirectory)
    }

    func beginRun(pid: Int32, deadline: Timestamp?) throws(FerryError) -> SessionLock? {
        let lock = try SessionLock(stateDirectory: stateDirectory, session: session.name)
        try store.recordRunStarted(session: session.name, pid: pid, deadline: deadline)
        return lock
    }

    func endRun(_ result: SyncResult) {
        try? store.recordRunFinished(session: session.name, exitCode: result.exitCode.rawValue, message: result.message,
                                     fetched: result.counts.bytes, reused: result.counts.reused,
                                     sources: result.sources, fallbacks: result.fallbacks)
        try? store.recordHold(session: session.name, waitsFor: result.counts.heldFor)
    }

    /// Among the sessions of this state directory, and for a `file://` remote with any other
    /// process that publishes that directory (`manifest build`, a push from another state
    /// directory). Publishers on other machines are kept apart by the conditional manifest write
    /// and the grace period before objects are collected.
    func lockPublisher() throws(FerryError) -> [SessionLock] {
        var publishing = [try SessionLock.publisher(stateDirectory: stateDirectory, remote: session.remote.url,
                                                    manifest: session.manifest,
                                                    session: "session '\(session.name)'")]
        if let directory = session.remote.localDirectory, FileSystem.exists(directory) {
            publishing.append(try SessionLock.publisher(directory: directory, what: "ferry push of session "
                                                                                    + "'\(session.name)'"))
        }
        return publishing
    }

    func saveHashes(_ rows: [(RelativePath, CachedHash)]) throws(FerryError) {
        try store.saveHashes(session: session.name, rows)
    }
    func recordRollout(_ standing: RolloutStanding?) throws(FerryError) {
        try store.recordRollout(session: session.name, standing)
    }
    func forgetPlaced(_ paths: [RelativePath]) throws(FerryError) {
        try store.forgetPlaced(session: session.name, paths)
    }
    func recordRemoteChecked(at time: Timestamp) throws(FerryError) {
        try store.recordRemoteChecked(session: session.name, at: time)
    }
    var repairsRemote: Bool { true }

    func stage(_ manifest: [UInt8]) throws(FerryError) -> String? { try manifests.stage(manifest) }
    func objects(remote: Remote?, mirrors: ObjectMirrors?) -> ManifestObjects {
        let bad = BadObjects(path: manifests.path + ".bad-objects", keeps: true, clock: store.clock,
                             interval: session.verifyInterval)
        return manifests.objects(remote: remote, keeps: true, mirrors: mirrors, bad: bad)
    }
    func keyChain() -> KeyChain { KeyChain(session: session, state: stateDirectory, keeps: true) }

    func expectCtimeMoves() throws(FerryError) {
        guard !renewalPending else { return }
        // The manifests directory may not be there yet: a state directory replaced whole (a
        // damaged database) meets old generations before any manifest was kept.
        try FileSystem.makePrivateDirectory(manifests.directory)
        try FileSystem.writeAtomically(renewalMarker, bytes: [])
    }

    func ctimesRenewed() {
        if renewalPending {
            unlink(renewalMarker)
            FileSystem.syncDirectory(containing: renewalMarker)
        }
    }

    private var renewalMarker: String { manifests.path + ".renew-hashes" }
    var renewalPending: Bool { FileSystem.exists(renewalMarker) }
}

/// A dry run's state: the session's own (`base`), with every write declined. What a dry run
/// fetches (metadata objects, key sets) is kept in memory for the rest of the run; it takes no
/// lock and records no run, so it never waits for another process's.
final class DryRun: SessionState {
    private let base: SessionState
    private let session: SessionConfig
    private let stateDirectory: String

    init(_ base: SessionState, session: SessionConfig, stateDirectory: String) {
        self.base = base
        self.session = session
        self.stateDirectory = stateDirectory
    }

    var store: StateStore { base.store }
    func beginRun(pid: Int32, deadline: Timestamp?) throws(FerryError) -> SessionLock? { nil }
    func endRun(_ result: SyncResult) {}
    func lockPublisher() throws(FerryError) -> [SessionLock] { [] }
    func saveHashes(_ rows: [(RelativePath, CachedHash)]) throws(FerryError) {}
    func recordRollout(_ standing: RolloutStanding?) throws(FerryError) {}
    func forgetPlaced(_ paths: [RelativePath]) throws(FerryError) {}
    func recordRemoteChecked(at time: Timestamp) throws(FerryError) {}
    var repairsRemote: Bool { false }
    func stage(_ manifest: [UInt8]) throws(FerryError) -> String? { nil }
    func objects(remote: Remote?, mirrors: ObjectMirrors?) -> ManifestObjects {
        let manifests = ManifestSource(session: session, state: stateDirectory)
        let bad = BadObjects(path: manifests.path + ".bad-objects", keeps: false, clock: store.clock,
                             interval: session.verifyInterval)
        return manifests.objects(remote: remote, keeps: false, mirrors: mirrors, bad: bad)
    }
    func keyChain() -> KeyChain { KeyChain(session: session, state: stateDirectory, keeps: false) }
    func expectCtimeMoves() throws(FerryError) {}
    func ctimesRenewed() {}
    var renewalPending: Bool { base.renewalPending }
}

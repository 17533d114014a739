import FerryCore

/// How a running session honours `ferry cancel` from another process, for downloads and uploads
/// alike: the store is asked once a second; the tasks a new request suspended are stopped if they
/// run and dropped if they wait. The request is answered (`acknowledgeSuspensions`) once every
/// transfer it stopped has left the engine and the files finished before it took effect are
/// recorded done, so `ferry cancel` can say what really happened to each task.
final class Suspensions {
    private let session: String
    private let store: StateStore
    /// The request being carried out: its number, and the transfers asked to stop for it.
    private var open: (request: Int64, stopping: Set<Int64>)?
    private let clock: any Clock
    private var lastCheck: Double

    init(session: String, store: StateStore, clock: any Clock) {
        self.session = session
        self.store = store
        self.clock = clock
        lastCheck = clock.monotonic()
    }

    /// Called on every engine tick with the running transfers' task ids. `recordFinished` records
    /// what finished before an answer; `everySecond` runs before each check of the store. Returns
    /// the ids a new request suspended (the caller stops and drops them), or nil.
    func check(running: [Int64], recordFinished: () -> Void, everySecond: () throws(FerryError) -> Void) throws(FerryError) -> Set<Int64>? {
        if let (request, stopping) = open {
            guard !running.contains(where: stopping.contains) else { return nil }
            recordFinished()
            try store.acknowledgeSuspensions(session: session, upTo: request)
            open = nil
        }
        let now = clock.monotonic()
        guard now - lastCheck >= 1 else { return nil }
        lastCheck = now
        try everySecond()
        let (requested, handled) = try store.suspendRequests(session: session)
        guard requested > handled else { return nil }
        let ids = try store.suspendedTaskIDs(session: session)
        open = (requested, Set(running.filter(ids.contains)))
        return ids
    }

    /// Answers a request still open when the transfers end (nothing runs any more).
    func acknowledgeOpen() {
        guard let (request, _) = open else { return }
        try? store.acknowledgeSuspensions(session: session, upTo: request)
        open = nil
    }
}

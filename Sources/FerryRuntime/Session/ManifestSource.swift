import FerryCore

extension Remote {
    /// A session's manifest, asked conditionally when `etag` or `lastModified` is given; for a pull
    /// the manifest to mirror, for a push the one last published. A failure that may pass is tried
    /// again `retries` times after the transfers' backoff, unless the caller's schedule is the
    /// retry (`SyncOptions.retryManifest`, the agent) or the run must stop.
    func fetchManifest(of session: SessionConfig, etag: String?, lastModified: String?, options: SyncOptions,
                       emit: (Event.Body) -> Void) throws(FerryError) -> ManifestFetch {
        let url = session.manifestURL
        var attempt = 1
        while true {
            do throws(FerryError) {
                return try fetchManifest(url: url, etag: etag, lastModified: lastModified, maximumSize: session.maxManifestSize)
            } catch {
                guard options.retryManifest, error.retryClass != .never, attempt <= session.retries else { throw error }
                let delay = retryDelay(attempt: attempt, baseDelay: session.retryDelay, retryAfter: nil, jitter: Double.random(in: 0.5...1.0))
                attempt += 1
                emit(.manifestRetrying(url: url, attempt: attempt, delay: delay, error: error.message))
                let clock = options.stop.clock
                guard clock.wait(until: clock.monotonic() + delay, interrupted: { options.stop.reason != nil }) else { throw error }
            }
        }
    }
}

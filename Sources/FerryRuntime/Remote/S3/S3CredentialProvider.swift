import Synchronization
import FerryCore

/// Hands out the credentials an S3 request is signed with now (`SigV4` asks it per request), from
/// one source. Keys that do not expire are handed out as they are. Temporary ones (web identity,
/// container, EC2 instance metadata) are fetched again before they expire — when less than 5
/// minutes remain, or less than half their lifetime for short-lived ones — so a long-running
/// agent never signs with expired keys. A refresh that fails while the old keys still hold keeps
/// them and tries again a little later; once they have expired, a failing source is an error that
/// names it. Safe to use from any thread: a refresh happens under the lock, once.
final class S3CredentialProvider: Sendable {
    /// Where the credentials come from, in words (`S3CredentialSource.description`): never a secret.
    let source: String
    private let fetch: (@Sendable () throws(FerryError) -> S3Credentials)?
    private let state: Mutex<State>

    private struct State {
        var credentials: S3Credentials?
        /// When the current credentials were fetched (their lifetime runs from here), in Unix seconds.
        var fetchedAt = 0.0
        /// No refresh is tried before this (after one failed), in Unix seconds.
        var retryAt = 0.0
    }

    /// Keys that do not expire (the environment, a file).
    init(fixed credentials: S3Credentials, source: String) {
        self.source = source
        fetch = nil
        state = Mutex(State(credentials: credentials))
    }

    /// Temporary keys, fetched by `fetch` when first needed and again before they expire.
    init(source: String, fetch: @escaping @Sendable () throws(FerryError) -> S3Credentials) {
        self.source = source
        self.fetch = fetch
        state = Mutex(State())
    }

    /// The longest a refresh waits before the credentials' end: 5 minutes, or half the lifetime
    /// of short-lived ones.
    static let refreshAhead = 300.0
    /// Keys this close to their end are not used: a request signed now must still hold when the
    /// store reads it.
    static let expiryMargin = 5.0

    /// The access key of keys that do not expire, shortened (`AKIA…MPLE`), for `config show`,
    /// which names what it knows without the network; nil for temporary ones, not fetched there.
    var fixedAccessKeyHint: String? {
        guard fetch == nil, let key = state.withLock({ $0.credentials?.accessKey }) else { return nil }
        return key.count > 12 ? String(key.prefix(4)) + "…" + String(key.suffix(4)) : "…"
    }

    /// The credentials to sign with now.
    func current(now: Timestamp = Timestamp.now()) throws(FerryError) -> S3Credentials {
        guard let fetch else { return state.withLock { $0.credentials! } }
        return try state.withLock { (state: inout State) throws(FerryError) -> S3Credentials in
            if let held = state.credentials, let expiration = held.expiration {
                let lifetime = max(0, expiration.timeInterval - state.fetchedAt)
                let refreshAt = expiration.timeInterval - min(Self.refreshAhead, lifetime / 2)
                let usable = now.timeInterval < expiration.timeInterval - min(Self.expiryMargin, lifetime / 4)
                if usable && (now.timeInterval < refreshAt || now.timeInterval < state.retryAt) { return held }
                do throws(FerryError) {
                    return try Self.take(fetch(), into: &state, now: now, source: source)
                } catch {
                    guard usable else {
                        throw FerryError(.remote, "the S3 credentials from \(source) expired at \(expiration.rfc3339) and could not be renewed: \(error.message)",
                                         hint: error.hint ?? "check that the source answers again; ferry renews the credentials on the next request", cause: error.cause)
                    }
                    // Tried again soon, and well before the old keys run out.
                    let left = expiration.timeInterval - now.timeInterval
                    state.retryAt = now.timeInterval + max(1, min(30, left / 4))
                    return held
                }
            }
            if let held = state.credentials, held.expiration == nil { return held }
            return try Self.take(fetch(), into: &state, now: now, source: source)
        }
    }

    /// Takes freshly fetched credentials, refusing ones that have run out already (a source with a
    /// wrong clock, or a hostile one).
    private static func take(_ fresh: S3Credentials, into state: inout State, now: Timestamp, source: String) throws(FerryError) -> S3Credentials {
        if let expiration = fresh.expiration, expiration.timeInterval - expiryMargin <= now.timeInterval {
            throw FerryError(.remote, "\(source) gave S3 credentials that expire at \(expiration.rfc3339), which is not after now (\(now.rfc3339))",
                             hint: "check the clocks of this machine and of the credentials' source", cause: .unusable)
        }
        state.credentials = fresh
        state.fetchedAt = now.timeInterval
        state.retryAt = now.timeInterval
        return fresh
    }
}

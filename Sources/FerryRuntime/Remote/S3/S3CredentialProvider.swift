import Synchronization
import FerryCore

/// Hands out the credentials an S3 request is signed with now (`SigV4` asks it per request), from
/// one source. Keys that do not expire are handed out as they are. Temporary ones (web identity,
/// container, EC2 instance metadata) are fetched again before they expire — when less than 5
/// minutes remain, or less than half their lifetime for short-lived ones — so a long-running
/// agent never signs with expired keys.
///
/// Requests are signed on the engine's thread, which must never wait for a credentials source: a
/// renewal while the held keys still hold runs on a thread of its own, and the held keys sign
/// meanwhile; one that fails is tried again a little later. Only when no usable keys are held (the
/// first request, or after they expired) does the caller fetch, and a fetch that failed then is
/// not tried again for `failureBackoff`: requests in between fail at once with its error, which
/// names the source. Safe to use from any thread.
final class S3CredentialProvider: Sendable {
    /// Where the credentials come from, in words (`S3CredentialSource.description`): never a secret.
    let source: String
    private let fetch: (@Sendable () throws(FerryError) -> S3Credentials)?
    private let state: Mutex<State>

    private struct State {
        var credentials: S3Credentials?
        /// When the current credentials were fetched (their lifetime runs from here), in Unix seconds.
        var fetchedAt = 0.0
        /// No fetch is tried before this (after one failed), in Unix seconds.
        var retryAt = 0.0
        /// A renewal runs on its own thread now.
        var renewing = false
        /// Why the last fetch without usable keys failed, said again until `retryAt`.
        var failure: FerryError?
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
    /// How long a fetch that failed with no usable keys held is not tried again.
    static let failureBackoff = 5.0

    /// The access key of keys that do not expire, shortened (`AKIA…MPLE`), for `config show`,
    /// which names what it knows without the network; nil for temporary ones, not fetched there.
    var fixedAccessKeyHint: String? {
        guard fetch == nil, let key = state.withLock({ $0.credentials?.accessKey }) else { return nil }
        return key.count > 12 ? String(key.prefix(4)) + "…" + String(key.suffix(4)) : "…"
    }

    /// What a request does about its keys.
    private enum Plan {
        case use(S3Credentials)
        case renewBeside(S3Credentials)
        case fetchNow
        case fail(FerryError)
    }

    /// The credentials to sign with now.
    func current(now: Timestamp) throws(FerryError) -> S3Credentials {
        guard let fetch else { return state.withLock { $0.credentials! } }
        let plan = state.withLock { (state: inout State) -> Plan in
            if let held = state.credentials, let expiration = held.expiration {
                let lifetime = max(0, expiration.timeInterval - state.fetchedAt)
                let refreshAt = expiration.timeInterval - min(Self.refreshAhead, lifetime / 2)
                let usable = now.timeInterval < expiration.timeInterval - min(Self.expiryMargin, lifetime / 4)
                if usable {
                    guard now.timeInterval >= refreshAt, now.timeInterval >= state.retryAt, !state.renewing else { return .use(held) }
                    state.renewing = true
                    return .renewBeside(held)
                }
            } else if let held = state.credentials {
                return .use(held)
            }
            if let failure = state.failure, now.timeInterval < state.retryAt { return .fail(failure) }
            return .fetchNow
        }
        switch plan {
        case .use(let held):
            return held
        case .fail(let error):
            throw error
        case .renewBeside(let held):
            do throws(FerryError) {
                try Threads.start(name: "ferry-credentials") { [self] in renew(fetch, now: now) }
            } catch {
                // No thread for it: the held keys go on, and the next request tries again.
                state.withLock { $0.renewing = false }
            }
            return held
        case .fetchNow:
            return try state.withLock { (state: inout State) throws(FerryError) -> S3Credentials in
                // Another caller may have fetched while this one waited for the lock.
                if let held = state.credentials, let expiration = held.expiration, now.timeInterval < expiration.timeInterval - Self.expiryMargin {
                    return held
                }
                do throws(FerryError) {
                    let fresh = try Self.take(fetch(), into: &state, now: now, source: source)
                    state.failure = nil
                    return fresh
                } catch {
                    var failure = error
                    if let expiration = state.credentials?.expiration {
                        failure = FerryError(.remote, "the S3 credentials from \(source) expired at \(expiration.rfc3339) and could not be renewed: \(error.message)",
                                             hint: error.hint ?? "check that the source answers again; ferry renews the credentials on the next request", cause: error.cause)
                    }
                    state.failure = failure
                    state.retryAt = now.timeInterval + Self.failureBackoff
                    throw failure
                }
            }
        }
    }

    /// A renewal beside the held keys: taken when it works, tried again a little later (and well
    /// before the held keys run out) when it does not.
    private func renew(_ fetch: @Sendable () throws(FerryError) -> S3Credentials, now: Timestamp) {
        let result: Result<S3Credentials, FerryError>
        do throws(FerryError) { result = .success(try fetch()) } catch { result = .failure(error) }
        state.withLock { state in
            state.renewing = false
            if case .success(let fresh) = result, (try? Self.take(fresh, into: &state, now: now, source: source)) != nil { return }
            let left = (state.credentials?.expiration?.timeInterval ?? now.timeInterval) - now.timeInterval
            state.retryAt = now.timeInterval + max(1, min(30, left / 4))
        }
    }

    /// Takes freshly fetched credentials, refusing ones that have run out already (a source with a
    /// wrong clock, or a hostile one).
    private static func take(_ fresh: S3Credentials, into state: inout State, now: Timestamp, source: String) throws(FerryError) -> S3Credentials {
        if let expiration = fresh.expiration, expiration.timeInterval - expiryMargin <= now.timeInterval {
            let left = expiration.timeInterval - now.timeInterval
            let said = left <= 0 ? "which is not after now (\(now.rfc3339))"
                : "\(Units.formatDuration(left)) from now (\(now.rfc3339)), too soon to sign a request with (ferry wants \(Units.formatDuration(expiryMargin)) or more)"
            throw FerryError(.remote, "\(source) gave S3 credentials that expire at \(expiration.rfc3339), \(said)",
                             hint: "check the clocks of this machine and of the credentials' source", cause: .unusable)
        }
        state.credentials = fresh
        state.fetchedAt = now.timeInterval
        state.retryAt = now.timeInterval
        return fresh
    }
}

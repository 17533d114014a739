import CSystem
import Dispatch
import Glibc
import FerryCore

/// Starts a detached thread with pthreads directly: Foundation's `Thread` would load Foundation
/// and ICU into every ferry process (measured: +9 MiB RSS and ~0.2 s on a 10,000-file sync).
/// A thread that cannot be had (the machine, the user or the cgroup is out of threads or
/// processes) is an error the caller reports and retries or works around, never a crash
/// (docs/design.md, data-safety rule 13).
enum Threads {
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// `name` says what the thread is for (in errors, and as the thread's name in `top -H` and
    /// /proc/PID/task/TID/comm, cut to the kernel's 15 bytes).
    static func start(name: String, _ body: @escaping @Sendable () -> Void) throws(FerryError) {
        let shortName = String(decoding: name.utf8.prefix(15), as: UTF8.self)
        let context = Unmanaged.passRetained(Body {
            _ = ferry_name_thread(shortName)
            body()
        }).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { context in
            Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
        guard rc == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            throw unavailable(name, rc)
        }
        pthread_detach(thread)
    }

    /// The error for a thread that could not be started.
    static func unavailable(_ name: String, _ code: Int32) -> FerryError {
        FerryError(.localIO, "cannot start a thread (\(name)): \(String(cString: strerror(code)))",
                   hint: "the machine or this user is out of threads or processes (ulimit -u, TasksMax, kernel.pid_max, kernel.threads-max); ferry tries again",
                   cause: .local(errno: code))
    }
}

/// Work handed to a thread of its own while the starting thread does something else; `wait()`
/// returns its result (once). What `body` touches belongs to that thread until `wait()` returns,
/// which is why it need not be Sendable. With a body that cannot fail, `wait()` cannot either.
/// When no thread can be had, `init` throws and the caller does the work itself.
final class BackgroundWork<Value, Failure: Error>: @unchecked Sendable {
    private var result: Result<Value, Failure>?
    private let done = DispatchSemaphore(value: 0)

    init(name: String, _ body: @escaping () throws(Failure) -> Value) throws(FerryError) {
        let handoff = UncheckedHandoff(body)
        try Threads.start(name: name) { [self] in
            result = Result { () throws(Failure) -> Value in try handoff.body() }
            done.signal()
        }
    }

    func wait() throws(Failure) -> Value {
        done.wait()
        return try result!.get()
    }

    private struct UncheckedHandoff: @unchecked Sendable {
        let body: () throws(Failure) -> Value
        init(_ body: @escaping () throws(Failure) -> Value) { self.body = body }
    }
}

/// Work on `count` items spread over up to `lanes` threads, the calling one among them, for
/// requests that each wait on a server (metadata objects fetched or sent): lane k takes items k,
/// k + lanes, … and stops at its first error. A thread that cannot be had leaves its lane to the
/// calling thread. Returns each item's result (nil where its lane stopped before it) and the
/// first error.
enum Lanes {
    static func run<T>(_ count: Int, lanes: Int, name: String, _ body: @escaping (Int) throws(FerryError) -> T) -> (results: [T?], error: FerryError?) {
        let lanes = max(1, min(lanes, count))
        func lane(_ k: Int) -> ([(Int, T)], FerryError?) {
            var out: [(Int, T)] = []
            for i in stride(from: k, to: count, by: lanes) {
                do throws(FerryError) { out.append((i, try body(i))) } catch { return (out, error) }
            }
            return (out, nil)
        }
        var results = [T?](repeating: nil, count: count)
        var firstError: FerryError?
        func take(_ lane: ([(Int, T)], FerryError?)) {
            for (i, value) in lane.0 { results[i] = value }
            if firstError == nil { firstError = lane.1 }
        }
        var workers: [BackgroundWork<([(Int, T)], FerryError?), Never>] = []
        var inline = [0]
        for k in 1..<lanes {
            if let w = try? BackgroundWork(name: name, { () -> ([(Int, T)], FerryError?) in lane(k) }) { workers.append(w) } else { inline.append(k) }
        }
        for k in inline { take(lane(k)) }
        for w in workers { take(w.wait()) }
        return (results, firstError)
    }
}

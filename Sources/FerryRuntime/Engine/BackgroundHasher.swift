import Glibc
import FerryCore

/// Hashes a large download on a second thread, so that on a 2-core machine receiving and hashing
/// overlap instead of taking turns. The writer fills 1 MiB buffers from a small pool, writes each
/// to the partial file, and hands it over with `submit`; this thread hashes it from memory and
/// returns it to the pool. A resumed download's prefix is first hashed from the file.
/// Uploads use it the same way: a file is read ahead into its buffers, and each is hashed once sent.
/// A file below `threshold` is not worth a thread: it gets one buffer, hashed as it is submitted.
/// All shared state is guarded by one pthread mutex (hence `@unchecked Sendable`).
final class BackgroundHasher: @unchecked Sendable {
    static let threshold: Int64 = 8 << 20
    static let bufferSize = 1 << 20
    private static let bufferCount = 8
    /// The size of each buffer (`bufferSize`, or less for a small file).
    let pieceSize: Int

    private let fd: Int32
    private let prefix: Int64
    private let hasher = SHA256Hasher()
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let work = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private let returned = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private let buffers: [UnsafeMutableRawPointer]
    private var free: [UnsafeMutableRawPointer]
    private var queue: [(UnsafeMutableRawPointer, Int)] = []
    private var closing = false
    private var cancelled = false
    private var failed = false
    private var thread = pthread_t()
    private var joined = false

    /// Starts a hasher whose first `prefix` bytes are read from `fd` (a resumed partial file).
    /// `size`: how large the whole file is, when known; below `threshold` no thread is started.
    init(fd: Int32, prefix: Int64, size: Int64? = nil) {
        self.fd = fd
        self.prefix = prefix
        let small = size.map { $0 < BackgroundHasher.threshold } ?? false
        pieceSize = small ? Int(max(1, min(size!, Int64(BackgroundHasher.bufferSize)))) : BackgroundHasher.bufferSize
        buffers = (0..<(small ? 1 : BackgroundHasher.bufferCount)).map { [pieceSize] _ in
            UnsafeMutableRawPointer.allocate(byteCount: pieceSize, alignment: 4096)
        }
        free = buffers
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(work, nil)
        pthread_cond_init(returned, nil)
        if small {
            threadless = true
            joined = true
            if prefix > 0 {
                do { try hasher.update(fileDescriptor: fd, length: prefix) } catch { failed = true }
            }
            return
        }
        let context = Unmanaged.passRetained(self).toOpaque()
        let rc = pthread_create(&thread, nil, { context in
            let hasher = Unmanaged<BackgroundHasher>.fromOpaque(context!).takeRetainedValue()
            hasher.loop()
            return nil
        }, context)
        if rc != 0 {
            // No thread to be had: hash on the caller's thread instead (see `submit`).
            Unmanaged<BackgroundHasher>.fromOpaque(context).release()
            threadless = true
            joined = true
            if prefix > 0 {
                do { try hasher.update(fileDescriptor: fd, length: prefix) } catch { failed = true }
            }
        }
    }

    /// Set when no thread could be created: buffers are hashed as they are submitted.
    private var threadless = false

    deinit {
        pthread_mutex_destroy(mutex)
        pthread_cond_destroy(work)
        pthread_cond_destroy(returned)
        mutex.deallocate()
        work.deallocate()
        returned.deallocate()
        buffers.forEach { $0.deallocate() }
    }

    /// An empty buffer of `pieceSize` bytes (waits while all are being hashed).
    func acquire() -> UnsafeMutableRawPointer {
        pthread_mutex_lock(mutex)
        while free.isEmpty { pthread_cond_wait(returned, mutex) }
        let buffer = free.removeLast()
        pthread_mutex_unlock(mutex)
        return buffer
    }

    /// Hands over a buffer holding the next `count` bytes of the file.
    func submit(_ buffer: UnsafeMutableRawPointer, count: Int) {
        if threadless {
            if !failed { hasher.update(buffer, count: count) }
            release(buffer)
            return
        }
        pthread_mutex_lock(mutex)
        queue.append((buffer, count))
        pthread_cond_signal(work)
        pthread_mutex_unlock(mutex)
    }

    /// Gives back a buffer without hashing it.
    func release(_ buffer: UnsafeMutableRawPointer) {
        pthread_mutex_lock(mutex)
        free.append(buffer)
        pthread_cond_signal(returned)
        pthread_mutex_unlock(mutex)
    }

    /// Waits until everything submitted is hashed; the digest, or nil if the prefix could not be read.
    func finish() -> SHA256Digest? {
        pthread_mutex_lock(mutex)
        closing = true
        pthread_cond_signal(work)
        pthread_mutex_unlock(mutex)
        join()
        return failed ? nil : hasher.finalize()
    }

    /// Stops without a result (the download failed, restarted or was interrupted).
    func cancel() {
        pthread_mutex_lock(mutex)
        cancelled = true
        pthread_cond_signal(work)
        pthread_mutex_unlock(mutex)
        join()
    }

    private func join() {
        guard !joined else { return }
        pthread_join(thread, nil)
        joined = true
    }

    private func loop() {
        // Below the receiving thread: when the two cores are busy, receiving (which drains the
        // socket into the partial file, where checkpoints cover it) goes first; hashing catches up
        // from the buffer pool.
        // Five steps nicer than the process (on Linux, who = 0 is the calling thread): relative, so
        // under a unit's Nice=10 it still goes below the receiving threads.
        errno = 0
        let nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        if errno == 0 { setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, min(19, nice + 5)) }
        if prefix > 0 {
            do { try hasher.update(fileDescriptor: fd, length: prefix) } catch { failed = true }
        }
        pthread_mutex_lock(mutex)
        while !cancelled {
            if !queue.isEmpty {
                let (buffer, count) = queue.removeFirst()
                pthread_mutex_unlock(mutex)
                if !failed { hasher.update(buffer, count: count) }
                pthread_mutex_lock(mutex)
                free.append(buffer)
                pthread_cond_signal(returned)
                continue
            }
            if closing { break }
            pthread_cond_wait(work, mutex)
        }
        pthread_mutex_unlock(mutex)
    }
}

import CCrypto
import Glibc
import FerryCore

/// SHA-256 through OpenSSL's libcrypto (it uses the CPU's SHA instructions: ~2 GB/s here, 5.6× a
/// pure-Swift implementation). One instance is owned by one thread at a time.
public final class SHA256Hasher {
    private let context: OpaquePointer
    /// Whether `context` must be initialised before the next update (it is done lazily, so a
    /// hasher made or finalised and then dropped costs no initialisation).
    private var fresh = true

    /// SHA-256 fetched from OpenSSL's provider once: `EVP_sha256()` makes every init look it up
    /// again (about a fifth of a small file's hashing cost).
    nonisolated(unsafe) private static let algorithm: OpaquePointer? = EVP_MD_fetch(nil, "SHA2-256", nil)

    public init() {
        context = EVP_MD_CTX_new()
    }

    deinit { EVP_MD_CTX_free(context) }

    private func begin() {
        if let algorithm = SHA256Hasher.algorithm { EVP_DigestInit_ex(context, algorithm, nil) } else { EVP_DigestInit_ex(context, EVP_sha256(), nil) }
        fresh = false
    }

    public func update(_ pointer: UnsafeRawPointer, count: Int) {
        if fresh { begin() }
        EVP_DigestUpdate(context, pointer, count)
    }

    public func reset() { fresh = true }

    /// The digest; the hasher is reset afterwards.
    public func finalize() -> SHA256Digest {
        withUnsafeTemporaryAllocation(byteCount: 32, alignment: 8) { buffer in
            var length: UInt32 = 0
            if fresh { begin() }
            EVP_DigestFinal_ex(context, buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), &length)
            reset()
            return SHA256Digest(bytes: UnsafeRawBufferPointer(buffer))
        }
    }

    /// The digest of `bytes` alone (the hasher is reset before and after): one hasher hashes many
    /// small objects without a new context each.
    public func digest(of bytes: UnsafeRawBufferPointer) -> SHA256Digest {
        reset()
        update(bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, count: bytes.count)
        return finalize()
    }

    /// The digest of bytes in memory.
    public static func digest(of bytes: [UInt8]) -> SHA256Digest {
        bytes.withUnsafeBytes { SHA256Hasher().digest(of: $0) }
    }

    /// Hashes `length` bytes of an open file from offset 0 (or all of it when nil) into this hasher.
    /// Returns the number of bytes read.
    @discardableResult
    public func update(fileDescriptor fd: Int32, length: Int64? = nil) throws(FerryError) -> Int64 {
        // A small file (most of a tree) takes a buffer of its size and no read-ahead advice.
        let chunk = Int(min(Int64(1 << 20), max(1, length ?? Int64.max)))
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 4096)
        defer { buffer.deallocate() }
        if chunk == 1 << 20 { posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL) }
        var total: Int64 = 0
        while length.map({ total < $0 }) ?? true {
            let want = length.map { Int(min(Int64(chunk), $0 - total)) } ?? chunk
            let n = pread(fd, buffer, want, off_t(total))
            if n < 0 {
                if errno == EINTR { continue }
                throw .localIO("reading for SHA-256 failed: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            update(buffer, count: n)
            total += Int64(n)
        }
        return total
    }

}

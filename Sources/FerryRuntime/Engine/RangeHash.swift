import CCurl
import Glibc
import FerryCore

/// The SHA-256 of a range of an open file, taken by the engine a few MiB per step between its
/// polls (no request): what an upload that must name its bytes' hash before sending them needs
/// first (an S3 part, signed and checked by its hash).
final class RangeHash: Transfer {
    let fd: Int32
    let range: Range<Int64>
    /// The hash, once the step ended.
    private(set) var digest: SHA256Digest?
    private let hasher = SHA256Hasher()
    private var done: Int64 = 0
    private var buffer: UnsafeMutableRawPointer?
    private static let stepSize = 4 << 20
    var cancelRequested = false
    var throttle: Throttle?

    init(fd: Int32, range: Range<Int64>) {
        self.fd = fd
        self.range = range
    }

    deinit { buffer?.deallocate() }

    var mode: TransferMode { .steps }
    func prepare(_ easy: EasyHandle, context: UnsafeMutableRawPointer) {}
    func finish(code: CURLcode, errorText: String?) -> TransferOutcome { .succeeded }

    func step() -> TransferOutcome? {
        let buffer = self.buffer ?? UnsafeMutableRawPointer.allocate(byteCount: RangeHash.stepSize, alignment: 64)
        self.buffer = buffer
        let size = range.upperBound - range.lowerBound
        let wanted = Int(min(Int64(RangeHash.stepSize), size - done))
        if wanted > 0 {
            let n = pread(fd, buffer, wanted, off_t(range.lowerBound + done))
            if n < 0 && errno == EINTR { return nil }
            guard n > 0 else {
                let code = errno
                return .failed(TransferFailure(message: n < 0 ? "cannot read the file: \(FileSystem.errorText(code))" : "the file shrank while it was read",
                                               keepPartial: false, cause: n < 0 ? .local(errno: code) : .sourceChanged))
            }
            hasher.update(buffer, count: n)
            done += Int64(n)
            if done < size { return nil }
        }
        digest = hasher.finalize()
        return .succeeded
    }
}

import FerryCore
import Glibc

/// A regular file of the state mapped read-only, so that a large manifest is parsed without a copy
/// of it on the heap: what the parser has passed is given back (`release(before:)`), and only a
/// window of the file is resident at a time. A 1,000,000-entry flat manifest is ~165 MB; read into
/// memory it sat beside the entries parsed from it and the scan's tree.
///
/// A filesystem that cannot map files has the file read into memory instead, as before. Only
/// files of the state directory are mapped: ferry replaces them by rename and never
/// truncates one in place, so a mapping never loses its pages (a file cut short under a mapping
/// would end the process with SIGBUS).
final class MappedFile {
    /// The mapping (empty when the file was read instead, or is empty).
    private let mapped: UnsafeBufferPointer<UInt8>
    /// The file's bytes when its filesystem does not map files.
    private let copy: [UInt8]?
    /// Where the pages not yet given back begin.
    private var released = 0
    private static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Maps `path`, refusing anything but a regular file, and anything larger than `limit` bytes
    /// (as `FileSystem.readFile` does); without `mapping` (tests), reads it as an unmappable file.
    init(_ path: String, limit: Int, mapping: Bool = true) throws(FerryError) {
        let fd = try FileSystem.openRegularFile(path)
        defer { close(fd) }
        var st = stat()
        let size = fstat(fd, &st) == 0 ? Int(st.st_size) : 0
        guard size <= limit else { throw FileSystem.tooLarge(path, limit: limit) }
        if mapping, size > 0, let base = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), base != MAP_FAILED {
            _ = madvise(base, size, MADV_SEQUENTIAL)
            (mapped, copy) = (UnsafeBufferPointer(start: base.assumingMemoryBound(to: UInt8.self), count: size), nil)
        } else {
            (mapped, copy) = (UnsafeBufferPointer(start: nil, count: 0), try FileSystem.read(fd: fd, limit: limit, shown: path))
        }
    }

    /// Runs `body` with the file's bytes.
    func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws(FerryError) -> R) throws(FerryError) -> R {
        guard let copy else { return try body(mapped) }
        do {
            return try copy.withUnsafeBufferPointer { (bytes) throws(FerryError) -> R in try body(bytes) }
        }
    }

    /// Gives back the whole pages before `offset`: they are read from the file again if touched.
    func release(before offset: Int) {
        guard let base = mapped.baseAddress else { return }
        let end = min(offset, mapped.count) / MappedFile.pageSize * MappedFile.pageSize
        guard end > released else { return }
        _ = madvise(UnsafeMutableRawPointer(mutating: base) + released, end - released, MADV_DONTNEED)
        released = end
    }

    deinit {
        if let base = mapped.baseAddress { munmap(UnsafeMutableRawPointer(mutating: base), mapped.count) }
    }
}

import FerryCore
import Glibc

/// A regular file of the state mapped read-only, so that a large manifest is parsed without a copy
/// of it on the heap: what the parser has passed is given back (`release(before:)`), and only a
/// window of the file is resident at a time. A 1,000,000-entry flat manifest is ~165 MB; read into
/// memory it sat beside the entries parsed from it and the scan's tree.
///
/// Only files of the state directory are mapped: ferry replaces them by rename and never
/// truncates one in place, so a mapping never loses its pages (a file cut short under a mapping
/// would end the process with SIGBUS).
final class MappedFile {
    let bytes: UnsafeBufferPointer<UInt8>
    /// Where the pages not yet given back begin.
    private var released = 0
    private static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Maps `path`, refusing anything but a regular file, and anything larger than `limit` bytes
    /// (as `FileSystem.readFile` does).
    init(_ path: String, limit: Int) throws(FerryError) {
        let fd = try FileSystem.openRegularFile(path)
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw .localIO("cannot read \(Printable.name(path)): \(FileSystem.errorText())") }
        let size = Int(st.st_size)
        guard size <= limit else { throw .localIO("\(Printable.name(path)) is larger than \(Units.formatBytes(Int64(limit)))") }
        guard size > 0 else {
            bytes = UnsafeBufferPointer(start: nil, count: 0)
            return
        }
        guard let base = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), base != MAP_FAILED else {
            throw .localIO("cannot read \(Printable.name(path)): \(FileSystem.errorText())")
        }
        _ = madvise(base, size, MADV_SEQUENTIAL)
        bytes = UnsafeBufferPointer(start: base.assumingMemoryBound(to: UInt8.self), count: size)
    }

    /// Gives back the whole pages before `offset`: they are read from the file again if touched.
    func release(before offset: Int) {
        guard let base = bytes.baseAddress else { return }
        let end = min(offset, bytes.count) / MappedFile.pageSize * MappedFile.pageSize
        guard end > released else { return }
        _ = madvise(UnsafeMutableRawPointer(mutating: base) + released, end - released, MADV_DONTNEED)
        released = end
    }

    deinit {
        if let base = bytes.baseAddress { munmap(UnsafeMutableRawPointer(mutating: base), bytes.count) }
    }
}

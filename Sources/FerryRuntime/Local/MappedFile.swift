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
    let bytes: UnsafeBufferPointer<UInt8>
    /// Where the pages not yet given back begin.
    private var released = 0
    /// The file was read into memory instead: its filesystem does not map files.
    private let copied: Bool
    private static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Maps `path`, refusing anything but a regular file, and anything larger than `limit` bytes
    /// (as `FileSystem.readFile` does); without `mapping` (tests), reads it as an unmappable file.
    init(_ path: String, limit: Int, mapping: Bool = true) throws(FerryError) {
        let fd = try FileSystem.openRegularFile(path)
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw .localIO("cannot read \(Printable.name(path)): \(FileSystem.errorText())") }
        let size = Int(st.st_size)
        guard size <= limit else { throw .localIO("\(Printable.name(path)) is larger than \(Units.formatBytes(Int64(limit)))") }
        guard size > 0 else {
            (bytes, copied) = (UnsafeBufferPointer(start: nil, count: 0), false)
            return
        }
        if mapping, let base = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), base != MAP_FAILED {
            _ = madvise(base, size, MADV_SEQUENTIAL)
            (bytes, copied) = (UnsafeBufferPointer(start: base.assumingMemoryBound(to: UInt8.self), count: size), false)
            return
        }
        let copy = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: size)
        var got = 0
        while got < size {
            let n = pread(fd, copy.baseAddress! + got, size - got, off_t(got))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let why = n == 0 ? "it was cut short while read" : FileSystem.errorText()
                copy.deallocate()
                throw .localIO("cannot read \(Printable.name(path)): \(why)")
            }
            got += n
        }
        (bytes, copied) = (UnsafeBufferPointer(copy), true)
    }

    /// Gives back the whole pages before `offset`: they are read from the file again if touched.
    func release(before offset: Int) {
        guard let base = bytes.baseAddress, !copied else { return }
        let end = min(offset, bytes.count) / MappedFile.pageSize * MappedFile.pageSize
        guard end > released else { return }
        _ = madvise(UnsafeMutableRawPointer(mutating: base) + released, end - released, MADV_DONTNEED)
        released = end
    }

    deinit {
        guard let base = bytes.baseAddress else { return }
        if copied { UnsafeMutableBufferPointer(mutating: bytes).deallocate() } else { munmap(UnsafeMutableRawPointer(mutating: base), bytes.count) }
    }
}

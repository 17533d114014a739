import Glibc
import FerryCore

/// What has arrived of one large metadata object (a content index's or a tree's bundle): its
/// bytes written to `<cache>/<sha256>.part` as they come (`Remote.fetchKept`), so a run killed or
/// cut off while it comes leaves them, and the next asks only for the rest. The part is checked
/// only with the whole object, against its name; a part that was wrong costs one fetch of the
/// whole (`ManifestObjects`). The file is opened without following a symlink planted at its
/// name (nothing is kept then), and is gone once the object is whole or when the run's cache is
/// swept (its name is not an object's).
final class ObjectPart {
    let path: String
    /// The object's size, as the name that leads to it says.
    let size: Int64
    private var fd: Int32 = -1
    /// Whether the part cannot be written (a planted symlink, no space): the object still comes.
    private var unwritable = false
    /// Bytes of an earlier run this one resumed from (0: it fetched the whole object).
    private(set) var resumedFrom: Int64 = 0

    init(path: String, size: Int64) {
        self.path = path
        self.size = size
    }

    deinit { closeFile() }

    /// The part's file closed: the next write opens it again, and cuts it where that write begins.
    private func closeFile() {
        if fd >= 0 { close(fd) }
        fd = -1
    }

    /// The bytes an earlier run kept: none when there is no part, or it is not shorter than the
    /// object (then it is no use: the whole is asked).
    func kept() -> [UInt8] {
        guard size > 1 else { return [] }
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_size < size,
              let bytes = try? FileSystem.read(fd: fd, limit: Int(size - 1), shown: path) else { return [] }
        return bytes
    }

    /// Writes `bytes` at `offset` of the object; the first write of a run cuts the part there.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        guard !unwritable, let base = bytes.baseAddress else { return }
        if fd < 0 {
            fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
            var st = stat()
            guard fd >= 0, fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, ftruncate(fd, off_t(offset)) == 0 else {
                unwritable = true
                return
            }
        }
        if !FileSystem.write(fd: fd, base, count: bytes.count, at: offset) { unwritable = true }
    }

    /// The object is whole (or its part is of no use): the part goes.
    func discard() {
        closeFile()
        resumedFrom = 0
        unlink(path)
    }

    /// The object from the bytes an earlier run kept and the rest, asked for by `ask` (given the
    /// `Range` header's value, the most the answer may hold, and the spill that writes it on into
    /// the part as it comes); nil when nothing was kept or the rest was not given as asked (the
    /// caller then asks for the whole, into `wholeSpill`). A failure to reach the remote is
    /// thrown, not taken as a reason to ask again for the whole.
    func resume(url: String, ask: (String, Int, BodySpill) throws(FerryError) -> Exchange.Answer) throws(FerryError) -> ManifestFetch? {
        resumedFrom = 0
        let kept = kept()
        guard !kept.isEmpty else { return nil }
        let rest = Int64(kept.count)..<size
        let spill = BodySpill(wanted: { headers in
            headers.status == 206 && headers.contentRange.flatMap(ResponsePolicy.parseContentRange)?.first == rest.lowerBound
        }, write: { self.write($0, at: rest.lowerBound + $1) })
        let bytes: [UInt8]?
        do throws(FerryError) {
            bytes = try Remotes.range(try ask("bytes=\(rest.lowerBound)-\(rest.upperBound - 1)", rest.count, spill), rest, url: url)
        } catch where error.cause == .http(status: 404) || error.cause == .http(status: 410) {
            return nil  // the whole is asked, and says what is missing
        }
        guard let bytes else { return nil }
        resumedFrom = rest.lowerBound
        return .fetched(bytes: kept + bytes, etag: nil, lastModified: nil)
    }

    /// Writes the answer to a request for the whole object (a 200) into the part from its start,
    /// cut there at its first byte (whatever a rejected range wrote).
    var wholeSpill: BodySpill {
        closeFile()
        return BodySpill(wanted: { $0.status == 200 }, write: { self.write($0, at: $1) })
    }
}

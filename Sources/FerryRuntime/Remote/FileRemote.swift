import Glibc
import FerryCore

/// A `file://` remote: a local directory (a mount, a staging tree). The manifest is read with its
/// size, mtime and inode as the validator; files are read with pread, a piece at a time, by the
/// engine (no libcurl), and verified like any download.
struct FileRemote: Remote, RangeReading {
    let base: RemoteLocation

    func fetchManifest(url: String, etag: String?, lastModified: String?, maximumSize: Int64) throws(FerryError) -> ManifestFetch {
        guard let path = RemoteLocation.decodeFileURL(url) else { throw .remote("cannot read the manifest \(url): not a valid file URL") }
        var st = stat()
        guard stat(path, &st) == 0 else {
            let code = errno
            throw FerryError(.remote, "cannot read the manifest \(url): \(FileSystem.errorText(code))",
                             hint: "check 'remote =' and 'manifest =' in the config, and that the manifest was published", cause: .local(errno: code))
        }
        let validator = "file:\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec):\(st.st_ino)"
        if validator == etag { return .unchanged }
        if Int64(st.st_size) > maximumSize { throw Remotes.tooLarge(url, maximumSize: maximumSize, announced: Int64(st.st_size)) }
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(path, limit: Int(maximumSize)) } catch {
            throw .remote("cannot read the manifest \(url): \(error.message)")
        }
        return .fetched(bytes: bytes, etag: validator, lastModified: nil)
    }

    func download(task: TransferTask, entry: ManifestEntry, reason: Plan.Reason, into fd: Int32,
                  resumeFrom: Int64, validator: String?) throws(FerryError) -> Download {
        guard let path = RemoteLocation.decodeFileURL(base.url(for: entry.path)) else {
            throw .remote("cannot read \(Printable.name(entry.path.string)) from \(base.url): not a valid file URL")
        }
        return try Download(task: task, entry: entry, reason: reason, origin: .file(path: path), fd: fd,
                            resumeFrom: Remotes.resumeOffset(self, resumeFrom), validator: validator)
    }
}

/// What a scan of the local root saw at one path: enough to tell, with the hash cache, whether the
/// file still holds what ferry last verified.
public struct LocalEntry: Sendable, Equatable {
    public enum Kind: String, Sendable { case file, directory, symlink, other }
    // In this order the fields fill the padding after each 12-byte Timestamp: 48 bytes, not 64
    // (a scan of 1,000,000 files holds one each).
    public var size: Int64
    public var mtime: Timestamp
    /// Permission bits (`& 0o7777`).
    public var mode: UInt32
    public var ctime: Timestamp
    public var kind: Kind
    public var inode: UInt64

    public init(kind: Kind, size: Int64, mtime: Timestamp, ctime: Timestamp, inode: UInt64, mode: UInt32) {
        self.kind = kind
        self.size = size
        self.mtime = mtime
        self.ctime = ctime
        self.inode = inode
        self.mode = mode
    }
}

/// A remembered SHA-256 of a local file, valid while size, mtime, ctime and inode are unchanged.
/// ctime is in the key because a write that restores mtime (`touch -d`) still moves ctime.
public struct CachedHash: Sendable, Equatable {
    public var size: Int64
    public var mtime: Timestamp
    public var ctime: Timestamp
    public var inode: UInt64
    public var sha256: SHA256Digest
    /// The manifest mtime ferry set when the filesystem stored another one (it cannot hold years
    /// before 1902 or after 2446 on ext4, say): `mtime` then stands for this one, so the file is not
    /// "fixed" again on every run. nil when the filesystem stored what was asked.
    public var wantedMtime: Timestamp?

    public init(size: Int64, mtime: Timestamp, ctime: Timestamp, inode: UInt64, sha256: SHA256Digest, wantedMtime: Timestamp? = nil) {
        self.size = size
        self.mtime = mtime
        self.ctime = ctime
        self.inode = inode
        self.sha256 = sha256
        self.wantedMtime = wantedMtime
    }

    /// The hash of a file ferry just wrote or touched, as `stat` shows it now; `wanted` is the
    /// mtime ferry asked for, remembered only when the filesystem stored something else.
    public init(_ entry: LocalEntry, sha256: SHA256Digest, wanted: Timestamp?) {
        self.init(size: entry.size, mtime: entry.mtime, ctime: entry.ctime, inode: entry.inode, sha256: sha256,
                  wantedMtime: wanted.flatMap { $0 == entry.mtime ? nil : $0 })
    }

    /// `ignoringCtime`: only after ferry itself moved the ctime of files it had verified, by
    /// linking or unlinking other names of them (`layout = generations`), and was cut short
    /// before it wrote their rows again.
    public func isValid(for entry: LocalEntry, ignoringCtime: Bool = false) -> Bool {
        entry.kind == .file && entry.size == size && entry.mtime == mtime && (ignoringCtime || entry.ctime == ctime) && entry.inode == inode
    }
}

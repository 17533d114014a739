/// What a scan of the local root saw at one path: enough to tell, with the hash cache, whether the
/// file still holds what ferry last verified.
public struct LocalEntry: Sendable, Equatable {
    public enum Kind: String, Sendable { case file, directory, symlink, other }
    public var kind: Kind
    public var size: Int64
    public var mtime: Timestamp
    public var ctime: Timestamp
    public var inode: UInt64
    /// Permission bits (`& 0o7777`).
    public var mode: UInt32

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
    public var sha256: String

    public init(size: Int64, mtime: Timestamp, ctime: Timestamp, inode: UInt64, sha256: String) {
        self.size = size
        self.mtime = mtime
        self.ctime = ctime
        self.inode = inode
        self.sha256 = sha256
    }

    public func isValid(for entry: LocalEntry) -> Bool {
        entry.kind == .file && entry.size == size && entry.mtime == mtime && entry.ctime == ctime && entry.inode == inode
    }
}

import FerryCore

/// What a remote said of a file right after ferry placed it there (push): a later run that finds
/// anything else there knows someone else changed it.
public struct PlacedFile: Sendable, Equatable {
    public var size: Int64
    /// ETag, else Last-Modified (or a local directory's size, mtime and inode); nil when the remote gives none.
    public var validator: String?
    /// How ferry knew the remote held what it sent when it recorded this; nil in a record an older
    /// ferry made, which kept no such word (`PushObjects.storedContent` reads such an object back).
    public var verified: UploadVerification?
    public init(size: Int64, validator: String?, verified: UploadVerification? = nil) {
        self.size = size
        self.validator = validator
        self.verified = verified
    }
}

/// What a push remembers of its remote: what it said of each file ferry placed (`placed`), and when
/// the session last checked every published file.
extension StateStore {
    /// What the remote said of each file this session placed there, by path.
    public func placedFiles(session: String) throws(FerryError) -> [RelativePath: PlacedFile] {
        let s = try db.prepare("SELECT path, size, validator, verified FROM placed WHERE session = ?").bind(.text(session))
        var out: [RelativePath: PlacedFile] = [:]
        while try s.step() {
            out[RelativePath(trusted: s.text(0) ?? "")] = PlacedFile(size: s.int(1), validator: s.text(2), verified: s.text(3).flatMap(UploadVerification.init(rawValue:)))
        }
        return out
    }

    public func recordPlaced(session: String, _ files: [(RelativePath, PlacedFile)]) throws(FerryError) {
        guard !files.isEmpty else { return }
        try db.transaction { () throws(FerryError) in try recordPlacedInTransaction(session: session, files) }
    }

    func recordPlacedInTransaction(session: String, _ files: [(RelativePath, PlacedFile)]) throws(FerryError) {
        let s = try db.cached("INSERT OR REPLACE INTO placed (session, path, size, validator, verified) VALUES (?, ?, ?, ?, ?)")
        for (path, file) in files {
            try s.bind(.text(session), .text(path.string), .int(file.size), .optional(file.validator), .optional(file.verified?.rawValue)).run()
        }
    }

    /// Paths ferry removed from the remote (or no longer vouches for).
    public func forgetPlaced(session: String, _ paths: [RelativePath]) throws(FerryError) {
        guard !paths.isEmpty else { return }
        try db.transaction { () throws(FerryError) in
            let s = try db.cached("DELETE FROM placed WHERE session = ? AND path = ?")
            for p in paths { try s.bind(.text(session), .text(p.string)).run() }
        }
    }

    /// When the session last checked every published file on its remote.
    public func remoteChecked(session: String) throws(FerryError) -> Timestamp? {
        let s = try db.prepare("SELECT remote_checked FROM sessions WHERE name = ?").bind(.text(session))
        return try s.step() ? s.text(0).flatMap(Timestamp.init(rfc3339:)) : nil
    }

    public func recordRemoteChecked(session: String, at time: Timestamp) throws(FerryError) {
        try ensureSession(session)
        try db.prepare("UPDATE sessions SET remote_checked = ? WHERE name = ?").bind(.text(time.rfc3339), .text(session)).run()
    }
}

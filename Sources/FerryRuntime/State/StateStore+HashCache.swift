import FerryCore

/// The hash cache: (session, path) → the stat a file was hashed at and its SHA-256, kept to the
/// files there are.
extension StateStore {
    /// How many files the session's hash cache holds (about how many the local root holds).
    public func hashCacheCount(session: String) throws(FerryError) -> Int {
        let count = try db.prepare("SELECT count(*) FROM hash_cache WHERE session = ?").bind(.text(session))
        return try count.step() ? Int(count.int(0)) : 0
    }

    /// The whole cache as a map (for tests and tools; a sync joins it to its scan, `loadHashes`).
    public func hashCache(session: String) throws(FerryError) -> [RelativePath: CachedHash] {
        let s = try hashCacheRows(session: session)
        var out: [RelativePath: CachedHash] = [:]
        while try s.step() {
            if let hash = cachedHash(s) { out[RelativePath(trusted: s.text(0) ?? "")] = hash }
        }
        return out
    }

    /// Gives the files of `tree` (a whole scan of the session's local root) the hashes the cache
    /// holds for them, where still valid: one pass over the rows in primary-key order, which is
    /// the tree's order, without a String per row. Rows of paths the tree holds no file at go:
    /// every direction and layout keeps the cache to the files there are (a pull's deletions
    /// forget theirs at once, but a push's or a generation's gone files are only seen here).
    public func loadHashes(session: String, into tree: inout LocalTree, ignoringCtime: Bool = false) throws(FerryError) {
        let s = try hashCacheRows(session: session)
        var gone: [RelativePath] = []
        try tree.join(next: { () throws(FerryError) in try s.step() }, path: { s.bytes(0) }, hash: { cachedHash(s) }, ignoringCtime: ignoringCtime,
                      stale: { gone.append(RelativePath(trusted: s.text(0) ?? "")) })
        s.reset()
        try forgetHashes(session: session, gone)
    }

    private func hashCacheRows(session: String) throws(FerryError) -> SQLiteStatement {
        try db.prepare("""
            SELECT path, size, mtime_sec, mtime_nsec, ctime_sec, ctime_nsec, inode, sha256, wanted_mtime_sec, wanted_mtime_nsec
            FROM hash_cache WHERE session = ? ORDER BY path
            """).bind(.text(session))
    }

    /// The current row of `hashCacheRows`. One whose hash is not 64 hex digits (no ferry writes
    /// one) vouches for nothing: the file is hashed again.
    private func cachedHash(_ s: SQLiteStatement) -> CachedHash? {
        func time(_ column: Int32) -> Timestamp { Timestamp(seconds: s.int(column), nanoseconds: Int32(truncatingIfNeeded: s.int(column + 1))) }
        guard let sha = s.digest(7) else { return nil }
        return CachedHash(size: s.int(1), mtime: time(2), ctime: time(4), inode: UInt64(bitPattern: s.int(6)), sha256: sha,
                          wantedMtime: s.isNull(8) ? nil : time(8))
    }

    public func saveHashes(session: String, _ hashes: [(RelativePath, CachedHash)]) throws(FerryError) {
        guard !hashes.isEmpty else { return }
        try db.transaction { () throws(FerryError) in try saveHashesInTransaction(session: session, hashes) }
    }

    func saveHashesInTransaction(session: String, _ hashes: [(RelativePath, CachedHash)]) throws(FerryError) {
        try db.runInGroups(hashes, sql: """
            INSERT OR REPLACE INTO hash_cache (session, path, size, mtime_sec, mtime_nsec, ctime_sec, ctime_nsec, inode, sha256,
                                               wanted_mtime_sec, wanted_mtime_nsec) VALUES
            """, placeholder: "(?1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", leading: [.text(session)], values: { path, h in
            // The session is bound once a statement (?1); the rows' own values follow from ?2.
            [.text(path.string), .int(h.size), .int(h.mtime.seconds), .int(Int64(h.mtime.nanoseconds)),
             .int(h.ctime.seconds), .int(Int64(h.ctime.nanoseconds)), .int(Int64(bitPattern: h.inode)), .text(h.sha256.hex),
             .optional(h.wantedMtime?.seconds), .optional(h.wantedMtime.map { Int64($0.nanoseconds) })]
        })
    }

    public func forgetHashes(session: String, _ paths: [RelativePath]) throws(FerryError) {
        guard !paths.isEmpty else { return }
        try db.transaction { () throws(FerryError) in
            let s = try db.prepare("DELETE FROM hash_cache WHERE session = ? AND path = ?")
            for p in paths { try s.bind(.text(session), .text(p.string)).run() }
        }
    }
}

import FerryCore

/// An upload in parts that the task table keeps across runs (S3 multipart): its id on the remote,
/// what content it is for, and the parts the remote acknowledged.
struct JournaledUpload: Equatable {
    var task: Int64
    var path: RelativePath
    var uploadID: String
    /// The content and part size it was started for (`content(sha256:partSize:)`): another means
    /// another upload.
    var content: String
    var parts: [UploadedPart]

    /// What an upload of a file with `sha256` in parts of `partSize` is recorded as being for.
    static func content(sha256: SHA256Digest, partSize: Int64) -> String { "\(sha256.hex):\(partSize)" }

    /// Whether it sends a file with this content (whatever its part size).
    func sends(_ sha256: SHA256Digest) -> Bool { content.hasPrefix(sha256.hex + ":") }
}

/// One part of a journaled upload as the store acknowledged it, with the SHA-256 of what was sent.
struct UploadedPart: Equatable {
    var number: Int
    var size: Int64
    var etag: String
    var sha256: SHA256Digest
}

/// Where a placement in parts records, as they complete, what lets a later run resume it
/// (`kill -9`, a reboot): the upload's id and its parts, in the task's row.
struct UploadJournal {
    let store: StateStore
    let task: TransferTask

    func load() throws(FerryError) -> JournaledUpload? { try store.journaledUpload(task: task.id) }
    func begin(uploadID: String, content: String) throws(FerryError) {
        try store.beginJournaledUpload(task: task.id, uploadID: uploadID, content: content)
    }
    func record(_ part: UploadedPart) throws(FerryError) { try store.recordUploadedPart(task: task.id, part) }
    func clear() throws(FerryError) { try store.clearJournaledUpload(task: task.id) }
}

/// The journal's rows: `tasks.upload_id` and `upload_content`, and `upload_parts` (migration 10).
extension StateStore {
    /// The multipart upload recorded for a task, with its acknowledged parts.
    func journaledUpload(task: Int64) throws(FerryError) -> JournaledUpload? {
        let row = try db.prepare("SELECT id, path, upload_id, upload_content FROM tasks WHERE id = ? AND upload_id IS NOT NULL").bind(.int(task))
        guard try row.step() else { return nil }
        return try journaled(row)
    }

    /// Every multipart upload the session's tasks record.
    func journaledUploads(session: String) throws(FerryError) -> [JournaledUpload] {
        let rows = try db.prepare("SELECT id, path, upload_id, upload_content FROM tasks WHERE session = ? AND upload_id IS NOT NULL")
            .bind(.text(session))
        var out: [JournaledUpload] = []
        while try rows.step() { out.append(try journaled(rows)) }
        return out
    }

    private func journaled(_ row: SQLiteStatement) throws(FerryError) -> JournaledUpload {
        let task = row.int(0)
        var upload = JournaledUpload(task: task, path: RelativePath(trusted: row.text(1) ?? ""), uploadID: row.text(2) ?? "",
                                     content: row.text(3) ?? "", parts: [])
        let parts = try db.prepare("SELECT number, size, etag, sha256 FROM upload_parts WHERE task = ? ORDER BY number").bind(.int(task))
        while try parts.step() {
            guard let sha = parts.text(3).flatMap(SHA256Digest.init(hex:)) else { continue }
            upload.parts.append(UploadedPart(number: Int(parts.int(0)), size: parts.int(1), etag: parts.text(2) ?? "", sha256: sha))
        }
        return upload
    }

    func beginJournaledUpload(task: Int64, uploadID: String, content: String) throws(FerryError) {
        try db.transaction { () throws(FerryError) in
            try db.prepare("DELETE FROM upload_parts WHERE task = ?").bind(.int(task)).run()
            try db.prepare("UPDATE tasks SET upload_id = ?, upload_content = ? WHERE id = ?").bind(.text(uploadID), .text(content), .int(task)).run()
        }
    }

    func recordUploadedPart(task: Int64, _ part: UploadedPart) throws(FerryError) {
        try db.cached("INSERT OR REPLACE INTO upload_parts (task, number, size, etag, sha256) VALUES (?, ?, ?, ?, ?)")
            .bind(.int(task), .int(Int64(part.number)), .int(part.size), .text(part.etag), .text(part.sha256.hex)).run()
    }

    func clearJournaledUpload(task: Int64) throws(FerryError) {
        try db.transaction { () throws(FerryError) in
            try db.prepare("DELETE FROM upload_parts WHERE task = ?").bind(.int(task)).run()
            try db.prepare("UPDATE tasks SET upload_id = NULL, upload_content = NULL WHERE id = ?").bind(.int(task)).run()
        }
    }
}

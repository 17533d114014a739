import FerryCore

/// A run's progress as a line of the control protocol (`ControlServer`), for a client that follows
/// a cycle of the agent and draws its progress bars as a run of its own would:
///     {"event":"progress","session":"a","files_total":N,"files_done":N,"files_failed":N,
///      "bytes_total":N,"bytes_done":N,"active_count":N,"active":[{"path":"p","done":N,"size":N}]}
/// `active` lists at most `maxActive` files in flight, the largest first (the bars show the
/// largest); `active_count` says how many there are in all. `size` is left out when unknown.
extension SyncProgress {
    static let maxActive = 16

    public var controlLine: String {
        var out: [UInt8] = []
        out.reserveCapacity(256 + 96 * min(active.count, SyncProgress.maxActive))
        func key(_ k: String) { out.append(contentsOf: Array(",\"\(k)\":".utf8)) }
        func number(_ k: String, _ v: Int64) { key(k); JSONText.appendInteger(v, to: &out) }
        out.append(contentsOf: Array("{\"event\":\"progress\",\"session\":".utf8))
        JSONText.appendQuoted(session, to: &out)
        number("files_total", Int64(filesTotal)); number("files_done", Int64(filesDone)); number("files_failed", Int64(filesFailed))
        number("bytes_total", bytesTotal); number("bytes_done", bytesDone); number("active_count", Int64(active.count + moreActive))
        key("active")
        out.append(UInt8(ascii: "["))
        for (i, a) in active.sorted(by: { ($0.size ?? 0) > ($1.size ?? 0) }).prefix(SyncProgress.maxActive).enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: Array("{\"path\":".utf8))
            JSONText.appendQuoted(a.path.string, to: &out)
            number("done", a.done)
            if let size = a.size { number("size", size) }
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: Array("]}".utf8))
        return String(decoding: out, as: UTF8.self)
    }

    /// Reads a `progress` line; nil for anything else, or for numbers no run could have (the
    /// agent is another process: what it sends is checked like any input).
    public init?(controlLine line: [UInt8]) {
        var p = SyncProgress(session: "")
        var isProgress = false, active: [Active] = [], count = 0
        let ok = line.withUnsafeBufferPointer { bytes -> Bool in
            var reader = JSONReader(bytes)
            do throws(JSONReader.Failure) {
                try reader.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                    switch key {
                    case "event": isProgress = try r.readString() == "progress"
                    case "session": p.session = try r.readString()
                    case "files_total": p.filesTotal = Int(clamping: try r.readCount("files_total"))
                    case "files_done": p.filesDone = Int(clamping: try r.readCount("files_done"))
                    case "files_failed": p.filesFailed = Int(clamping: try r.readCount("files_failed"))
                    case "bytes_total": p.bytesTotal = try r.readCount("bytes_total")
                    case "bytes_done": p.bytesDone = try r.readCount("bytes_done")
                    case "active_count": count = Int(clamping: try r.readCount("active_count"))
                    case "active":
                        try r.readArray { (r: inout JSONReader, _: Int) throws(JSONReader.Failure) in
                            var path: String?, done: Int64 = 0, size: Int64?
                            try r.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                                switch key {
                                case "path": path = try r.readString()
                                case "done": done = try r.readCount("done")
                                case "size": size = try r.readCount("size")
                                default: try r.skipValue()
                                }
                            }
                            guard let path, active.count < SyncProgress.maxActive else { return }
                            active.append(Active(path: RelativePath(trusted: path), done: done, size: size))
                        }
                    default: try r.skipValue()
                    }
                }
                try reader.expectEnd()
                return true
            } catch {
                return false
            }
        }
        guard ok, isProgress, !p.session.isEmpty else { return nil }
        p.active = active
        p.moreActive = max(0, count - active.count)
        self = p
    }
}

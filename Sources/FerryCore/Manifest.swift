/// One file a manifest lists.
public struct ManifestEntry: Sendable, Equatable {
    public let path: RelativePath
    /// nil when the manifest is a SHA256SUMS file, which carries no sizes.
    public let size: Int64?
    /// Lowercase hex, 64 digits.
    public let sha256: String
    public let mtime: Timestamp?
    /// Permission bits only (`& 0o777`): a remote never sets setuid, setgid or sticky bits here.
    public let mode: UInt32?

    public init(path: RelativePath, size: Int64?, sha256: String, mtime: Timestamp? = nil, mode: UInt32? = nil) {
        self.path = path
        self.size = size
        self.sha256 = sha256
        self.mtime = mtime
        self.mode = mode
    }
}

/// What the remote says the tree should be (product.md §4). Built only by `Manifest.parse`, which
/// refuses anything hostile, so the runtime can trust every path and hash in it.
public struct Manifest: Sendable {
    public enum Format: String, Sendable { case ferry = "ferry-manifest/1", sha256sums = "SHA256SUMS" }

    public let format: Format
    /// nil for SHA256SUMS.
    public let version: Int64?
    public let generated: Timestamp?
    public let expires: Timestamp?
    public let entries: [ManifestEntry]

    public init(format: Format, version: Int64?, generated: Timestamp?, expires: Timestamp?, entries: [ManifestEntry]) {
        self.format = format
        self.version = version
        self.generated = generated
        self.expires = expires
        self.entries = entries
    }

    public static let formatName = Format.ferry.rawValue
    /// 2^53 bytes (8 PiB): larger sizes are refused, so sums of sizes cannot overflow.
    public static let maximumFileSize: Int64 = 1 << 53

    /// Parses a ferry JSON manifest, or a SHA256SUMS file when the text does not start with `{`.
    /// `source` names the manifest in errors (its URL).
    public static func parse(_ bytes: UnsafeBufferPointer<UInt8>, source: String) throws(FerryError) -> Manifest {
        var first: UInt8 = 0
        for b in bytes where b != 0x20 && b != 0x0A && b != 0x0D && b != 0x09 && b != 0xEF && b != 0xBB && b != 0xBF {
            first = b
            break
        }
        let manifest: Manifest
        if first == UInt8(ascii: "{") {
            manifest = try parseJSON(bytes, source: source)
        } else if first == UInt8(ascii: "[") || first == UInt8(ascii: "\"") {
            throw .manifest("manifest \(source): the top level must be a JSON object with \"format\": \"\(formatName)\"")
        } else {
            manifest = try parseSHA256SUMS(bytes, source: source)
        }
        try checkTree(manifest.entries, source: source)
        return manifest
    }

    public static func parse(_ bytes: [UInt8], source: String) throws(FerryError) -> Manifest {
        do {
            return try bytes.withUnsafeBufferPointer { (p) throws(FerryError) -> Manifest in try parse(p, source: source) }
        }
    }

    private static func parseJSON(_ bytes: UnsafeBufferPointer<UInt8>, source: String) throws(FerryError) -> Manifest {
        var reader = JSONReader(bytes)
        var format: String?
        var version: Int64?
        var generated: Timestamp?
        var expires: Timestamp?
        var entries: [ManifestEntry] = []
        var sawFiles = false
        // Errors found while walking are kept here: the reader's closures throw only reader failures.
        var problem: String?
        do {
            try reader.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                switch key {
                case "format":
                    format = try r.readString()
                case "version":
                    let v = try r.readInteger()
                    if v < 0 { throw r.failure("\"version\" must be 0 or more") }
                    version = v
                case "generated", "expires":
                    let text = try r.readString()
                    guard let t = Timestamp(rfc3339: text) else { throw r.failure("\"\(key)\" is not an RFC 3339 time: \(JSONText.quote(text))") }
                    if key == "generated" { generated = t } else { expires = t }
                case "files":
                    sawFiles = true
                    try r.readArray { (r: inout JSONReader, i: Int) throws(JSONReader.Failure) in
                        if problem != nil { try r.skipValue(); return }
                        var path: String?, size: Int64?, sha: String?, mtime: Timestamp?, mode: UInt32?
                        try r.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                            switch key {
                            case "path": path = try r.readString()
                            case "size":
                                let s = try r.readInteger()
                                if s < 0 { throw r.failure("files[\(i)].size is negative") }
                                if s > Manifest.maximumFileSize { throw r.failure("files[\(i)].size is larger than 8 PiB") }
                                size = s
                            case "sha256": sha = try r.readString()
                            case "mtime":
                                let text = try r.readString()
                                guard let t = Timestamp(rfc3339: text) else { throw r.failure("files[\(i)].mtime is not an RFC 3339 time: \(JSONText.quote(text))") }
                                mtime = t
                            case "mode":
                                let text = try r.readString()
                                guard let m = parseMode(text) else { throw r.failure("files[\(i)].mode is not an octal mode like \"0644\": \(JSONText.quote(text))") }
                                mode = m
                            default: try r.skipValue()
                            }
                        }
                        guard let path else { problem = "files[\(i)] has no \"path\""; return }
                        let checked: RelativePath
                        do { checked = try RelativePath(validating: path) } catch {
                            problem = "files[\(i)].path \(JSONText.quote(path)) is refused: \(error)"
                            return
                        }
                        guard let size else { problem = "files[\(i)] (\(path)) has no \"size\""; return }
                        guard let sha else { problem = "files[\(i)] (\(path)) has no \"sha256\""; return }
                        guard let hex = normalizedSHA256(sha) else {
                            problem = "files[\(i)] (\(path)) sha256 must be 64 hex digits, got \(sha.utf8.count) characters"
                            return
                        }
                        entries.append(ManifestEntry(path: checked, size: size, sha256: hex, mtime: mtime, mode: mode))
                    }
                default:
                    try r.skipValue()
                }
            }
            try reader.expectEnd()
        } catch {
            throw .manifest("manifest \(source) is not valid JSON at line \(error.line), column \(error.column): \(error.message)")
        }
        if let problem { throw .manifest("manifest \(source): \(problem)") }
        guard let format else { throw .manifest("manifest \(source) has no \"format\"; expected \"\(formatName)\"") }
        guard format == formatName else { throw .manifest("manifest \(source) has format \(JSONText.quote(format)); this ferry reads \"\(formatName)\"") }
        guard let version else { throw .manifest("manifest \(source) has no \"version\"") }
        guard sawFiles else { throw .manifest("manifest \(source) has no \"files\" list") }
        return Manifest(format: .ferry, version: version, generated: generated, expires: expires, entries: entries)
    }

    /// `<64 hex>  <path>` or `<64 hex> *<path>` per line, as `sha256sum` writes; a leading `./` is dropped.
    private static func parseSHA256SUMS(_ bytes: UnsafeBufferPointer<UInt8>, source: String) throws(FerryError) -> Manifest {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .manifest("manifest \(source) is neither JSON nor a UTF-8 SHA256SUMS file")
        }
        var entries: [ManifestEntry] = []
        var lineNumber = 0
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            lineNumber += 1
            var line = Substring(raw)
            if line.hasSuffix("\r") { line = line.dropLast() }
            if line.isEmpty { continue }
            func fail(_ why: String) -> FerryError {
                .manifest("manifest \(source) line \(lineNumber): \(why)",
                          hint: "a manifest is either ferry JSON (\"format\": \"\(formatName)\") or SHA256SUMS lines '<sha256>  <path>'")
            }
            if line.hasPrefix("\\") { throw fail("escaped file names (a leading '\\') are not supported") }
            let utf8 = Array(line.utf8)
            guard utf8.count > 66, utf8[64] == UInt8(ascii: " "), utf8[65] == UInt8(ascii: " ") || utf8[65] == UInt8(ascii: "*") else {
                throw fail("expected '<64 hex digits>  <path>'")
            }
            guard let hex = normalizedSHA256(String(decoding: utf8[0..<64], as: UTF8.self)) else {
                throw fail("the hash is not 64 hex digits")
            }
            var path = String(decoding: utf8[66...], as: UTF8.self)
            while path.hasPrefix("./") { path.removeFirst(2) }
            let checked: RelativePath
            do { checked = try RelativePath(validating: path) } catch { throw fail("path \(JSONText.quote(path)) is refused: \(error)") }
            entries.append(ManifestEntry(path: checked, size: nil, sha256: hex))
        }
        return Manifest(format: .sha256sums, version: nil, generated: nil, expires: nil, entries: entries)
    }

    /// No duplicates, and no path that is both a file and a directory of another file.
    private static func checkTree(_ entries: [ManifestEntry], source: String) throws(FerryError) {
        var files = Set<RelativePath>(minimumCapacity: entries.count)
        for e in entries {
            guard files.insert(e.path).inserted else { throw .manifest("manifest \(source) lists \(JSONText.quote(e.path.string)) twice") }
        }
        for e in entries {
            for a in e.path.ancestors where files.contains(a) {
                throw .manifest("manifest \(source) lists \(JSONText.quote(a.string)) as a file and also \(JSONText.quote(e.path.string)) inside it")
            }
        }
    }

    public static func normalizedSHA256(_ s: String) -> String? {
        guard s.utf8.count == 64 else { return nil }
        var lowercase = true
        let bytes = s.utf8.withContiguousStorageIfAvailable { Array($0) } ?? Array(s.utf8)
        for b in bytes {
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): continue
            case UInt8(ascii: "A")...UInt8(ascii: "F"): lowercase = false
            default: return nil
            }
        }
        return lowercase ? s : s.lowercased()
    }

    static func parseMode(_ s: String) -> UInt32? {
        guard (1...6).contains(s.utf8.count), let v = UInt32(s, radix: 8) else { return nil }
        return v & 0o777
    }
}

/// Renders a manifest as `ferry-manifest/1` JSON: sorted by path, one file per line, so two builds
/// of the same tree are byte-identical and diffs stay readable.
public enum ManifestWriter {
    public static func render(version: Int64, generated: Timestamp, entries: [ManifestEntry]) -> String {
        var out = "{\n  \"format\": \"\(Manifest.formatName)\",\n  \"version\": \(version),\n  \"generated\": \"\(generated.rfc3339)\",\n  \"files\": ["
        let sorted = entries.sorted { $0.path < $1.path }
        for (i, e) in sorted.enumerated() {
            out += i == 0 ? "\n    " : ",\n    "
            out += "{\"path\": \(JSONText.quote(e.path.string)), \"size\": \(e.size ?? 0), \"sha256\": \"\(e.sha256)\""
            if let m = e.mtime { out += ", \"mtime\": \"\(m.rfc3339)\"" }
            if let mode = e.mode {
                var octal = String(mode, radix: 8)
                while octal.count < 4 { octal = "0" + octal }
                out += ", \"mode\": \"\(octal)\""
            }
            out += "}"
        }
        out += sorted.isEmpty ? "]\n}\n" : "\n  ]\n}\n"
        return out
    }
}

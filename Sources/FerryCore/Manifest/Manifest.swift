/// One file a manifest lists.
public struct ManifestEntry: Sendable, Equatable {
    public let path: RelativePath
    public let sha256: SHA256Digest
    // The optional values are kept without Optional's tag bytes, each "none" a value no entry
    // holds: an entry takes 80 bytes instead of 96 (16 MB over 1,000,000 entries).
    private let storedSize: Int64
    private let storedMtime: Timestamp
    private let storedMode: UInt32
    /// Format 2: the content index of a large file (`ContentIndex`), for delta transfers.
    public let index: ContentIndex.Reference?

    /// nil when the manifest is a SHA256SUMS file, which carries no sizes.
    public var size: Int64? { storedSize == .min ? nil : storedSize }
    public var mtime: Timestamp? { storedMtime.nanoseconds == .min ? nil : storedMtime }
    /// Permission bits only (`& 0o777`): a remote never sets setuid, setgid or sticky bits here.
    public var mode: UInt32? { storedMode == .max ? nil : storedMode }

    public init(path: RelativePath, size: Int64?, sha256: SHA256Digest, mtime: Timestamp? = nil, mode: UInt32? = nil,
                index: ContentIndex.Reference? = nil) {
        self.path = path
        self.sha256 = sha256
        storedSize = size ?? .min
        storedMtime = mtime ?? Timestamp(seconds: 0, nanoseconds: .min)
        storedMode = mode ?? .max
        self.index = index
    }
}

/// What the remote says the tree should be (its formats: README.md, docs/design.md "Format 2";
/// what a reader refuses: data-safety rules 5 and 8). Built only by `Manifest.parse`, which
/// refuses anything hostile, so the runtime can trust every path and hash in it.
public struct Manifest: Sendable {
    public enum Format: String, Sendable { case ferry = "ferry-manifest/1", tree = "ferry-manifest/2", sha256sums = "SHA256SUMS" }

    public let format: Format
    /// nil for SHA256SUMS.
    public let version: Int64?
    public let generated: Timestamp?
    public let expires: Timestamp?
    /// In byte order of their paths (`RelativePath.<`), each path once, whatever order the remote
    /// listed them in: the Reconciler merges them with the local tree.
    public let entries: [ManifestEntry]
    /// Format 2: the tree of metadata objects the root names (`ManifestTree`). Until the tree is
    /// read (`resolving`), `entries` is empty.
    public let tree: ManifestTree.Reference?
    /// The signatures a signed manifest carries (empty: unsigned), each checked over the signed
    /// bytes when it was parsed with a verifier.
    public let signatures: [ManifestSignature]
    /// Where the remote keeps the files' bytes (`"layout"`; SHA256SUMS: at their paths).
    public let layout: RemoteLayout
    /// The key set it is signed under (`"keys"`, `KeySet`; nil: set 1, the config's `trusted-keys`).
    public private(set) var keySet: Int64?
    /// A phased rollout (`"rollout"` and `"previous"`): the share of machines that take this
    /// release, and the one the others stay on. nil: every machine takes it.
    public private(set) var rollout: Rollout?
    /// Format 2: the list of the tree's bundles (`"bundles"`, `ManifestTree.bundled`); nil: none.
    public private(set) var treeBundles: ObjectBundle.Named?
    /// Format 2, objects layout: the list of the packs of its small files' contents (`"packs"`,
    /// `ContentPacks`); nil: none.
    public private(set) var packs: ObjectBundle.Named?

    /// The files the manifest lists, whether or not its tree was read yet.
    public var fileCount: Int { tree?.files ?? entries.count }

    /// A format-2 root with the entries its tree holds (`ManifestTree.resolve`: in path order,
    /// each once), checked as a parsed manifest is.
    public func resolving(_ entries: [ManifestEntry], source: String) throws(FerryError) -> Manifest {
        precondition(tree != nil && entries.count == tree!.files)
        var whole = Manifest(format: format, version: version, generated: generated, expires: expires, sorted: entries, signatures: signatures, tree: tree,
                             layout: layout)
        whole.keySet = keySet
        whole.rollout = rollout
        whole.treeBundles = treeBundles
        whole.packs = packs
        try Manifest.checkTree(whole, source: source)
        return whole
    }

    /// The key shown as the manifest's signer (status, events, `ferry ls`): with `trusted` keys,
    /// the first of them whose signature verified, the one a session took the manifest on (an
    /// envelope may carry valid signatures by keys nobody trusts, in any order); without, the
    /// first signature that verified, which vouches for nothing (signatures are informational).
    public func signer(trusting trusted: [PublicKey]) -> PublicKey? {
        signers(trusting: trusted).first
    }

    /// Each key whose signature verified, once, in the order they are carried: with `trusted`
    /// keys, only those (what `trust-threshold` counts); without, any.
    public func signers(trusting trusted: [PublicKey]) -> [PublicKey] {
        var out: [PublicKey] = []
        for s in signatures where s.check == .valid && (trusted.isEmpty || trusted.contains(s.key)) && !out.contains(s.key) { out.append(s.key) }
        return out
    }

    /// The release a rollout keeps the other machines on, as a root whose tree is still to be read
    /// (`resolving`): trusted because this signed root names its tree by hash, so it carries this
    /// root's signatures, expiry and key set.
    public func previousRelease() -> Manifest? {
        guard let p = rollout?.previous else { return nil }
        var previous = Manifest(format: .tree, version: p.version, generated: generated, expires: expires, sorted: [], signatures: signatures,
                                tree: p.tree, layout: p.layout)
        previous.keySet = keySet
        return previous
    }

    /// Sorts `entries` when they are not in path order; they must not list a path twice.
    public init(format: Format, version: Int64?, generated: Timestamp?, expires: Timestamp?, entries: [ManifestEntry],
                signatures: [ManifestSignature] = [], layout: RemoteLayout = .tree) {
        var collector = EntryCollector(capacity: entries.count)
        for e in entries {
            let added = collector.add(e)
            precondition(added, "Manifest lists \(e.path) twice")
        }
        let sorted = collector.finish()
        precondition(sorted.duplicate == nil, "Manifest lists a path twice")
        self.init(format: format, version: version, generated: generated, expires: expires, sorted: sorted.entries, signatures: signatures,
                  layout: layout)
    }

    private init(format: Format, version: Int64?, generated: Timestamp?, expires: Timestamp?, sorted entries: [ManifestEntry],
                 signatures: [ManifestSignature] = [], tree: ManifestTree.Reference? = nil, layout: RemoteLayout = .tree) {
        self.format = format
        self.layout = layout
        self.tree = tree
        self.signatures = signatures
        self.version = version
        self.generated = generated
        self.expires = expires
        self.entries = entries
    }

    /// Whether the manifest lists `path` (binary search).
    public func lists(_ path: RelativePath) -> Bool { index(of: path) != nil }

    public func index(of path: RelativePath) -> Int? {
        RelativePath.index(of: path, count: entries.count) { entries[$0].path }
    }

    public static let formatName = Format.ferry.rawValue
    /// 2^53 bytes (8 PiB): larger sizes are refused.
    public static let maximumFileSize: Int64 = 1 << 53
    /// 2^62 bytes (4 EiB): a manifest whose sizes add up to more is refused, so no sum of sizes
    /// (a plan's bytes, progress) can overflow.
    public static let maximumTotalSize: Int64 = 1 << 62
    /// 2^53 − 1, the largest integer every JSON reader keeps exact: larger versions are refused,
    /// so one more than a version (the next push) never overflows.
    public static let maximumVersion: Int64 = (1 << 53) - 1

    /// Parses a ferry JSON manifest, or a SHA256SUMS file when the text does not start with `{`.
    /// `source` names the manifest in errors (its URL). Reading stops at the first fatal error, so
    /// a hostile manifest costs little however long it is. An empty or whitespace-only body is
    /// invalid: it is what a failed publish leaves behind, never a real manifest. A signed
    /// manifest's signatures are checked with `verifier` (without one they stay `.unchecked`);
    /// whether a session takes them is `ManifestAcceptance`'s to say.
    ///
    /// `passed` is told, every few thousand entries, an offset before which the parser will not
    /// look at `bytes` again, so a caller reading a mapped file can give those pages back. It is
    /// not told inside a signed manifest, whose signed bytes are read again to check them. (An
    /// error's line and column are still counted from the start of `bytes`.)
    public static func parse(_ bytes: UnsafeBufferPointer<UInt8>, source: String,
                             verifier: (any SignatureVerifier)? = nil, passed: ((Int) -> Void)? = nil) throws(FerryError) -> Manifest {
        var i = 0
        if bytes.count >= 3 && bytes[0] == 0xEF && bytes[1] == 0xBB && bytes[2] == 0xBF { i = 3 }
        while i < bytes.count && (bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09) { i += 1 }
        guard i < bytes.count else {
            throw .manifest("manifest \(source) is empty\(bytes.isEmpty ? " (0 bytes)" : " (only whitespace)"): refused, nothing was changed",
                            hint: "a publishing step probably failed; publish the manifest again (ferry manifest build, or sha256sum)")
        }
        let manifest: Manifest
        switch bytes[i] {
        case UInt8(ascii: "{"):
            manifest = try parseJSON(bytes, source: source, verifier: verifier, passed: passed)
        case UInt8(ascii: "["), UInt8(ascii: "\""):
            throw .manifest("manifest \(source): the top level must be a JSON object with \"format\": \"\(formatName)\"")
        default:
            manifest = try parseSHA256SUMS(bytes, source: source, passed: passed)
        }
        try checkTree(manifest, source: source)
        return manifest
    }

    public static func parse(_ bytes: [UInt8], source: String, verifier: (any SignatureVerifier)? = nil) throws(FerryError) -> Manifest {
        do {
            return try bytes.withUnsafeBufferPointer { (p) throws(FerryError) -> Manifest in try parse(p, source: source, verifier: verifier) }
        }
    }

    /// The members of a ferry manifest object, as a walk reads them (at the top level of an
    /// unsigned manifest, inside `signed` of a signed one).
    private struct Fields {
        var format: String?
        var version: Int64?
        var generated: Timestamp?
        var expires: Timestamp?
        var collector: EntryCollector
        var sawFiles = false
        var tree: ManifestTree.Reference?
        var layout = RemoteLayout.tree
        var keySet: Int64?
        var rolloutPercent: Int64?
        var previous: Rollout.Previous?
        var bundles: ObjectBundle.Named?
        var packs: ObjectBundle.Named?
        /// Whether any member of a manifest (not an unknown one) was read.
        var sawField = false
        var totalSize: Int64 = 0
        /// Told the reader's offset every 4,096 entries of "files" (`Manifest.parse`'s `passed`).
        var passed: ((Int) -> Void)?

        init(capacity: Int) { collector = EntryCollector(capacity: capacity) }

        mutating func read(_ r: inout JSONReader, key: String) throws(JSONReader.Failure) {
            switch key {
            case "format":
                format = try r.readString()
            case "version":
                let v = try r.readCount("\"version\"")
                if v > Manifest.maximumVersion { throw r.problem("\"version\" \(v) is larger than \(Manifest.maximumVersion) (2^53 − 1), the largest a manifest may carry") }
                version = v
            case "generated", "expires":
                let text = try r.readString()
                guard let t = Timestamp(rfc3339: text) else { throw r.problem("\"\(key)\" is not an RFC 3339 time: \(Printable.quoted(text))") }
                if key == "generated" { generated = t } else { expires = t }
            case "keys":
                let n = try r.readCount("\"keys\"")
                if n < 1 || n > Manifest.maximumVersion { throw r.problem("\"keys\" must name a key set from 1 on") }
                keySet = n
            case "layout":
                let text = try r.readString()
                guard let l = RemoteLayout(rawValue: text) else {
                    throw r.problem("\"layout\" \(Printable.quoted(text)) is not one this ferry reads (tree, objects); a newer ferry may have written it")
                }
                layout = l
            case "tree":
                tree = try Fields.readTree(&r, "\"tree\"")
            case "bundles":
                bundles = try Fields.readBundles(&r, "bundles")
            case "packs":
                packs = try Fields.readBundles(&r, "packs")
            case "rollout":
                let p = try r.readCount("\"rollout\"")
                guard Rollout.percents.contains(Int(clamping: p)) else { throw r.problem("\"rollout\" must be a share of machines from 1 to 99 (percent)") }
                rolloutPercent = p
            case "previous":
                var version: Int64?, layout = RemoteLayout.tree, previousTree: ManifestTree.Reference?
                try r.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                    switch key {
                    case "version": version = try r.readCount("\"previous\".version")
                    case "layout":
                        let text = try r.readString()
                        guard let l = RemoteLayout(rawValue: text) else { throw r.problem("\"previous\".layout \(Printable.quoted(text)) is not tree or objects") }
                        layout = l
                    case "tree": previousTree = try Fields.readTree(&r, "\"previous\".tree")
                    default: try r.skipValue()
                    }
                }
                guard let version, version <= Manifest.maximumVersion, let previousTree else { throw r.problem("\"previous\" must name a version and a tree") }
                previous = Rollout.Previous(version: version, layout: layout, tree: previousTree)
            case "files":
                sawFiles = true
                try r.readArray { (r: inout JSONReader, i: Int) throws(JSONReader.Failure) in
                    try readEntry(&r, i)
                    if i & 4095 == 4095 { passed?(r.offset) }
                }
            default:
                try r.skipValue()
                return
            }
            sawField = true
        }

        /// `{"sha256": HEX, "size": N}`: the list of a tree's bundles (`ManifestTree.Built.bundled`).
        static func readBundles(_ r: inout JSONReader, _ key: String) throws(JSONReader.Failure) -> ObjectBundle.Named {
            var sha: String?, size: Int64?
            try r.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                switch key {
                case "sha256": sha = try r.readString()
                case "size": size = try r.readCount("\"\(key)\".size")
                default: try r.skipValue()
                }
            }
            guard let sha, let digest = SHA256Digest(hex: sha) else {
                throw r.problem("\"\(key)\".sha256 must be 64 hex digits")
            }
            guard let size, size > ObjectBundle.magic.count, size <= ObjectBundle.maximumSize else {
                throw r.problem("\"\(key)\".size must be from 5 to \(ObjectBundle.maximumSize)")
            }
            return ObjectBundle.Named(sha256: digest, size: Int(size))
        }

        /// `{"sha256": HEX, "level": N, "files": N}`: a tree's root object.
        static func readTree(_ r: inout JSONReader, _ what: String) throws(JSONReader.Failure) -> ManifestTree.Reference {
            var sha: String?, level: Int64?, files: Int64?
            try r.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                switch key {
                case "sha256": sha = try r.readString()
                case "level": level = try r.readCount("\(what).level")
                case "files": files = try r.readCount("\(what).files")
                default: try r.skipValue()
                }
            }
            guard let sha, let digest = SHA256Digest(hex: sha) else { throw r.problem("\(what).sha256 must be 64 hex digits") }
            guard let level, (0...Int64(ManifestTree.maximumLevel)).contains(level) else {
                throw r.problem("\(what).level must be 0 to \(ManifestTree.maximumLevel)")
            }
            guard let files, files <= Int64(Int32.max) else { throw r.problem("\(what).files must be a count of files") }
            return ManifestTree.Reference(sha256: digest, level: Int(level), files: Int(files))
        }

        private mutating func readEntry(_ r: inout JSONReader, _ i: Int) throws(JSONReader.Failure) {
            var path: String?, size: Int64?, sha: String?, mtime: Timestamp?, mode: UInt32?
            try r.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                switch key {
                case "path": path = try r.readString()
                case "size":
                    let s = try r.readCount("files[\(i)].size")
                    if s > Manifest.maximumFileSize { throw r.problem("files[\(i)].size is larger than 8 PiB") }
                    totalSize += s
                    if totalSize > Manifest.maximumTotalSize { throw r.problem("the sizes of files[0...\(i)] add up to more than 4 EiB") }
                    size = s
                case "sha256": sha = try r.readString()
                case "mtime":
                    let text = try r.readString()
                    guard let t = Timestamp(rfc3339: text) else { throw r.problem("files[\(i)].mtime is not an RFC 3339 time: \(Printable.quoted(text))") }
                    mtime = t
                case "mode":
                    let text = try r.readString()
                    guard let m = parseMode(text) else { throw r.problem("files[\(i)].mode is not an octal mode like \"0644\": \(Printable.quoted(text))") }
                    mode = m
                default: try r.skipValue()
                }
            }
            guard let path else { throw r.problem("files[\(i)] has no \"path\"") }
            let checked: RelativePath
            do { checked = try RelativePath(validating: path) } catch {
                throw r.problem("files[\(i)].path \(Printable.quoted(path)) is refused: \(error)")
            }
            guard let size else { throw r.problem("files[\(i)] (\(Printable.name(path))) has no \"size\"") }
            guard let sha else { throw r.problem("files[\(i)] (\(Printable.name(path))) has no \"sha256\"") }
            guard let digest = SHA256Digest(hex: sha) else {
                throw r.problem("files[\(i)] (\(Printable.name(path))) sha256 must be 64 hex digits, got \(sha.utf8.count) characters")
            }
            guard collector.add(ManifestEntry(path: checked, size: size, sha256: digest, mtime: mtime, mode: mode)) else {
                throw r.problem("lists \(Printable.quoted(path)) twice")
            }
        }
    }

    private static func parseJSON(_ bytes: UnsafeBufferPointer<UInt8>, source: String, verifier: (any SignatureVerifier)?,
                                  passed: ((Int) -> Void)?) throws(FerryError) -> Manifest {
        var reader = JSONReader(bytes)
        // No entry takes fewer than 96 bytes of JSON (the hash alone is 66): reserved, not touched.
        var fields = Fields(capacity: bytes.count / 96)
        fields.passed = passed
        // A signed manifest: the bytes of its `signed` member, and its signatures (ManifestEnvelope).
        var signed: Range<Int>?
        var signatures: [(key: PublicKey, signature: [UInt8])] = []
        var sawSignatures = false
        do {
            try reader.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in
                switch key {
                case "signed":
                    if signed != nil || fields.sawField { throw r.problem("a signed manifest has one \"signed\" member and no other manifest fields") }
                    let start = try r.valueStart()
                    guard try r.peekKind() == .object else { throw r.problem("\"signed\" must be the manifest object") }
                    fields.passed = nil
                    try r.readObject { (r: inout JSONReader, key: String) throws(JSONReader.Failure) in try fields.read(&r, key: key) }
                    signed = start..<r.offset
                case "signatures":
                    sawSignatures = true
                    signatures = try ManifestEnvelope.readSignatures(&r)
                default:
                    guard signed != nil else { return try fields.read(&r, key: key) }
                    // After `signed`, a member must not be a manifest field: read apart, and refused if it is one.
                    var outside = Fields(capacity: 0)
                    try outside.read(&r, key: key)
                    if outside.sawField { throw r.problem("a signed manifest has one \"signed\" member and no other manifest fields") }
                }
            }
            try reader.expectEnd()
        } catch {
            if error.isSyntax {
                throw .manifest("manifest \(source) is not valid JSON at line \(error.line), column \(error.column): \(error.message)")
            }
            throw .manifest("manifest \(source): \(error.message) (line \(error.line), column \(error.column))")
        }
        if sawSignatures && signed == nil {
            throw .manifest("manifest \(source) carries \"signatures\" but no \"signed\" member: nothing says what they sign")
        }
        guard let format = fields.format else { throw .manifest("manifest \(source) has no \"format\"; expected \"\(formatName)\"") }
        guard format == formatName || format == ManifestTree.formatName else {
            throw .manifest("manifest \(source) has format \(Printable.quoted(format)); this ferry reads \"\(formatName)\" and \"\(ManifestTree.formatName)\"")
        }
        guard let version = fields.version else { throw .manifest("manifest \(source) has no \"version\"") }
        if format == ManifestTree.formatName {
            guard fields.tree != nil, !fields.sawFiles else { throw .manifest("manifest \(source) is \(ManifestTree.formatName) but does not name one \"tree\" (and no \"files\")") }
        } else {
            guard fields.sawFiles else { throw .manifest("manifest \(source) has no \"files\" list") }
        }
        let (entries, duplicate) = fields.collector.finish()
        if let duplicate { throw .manifest("manifest \(source) lists \(Printable.quoted(duplicate.string)) twice") }
        let checks = signed.map { ManifestEnvelope.check(signatures, over: UnsafeBufferPointer(rebasing: bytes[$0]), verifier: verifier) } ?? []
        var manifest = Manifest(format: fields.tree == nil ? .ferry : .tree, version: version, generated: fields.generated, expires: fields.expires,
                                sorted: entries, signatures: checks, tree: fields.tree, layout: fields.layout)
        manifest.keySet = fields.keySet
        manifest.treeBundles = fields.tree == nil ? nil : fields.bundles
        manifest.packs = fields.tree == nil || fields.layout != .objects ? nil : fields.packs
        switch (fields.rolloutPercent, fields.previous) {
        case (nil, nil): break
        case let (percent?, previous?) where fields.tree != nil:
            manifest.rollout = Rollout(percent: Int(percent), previous: previous)
        default:
            throw .manifest("manifest \(source) must give \"rollout\" and \"previous\" together, in a \(ManifestTree.formatName) root")
        }
        return manifest
    }

    /// SHA256SUMS as `sha256sum` writes it, one file per line:
    /// - `<64 hex>  <path>` (text), `<64 hex> *<path>` (binary), or `<64 hex> <path>` (BSD `sha256 -r`);
    /// - `SHA256 (<path>) = <64 hex>` (`sha256sum --tag`, BSD `sha256`);
    /// - a line starting with `\` has an escaped name (coreutils does this for names holding a
    ///   backslash, a newline or a carriage return): `\\`, `\n` and `\r` decode to those bytes;
    /// - CRLF line ends (when the first line has one) and a leading `./` are accepted; `-` (what
    ///   sha256sum writes for its standard input) is refused.
    /// A name that decodes to a control character, or is not UTF-8, refuses the manifest, naming the line.
    private static func parseSHA256SUMS(_ bytes: UnsafeBufferPointer<UInt8>, source: String, passed: ((Int) -> Void)?) throws(FerryError) -> Manifest {
        // No line takes fewer than 67 bytes (hash, space, name, newline): reserved, not touched.
        var collector = EntryCollector(capacity: bytes.count / 67)
        var lineNumber = 0
        var lineStart = bytes.count >= 3 && bytes[0] == 0xEF && bytes[1] == 0xBB && bytes[2] == 0xBF ? 3 : 0
        // CRLF line ends are a property of the file, read from its first line: in a file of LF
        // lines, a carriage return ending a line belongs to the name (and refuses it).
        var firstEnd = lineStart
        while firstEnd < bytes.count && bytes[firstEnd] != 0x0A { firstEnd += 1 }
        let crlf = firstEnd < bytes.count && firstEnd > lineStart && bytes[firstEnd - 1] == 0x0D
        while lineStart < bytes.count {
            lineNumber += 1
            if lineNumber & 4095 == 0 { passed?(lineStart) }
            var lineEnd = lineStart
            while lineEnd < bytes.count && bytes[lineEnd] != 0x0A { lineEnd += 1 }
            defer { lineStart = lineEnd + 1 }
            var end = lineEnd
            if crlf && end > lineStart && bytes[end - 1] == 0x0D { end -= 1 }
            let line = UnsafeBufferPointer(rebasing: bytes[lineStart..<end])
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            func fail(_ why: String) -> FerryError {
                .manifest("manifest \(source) line \(lineNumber): \(why)",
                          hint: "a manifest is either ferry JSON (\"format\": \"\(formatName)\") or SHA256SUMS lines '<sha256>  <path>'")
            }
            let (hexBytes, rawName, escaped) = try splitSumLine(line, fail: fail)
            guard let digest = SHA256Digest(hex: hexBytes) else { throw fail("the hash is not 64 hex digits") }
            var nameBytes = Array(rawName)
            if escaped {
                guard let decoded = unescapeSumName(rawName) else {
                    throw fail("the escaped name \(Printable.quoted(String(decoding: rawName, as: UTF8.self))) has a '\\' that is not \\\\, \\n or \\r")
                }
                nameBytes = decoded
            }
            guard var path = String(validating: nameBytes, as: UTF8.self) else {
                throw fail("the name \(nameBytes.withUnsafeBufferPointer { "\"" + Printable.name(bytes: $0) + "\"" }) is not UTF-8")
            }
            while path.hasPrefix("./") { path.removeFirst(2) }
            if path == "-" {
                throw fail("'-' is what sha256sum writes for its standard input, not a file: the sums were made without file names (an empty file list?)")
            }
            let checked: RelativePath
            do { checked = try RelativePath(validating: path) } catch { throw fail("path \(Printable.quoted(path)) is refused: \(error)") }
            guard collector.add(ManifestEntry(path: checked, size: nil, sha256: digest)) else { throw fail("lists \(Printable.quoted(path)) twice") }
        }
        let (entries, duplicate) = collector.finish()
        if let duplicate { throw .manifest("manifest \(source) lists \(Printable.quoted(duplicate.string)) twice") }
        return Manifest(format: .sha256sums, version: nil, generated: nil, expires: nil, sorted: entries)
    }

    /// The hash, the (still escaped) name, and whether the line was escaped.
    private static func splitSumLine(_ line: UnsafeBufferPointer<UInt8>, fail: (String) -> FerryError) throws(FerryError)
        -> (hex: UnsafeBufferPointer<UInt8>, name: UnsafeBufferPointer<UInt8>, escaped: Bool) {
        var rest = line
        let escaped = rest.first == UInt8(ascii: "\\")
        if escaped { rest = UnsafeBufferPointer(rebasing: rest[1...]) }
        let tag = Array("SHA256 (".utf8)
        if rest.count > tag.count && rest.starts(with: tag) {
            // `SHA256 (<name>) = <hex>`: the name may itself hold ") = ", so the hash is taken from the end.
            guard rest.count >= tag.count + 1 + 4 + 64 else { throw fail("expected 'SHA256 (<path>) = <64 hex digits>'") }
            let hexStart = rest.count - 64
            let separator = Array(") = ".utf8)
            guard Array(rest[(hexStart - 4)..<hexStart]) == separator, hexStart - 4 > tag.count else {
                throw fail("expected 'SHA256 (<path>) = <64 hex digits>'")
            }
            return (UnsafeBufferPointer(rebasing: rest[hexStart...]), UnsafeBufferPointer(rebasing: rest[tag.count..<(hexStart - 4)]), escaped)
        }
        if let paren = rest.firstIndex(of: UInt8(ascii: " ")), paren + 1 < rest.count, rest[paren + 1] == UInt8(ascii: "("),
           paren < 12, rest[0..<paren].allSatisfy({ ($0 >= 65 && $0 <= 90) || ($0 >= 48 && $0 <= 57) || $0 == UInt8(ascii: "-") }) {
            throw fail("this is a \(String(decoding: rest[0..<paren], as: UTF8.self)) line; ferry reads SHA-256 sums only")
        }
        guard rest.count > 65, rest[64] == UInt8(ascii: " ") else { throw fail("expected '<64 hex digits>  <path>'") }
        var nameStart = 65
        if rest[65] == UInt8(ascii: " ") || rest[65] == UInt8(ascii: "*") { nameStart = 66 }
        guard nameStart < rest.count else { throw fail("expected '<64 hex digits>  <path>'") }
        return (UnsafeBufferPointer(rebasing: rest[0..<64]), UnsafeBufferPointer(rebasing: rest[nameStart...]), escaped)
    }

    /// Decodes coreutils' escapes in a name: `\\` → `\`, `\n` → newline, `\r` → carriage return.
    static func unescapeSumName(_ name: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(name.count)
        var i = 0
        while i < name.count {
            let b = name[i]
            guard b == UInt8(ascii: "\\") else { out.append(b); i += 1; continue }
            guard i + 1 < name.count else { return nil }
            switch name[i + 1] {
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            default: return nil
            }
            i += 2
        }
        return out
    }

    /// No path that is both a file and a directory of another file (duplicates were refused while
    /// reading). Siblings sit together in path order, so each parent is looked up once.
    static func checkTree(_ manifest: Manifest, source: String) throws(FerryError) {
        var lastParent: RelativePath?
        for e in manifest.entries {
            let parent = e.path.parent
            if parent == lastParent { continue }
            lastParent = parent
            for a in e.path.ancestors where manifest.lists(a) {
                throw .manifest("manifest \(source) lists \(Printable.quoted(a.string)) as a file and also \(Printable.quoted(e.path.string)) inside it")
            }
        }
    }

    static func parseMode(_ s: String) -> UInt32? {
        guard (1...6).contains(s.utf8.count), let v = UInt32(s, radix: 8) else { return nil }
        return v & 0o777
    }
}

/// Renders a manifest as `ferry-manifest/1` JSON: sorted by path, one file per line, so two builds
/// of the same tree are byte-identical and diffs stay readable.
public enum ManifestWriter {
    public static func render(version: Int64, generated: Timestamp, expires: Timestamp? = nil, layout: RemoteLayout = .tree, keySet: Int64? = nil,
                              entries: [ManifestEntry]) -> String {
        var out = header(Manifest.formatName, version: version, generated: generated, expires: expires, layout: layout, keySet: keySet)
        out += "\n  \"files\": ["
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

    /// Renders a `ferry-manifest/2` root naming `tree`.
    public static func renderRoot(version: Int64, generated: Timestamp, expires: Timestamp? = nil, layout: RemoteLayout = .tree, keySet: Int64? = nil,
                                  rollout: Rollout? = nil, tree: ManifestTree.Reference,
                                  bundles: ObjectBundle.Named? = nil, packs: ObjectBundle.Named? = nil) -> String {
        var out = header(ManifestTree.formatName, version: version, generated: generated, expires: expires, layout: layout, keySet: keySet)
        if let rollout { out += rollout.rendered() }
        if let bundles { out += "\n  \"bundles\": {\"sha256\": \"\(bundles.sha256)\", \"size\": \(bundles.size)}," }
        if let packs { out += "\n  \"packs\": {\"sha256\": \"\(packs.sha256)\", \"size\": \(packs.size)}," }
        out += "\n  \"tree\": {\"sha256\": \"\(tree.sha256)\", \"level\": \(tree.level), \"files\": \(tree.files)}\n}\n"
        return out
    }

    /// The members both formats open with; `layout` only when it is not the default (a tree-layout
    /// manifest reads as it always did, for every ferry), `keys` only after a rotation.
    private static func header(_ format: String, version: Int64, generated: Timestamp, expires: Timestamp?, layout: RemoteLayout, keySet: Int64?) -> String {
        var out = "{\n  \"format\": \"\(format)\",\n  \"version\": \(version),\n  \"generated\": \"\(generated.rfc3339)\","
        if let expires { out += "\n  \"expires\": \"\(expires.rfc3339)\"," }
        if let keySet { out += "\n  \"keys\": \(keySet)," }
        if layout != .tree { out += "\n  \"layout\": \"\(layout.rawValue)\"," }
        return out
    }
}

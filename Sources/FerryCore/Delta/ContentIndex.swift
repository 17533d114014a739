/// A large file's content index (design.md "Delta"): what a mirror needs to find, in data it
/// already holds, the bytes of a new version, and to verify them piece by piece. Kept as
/// immutable objects named by their SHA-256 beside the manifest tree's (`.ferry/meta/`), and named
/// by the file's manifest entry, so a signed root signs it too. Pure: the caller hashes.
///
/// The file is cut into chunks (`ContentChunker`); consecutive chunks form **pieces** (about
/// 145 KiB), each one object holding the piece's SHA-256 and, per chunk, its length and the first
/// 3 bytes of its SHA-256. Nodes above hold their children's names and the bytes each covers.
/// Where a piece or a node ends is decided by what it holds, so one change rewrites the piece that
/// holds it and a node per level, and an insertion moves boundaries only near it.
public enum ContentIndex {
    /// What a manifest entry names: the top object and its level (0: a single piece). A class,
    /// so an entry without one (most of a million) carries 8 bytes for it, not 48.
    ///
    /// `storedAsPieces`: with `remote-layout = objects`, the file's bytes are not one content object
    /// but its pieces, each a content object named by the piece's SHA-256 (`RemoteLayout`), so a
    /// push of a change sends the pieces that changed; a mirror assembles the file from them.
    public final class Reference: Sendable, Hashable, CustomStringConvertible {
        public let sha256: SHA256Digest
        public let level: Int
        public let storedAsPieces: Bool
        public init(sha256: SHA256Digest, level: Int, storedAsPieces: Bool = false) {
            self.sha256 = sha256
            self.level = level
            self.storedAsPieces = storedAsPieces
        }
        /// The same index, stored as pieces or not.
        public func stored(asPieces: Bool) -> Reference {
            asPieces == storedAsPieces ? self : Reference(sha256: sha256, level: level, storedAsPieces: asPieces)
        }
        public static func == (a: Reference, b: Reference) -> Bool {
            a.sha256 == b.sha256 && a.level == b.level && a.storedAsPieces == b.storedAsPieces
        }
        public func hash(into hasher: inout Hasher) {
            hasher.combine(sha256)
            hasher.combine(level)
        }
        public var description: String { "\(sha256.hex)@\(level)\(storedAsPieces ? " as pieces" : "")" }
    }

    /// A chunk as the index knows it: its length and the first 3 bytes of its SHA-256 (enough to
    /// find candidates among a file's chunks, 24 bits beside a length of about 13; the piece's full
    /// hash is what is trusted, so a false candidate costs that piece a fetch).
    public struct Chunk: Sendable, Equatable, Hashable {
        public let length: Int
        public let hash: UInt32
        public init(length: Int, hash: UInt32) {
            self.length = length
            self.hash = hash
        }
        /// The first 3 bytes of a chunk's SHA-256, as the index keeps them.
        public init(length: Int, digest: SHA256Digest) {
            let b = digest.bytes
            self.init(length: length, hash: UInt32(b[0]) | UInt32(b[1]) << 8 | UInt32(b[2]) << 16)
        }
    }

    /// A piece: where it sits in the file, its SHA-256, its chunks, and the object that holds its
    /// detail (`PieceDetail`; nil in an index written before details were), or how it is stored
    /// compressed.
    public struct Piece: Sendable, Equatable {
        public let offset: Int64
        public let length: Int
        public let sha256: SHA256Digest
        public let chunks: [Chunk]
        public var detail: SHA256Digest? = nil
        public var stored: Stored? = nil
        /// The content object that holds the piece when the file is stored as its pieces.
        public var object: SHA256Digest { stored?.sha256 ?? sha256 }
    }

    /// A piece stored compressed (`remote-layout = objects`, where that saves space): each chunk
    /// one zstd frame, the frames one after another in a content object named by their SHA-256
    /// (as every content object is named by the bytes it holds), each frame's length here. The
    /// piece's own SHA-256 is what the decompressed bytes must match.
    public struct Stored: Sendable, Equatable {
        public let sha256: SHA256Digest
        public let lengths: [Int]
        public init(sha256: SHA256Digest, lengths: [Int]) {
            self.sha256 = sha256
            self.lengths = lengths
        }
        public var size: Int { lengths.reduce(0, +) }
        /// The most bytes a frame of `count` bytes takes (zstd's own bound for so small a frame).
        public static func bound(_ count: Int) -> Int { count + count / 256 + 64 }
    }

    /// `fdC3`: after the piece's SHA-256 a byte of flags (1: the name of its detail follows; 2: the
    /// name of the object that holds it compressed, and after each chunk's hash its frame's
    /// length); the chunks as in `fdC2`, which is still read (no detail). `fdC1` (chunk hashes of 4 bytes) is
    /// not: its index is refused, the file fetched whole once, and the next build writes `fdC3`.
    static let pieceMagic: [UInt8] = Array("fdC3".utf8)
    static let pieceMagicWithoutDetail: [UInt8] = Array("fdC2".utf8)
    static let pieceHasDetail: UInt8 = 1
    static let pieceStoredCompressed: UInt8 = 2
    static let nodeMagic: [UInt8] = Array("fdN1".utf8)
    /// A piece ends after a chunk whose hash is 0 mod 32 once it holds 8 chunks, and at 256:
    /// about 40 chunks, 145 KiB. What a change costs a mirror's index and a push of the objects
    /// layout is about the pieces it touches.
    public static let piecesMinimumChunks = 8
    static let pieceBoundary: UInt32 = 32
    public static let pieceMaximumChunks = 256
    /// A node ends after a child whose name is 0 mod 8 once it holds 8 children, and at 64.
    static let nodeMinimum = 8
    static let nodeMaximum = 64
    public static let maximumLevel = 12

    /// The most index bytes a file of `size` bytes may take: far above what ferry writes
    /// (about 0.19% of the file), and what bounds what a hostile index can make a mirror read.
    public static func maximumBytes(forFileOf size: Int64) -> Int64 { size / 64 + (64 << 10) }
    /// No index object is larger: a piece of 256 chunks takes 1,351 bytes, a detail at most 4,087, a node of 64 children
    /// 2,694. What a reader fetches of one is bounded by it.
    public static let maximumObjectSize = 4096

    // MARK: building

    /// Builds an index chunk by chunk: `add` each chunk in order; when it says the piece ended,
    /// `endPiece` with the piece's SHA-256 (the caller hashes the bytes as it reads them).
    public struct Builder {
        var pieces: [(sha256: SHA256Digest, length: Int, chunks: [Chunk], detail: [UInt8]?, stored: Stored?)] = []
        var chunks: [Chunk] = []
        var length = 0

        public init() {}

        /// Takes the next chunk; true when the piece ends with it.
        public mutating func add(_ chunk: Chunk) -> Bool {
            chunks.append(chunk)
            length += chunk.length
            return chunks.count >= ContentIndex.pieceMaximumChunks
                || (chunks.count >= ContentIndex.piecesMinimumChunks && chunk.hash % ContentIndex.pieceBoundary == 0)
        }

        /// Whether chunks wait for `endPiece` (the file's end ends the last piece).
        public var pieceOpen: Bool { !chunks.isEmpty }

        /// Ends the piece with its SHA-256 and its detail object (`PieceDetail.Hasher.finish`), or
        /// how it is stored compressed (a frame a chunk).
        public mutating func endPiece(sha256: SHA256Digest, detail: [UInt8]? = nil, stored: Stored? = nil) {
            precondition(stored.map { $0.lengths.count == chunks.count } ?? true, "a frame a chunk")
            pieces.append((sha256, length, chunks, detail, stored))
            chunks = []
            length = 0
        }

        /// The objects, each once, and the reference to the top one. An empty file has no index.
        /// Above a single piece the top (`fdN2`) names the bundles of the objects below it
        /// (`IndexBundle`), which come last.
        public func finish(hash: (UnsafeRawBufferPointer) -> SHA256Digest) -> (reference: Reference, objects: [(sha256: SHA256Digest, bytes: [UInt8])])? {
            precondition(chunks.isEmpty, "the last piece is ended before the index is")
            guard !pieces.isEmpty else { return nil }
            var objects: [(sha256: SHA256Digest, bytes: [UInt8])] = []
            var seen = Set<SHA256Digest>()
            // What the bundles hold: the nodes below the top (the highest first), then the
            // pieces; and the details.
            var pieceObjects: [[UInt8]] = [], details: [[UInt8]] = [], nodes: [[[UInt8]]] = []
            func seal(_ bytes: [UInt8], into list: inout [[UInt8]]) -> SHA256Digest {
                let digest = bytes.withUnsafeBytes { hash($0) }
                if seen.insert(digest).inserted {
                    objects.append((digest, bytes))
                    list.append(bytes)
                }
                return digest
            }
            var level: [(sha256: SHA256Digest, bytes: Int64)] = pieces.map { piece in
                (seal(Builder.pieceObject(piece, detail: piece.detail.map { seal($0, into: &details) }),
                      into: &pieceObjects), Int64(piece.length))
            }
            guard level.count > 1 else { return (Reference(sha256: level[0].sha256, level: 0), objects) }
            var height = 0
            while true {
                height += 1
                var made: [(bytes: [UInt8], covers: Int64)] = []
                var group: [(sha256: SHA256Digest, bytes: Int64)] = []
                func close() {
                    var out = [UInt8(height)]
                    varint(UInt64(group.count), into: &out)
                    for child in group {
                        out += child.sha256.bytes
                        varint(UInt64(child.bytes), into: &out)
                    }
                    made.append((out, group.reduce(0) { $0 + $1.bytes }))
                    group = []
                }
                for child in level {
                    group.append(child)
                    if group.count >= ContentIndex.nodeMaximum || (group.count >= ContentIndex.nodeMinimum && child.sha256.bytes[7] % 8 == 0) { close() }
                }
                if !group.isEmpty { close() }
                // The top is sealed last, once it names the bundles of all below it.
                if made.count == 1 {
                    return finish(top: made[0].bytes, height: height, nodes: nodes, pieces: pieceObjects,
                                  details: details, objects: objects, hash: hash)
                }
                var sealed: [[UInt8]] = []
                level = made.map { (seal(ContentIndex.nodeMagic + $0.bytes, into: &sealed), $0.covers) }
                nodes.insert(sealed, at: 0)
            }
        }

        /// The top (`fdN2`: its level, then the lists of its bundles, then its children as a
        /// node's) after the bundles of the objects below it.
        private func finish(top: [UInt8], height: Int, nodes: [[[UInt8]]], pieces: [[UInt8]], details: [[UInt8]],
                            objects: [(sha256: SHA256Digest, bytes: [UInt8])],
                            hash: (UnsafeRawBufferPointer) -> SHA256Digest)
            -> (reference: Reference, objects: [(sha256: SHA256Digest, bytes: [UInt8])]) {
            var objects = objects
            var lists = IndexBundle.Lists()
            func named(_ bundle: [UInt8]) -> IndexBundle.Named {
                let digest = bundle.withUnsafeBytes { hash($0) }
                objects.append((digest, bundle))
                return IndexBundle.Named(sha256: digest, size: bundle.count)
            }
            lists.index = ObjectBundle.pack(nodes.flatMap { $0 } + pieces).map(named)
            lists.details = ObjectBundle.pack(details).map(named)
            var out = IndexBundle.topMagic + [UInt8(height)]
            IndexBundle.write(lists, into: &out)
            out += top.dropFirst()
            let digest = out.withUnsafeBytes { hash($0) }
            objects.append((digest, out))
            return (Reference(sha256: digest, level: height), objects)
        }

        /// A piece's object (`fdC3`), naming its detail when it has one.
        static func pieceObject(_ piece: (sha256: SHA256Digest, length: Int, chunks: [Chunk], detail: [UInt8]?,
                                          stored: Stored?),
                                detail: SHA256Digest?) -> [UInt8] {
            var out = ContentIndex.pieceMagic
            out += piece.sha256.bytes
            out += [(detail == nil ? 0 : ContentIndex.pieceHasDetail)
                    | (piece.stored == nil ? 0 : ContentIndex.pieceStoredCompressed)]
            if let detail { out += detail.bytes }
            if let stored = piece.stored { out += stored.sha256.bytes }
            varint(UInt64(piece.chunks.count), into: &out)
            for (i, c) in piece.chunks.enumerated() {
                varint(UInt64(c.length), into: &out)
                out += [UInt8(c.hash & 0xFF), UInt8(c.hash >> 8 & 0xFF), UInt8(c.hash >> 16 & 0xFF)]
                if let stored = piece.stored { varint(UInt64(stored.lengths[i]), into: &out) }
            }
            return out
        }
    }

    static func varint(_ value: UInt64, into out: inout [UInt8]) { ManifestTree.ObjectWriter.varint(value, into: &out) }

    // MARK: reading

    /// The most pieces an index of a file of `size` bytes can hold: every piece but the last holds
    /// at least `piecesMinimumChunks` chunks, and every chunk but the file's last at least
    /// `ContentChunker.minimum` bytes. What bounds a reader's memory however often an index names
    /// the same object (repeats are content: zeroed space, a file held twice).
    public static func maximumPieces(forFileOf size: Int64) -> Int {
        Int(size / Int64(piecesMinimumChunks * ContentChunker.minimum)) + 1
    }

    /// The pieces of the index `reference` names for a file of `size` bytes, in order, and the
    /// name of every object read, each once. `load` gives the bytes of a batch of objects, each
    /// already checked against its name. An object may be named many times (a file that repeats
    /// itself has repeated pieces, and nodes over them): it is loaded and read once, and every
    /// place that names it must agree on the bytes it covers. Every object is checked as it is
    /// read: its kind and level, the bytes it covers against what its parent says, its chunks'
    /// lengths within the chunker's bounds; what the index may load (`maximumBytes`) and how many
    /// places it may name (`maximumPieces`) are bounded by the file's size. `source` names the
    /// file in errors.
    public static func resolve(_ reference: Reference, size: Int64, source: String,
                               load: ([SHA256Digest]) throws(FerryError) -> [[UInt8]])
        throws(FerryError) -> (pieces: [Piece], objects: [SHA256Digest]) {
        func refused(_ digest: SHA256Digest?, _ text: String) -> FerryError {
            .manifest("the content index of \(source)\(digest.map { " (object \($0.hex))" } ?? "") is refused: \(text)",
                      hint: "the publisher's index is damaged or was tampered with: publish it again (ferry manifest build, or a push)")
        }
        guard reference.level <= maximumLevel, size > 0 else {
            throw refused(nil, "it names a tree of level \(reference.level) for a file of \(size) bytes")
        }
        var reader = Reading(size: size, bound: maximumBytes(forFileOf: size), places: maximumPieces(forFileOf: size))
        var current: [(SHA256Digest, Int64)] = [(reference.sha256, size)]
        for level in stride(from: reference.level, to: 0, by: -1) {
            let nodes = try reader.read(current, load: load, refused: refused) {
                (bytes, covers) throws(ManifestTree.Problem) in
                try readNode(bytes, level: level, covers: covers, top: level == reference.level)
            }
            var next: [(SHA256Digest, Int64)] = []
            for (digest, _) in current { next += nodes[digest]! }
            guard next.count <= reader.places else {
                throw refused(nil, "it names \(next.count) objects at level \(level - 1), more than a file of \(size) "
                                   + "bytes holds")
            }
            current = next
        }
        let read = try reader.read(current, load: load, refused: refused) {
            (bytes, covers) throws(ManifestTree.Problem) in
            try readPiece(bytes, covers: covers)
        }
        var pieces: [Piece] = []
        pieces.reserveCapacity(current.count)
        var offset: Int64 = 0
        for (i, (digest, covers)) in current.enumerated() {
            let piece = read[digest]!
            if let why = chunkProblem(piece.chunks, lastPiece: i == current.count - 1) { throw refused(digest, why) }
            pieces.append(Piece(offset: offset, length: Int(covers), sha256: piece.sha256, chunks: piece.chunks,
                                detail: piece.detail, stored: piece.stored))
            offset += covers
        }
        return (pieces, reader.objects)
    }

    /// What a reader of one index has loaded: each object once, and the bytes they took.
    struct Reading {
        let size: Int64
        let bound: Int64
        let places: Int
        var loaded: Int64 = 0
        var objects: [SHA256Digest] = []

        /// Reads each object `named` names once (in batches within the bound), with `decode`,
        /// checking that every place naming it says it covers the same bytes.
        mutating func read<T>(_ named: [(SHA256Digest, Int64)], load: ([SHA256Digest]) throws(FerryError) -> [[UInt8]],
                              refused: (SHA256Digest?, String) -> FerryError,
                              decode: ([UInt8], Int64) throws(ManifestTree.Problem) -> T)
            throws(FerryError) -> [SHA256Digest: T] {
            var covers: [SHA256Digest: Int64] = [:]
            var distinct: [(SHA256Digest, Int64)] = []
            for (digest, n) in named {
                if let earlier = covers[digest] {
                    guard earlier == n else {
                        throw refused(digest, "it is named as covering \(earlier) bytes in one place and \(n) in "
                                              + "another")
                    }
                } else {
                    covers[digest] = n
                    distinct.append((digest, n))
                }
            }
            var out: [SHA256Digest: T] = [:]
            for batch in ContentIndex.batches(distinct, room: bound - loaded) {
                let bodies = try load(batch.map(\.0))
                for ((digest, n), bytes) in zip(batch, bodies) {
                    objects.append(digest)
                    loaded += Int64(bytes.count)
                    guard loaded <= bound else {
                        throw refused(digest, "it takes more than \(bound) bytes for a file of \(size) bytes")
                    }
                    do throws(ManifestTree.Problem) {
                        out[digest] = try decode(bytes, n)
                    } catch { throw refused(digest, error.text) }
                }
            }
            return out
        }
    }

    /// Why the chunks of a piece cannot be what the chunker cut (nil: they can): every piece but
    /// the file's last holds at least `piecesMinimumChunks` chunks, every chunk but the file's
    /// last at least `ContentChunker.minimum` bytes.
    static func chunkProblem(_ chunks: [Chunk], lastPiece: Bool) -> String? {
        if !lastPiece && chunks.count < piecesMinimumChunks {
            return "a piece before the last holds \(chunks.count) chunks, fewer than \(piecesMinimumChunks)"
        }
        let short = lastPiece ? chunks.dropLast() : chunks[...]
        if let chunk = short.first(where: { $0.length < ContentChunker.minimum }) {
            return "it holds a chunk of \(chunk.length) bytes before the file's last, shorter than "
                   + "\(ContentChunker.minimum)"
        }
        return nil
    }

    /// Batches of at most 1,024 objects, and no more than `room` bytes of objects of the
    /// largest size allow (at least one): what a batch loads stays within the bound.
    static func batches(_ items: [(SHA256Digest, Int64)], room: Int64) -> [ArraySlice<(SHA256Digest, Int64)>] {
        let size = Int(max(1, min(1024, room / Int64(maximumObjectSize))))
        return stride(from: 0, to: items.count, by: size).map { items[$0..<min($0 + size, items.count)] }
    }

    /// The children of a node; `top`: the index's top, which may name its bundles (`fdN2`).
    static func readNode(_ bytes: [UInt8], level: Int, covers: Int64,
                         top: Bool = false) throws(ManifestTree.Problem) -> [(SHA256Digest, Int64)] {
        try bytes.withUnsafeBufferPointer { (b) throws(ManifestTree.Problem) -> [(SHA256Digest, Int64)] in
            var r = ManifestTree.ObjectReader(b)
            let bundled = top && b.count >= 4 && b.prefix(4).elementsEqual(IndexBundle.topMagic)
            try r.expect(bundled ? IndexBundle.topMagic : nodeMagic, "an index node (level \(level))")
            let stated = Int(try r.byte())
            guard stated == level else { throw ManifestTree.Problem(text: "it says it is at level \(stated) where level \(level) belongs") }
            if bundled { _ = try IndexBundle.read(&r, bound: maximumBytes(forFileOf: covers)) }
            let count = Int(try r.varint(max: UInt64(nodeMaximum), "its count of children"))
            guard count > 0 else { throw ManifestTree.Problem(text: "it is a node without children") }
            var children: [(SHA256Digest, Int64)] = []
            var sum: Int64 = 0
            for _ in 0..<count {
                let digest = try r.digest()
                let n = Int64(try r.varint(max: UInt64(covers), "the bytes a child covers"))
                guard n > 0 else { throw ManifestTree.Problem(text: "it names a child that covers no bytes") }
                sum += n
                guard sum <= covers else { throw ManifestTree.Problem(text: "its children cover more than the \(covers) bytes its parent says") }
                children.append((digest, n))
            }
            guard sum == covers else { throw ManifestTree.Problem(text: "its children cover \(sum) bytes, not the \(covers) its parent says") }
            guard r.atEnd else { throw ManifestTree.Problem(text: "it has bytes after its last child") }
            return children
        }
    }

    /// A piece object as read: its SHA-256, chunks, detail and how it is stored.
    struct ReadPiece {
        let sha256: SHA256Digest
        let chunks: [Chunk]
        let detail: SHA256Digest?
        let stored: Stored?
    }

    static func readPiece(_ bytes: [UInt8], covers: Int64) throws(ManifestTree.Problem) -> ReadPiece {
        guard covers <= Int64(pieceMaximumChunks * ContentChunker.maximum) else {
            throw ManifestTree.Problem(text: "its parent says it covers \(covers) bytes, more than a piece holds")
        }
        return try bytes.withUnsafeBufferPointer { (b) throws(ManifestTree.Problem) -> ReadPiece in
            var r = ManifestTree.ObjectReader(b)
            let old = b.count >= 4 && b.prefix(4).elementsEqual(pieceMagicWithoutDetail)
            try r.expect(old ? pieceMagicWithoutDetail : pieceMagic, "an index piece")
            let sha = try r.digest()
            var (detail, storedAs): (SHA256Digest?, SHA256Digest?) = (nil, nil)
            if !old {
                let flags = try r.byte()
                guard flags & ~(pieceHasDetail | pieceStoredCompressed) == 0 else {
                    throw ManifestTree.Problem(text: "it has flags \(flags) this ferry does not know")
                }
                if flags & pieceHasDetail != 0 { detail = try r.digest() }
                if flags & pieceStoredCompressed != 0 { storedAs = try r.digest() }
            }
            let count = Int(try r.varint(max: UInt64(pieceMaximumChunks), "its count of chunks"))
            guard count > 0 else { throw ManifestTree.Problem(text: "it is a piece without chunks") }
            var chunks: [Chunk] = []
            var frames: [Int] = []
            chunks.reserveCapacity(count)
            var sum: Int64 = 0
            for _ in 0..<count {
                let length = Int(try r.varint(max: UInt64(ContentChunker.maximum), "a chunk's length"))
                guard length > 0 else { throw ManifestTree.Problem(text: "it holds an empty chunk") }
                let h = try r.take(3)
                chunks.append(Chunk(length: length, hash: UInt32(h[0]) | UInt32(h[1]) << 8 | UInt32(h[2]) << 16))
                sum += Int64(length)
                if storedAs != nil {
                    let frame = Int(try r.varint(max: UInt64(Stored.bound(length)), "a frame's length"))
                    guard frame > 0 else { throw ManifestTree.Problem(text: "it holds an empty frame") }
                    frames.append(frame)
                }
            }
            guard sum == covers else { throw ManifestTree.Problem(text: "its chunks cover \(sum) bytes, not the \(covers) its parent says") }
            guard r.atEnd else { throw ManifestTree.Problem(text: "it has bytes after its last chunk") }
            return ReadPiece(sha256: sha, chunks: chunks, detail: detail,
                             stored: storedAs.map { Stored(sha256: $0, lengths: frames) })
        }
    }

    /// The names of the objects of the index `reference` names that `node` can give (a cached
    /// node's bytes, nil when it has none): the top, the nodes under it, and the pieces the lowest
    /// nodes name; with `details`, the details those pieces name and the bundles the top names
    /// (what a publisher keeps; a mirror fetches those for one update and does not keep them).
    /// What a mirror's cache keeps for a file it holds; unchecked (a damaged object is found when
    /// it is read, and fetched again).
    public static func names(_ reference: Reference, details: Bool = false,
                             node: (SHA256Digest) -> [UInt8]?) -> [SHA256Digest] {
        var out = [reference.sha256]
        var seen: Set<SHA256Digest> = [reference.sha256]
        // A publisher keeps the bundles its top names; a mirror reads them, never keeps them.
        if details, let lists = node(reference.sha256).flatMap(IndexBundle.lists(ofTop:)) {
            for bundle in lists.all where seen.insert(bundle.sha256).inserted { out.append(bundle.sha256) }
        }
        var current = [reference.sha256]
        var level = reference.level
        // Each object once, and no more of them than an index of the largest file could hold
        // (cached nodes are checked only when read: a damaged set of them must not multiply).
        while level > 0 && !current.isEmpty && out.count < maximumNames {
            var next: [SHA256Digest] = []
            for digest in current {
                guard let bytes = node(digest) else { continue }
                for child in children(bytes) where seen.insert(child).inserted { next.append(child) }
            }
            out += next
            current = next
            level -= 1
        }
        if details && level == 0 {
            for piece in current {
                if let detail = node(piece).flatMap(detailName), seen.insert(detail).inserted { out.append(detail) }
            }
        }
        return out
    }

    /// The detail a piece object names, read without checking the rest.
    static func detailName(_ bytes: [UInt8]) -> SHA256Digest? {
        bytes.withUnsafeBufferPointer { b -> SHA256Digest? in
            var r = ManifestTree.ObjectReader(b)
            guard (try? r.expect(pieceMagic, "")) != nil, (try? r.digest()) != nil,
                  let flags = try? r.byte(), flags & pieceHasDetail != 0 else { return nil }
            return try? r.digest()
        }
    }

    /// More objects than an index of a 4 EiB file... far more than any real index: a bound on a walk.
    static let maximumNames = 1 << 22

    /// The children a node names, read without checking what they cover.
    static func children(_ bytes: [UInt8]) -> [SHA256Digest] {
        bytes.withUnsafeBufferPointer { b -> [SHA256Digest] in
            var r = ManifestTree.ObjectReader(b)
            let bundled = (try? r.expect(IndexBundle.topMagic, "")) != nil
            guard bundled || (try? r.expect(nodeMagic, "")) != nil, (try? r.byte()) != nil,
                  !bundled || (try? IndexBundle.read(&r, bound: Int64.max / 2)) != nil,
                  let count = try? r.varint(max: UInt64(nodeMaximum), "") else { return [] }
            var out: [SHA256Digest] = []
            for _ in 0..<count {
                guard let d = try? r.digest(), (try? r.varint("")) != nil else { break }
                out.append(d)
            }
            return out
        }
    }
}

/// Where each byte of a new version of a large file comes from: bytes the mirror already holds
/// (a chunk of an old file with the same length and hash) or the remote. Made from the new
/// version's index and the chunks of the local files; the unit it is verified by is the piece
/// (`ContentIndex.Piece`), whose SHA-256 every assembled piece must match. Pure.
public struct DeltaPlan: Sendable {
    /// Bytes held locally: which file (an index into the files the plan was made from) and where.
    public struct Location: Sendable, Hashable {
        public let file: Int
        public let offset: Int64
        public init(file: Int, offset: Int64) {
            self.file = file
            self.offset = offset
        }
    }
    /// A run of a piece's bytes, from one place: `from` nil means fetched from the remote.
    public struct Segment: Sendable, Equatable {
        public var length: Int
        public let from: Location?
    }
    public struct Piece: Sendable {
        public let offset: Int64
        public let length: Int
        public let sha256: SHA256Digest
        public internal(set) var segments: [Segment]
        /// How the piece's object holds it when it is stored compressed (nil: as it is).
        public var frames: Frames? = nil
        /// Whether any of its bytes are local (a piece that fails its check is then fetched whole).
        public var reusesLocalBytes: Bool { segments.contains { $0.from != nil } }
        /// The content object that holds the piece when the file is stored as its pieces.
        public var object: SHA256Digest { frames?.object ?? sha256 }
        /// The bytes of that object.
        public var storedLength: Int { frames?.stored.reduce(0, +) ?? length }
    }

    /// A piece stored compressed: its object, and each chunk's length and frame's length, in order.
    /// A run of its bytes is fetched as the frames of the chunks it covers, whole.
    public struct Frames: Sendable {
        public let object: SHA256Digest
        public let plain: [Int]
        public let stored: [Int]

        /// Where the frames of the piece's bytes `range` are in the object (nil: the range does not
        /// start and end at a chunk's edge).
        public func storedRange(of range: Range<Int>) -> Range<Int>? {
            var (plainAt, storedAt) = (0, 0)
            var start: Int?
            for (p, s) in zip(plain, stored) {
                if plainAt == range.lowerBound { start = storedAt }
                plainAt += p
                storedAt += s
                if plainAt == range.upperBound { return start.map { $0..<storedAt } }
                if plainAt > range.upperBound { return nil }
            }
            return nil
        }
    }
    /// A chunk of a local file, where it is.
    public struct LocalChunk: Sendable {
        public let chunk: ContentIndex.Chunk
        public let at: Location
        public init(_ chunk: ContentIndex.Chunk, at: Location) {
            self.chunk = chunk
            self.at = at
        }
    }

    public internal(set) var pieces: [Piece]

    /// Bytes the plan takes from local files, and from the remote.
    public var reused: Int64 { pieces.reduce(0) { $0 + $1.segments.reduce(0) { $0 + ($1.from == nil ? 0 : Int64($1.length)) } } }
    public var fetched: Int64 { pieces.reduce(0) { $0 + $1.segments.reduce(0) { $0 + ($1.from == nil ? Int64($1.length) : 0) } } }
    public var size: Int64 { pieces.last.map { $0.offset + Int64($0.length) } ?? 0 }

    /// Each chunk of `pieces` found among `local` (same length and hash; of several places, the
    /// one that goes on from the chunk before, its own place in file 0, else the first found)
    /// is taken from there, the rest fetched; neighbouring runs from one place are merged. With
    /// `selfFile`, a chunk no local file holds but an earlier piece of the new version does (a file
    /// that repeats itself: zeroed space, the same file twice in an archive) is taken from that
    /// piece once it is assembled, as file `selfFile`: fetched once, however often it repeats.
    public init(pieces indexed: [ContentIndex.Piece], local: [LocalChunk], selfFile: Int? = nil) {
        var known: [ContentIndex.Chunk: Location] = [:]
        known.reserveCapacity(local.count)
        // Where a chunk's name (24 bits of hash and its length) is held more than once: the same
        // bytes repeated, or other bytes that share the name. There the plan takes the place that
        // goes on from the bytes before it, or the chunk's own place in the first file, before
        // any other: a name two pieces of other bytes share costs a piece that does not verify
        // (fetched whole, with the rest of the request it came in), about twice a GiB.
        var shared: [Location: ContentIndex.Chunk] = [:]
        for c in local {
            if let first = known[c.chunk] {
                shared[first] = c.chunk
                shared[c.at] = c.chunk
            } else {
                known[c.chunk] = c.at
            }
        }
        var earlier: [ContentIndex.Chunk: Location] = [:]
        var next: Location?
        pieces = indexed.map { piece in
            var segments: [Segment] = []
            var at = piece.offset
            for chunk in piece.chunks {
                var from = known[chunk]
                if from != nil, !shared.isEmpty {
                    if let n = next, shared[n] == chunk {
                        from = n
                    } else if shared[Location(file: 0, offset: at)] == chunk {
                        from = Location(file: 0, offset: at)
                    }
                }
                from = from ?? earlier[chunk]
                DeltaPlan.append(Segment(length: chunk.length, from: from), to: &segments)
                next = from.map { Location(file: $0.file, offset: $0.offset + Int64(chunk.length)) }
                at += Int64(chunk.length)
            }
            if let selfFile {
                var at = piece.offset
                for chunk in piece.chunks {
                    if known[chunk] == nil && earlier[chunk] == nil {
                        earlier[chunk] = Location(file: selfFile, offset: at)
                    }
                    at += Int64(chunk.length)
                }
            }
            let frames = piece.stored.map {
                Frames(object: $0.sha256, plain: piece.chunks.map(\.length), stored: $0.lengths)
            }
            return Piece(offset: piece.offset, length: piece.length, sha256: piece.sha256, segments: segments,
                         frames: frames)
        }
    }

    static func append(_ segment: Segment, to segments: inout [Segment]) {
        if var last = segments.last {
            let joins: Bool
            switch (last.from, segment.from) {
            case (nil, nil): joins = true
            case let (a?, b?): joins = a.file == b.file && a.offset + Int64(last.length) == b.offset
            default: joins = false
            }
            if joins {
                last.length += segment.length
                segments[segments.count - 1] = last
                return
            }
        }
        segments.append(segment)
    }

    /// Piece `i` is fetched whole from now on (its local bytes did not verify).
    public mutating func fetchWhole(_ i: Int) {
        pieces[i].segments = [Segment(length: pieces[i].length, from: nil)]
    }

    /// Local bytes between two fetched runs of a piece stored compressed are fetched too, where the
    /// one run that makes takes at most `upTo` bytes of frames: a compressed piece's runs come a
    /// range a request, and a request costs more than a few KiB of frames on any link (on loopback
    /// ~0.2 ms of client CPU; across 50 ms at 100 Mbit/s, 600 KB). A database's scattered changes
    /// touch a piece in ~5 runs. The bound keeps each answer within one loopback TCP segment
    /// (64 KiB): a longer one may wait 40 ms for the client's delayed ACK behind a server's
    /// `tcp_nopush` (nginx's, Debian's default), which costs more than the request it saves.
    public func bridgingGaps(upTo run: Int) -> DeltaPlan {
        var bridged = self
        for i in bridged.pieces.indices {
            guard let frames = pieces[i].frames, pieces[i].segments.count > 2 else { continue }
            let old = pieces[i].segments
            var segments: [Segment] = []
            var at = 0
            var runStart = 0
            for (k, s) in old.enumerated() {
                var s = s
                if s.from != nil, k > 0, k + 1 < old.count, old[k - 1].from == nil, old[k + 1].from == nil,
                   let stored = frames.storedRange(of: runStart..<at + s.length + old[k + 1].length), stored.count <= run {
                    s = Segment(length: s.length, from: nil)
                }
                if s.from == nil && segments.last.map({ $0.from != nil }) ?? true { runStart = at }
                DeltaPlan.append(s, to: &segments)
                at += s.length
            }
            bridged.pieces[i].segments = segments
        }
        return bridged
    }

    /// The same pieces, every one fetched whole.
    public func fetchingAll() -> DeltaPlan {
        var all = self
        for i in all.pieces.indices { all.fetchWhole(i) }
        return all
    }

    /// The index of the piece that holds byte `offset` (the plan's end: `pieces.count`).
    public func piece(at offset: Int64) -> Int {
        var lo = 0, hi = pieces.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if pieces[mid].offset + Int64(pieces[mid].length) <= offset { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    /// Whether the plan saves enough to be worth its requests: at least 1/16 of the file reused.
    public var worthIt: Bool { reused * 16 >= size && reused > 0 }
}

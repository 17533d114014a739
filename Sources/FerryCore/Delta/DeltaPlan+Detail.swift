/// A plan made finer with pieces' details (`PieceDetail`): a run a plan fetches sits between bytes
/// it takes from a local file, and where those are, the old version of the run's bytes most likely
/// is too (just after the bytes before it, or just before the bytes after it: a write in place, or
/// the two sides of an insertion). Each block of the piece the run touches is hashed as it would
/// stand with those old bytes; a block whose hash is the detail's is taken from there. Pure: the
/// caller reads.
extension DeltaPlan {
    /// Where the old bytes of a fetched run may be: at the end of the local bytes before it, or
    /// before the local bytes after it (nil: not beside local bytes of a file below `files`).
    struct Guesses {
        var left: Location?
        var right: Location?
        var any: Bool { left != nil || right != nil }
    }

    func guesses(piece i: Int, segment k: Int, files: Int) -> Guesses {
        let segments = pieces[i].segments
        let before: Segment? = k > 0 ? segments[k - 1] : (i > 0 ? pieces[i - 1].segments.last : nil)
        let after: Segment? = k + 1 < segments.count ? segments[k + 1]
            : (i + 1 < pieces.count ? pieces[i + 1].segments.first : nil)
        var out = Guesses()
        if let b = before, let at = b.from, at.file < files {
            out.left = Location(file: at.file, offset: at.offset + Int64(b.length))
        }
        if let a = after, let at = a.from, at.file < files, at.offset >= Int64(segments[k].length) {
            out.right = Location(file: at.file, offset: at.offset - Int64(segments[k].length))
        }
        return out
    }

    /// The pieces whose detail is worth fetching: a detail named, and fetched runs beside local
    /// bytes of a file below `files` that come to more than twice the detail's size.
    public func detailsWanted(_ indexed: [ContentIndex.Piece], files: Int) -> [Int] {
        pieces.indices.filter { i in
            guard i < indexed.count, indexed[i].detail != nil else { return false }
            let length = pieces[i].length
            let detailSize = 8 + 2 * ((length + PieceDetail.blockSize(forPieceOf: length) - 1)
                                      / PieceDetail.blockSize(forPieceOf: length))
            var beside = 0
            for (k, s) in pieces[i].segments.enumerated() where s.from == nil
                && guesses(piece: i, segment: k, files: files).any {
                beside += s.length
            }
            return beside > 2 * detailSize
        }
    }

    /// Piece `i` with each block its detail's `hashes` vouch for taken from where the old bytes
    /// of its fetched runs are likely to be. `read` gives `count` bytes of a local file at a
    /// location (nil: it cannot); only files below `files` are read.
    public mutating func refine(_ i: Int, hashes: [UInt16], files: Int, read: (Location, Int) -> [UInt8]?) {
        let piece = pieces[i]
        let block = PieceDetail.blockSize(forPieceOf: piece.length)
        guard hashes.count == (piece.length + block - 1) / block else { return }
        var starts: [Int] = []
        var at = 0
        for s in piece.segments {
            starts.append(at)
            at += s.length
        }
        var out: [Segment] = []
        for (k, segment) in piece.segments.enumerated() {
            let guesses = guesses(piece: i, segment: k, files: files)
            guard segment.from == nil, guesses.any else {
                DeltaPlan.append(segment, to: &out)
                continue
            }
            let start = starts[k], end = starts[k] + segment.length
            // The bytes of the run each block vouches for, by where they are.
            var found: [(from: Int, to: Int, at: Location)] = []
            var b = start / block * block
            while b < end {
                let blockEnd = min(b + block, piece.length)
                for guess in [guesses.left, guesses.right].compactMap({ $0 }) {
                    let bytes = candidate(piece: piece, starts: starts, range: b..<blockEnd, run: k, guess: guess,
                                          read: read)
                    if let bytes, PieceDetail.hash(bytes) == hashes[b / block] {
                        let from = max(b, start)
                        found.append((from, min(blockEnd, end), Location(file: guess.file,
                                                                         offset: guess.offset + Int64(from - start))))
                        break
                    }
                }
                b = blockEnd
            }
            var cursor = start
            for f in DeltaPlan.corroborated(found) {
                if f.from > cursor { DeltaPlan.append(Segment(length: f.from - cursor, from: nil), to: &out) }
                DeltaPlan.append(Segment(length: f.to - f.from, from: f.at), to: &out)
                cursor = f.to
            }
            if end > cursor { DeltaPlan.append(Segment(length: end - cursor, from: nil), to: &out) }
        }
        pieces[i].segments = out
    }

    /// The blocks found that a neighbour found at the same place backs: a 16-bit hash matches
    /// bytes that are not the block's once in 65,536 tries, and a delta of 1% of a GiB in 100 KiB
    /// runs tries about 44,000 blocks whose old bytes are gone (each wrong guess costs its piece
    /// fetched whole and the rest of the request it came in); two neighbours both matching by
    /// chance is once in 2^32. Blocks that stand alone between changes are fetched.
    static func corroborated(_ found: [(from: Int, to: Int, at: Location)]) -> [(from: Int, to: Int, at: Location)] {
        func joined(_ a: (from: Int, to: Int, at: Location), _ b: (from: Int, to: Int, at: Location)) -> Bool {
            a.to == b.from && a.at.file == b.at.file && a.at.offset + Int64(b.from - a.from) == b.at.offset
        }
        return found.indices.filter { i in
            (i > 0 && joined(found[i - 1], found[i])) || (i + 1 < found.count && joined(found[i], found[i + 1]))
        }.map { found[$0] }
    }

    /// The bytes of `range` of the piece as they would stand with run `k` read at `guess` and the
    /// other runs from where the plan takes them (nil: another run of the range is fetched, or a
    /// read failed).
    private func candidate(piece: Piece, starts: [Int], range: Range<Int>, run k: Int, guess: Location,
                           read: (Location, Int) -> [UInt8]?) -> [UInt8]? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(range.count)
        for (j, s) in piece.segments.enumerated() {
            let lo = max(range.lowerBound, starts[j]), hi = min(range.upperBound, starts[j] + s.length)
            guard lo < hi else { continue }
            let base: Location
            if j == k {
                base = guess
            } else if let from = s.from {
                base = from
            } else {
                return nil
            }
            guard let got = read(Location(file: base.file, offset: base.offset + Int64(lo - starts[j])), hi - lo),
                  got.count == hi - lo else { return nil }
            bytes += got
        }
        return bytes
    }
}

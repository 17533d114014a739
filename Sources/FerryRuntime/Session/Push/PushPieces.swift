import CSystem
import Glibc
import FerryCore

/// Large files stored as their pieces (design.md "Delta", publishing): with `remote-layout =
/// objects` and `delta-min-size`, a file from that size is not one content object but the pieces
/// of its content index, each a content object named by the piece's SHA-256
/// (`ContentIndex.Reference.storedAsPieces`). A push of a change sends the pieces the remote does
/// not store (the rest are named by the versions already published, or were placed by this
/// session); a mirror assembles the file from them as it assembles a delta.
extension PushSync {
    /// A large file to send as its pieces: its index (flagged as stored so), the objects of the
    /// index, and the pieces the remote lacks.
    struct PieceUpload {
        let reference: ContentIndex.Reference
        let objects: [(sha256: SHA256Digest, bytes: [UInt8])]
        let pieces: [ContentIndex.Piece]
    }

    /// The pieces of an index whose objects the session's cache holds (nil: one is missing, or
    /// the index does not read).
    func cachedPieces(_ index: ContentIndex.Reference, size: Int64, objects: ManifestObjects) -> [ContentIndex.Piece]? {
        try? ContentIndex.resolve(index, size: size, source: "a published file") { (batch) throws(FerryError) -> [[UInt8]] in
            try batch.map { (digest) throws(FerryError) -> [UInt8] in
                guard let bytes = objects.bytes(of: digest) else { throw FerryError(.manifest, "not cached") }
                return bytes
            }
        }.pieces
    }

    /// By content, the pieces of each entry stored as its pieces whose index the session's cache
    /// holds; an entry whose index the cache lacks is left out.
    func publishedPieces(of entries: [ManifestEntry], objects: ManifestObjects) -> [SHA256Digest: [ContentIndex.Piece]] {
        var out: [SHA256Digest: [ContentIndex.Piece]] = [:]
        for e in entries where out[e.sha256] == nil {
            guard let index = e.index, index.storedAsPieces, let size = e.size,
                  let pieces = cachedPieces(index, size: size, objects: objects) else { continue }
            out[e.sha256] = pieces
        }
        return out
    }

    /// By content, the objects (their SHA-256s) that hold the pieces of each entry stored as its
    /// pieces whose index the session's cache holds (`publishedPieces`).
    func storedPieces(of entries: [ManifestEntry], objects: ManifestObjects) -> [SHA256Digest: [SHA256Digest]] {
        publishedPieces(of: entries, objects: objects).mapValues { $0.map(\.object) }
    }

    /// How the pieces of `published` (`publishedPieces`) are stored, by each piece's SHA-256:
    /// compressed (their frames), or as they are (nil). A push that meets such a piece again takes
    /// that form without compressing it: only the pieces that changed cost compression, and a
    /// piece stored before (by a ferry that did not compress) is not sent again.
    static func storedForms(_ published: [SHA256Digest: [ContentIndex.Piece]]) -> [SHA256Digest: ContentIndex.Stored?] {
        var out: [SHA256Digest: ContentIndex.Stored?] = [:]
        for piece in published.values.joined() { out[piece.sha256] = .some(piece.stored) }
        return out
    }

    /// The uploads of files from `delta-min-size` (with `remote-layout = objects`), each read once
    /// for its index: sent as the pieces the remote does not store (`stored`). Returns those by
    /// content, and the contents whose every piece the remote already stores (nothing to send). A
    /// file that cannot be read, or no longer holds what was hashed, is sent whole, as before.
    func indexForPieces(_ uploads: [PushPlan.Upload], stored: Set<SHA256Digest>,
                        forms: [SHA256Digest: ContentIndex.Stored?], root: LocalRoot)
        -> (pieces: [SHA256Digest: PieceUpload], complete: Set<SHA256Digest>) {
        guard session.remoteLayout == .objects, let minimum = session.deltaMinimum else { return ([:], []) }
        var out: [SHA256Digest: PieceUpload] = [:]
        var complete = Set<SHA256Digest>()
        for upload in uploads {
            let entry = upload.entry
            guard let size = entry.size, size >= minimum, out[entry.sha256] == nil, !complete.contains(entry.sha256),
                  let fd = try? root.open(entry.path, for: "to index it") else { continue }
            defer { close(fd) }
            guard let scanned = try? ContentScan.index(fd, what: root.display(entry.path), compress: forms),
                  scanned.sha256 == entry.sha256, scanned.size == size,
                  let index = scanned.index else { continue }
            let bytes = Dictionary(index.objects.map { ($0.sha256, $0.bytes) }, uniquingKeysWith: { a, _ in a })
            guard let pieces = try? ContentIndex.resolve(index.reference, size: size, source: root.display(entry.path), load: { (batch) throws(FerryError) -> [[UInt8]] in
                batch.map { bytes[$0] ?? [] }
            }).pieces else { continue }
            // One content object per piece's content: a piece repeated in the file goes once.
            var sending = Set<SHA256Digest>()
            let missing = pieces.filter { !stored.contains($0.object) && sending.insert($0.object).inserted }
            let reference = index.reference.stored(asPieces: true)
            if missing.isEmpty { complete.insert(entry.sha256) }
            out[entry.sha256] = PieceUpload(reference: reference, objects: index.objects, pieces: missing)
        }
        return (out, complete)
    }
}

/// The placement of a file stored as its pieces: each piece the remote lacks is placed as a
/// content object of its own, through the remote's usual placement of a range of the file
/// (`LocalUpload.range`), then checked as a placed file is (the store's checksum, a `HEAD`, or a
/// read back, as `verify-uploads` says), and recorded as placed as it is checked, so a push that
/// is killed goes on from the pieces already placed. Placed once every piece is; the file's own
/// check is then vouched for by its pieces'.
final class PiecesPlacement: Placement {
    private let pieces: [ContentIndex.Piece]
    private let entry: ManifestEntry
    private let file: Int32
    private let writer: RemoteWriting
    private let verifyUploads: VerifyUploads
    /// Where a piece goes on the remote.
    private let path: (ContentIndex.Piece) -> RelativePath
    /// The remote's placement of one piece (a range of the file, open on a descriptor of its own).
    private let place: (ContentIndex.Piece) throws(FerryError) -> Placement
    /// Records pieces placed and checked (in groups).
    private let record: ([(RelativePath, PlacedFile)]) -> Void
    private var next = 0
    private var current: Placement?
    private var probe: (step: StateProbe, readBack: Bool)?
    private var computesNoChecksum = false
    private var unrecorded: [(RelativePath, PlacedFile)] = []
    private var sentBefore: Int64 = 0
    private var verified = UploadVerification.storeChecksum
    private var finished = false
    private(set) var check = PlacedCheck.inspect

    init(entry: ManifestEntry, pieces: [ContentIndex.Piece], file: Int32, writer: RemoteWriting, verifyUploads: VerifyUploads,
         path: @escaping (ContentIndex.Piece) -> RelativePath, place: @escaping (ContentIndex.Piece) throws(FerryError) -> Placement,
         record: @escaping ([(RelativePath, PlacedFile)]) -> Void) {
        self.entry = entry
        self.pieces = pieces
        self.file = file
        self.writer = writer
        self.verifyUploads = verifyUploads
        self.path = path
        self.place = place
        self.record = record
    }

    var sent: Int64 { sentBefore + (current?.sent ?? 0) }
    var digest: SHA256Digest? { nil }

    /// What a piece is as a content object (its frames, when it is stored compressed).
    private func object(_ piece: ContentIndex.Piece) -> ManifestEntry {
        ManifestEntry(path: path(piece), size: Int64(piece.stored?.size ?? piece.length), sha256: piece.object)
    }

    func next(after step: Transfer?) throws(FerryError) -> Transfer? {
        guard let step else { return try startPiece() }
        if let (probe, readBack) = probe, step === probe {
            self.probe = nil
            return try judge(probe.state ?? .absent, readBack: readBack)
        }
        guard let current else { return nil }
        if let following = try current.next(after: step) { return following }
        // The piece is at its name: checked before the next goes.
        sentBefore += current.sent
        let check = current.check
        current.end(placed: true, keep: false)
        self.current = nil
        switch (check, verifyUploads) {
        case let (.vouched(state), mode) where mode != .readBack: return try judge(state, readBack: true)
        case (.inspect, .auto), (.inspect, .sizeOnly): return try ask(readBack: computesNoChecksum && verifyUploads == .auto)
        default: return try ask(readBack: true)
        }
    }

    private func startPiece() throws(FerryError) -> Transfer? {
        guard next < pieces.count else {
            flush()
            check = .vouched(RemoteFileState(exists: true, size: entry.size, validator: nil, sha256: entry.sha256, verified: verified))
            return nil
        }
        let piece = try place(pieces[next])
        current = piece
        guard let first = try piece.next(after: nil) else { throw FerryError(.remote, "the remote planned no step to place a piece of \(Printable.name(entry.path.string))") }
        return first
    }

    /// Asks the remote what it holds at the piece's name (or reads it back).
    private func ask(readBack: Bool) throws(FerryError) -> Transfer? {
        let piece = pieces[next]
        switch readBack ? writer.readBack(path(piece), limit: Int64(piece.stored?.size ?? piece.length))
            : writer.inspect(path(piece)) {
        case let .probe(step):
            probe = (step, readBack)
            return step
        case let .now(state):
            return try judge(state, readBack: readBack)
        case let .failed(error):
            throw error
        }
    }

    /// What the remote holds at the piece's name: the piece as sent (the next one goes), or not
    /// (the file fails, and is sent again by the next try).
    private func judge(_ state: RemoteFileState, readBack: Bool) throws(FerryError) -> Transfer? {
        let piece = pieces[next]
        let object = object(piece)
        var state = state
        if !readBack, state.sha256 == nil, state.mismatch(with: object) == nil {
            // The store says nothing of the content: read back, or taken by its size.
            computesNoChecksum = true
            if verifyUploads != .sizeOnly { return try ask(readBack: true) }
            state.verified = .sizeOnly
        }
        if let why = state.mismatch(with: object) {
            throw FerryError(.remote, "\(Printable.name(entry.path.string)): the piece of \(Units.formatBytes(Int64(piece.length))) at offset \(piece.offset): \(why); the remote does not hold what was sent",
                             cause: .http(status: 502))
        }
        switch state.verified ?? .sizeOnly {
        case .sizeOnly: verified = .sizeOnly
        case .readBack where verified == .storeChecksum: verified = .readBack
        default: break
        }
        if let placed = state.placed(as: object) { unrecorded.append((path(piece), placed)) }
        // Recorded every few pieces (about a MiB): what a kill costs again.
        if unrecorded.count >= 4 { flush() }
        next += 1
        return try startPiece()
    }

    private func flush() {
        guard !unrecorded.isEmpty else { return }
        record(unrecorded)
        unrecorded.removeAll()
    }

    func mend(_ step: Transfer, _ failure: TransferFailure) -> Transfer? { current?.mend(step, failure) }

    func end(placed: Bool, keep: Bool) {
        guard !finished else { return }
        finished = true
        flush()
        current?.end(placed: false, keep: keep)
        current = nil
        close(file)
    }
}

/// What a piece is sent from: a descriptor of its own and the range of it that holds the piece as
/// stored. A piece stored as it is: the file itself, its range. A piece stored compressed: its
/// frames made again from the file's bytes (they must be the ones the index names, or the file
/// changed since it was indexed) in an anonymous file in memory, sent whole through the remote's
/// usual placement.
enum PieceSource {
    static func open(_ piece: ContentIndex.Piece, file: Int32, stat: LocalEntry,
                     shown: String) throws(FerryError) -> (fd: Int32, range: Range<Int64>, stat: LocalEntry) {
        guard piece.stored != nil else {
            let own = dup(file)
            guard own >= 0 else {
                throw FerryError(.localIO, "cannot open \(shown) once more to send a piece of it: "
                                           + "\(FileSystem.errorText())", cause: .local(errno: errno))
            }
            return (own, piece.offset..<(piece.offset + Int64(piece.length)), stat)
        }
        let bytes = FileSystem.read(fd: file, at: piece.offset, count: Int64(piece.length))
        let compressor = Zstd.Compressor()
        let made = bytes.withUnsafeBytes { PieceCompression.frames(of: piece, bytes: $0, using: compressor) }
        guard let frames = made else {
            throw FerryError(.localIO, "\(shown): the piece at offset \(piece.offset) no longer compresses to what its "
                                       + "index says (the file changed since it was read); it is read and sent again",
                             cause: .sourceChanged)
        }
        let fd = ferry_memory_file("ferry-piece")
        guard fd >= 0 else {
            throw FerryError(.localIO, "cannot make a file in memory for a compressed piece of \(shown): "
                                       + "\(FileSystem.errorText())", cause: .local(errno: errno))
        }
        var written = 0
        while written < frames.count {
            let n = frames.withUnsafeBytes { write(fd, $0.baseAddress! + written, frames.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let code = errno
                close(fd)
                throw FerryError(.localIO, "cannot hold a compressed piece of \(shown) in memory: "
                                           + "\(FileSystem.errorText(code))", cause: .local(errno: code))
            }
            written += n
        }
        var st = Glibc.stat()
        fstat(fd, &st)
        return (fd, 0..<Int64(frames.count), FileSystem.entry(from: st))
    }
}

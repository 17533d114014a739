/// A `206` answer to a request for several ranges (`multipart/byteranges`, RFC 9110 §14.6), read
/// as it streams: each part's `Content-Range` is handed over before its bytes, the bytes as they
/// come. What a server may send around the parts is bounded (a part's headers 4 KiB, anything
/// between parts 1 KiB), and every part must be exactly a range that was asked, in the order
/// asked: anything else is refused with the reason. Pure.
public struct MultipartRanges {
    public struct Problem: Error, Sendable { public let text: String }

    /// The boundary of a `Content-Type: multipart/byteranges; boundary=...` value; nil for any
    /// other type.
    public static func boundary(ofContentType value: String) -> String? {
        let parts = value.split(separator: ";").map { String($0).trimmingSpaces() }
        guard let type = parts.first, type.lowercased() == "multipart/byteranges" else { return nil }
        for p in parts.dropFirst() {
            let kv = p.split(separator: "=", maxSplits: 1)
            guard kv.count == 2, String(kv[0]).trimmingSpaces().lowercased() == "boundary" else { continue }
            var b = String(kv[1]).trimmingSpaces()
            if b.count >= 2, b.hasPrefix("\""), b.hasSuffix("\"") { b = String(b.dropFirst().dropLast()) }
            // RFC 2046: 1 to 70 characters.
            guard (1...70).contains(b.utf8.count), b.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F || $0 == 0x20 }) else { return nil }
            return b
        }
        return nil
    }

    let delimiter: [UInt8]
    /// The ranges asked (first byte, last byte), in order, and the file's size.
    let ranges: [(first: Int64, last: Int64)]
    let total: Int64
    private enum State { case between, headers, data(left: Int64), done }
    private var state = State.between
    private var pending: [UInt8] = []
    /// The part being read.
    public private(set) var part = 0
    public static let maximumHeaders = 4096
    public static let maximumBetween = 1024

    public init(boundary: String, ranges: [(first: Int64, last: Int64)], total: Int64) {
        delimiter = Array("--\(boundary)".utf8)
        self.ranges = ranges
        self.total = total
    }

    /// Whether every part was read and the closing delimiter seen.
    public var finished: Bool { if case .done = state { return true } else { return false } }

    /// Reads the next bytes of the body: `data` gets each run of a part's bytes with the part's
    /// index (false from it stops the reading, returning false).
    public mutating func feed(_ bytes: UnsafeRawBufferPointer, data: (Int, UnsafeRawBufferPointer) -> Bool) throws(Problem) -> Bool {
        var i = 0
        while i < bytes.count {
            switch state {
            case .done:
                // An epilogue is allowed, and ignored, within bounds.
                pending.append(contentsOf: bytes[i...].prefix(MultipartRanges.maximumBetween))
                guard pending.count <= MultipartRanges.maximumBetween else { throw Problem(text: "it goes on past its closing delimiter") }
                return true
            case let .data(left):
                let n = Int(min(left, Int64(bytes.count - i)))
                guard data(part, UnsafeRawBufferPointer(rebasing: bytes[i..<(i + n)])) else { return false }
                i += n
                if left == Int64(n) {
                    state = .between
                    part += 1
                } else {
                    state = .data(left: left - Int64(n))
                }
            case .between:
                // CRLF, then the delimiter, then CRLF (a part follows) or "--" (the end).
                let (taken, end) = MultipartRanges.take(bytes, from: i, into: &pending,
                                                        upTo: MultipartRanges.maximumBetween + 1) {
                    MultipartRanges.delimiterEnd(delimiter, in: $0, from: $1)
                }
                i += taken
                if let end {
                    let tail = (pending[end - 2], pending[end - 1])
                    if tail == (0x2D, 0x2D) {
                        guard part == ranges.count else { throw Problem(text: "it ends after \(part) of the \(ranges.count) ranges asked") }
                        state = .done
                        pending = []
                    } else if tail == (0x0D, 0x0A) {
                        guard part < ranges.count else { throw Problem(text: "it has more parts than the \(ranges.count) ranges asked") }
                        state = .headers
                        pending = []
                    } else {
                        throw Problem(text: "a delimiter is followed by neither CRLF nor --")
                    }
                } else if pending.count > MultipartRanges.maximumBetween {
                    throw Problem(text: "more than \(MultipartRanges.maximumBetween) bytes come between its parts")
                }
            case .headers:
                let (taken, end) = MultipartRanges.take(bytes, from: i, into: &pending,
                                                        upTo: MultipartRanges.maximumHeaders + 1) {
                    MultipartRanges.headersEnd(in: $0, from: $1)
                }
                i += taken
                if let end {
                    let range = try partRange(pending[..<end])
                    let asked = ranges[part]
                    guard range.first == asked.first, range.last == asked.last, range.total == total else {
                        throw Problem(text: "part \(part + 1) is bytes \(range.first)-\(range.last)/\(range.total.map(String.init) ?? "*"), where \(asked.first)-\(asked.last)/\(total) was asked")
                    }
                    state = .data(left: asked.last - asked.first + 1)
                    pending = []
                } else if pending.count > MultipartRanges.maximumHeaders {
                    throw Problem(text: "part \(part + 1)'s headers take more than \(MultipartRanges.maximumHeaders) bytes")
                }
            }
        }
        return true
    }

    /// Moves bytes of `bytes` from `start` to `pending` until `end` finds what it looks for in
    /// `pending` (searching from the offset it is given) or `pending` holds `limit` bytes: how many
    /// bytes were taken, and the end `end` found (nil: not yet). Bytes after that end stay in
    /// `bytes`, for the next state.
    static func take(_ bytes: UnsafeRawBufferPointer, from start: Int, into pending: inout [UInt8], upTo limit: Int,
                     end: ([UInt8], Int) -> Int?) -> (taken: Int, end: Int?) {
        let before = pending.count
        let n = max(0, min(bytes.count - start, limit - before))
        pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<(start + n)]))
        guard let found = end(pending, max(0, before - 8)) else { return (n, nil) }
        let keep = found - before
        guard keep < n else { return (n, found) }
        pending.removeLast(n - max(0, keep))
        return (max(0, keep), found)
    }

    /// Where the first blank line (CRLF CRLF) of `pending` at or after `from` ends.
    static func headersEnd(in pending: [UInt8], from: Int) -> Int? {
        var k = from
        while k + 4 <= pending.count {
            if pending[k] == 0x0D, pending[k + 1] == 0x0A, pending[k + 2] == 0x0D, pending[k + 3] == 0x0A { return k + 4 }
            k += 1
        }
        return nil
    }

    /// Where the first `delimiter` of `pending` that starts at or after `from - delimiter.count` and
    /// has two bytes after it ends, with those two bytes.
    static func delimiterEnd(_ delimiter: [UInt8], in pending: [UInt8], from: Int) -> Int? {
        var k = max(0, from - delimiter.count)
        while k + delimiter.count + 2 <= pending.count {
            if pending[k] == delimiter[0], pending[k..<(k + delimiter.count)].elementsEqual(delimiter) {
                return k + delimiter.count + 2
            }
            k += 1
        }
        return nil
    }

    /// The Content-Range of a part's headers.
    private func partRange(_ headers: ArraySlice<UInt8>) throws(Problem) -> (first: Int64, last: Int64, total: Int64?) {
        let name = Array("content-range".utf8)
        for line in headers.split(separator: 0x0A) {
            guard let colon = line.firstIndex(of: 0x3A), colon - line.startIndex == name.count,
                  line[..<colon].elementsEqual(name, by: { (0x41...0x5A).contains($0) ? $0 | 0x20 == $1 : $0 == $1 }) else { continue }
            var value = line[(colon + 1)...]
            if value.last == 0x0D { value = value.dropLast() }
            guard let range = ResponsePolicy.parseContentRange(String(decoding: value, as: UTF8.self).trimmingSpaces()) else {
                throw Problem(text: "part \(part + 1) has a Content-Range ferry cannot read")
            }
            return range
        }
        throw Problem(text: "part \(part + 1) has no Content-Range")
    }
}

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
    static let maximumHeaders = 4096
    static let maximumBetween = 1024

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
                pending.append(bytes[i])
                i += 1
                // CRLF, then the delimiter, then CRLF (a part follows) or "--" (the end).
                if let end = MultipartRanges.find(delimiter, in: pending) {
                    let after = pending.count - end
                    if after >= 2 {
                        let tail = Array(pending[end..<(end + 2)])
                        if tail == [0x2D, 0x2D] {
                            guard part == ranges.count else { throw Problem(text: "it ends after \(part) of the \(ranges.count) ranges asked") }
                            state = .done
                            pending = []
                        } else if tail == [0x0D, 0x0A] {
                            guard part < ranges.count else { throw Problem(text: "it has more parts than the \(ranges.count) ranges asked") }
                            state = .headers
                            pending = []
                        } else {
                            throw Problem(text: "a delimiter is followed by neither CRLF nor --")
                        }
                    }
                } else if pending.count > MultipartRanges.maximumBetween {
                    throw Problem(text: "more than \(MultipartRanges.maximumBetween) bytes come between its parts")
                }
            case .headers:
                pending.append(bytes[i])
                i += 1
                if pending.count >= 4, pending[(pending.count - 4)...].elementsEqual([0x0D, 0x0A, 0x0D, 0x0A]) {
                    let range = try partRange(String(decoding: pending, as: UTF8.self))
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

    /// The Content-Range of a part's headers.
    private func partRange(_ headers: String) throws(Problem) -> (first: Int64, last: Int64, total: Int64?) {
        for line in headers.split(separator: "\r\n") {
            let kv = line.split(separator: ":", maxSplits: 1)
            guard kv.count == 2, kv[0].lowercased() == "content-range" else { continue }
            guard let range = ResponsePolicy.parseContentRange(String(kv[1]).trimmingSpaces()) else {
                throw Problem(text: "part \(part + 1) has a Content-Range ferry cannot read")
            }
            return range
        }
        throw Problem(text: "part \(part + 1) has no Content-Range")
    }

    /// Where `needle` ends in `haystack`, found at its end (the bytes come one at a time).
    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        // The delimiter and the two bytes after it: look for it ending 0 or 2 bytes before the end.
        for back in [0, 1, 2] where haystack.count - back >= needle.count {
            let start = haystack.count - back - needle.count
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return start + needle.count }
        }
        return nil
    }
}

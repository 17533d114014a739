#if canImport(Glibc)
import Glibc
#endif

/// A path inside a session's local root, as a manifest names it: `css/site.css`.
///
/// Every manifest path is hostile until it passes `init(validating:)`, the one place that decides
/// what a safe path is (docs/design.md, data-safety rule 5). Equality and hashing compare UTF-8
/// bytes, not Swift's canonical equivalence, because the filesystem stores bytes: `é` (NFC) and
/// `e\u{301}` (NFD) are two different files on Linux.
public struct RelativePath: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let string: String

    /// The directory ferry keeps its partial files in, under every local root. Manifests may not name it.
    public static let reservedTopLevel = ".ferry"

    /// Why a path was refused.
    public enum Problem: Error, Equatable, Sendable, CustomStringConvertible {
        case empty
        case absolute
        case dotSegment(String)
        case emptySegment
        case controlCharacter(UInt8)
        case reserved
        case tooLong

        public var description: String {
            switch self {
            case .empty: return "path is empty"
            case .absolute: return "path is absolute (starts with '/')"
            case .dotSegment(let s): return "path has a '\(s)' segment"
            case .emptySegment: return "path has an empty segment ('//' or a trailing '/')"
            case .controlCharacter(let b): return "path contains a control character (byte 0x\(String(b, radix: 16)))"
            case .reserved: return "path is inside ferry's reserved '.ferry/' directory"
            case .tooLong: return "path is longer than the filesystem allows (255 bytes per segment, 4096 in all)"
            }
        }
    }

    public init(validating text: String) throws(Problem) {
        let bytes = text.utf8
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count < 4096 else { throw .tooLong }
        guard bytes.first != UInt8(ascii: "/") else { throw .absolute }
        var segmentLength = 0
        var segmentStart = bytes.startIndex
        var index = bytes.startIndex
        func checkSegment(_ start: String.UTF8View.Index, _ end: String.UTF8View.Index, _ length: Int) throws(Problem) {
            if length == 0 { throw .emptySegment }
            if length > 255 { throw .tooLong }
            if length <= 2 {
                let seg = String(text.utf8[start..<end])!
                if seg == "." || seg == ".." { throw .dotSegment(seg) }
            }
        }
        while index != bytes.endIndex {
            let b = bytes[index]
            if b < 0x20 || b == 0x7F { throw .controlCharacter(b) }
            if b == UInt8(ascii: "/") {
                try checkSegment(segmentStart, index, segmentLength)
                segmentLength = 0
                segmentStart = bytes.index(after: index)
            } else {
                segmentLength += 1
            }
            index = bytes.index(after: index)
        }
        try checkSegment(segmentStart, bytes.endIndex, segmentLength)
        if text == RelativePath.reservedTopLevel || text.utf8.starts(with: (RelativePath.reservedTopLevel + "/").utf8) {
            throw .reserved
        }
        self.string = text
    }

    /// For paths read from the local disk by ferry itself (already safe by construction).
    public init(trusted text: String) { self.string = text }

    public var description: String { string }

    public static func == (a: RelativePath, b: RelativePath) -> Bool {
        guard a.string.utf8.count == b.string.utf8.count else { return false }
        return a.compare(b) == 0
    }

    public func hash(into hasher: inout Hasher) {
        withBytes { hasher.combine(bytes: $0) }
    }

    /// The path's UTF-8 bytes, without copying them (native strings are contiguous).
    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let r = try string.utf8.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) { return r }
        var copy = string
        return try copy.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
    }

    /// Byte order (memcmp, then length): the order of SQLite's BINARY collation and of the
    /// manifests ferry writes, so sorted sequences of paths from all three merge.
    public static func < (a: RelativePath, b: RelativePath) -> Bool { a.compare(b) < 0 }

    /// Negative, zero or positive as `self` sorts before, equal to or after `other` (byte order).
    public func compare(_ other: RelativePath) -> Int {
        withBytes { a in other.withBytes { b in RelativePath.compare(a, b) } }
    }

    /// The position of `path` among `count` paths in byte order, `pathAt(i)` being the i-th: a
    /// binary search over whatever sorted sequence holds them (manifest entries, a local tree).
    public static func index(of path: RelativePath, count: Int, pathAt: (Int) -> RelativePath) -> Int? {
        var low = 0, high = count
        while low < high {
            let mid = (low + high) / 2
            let c = pathAt(mid).compare(path)
            if c == 0 { return mid }
            if c < 0 { low = mid + 1 } else { high = mid }
        }
        return nil
    }

    /// Byte order of two UTF-8 paths: memcmp over the shorter length, then the shorter first.
    public static func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let n = min(a.count, b.count)
        if n > 0 {
            let c = memcmp(a.baseAddress!, b.baseAddress!, n)
            if c != 0 { return Int(c) }
        }
        return a.count - b.count
    }

    /// The parent directory, or nil at the top level.
    public var parent: RelativePath? {
        guard let slash = string.utf8.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        return RelativePath(trusted: String(string.utf8[..<slash])!)
    }

    /// The last segment.
    public var name: String {
        guard let slash = string.utf8.lastIndex(of: UInt8(ascii: "/")) else { return string }
        return String(string.utf8[string.utf8.index(after: slash)...])!
    }

    /// Every ancestor directory, nearest first: `a/b/c` → `a/b`, `a`.
    public var ancestors: [RelativePath] {
        var out: [RelativePath] = []
        var current = parent
        while let p = current {
            out.append(p)
            current = p.parent
        }
        return out
    }

    public func appending(_ name: String) -> RelativePath { RelativePath(trusted: string + "/" + name) }

    /// The path with each segment percent-encoded, for appending to a remote URL.
    public var percentEncoded: String { string.percentEncoded(keepingSlashes: true) }
}

extension String {
    /// Every byte but RFC 3986's unreserved ones (`A-Z a-z 0-9 - . _ ~`) as `%XX` (uppercase hex),
    /// and `/` kept where asked: a path in a URL, and the form SigV4 signs.
    public func percentEncoded(keepingSlashes: Bool) -> String {
        func kept(_ b: UInt8) -> Bool {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"), UInt8(ascii: "~"):
                return true
            case UInt8(ascii: "/"):
                return keepingSlashes
            default:
                return false
            }
        }
        // Most paths need no escape: the string itself, with nothing copied (a request a file).
        if utf8.allSatisfy(kept) { return self }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count + 8)
        let hex: StaticString = "0123456789ABCDEF"
        for b in utf8 {
            if kept(b) {
                out.append(b)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hex.utf8Start[Int(b >> 4)])
                out.append(hex.utf8Start[Int(b & 0xF)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

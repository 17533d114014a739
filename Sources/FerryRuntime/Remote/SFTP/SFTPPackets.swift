import Glibc
import FerryCore

/// SFTP version 3 (draft-ietf-secsh-filexfer-02, what OpenSSH speaks), the packets ferry sends and
/// the replies it reads. ferry builds them itself over an SSH channel rather than through a
/// library's SFTP layer: it needs OpenSSH's `posix-rename@openssh.com` (the only atomic replace)
/// and `fsync@openssh.com`, and it reads a hostile server's replies under bounds of its own: a
/// packet's length, every string's length against the packet, a reply's id against the requests
/// outstanding, a DATA reply against the length asked.
enum SFTP {
    enum Kind: UInt8 {
        case initialize = 1, version = 2, open = 3, close = 4, read = 5, write = 6, lstat = 7, fstat = 8
        case setstat = 9, fsetstat = 10, opendir = 11, readdir = 12, remove = 13, mkdir = 14, rmdir = 15
        case stat = 17, rename = 18, extended = 200
        case status = 101, handle = 102, data = 103, name = 104, attrs = 105, extendedReply = 201
    }

    /// Open flags (`SSH_FXF_*`).
    struct OpenFlags: OptionSet {
        let rawValue: UInt32
        static let read = OpenFlags(rawValue: 0x01), write = OpenFlags(rawValue: 0x02)
        static let create = OpenFlags(rawValue: 0x08), truncate = OpenFlags(rawValue: 0x10), exclusive = OpenFlags(rawValue: 0x20)
    }

    /// Status codes (`SSH_FX_*`). OpenSSH maps errno onto them: ENOENT is `noSuchFile`, EACCES
    /// `permissionDenied`, and every other failure (EEXIST among them) `failure`.
    enum Status: UInt32 {
        case ok = 0, eof = 1, noSuchFile = 2, permissionDenied = 3, failure = 4, badMessage = 5
        case noConnection = 6, connectionLost = 7, unsupported = 8
    }

    /// The largest packet read: a DATA reply of the largest read ferry asks (`readSize`) and its
    /// header, or a directory listing of many names. A longer one ends the connection.
    static let maximumPacket = 1 << 20
    /// Bytes asked by one READ, and sent by one WRITE: what OpenSSH serves whole (its limit is 255 KiB).
    static let readSize = 128 << 10
    /// Names a READDIR reply may carry, and a handle's longest length (OpenSSH's are 4 bytes).
    static let maximumNames = 10_000, maximumHandle = 256

    /// A file's attributes, as far as ferry reads them (`ATTRS`).
    struct Attributes: Equatable {
        var size: Int64?
        var permissions: UInt32?
        var mtime: Int64?

        var isRegularFile: Bool { permissions.map { $0 & UInt32(S_IFMT) == UInt32(S_IFREG) } ?? false }
        var isDirectory: Bool { permissions.map { $0 & UInt32(S_IFMT) == UInt32(S_IFDIR) } ?? false }
        var isSymlink: Bool { permissions.map { $0 & UInt32(S_IFMT) == UInt32(S_IFLNK) } ?? false }
        /// What changes when the file does, as far as SFTP says: its size and mtime (whole seconds).
        var validator: String { "sftp:\(size ?? 0):\(mtime ?? 0)" }
    }

    /// A reply, with the id of the request it answers.
    enum Reply {
        case status(id: UInt32, Status?, code: UInt32, message: String)
        case handle(id: UInt32, [UInt8])
        case data(id: UInt32, [UInt8])
        case name(id: UInt32, [(name: [UInt8], attributes: Attributes)])
        case attrs(id: UInt32, Attributes)
        case extendedReply(id: UInt32)

        var id: UInt32 {
            switch self {
            case let .status(id, _, _, _), let .handle(id, _), let .data(id, _), let .name(id, _), let .attrs(id, _), let .extendedReply(id): id
            }
        }
    }

    /// A packet being built: length, type, then the fields.
    struct Packet {
        private(set) var bytes: [UInt8] = [0, 0, 0, 0]

        init(_ kind: Kind, id: UInt32?) {
            bytes.append(kind.rawValue)
            if let id { u32(id) }
        }

        mutating func u32(_ value: UInt32) { bytes += [UInt8(value >> 24), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)] }
        mutating func u64(_ value: UInt64) { u32(UInt32(value >> 32)); u32(UInt32(value & 0xffff_ffff)) }
        mutating func string<C: Collection>(_ value: C) where C.Element == UInt8 { u32(UInt32(value.count)); bytes += value }
        mutating func string(_ value: String) { string(Array(value.utf8)) }
        mutating func attributes(_ a: Attributes) {
            var flags: UInt32 = 0
            if a.size != nil { flags |= 0x1 }
            if a.permissions != nil { flags |= 0x4 }
            if a.mtime != nil { flags |= 0x8 }
            u32(flags)
            if let size = a.size { u64(UInt64(size)) }
            if let permissions = a.permissions { u32(permissions) }
            if let mtime = a.mtime { u32(UInt32(truncatingIfNeeded: mtime)); u32(UInt32(truncatingIfNeeded: mtime)) }
        }

        /// OPEN's fields: the path, the flags, and the mode a created file gets (nil: none said).
        mutating func open(_ path: String, _ flags: OpenFlags, mode: UInt32? = nil) {
            string(path)
            u32(flags.rawValue)
            attributes(Attributes(permissions: mode))
        }

        /// READ's fields: the handle, the offset, the length asked.
        mutating func read(_ handle: [UInt8], at offset: Int64, length: Int) {
            string(handle)
            u64(UInt64(offset))
            u32(UInt32(length))
        }

        /// WRITE's fields: the handle, the offset, the bytes.
        mutating func write(_ handle: [UInt8], at offset: Int64, _ data: UnsafeRawBufferPointer) {
            string(handle)
            u64(UInt64(offset))
            string(data)
        }

        /// The bytes to send, the length filled in.
        var finished: [UInt8] {
            var out = bytes
            let n = UInt32(out.count - 4)
            out[0] = UInt8(n >> 24); out[1] = UInt8(n >> 16 & 0xff); out[2] = UInt8(n >> 8 & 0xff); out[3] = UInt8(n & 0xff)
            return out
        }
    }

    /// What a server sent that is not SFTP as ferry reads it.
    struct Malformed: Error { let what: String }

    /// Reads the fields of one received packet (its type byte already taken), each against the
    /// packet's end.
    struct Reader {
        let bytes: ArraySlice<UInt8>
        private(set) var at: Int

        init(_ bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            at = bytes.startIndex
        }

        var atEnd: Bool { at == bytes.endIndex }

        mutating func u32() throws(Malformed) -> UInt32 {
            guard bytes.endIndex - at >= 4 else { throw Malformed(what: "a packet ends inside a number") }
            defer { at += 4 }
            return UInt32(bytes[at]) << 24 | UInt32(bytes[at + 1]) << 16 | UInt32(bytes[at + 2]) << 8 | UInt32(bytes[at + 3])
        }

        mutating func u64() throws(Malformed) -> UInt64 { UInt64(try u32()) << 32 | UInt64(try u32()) }

        mutating func string(max: Int = SFTP.maximumPacket) throws(Malformed) -> ArraySlice<UInt8> {
            let n = Int(try u32())
            guard n <= max, bytes.endIndex - at >= n else { throw Malformed(what: "a string runs past its packet") }
            defer { at += n }
            return bytes[at..<at + n]
        }

        mutating func attributes() throws(Malformed) -> Attributes {
            let flags = try u32()
            var a = Attributes()
            if flags & 0x1 != 0 {
                let size = try u64()
                guard size <= UInt64(Int64.max) else { throw Malformed(what: "a size past 2^63") }
                a.size = Int64(size)
            }
            if flags & 0x2 != 0 { _ = try u32(); _ = try u32() }
            if flags & 0x4 != 0 { a.permissions = try u32() }
            if flags & 0x8 != 0 { _ = try u32(); a.mtime = Int64(try u32()) }
            if flags & 0x8000_0000 != 0 {
                let count = try u32()
                guard count <= 64 else { throw Malformed(what: "\(count) extended attributes") }
                for _ in 0..<count { _ = try string(); _ = try string() }
            }
            return a
        }
    }

    /// The reply in one packet's body (type byte first).
    static func parse(_ body: ArraySlice<UInt8>) throws(Malformed) -> Reply {
        guard let first = body.first, let kind = Kind(rawValue: first) else { throw Malformed(what: "a packet of unknown type \(body.first ?? 0)") }
        var r = Reader(body.dropFirst())
        let id = try r.u32()
        switch kind {
        case .status:
            let code = try r.u32()
            // v3 servers send a message and a language tag; older ones may stop after the code.
            let message = r.atEnd ? "" : Printable.text(String(decoding: try r.string(max: 1024), as: UTF8.self))
            return .status(id: id, Status(rawValue: code), code: code, message: message)
        case .handle:
            return .handle(id: id, Array(try r.string(max: maximumHandle)))
        case .data:
            return .data(id: id, Array(try r.string()))
        case .name:
            let count = Int(try r.u32())
            guard count <= maximumNames else { throw Malformed(what: "a listing of \(count) names in one reply") }
            var names: [(name: [UInt8], attributes: Attributes)] = []
            for _ in 0..<count {
                let name = Array(try r.string(max: 4096))
                _ = try r.string()  // the long name, `ls -l` text: never read
                names.append((name, try r.attributes()))
            }
            return .name(id: id, names)
        case .attrs:
            return .attrs(id: id, try r.attributes())
        case .extendedReply:
            return .extendedReply(id: id)
        default:
            throw Malformed(what: "a packet of type \(first) where a reply was due")
        }
    }

    /// The server's VERSION packet: its version and the extensions it names.
    static func parseVersion(_ body: ArraySlice<UInt8>) throws(Malformed) -> (version: UInt32, extensions: Set<String>) {
        guard body.first == Kind.version.rawValue else { throw Malformed(what: "the server's first packet is not VERSION") }
        var r = Reader(body.dropFirst())
        let version = try r.u32()
        var extensions = Set<String>()
        while !r.atEnd {
            extensions.insert(String(decoding: try r.string(max: 256), as: UTF8.self))
            _ = try r.string(max: 256)
        }
        return (version, extensions)
    }
}

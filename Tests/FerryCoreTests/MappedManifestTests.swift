import Foundation
import Glibc
import Testing
@testable import FerryCore
@testable import FerryRuntime

/// A manifest read from a mapped file (`MappedFile`, `Manifests.parse(_:source:hashing:)`): it
/// reads as the same bytes in memory do, hashes to their SHA-256, and gives back the pages the
/// parser has passed, so a large manifest is never resident whole.
struct MappedManifestTests {
    /// 20,000 entries of a flat JSON manifest (~3.3 MB: the parser passes a point every 4,096).
    static func flatJSON(count: Int = 20_000) -> [UInt8] {
        var text = "{\"format\": \"ferry-manifest/1\", \"version\": 3, \"files\": [\n"
        for i in 0..<count {
            let hex = String(format: "%064x", i * 7919)
            text += "{\"path\": \"d\(i / 1000)/f\(String(format: "%05d", i)).bin\", \"size\": \(i), \"sha256\": \"\(hex)\", "
                + "\"mtime\": \"2023-11-14T22:13:20Z\", \"mode\": \"0644\"}\(i + 1 < count ? "," : "")\n"
        }
        return Array((text + "]}\n").utf8)
    }

    static func sums(count: Int = 40_000) -> [UInt8] {
        var text = ""
        for i in 0..<count { text += String(format: "%064x  dir%02d/file%06d.txt\n", i * 31, i % 50, i) }
        return Array(text.utf8)
    }

    static func written(_ bytes: [UInt8], _ name: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mapped-\(getpid())-\(name)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/manifest"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// The kilobytes of `file`'s mapping resident in this process (its `Rss:` in /proc/self/smaps).
    static func residentKiB(_ file: MappedFile) throws -> Int {
        let address = UInt(bitPattern: try file.withBytes { $0.baseAddress! })
        let lines = String(decoding: try FileSystem.readFile("/proc/self/smaps"), as: UTF8.self).split(separator: "\n")
        let at = try #require(lines.firstIndex { line in
            let range = line.split(separator: " ").first?.split(separator: "-").compactMap { UInt($0, radix: 16) } ?? []
            return range.count == 2 && range[0] <= address && address < range[1]
        })
        let rss = try #require(lines[(at + 1)...].first { $0.hasPrefix("Rss:") })
        return try #require(Int(rss.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    @Test(arguments: ["json", "sums"])
    func aMappedManifestReadsAsInMemoryAndIsNotResidentWhole(kind: String) throws {
        let bytes = kind == "json" ? Self.flatJSON() : Self.sums()
        let path = try Self.written(bytes, kind)
        let inMemory = try Manifests.parse(bytes, source: "m")
        let file = try MappedFile(path, limit: 64 << 20)
        let (mapped, digest) = try Manifests.parse(file, source: "m", hashing: true)
        #expect(mapped.entries == inMemory.entries)
        #expect(mapped.entries.count == (kind == "json" ? 20_000 : 40_000))
        #expect(mapped.version == inMemory.version)
        #expect(digest == SHA256Hasher.digest(of: bytes))
        // What is resident is what came after the last point the parser passed: at most 4,096
        // entries (~680 KB of JSON, ~330 KB of lines), far less than the file.
        let resident = try Self.residentKiB(file)
        #expect(resident * 1024 < bytes.count / 4, "\(resident) KiB of a \(bytes.count)-byte file still resident")
    }

    /// A filesystem that maps no file: the manifest is read into memory and reads the same.
    @Test func anUnmappableFileIsReadInstead() throws {
        let bytes = Self.flatJSON(count: 5_000)
        let file = try MappedFile(try Self.written(bytes, "copied"), limit: 64 << 20, mapping: false)
        let (manifest, digest) = try Manifests.parse(file, source: "m", hashing: true)
        #expect(manifest.entries == (try Manifests.parse(bytes, source: "m")).entries)
        #expect(digest == SHA256Hasher.digest(of: bytes))
    }

    @Test func aSignedMappedManifestIsCheckedOverItsSignedBytes() throws {
        let key = try SigningKey.generate()
        let signed = try SigningKey.sign(manifest: Self.flatJSON(count: 10_000), with: [key])
        let path = try Self.written(signed, "signed")
        let (manifest, digest) = try Manifests.parse(try MappedFile(path, limit: 64 << 20), source: "m", hashing: true)
        #expect(manifest.entries.count == 10_000)
        #expect(manifest.signatures.map(\.check) == [.valid])
        #expect(digest == SHA256Hasher.digest(of: signed))
    }

    @Test func aMappedManifestFailsAsTheBytesInMemoryDo() throws {
        var cut = Self.flatJSON()
        cut.removeLast(cut.count / 3)
        let path = try Self.written(cut, "cut")
        var inMemory = ""
        do { _ = try Manifests.parse(cut, source: "m") } catch { inMemory = error.message }
        var mapped = ""
        do { _ = try Manifests.parse(try MappedFile(path, limit: 64 << 20), source: "m", hashing: true) } catch { mapped = error.message }
        #expect(!inMemory.isEmpty)
        #expect(mapped == inMemory)

        let empty = try Self.written([], "empty")
        do {
            _ = try Manifests.parse(try MappedFile(empty, limit: 64 << 20), source: "m", hashing: true)
            Issue.record("an empty manifest was read")
        } catch {
            #expect(error.message.contains("is empty (0 bytes)"), "\(error.message)")
        }
    }

    @Test func onlyARegularFileWithinTheLimitIsMapped() throws {
        let path = try Self.written(Self.flatJSON(count: 100), "limit")
        do {
            _ = try MappedFile(path, limit: 1000)
            Issue.record("a file over the limit was mapped")
        } catch {
            #expect(error.message.contains("is larger than"), "\(error.message)")
        }
        let fifo = path + ".fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        do {
            _ = try MappedFile(fifo, limit: 64 << 20)
            Issue.record("a FIFO was mapped")
        } catch {
            #expect(error.message.contains("not a regular file"), "\(error.message)")
        }
    }
}

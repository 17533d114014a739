import Testing
@testable import FerryCore

struct ManifestTests {
    static let hashA = String(repeating: "a", count: 64)
    static let hashB = String(repeating: "b", count: 64)

    func parse(_ text: String) throws(FerryError) -> Manifest { try Manifest.parse(Array(text.utf8), source: "test") }

    func manifest(_ files: String) -> String {
        "{\"format\": \"ferry-manifest/1\", \"version\": 3, \"files\": [\(files)]}"
    }

    @Test func parsesTheContractExample() throws {
        let m = try parse("""
            { "format": "ferry-manifest/1", "version": 42, "generated": "2026-11-22T20:00:00Z", "future-key": {"x": [1, 2.5e3, null, true]},
              "files": [ { "path": "css/site.css", "size": 5120, "sha256": "\(Self.hashA.uppercased())", "mtime": "2026-11-20T08:00:00Z", "mode": "0644" } ] }
            """)
        #expect(m.version == 42)
        #expect(m.generated == Timestamp(rfc3339: "2026-11-22T20:00:00Z"))
        #expect(m.entries.count == 1)
        let e = m.entries[0]
        #expect(e.path.string == "css/site.css")
        #expect(e.size == 5120)
        #expect(e.sha256 == Self.hashA)
        #expect(e.mode == 0o644)
        #expect(e.mtime == Timestamp(rfc3339: "2026-11-20T08:00:00Z"))
    }

    @Test func decodesEscapesInPaths() throws {
        let m = try parse(manifest("{\"path\": \"d\\u00e9j\\u00E0/\\ud83d\\ude00 \\\"q\\\".txt\", \"size\": 1, \"sha256\": \"\(Self.hashA)\"}"))
        #expect(m.entries[0].path.string == "déjà/😀 \"q\".txt")
    }

    @Test func stripsSpecialModeBits() throws {
        let m = try parse(manifest("{\"path\": \"x\", \"size\": 1, \"sha256\": \"\(Self.hashA)\", \"mode\": \"4755\"}"))
        #expect(m.entries[0].mode == 0o755)
    }

    /// Hostile or broken manifests are refused as a whole with a message naming what was wrong.
    @Test(arguments: [
        ("not json at all {", "line 1: expected '<64 hex digits>  <path>'"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": [", "is not valid JSON at line 1"),
        ("{\"format\": \"ferry-manifest/2\", \"version\": 1, \"files\": []}", "has format \"ferry-manifest/2\""),
        ("{\"version\": 1, \"files\": []}", "has no \"format\""),
        ("{\"format\": \"ferry-manifest/1\", \"files\": []}", "has no \"version\""),
        ("{\"format\": \"ferry-manifest/1\", \"version\": -1, \"files\": []}", "\"version\" must be 0 or more"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 1.5, \"files\": []}", "expected a whole number"),
        ("[1, 2]", "the top level must be a JSON object"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": []} trailing", "unexpected data after the end"),
    ])
    func refusesBrokenDocuments(text: String, message: String) {
        #expect(throws: FerryError.self) { try parse(text) }
        do { _ = try parse(text) } catch {
            #expect(error.exitCode == .remoteOrManifest)
            #expect(error.message.contains(message), "got: \(error.message)")
        }
    }

    @Test(arguments: [
        ("{\"path\": \"x\", \"size\": 1, \"sha256\": \"abc\"}", "sha256 must be 64 hex digits, got 3 characters"),
        ("{\"path\": \"x\", \"size\": 1, \"sha256\": \"\(String(repeating: "g", count: 64))\"}", "sha256 must be 64 hex digits"),
        ("{\"path\": \"../etc/passwd\", \"size\": 1, \"sha256\": \"\(hashA)\"}", "has a '..' segment"),
        ("{\"path\": \"/etc/passwd\", \"size\": 1, \"sha256\": \"\(hashA)\"}", "is absolute"),
        ("{\"path\": \"a\\u0000b\", \"size\": 1, \"sha256\": \"\(hashA)\"}", "control character (byte 0x0)"),
        ("{\"path\": \"a\\u001bb\", \"size\": 1, \"sha256\": \"\(hashA)\"}", "control character (byte 0x1b)"),
        ("{\"path\": \".ferry/partial/1.part\", \"size\": 1, \"sha256\": \"\(hashA)\"}", "reserved '.ferry/'"),
        ("{\"path\": \"x\", \"size\": 1, \"sha256\": \"\(hashA)\"}, {\"path\": \"x\", \"size\": 2, \"sha256\": \"\(hashB)\"}", "lists \"x\" twice"),
        ("{\"path\": \"a\", \"size\": 1, \"sha256\": \"\(hashA)\"}, {\"path\": \"a/b\", \"size\": 2, \"sha256\": \"\(hashB)\"}", "lists \"a\" as a file and also \"a/b\""),
        ("{\"path\": \"x\", \"size\": -1, \"sha256\": \"\(hashA)\"}", "size is negative"),
        ("{\"path\": \"x\", \"sha256\": \"\(hashA)\"}", "has no \"size\""),
        ("{\"size\": 1, \"sha256\": \"\(hashA)\"}", "has no \"path\""),
        ("{\"path\": \"x\", \"size\": 1, \"sha256\": \"\(hashA)\", \"mode\": \"rwx\"}", "mode is not an octal mode"),
        ("{\"path\": \"x\", \"size\": 1, \"sha256\": \"\(hashA)\", \"mtime\": \"yesterday\"}", "mtime is not an RFC 3339 time"),
        ("{\"path\": \"x\", \"size\": 99999999999999999999, \"sha256\": \"\(hashA)\"}", "number is too large"),
        ("{\"path\": \"x\", \"size\": 9223372036854775807, \"sha256\": \"\(hashA)\"}", "size is larger than 8 PiB"),
        ("{\"path\": \"raw\ttab\", \"size\": 1, \"sha256\": \"\(hashA)\"}", "raw control character"),
    ])
    func refusesHostileEntries(files: String, message: String) {
        do {
            _ = try parse(manifest(files))
            Issue.record("accepted a hostile manifest: \(files)")
        } catch {
            #expect(error.exitCode == .remoteOrManifest)
            #expect(error.message.contains(message), "got: \(error.message)")
        }
    }

    @Test func refusesInvalidUTF8() {
        var bytes = Array("{\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": [{\"path\": \"".utf8)
        bytes += [0xFF, 0xFE]
        bytes += Array("\", \"size\": 1, \"sha256\": \"\(Self.hashA)\"}]}".utf8)
        #expect(throws: FerryError.self) { try Manifest.parse(bytes, source: "t") }
    }

    @Test func refusesDeepNesting() {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        let text = "{\"format\": \"ferry-manifest/1\", \"version\": 1, \"x\": \(deep), \"files\": []}"
        do { _ = try parse(text); Issue.record("accepted") } catch { #expect(error.message.contains("nesting deeper")) }
    }

    @Test func readsSHA256SUMS() throws {
        let m = try parse("\(Self.hashA)  ./css/site.css\n\(Self.hashB) *bin/tool\n\n")
        #expect(m.format == .sha256sums)
        #expect(m.version == nil)
        #expect(m.entries.map(\.path.string) == ["css/site.css", "bin/tool"])
        #expect(m.entries.allSatisfy { $0.size == nil })
    }

    @Test func refusesHostileSHA256SUMS() {
        #expect(throws: FerryError.self) { try parse("\(Self.hashA)  ../../etc/shadow\n") }
        #expect(throws: FerryError.self) { try parse("\(Self.hashA)  x\n\(Self.hashA)  x\n") }
        #expect(throws: FerryError.self) { try parse("abc  x\n") }
    }

    @Test func writerOutputParsesBackIdentically() throws {
        let entries = [
            ManifestEntry(path: try RelativePath(validating: "z/ç é.txt"), size: 3, sha256: Self.hashB, mtime: Timestamp(seconds: 1_700_000_000, nanoseconds: 5), mode: 0o600),
            ManifestEntry(path: try RelativePath(validating: "a \"quoted\"\\name"), size: 0, sha256: Self.hashA, mtime: Timestamp(seconds: 0), mode: 0o644),
        ]
        let text = ManifestWriter.render(version: 7, generated: Timestamp(seconds: 1_800_000_000), entries: entries)
        let m = try parse(text)
        #expect(m.version == 7)
        #expect(m.entries == entries.sorted { $0.path < $1.path })
        #expect(ManifestWriter.render(version: 7, generated: Timestamp(seconds: 1_800_000_000), entries: entries.reversed()) == text)
    }
}

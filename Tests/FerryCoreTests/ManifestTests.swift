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
        #expect(e.sha256.hex == Self.hashA)
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
        ("{\"format\": \"ferry-manifest/3\", \"version\": 1, \"files\": []}", "has format \"ferry-manifest/3\""),
        ("{\"format\": \"ferry-manifest/2\", \"version\": 1, \"files\": []}", "does not name one \"tree\""),
        ("{\"version\": 1, \"files\": []}", "has no \"format\""),
        ("{\"format\": \"ferry-manifest/1\", \"files\": []}", "has no \"version\""),
        ("{\"format\": \"ferry-manifest/1\", \"version\": -1, \"files\": []}", "\"version\" must be 0 or more"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 1.5, \"files\": []}", "expected a whole number"),
        // The largest Int64: one more (the next push's version) would overflow.
        ("{\"format\": \"ferry-manifest/1\", \"version\": 9223372036854775807, \"files\": []}", "\"version\" 9223372036854775807 is larger than 9007199254740991"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 9223372036854775808, \"files\": []}", "number is too large"),
        // Sizes within the per-file limit whose sum would overflow a byte count.
        ("{\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": [" + (0..<600).map { "{\"path\": \"f\($0)\", \"size\": 9007199254740992, \"sha256\": \"\(String(repeating: "a", count: 64))\"}" }.joined(separator: ",") + "]}",
         "add up to more than 4 EiB"),
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
        ("{\"path\": \"x\", \"size\": -1, \"sha256\": \"\(hashA)\"}", "files[0].size must be 0 or more, found -1"),
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
        #expect(m.entries.map(\.path.string) == ["bin/tool", "css/site.css"], "entries come in path order")
        #expect(m.entries.allSatisfy { $0.size == nil })
    }

    @Test func refusesHostileSHA256SUMS() {
        #expect(throws: FerryError.self) { try parse("\(Self.hashA)  ../../etc/shadow\n") }
        #expect(throws: FerryError.self) { try parse("\(Self.hashA)  x\n\(Self.hashA)  x\n") }
        #expect(throws: FerryError.self) { try parse("abc  x\n") }
    }

    @Test func writerOutputParsesBackIdentically() throws {
        let entries = [
            ManifestEntry(path: try RelativePath(validating: "z/ç é.txt"), size: 3, sha256: Self.hashB.digest, mtime: Timestamp(seconds: 1_700_000_000, nanoseconds: 5), mode: 0o600),
            ManifestEntry(path: try RelativePath(validating: "a \"quoted\"\\name"), size: 0, sha256: Self.hashA.digest, mtime: Timestamp(seconds: 0), mode: 0o644),
        ]
        let text = ManifestWriter.render(version: 7, generated: Timestamp(seconds: 1_800_000_000), entries: entries)
        let m = try parse(text)
        #expect(m.version == 7)
        #expect(m.entries == entries.sorted { $0.path < $1.path })
        #expect(ManifestWriter.render(version: 7, generated: Timestamp(seconds: 1_800_000_000), entries: entries.reversed()) == text)
    }

    /// An empty body is what a failed publish leaves: never a manifest, whatever its format.
    @Test(arguments: ["", " ", "\n\n", "\r\n \t\n", "\u{FEFF}", "\u{FEFF}  \n"])
    func refusesAnEmptyBody(text: String) {
        do { _ = try parse(text); Issue.record("accepted an empty manifest: \(Array(text.utf8))") } catch {
            #expect(error.exitCode == .remoteOrManifest)
            #expect(error.message.contains("is empty"), "got: \(error.message)")
        }
    }

    @Test func anEmptyFilesListParses() throws {
        #expect(try parse(manifest("")).entries.isEmpty, "refusing it is the session's rule (ManifestAcceptance)")
    }

    /// Entries come in byte order of their paths whatever order the remote listed them in; a
    /// duplicate is refused wherever it sits, and so is a file listed also as a directory.
    @Test func sortsEntriesAndStillRefusesDuplicatesAndFileDirectoryClashes() throws {
        func entry(_ path: String) -> String { "{\"path\": \"\(path)\", \"size\": 1, \"sha256\": \"\(Self.hashA)\"}" }
        let m = try parse(manifest(["a0", "a/b", "a.txt", "é", "a b", "Z"].map(entry).joined(separator: ", ")))
        #expect(m.entries.map(\.path.string) == ["Z", "a b", "a.txt", "a/b", "a0", "é"])
        #expect(m.lists(RelativePath(trusted: "a/b")) && !m.lists(RelativePath(trusted: "a")))
        do { _ = try parse(manifest(["x", "y", "x"].map(entry).joined(separator: ", "))); Issue.record("accepted a duplicate") } catch {
            #expect(error.message.contains("lists \"x\" twice"), "\(error.message)")
        }
        do { _ = try parse(manifest(["a/b/c", "a.txt", "a/b"].map(entry).joined(separator: ", "))); Issue.record("accepted a file that is a directory") } catch {
            #expect(error.message.contains("lists \"a/b\" as a file and also \"a/b/c\" inside it"), "\(error.message)")
        }
    }

    /// Reading stops at the first fatal error: a path repeated a million times fails at the second.
    @Test func stopsAtTheFirstDuplicate() {
        let one = "{\"path\": \"x\", \"size\": 1, \"sha256\": \"\(Self.hashA)\"}"
        let text = manifest(Array(repeating: one, count: 3).joined(separator: ", ") + ", garbage")
        do { _ = try parse(text); Issue.record("accepted") } catch {
            #expect(error.message.contains("lists \"x\" twice"), "the duplicate is found before the broken JSON after it: \(error.message)")
        }
    }

    /// `sha256sum` output as people write it: text and binary markers, `./`, CRLF, the BSD tag form,
    /// and coreutils' escaped names (a leading `\`, with `\\`, `\n`, `\r`).
    @Test func readsSHA256SUMSAsPeopleWriteIt() throws {
        let a = Self.hashA, b = Self.hashB
        let text = "\(a)  plain.txt\r\n\(b) *./binary.bin\r\n\\\(a)  back\\\\slash.txt\n"
            + "SHA256 (tag form.txt) = \(b)\nSHA256 (odd) = name) = \(a)\n\\SHA256 (tag\\\\back) = \(b)\n\(a) bsd-single-space\n"
            + "\(b)    leading spaces\n"
        let m = try parse(text)
        let expected = [("plain.txt", a), ("binary.bin", b), ("back\\slash.txt", a), ("tag form.txt", b), ("odd) = name", a),
                        ("tag\\back", b), ("bsd-single-space", a), ("  leading spaces", b)]
        #expect(m.entries.map(\.path.string) == expected.map(\.0).sorted(), "entries come in path order")
        #expect(Dictionary(uniqueKeysWithValues: m.entries.map { ($0.path.string, $0.sha256.hex) }) == Dictionary(uniqueKeysWithValues: expected))
    }

    @Test(arguments: [
        ("\\\(hashA)  new\\nline\n", "line 1: path \"new\\nline\" is refused: path contains a control character (byte 0xa)"),
        ("\(hashA)  ok\n\\\(hashA)  cr\\rhere\n", "line 2: path \"cr\\rhere\" is refused"),
        ("\\\(hashA)  bad\\qescape\n", "line 1: the escaped name"),
        ("\(hashA)  ok\nMD5 (x) = 0123456789abcdef0123456789abcdef\n", "line 2: this is a MD5 line"),
        ("SHA256 (x) = abc\n", "line 1: expected 'SHA256 (<path>) = <64 hex digits>'"),
        ("\(hashA)  a\n\(hashB)  a\n", "line 2: lists \"a\" twice"),
        ("\(hashA)  -\n", "line 1: '-' is what sha256sum writes for its standard input"),
        ("\(hashA)  a\n\(hashB)  ends-in-cr\r\n", "line 2: path \"ends-in-cr\\r\" is refused"),
    ])
    func refusesBadSHA256SUMSNamingTheLine(text: String, message: String) {
        do { _ = try parse(text); Issue.record("accepted: \(text)") } catch {
            #expect(error.message.contains(message), "got: \(error.message)")
        }
    }

    @Test func namesANonUTF8LineInSHA256SUMS() {
        let bytes = Array("\(Self.hashA)  ok\n\(Self.hashA)  caf".utf8) + [0xE9] + Array("\n".utf8)
        do { _ = try Manifest.parse(bytes, source: "t"); Issue.record("accepted") } catch {
            #expect(error.message.contains("line 2: the name \"caf\\xe9\" is not UTF-8"), "got: \(error.message)")
        }
    }

    @Test func shortensAHugePathInMessages() {
        let huge = String(repeating: "x", count: 1 << 20)
        do { _ = try parse(manifest("{\"path\": \"\(huge)\", \"size\": 1, \"sha256\": \"\(Self.hashA)\"}")); Issue.record("accepted") } catch {
            #expect(error.message.utf8.count < 600, "the message is \(error.message.utf8.count) bytes")
            #expect(error.message.contains("(1048576 bytes)"))
        }
    }
}

/// The session's rules for taking a manifest: expiry, rollback, emptiness.
struct ManifestAcceptanceTests {
    let entry = ManifestEntry(path: RelativePath(trusted: "a"), size: 1, sha256: String(repeating: "a", count: 64).digest)

    func manifest(version: Int64?, files: Int, expires: Timestamp? = nil) -> Manifest {
        Manifest(format: .ferry, version: version, generated: nil, expires: expires, entries: Array(repeating: entry, count: files))
    }

    @Test(arguments: [
        // version, files, expires, applied, local files, allow rollback, allow empty, refusal (nil = accepted)
        (5, 1, nil, 4, 10, false, false, nil),
        (5, 1, nil, 5, 10, false, false, nil),
        (3, 1, nil, 5, 10, false, false, "refused as a rollback"),
        (3, 1, nil, 5, 10, true, false, nil),
        (3, 1, nil, nil, 10, false, false, nil),
        (5, 0, nil, 4, 10, false, false, "lists no files, and the mirror holds 10"),
        (5, 0, nil, 4, 10, false, true, nil),
        (5, 0, nil, 4, 0, false, false, nil),
        (5, 1, 999, 4, 10, false, false, "expired at"),
        (5, 1, 1001, 4, 10, false, false, nil),
    ] as [(Int64, Int, Int64?, Int64?, Int, Bool, Bool, String?)])
    func decides(version: Int64, files: Int, expires: Int64?, applied: Int64?, local: Int, rollback: Bool, empty: Bool, refusal: String?) {
        let rules = ManifestAcceptance(session: "s", now: Timestamp(seconds: 1000), appliedVersion: applied, localFiles: local,
                                       allowRollback: rollback, allowEmpty: empty)
        do {
            try rules.check(manifest(version: version, files: files, expires: expires.map { Timestamp(seconds: $0) }), source: "m")
            #expect(refusal == nil, "accepted, expected: \(refusal ?? "")")
        } catch {
            #expect(error.exitCode == .remoteOrManifest)
            if let refusal { #expect(error.message.contains(refusal), "got: \(error.message)") } else { Issue.record("refused: \(error)") }
        }
    }
}

/// One function decides how names and remote text are shown; hostile names come out harmless.
struct PrintableTests {
    @Test(arguments: [
        ("plain/name.txt", "plain/name.txt"),
        ("\u{1B}[8mhidden", "\\x1b[8mhidden"),
        ("two\nlines", "two\\nlines"),
        ("tab\there\r", "tab\\there\\r"),
        ("del\u{7F}", "del\\x7f"),
        ("back\\slash", "back\\\\slash"),
        ("bidi\u{202E}txt.exe", "bidi\\u{202e}txt.exe"),
        ("iso\u{2066}late", "iso\\u{2066}late"),
        ("c1\u{9B}31m", "c1\\u{9b}31m"),
        ("zero\u{200B}width", "zero\\u{200b}width"),
        ("déjà vu 😀", "déjà vu 😀"),
        ("nul\u{0}", "nul\\x00"),
        ("soft\u{AD}hyphen", "soft\\u{ad}hyphen"),
        ("tag\u{E0041}s", "tag\\u{e0041}s"),
        ("filler\u{3164}", "filler\\u{3164}"),
    ])
    func escapesNames(name: String, shown: String) {
        #expect(Printable.name(name) == shown)
        #expect(!Printable.name(name).utf8.contains { $0 < 0x20 || $0 == 0x7F }, "no control byte survives")
    }

    @Test func escapesBytesThatAreNotUTF8() {
        let bytes: [UInt8] = [0x61, 0xFF, 0x62, 0xC3, 0x28, 0xE2, 0x82, 0x1B, 0xED, 0xA0, 0x80]
        let shown = bytes.withUnsafeBufferPointer { Printable.name(bytes: $0) }
        #expect(shown == "a\\xffb\\xc3(\\xe2\\x82\\x1b\\xed\\xa0\\x80")
    }

    @Test func shortensLongNamesKeepingStartAndEnd() {
        let long = "start-" + String(repeating: "é", count: 500) + "-end.txt"
        let shown = Printable.name(long)
        #expect(shown.hasPrefix("start-") && shown.hasSuffix("-end.txt"))
        #expect(shown.contains("…(\(long.utf8.count) bytes)…"))
        #expect(shown.utf8.count < 220)
        #expect(Printable.name(String(repeating: "a", count: 160)) == String(repeating: "a", count: 160))
    }

    @Test func jsonCarriesTheExactNameWithHiddenCharactersEscaped() {
        #expect(JSONText.quote("a\u{202E}b\u{E0041}\u{1B}") == "\"a\\u202eb\\udb40\\udc41\\u001b\"")
        #expect(JSONText.quote("déjà 😀") == "\"déjà 😀\"")
        #expect(JSONText.quote("plain/path name.txt") == "\"plain/path name.txt\"")
        #expect(JSONText.quote("say \"hi\" \\ bye") == "\"say \\\"hi\\\" \\\\ bye\"")
        #expect(JSONText.quote("tab\there\u{7F}") == "\"tab\\there\\u007f\"")
    }

    /// Numbers in events are written digit by digit into the line: every sign and width.
    @Test func jsonIntegersAreWrittenInDecimalWhateverTheirSize() {
        for v: Int64 in [0, 7, 10, -1, -10, 4096, 1_795_557_190, .max, .min] {
            var out: [UInt8] = Array("x:".utf8)
            JSONText.appendInteger(v, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == "x:\(v)")
        }
    }

    @Test func textKeepsNewlinesAndBackslashesButNotControls() {
        #expect(Printable.text("line one\nline \\two\u{1B}]0;title\u{7}") == "line one\nline \\two\\x1b]0;title\\x07")
        #expect(Printable.text("plain") == "plain")
    }
}

extension String {
    /// 64 hex digits as a digest (tests only).
    var digest: SHA256Digest { SHA256Digest(hex: self)! }
}

/// Digests are kept as 32 bytes and written as lowercase hex.
struct SHA256DigestTests {
    @Test func hexRoundTripsAndIgnoresCase() throws {
        let hex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        let digest = try #require(SHA256Digest(hex: hex))
        #expect(digest.hex == hex && "\(digest)" == hex)
        #expect(SHA256Digest(hex: hex.uppercased()) == digest)
        #expect(SHA256Digest(hex: String(hex.dropLast()) + "c") != digest)
        let digits = Array(hex.utf8)
        let bytes = (0..<32).map { UInt8(String(decoding: digits[2 * $0..<2 * $0 + 2], as: UTF8.self), radix: 16)! }
        #expect(bytes.withUnsafeBytes { SHA256Digest(bytes: $0) } == digest)
    }

    @Test(arguments: ["", "abc", String(repeating: "a", count: 63), String(repeating: "a", count: 65),
                      String(repeating: "g", count: 64), String(repeating: " ", count: 64)])
    func refusesWhatIsNot64HexDigits(_ text: String) {
        #expect(SHA256Digest(hex: text) == nil)
    }

    /// `manifest build`'s version: one more than the existing manifest and never below the Unix
    /// time, so a fresh checkout never builds a version mirrors refuse as a rollback; an explicit
    /// lower version needs --allow-rollback and is said.
    @Test func theBuiltVersionKeepsRisingAndALowerOneIsRefusedUnlessAllowed() throws {
        let now = Timestamp(seconds: 1_800_000_000)
        func next(_ previous: Int64?, _ explicit: Int64? = nil, allow: Bool = false) throws(FerryError) -> (Int64, String?) {
            let r = try ManifestVersion.next(previous: previous, explicit: explicit, now: now, allowRollback: allow, output: "m.json")
            return (r.version, r.warning)
        }
        #expect(try next(nil).0 == 1_800_000_000, "a fresh checkout: the time")
        #expect(try next(41).0 == 1_800_000_000, "a small sequence gives way to the time")
        #expect(try next(1_800_000_000).0 == 1_800_000_001, "two builds in one second still rise")
        #expect(try next(5_000_000_000).0 == 5_000_000_001, "a version ahead of the clock goes on from itself")
        #expect(try next(Manifest.maximumVersion - 1).0 == Manifest.maximumVersion, "up to the largest version")
        // Past the largest there is none: refused, never the same version again.
        let exhausted = #expect(throws: FerryError.self) { try next(Manifest.maximumVersion) }
        #expect(exhausted?.category == .manifest && exhausted?.message.contains("the manifest already at m.json has version \(Manifest.maximumVersion), the largest") == true,
                "\(String(describing: exhausted))")
        #expect(exhausted?.hint?.contains("--allow-rollback") == true)
        #expect(try next(7, 9) == (9, nil))
        #expect(try next(7, 7) == (7, nil), "the same version again is not a rollback")
        let refused = #expect(throws: FerryError.self) { try next(7, 0) }
        #expect(refused?.category == .usage && refused?.message.contains("lower than version 7") == true && refused?.hint?.contains("--allow-rollback") == true)
        let allowed = try next(7, 0, allow: true)
        #expect(allowed.0 == 0 && allowed.1?.contains("rollback") == true, "allowed, and said")
        #expect(throws: FerryError.self) { try next(nil, Manifest.maximumVersion + 1) }
    }

    /// A push numbers its manifest as `manifest build` does, from the remote's version.
    @Test func thePushedVersionNeverFallsBelowTheClockNorSaturates() throws {
        let now = Timestamp(seconds: 1_800_000_000)
        func following(_ previous: Int64?) throws(FerryError) -> Int64 { try ManifestVersion.following(previous, now: now, manifest: "remote") }
        #expect(try following(nil) == 1_800_000_000, "a first push (or one to a wiped remote) goes above whatever mirrors applied before")
        let first = try following(nil)
        #expect(try following(7) == first)
        #expect(try following(1_900_000_000) == 1_900_000_001)
        #expect(try following(Manifest.maximumVersion - 1) == Manifest.maximumVersion)
        let refused = #expect(throws: FerryError.self) { try following(Manifest.maximumVersion) }
        #expect(refused?.exitCode == .remoteOrManifest && refused?.message.hasPrefix("remote has version \(Manifest.maximumVersion)") == true,
                "\(String(describing: refused))")
        #expect(try ManifestVersion.following(nil, now: Timestamp(seconds: 0), manifest: "remote") == 1)
    }

    /// `"layout"` is read from both formats and written only when it is not the default; a
    /// layout this ferry does not know refuses the manifest (a pull must not fetch the wrong URLs).
    @Test func readsAndWritesTheRemoteLayout() throws {
        let e = ManifestEntry(path: RelativePath(trusted: "a"), size: 1, sha256: SHA256Digest(hex: String(repeating: "a", count: 64))!)
        let flat = ManifestWriter.render(version: 3, generated: Timestamp(seconds: 0), layout: .objects, entries: [e])
        #expect(try Manifest.parse(Array(flat.utf8), source: "m").layout == .objects)
        let plain = ManifestWriter.render(version: 3, generated: Timestamp(seconds: 0), entries: [e])
        #expect(!plain.contains("layout"))
        #expect(try Manifest.parse(Array(plain.utf8), source: "m").layout == .tree)
        let root = ManifestWriter.renderRoot(version: 3, generated: Timestamp(seconds: 0), layout: .objects,
                                             tree: ManifestTree.Reference(sha256: e.sha256, level: 0, files: 1))
        #expect(try Manifest.parse(Array(root.utf8), source: "m").layout == .objects)
        let unknown = plain.replacing("\"version\"", with: "\"layout\": \"zip\", \"version\"")
        #expect(throws: FerryError.self) { try Manifest.parse(Array(unknown.utf8), source: "m") }
        do { _ = try Manifest.parse(Array(unknown.utf8), source: "m") } catch {
            #expect(error.message.contains("\"layout\" \"zip\" is not one this ferry reads"), "\(error.message)")
        }
        #expect(RemoteLayout.contentPath(e.sha256, beside: "sub/manifest.json").string == "sub/.ferry/data/aa/" + e.sha256.hex)
        #expect(RemoteLayout.contentHash(at: RemoteLayout.contentPath(e.sha256, beside: "m.json"), beside: "m.json") == e.sha256)
        #expect(RemoteLayout.contentHash(at: RelativePath(trusted: ".ferry/data/ab/" + e.sha256.hex), beside: "m.json") == nil)
    }
}

struct ManifestEntryLayoutTests {
    let hash = String(repeating: "a", count: 64)

    /// An entry's optional values are stored without Optional's tag bytes (80 bytes an entry, not
    /// 96): each reads back as it was given, none included, and the extremes a manifest may carry.
    @Test func anEntryKeepsEveryValueInEightyBytes() throws {
        #expect(MemoryLayout<ManifestEntry>.stride <= 80)
        let digest = try #require(SHA256Digest(hex: hash))
        let path = RelativePath(trusted: "a")
        let none = ManifestEntry(path: path, size: nil, sha256: digest)
        #expect(none.size == nil && none.mtime == nil && none.mode == nil)
        let zero = ManifestEntry(path: path, size: 0, sha256: digest, mtime: Timestamp(seconds: 0), mode: 0)
        #expect(zero.size == 0 && zero.mtime == Timestamp(seconds: 0) && zero.mode == 0)
        let early = Timestamp(seconds: -62_135_596_800, nanoseconds: 999_999_999)
        let most = ManifestEntry(path: path, size: Manifest.maximumFileSize, sha256: digest, mtime: early, mode: 0o777)
        #expect(most.size == Manifest.maximumFileSize && most.mtime == early && most.mode == 0o777)
        #expect(none != zero && zero != most)
        let text = "{\"format\": \"ferry-manifest/1\", \"version\": 3, \"files\": [{\"path\": \"a\", \"size\": 0, \"sha256\": \"\(hash)\", \"mode\": \"0000\"}]}"
        let parsed = try Manifest.parse(Array(text.utf8), source: "test")
        #expect(parsed.entries.first?.size == 0 && parsed.entries.first?.mode == 0 && parsed.entries.first?.mtime == nil)
    }
}

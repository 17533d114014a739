import Testing
@testable import FerryCore

/// The JSON reader takes RFC 8259 and only what every reader agrees on (issue 39 §7): a member
/// name given twice is refused at any depth, numbers follow the grammar, and a count is never
/// negative, `-0` included. Each refusal says what and where.
struct JSONReaderTests {
    static let hash = String(repeating: "a", count: 64)
    static let entry = "{\"path\": \"a\", \"size\": 1, \"sha256\": \"\(hash)\"}"

    /// The members of a one-level object, or the refusal's message and place.
    func flat(_ text: String) -> Result<[String: String], JSONReader.Failure> {
        do throws(JSONReader.Failure) { return .success(try JSONReader.flatFields(Array(text.utf8))) } catch { return .failure(error) }
    }

    func refusal(_ text: String) -> FerryError? {
        do { _ = try Manifest.parse(Array(text.utf8), source: "m.json") } catch { return error }
        return nil
    }

    @Test func aMemberGivenTwiceIsRefusedAndNamedWhereItIs() throws {
        guard case let .failure(top) = flat("{\"a\": 1,\n \"b\": 2, \"a\": 3}") else { Issue.record("taken"); return }
        #expect(top.message.contains("member \"a\" is given twice in one object"), "\(top.message)")
        #expect((top.line, top.column) == (2, 10), "at the second \"a\": \(top.line):\(top.column)")
        // Names are compared as the strings they decode to: an escape does not make another name.
        guard case let .failure(escaped) = flat("{\"a\": 1, \"\\u0061\": 2}") else { Issue.record("taken"); return }
        #expect(escaped.message.contains("member \"a\" is given twice"))
        // ...but as their bytes: é and e + combining acute are two names for RFC 8259 (not for Swift's ==).
        let twoNames = Array("{\"\\u00e9\": 1, \"e\\u0301\": 2}".utf8)
        #expect(try twoNames.withUnsafeBufferPointer { (p) throws(JSONReader.Failure) in try JSONReader.flatObject(p) }.map(\.value) == ["1", "2"])
        // Nested objects are checked too; the same name in two objects is not a duplicate.
        guard case let .failure(nested) = flat("{\"x\": {\"k\": 1, \"k\": 2}}") else { Issue.record("taken"); return }
        #expect(nested.message.contains("member \"k\" is given twice"))
        _ = try flat("{\"x\": {\"k\": 1}, \"y\": [{\"k\": 1}, {\"k\": 2}]}").get()
        // An object of many members (past the short list) is still checked, at the end as at the start.
        let many = (0..<200).map { "\"m\($0)\": \($0)" }.joined(separator: ", ")
        #expect(try flat("{\(many)}").get().count == 200)
        guard case let .failure(late) = flat("{\(many), \"m3\": 0}") else { Issue.record("taken"); return }
        #expect(late.message.contains("member \"m3\" is given twice"))
        guard case let .failure(early) = flat("{\"m0\": 1, \"m0\": 2, \(many)}") else { Issue.record("taken"); return }
        #expect(early.message.contains("member \"m0\" is given twice"))
    }

    /// In a manifest, unsigned or inside a signed envelope's `signed` part, at any depth.
    @Test(arguments: [
        "{\"format\": \"ferry-manifest/1\", \"version\": 1, \"version\": 9, \"files\": []}",
        "{\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": [], \"files\": [\(entry)]}",
        "{\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": [{\"path\": \"a\", \"path\": \"b\", \"size\": 1, \"sha256\": \"\(hash)\"}]}",
        "{\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": [], \"x\": {\"y\": {\"z\": 1, \"z\": 2}}}",
        "{\"signed\": {\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": [\(entry)], \"files\": []}, \"signatures\": []}",
        "{\"signed\": {\"format\": \"ferry-manifest/2\", \"version\": 1, \"tree\": {\"sha256\": \"\(hash)\", \"level\": 0, \"files\": 1, \"files\": 2}}, \"signatures\": []}",
        "{\"signed\": {\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": []}, \"signatures\": [], \"signatures\": []}",
        "{\"signed\": {\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": []}, \"signatures\": [{\"key\": \"k\", \"key\": \"k\", \"sig\": \"s\"}]}",
    ])
    func aManifestWithAMemberGivenTwiceIsRefused(_ text: String) throws {
        let error = try #require(refusal(text), "taken: \(text)")
        #expect(error.exitCode == .remoteOrManifest)
        #expect(error.message.hasPrefix("manifest m.json: member \"") && error.message.contains("\" is given twice in one object"), "\(error.message)")
        #expect(error.message.contains("(line 1, column "), "\(error.message)")
    }

    /// Numbers by RFC 8259's grammar, wherever they stand (a count, or a member ferry skips).
    @Test(arguments: [
        ("01", "a leading zero"), ("-01", "a leading zero"), ("00", "a leading zero"),
        ("+1", "unexpected character '+'"), (".5", "unexpected character '.'"),
        ("1.", "a digit after its decimal point"), ("1.e5", "a digit after its decimal point"),
        ("1e", "a digit in its exponent"), ("1e+", "a digit in its exponent"), ("-", "a digit after '-'"), ("-a", "a digit after '-'"),
        ("0x10", "expected ','"), ("1.5.3", "expected ','"), ("Infinity", "unexpected character 'I'"), ("NaN", "unexpected character 'N'"),
    ])
    func numbersFollowTheGrammar(_ number: String, _ message: String) throws {
        guard case let .failure(skipped) = flat("{\"n\": \(number), \"m\": 1}") else { Issue.record("\(number) taken"); return }
        #expect(skipped.message.contains(message), "\(number): \(skipped.message)")
        #expect(skipped.line == 1 && skipped.column >= 7, "\(number): where it broke, \(skipped.column)")
        // As a count, the same number is refused, though the count's reader words it its own way.
        let error = try #require(refusal("{\"format\": \"ferry-manifest/1\", \"version\": \(number), \"files\": []}"), "\(number) taken")
        #expect(error.exitCode == .remoteOrManifest && error.message.contains("line 1, column"), "\(number): \(error.message)")
    }

    @Test(arguments: ["0", "-0", "1", "-1", "10", "0.5", "-0.0", "1e5", "1E+5", "1e-5", "2.5e3", "123456789012345678901234567890"])
    func grammaticalNumbersAreTakenWhereTheyAreSkipped(_ number: String) throws {
        #expect(try flat("{\"n\": \(number)}").get()["n"] == number)
    }

    /// A count (a version, a size, a tree's files) is 0 or more: `-0` is refused as a minus sign,
    /// named, with its place.
    @Test(arguments: [
        ("{\"format\": \"ferry-manifest/1\", \"version\": -0, \"files\": []}", "\"version\" must be 0 or more, found -0"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 1, \"files\": [{\"path\": \"a\", \"size\": -0, \"sha256\": \"\(hash)\"}]}",
         "files[0].size must be 0 or more, found -0"),
        ("{\"format\": \"ferry-manifest/2\", \"version\": 1, \"tree\": {\"sha256\": \"\(hash)\", \"level\": -0, \"files\": 1}}",
         "\"tree\".level must be 0 or more, found -0"),
        ("{\"format\": \"ferry-manifest/2\", \"version\": 1, \"tree\": {\"sha256\": \"\(hash)\", \"level\": 0, \"files\": -0}}",
         "\"tree\".files must be 0 or more, found -0"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": \"5\", \"files\": []}", "\"version\": expected a whole number, found '\"'"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 1e3, \"files\": []}", "\"version\": expected a whole number, found a fraction or exponent"),
        ("{\"format\": \"ferry-manifest/1\", \"version\": 0, \"files\": [{\"path\": \"a\", \"size\": 007, \"sha256\": \"\(hash)\"}]}",
         "files[0].size: a number must not start with 0 followed by more digits (a leading zero)"),
    ])
    func countsAreZeroOrMore(_ text: String, _ message: String) throws {
        let error = try #require(refusal(text), "taken: \(text)")
        #expect(error.message.contains(message), "\(error.message)")
        #expect(error.message.contains("line 1, column"), "\(error.message)")
    }

    @Test func zeroAndTheLargestCountsAreTaken() throws {
        let m = try Manifest.parse(Array("{\"format\": \"ferry-manifest/1\", \"version\": 0, \"files\": [{\"path\": \"a\", \"size\": 0, \"sha256\": \"\(Self.hash)\"}]}".utf8),
                                   source: "m")
        #expect(m.version == 0 && m.entries[0].size == 0)
        let top = try Manifest.parse(Array("{\"format\": \"ferry-manifest/1\", \"version\": 9007199254740991, \"files\": []}".utf8), source: "m")
        #expect(top.version == Manifest.maximumVersion)
    }

    /// Flat lines (events, control requests, credentials) name why they are not one object.
    @Test func flatLinesSayWhyTheyAreRefused() {
        for (text, message) in [("[1]", "expected one JSON object"), ("{\"a\": 1} x", "unexpected data after the end"),
                                ("{\"a\": 01}", "a leading zero"), ("{\"a\": 1, \"a\": 1}", "given twice")] {
            guard case let .failure(f) = flat(text) else { Issue.record("\(text) taken"); continue }
            #expect(f.message.contains(message), "\(text): \(f.message)")
        }
        #expect(JSONReader.count("0") == 0 && JSONReader.count("42") == 42)
        for text in ["-0", "-1", "+1", "01", "1.0", "", "1e3", " 1"] { #expect(JSONReader.count(text) == nil, "\(text)") }
    }
}

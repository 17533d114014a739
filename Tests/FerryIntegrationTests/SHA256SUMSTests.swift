import Foundation
import Testing

/// SHA256SUMS as people write it: made by the real `sha256sum` (GNU coreutils) over a tree of
/// hostile names — backslashes (which coreutils escapes), spaces at either end, a leading `*`,
/// quotes, `%`, `#`, `?`, `) = ` and non-ASCII — in the GNU form, the `--tag` form and with CRLF
/// line ends, served by nginx.
@Suite(.serialized)
struct SHA256SUMSTests {
    static let names = [
        "plain.txt", "back\\slash.txt", "two\\\\back", "dir with space/a b  c.txt", " leading space", "trailing space ",
        "*star", "-dash", "déjà vu.txt", "日本語/ファイル", "emoji 😀", "quote\"s'", "percent%20.txt", "hash#frag", "question?",
        "semi;colon", "(paren) = x", "SHA256 (fake) = 00", "./dot-start", "bidi\u{202E}txt.exe",
    ]

    /// Publishes the hostile tree and writes its sums with `sha256sum` itself.
    /// With `dotSlash`, names are listed as `find .` gives them (`./name`); without, bare, so a name
    /// starting with `*` or a space meets the separator itself.
    func publish(_ box: Sandbox, sums arguments: [String], into file: String, crlf: Bool = false, dotSlash: Bool = true) throws {
        for (i, name) in Self.names.enumerated() { box.publish(name, "content \(i) of \(name)\n") }
        let list = dotSlash ? "find . -type f ! -name 'SHA256SUMS*' -print0" : "find . -type f ! -name 'SHA256SUMS*' -printf '%P\\0'"
        let command = "cd '\(box.published)' && \(list) | sort -z | xargs -0 sha256sum \(arguments.joined(separator: " ")) -- > '\(file)'"
            + (crlf ? " && sed -i 's/$/\\r/' '\(file)'" : "")
        let run = runProcess("/bin/sh", ["-c", command])
        #expect(run.exitCode == 0, "\(run.output)")
    }

    func expectSameContent(_ box: Sandbox, sourceLocation: SourceLocation = #_sourceLocation) {
        for name in Self.names {
            let expected = fileContents(box.published + "/" + name)
            #expect(expected != nil, sourceLocation: sourceLocation)
            #expect(fileContents(box.localPath(name.hasPrefix("./") ? String(name.dropFirst(2)) : name)) == expected, "\(name)", sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: [([String](), false, true), (["--tag"], false, true), ([], true, true), (["--binary"], false, true),
                      ([], false, false), (["--tag"], false, false), (["--binary"], true, false)])
    func mirrorsATreeOfHostileNames(arguments: [String], crlf: Bool, dotSlash: Bool) throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("sums", published: nginx.root + "/site")
        try publish(box, sums: arguments, into: "SHA256SUMS", crlf: crlf, dotSlash: dotSlash)
        let sums = try String(contentsOfFile: box.published + "/SHA256SUMS", encoding: .utf8)
        #expect(sums.contains("back\\\\slash.txt") && sums.replacingOccurrences(of: "\r", with: "").split(separator: "\n").contains { $0.hasPrefix("\\") }, "coreutils escaped the backslash names:\n\(sums)")
        box.configure(remote: nginx.url + "site/", session: ["manifest = SHA256SUMS"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.events(named: "manifest-fetched").first?["files"] as? Int == Self.names.count)
        expectSameContent(box)
        let again = box.sync()
        #expect(again.exitCode == 0 && again.stdout.contains("nothing to transfer"), "\(again.output)")
    }

    /// A name that decodes to a control character (coreutils writes a newline as `\n`) refuses the
    /// manifest, naming the line; nothing already synced changes.
    @Test func aNameWithANewlineIsRefusedNamingTheLine() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("sums-newline", published: nginx.root + "/site")
        box.publish("a.txt", "a\n")
        let first = runProcess("/bin/sh", ["-c", "cd '\(box.published)' && sha256sum a.txt > SHA256SUMS"])
        #expect(first.exitCode == 0)
        box.configure(remote: nginx.url + "site/", session: ["manifest = SHA256SUMS", "delete = yes"])
        #expect(box.sync().exitCode == 0)
        box.publish("new\nline.txt", "n\n")
        let sums = runProcess("/bin/sh", ["-c", "cd '\(box.published)' && sha256sum a.txt 'new\nline.txt' > SHA256SUMS.new && mv SHA256SUMS.new SHA256SUMS"])
        #expect(sums.exitCode == 0, "\(sums.output)")
        box.markRepublished("SHA256SUMS")
        let run = box.sync()
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.stderr.contains("SHA256SUMS line 2: path \"new\\nline.txt\" is refused: path contains a control character (byte 0xa)"), "\(run.stderr)")
        #expect(fileContents(box.localPath("a.txt")) == "a\n")
    }
}

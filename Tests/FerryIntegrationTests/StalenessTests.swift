import Foundation
import Testing

/// Silent staleness from weak validators (RFC 9110 §8.8.2.2): nginx derives its ETag from the
/// mtime in seconds and the size, and Python's `http.server` sends only a one-second
/// Last-Modified, so a manifest rewritten within the same second as a mirror's fetch, at the same
/// size, looks unchanged to a conditional GET. A Last-Modified that is not a second older than the
/// answer's Date must not make the next fetch conditional.
@Suite(.serialized)
struct StalenessTests {
    /// Sets a published file's mtime to `when` (seconds since 1970).
    func touch(_ path: String, _ when: Int) {
        var times = [timespec(tv_sec: when, tv_nsec: 0), timespec(tv_sec: when, tv_nsec: 0)]
        utimensat(AT_FDCWD, path, &times, 0)
    }

    /// A manifest of one file, `a.txt` holding `text`, at `version` (the same length for the same
    /// length of text and version).
    func manifest(_ text: String, version: Int) -> String {
        "{\"format\": \"ferry-manifest/1\", \"version\": \(version), \"files\": [{\"path\": \"a.txt\", \"size\": \(text.utf8.count), \"sha256\": \"\(sha256(of: Data(text.utf8)).hex)\"}]}\n"
    }

    @Test(arguments: ["nginx", "python"])
    func aManifestRewrittenWithinTheSecondIsNeverMissed(server kind: String) throws {
        let nginx = kind == "nginx" ? try NginxServer() : nil
        defer { nginx?.stop() }
        let box = Sandbox("stale-\(kind)", published: nginx?.root)
        let python = kind == "python" ? try PythonServer(directory: box.published, plain: true) : nil
        defer { python?.stop() }
        let url = nginx?.url ?? python!.url
        // The second the manifest is written in, as a server sees it: later than the answer's Date
        // (a clock a little ahead, or a write in the same second) — either way the validator
        // cannot tell two versions of that second apart.
        let second = Int(time(nil)) + 120
        box.publish("a.txt", "one\n")
        try manifest("one\n", version: 1).writeReplacing(box.published + "/manifest.json")
        touch(box.published + "/manifest.json", second)
        box.configure(remote: url)
        let first = box.sync()
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(fileContents(box.localPath("a.txt")) == "one\n")

        // Rewritten in the same second, at the same size: another file, another manifest.
        let size1 = (try FileManager.default.attributesOfItem(atPath: box.published + "/manifest.json")[.size] as? Int) ?? -1
        try "two\n".writeReplacing(box.published + "/a.txt")
        try manifest("two\n", version: 2).writeReplacing(box.published + "/manifest.json")
        touch(box.published + "/manifest.json", second)
        let size2 = (try FileManager.default.attributesOfItem(atPath: box.published + "/manifest.json")[.size] as? Int) ?? -2
        #expect(size1 == size2, "the same size, so the same nginx ETag")
        let second_ = box.sync()
        #expect(second_.exitCode == 0, "\(second_.output)")
        #expect(fileContents(box.localPath("a.txt")) == "two\n", "the new manifest was applied: \(second_.output)")
        #expect(second_.output.contains("version 2"), "\(second_.output)")
    }
}

import Foundation
import Testing

/// A bad manifest never wipes a mirror: an empty body is invalid, a manifest with no entries is
/// refused for a mirror that holds files, deletions are capped by `max-delete` (a count or a
/// percentage, 50% by default), and an oversized manifest is refused before it fills memory.
@Suite(.serialized)
struct ManifestSafetyTests {
    /// A mirror of ten files over nginx, synced, with deletions on.
    static func mirror(_ label: String, session: [String] = ["delete = yes"]) throws -> SyncedMirror {
        var files: [String: String] = [:]
        for i in 0..<10 { files["dir\(i % 3)/f\(i).txt"] = "file \(i)\n" }
        return try SyncedMirror(label, session: session, files: files)
    }

    @Test(arguments: ["", "   \n\n\t\r\n"])
    func anEmptyManifestBodyIsInvalid(body: String) throws {
        let w = try Self.mirror("empty-body")
        try w.box.writeManifest(body)
        let run = w.box.sync()
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.stderr.contains("manifest.json is empty"), "\(run.stderr)")
        #expect(run.stderr.contains("nothing was changed"))
        #expect(treeSnapshot(w.box.local) == w.before, "nothing already synced was lost")
        #expect(w.box.status(["--json"]).stdout.contains("\"last_exit_code\":4"))
    }

    /// A failed `sha256sum > SHA256SUMS` leaves an empty file: refused like any empty manifest.
    @Test func anEmptySHA256SUMSIsInvalid() throws {
        let w = try Self.mirror("empty-sums")
        try "".writeReplacing(w.box.published + "/SHA256SUMS")
        w.configure(session: ["delete = yes", "manifest = SHA256SUMS"])
        let run = w.box.sync()
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.stderr.contains("SHA256SUMS is empty (0 bytes)"), "\(run.stderr)")
        #expect(treeSnapshot(w.box.local) == w.before)
    }

    /// `"files": []` with a higher version is refused for a mirror that holds files, unless the
    /// session allows it; even then `max-delete` caps what goes.
    @Test func aManifestWithNoEntriesNeedsAllowEmpty() throws {
        let w = try Self.mirror("no-entries")
        // A version above the one `manifest build` gave (the Unix time).
        try w.box.writeManifest("{\"format\": \"ferry-manifest/1\", \"version\": 9000000000099, \"files\": []}")
        let refused = w.box.sync()
        #expect(refused.exitCode == 4, "\(refused.output)")
        #expect(refused.stderr.contains("lists no files, and the mirror holds 10"), "\(refused.stderr)")
        #expect(refused.stderr.contains("allow-empty = yes"))
        #expect(treeSnapshot(w.box.local) == w.before)
        #expect(!w.box.status(["--json"]).stdout.contains("\"manifest_version\":9000000000099"), "a refused manifest is not recorded")
        let cached = try FileManager.default.contentsOfDirectory(atPath: w.box.state + "/manifests").filter { !$0.hasSuffix(".objects") }
        #expect(cached.count == 1 && cached[0].hasSuffix(".manifest"), "the refused manifest's staged copy is gone: \(cached)")
        let kept = try String(contentsOfFile: w.box.state + "/manifests/" + cached[0], encoding: .utf8)
        #expect(!kept.contains("\"version\": 9000000000099"), "the accepted manifest stays cached")

        w.configure(session: ["delete = yes", "allow-empty = yes"])
        let capped = w.box.sync()
        #expect(capped.exitCode == 1, "\(capped.output)")
        #expect(capped.output.contains("refused to delete 10 files: more than max-delete = 50%"), "\(capped.output)")
        #expect(treeSnapshot(w.box.local) == w.before)

        w.configure(session: ["delete = yes", "allow-empty = yes", "max-delete = 100%"])
        let emptied = w.box.sync()
        #expect(emptied.exitCode == 0, "\(emptied.output)")
        #expect(treeSnapshot(w.box.local).isEmpty, "the session allowed it: the mirror follows the remote")
    }

    /// Over the default cap (50% of the files the session manages) a run deletes nothing, still
    /// completes its transfers, names the count and the key, and exits 1.
    @Test func theDefaultCapIsAPercentage() throws {
        let w = try Self.mirror("percent")
        for i in 0..<6 { w.box.unpublish("dir\(i % 3)/f\(i).txt") }
        w.box.publish("arrives.txt", "new\n")
        w.box.buildManifest()
        let run = w.box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.output.contains("refused to delete 6 files: more than max-delete = 50% allows (5 of the 10 files in \(w.box.local))"), "\(run.output)")
        #expect(run.output.contains("raise max-delete for session 'test'"))
        #expect(fileContents(w.box.localPath("arrives.txt")) == "new\n", "transfers complete")
        for i in 0..<6 { #expect(FileManager.default.fileExists(atPath: w.box.localPath("dir\(i % 3)/f\(i).txt"))) }

        w.configure(session: ["delete = yes", "max-delete = 60%"])
        let allowed = w.box.sync()
        #expect(allowed.exitCode == 0, "\(allowed.output)")
        expectIdentical(w.box.published, w.box.local)
    }

    @Test func aCountCapsToo() throws {
        let w = try Self.mirror("count", session: ["delete = yes", "max-delete = 2"])
        for i in 0..<3 { w.box.unpublish("dir\(i % 3)/f\(i).txt") }
        w.box.buildManifest()
        let run = w.box.sync()
        #expect(run.exitCode == 1)
        #expect(run.output.contains("refused to delete 3 files: more than max-delete = 2 allows"), "\(run.output)")
        #expect(treeSnapshot(w.box.local) == w.before)
    }

    /// The first sync into a directory that already holds unrelated files is covered by the cap,
    /// however many files the manifest adds (they do not dilute the percentage).
    @Test func theFirstSyncIntoADirectoryOfUnrelatedFiles() throws {
        let nginx = try NginxServer()
        defer { nginx.stop() }
        let box = Sandbox("unrelated", published: nginx.root + "/site")
        box.publish("site/index.html", "<html>\n")
        for i in 0..<20 { box.publish("site/page\(i).html", "page \(i)\n") }
        box.buildManifest()
        try FileManager.default.createDirectory(atPath: box.localPath("notes"), withIntermediateDirectories: true)
        for i in 0..<5 { try "mine \(i)\n".writeReplacing(box.localPath("notes/\(i).txt")) }
        box.configure(remote: nginx.url + "site/", session: ["delete = yes"])
        let run = box.sync()
        #expect(run.exitCode == 1, "\(run.output)")
        #expect(run.output.contains("refused to delete 5 files"), "\(run.output)")
        for i in 0..<5 { #expect(fileContents(box.localPath("notes/\(i).txt")) == "mine \(i)\n") }
        #expect(fileContents(box.localPath("site/index.html")) == "<html>\n")
    }

    /// A manifest announced larger than `max-manifest-size` is refused before its body is read:
    /// a 2 GB body costs neither time nor memory.
    @Test func anOversizedManifestIsRefusedAtOnce() throws {
        let w = try Self.mirror("huge-manifest")
        let path = w.box.published + "/manifest.json"
        #expect(truncate(path, 2_000_000_000) == 0)
        let (run0, peak) = ferryWithPeakRSS(["sync", "now", "--config", w.box.config])
        #expect(run0.exitCode == 4, "\(run0.output)")
        #expect(run0.stderr.contains("is larger than max-manifest-size = 256.0 MiB (1.86 GiB): refused without reading it"), "\(run0.stderr)")
        #expect(peak > 0 && peak < 48 * 1024, "peak RSS \(peak) KiB")
        #expect(treeSnapshot(w.box.local) == w.before)

        // The same over file://, with the cap set lower.
        let box = Sandbox("huge-file-manifest")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        #expect(truncate(box.published + "/manifest.json", 5_000_000) == 0)
        box.configure(remote: "file://" + box.published, session: ["max-manifest-size = 1M"])
        let run = box.sync()
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.stderr.contains("is larger than max-manifest-size = 1.00 MiB (4.77 MiB)"), "\(run.stderr)")
    }

    /// A manifest repeating one path 500,000 times is refused at the second one, without building
    /// half a million entries.
    @Test func aRepeatedPathStopsTheParseAtOnce() throws {
        let w = try Self.mirror("repeated")
        let hash = String(repeating: "a", count: 64)
        let one = "{\"path\": \"x\", \"size\": 1, \"sha256\": \"\(hash)\"}"
        try w.box.writeManifest("{\"format\": \"ferry-manifest/1\", \"version\": 50, \"files\": [" + Array(repeating: one, count: 500_000).joined(separator: ",") + "]}")
        let (run, peak) = ferryWithPeakRSS(["sync", "now", "--config", w.box.config])
        #expect(run.exitCode == 4, "\(run.output)")
        #expect(run.stderr.contains("lists \"x\" twice"), "\(run.stderr)")
        #expect(run.stderr.utf8.count < 2000, "one short message: \(run.stderr.utf8.count) bytes")
        // The body (37 MB) is held once, in one allocation; parsed entries would add over 60 MB more.
        #expect(peak > 0 && peak < 90 * 1024, "peak RSS \(peak) KiB")
        #expect(treeSnapshot(w.box.local) == w.before)
    }
}

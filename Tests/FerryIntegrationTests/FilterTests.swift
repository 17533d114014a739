import Foundation
import Testing

/// `exclude =` and `include =` (issue 22 §3): gitignore-style globs that keep paths out of a
/// session. Pull neither downloads nor deletes them (a matching local file is protected), push
/// neither uploads nor lists them, `manifest build --exclude` leaves them out.
@Suite(.serialized)
struct FilterTests {
    func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

    func write(_ path: String, _ text: String) {
        try! FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try! text.writeReplacing(path)
    }

    @Test(arguments: ["in-place", "generations"])
    func aPullLeavesExcludedPathsAloneBothWays(layout: String) throws {
        let box = Sandbox("filter-pull-\(layout)")
        for (path, text) in [("a.txt", "alpha\n"), ("b.tmp", "scratch\n"), (".git/config", "[core]\n"), ("logs/2026/x.gz", "gz\n"),
                             ("logs/keep.txt", "kept\n"), ("other/logs/y.gz", "not anchored there\n")] {
            box.publish(path, text)
        }
        box.buildManifest()
        box.configure(remote: "file://" + box.published,
                      session: ["delete = yes", "layout = \(layout)", "exclude = *.tmp .git/ logs/**/*.gz"])
        // What the machine has of its own under the mirror before the first run.
        let own = ["mine.tmp": "my notes\n", ".git/HEAD": "ref: refs/heads/main\n", "logs/2025/old.gz": "mine\n"]
        if layout == "in-place" { for (p, t) in own { write(box.localPath(p), t) } }
        let first = box.sync(["--json"])
        #expect(first.exitCode == 0, "\(first.output)")
        if layout == "generations" {
            // The machine's own files arrive after the first generation, inside it.
            for (p, t) in own { write(box.localPath(p), t) }
        }
        #expect(fileContents(box.localPath("a.txt")) == "alpha\n" && fileContents(box.localPath("logs/keep.txt")) == "kept\n")
        #expect(fileContents(box.localPath("other/logs/y.gz")) == "not anchored there\n")
        for p in ["b.tmp", ".git/config", "logs/2026/x.gz"] { #expect(!exists(box.localPath(p)), "\(p) is excluded, so never fetched") }
        // The remote drops a.txt and adds c.txt: a.txt goes, the machine's excluded files stay.
        box.unpublish("a.txt")
        box.publish("c.txt", "charlie\n")
        box.buildManifest()
        let second = box.sync(["--json"])
        #expect(second.exitCode == 0, "\(second.output)")
        #expect(!exists(box.localPath("a.txt")) && fileContents(box.localPath("c.txt")) == "charlie\n")
        for (p, t) in own { #expect(fileContents(box.localPath(p)) == t, "\(p) matches exclude, so it is protected") }
        if layout == "in-place" { #expect(second.events(named: "file-deleted").count == 1, "\(second.output)") }
        // check agrees: excluded files are neither missing nor extra.
        let check = ferry(["check", "--config", box.config, "--json"])
        #expect(check.exitCode == 0, "\(check.output)")
        // Without the patterns the same mirror would lose them: the filter is what protected them.
        box.configure(remote: "file://" + box.published, session: ["delete = yes", "layout = \(layout)", "max-delete = 100%"])
        let dry = box.sync(["-n", "--json"])
        let deleting = Set(dry.events(named: "plan-item").filter { $0["action"] as? String == "delete" }.compactMap { $0["path"] as? String })
        #expect(deleting == Set(own.keys), "\(dry.output)")
    }

    @Test func includeFetchesOnlyWhatItNames() throws {
        let box = Sandbox("filter-include")
        for (path, text) in [("images/debian.iso", "iso\n"), ("images/debian.iso.tmp", "partial\n"), ("docs/guide/index.html", "<p>\n"),
                             ("readme.txt", "read me\n")] {
            box.publish(path, text)
        }
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["include = *.iso docs/", "exclude = *.tmp", "delete = yes"])
        write(box.localPath("local-only.txt"), "mine\n")
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(Set(treeSnapshot(box.local).keys) == ["images/debian.iso", "docs/guide/index.html", "local-only.txt"], "\(treeSnapshot(box.local).keys)")
        // A bad pattern is a config error naming the line.
        box.configure(remote: "file://" + box.published, session: ["exclude = [oops"])
        let bad = ferry(["config", "check", "--config", box.config])
        #expect(bad.exitCode == 2 && bad.stderr.contains("key 'exclude': '[oops' is not a pattern: a '[' has no closing ']'"), "\(bad.output)")
    }

    @Test func aPushNeitherUploadsNorListsExcludedFiles() throws {
        let box = Sandbox("filter-push")
        let src = box.directory + "/src", remote = box.directory + "/remote"
        try FileManager.default.createDirectory(atPath: remote, withIntermediateDirectories: true)
        for (p, t) in [("a.txt", "alpha\n"), ("x.tmp", "scratch\n"), (".git/HEAD", "ref\n"), ("build/out.o", "obj\n")] { write(src + "/" + p, t) }
        func configure(_ exclude: String?) throws {
            try """
                [agent]
                state = \(box.state)
                [session up]
                direction = push
                remote = file://\(remote)/
                local = \(src)
                delete = yes
                \(exclude.map { "exclude = " + $0 } ?? "")
                [session down]
                remote = file://\(remote)/
                local = \(box.local)
                delete = yes
                """.writeReplacing(box.config)
        }
        // First without patterns: everything goes up.
        try configure(nil)
        #expect(ferry(["sync", "now", "--config", box.config, "--session", "up"]).exitCode == 0)
        #expect(exists(remote + "/x.tmp") && exists(remote + "/.git/HEAD"))
        // With them: the manifest no longer lists x.tmp, .git/ or build/, the remote keeps their
        // bytes (never deleted), and a new excluded file is never uploaded.
        write(src + "/y.tmp", "more scratch\n")
        try configure("*.tmp .git/ /build")
        let push = ferry(["sync", "now", "--config", box.config, "--session", "up", "--json"])
        #expect(push.exitCode == 0, "\(push.output)")
        #expect(!exists(remote + "/y.tmp"), "an excluded file is never uploaded")
        #expect(exists(remote + "/x.tmp") && exists(remote + "/.git/HEAD") && exists(remote + "/build/out.o"), "nor deleted on the remote")
        #expect(push.events(named: "file-done").isEmpty, "\(push.output)")
        let pull = ferry(["sync", "now", "--config", box.config, "--session", "down"])
        #expect(pull.exitCode == 0, "\(pull.output)")
        #expect(Set(treeSnapshot(box.local).keys) == ["a.txt"], "what a mirror of the remote gets: \(treeSnapshot(box.local).keys)")
        // Nothing changes on the next run: the unlisting happened once.
        let published = fileContents(remote + "/manifest.json")
        let again = ferry(["sync", "now", "--config", box.config, "--session", "up", "--json"])
        #expect(again.exitCode == 0 && fileContents(remote + "/manifest.json") == published, "\(again.output)")
    }

    @Test func manifestBuildExcludeLeavesPathsOut() throws {
        let box = Sandbox("filter-build")
        for (p, t) in [("a.txt", "alpha\n"), ("x.tmp", "scratch\n"), (".git/HEAD", "ref\n"), ("logs/a/b.gz", "gz\n"), ("logs/c.txt", "c\n")] {
            box.publish(p, t)
        }
        let run = ferry(["manifest", "build", box.published, "--format", "1", "--exclude", "*.tmp", "--exclude", ".git/",
                         "--exclude=logs/**/*.gz", "--json"])
        #expect(run.exitCode == 0 && run.events(named: "manifest-built").first?["files"] as? Int == 2, "\(run.output)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: box.published + "/manifest.json"))) as? [String: Any])
        let paths = ((json["files"] as? [[String: Any]]) ?? []).compactMap { $0["path"] as? String }
        #expect(paths == ["a.txt", "logs/c.txt"], "\(paths)")
        let bad = ferry(["manifest", "build", box.published, "--exclude", "!x"])
        #expect(bad.exitCode == 2 && bad.stderr.contains("negation is not supported"), "\(bad.output)")
    }
}

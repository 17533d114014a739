import Foundation
import Testing
@testable import FerryCore
import FerryRuntime

/// `exclude =` / `include =` (issue 22 §3): gitignore's globs, and what a plan does with them.
struct PathFilterTests {
    func p(_ s: String) -> RelativePath { RelativePath(trusted: s) }

    func excluding(_ patterns: String...) throws -> PathFilter { try PathFilter(exclude: patterns) }

    @Test func globsMatchAsGitignoreDoes() throws {
        let cases: [(pattern: String, path: String, directory: Bool, excluded: Bool)] = [
            // No slash: a name at any depth.
            ("*.tmp", "a.tmp", false, true),
            ("*.tmp", "deep/er/b.tmp", false, true),
            ("*.tmp", "a.tmpx", false, false),
            ("*.tmp", "x.tmp/inside.txt", false, true),       // its directory matches
            ("core", "src/core", false, true),
            ("core", "src/core/file.c", false, true),
            // A trailing slash: directories only.
            (".git/", ".git/config", false, true),
            (".git/", "sub/.git/HEAD", false, true),
            (".git/", ".git", false, false),                  // a file named .git is not a directory
            (".git/", ".git", true, true),
            // A slash inside: anchored at the root.
            ("logs/**/*.gz", "logs/a.gz", false, true),
            ("logs/**/*.gz", "logs/2026/11/a.gz", false, true),
            ("logs/**/*.gz", "old/logs/a.gz", false, false),
            ("logs/**/*.gz", "logs/a.gzip", false, false),
            ("/build", "build/out.o", false, true),
            ("/build", "src/build/out.o", false, false),
            ("doc/*.txt", "doc/a.txt", false, true),
            ("doc/*.txt", "doc/sub/a.txt", false, false),     // * stays within a segment
            ("**/cache", "a/b/cache/x", false, true),
            ("a/**", "a/b/c", false, true),
            ("a/**", "ab/c", false, false),
            // ?, classes, escapes, non-ASCII.
            ("file?.txt", "file1.txt", false, true),
            ("file?.txt", "file10.txt", false, false),
            ("file?.txt", "fileé.txt", false, true),          // one character, two bytes
            ("[abc]*.log", "b-1.log", false, true),
            ("[!abc]*.log", "b-1.log", false, false),
            ("[0-9][0-9].dat", "42.dat", false, true),
            ("[0-9][0-9].dat", "4x.dat", false, false),
            ("\\*.txt", "*.txt", false, true),
            ("\\*.txt", "a.txt", false, false),
            ("with\\ space", "dir/with space", false, true),
            ("é*", "été.txt", false, true),
        ]
        for c in cases {
            let filter = try excluding(c.pattern)
            #expect(filter.admits(p(c.path), isDirectory: c.directory) == !c.excluded,
                    "\(c.pattern) on \(c.path)\(c.directory ? "/" : ""): expected \(c.excluded ? "excluded" : "admitted")")
        }
    }

    @Test func includeKeepsOnlyWhatItNamesAndExcludeWins() throws {
        let filter = try PathFilter(exclude: ["*.tmp"], include: ["*.iso", "docs/"])
        #expect(filter.admits(p("images/debian.iso")))
        #expect(filter.admits(p("docs/guide/index.html")))
        #expect(!filter.admits(p("readme.txt")))
        #expect(!filter.admits(p("docs/draft.tmp")), "exclude wins over include")
        #expect(filter.admits(p("images"), isDirectory: true), "directories are judged by exclude alone")
        #expect(!filter.admits(p("x.tmp"), isDirectory: true))
        #expect(PathFilter().admits(p("anything")))
    }

    @Test func badPatternsAreRefusedWithTheReason() {
        for (bad, reason) in [("!keep.txt", "negation"), ("[abc", "no closing"), ("a//b", "empty segment"), ("/", "names no path"),
                              ("[z-a]", "backwards"), ("end\\", "lone")] {
            #expect(throws: PathFilter.PatternProblem.self, "\(bad)") { try PathFilter(exclude: [bad]) }
            do { _ = try PathFilter(exclude: [bad]) } catch { #expect(error.description.contains(reason), "\(bad): \(error.description)") }
        }
        #expect(PathFilter.words("*.tmp  .git/\tlogs/**/*.gz a\\ b") == ["*.tmp", ".git/", "logs/**/*.gz", "a\\ b"])
    }

    @Test func configKeysAndBadOnesNameTheLine() throws {
        let text = """
            [session s]
            remote = https://example.net/
            local = /srv/s
            exclude = *.tmp .git/ logs/**/*.gz
            include = *.iso
            """
        let config = try ConfigParser.parse(text, path: "/etc/ferry/ferry.conf")
        let filter = config.sessions[0].filter
        #expect(filter.excludes.map(\.text) == ["*.tmp", ".git/", "logs/**/*.gz"])
        #expect(filter.includes.map(\.text) == ["*.iso"])
        do {
            _ = try ConfigParser.parse(text.replacingOccurrences(of: "include = *.iso", with: "include = ok [broken"), path: "/etc/ferry/ferry.conf")
            Issue.record("a broken pattern was taken")
        } catch {
            #expect(error.message.contains("ferry.conf:5:") && error.message.contains("'[broken' is not a pattern"), "\(error.message)")
        }
    }

    // MARK: plans

    let h1 = SHA256Digest(hex: String(repeating: "1", count: 64))!
    func file(_ size: Int64 = 5) -> LocalEntry {
        LocalEntry(kind: .file, size: size, mtime: Timestamp(seconds: 100), ctime: Timestamp(seconds: 100), inode: 1, mode: 0o644)
    }
    func dir() -> LocalEntry { LocalEntry(kind: .directory, size: 0, mtime: Timestamp(seconds: 0), ctime: Timestamp(seconds: 0), inode: 9, mode: 0o755) }
    func manifest(_ paths: [String]) -> Manifest {
        Manifest(format: .ferry, version: 1, generated: nil, expires: nil, entries: paths.map { ManifestEntry(path: p($0), size: 5, sha256: h1) })
    }

    @Test func aPullPlanNeitherFetchesNorDeletesWhatIsExcluded() throws {
        let filter = try excluding("*.tmp", ".git/")
        let local: [RelativePath: LocalEntry] = [
            p("keep.tmp"): file(), p(".git"): dir(), p(".git/HEAD"): file(), p("old.txt"): file(), p("sub"): dir(), p("sub/x.tmp"): file(),
        ]
        let plan = Reconciler.plan(manifest: manifest(["a.txt", "b.tmp", ".git/config"]), local: local, known: [:],
                                   rules: DeletionRules(delete: true, cap: .percent(100)), filter: filter)
        #expect(plan.downloads.map(\.entry.path) == [p("a.txt")])
        #expect(plan.deletions == [p("old.txt")], "excluded local files are protected")
        #expect(plan.directoryRemovals == [p("sub")], "removed only if empty, which x.tmp keeps it from being")
        #expect(plan.localFiles == 1, "the files the session manages leave out the excluded ones (max-delete counts these)")
        // Without the filter the same plan fetches b.tmp and .git/config and deletes keep.tmp and the rest.
        let unfiltered = Reconciler.plan(manifest: manifest(["a.txt", "b.tmp", ".git/config"]), local: local, known: [:],
                                         rules: DeletionRules(delete: true, cap: .percent(100)))
        #expect(unfiltered.downloads.count == 3 && unfiltered.deletions.count == 4)
    }

    @Test func aDirectoryInTheWayThatHoldsExcludedFilesIsNotRemoved() throws {
        let local: [RelativePath: LocalEntry] = [p("report"): dir(), p("report/notes.tmp"): file(), p("report/old.txt"): file()]
        let plan = Reconciler.plan(manifest: manifest(["report"]), local: local, known: [:],
                                   rules: DeletionRules(delete: true, cap: .percent(100)), filter: try excluding("*.tmp"))
        #expect(plan.downloads.isEmpty && plan.directoriesToReplace.isEmpty)
        #expect(plan.blocked.map(\.path) == [p("report")] && plan.blocked.first?.reason == .directoryHoldsExcluded(files: 1))
    }
}

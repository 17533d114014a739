import Foundation
import Testing

/// Delayed tasks (`--not-before`, `earliest-begin`): recorded and not begun before their time;
/// when due, revalidated against the newest manifest: continue, replace or cancel.
@Suite(.serialized)
struct DelayedTaskTests {
    func delayedWorld(_ label: String) -> Sandbox {
        let box = Sandbox(label)
        box.publish("stay.txt", "unchanged\n")
        box.publish("change.txt", "old content\n")
        box.publish("vanish.txt", "going away\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        return box
    }

    /// Waits for the time the tasks were delayed to, as the task table records it.
    func waitUntilDue(_ box: Sandbox) { box.waitUntilDelayedTasksAreDue() }

    @Test func notBeforeDelaysThenEachDueTaskIsRevalidated() throws {
        let box = delayedWorld("delayed")
        let first = box.sync(["--not-before", "1s", "--json"])
        #expect(first.exitCode == 3, "\(first.output)")
        #expect(first.events(named: "file-delayed").count == 3)
        #expect(first.events(named: "file-done").isEmpty, "nothing begins before its time")
        #expect(box.status().stdout.contains("delayed until"))

        // Before the time: still nothing.
        let early = box.sync(["--json"])
        #expect(early.exitCode == 3)
        #expect(early.events(named: "file-done").isEmpty)

        // The remote moves on meanwhile: one file changes, one goes away.
        box.publish("change.txt", "new content, other size\n")
        box.unpublish("vanish.txt")
        box.buildManifest()
        waitUntilDue(box)
        let due = box.sync(["--json"])
        #expect(due.exitCode == 0, "\(due.output)")
        let dispositions = Dictionary(uniqueKeysWithValues: due.events(named: "delayed-due").compactMap { e -> (String, String)? in
            guard let p = e["path"] as? String, let d = e["disposition"] as? String else { return nil }
            return (p, d)
        })
        #expect(dispositions == ["stay.txt": "continue", "change.txt": "replace", "vanish.txt": "cancel"], "\(dispositions)")
        #expect(fileContents(box.localPath("stay.txt")) == "unchanged\n")
        #expect(fileContents(box.localPath("change.txt")) == "new content, other size\n")
        #expect(!FileManager.default.fileExists(atPath: box.localPath("vanish.txt")))
        #expect(!box.status(["--json", "--files"]).stdout.contains("vanish.txt"), "the cancelled task is gone")
    }

    @Test func earliestBeginDelaysNewFilesOnly() throws {
        let box = Sandbox("earliest")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        #expect(box.sync().exitCode == 0)
        box.publish("b.txt", "b\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["earliest-begin = 1s"])
        let run = box.sync(["--json"])
        #expect(run.exitCode == 3)
        #expect(run.events(named: "file-delayed").compactMap { $0["path"] as? String } == ["b.txt"])
        waitUntilDue(box)
        let later = box.sync(["--json"])
        #expect(later.exitCode == 0, "\(later.output)")
        #expect(later.events(named: "delayed-due").first?["disposition"] as? String == "continue")
        #expect(fileContents(box.localPath("b.txt")) == "b\n")
    }

    @Test func refusesABadNotBefore() {
        let box = Sandbox("badnotbefore")
        box.configure(remote: "file://" + box.published)
        let run = box.sync(["--not-before", "tomorrow-ish"])
        #expect(run.exitCode == 2)
        #expect(run.stderr.contains("--not-before wants a duration"))
    }
}

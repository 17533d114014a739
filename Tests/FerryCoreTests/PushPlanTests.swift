import Testing
@testable import FerryCore
import FerryRuntime

/// The push planner: the local tree against the manifest ferry last published on the remote.
struct PushPlanTests {
    let h1 = SHA256Digest(hex: String(repeating: "1", count: 64))!
    let h2 = SHA256Digest(hex: String(repeating: "2", count: 64))!

    func p(_ s: String) -> RelativePath { RelativePath(trusted: s) }

    func entry(_ path: String, _ hash: SHA256Digest, size: Int64 = 5, mtime: Int64 = 100, mode: UInt32 = 0o644) -> ManifestEntry {
        ManifestEntry(path: p(path), size: size, sha256: hash, mtime: Timestamp(seconds: mtime), mode: mode)
    }

    func published(_ entries: [ManifestEntry], version: Int64 = 7) -> Manifest {
        Manifest(format: .ferry, version: version, generated: nil, expires: nil, entries: entries)
    }

    let deleteAll = DeletionRules(delete: true, cap: .percent(100))
    let keepAll = DeletionRules(delete: false, cap: .percent(100))

    @Test func aFirstPushUploadsEverything() {
        let plan = PushPlanner.plan(local: [entry("b.txt", h1), entry("a/x.txt", h2)], remote: nil, rules: deleteAll)
        #expect(plan.uploads.map(\.entry.path) == [p("a/x.txt"), p("b.txt")], "in path order")
        #expect(plan.uploads.allSatisfy { $0.reason == .new })
        #expect(plan.manifest.map(\.path) == [p("a/x.txt"), p("b.txt")])
        #expect(plan.uploadBytes == 10)
    }

    @Test func decidesEachPathOnce() {
        let remote = published([
            entry("same.txt", h1), entry("edited.txt", h1), entry("resized.txt", h1, size: 9), entry("chmod.txt", h1, mode: 0o600),
            entry("touched.txt", h1, mtime: 50), entry("gone.txt", h1),
        ])
        let local = [
            entry("same.txt", h1), entry("edited.txt", h2), entry("resized.txt", h1), entry("chmod.txt", h1),
            entry("touched.txt", h1), entry("new.txt", h2),
        ]
        let plan = PushPlanner.plan(local: local, remote: remote, rules: deleteAll)
        #expect(plan.uploads.map { "\($0.entry.path):\($0.reason.rawValue)" } == ["edited.txt:changed", "new.txt:new", "resized.txt:changed"])
        #expect(plan.upToDate == 1 && plan.metadataChanges == 2)
        #expect(plan.deletions == [p("gone.txt")])
        #expect(plan.manifest == local.sorted { $0.path < $1.path }, "the manifest says exactly the local tree")
        #expect(!plan.isEmpty)
    }

    @Test func anUnchangedTreeIsEmptyAndPublishesNothing() {
        let local = [entry("a", h1), entry("d/b", h2)]
        let plan = PushPlanner.plan(local: local, remote: published(local), rules: deleteAll)
        #expect(plan.isEmpty)
        #expect(plan.upToDate == 2)
    }

    @Test func withoutDeleteExtrasStayOnTheRemoteAndInTheManifest() {
        let plan = PushPlanner.plan(local: [entry("a", h1)], remote: published([entry("a", h1), entry("old", h2)]), rules: keepAll)
        #expect(plan.deletions.isEmpty && plan.extrasKept == 1)
        #expect(plan.manifest.map(\.path) == [p("a"), p("old")], "a pull of the remote still gets what it holds")
        #expect(plan.isEmpty, "nothing to send and nothing new to say")
    }

    @Test func maxDeleteRefusesAnEmptiedTreeAndKeepsListingWhatStays() {
        let remote = published((0..<10).map { entry("f\($0)", h1) })
        let plan = PushPlanner.plan(local: [entry("f0", h1)], remote: remote, rules: DeletionRules(delete: true, cap: .percent(50)))
        #expect(plan.deletions.isEmpty)
        #expect(plan.refusedDeletions == Plan.RefusedDeletions(count: 9, managed: 10, limit: 5, paths: (1..<10).map { p("f\($0)") }))
        #expect(plan.manifest.count == 10, "refused deletions stay listed: they are still on the remote")
    }

    /// The local tree is the authority over the paths it holds: a path that changed type replaces
    /// what the remote has there, whatever delete and max-delete say.
    @Test func aPathThatChangedTypeReplacesTheRemoteOne() {
        let remote = published([entry("a", h1), entry("b/x", h1), entry("b/y", h1), entry("c", h1)])
        let local = [entry("a/inside", h2), entry("b", h2), entry("c", h1)]
        let plan = PushPlanner.plan(local: local, remote: remote, rules: DeletionRules(delete: false, cap: .count(0)))
        #expect(plan.replacements == [p("a"), p("b/x"), p("b/y")])
        #expect(plan.uploads.map(\.entry.path) == [p("a/inside"), p("b")])
        #expect(plan.deletions.isEmpty && plan.extrasKept == 0 && plan.refusedDeletions == nil)
        #expect(plan.manifest.map(\.path) == [p("a/inside"), p("b"), p("c")])
    }

    @Test func aSHA256SUMSRemoteWithoutSizesComparesByHash() {
        let remote = Manifest(format: .sha256sums, version: nil, generated: nil, expires: nil,
                              entries: [ManifestEntry(path: p("a"), size: nil, sha256: h1)])
        let plan = PushPlanner.plan(local: [entry("a", h1, mtime: 0, mode: 0o644)], remote: remote, rules: deleteAll)
        #expect(plan.uploads.isEmpty)
        #expect(plan.metadataChanges == 1, "the new manifest adds size, mtime and mode")
    }

    @Test func changedOnRemoteNamesWhatSomeoneElseAddedChangedOrRemoved() {
        let mine = published([entry("same", h1), entry("edited", h1), entry("removed", h1)])
        let now = published([entry("same", h1, mtime: 999), entry("edited", h2), entry("added", h1)])
        #expect(ConflictPolicy.changedOnRemote(published: mine, now: now) == [p("added"), p("edited"), p("removed")],
                "a new mtime alone is no conflict; content is")
        #expect(ConflictPolicy.changedOnRemote(published: mine, now: nil) == [p("edited"), p("removed"), p("same")], "a manifest gone: all of it")
        #expect(ConflictPolicy.changedOnRemote(published: mine, now: mine).isEmpty)
    }

    /// remote-wins: the remote's version of a conflicting path is neither replaced nor deleted,
    /// and the manifest lists it as the remote does; the rest of the local tree goes as usual.
    @Test func keepingRemotePathsLeavesThemAsTheRemoteHasThem() {
        let remote = published([entry("theirs", h2), entry("added-there", h2), entry("mine", h1)])
        let local = [entry("theirs", h1), entry("mine", h2), entry("new", h1)]
        let plan = PushPlanner.plan(local: local, remote: remote, rules: deleteAll, keepingRemote: [p("theirs"), p("added-there")])
        #expect(plan.uploads.map(\.entry.path) == [p("mine"), p("new")])
        #expect(plan.deletions.isEmpty, "added-there is theirs: kept, not deleted")
        #expect(plan.manifest.map { "\($0.path):\($0.sha256 == h1 ? 1 : 2)" } == ["added-there:2", "mine:2", "new:1", "theirs:2"])
    }

    /// `conflict` decides about another writer's entries ("theirs"), a file edited in place on the
    /// remote ("edited") and one that is both ("both"): each policy once, as sets the plan takes.
    @Test(arguments: [
        (ConflictPolicy.fail, ConflictResolution(conflicts: ["both", "edited", "theirs"].map(RelativePath.init(trusted:)), refused: true)),
        (.localWins, ConflictResolution(conflicts: ["both", "edited", "theirs"].map(RelativePath.init(trusted:)),
                                        repairing: Set(["both", "edited"].map(RelativePath.init(trusted:))))),
        (.remoteWins, ConflictResolution(conflicts: ["both", "edited", "theirs"].map(RelativePath.init(trusted:)),
                                         keepingRemote: Set(["both", "theirs"].map(RelativePath.init(trusted:))),
                                         unlisting: [RelativePath(trusted: "edited")])),
    ])
    func theConflictPolicyDecidesWhatThePlanKeepsSendsAndUnlists(policy: ConflictPolicy, expected: ConflictResolution) {
        let resolution = PushPlanner.resolve(policy, changedByAnotherWriter: [p("theirs"), p("both")], editedOnRemote: [p("edited"), p("both")])
        #expect(resolution == expected)
    }

    @Test(arguments: [ConflictPolicy.fail, .localWins, .remoteWins])
    func withoutAConflictNoPolicyChangesThePlan(policy: ConflictPolicy) {
        let resolution = PushPlanner.resolve(policy, changedByAnotherWriter: [], editedOnRemote: [])
        #expect(resolution == ConflictResolution() && !resolution.refused)
    }

    /// The decision as the plan applies it: a file edited in place on the remote is sent again
    /// (local-wins) though the manifest lists the local bytes, or stays there unlisted (remote-wins).
    @Test func anEditedFileIsSentAgainOrLeftUnlisted() {
        let remote = published([entry("edited", h1), entry("kept", h1)])
        let local = [entry("edited", h1), entry("kept", h1)]
        let localWins = PushPlanner.resolve(.localWins, changedByAnotherWriter: [], editedOnRemote: [p("edited")])
        let sending = PushPlanner.plan(local: local, remote: remote, rules: deleteAll, keepingRemote: localWins.keepingRemote,
                                       repairing: localWins.repairing, unlisting: localWins.unlisting)
        #expect(sending.uploads.map(\.entry.path) == [p("edited")] && sending.manifest.map(\.path) == [p("edited"), p("kept")])
        let remoteWins = PushPlanner.resolve(.remoteWins, changedByAnotherWriter: [], editedOnRemote: [p("edited")])
        let unlisting = PushPlanner.plan(local: local, remote: remote, rules: deleteAll, keepingRemote: remoteWins.keepingRemote,
                                         repairing: remoteWins.repairing, unlisting: remoteWins.unlisting)
        #expect(unlisting.uploads.isEmpty && unlisting.deletions.isEmpty, "the remote's bytes stay where they are")
        #expect(unlisting.manifest.map(\.path) == [p("kept")] && unlisting.unlisted == 1 && !unlisting.isEmpty, "a manifest goes without it")
    }

    /// An empty local tree may not empty the remote: refused only when the run would delete what
    /// the remote lists, and allow-empty = yes lets it.
    @Test(arguments: [(0, 3, "delete = yes", true), (0, 3, "delete = yes\nallow-empty = yes", false), (0, 3, "delete = no", false),
                      (0, 0, "delete = yes", false), (1, 3, "delete = yes", false)])
    func anEmptyLocalTreeIsRefusedWhenItWouldEmptyTheRemote(local: Int, remote: Int, keys: String, refused: Bool) throws {
        let config = try ConfigParser.parse("[session up]\ndirection = push\nremote = file:///srv/site\nlocal = /data/site\n\(keys)\n",
                                            path: "test.conf")
        do throws(FerryError) {
            try PushPlanner.refuseEmptying(localFiles: local, remoteFiles: remote, session: config.sessions[0])
            #expect(!refused)
        } catch {
            #expect(refused)
            #expect(error.exitCode == .localIO && error.message.contains("/data/site holds no files to publish, and the remote lists 3"))
        }
    }

    // MARK: remote-layout = objects

    let h3 = SHA256Digest(hex: String(repeating: "3", count: 64))!

    /// A content the remote stores is not sent again, wherever it moved; two files of one content
    /// send it once; a deletion removes nothing at a path; only the manifest changes for a move.
    @Test func theObjectsLayoutSendsEachContentItDoesNotStoreOnce() {
        let remote = published([entry("a", h1), entry("b", h2)])
        let local = [entry("moved/b", h2), entry("c", h3), entry("d", h3)]
        let tree = PushPlanner.plan(local: local, remote: remote, rules: deleteAll)
        let plan = PushPlanner.storing(tree, local: Set(local.map(\.path)), stored: [h1, h2], changesLayout: false)
        #expect(plan.uploads.map(\.entry.path) == [p("c")], "h3 once, h2 is stored: \(plan.uploads.map(\.entry.path))")
        #expect(plan.alreadyStored == 2, "moved/b and d only change the manifest")
        #expect(plan.deletions == [p("a"), p("b")] && plan.replacements.isEmpty)
        #expect(plan.manifest.map(\.path) == [p("c"), p("d"), p("moved/b")])

        // Nothing changed but the layout: every content not stored goes, and a manifest must.
        let same = PushPlanner.plan(local: [entry("a", h1)], remote: published([entry("a", h1)]), rules: deleteAll)
        #expect(same.isEmpty)
        let switching = PushPlanner.storing(same, local: [p("a")], stored: [], changesLayout: true)
        #expect(switching.uploads.map(\.entry.path) == [p("a")] && !switching.isEmpty)
        #expect(PushPlanner.storing(same, local: [p("a")], stored: [h1], changesLayout: false).isEmpty)
    }

    /// After the uploads: an entry whose content is not stored keeps its last published entry
    /// (if that one's is), a new one is left out, and a published path that can list neither is lost.
    @Test func theObjectsLayoutListsOnlyStoredContent() {
        let before = published([entry("a", h1), entry("b", h2)])
        let (entries, lost) = PushPlanner.listable([entry("a", h3), entry("b", h3), entry("new", h3)], published: before) { $0 == h1 }
        #expect(entries == [entry("a", h1)])
        #expect(lost == [p("b")])
    }
}

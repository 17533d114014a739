/// What one push run must do to make the remote match the local tree, and the manifest to publish
/// once it is done (issue 9). Built by `PushPlanner`. The local tree is the source: the remote is
/// known by the manifest ferry last published there.
public struct PushPlan: Sendable {
    public enum Reason: String, Sendable {
        /// The remote manifest does not list the path.
        case new
        /// It lists other content (size or hash).
        case changed
    }

    public struct Upload: Sendable {
        public let entry: ManifestEntry
        public let reason: Reason
    }

    public var uploads: [Upload] = []
    /// Remote files the local tree no longer has (only when the session deletes, within `max-delete`).
    public var deletions: [RelativePath] = []
    /// Remote files in the way of what the local tree now has: a remote file where a local
    /// directory is, or remote files under a path that is now a local file. The local tree is the
    /// authority over the paths it holds, so these go whatever `delete` says (as pull replaces a
    /// path that changed type), before the uploads that need their place.
    public var replacements: [RelativePath] = []
    /// Set when `max-delete` refused this run's deletions (then `deletions` is empty and the
    /// manifest goes on listing them).
    public var refusedDeletions: Plan.RefusedDeletions?
    /// Remote files the local tree does not have, kept (and still listed) because the session does not delete.
    public var extrasKept = 0
    public var upToDate = 0
    /// Same bytes, another mode or mtime: only the manifest changes.
    public var metadataChanges = 0
    /// The entries of the manifest to publish after every upload and removal succeeded, in path order.
    public var manifest: [ManifestEntry] = []
    /// Files the remote keeps that the manifest no longer lists (`unlisting`): a manifest must go.
    public var unlisted = 0
    /// `remote-layout = objects`: files whose content the remote already stores (under another
    /// path, in an earlier version, or as another file of this one): only the manifest changes.
    public var alreadyStored = 0
    /// The published manifest is of another layout: the whole manifest is published anew.
    public var changesLayout = false

    public var uploadBytes: Int64 { uploads.reduce(0) { $0 + ($1.entry.size ?? 0) } }
    /// Nothing to send, remove or say: the remote already matches (no new manifest either).
    public var isEmpty: Bool {
        uploads.isEmpty && deletions.isEmpty && replacements.isEmpty && metadataChanges == 0 && unlisted == 0 && alreadyStored == 0 && !changesLayout
    }
}

public enum PushPlanner {
    /// The rule that keeps an empty local tree from emptying the remote, as `allow-empty` keeps an
    /// empty manifest from emptying a pull's mirror: a directory that holds nothing to publish is
    /// more often an unmounted disk or a mistyped path than an intent. Refused (exit 5, nothing
    /// changed) when the run would delete the files the remote lists, unless the session says
    /// `allow-empty = yes`.
    public static func refuseEmptying(localFiles: Int, remoteFiles: Int, session: SessionConfig) throws(FerryError) {
        guard localFiles == 0, remoteFiles > 0, session.delete, !session.allowEmpty else { return }
        throw .localIO("the local directory \(Printable.name(session.local)) holds no files to publish, and the remote lists \(remoteFiles): refused, so that an empty or unmounted directory cannot empty the remote; nothing was changed",
                       hint: "check that the directory is mounted and 'local =' is right; if the remote is meant to be emptied, set allow-empty = yes for session '\(session.name)' (deletions stay capped by max-delete)")
    }

    /// `local`: the entries the local tree would publish (hashed files, any order, each path once).
    /// `remote`: the manifest ferry last published on the remote (nil: nothing was published yet).
    /// `keepingRemote`: paths whose remote version stays (`conflict = remote-wins`, a file that
    /// could not be read): neither uploaded nor removed, and listed as the remote lists them.
    /// `repairing`: paths the remote does not hold as published (changed there, `conflict =
    /// local-wins`): uploaded whatever the manifest says. `unlisting`: paths the remote keeps and
    /// the manifest no longer lists (a file edited on the remote, `conflict = remote-wins`).
    public static func plan(local: [ManifestEntry], remote: Manifest?, rules: DeletionRules,
                            keepingRemote: Set<RelativePath> = [], repairing: Set<RelativePath> = [],
                            unlisting: Set<RelativePath> = []) -> PushPlan {
        var plan = PushPlan()
        let untouched = keepingRemote.union(unlisting)
        let remoteEntries = remote?.entries ?? []
        let kept = remoteEntries.filter { keepingRemote.contains($0.path) && !unlisting.contains($0.path) }
        let local = local.filter { !untouched.contains($0.path) }.sorted { $0.path < $1.path }
        var remoteByPath: [RelativePath: ManifestEntry] = [:]
        for e in remoteEntries { remoteByPath[e.path] = e }
        let localFiles = Set(local.map(\.path))
        var localDirectories = Set<RelativePath>()
        for e in local { localDirectories.formUnion(e.path.ancestors) }

        for e in local {
            guard let r = remoteByPath[e.path] else {
                plan.uploads.append(PushPlan.Upload(entry: e, reason: .new))
                continue
            }
            if r.sha256 != e.sha256 || (r.size != nil && r.size != e.size) || repairing.contains(e.path) {
                plan.uploads.append(PushPlan.Upload(entry: e, reason: .changed))
            } else if r.mode != e.mode || r.mtime != e.mtime {
                plan.metadataChanges += 1
            } else {
                plan.upToDate += 1
            }
        }

        var extras: [ManifestEntry] = []
        for r in remoteEntries where !localFiles.contains(r.path) && !untouched.contains(r.path) {
            // A remote file where the local tree has a directory, or under a local file.
            if localDirectories.contains(r.path) || r.path.ancestors.contains(where: localFiles.contains) {
                plan.replacements.append(r.path)
            } else {
                extras.append(r)
            }
        }
        var extrasKept = extras
        if rules.delete && !extras.isEmpty {
            let limit = rules.cap.limit(managed: remoteEntries.count)
            if extras.count > limit {
                plan.refusedDeletions = Plan.RefusedDeletions(count: extras.count, managed: remoteEntries.count, limit: limit,
                                                              paths: extras.map(\.path))
            } else {
                plan.deletions = extras.map(\.path)
                extrasKept = []
            }
        } else {
            plan.extrasKept = extras.count
        }
        plan.manifest = (local + kept + extrasKept).sorted { $0.path < $1.path }
        if !unlisting.isEmpty { plan.unlisted = unlisting.count }
        return plan
    }
}

extension PushPlanner {
    /// The plan for `remote-layout = objects`, from the plan for the tree (`plan`): a file is sent
    /// when the remote does not store its content yet (`stored`: by SHA-256), once per content
    /// however many files hold it; nothing on the remote is removed or replaced at a path (files
    /// the manifest no longer lists simply leave it; their objects are collected later). `local`:
    /// the paths the local tree publishes; `changesLayout`: the manifest last published is of the
    /// tree layout.
    public static func storing(_ plan: PushPlan, local: Set<RelativePath>, stored: Set<SHA256Digest>, changesLayout: Bool) -> PushPlan {
        var out = plan
        var reasons: [RelativePath: PushPlan.Reason] = [:]
        for u in plan.uploads { reasons[u.entry.path] = u.reason }
        var sending = Set<SHA256Digest>()
        out.uploads = []
        out.alreadyStored = 0
        for e in plan.manifest where local.contains(e.path) {
            if stored.contains(e.sha256) || sending.contains(e.sha256) {
                if reasons[e.path] != nil { out.alreadyStored += 1 }
                continue
            }
            sending.insert(e.sha256)
            out.uploads.append(PushPlan.Upload(entry: e, reason: reasons[e.path] ?? .changed))
        }
        out.replacements = []
        out.changesLayout = changesLayout
        return out
    }

    /// The entries of a manifest in the objects layout once the uploads ended: each file's entry
    /// when the remote stores its content (`stored`), else the entry last published for its path
    /// if that content is stored (the file failed, and keeps its last version), else none. Returns
    /// the entries, and the paths `published` lists that can no longer be listed (their content
    /// is not stored: a switch from the tree layout whose upload failed).
    public static func listable(_ entries: [ManifestEntry], published: Manifest?, stored: (SHA256Digest) -> Bool)
        -> (entries: [ManifestEntry], lost: [RelativePath]) {
        var out: [ManifestEntry] = []
        var lost: [RelativePath] = []
        for e in entries {
            if stored(e.sha256) {
                out.append(e)
            } else if let i = published?.index(of: e.path), let before = published?.entries[i] {
                if stored(before.sha256) { out.append(before) } else { lost.append(e.path) }
            }
        }
        return (out, lost)
    }
}

/// `verify-uploads`: how a push makes sure the remote holds what it sent, before a manifest lists it.
public enum VerifyUploads: String, Sendable, CaseIterable {
    /// The store's own checksum over what it holds where it computes one (S3's, `Repr-Digest`),
    /// else ferry reads the object back and hashes it.
    case auto
    /// Always read back, whatever the store says.
    case readBack = "read-back"
    /// The store's checksum where it gives one, else only the size: cheaper, and said as such.
    case sizeOnly = "size-only"
}

/// How one object a push placed was found to hold what was sent.
public enum UploadVerification: String, Sendable, CaseIterable {
    /// The store computed the SHA-256 of what it holds, and it is what was sent.
    case storeChecksum = "store-checksum"
    /// ferry read the object back and its SHA-256 is what was sent.
    case readBack = "read-back"
    /// Only its size was compared (`verify-uploads = size-only` on a store that computes no checksum).
    case sizeOnly = "size-only"

    /// How it is said in a run's summary.
    public var phrase: String {
        switch self {
        case .storeChecksum: return "by the store's SHA-256"
        case .readBack: return "read back"
        case .sizeOnly: return "by size only (verify-uploads = size-only)"
        }
    }
}

/// `conflict`: what a push does when the remote changed since ferry last published there.
public enum ConflictPolicy: String, Sendable {
    /// Report the conflict (exit 1) and change nothing on either side.
    case fail
    /// The local tree replaces what changed on the remote.
    case localWins = "local-wins"
    /// What changed on the remote stays; the local tree's other changes are published.
    case remoteWins = "remote-wins"

    /// The paths the remote's manifest `now` says differently from `published`, the one ferry
    /// published last: changed, added or removed by someone else.
    public static func changedOnRemote(published: Manifest, now: Manifest?) -> [RelativePath] {
        var before: [RelativePath: ManifestEntry] = [:]
        for e in published.entries { before[e.path] = e }
        var changed: [RelativePath] = []
        var seen = Set<RelativePath>()
        for e in now?.entries ?? [] {
            seen.insert(e.path)
            if let b = before[e.path], b.sha256 == e.sha256, b.size == e.size { continue }
            changed.append(e.path)
        }
        changed += published.entries.map(\.path).filter { !seen.contains($0) }
        return changed.sorted()
    }
}

/// What `conflict` decided about the paths the remote holds otherwise than this session published
/// or placed them (`PushPlanner.resolve`): either the run changes nothing (`refused`), or the sets
/// the plan is made again with (`PushPlanner.plan`'s `keepingRemote`, `repairing`, `unlisting`).
public struct ConflictResolution: Sendable, Equatable {
    /// Every path in conflict, once each, in path order.
    public var conflicts: [RelativePath] = []
    /// `conflict = fail` met a conflict: nothing is uploaded or deleted, on either side.
    public var refused = false
    /// Paths whose remote version stays, listed as the remote's manifest lists it.
    public var keepingRemote: Set<RelativePath> = []
    /// Paths sent again whatever the manifest says.
    public var repairing: Set<RelativePath> = []
    /// Paths the remote keeps and the manifest no longer lists.
    public var unlisting: Set<RelativePath> = []

    public init(conflicts: [RelativePath] = [], refused: Bool = false, keepingRemote: Set<RelativePath> = [],
                repairing: Set<RelativePath> = [], unlisting: Set<RelativePath> = []) {
        self.conflicts = conflicts
        self.refused = refused
        self.keepingRemote = keepingRemote
        self.repairing = repairing
        self.unlisting = unlisting
    }
}

extension PushPlanner {
    /// Applies `policy` to what changed on the remote: `changedByAnotherWriter`, the paths its
    /// manifest says differently from the one this session last published
    /// (`ConflictPolicy.changedOnRemote`), and `editedOnRemote`, the files it holds otherwise than
    /// ferry placed them (edited, replaced or removed in place; its manifest still lists them as
    /// published). `fail` refuses the run; `local-wins` sends the edited files again (another
    /// writer's entries are replaced by the plan itself, which plans against the remote's manifest
    /// as it is now); `remote-wins` keeps another writer's entries as they are, and a file edited
    /// in place stays on the remote unlisted: no entry vouches for its bytes.
    public static func resolve(_ policy: ConflictPolicy, changedByAnotherWriter: [RelativePath],
                               editedOnRemote: Set<RelativePath>) -> ConflictResolution {
        let byAnotherWriter = Set(changedByAnotherWriter)
        let conflicts = byAnotherWriter.union(editedOnRemote).sorted()
        guard !conflicts.isEmpty else { return ConflictResolution() }
        switch policy {
        case .fail:
            return ConflictResolution(conflicts: conflicts, refused: true)
        case .localWins:
            return ConflictResolution(conflicts: conflicts, repairing: editedOnRemote)
        case .remoteWins:
            return ConflictResolution(conflicts: conflicts, keepingRemote: byAnotherWriter, unlisting: editedOnRemote.subtracting(byAnotherWriter))
        }
    }
}

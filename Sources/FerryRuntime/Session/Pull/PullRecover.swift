import FerryCore

/// What the first stage hands on: the session as the state records it, and the mirror as the
/// last run left it.
struct Recovered {
    let record: SessionRecord?
    let mirror: Mirror
}

/// Where a run finds the version readers see, and, with `layout = generations`, the generation
/// it builds.
struct Mirror {
    /// The directory readers see now; nil when there is none yet.
    var current: String?
    var generations: Generations?
    var at: Generations.Current = .none
    /// The generation being built: one an interrupted run left, or (once needed) this run's.
    var building: Int?
    /// Files of an interrupted build that are new or differ from the current generation.
    var changedEarlier: [GenerationFile] = []

    /// Nothing to convert: in place, or the symlink to a generation that is there.
    var settled: Bool {
        guard generations != nil else { return true }
        if case .generation = at { return current != nil }
        return false
    }

    var number: Int? {
        if case let .generation(n) = at { return n }
        return nil
    }
}

/// Recover: what a killed run left is finished first. A run killed during `on-switch-check` has
/// its check run again (or its rollback recorded), which may end this run (exit 1); then the
/// mirror is made what `layout` says: a symlink to ferry's generations turned back into a
/// directory (`in-place`), or for `generations` what an interrupted run left cleared away, but for
/// the build it goes on with.
struct RecoverStage {
    let pull: PullRun

    func run() throws(FerryError) -> Onward<Recovered> {
        var record = try pull.store.session(pull.session.name)
        if let failed = try pull.finishSwitchCheck(record) {
            // A run killed during on-switch-check: that check ran now, and failed.
            return .end(pull.result(.someFilesFailed, message: failed))
        }
        if record?.switchCheck != nil { record = try pull.store.session(pull.session.name) }
        let g = Generations(local: pull.session.local)
        guard pull.session.layout == .generations else {
            if case let .generation(n) = g.current(), FileSystem.exists(g.path(n)) {
                try g.makeInPlace(current: n)
                pull.emit(.warning(message: "\(Printable.name(pull.session.local)) was a symlink to generation g\(n) "
                                            + "(layout = generations); it is the directory again, and the other "
                                            + "generations are removed"))
            }
            // The other generations go (also what a conversion cut short left); that moves the
            // ctime of every file they share with this one: this run's scan renews their rows.
            if g.current() == .directory && FileSystem.exists(g.directory) && g.holdsOnlyGenerations() {
                try pull.state.expectCtimeMoves()
                try g.removeAll()
            }
            return .go(Recovered(record: record, mirror: Mirror(current: pull.session.local)))
        }
        var mirror = try pull.lookAtMirror()
        if g.untidy(current: mirror.number) { try pull.state.expectCtimeMoves() }
        mirror.building = try g.tidy(current: mirror.number)
        return .go(Recovered(record: record, mirror: mirror))
    }
}

/// A dry run's first stage: the session and the mirror as they are, nothing finished or changed.
struct InspectStage {
    let pull: PullRun

    func run() throws(FerryError) -> Onward<Recovered> {
        .go(Recovered(record: try pull.store.session(pull.session.name), mirror: try pull.lookAtMirror()))
    }
}

extension PullRun {
    /// The mirror as it is: in place, the directory `local`; with `layout = generations`, the
    /// generation `local` links to (none yet, or a directory a conversion will keep). A `local`
    /// that is something else is refused: nothing is changed.
    func lookAtMirror() throws(FerryError) -> Mirror {
        guard session.layout == .generations else { return Mirror(current: session.local) }
        let g = Generations(local: session.local)
        var mirror = Mirror(generations: g, at: g.current())
        switch mirror.at {
        case let .foreign(what):
            throw .localIO("local = \(session.local) is \(what), which layout = generations would replace with a "
                           + "symlink to its versions: nothing was changed",
                           hint: "point local at a path ferry may create, or at a directory it keeps; or set layout = "
                                 + "in-place")
        case .none: break
        case .directory: mirror.current = session.local
        case let .generation(n): mirror.current = FileSystem.exists(g.path(n)) ? g.path(n) : nil
        }
        return mirror
    }
}

import Glibc
import FerryCore

/// `on-switch-check` (`layout = generations`): after a switch the session's command runs, with the
/// environment of a hook and bounded by `hook-timeout`; if it fails, the previous generation is
/// made current again (one rename, as any switch), the version is recorded as rejected on this
/// machine (`rejected_version`: a run that finds it still published stays on the generation
/// before; a newer version is taken), and the rollback is said once (a `rolled-back` event,
/// `status`, `ferry_rollbacks_total`). Readers see one whole generation or the other at every
/// moment; a kill between the switch and the end of the check leaves the check to the next run.
extension PullRun {
    /// Runs the check after a switch to `check.generation`; nil when it passed, else why it failed
    /// (the previous generation is current again if there was one).
    func runSwitchCheck(_ check: SwitchCheck, _ g: Generations) throws(FerryError) -> String? {
        guard let command = session.onSwitchCheck else {
            try store.recordSwitchCheck(session: session.name, nil)
            return nil
        }
        var environment = ["FERRY_SESSION=" + session.name, "FERRY_LOCAL=" + session.local,
                           "FERRY_GENERATION=" + g.name(check.generation),
                           "FERRY_GENERATION_DIR=" + g.path(check.generation),
                           "FERRY_VERSION=" + (check.version.map(String.init) ?? "")]
        if let previous = check.previous { environment.append("FERRY_PREVIOUS_GENERATION=" + g.name(previous)) }
        let failure: String
        switch HookProcess.run(command, environment: environment, timeout: session.hookTimeout, clock: clock) {
        case .exited(0):
            try store.recordSwitchCheck(session: session.name, nil)
            return nil
        case let .exited(code): failure = "it exited with code \(code)"
        case let .signalled(signal): failure = "it was killed by signal \(signal)"
        case .timedOut: failure = "it did not finish within hook-timeout (\(Units.formatDuration(session.hookTimeout)))"
        case let .cannotStart(why): failure = "it could not be started: \(why)"
        }
        return try rollBack(check, g, because: failure)
    }

    /// Makes the generation before current again and records the version as rejected. Without one
    /// (the first generation), the new one stays: there is nothing else to show.
    func rollBack(_ check: SwitchCheck, _ g: Generations, because failure: String) throws(FerryError) -> String {
        let name = g.name(check.generation)
        guard let previous = check.previous, FileSystem.exists(g.path(previous)) else {
            try store.recordSwitchCheck(session: session.name, nil)
            return "generation \(name) failed on-switch-check (\(failure)), and there is no generation before it to "
                   + "return to: it stays current"
        }
        if g.current() == .generation(check.generation) {
            try g.switchTo(previous, from: .generation(check.generation))
        }
        try store.recordRollback(session: session.name, version: check.version, reason: failure)
        emit(.rolledBack(generation: name, previous: g.name(previous), version: check.version, reason: failure))
        return "generation \(name)\(check.version.map { " (version \($0))" } ?? "") failed on-switch-check "
               + "(\(failure)): \(Printable.name(session.local)) shows generation \(g.name(previous)) again, and that "
               + "version is not taken again on this machine"
    }

    /// What a run killed during a check left (`record.switchCheck`): the check runs again if the
    /// generation it was about is still current, and a rollback that was under way is recorded.
    /// Returns why the run fails (the check failed), if it does.
    func finishSwitchCheck(_ record: SessionRecord?) throws(FerryError) -> String? {
        guard let check = record?.switchCheck else { return nil }
        let g = Generations(local: session.local)
        switch g.current() {
        case .generation(check.generation) where session.layout == .generations:
            return try runSwitchCheck(check, g)
        case let .generation(n) where n == check.previous:
            // Switched back, not yet recorded.
            return try rollBack(check, g, because: "it failed; the run that ran it was stopped before it recorded why")
        default:
            try store.recordSwitchCheck(session: session.name, nil)
            return nil
        }
    }
}

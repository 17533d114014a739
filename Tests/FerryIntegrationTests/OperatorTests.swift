import Foundation
import Testing
import FerryCore

/// An operator's first day with the package: an agent started before any session is written waits
/// for a reload instead of failing; `ferry reload` (the units' ExecReload) needs nothing but ferry
/// and fails when the agent refuses a config; a command run as root on a state directory owned by
/// the service's user runs as that user, so it cannot leave a file the service cannot write; a
/// state directory damaged that way before is named with its fix, once.
@Suite(.serialized)
struct OperatorTests {
    static let nobody: uid_t = 65534

    /// Ferry as `nobody` (root writes anywhere, so it proves nothing about permissions).
    func asNobody(_ arguments: [String]) -> FerryRun {
        runProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", Harness.ferryBinary] + arguments)
    }

    /// Every entry under `path` (itself included) whose owner is not `uid`.
    func strangers(under path: String, owner uid: uid_t) -> [String] {
        var out: [String] = []
        var st = stat()
        if lstat(path, &st) == 0 && st.st_uid != uid { out.append(path) }
        let walker = FileManager.default.enumerator(atPath: path)
        while let rel = walker?.nextObject() as? String {
            if lstat(path + "/" + rel, &st) == 0 && st.st_uid != uid { out.append(rel) }
        }
        return out
    }

    @Test func anAgentWithoutSessionsWaitsForAReloadThatAddsOne() throws {
        let box = Sandbox("agent-no-session")
        box.publish("a.txt", "alpha\n")
        box.buildManifest()
        try "[agent]\nstate = \(box.state)\n".writeReplacing(box.config)
        // Without an agent there is nothing to reload: said, exit 2.
        let early = ferry(["reload", "--config", box.config])
        #expect(early.exitCode == 2 && early.stderr.contains("no agent runs with the state directory"), "\(early.output)")

        let agent = try AgentTests.RunningAgent(box)
        #expect(eventually { agent.output.contains("names no session: the agent waits") }, "\(agent.output)")
        #expect(agent.child.isRunning, "an agent without sessions keeps running: \(agent.output)")
        let status = box.status()
        #expect(status.exitCode == 0 && status.stdout.contains("no session"), "\(status.output)")

        // The session is written; `ferry reload` applies it and answers only once it has.
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"])
        let reload = ferry(["reload", "--config", box.config])
        #expect(reload.exitCode == 0 && reload.stdout.contains("reloaded") && reload.stdout.contains("test"), "\(reload.output)")
        #expect(eventually { fileContents(box.localPath("a.txt")) == "alpha\n" }, "\(agent.output)")

        // A broken config is refused with its error, exit 2; the agent goes on with the old one.
        try (fileContents(box.config)! + "poll = often\n").writeReplacing(box.config)
        let broken = ferry(["reload", "--config", box.config])
        #expect(broken.exitCode == 2 && broken.stderr.contains("key 'poll'") && broken.stderr.contains("not reloaded"), "\(broken.output)")
        #expect(agent.child.isRunning)
        // A config that moves the state: the client finds no agent there (exit 2, with the hint);
        // SIGHUP brings it to the agent, which refuses it and goes on.
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"])
        try fileContents(box.config)!.replacingOccurrences(of: "state = \(box.state)", with: "state = \(box.state)-moved").writeReplacing(box.config)
        let moved = ferry(["reload", "--config", box.config])
        #expect(moved.exitCode == 2 && moved.stderr.contains("restart it instead"), "\(moved.output)")
        agent.child.signal(SIGHUP)
        #expect(eventually { agent.output.contains("cannot change while the agent runs") }, "\(agent.output)")
        Harness.remove(box.state + "-moved")
        #expect(agent.child.isRunning)
        // A good one after them is taken.
        box.configure(remote: "file://" + box.published, session: ["poll = 1h"])
        #expect(ferry(["reload", "--config", box.config]).exitCode == 0)
    }

    /// Root running `sync now` on a state directory owned by the service's user runs as that user:
    /// every file it makes, in the state and in the mirror, is that user's.
    @Test func rootRunsAsTheOwnerOfTheState() throws {
        // Ownership and permissions mean something only when the tests can change them (CI is root).
        guard getuid() == 0 else { return }
        let box = Sandbox("root-as-owner")
        for i in 0..<5 { box.publish("d/f\(i).txt", "\(i)\n") }
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        chmod(box.directory, 0o755)
        for dir in [box.state, box.local] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            chown(dir, Self.nobody, Self.nobody)
        }
        chmod(box.state, 0o700)
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(fileContents(box.localPath("d/f3.txt")) == "3\n")
        #expect(strangers(under: box.state, owner: Self.nobody).isEmpty, "root left files in the state: \(strangers(under: box.state, owner: Self.nobody))")
        #expect(strangers(under: box.local, owner: Self.nobody).isEmpty, "root left files in the mirror")
        // The owner itself goes on using it.
        box.publish("d/new.txt", "new\n")
        box.buildManifest()
        let again = asNobody(["sync", "now", "--config", box.config])
        #expect(again.exitCode == 0 && fileContents(box.localPath("d/new.txt")) == "new\n", "\(again.output)")
        // `config check` as root checks what the owner can do: a local directory only root can
        // write is named, and so is the user it checked as.
        try FileManager.default.createDirectory(atPath: box.directory + "/rootonly", withIntermediateDirectories: true)
        chmod(box.directory + "/rootonly", 0o755)
        try fileContents(box.config)!.replacingOccurrences(of: "local = \(box.local)", with: "local = \(box.directory)/rootonly").writeReplacing(box.config)
        let check = ferry(["config", "check", "--config", box.config])
        #expect(check.exitCode == 2 && check.stderr.contains("local = \(box.directory)/rootonly: cannot write there"), "\(check.output)")
        // A config only root can read is read here as root, and named: the service could not.
        chmod(box.config, 0o600)
        let unreadable = ferry(["config", "check", "--config", box.config])
        #expect(unreadable.exitCode == 2 && unreadable.stderr.contains("nobody cannot read the config file") && unreadable.stderr.contains("chmod 640"),
                "\(unreadable.output)")
    }

    /// A state directory that already holds root's files (a run as root before the rule) is one
    /// error naming them and the chown that repairs it, whoever runs.
    @Test func aStateDamagedByRootIsNamedWithItsFix() throws {
        guard getuid() == 0 else { return }
        let box = Sandbox("root-damage")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        chmod(box.directory, 0o755)
        // The owner syncs first; then root's files appear in its state (as an older ferry left them).
        try FileManager.default.createDirectory(atPath: box.state, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: box.local, withIntermediateDirectories: true)
        chown(box.state, Self.nobody, Self.nobody)
        chown(box.local, Self.nobody, Self.nobody)
        #expect(asNobody(["sync", "now", "--config", box.config]).exitCode == 0)
        let db = try FileManager.default.contentsOfDirectory(atPath: box.state).first { $0.hasSuffix(".db") }
        let dbPath = box.state + "/" + (db ?? "state.db")
        chown(dbPath, 0, 0)
        try FileManager.default.createDirectory(atPath: box.state + "/events/extra", withIntermediateDirectories: true)
        for run in [asNobody(["status", "--config", box.config]), box.sync(), ferry(["status", "--config", box.config])] {
            #expect(run.exitCode == 5, "\(run.output)")
            let errors = run.stderr.split(separator: "\n").filter { $0.hasPrefix("ferry: error") }
            #expect(errors.count == 1, "one error for the one cause: \(run.stderr)")
            #expect(run.stderr.contains("holds entries of root") && run.stderr.contains((db ?? "state.db")) && run.stderr.contains("events/extra"),
                    "\(run.stderr)")
            #expect(run.stderr.contains("chown -R nobody:nogroup \(box.state)"), "\(run.stderr)")
        }
        _ = runProcess("/bin/chown", ["-R", "nobody:nogroup", box.state])
        #expect(box.sync().exitCode == 0, "repaired as the hint says")
    }

    /// A user who neither owns the state nor is root is refused with the command that would work.
    /// What an operator met after "config check: OK": a sign-key made by `ferry key generate` as
    /// root (0600, root's), which the services' user cannot read, and a `file://` push target it
    /// cannot write. config check, run as root, checks as the state's owner and finds both; the
    /// run's error says the chown, not "make one" of a key that exists.
    @Test func aRootMadeSignKeyAndAnUnwritableTargetAreFoundBeforeTheRun() throws {
        guard getuid() == 0 else { return }
        let box = Sandbox("root-sign-key")
        chmod(box.directory, 0o755)
        let src = box.directory + "/src", target = box.directory + "/target", key = box.directory + "/sign.pem"
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        try "published\n".writeReplacing(src + "/p.txt")
        chmod(src, 0o755)
        chmod(src + "/p.txt", 0o644)
        try FileManager.default.createDirectory(atPath: box.state, withIntermediateDirectories: true)
        chown(box.state, Self.nobody, Self.nobody)
        try """
            [agent]
            state = \(box.state)
            [session up]
            direction = push
            remote = file://\(target)/
            local = \(src)
            sign-key = \(key)
            """.writeReplacing(box.config)
        let made = ferry(["key", "generate", "--output", key, "--config", box.config])
        #expect(made.exitCode == 0 && made.stderr.contains("is root's (mode 0600); the services run as nobody") && made.stderr.contains("chown nobody: \(key)"),
                "\(made.output)")
        let check = ferry(["config", "check", "--config", box.config])
        #expect(check.exitCode == 2 && !check.stdout.contains("OK"), "\(check.output)")
        #expect(check.stderr.contains("sign-key: cannot read the signing key \(key) as nobody") && check.stderr.contains("chown nobody: \(key)"),
                "\(check.output)")
        #expect(check.stderr.contains("remote = file://\(target)/: a push writes there, but cannot write there"), "\(check.output)")
        #expect(!check.stderr.contains("ferry key generate"), "the key exists: \(check.output)")

        chown(key, Self.nobody, Self.nobody)
        chown(target, Self.nobody, Self.nobody)
        let fixed = ferry(["config", "check", "--config", box.config])
        #expect(fixed.exitCode == 0, "\(fixed.output)")
        #expect(box.sync().exitCode == 0)
        #expect(fileContents(target + "/p.txt") == "published\n")
    }

    @Test func anotherUserIsToldWhoOwnsTheState() throws {
        guard getuid() == 0 else { return }
        let box = Sandbox("other-user")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published)
        chmod(box.directory, 0o755)
        try FileManager.default.createDirectory(atPath: box.state, withIntermediateDirectories: true)
        chmod(box.state, 0o700)
        let run = asNobody(["status", "--config", box.config])
        #expect(run.exitCode == 5, "\(run.output)")
        #expect(run.stderr.contains("belongs to root") && run.stderr.contains("sudo -u root ferry status --config \(box.config)"), "\(run.stderr)")
    }

    /// The mistakes of a first day are each answered once, with the hint that fits them.
    @Test func firstDayMistakesGetTheHintThatFits() throws {
        guard getuid() == 0 else { return }
        let version = ferry(["-V"])
        #expect(version.exitCode == 0 && version.stdout.hasPrefix("ferry "), "\(version.output)")
        let typo = ferry(["--vesion"])
        #expect(typo.exitCode == 2 && typo.stderr.contains("did you mean '--version'?") && !typo.stderr.contains("'ls'"), "\(typo.output)")
        let missing = ferry(["manifest", "build", "/nonexistent-\(getpid())"])
        #expect(missing.exitCode == 2 && missing.stderr.contains("give the directory that holds the files to publish") && !missing.stderr.contains("local ="),
                "\(missing.output)")

        let box = Sandbox("first-day-hints")
        box.publish("a.txt", "a\n")
        box.buildManifest()
        chmod(box.directory, 0o755)
        // A credentials file that exists but this user cannot read: not "create the file".
        let secret = box.directory + "/token"
        try "t0ken\n".writeReplacing(secret, mode: 0o600)
        box.configure(remote: "http://127.0.0.1:9/", session: ["bearer-token-file = \(secret)"])
        _ = runProcess("/bin/chown", ["-R", "65534:65534", box.state, box.local].filter { FileManager.default.fileExists(atPath: $0) })
        let check = asNobody(["config", "check", "--config", box.config])
        #expect(check.exitCode == 2 && check.stderr.contains("chmod 640 \(secret)") && !check.stderr.contains("create the file"), "\(check.output)")

        // Generations need the directory holding local: said with the user and that directory.
        let parent = box.directory + "/site"
        try FileManager.default.createDirectory(atPath: parent + "/mirror", withIntermediateDirectories: true)
        chmod(parent, 0o755)
        chown(parent + "/mirror", Self.nobody, Self.nobody)
        try FileManager.default.createDirectory(atPath: box.state, withIntermediateDirectories: true)
        chown(box.state, Self.nobody, Self.nobody)
        box.configure(remote: "file://" + box.published, session: ["layout = generations"])
        try fileContents(box.config)!.replacingOccurrences(of: "local = \(box.local)", with: "local = \(parent)/mirror").writeReplacing(box.config)
        let gcheck = ferry(["config", "check", "--config", box.config])
        #expect(gcheck.exitCode == 2 && gcheck.stderr.contains("layout = generations") && gcheck.stdout.isEmpty, "checked as nobody: \(gcheck.output)")
        let run = box.sync()
        #expect(run.exitCode == 5, "\(run.output)")
        #expect(run.stderr.contains("let nobody write \(parent)"), "\(run.stderr)")
    }

    /// A reload that changes what a session takes (here a filter) applies at its next poll even
    /// when the manifest has not changed and the tree was in sync: the poll scans again.
    @Test func aReloadThatWidensAFilterIsAppliedWithoutANewManifest() throws {
        let box = Sandbox("reload-filter")
        box.publish("a.txt", "a\n")
        box.publish("extra/e.txt", "e\n")
        box.buildManifest()
        box.configure(remote: "file://" + box.published, session: ["poll = 1s", "exclude = extra/"])
        let agent = try AgentTests.RunningAgent(box)
        #expect(eventually { fileContents(box.localPath("a.txt")) == "a\n" }, "\(agent.output)")
        // In sync, and polled twice since: the watch has seen the first run's writes, and polls
        // now skip the scan.
        func finishedRuns() -> Int {
            ferry(["events", "--config", box.config, "--json"]).stdout.split(separator: "\n").filter { $0.contains("\"sync-finished\"") }.count
        }
        #expect(eventually { finishedRuns() >= 4 }, "\(agent.output)")
        box.configure(remote: "file://" + box.published, session: ["poll = 1s"])
        let reload = ferry(["reload", "--config", box.config])
        #expect(reload.exitCode == 0, "\(reload.output)")
        #expect(eventually { fileContents(box.localPath("extra/e.txt")) == "e\n" }, "the widened filter was applied: \(agent.output)")
    }
}

/// The fleet as its taken reports tell it (`ferry fleet`): the releases served, by count; each
/// release's rollout (eligible, took, passed the health gate, rolled back); machines silent for
/// longer than asked; the commonest errors; bytes by source. Pure: the reports in, the view out.
public struct FleetView: Sendable {
    public struct Served: Sendable, Equatable {
        public let session: String
        public let version: Int64?
        public let machines: Int
    }

    public struct Release: Sendable, Equatable {
        public let session: String
        public let version: Int64
        /// The rollout share the release was offered to (nil: every machine).
        public let percent: Int?
        /// Machines that saw the release and fall inside its rollout.
        public let eligible: Int
        /// Machines that switched to it (serving it or a later one, checking it, or rolled back from it).
        public let took: Int
        /// Machines serving it or a later one: past the health gate.
        public let passed: Int
        public let rolledBack: Int
    }

    public struct Silent: Sendable, Equatable {
        public let machine: String
        public let host: String?
        public let session: String
        public let last: Timestamp
    }

    public struct ErrorCount: Sendable, Equatable {
        public let error: String
        public let machines: [String]
    }

    public let machines: Int
    public let served: [Served]
    public let releases: [Release]
    public let silent: [Silent]
    public let errors: [ErrorCount]
    public let originBytes: Int64
    public let mirrorBytes: Int64

    /// `silentAfter`: a machine whose report is older than this many seconds at `now` is silent.
    /// Releases: the three newest each session saw.
    public init(_ reports: [StatusReport], now: Timestamp, silentAfter: Double) {
        machines = reports.count
        var served: [Served] = []
        var releases: [Release] = []
        for (session, group) in Dictionary(grouping: reports, by: \.session).sorted(by: { $0.key < $1.key }) {
            let counts = Dictionary(grouping: group, by: \.served).map { Served(session: session, version: $0.key, machines: $0.value.count) }
            served += counts.sorted { ($0.version ?? -1) > ($1.version ?? -1) }
            let versions = Set(group.flatMap { r in [r.seen, r.served, r.rejected, r.rollout?.version].compactMap { $0 } })
            for version in versions.sorted(by: >).prefix(3) { releases.append(FleetView.release(version, of: group, session: session)) }
        }
        self.served = served
        self.releases = releases
        silent = reports.filter { Double(now.seconds - $0.time.seconds) > silentAfter }
            .sorted { $0.time < $1.time }
            .map { Silent(machine: $0.machine, host: $0.host, session: $0.session, last: $0.time) }
        errors = Dictionary(grouping: reports.filter { $0.error != nil }, by: { $0.error! })
            .map { ErrorCount(error: $0.key, machines: $0.value.map(\.machine).sorted()) }
            .sorted { ($0.machines.count, $1.error) > ($1.machines.count, $0.error) }
        originBytes = reports.reduce(0) { $0 + $1.originBytes }
        mirrorBytes = reports.reduce(0) { $0 + $1.mirrorBytes }
    }

    private static func release(_ version: Int64, of group: [StatusReport], session: String) -> Release {
        let rollouts = group.compactMap { $0.rollout }.filter { $0.version == version }
        let eligible = group.filter { r in
            guard (r.seen ?? Int64.min) >= version else { return false }
            if let rollout = r.rollout, rollout.version == version { return rollout.inside }
            return true
        }
        let passed = group.filter { ($0.served ?? Int64.min) >= version }
        let rolledBack = group.filter { $0.rejected == version }
        let checking = group.filter { $0.health == "checking" && $0.seen == version && ($0.served ?? Int64.min) < version }
        return Release(session: session, version: version, percent: rollouts.map(\.percent).max(), eligible: eligible.count,
                       took: passed.count + rolledBack.filter { ($0.served ?? Int64.min) < version }.count + checking.count,
                       passed: passed.count, rolledBack: rolledBack.count)
    }
}

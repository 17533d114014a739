/// What a reader of a report location remembers between reads: for each machine key and session
/// (a machine reports each of its sessions under its one key), the highest report taken (its
/// sequence number, time and the SHA-256 of the object) and the machine it named. A report whose
/// bytes hash to one the ledger holds was verified before: its signature is not checked again.
/// It is how a report put back (replayed) is told from a new one, and, without a file of machine
/// keys, how a machine is bound to the first key it reported with (trust on first report).
///
/// Kept as text, a line per key and session: `<key> <seq> <unix seconds> <sha256 hex of the object> <session> <machine>`.
public struct FleetLedger: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var key: PublicKey
        public var seq: Int64
        public var time: Int64
        public var digest: String
        public var session: String
        public var machine: String
    }

    /// By `<key> <session>`.
    public private(set) var entries: [String: Entry] = [:] {
        didSet { bound = nil }
    }
    /// The key each machine and session reported with first (`<machine> <session>`), built when needed.
    private var bound: [String: PublicKey]?

    public init() {}

    public static func == (a: FleetLedger, b: FleetLedger) -> Bool { a.entries == b.entries }

    public init(text: String) {
        var read: [String: Entry] = [:]
        WordLines.each(text, maxSplits: 5) { w in
            guard w.count == 6, let key = PublicKey(text: w[0]), let seq = Int64(w[1]), let time = Int64(w[2]) else { return }
            read[key.description + " " + w[4]] = Entry(key: key, seq: seq, time: time, digest: w[3], session: w[4], machine: w[5])
        }
        entries = read
    }

    public var text: String {
        entries.sorted { $0.key < $1.key }
            .map { "\($0.value.key) \($0.value.seq) \($0.value.time) \($0.value.digest) \($0.value.session) \($0.value.machine)" }
            .joined(separator: "\n") + "\n"
    }

    /// How a report fared.
    public enum Verdict: Sendable, Equatable {
        /// Taken: the newest of its machine (`new`: the first from its key).
        case taken(new: Bool)
        case replayed(String)
        case forged(String)
    }

    /// The digests of the reports taken: read again unchanged, a report needs no new check of its signature.
    public var digests: Set<String> { Set(entries.values.map(\.digest)) }

    /// Judges a report whose signature verified (`digest`: the SHA-256 of its object, in hex), and remembers a taken one. `machineKeys`: the
    /// keys the reader trusts and the machine each stands for (nil: trust on first report).
    /// `now`: a report from more than five minutes ahead is refused.
    public mutating func judge(_ report: StatusReport, digest sig: String, machineKeys: [PublicKey: String]?, now: Timestamp) -> Verdict {
        let machine = report.machine.replacingSpaces()
        if let machineKeys {
            guard let named = machineKeys[report.key] else {
                return .forged("signed by \(report.key), which is not in the file of machine keys")
            }
            if !named.isEmpty && named != report.machine {
                return .forged("signed by the key of machine \(named), but says it is \(report.machine)")
            }
        } else if let other = binding(machine + " " + report.session), other != report.key {
            return .forged("machine \(report.machine) reported with key \(other) first; this one is signed by \(report.key) "
                           + "(a machine whose state was made again has a new key: remove its line from the ledger to take it)")
        }
        if report.time.seconds > now.seconds + 300 {
            return .forged("it is dated \(report.time.rfc3339), ahead of this machine's clock by more than 5 minutes")
        }
        let name = report.key.description + " " + report.session
        let known = entries[name]
        if let known {
            if report.seq < known.seq {
                return .replayed("report #\(report.seq) of \(report.time.rfc3339), older than #\(known.seq) read before")
            }
            if report.seq == known.seq && sig != known.digest {
                return .forged("a second, different report #\(report.seq)")
            }
            if report.time.seconds < known.time {
                return .replayed("report #\(report.seq) dated \(report.time.rfc3339), before the one read before")
            }
        }
        var index = bound
        entries[name] = Entry(key: report.key, seq: report.seq, time: report.time.seconds, digest: sig, session: report.session, machine: machine)
        if index != nil && index![machine + " " + report.session] == nil { index![machine + " " + report.session] = report.key }
        bound = index
        return .taken(new: known == nil)
    }

    /// The key machine-and-session `name` is bound to (the first of its entries).
    private mutating func binding(_ name: String) -> PublicKey? {
        if bound == nil {
            var index: [String: PublicKey] = [:]
            for e in entries.values where index[e.machine + " " + e.session] == nil { index[e.machine + " " + e.session] = e.key }
            bound = index
        }
        return bound![name]
    }
}

extension String {
    /// The text with spaces as `_`: a field of a space-separated line.
    fileprivate func replacingSpaces() -> String { String(map { $0 == " " || $0 == "\n" ? "_" : $0 }) }
}

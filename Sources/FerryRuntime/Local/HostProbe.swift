import Glibc
import Synchronization
import FerryCore

/// Reads the machine's state for discretionary sessions (`HostState`): local time, AC power from
/// `/sys/class/power_supply`, the 1-minute load from `/proc/loadavg`, free space with `statvfs`,
/// and NetworkManager's metered flag (through `busctl`) where NetworkManager runs.
///
/// `FERRY_HOST_ROOT` puts another directory in front of `/sys`, `/proc` and `/run`, so tests (and
/// anyone checking a config) can flip power, load and NetworkManager's presence without touching
/// the machine.
public final class HostProbe: Sendable {
    public static let shared = HostProbe(root: environmentValue("FERRY_HOST_ROOT") ?? "")

    private let root: String
    /// NetworkManager's answer, asked at most every 10 s: (monotonic time, metered or nil).
    private let meteredCache = Mutex<(at: Double, metered: Bool?)?>(nil)

    public init(root: String) {
        self.root = root
        tzset()
    }

    /// The state now (the time of day on `clock`), for a session whose local directory is `local`.
    public func state(local: String, networkMetered: NetworkMetered, clock: any Clock) -> HostState {
        var host = HostState(secondOfDay: HostProbe.localSecondOfDay(clock.now()))
        host.onACPower = onACPower()
        host.load = loadAverage()
        switch networkMetered {
        case .yes:
            host.metered = true
            host.meteredSource = "network-metered = yes"
        case .no:
            host.metered = false
        case .auto:
            if let metered = networkManagerMetered(clock: clock) {
                host.metered = metered
                host.meteredSource = "NetworkManager"
            }
        }
        if let (free, total) = freeSpace(near: local) {
            host.freeBytes = free
            host.totalBytes = total
        }
        return host
    }

    /// This machine's identity: `configured` (`[agent] machine-id`), else /etc/machine-id's
    /// contents; nil when neither gives one. Rollouts decide by it; status reports name it.
    public static func machineID(configured: String?) -> String? {
        if let configured { return configured }
        guard let bytes = try? FileSystem.readFile("/etc/machine-id", limit: 4096) else { return nil }
        let id = String(decoding: bytes.filter { $0 > 0x20 }, as: UTF8.self)
        return id.isEmpty ? nil : id
    }

    /// Seconds since local midnight at `time` (the zone of `TZ`, else `/etc/localtime`).
    public static func localSecondOfDay(_ time: Timestamp) -> Int {
        var t = time_t(time.seconds)
        var parts = tm()
        localtime_r(&t, &parts)
        return Int(parts.tm_hour) * 3600 + Int(parts.tm_min) * 60 + Int(parts.tm_sec)
    }

    /// False only when the machine has a battery and no mains or USB supply online: a machine with
    /// no power-supply information (a server, a VM) runs on mains.
    func onACPower() -> Bool {
        let directory = root + "/sys/class/power_supply"
        guard let names = HostProbe.names(in: directory) else { return true }
        var sawBattery = false
        var batteryCharging = false
        for name in names {
            let base = directory + "/" + name
            guard let type = readSmallFile(base + "/type") else { continue }
            if type == "Battery" {
                sawBattery = true
                let status = readSmallFile(base + "/status") ?? ""
                if status == "Charging" || status == "Full" { batteryCharging = true }
            } else if readSmallFile(base + "/online") == "1" {
                return true
            }
        }
        return !sawBattery || batteryCharging
    }

    func loadAverage() -> Double? {
        guard let text = readSmallFile(root + "/proc/loadavg"), let first = text.split(separator: " ").first else { return nil }
        return Double(first)
    }

    /// Free bytes (for unprivileged users) and total bytes of the filesystem holding `path`, or of
    /// its nearest existing parent.
    func freeSpace(near path: String) -> (Int64, Int64)? {
        var candidate = path
        while true {
            var s = statvfs()
            if statvfs(candidate, &s) == 0 {
                return (Int64(s.f_bavail) * Int64(s.f_frsize), Int64(s.f_blocks) * Int64(s.f_frsize))
            }
            guard errno == ENOENT, let slash = candidate.lastIndex(of: "/"), candidate != "/" else { return nil }
            candidate = slash == candidate.startIndex ? "/" : String(candidate[..<slash])
        }
    }

    /// NetworkManager's global `Metered` property (yes or guess-yes), where NetworkManager runs;
    /// nil where it does not or cannot be asked.
    func networkManagerMetered(clock: any Clock) -> Bool? {
        let now = clock.monotonic()
        if let cached = meteredCache.withLock({ $0 }), (0..<10).contains(now - cached.at) { return cached.metered }
        var metered: Bool?
        var st = stat()
        if stat(root + "/run/NetworkManager", &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, let command = try? HookCommand(parsing:
            "busctl --system get-property org.freedesktop.NetworkManager /org/freedesktop/NetworkManager org.freedesktop.NetworkManager Metered") {
            let (result, output) = HookProcess.output(of: command, timeout: 5, clock: clock)
            // "u 1": NM_METERED_YES; 3 is GUESS_YES; 2 and 4 are no, 0 unknown.
            if result == .exited(0), let text = String(validating: output, as: UTF8.self),
               let value = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).last.flatMap({ Int($0) }) {
                metered = value == 1 || value == 3
            }
        }
        meteredCache.withLock { $0 = (now, metered) }
        return metered
    }

    private static func names(in directory: String) -> [String]? {
        guard let dir = opendir(directory) else { return nil }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = FileSystem.name(of: entry)
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// A sysfs or procfs attribute (a page at most), trimmed; nil when it cannot be read or is empty.
    private func readSmallFile(_ path: String) -> String? {
        guard let bytes = try? FileSystem.readFile(path, limit: 4096), !bytes.isEmpty else { return nil }
        return String(decoding: bytes, as: UTF8.self).trimmingSpaces()
    }
}

func environmentValue(_ name: String) -> String? {
    guard let value = getenv(name) else { return nil }
    let text = String(cString: value)
    return text.isEmpty ? nil : text
}

/// The gate of one discretionary session's transfers: asks the probe at most every two seconds
/// of `clock` (the engine asks it on every turn) and says which conditions do not hold.
final class DiscretionGate: @unchecked Sendable {
    private let discretion: Discretion
    private let local: String
    private let metered: NetworkMetered
    private let probe: HostProbe
    private let clock: any Clock
    private var checked = -Double.infinity
    private var last: [String] = []

    init?(session: SessionConfig, agent: AgentConfig, clock: any Clock, probe: HostProbe = .shared) {
        guard let discretion = session.discretion else { return nil }
        self.discretion = discretion
        local = session.local
        metered = agent.networkMetered
        self.clock = clock
        self.probe = probe
    }

    /// What the session's transfers wait for, joined; nil when they may go.
    func waitsFor() -> String? {
        let now = clock.monotonic()
        if now - checked >= 2 {
            checked = now
            last = discretion.unmet(probe.state(local: local, networkMetered: metered, clock: clock))
        }
        return last.isEmpty ? nil : last.joined(separator: "; ")
    }
}

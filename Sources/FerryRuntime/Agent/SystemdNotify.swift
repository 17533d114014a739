import Glibc
import FerryCore

/// sd_notify, spoken directly: datagrams to the socket systemd names in `$NOTIFY_SOCKET` (a path,
/// or an abstract name starting with '@'). Without that variable every call does nothing, so the
/// agent runs the same under systemd, a terminal or a test. The watchdog interval comes from
/// `$WATCHDOG_USEC` (when `$WATCHDOG_PID` is unset or names this process).
public final class SystemdNotifier: @unchecked Sendable {
    private let fd: Int32
    private var address = sockaddr_un()
    private let addressLength: socklen_t
    /// How often to send WATCHDOG=1 (half of systemd's WatchdogSec), if systemd asked for it.
    public let watchdogInterval: Double?

    public init(environment: (String) -> String? = { getenv($0).map { String(cString: $0) } }) {
        var interval: Double?
        if let usec = environment("WATCHDOG_USEC").flatMap(Double.init), usec > 0 {
            let pid = environment("WATCHDOG_PID").flatMap(Int32.init)
            if pid == nil || pid == getpid() { interval = usec / 1e6 / 2 }
        }
        watchdogInterval = interval
        guard let path = environment("NOTIFY_SOCKET"), !path.isEmpty, path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else {
            fd = -1
            addressLength = 0
            return
        }
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        if bytes[0] == UInt8(ascii: "@") { bytes[0] = 0 }  // abstract namespace
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        addressLength = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count)
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    }

    deinit { if fd >= 0 { close(fd) } }

    public var isActive: Bool { fd >= 0 }

    /// Sends `KEY=value` lines in one datagram; failures are ignored (systemd may be gone). Never
    /// waits: a reader that stopped reading (its queue holds `net.unix.max_dgram_qlen` datagrams,
    /// 10 by default) must not stall the agent's loop, which would then miss SIGTERM until the
    /// stop-timeout; a notification it does not take is dropped.
    public func send(_ lines: [String]) {
        guard fd >= 0 else { return }
        let text = lines.joined(separator: "\n")
        var copy = address
        _ = text.utf8CString.withUnsafeBufferPointer { buffer in
            withUnsafePointer(to: &copy) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    sendto(fd, buffer.baseAddress, buffer.count - 1, Int32(MSG_NOSIGNAL | MSG_DONTWAIT), sa, addressLength)
                }
            }
        }
    }

    public func ready(status: String) { send(["READY=1", "STATUS=" + oneLine(status)]) }
    public func status(_ status: String) { send(["STATUS=" + oneLine(status)]) }
    public func watchdog() { send(["WATCHDOG=1"]) }
    public func stopping(_ status: String) { send(["STOPPING=1", "STATUS=" + oneLine(status)]) }

    /// RELOADING=1 carries the monotonic time, as `Type=notify-reload` wants: the kernel's, which
    /// systemd compares with its own, whatever clock the agent was given.
    public func reloading() {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        send(["RELOADING=1", "MONOTONIC_USEC=\(Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000)", "STATUS=reloading the config"])
    }

    private func oneLine(_ text: String) -> String {
        Printable.text(text).split(separator: "\n").joined(separator: "; ")
    }
}

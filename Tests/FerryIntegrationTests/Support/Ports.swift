import Foundation
import Synchronization

// Ports for the servers the tests start: chosen free, and a server counted as up only once its own
// process listens on them.

/// A TCP port on 127.0.0.1 that nothing is bound to, for a server a test starts. It is taken
/// below the kernel's ephemeral range (`ip_local_port_range`): a port the kernel handed out would be
/// free again once checked, and an outgoing connection of another test's ferry could take it as
/// its source port before the server binds it (seen: "python server did not start"). Never the
/// same port twice in one test process.
func freePort() -> UInt16 {
    let ephemeralLow = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))
        .flatMap { $0.split(whereSeparator: \.isWhitespace).first.flatMap { UInt16($0) } } ?? 32768
    let low: UInt16 = 10_000
    let high = max(ephemeralLow, low + 1_000)
    while true {
        let port = PortPool.next.withLock { next -> UInt16 in
            if next < low || next >= high { next = low + UInt16((UInt32(getpid()) &* 7919) % UInt32(high - low)) }
            defer { next = next + 1 >= high ? low : next + 1 }
            return next
        }
        if onLoopback(port, bind) == 0 { return port }
    }
}

/// `bind` or `connect` of a fresh TCP socket to 127.0.0.1:`port`, closed again; the call's result.
private func onLoopback(_ port: UInt16, _ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    return toLoopback(fd, port, call)
}

/// `call` (`bind` or `connect`) of socket `fd` to 127.0.0.1:`port`; the call's result.
func toLoopback(_ fd: Int32, _ port: UInt16, _ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    addr.sin_port = port.bigEndian
    return withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
}

/// A port the test process itself listens on, as a port in use that ferry is given: the port and
/// the socket, for the caller to close. Another port when another program took the first.
func listeningPort() throws -> (port: UInt16, socket: Int32) {
    for _ in 0..<5 {
        let port = freePort()
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if toLoopback(fd, port, bind) == 0 && listen(fd, 1) == 0 { return (port, fd) }
        close(fd)
    }
    throw TestFailure("no port of 127.0.0.1 could be listened on, five times over")
}

/// The next port `freePort` tries (0 until the first call picks a start).
private enum PortPool {
    static let next = Mutex<UInt16>(0)
}

/// Waits until something accepts connections on the port.
func waitForPort(_ port: UInt16, timeout: Double = 15) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if onLoopback(port, connect) == 0 { return true }
        usleep(20_000)
    }
    return false
}

/// The inodes of the TCP sockets listening on 127.0.0.1:`port` (or on every address), from
/// `/proc/net/tcp`: whoever holds them.
private func listeningSockets(on port: UInt16) -> Set<String> {
    guard let table = procFile("/proc/net/tcp") else { return [] }
    let wanted = [String(format: "0100007F:%04X", port), String(format: "00000000:%04X", port)]
    var inodes: Set<String> = []
    for line in table.split(separator: "\n").dropFirst() {
        let fields = line.split(separator: " ")
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        guard fields.count > 9, fields[3] == "0A", wanted.contains(String(fields[1])) else { continue }
        inodes.insert(String(fields[9]))
    }
    return inodes
}

/// A file of /proc read to its end: its size says 0, and Foundation's readers stop after the first
/// page of it (27 lines of /proc/net/tcp).
private func procFile(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return n == 0 ? String(decoding: bytes, as: UTF8.self) : nil }
        bytes += buffer[0..<n]
    }
}

/// The sockets the processes of process group `group` hold open, as `socket:[inode]` names them.
private func sockets(ofGroup group: pid_t) -> Set<String> {
    var held: Set<String> = []
    for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int32(entry) != nil {
        // /proc/PID/stat: "PID (COMM) STATE PPID PGRP …"; COMM may hold spaces, so after its ')'.
        guard let stat = procFile("/proc/\(entry)/stat"), let close = stat.lastIndex(of: ")") else { continue }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 2, Int32(fields[2]) == group else { continue }
        for fd in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(entry)/fd")) ?? [] {
            if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(entry)/fd/\(fd)"),
               target.hasPrefix("socket:[") { held.insert(String(target.dropFirst(8).dropLast())) }
        }
    }
    return held
}

/// Who listens on each of `ports`: the server `child` started (its process group, which `Child`
/// makes its own), another program, or nothing yet.
private enum Listener { case ours, other, none }
private func listeners(_ ports: [UInt16], _ child: Child) -> [Listener] {
    let found = ports.map(listeningSockets(on:))
    guard found.contains(where: { !$0.isEmpty }) else { return ports.map { _ in .none } }
    let held = sockets(ofGroup: child.pid)
    return found.map { $0.isEmpty ? .none : $0.isDisjoint(with: held) ? .other : .ours }
}

/// A port a server was to listen on turned out to be another program's.
private struct PortTaken: Error {}

/// Waits until the server `child` itself listens on every one of `ports`, not merely something
/// answering there: another program on the machine (another test run) may bind a port between
/// `freePort`'s check and the server's own bind. Throws `PortTaken` when one of the ports is
/// another program's, or the server ended saying a port was taken; `TestFailure` with the
/// end of its `logs` when it ended otherwise or did not listen within `timeout` seconds.
private func awaitListening(_ name: String, _ child: Child, _ ports: [UInt16], logs: [String], timeout: Double) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        // Who listens is asked once something accepts on every port: a connection is cheaper than
        // the tables of /proc.
        if ports.allSatisfy({ onLoopback($0, connect) == 0 }) {
            let who = listeners(ports, child)
            if who.allSatisfy({ $0 == .ours }) { return }
            if who.contains(.other) { throw PortTaken() }
        }
        let log = logs.compactMap(fileContents).joined(separator: "\n")
        if !child.isRunning || Date() >= deadline {
            // How servers say a port was taken: the C library's words, and SeaweedFS's own check.
            let said = log.lowercased()
            if said.contains("address already in use") || said.contains("port allocation failed") { throw PortTaken() }
            throw TestFailure("\(name) did not start on 127.0.0.1:\(ports.map(String.init).joined(separator: ",")): \(log.suffix(2000))")
        }
        usleep(20_000)
    }
}

/// Starts a server on `count` ports from `freePort`: `launch` starts its process on them and
/// names its log files. It is up once that process listens on every port (`awaitListening`); when
/// a port turned out to be another program's, the process is stopped, its logs removed, and it is
/// started again on fresh ports, up to 5 times. Returns the ports and the process.
func startListening(_ name: String, ports count: Int, timeout: Double = 30,
                    _ launch: ([UInt16]) throws -> (child: Child, logs: [String])) throws -> (ports: [UInt16], child: Child) {
    var attempts = 0
    while true {
        attempts += 1
        let ports = (0..<count).map { _ in freePort() }
        let (child, logs) = try launch(ports)
        do {
            try awaitListening(name, child, ports, logs: logs, timeout: timeout)
            return (ports, child)
        } catch is PortTaken where attempts < 5 {
            child.stop()
            logs.forEach { unlink($0) }
        } catch {
            child.stop()
            throw error is PortTaken ? TestFailure("\(name): another program took one of its ports, five times over") : error
        }
    }
}

/// Waits until the server `child`, started again on ports it had before, listens on them again.
func awaitListeningAgain(_ name: String, _ child: Child, _ ports: [UInt16], logs: [String], timeout: Double = 30) throws {
    do { try awaitListening(name, child, ports, logs: logs, timeout: timeout) } catch is PortTaken {
        throw TestFailure("\(name): another program took its port while it was stopped")
    }
}

/// One of the project's Python servers (scripts/`script`) on a port of its own, everything it
/// writes in `directory` (its log: `log` there), which goes when it cannot be started.
/// `arguments`: the script's arguments for the port it is given.
func startScript(_ name: String, _ script: String, in directory: String, log: String,
                 _ arguments: (UInt16) -> [String]) throws -> (port: UInt16, child: Child) {
    do {
        let started = try startListening(name, ports: 1) { ports in
            let child = try Child("python3", [Harness.packageRoot + "/scripts/" + script] + arguments(ports[0]),
                                  stdout: directory + "/" + log, stderr: directory + "/" + log)
            return (child, [directory + "/" + log])
        }
        return (started.ports[0], started.child)
    } catch {
        Harness.remove(directory)
        throw error
    }
}

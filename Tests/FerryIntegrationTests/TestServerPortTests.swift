import Foundation
import Testing

/// The servers the tests start take their ports from `freePort`, which checks a port is free; another
/// program on the machine may bind it before the server does. `startListening` counts a server as
/// up only when its own process listens, and starts it again on fresh ports when a port was taken.
@Suite struct TestServerPortTests {
    /// Another program listening on the port first: the server is started again on another port,
    /// and what answers there is the server, not the other program.
    @Test func aServerWhosePortIsTakenFirstStartsOnAnother() throws {
        let directory = Harness.temporaryDirectory("port-taken")
        defer { Harness.remove(directory) }
        try "served\n".writeReplacing(directory + "/probe.txt")
        var given: [UInt16] = []
        var squatter: Child?
        defer { squatter?.stop() }
        let started = try startListening("python server", ports: 1) { ports in
            given.append(ports[0])
            if given.count == 1 {
                let listen = "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', \(ports[0]))); s.listen(); time.sleep(600)"
                squatter = try Child("python3", ["-c", listen])
                guard waitForPort(ports[0]) else { throw TestFailure("the squatter did not listen") }
            }
            let log = directory + "/server-\(given.count).log"
            return (try Child("python3", ["-m", "http.server", String(ports[0]), "--bind", "127.0.0.1", "--directory", directory], stderr: log), [log])
        }
        defer { started.child.stop() }
        #expect(given.count == 2, "\(given)")
        #expect(started.ports == [given.last!])
        #expect(squatter?.isRunning == true, "the other program is left alone")
        let answer = runProcess("/usr/bin/curl", ["-s", "-m", "5", "http://127.0.0.1:\(started.ports[0])/probe.txt"])
        #expect(answer.stdout == "served\n", "\(answer.output)")
    }

    /// A server that ends for any other reason is not started again: its log is the error.
    @Test func aServerThatFailsOtherwiseIsNotStartedAgain() throws {
        let directory = Harness.temporaryDirectory("port-failed")
        defer { Harness.remove(directory) }
        var launches = 0
        #expect {
            _ = try startListening("failing server", ports: 1) { _ in
                launches += 1
                let log = directory + "/server.log"
                return (try Child("python3", ["-c", "import sys; sys.stderr.write('no configuration here'); sys.exit(3)"], stderr: log), [log])
            }
        } throws: { error in "\(error)".contains("failing server did not start") && "\(error)".contains("no configuration here") }
        #expect(launches == 1)
    }
}

import Foundation
import Testing

/// A mirror over a real nginx, synced once (exit 0) and ready to be changed: where most tests of
/// what a second run does begin. The remote is `nginx.root/site`, published in `box.published`.
final class SyncedMirror {
    let nginx: NginxServer
    let box: Sandbox
    /// The mirror as the first sync left it.
    let before: [String: String]

    init(_ label: String, session: [String] = [], files: [String: String], sourceLocation: SourceLocation = #_sourceLocation) throws {
        nginx = try NginxServer()
        box = Sandbox(label, published: nginx.root + "/site")
        for (path, content) in files { box.publish(path, content) }
        box.buildManifest()
        box.configure(remote: nginx.url + "site/", session: session)
        let first = box.sync()
        #expect(first.exitCode == 0, "first sync: \(first.output)", sourceLocation: sourceLocation)
        before = treeSnapshot(box.local)
    }

    deinit { nginx.stop() }

    /// Configures the session again, same remote, other keys.
    func configure(session: [String]) { box.configure(remote: nginx.url + "site/", session: session) }
}

/// Creates an empty file whose name is raw bytes (possibly not UTF-8) in `directory`.
func createFile(in directory: String, named bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
    let path = Array(directory.utf8) + [UInt8(ascii: "/")] + bytes + [0]
    let fd = path.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_CREAT | O_WRONLY, 0o644) } }
    #expect(fd >= 0, sourceLocation: sourceLocation)
    close(fd)
}

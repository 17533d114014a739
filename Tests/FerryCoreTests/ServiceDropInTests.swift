import Testing
@testable import FerryCore
import FerryRuntime

/// `ferry config units`: the drop-in grants each path the sessions write, once, and nothing else.
struct ServiceDropInTests {
    func config(_ text: String) throws -> Config { try ConfigParser.parse(text, path: "/etc/ferry/ferry.conf", allowingNoSession: true) }

    @Test func grantsWhatEachSessionWrites() throws {
        let c = try config("""
            [agent]
            metrics = /var/lib/node_exporter/ferry.prom
            [session a]
            remote = http://h/
            local = /srv/assets
            [session b]
            remote = http://h/
            local = /srv/www/site
            layout = generations
            [session c]
            remote = http://h/
            local = /srv/www/other
            [session up]
            direction = push
            remote = http://h/
            local = /srv/publish
            [session home]
            remote = http://h/
            local = /home/alice/mirror
            [session homepush]
            direction = push
            remote = http://h/
            local = /root/outbox
            """)
        let grants = ServiceDropIn.grants(for: c)
        #expect(grants.map(\.path) == ["/var/lib/node_exporter", "/srv/assets", "/srv/www", "/home/alice/mirror", "/root/outbox"])
        #expect(grants.map(\.writes) == [true, true, true, true, false])
        let text = ServiceDropIn.text(for: c) { $0 != "/srv/assets" }
        let lines = text.split(separator: "\n").filter { !$0.hasPrefix("#") }
        #expect(lines == ["[Service]", "ProtectHome=tmpfs", "ReadWritePaths=/var/lib/node_exporter", "ReadWritePaths=/srv/assets",
                          "ReadWritePaths=/srv/www", "BindPaths=/home/alice/mirror", "BindReadOnlyPaths=/root/outbox"])
        #expect(text.contains("it does not exist yet: make it before the unit starts, e.g. install -d -o ferry -g ferry /srv/assets"))
        // The push under /srv needs nothing: ProtectSystem=strict leaves it readable.
        #expect(!text.contains("/srv/publish"))
    }

    @Test func aFileRemoteIsGrantedAsItIsUsed() throws {
        let c = try config("""
            [session out]
            direction = push
            remote = file:///srv/outbox/
            local = /srv/publish
            [session fromhome]
            remote = file:///home/bob/published/
            local = /srv/mirror
            [session fromsrv]
            remote = file:///srv/published/
            local = /srv/mirror2
            """)
        let grants = ServiceDropIn.grants(for: c)
        #expect(grants.map(\.path) == ["/srv/outbox", "/home/bob/published", "/srv/mirror", "/srv/mirror2"])
        #expect(grants.map(\.writes) == [true, false, true, true])
        #expect(ServiceDropIn.text(for: c) { _ in true }.contains("BindReadOnlyPaths=/home/bob/published\n"))
    }

    @Test func noSessionNoPaths() throws {
        let text = ServiceDropIn.text(for: try config("[agent]\n")) { _ in true }
        #expect(text.split(separator: "\n").filter { !$0.hasPrefix("#") } == ["[Service]"])
    }

    @Test func aStateElsewhereAndTemporaryDirectoriesAreSaid() throws {
        let text = ServiceDropIn.text(for: try config("[agent]\nstate = /opt/ferry-state\n[session a]\nremote = http://h/\nlocal = /tmp/m\n")) { _ in true }
        #expect(text.contains("ReadWritePaths=/opt/ferry-state\n"))
        #expect(text.contains("PrivateTmp=yes"))
    }

    @Test(arguments: [("/srv/a b", "/srv/a\\x20b"), ("/srv/100%", "/srv/100%%"), ("/srv/back\\slash", "/srv/back\\\\slash"), ("/srv/é", "/srv/é"),
                            ("/srv/it's", "/srv/it\\x27s"), ("/srv/\"q\"", "/srv/\\x22q\\x22"), ("/srv/a\u{202E}b", "/srv/a\\u202eb"),
                            ("/srv/a\u{1B}[31mb", "/srv/a\\x1b[31mb"), ("/srv/line\nnext", "/srv/line\\x0anext"), ("/srv/del\u{7F}", "/srv/del\\x7f"),
                            ("/srv/tab\there", "/srv/tab\\x09here")])
    func pathsAreEscapedForUnitFiles(path: String, written: String) {
        #expect(ServiceDropIn.escaped(path) == written)
    }
}

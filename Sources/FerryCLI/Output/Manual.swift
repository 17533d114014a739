import FerryCore
import FerryRuntime

/// The manual page ferry(1), made from the commands' own help (their words, usage, summary,
/// details and options): one source, so it cannot drift from what `ferry help` prints (the shell
/// completion is made the same way: `Completion`). `scripts/package.sh` writes it into the package.
enum Manual {
    /// ferry(1) in troff's man macros. `date`: the page's date (the package's build date).
    static func page(date: String) -> String {
        var out = ".TH FERRY 1 \"\(date)\" \"ferry \(FerryVersion.string)\" \"User Commands\"\n"
        out += ".SH NAME\nferry \\- mirror remote content into local directories, verified and resumable\n"
        out += ".SH SYNOPSIS\n.B ferry\n.I COMMAND\n.RI [ OPTIONS ]\n.br\n.B ferry help\n.RI [ COMMAND ]\n.br\n.B ferry \\-\\-version\n"
        out += ".SH DESCRIPTION\n"
        out += text("""
            ferry mirrors remote content into local directories (pull) and publishes local directories \
            to a remote (push), from a manifest that lists each file's path, size, SHA-256, mtime and \
            mode. Every file's transfer is a task recorded in a SQLite state database, so a later run \
            resumes where the last one stopped, after a crash, kill -9, reboot or deadline. It runs \
            once (ferry sync now), from a systemd timer, or as a daemon (ferry agent).

            The config is read from \\-\\-config, else $FERRY_CONFIG, else /etc/ferry/ferry.conf; \
            ferry.conf(5) describes it. \\-\\-config, \\-\\-json and \\-\\-quiet may also come before the command.
            """, escaped: true)
        out += ".SH COMMANDS\n"
        for c in FerryCLI.commands {
            out += ".SS \"\(escape(c.name))\"\n"
            out += ".B ferry \(escape(c.usage))\n.PP\n"
            out += text(c.summary)
            if !c.details.isEmpty { out += ".PP\n" + text(c.details) }
            if !c.options.isEmpty {
                for o in c.options {
                    out += ".TP\n.B \(escape(o.name))" + (o.value.map { " \\fI\(escape($0))\\fR" } ?? "") + "\n" + escape(o.help) + "\n"
                }
            }
        }
        out += ".SH EXIT STATUS\n"
        for (code, meaning) in [("0", "in sync: everything asked for is done"), ("1", "some files failed (the others are done)"),
                                ("2", "usage or config error"), ("3", "stopped with work left (deadline, signal, delayed or held files): the next run resumes it"),
                                ("4", "the remote or its manifest failed or was refused"), ("5", "local I/O error"),
                                ("6", "busy: another ferry process holds the session")] {
            out += ".TP\n.B \(code)\n\(escape(meaning))\n"
        }
        out += remotes()
        out += ".SH ENVIRONMENT\n"
        for (name, meaning) in [("FERRY_CONFIG", "the config file when \\-\\-config is not given"),
                                ("AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN", "S3 credentials for sessions without s3\\-credentials"),
                                ("NOTIFY_SOCKET, WATCHDOG_USEC", "set by systemd: ferry agent speaks sd_notify and keeps the watchdog")] {
            out += ".TP\n.B \(name)\n\(meaning)\n"
        }
        out += ".SH FILES\n"
        for (path, meaning) in [("/etc/ferry/ferry.conf", "the config (ferry.conf(5))"),
                                ("/var/lib/ferry", "the state: SQLite database, cached manifests, locks, event logs, the agent's control socket"),
                                ("/lib/systemd/system/ferry.service", "the agent as a service, run as the user ferry"),
                                ("/lib/systemd/system/ferry\\-sync.timer", "a periodic ferry sync now, instead of the agent")] {
            out += ".TP\n.I \(path)\n\(meaning)\n"
        }
        out += ".SH EXAMPLES\n"
        for (title, lines) in examples {
            out += ".PP\n" + escape(title) + "\n.PP\n.RS 4\n.EX\n" + lines.map(escape).joined(separator: "\n") + "\n.EE\n.RE\n"
        }
        out += ".SH SEE ALSO\n.BR ferry.conf (5),\n.BR systemctl (1),\n.BR journalctl (1)\n"
        return out
    }

    /// REMOTES: each backend as it describes itself (`BackendDescription`): its URL, the keys
    /// only it takes with their help, the transport keys it takes, where its credentials come
    /// from and what it can do.
    private static func remotes() -> String {
        var out = ".SH REMOTES\n"
        out += text("The remote = URL of a session names its kind of remote by its scheme; each kind takes the keys below besides the common ones (ferry.conf(5)).")
        for backend in Backends.descriptions {
            out += ".SS \"\(escape(backend.name))\"\n.B remote = \(escape(backend.example))\n.PP\n"
            for key in backend.keys {
                out += ".TP\n.B \(escape(key.name))\n\(escape(key.help))\n"
            }
            let transport = ConfigKey.transport.filter(backend.transportKeys.contains)
            out += ".TP\nAlso takes\n\(escape(transport.isEmpty ? "none of ca-file, basic-auth-file, bearer-token-file" : transport.joined(separator: ", ")))\n"
            out += ".TP\nCredentials\n\(escape(backend.credentialSources.joined(separator: "; ")))\n"
            out += ".TP\nAbilities\n\(escape(backend.abilities.names.joined(separator: ", ")))\n"
        }
        return out
    }

    /// What an operator does most, each whole: the config's lines and the commands, in order.
    static let examples: [(String, [String])] = [
        ("Mirror a tree published over HTTPS, once, then see where it stands:", [
            "# /etc/ferry/ferry.conf", "[session assets]", "remote = https://mirror.example.net/assets/", "local = /srv/assets", "",
            "ferry config check", "ferry sync now", "ferry status"]),
        ("Publish a signed manifest, and mirror it into generations that switch whole (a reader sees one version or the next, never a mix):", [
            "# on the publisher", "ferry key generate --output /etc/ferry/sign.pem     # prints ed25519:PUBLIC", "ferry manifest build /srv/publish --sign /etc/ferry/sign.pem", "",
            "# on each mirror", "[session site]", "remote = https://origin.example.net/site/", "local = /srv/www/site", "trusted-keys = ed25519:PUBLIC",
            "layout = generations"]),
        ("Push a directory to S3 and mirror it elsewhere (credentials from the AWS chain: environment, ~/.aws, an instance role):", [
            "[session publish]", "direction = push", "remote = s3://assets-bucket/site/", "local = /srv/publish", "sign-key = /etc/ferry/sign.pem", "",
            "[session mirror]", "remote = s3://assets-bucket/site/", "local = /srv/site", "s3-region = eu-west-1"]),
        ("Publish to a WebDAV server (nginx with dav_methods, Apache mod_dav):", [
            "[session upload]", "direction = push", "remote = https://dav.example.net/site/", "local = /srv/publish",
            "basic-auth-file = /etc/ferry/dav.basic     # user:password, mode 0640, group ferry", "",
            "ferry sync now --session upload"]),
        ("Run the agent under systemd with metrics, after writing the sessions:", [
            "[agent]", "metrics-listen = 127.0.0.1:9469", "",
            "mkdir -p /etc/systemd/system/ferry.service.d /etc/systemd/system/ferry-sync.service.d",
            "ferry config units | tee /etc/systemd/system/ferry.service.d/ferry-paths.conf \\",
            "    /etc/systemd/system/ferry-sync.service.d/ferry-paths.conf >/dev/null",
            "systemctl daemon-reload && systemctl enable --now ferry.service",
            "curl -s http://127.0.0.1:9469/metrics | grep ferry_", "editor /etc/ferry/ferry.conf && systemctl reload ferry.service"]),
        ("See what a sync would change, without changing anything:", [
            "ferry sync now --dry-run --session assets", "ferry ls --session assets css/"]),
    ]

    /// Help text as man paragraphs: a blank line starts a paragraph, an indented line (a table
    /// like "exit codes:") is kept as it is laid out.
    private static func text(_ s: String, escaped: Bool = false) -> String {
        var out = ""
        var inBlock = false
        for line in s.split(separator: "\n", omittingEmptySubsequences: false) {
            let l = escaped ? String(line) : escape(String(line))
            if l.isEmpty {
                if inBlock { out += ".fi\n"; inBlock = false }
                out += ".PP\n"
                continue
            }
            let indented = line.hasPrefix(" ") || line.contains("  ") || line.hasSuffix(":")
            if indented && !inBlock { out += ".nf\n"; inBlock = true }
            if !indented && inBlock { out += ".fi\n"; inBlock = false }
            out += l + "\n"
        }
        if inBlock { out += ".fi\n" }
        return out
    }

    /// troff's specials: backslash, a dot or quote at the start of a line, and `-` (a minus
    /// sign, so options copy and paste).
    static func escape(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "\\": out += "\\e"
            case "-": out += "\\-"
            default: out.append(c)
            }
        }
        if out.hasPrefix(".") || out.hasPrefix("'") { out = "\\&" + out }
        return out
    }
}

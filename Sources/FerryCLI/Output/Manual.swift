import FerryCore
import FerryRuntime

/// The manual page ferry(1) and the shell completion, made from the commands' own help (their
/// words, usage, summary, details and options): one source, so they cannot drift from what
/// `ferry help` prints. `scripts/package.sh` writes them into the package.
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
        out += ".SH SEE ALSO\n.BR ferry.conf (5),\n.BR systemctl (1),\n.BR journalctl (1)\n"
        return out
    }

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

    /// A bash completion function for ferry: commands, their options, and the values some take.
    static func bashCompletion() -> String {
        var out = """
            # bash completion for ferry (made by `ferry completion bash` from ferry's own help)
            _ferry() {
                local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
                local i command="" rest=()
                for ((i = 1; i < COMP_CWORD; i++)); do
                    case "${COMP_WORDS[i]}" in
                        --config) ((i++)) ;;
                        -*) ;;
                        *) rest+=("${COMP_WORDS[i]}") ;;
                    esac
                done
                command="${rest[*]}"

            """
        // Values: options whose value is a file complete file names; some have a fixed set.
        out += "    case \"$prev\" in\n"
        var fileOptions = Set<String>(), fixed: [String: String] = [:]
        for c in FerryCLI.commands {
            for o in c.options {
                guard let v = o.value else { continue }
                if ["F", "FILE", "KEY", "DIR"].contains(v) { fileOptions.insert(o.name) }
                if v.contains("|") { fixed[o.name] = v.split(separator: "|").joined(separator: " ") }
                if v == "LEVEL" { fixed[o.name] = LogLevel.allCases.map(\.rawValue).joined(separator: " ") }
            }
        }
        for name in fileOptions.sorted() { out += "        \(name)) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n" }
        for (name, values) in fixed.sorted(by: { $0.key < $1.key }) { out += "        \(name)) COMPREPLY=($(compgen -W \"\(values)\" -- \"$cur\")); return ;;\n" }
        out += "    esac\n"
        out += "    case \"$command\" in\n"
        // The words that start a command, then each group's second words.
        let firsts = Array(Set(FerryCLI.commands.map { $0.words[0] })).sorted()
        out += "        \"\") COMPREPLY=($(compgen -W \"\(firsts.joined(separator: " ")) --version --help --config --json --quiet\" -- \"$cur\")) ;;\n"
        for group in firsts where FerryCLI.group(group).count > 0 {
            out += "        \(group)) COMPREPLY=($(compgen -W \"\(FerryCLI.group(group).map { $0.words[1] }.joined(separator: " "))\" -- \"$cur\")) ;;\n"
        }
        for c in FerryCLI.commands {
            var words = c.options.map(\.name)
            if c.words == HelpCommand.words { words += FerryCLI.commands.map { $0.words[0] } }
            if c.words == CompletionCommand.words { words += ["bash"] }
            out += "        \"\(c.name)\"*) COMPREPLY=($(compgen -W \"\(Array(NSOrderedWords(words)).joined(separator: " "))\" -- \"$cur\"))"
            if c.usage.contains("PATH") || c.usage.contains("DIR") || c.usage.contains(" F") { out += "; [[ $cur != -* ]] && COMPREPLY+=($(compgen -f -- \"$cur\"))" }
            out += " ;;\n"
        }
        out += "    esac\n}\ncomplete -F _ferry ferry\n"
        return out
    }

    /// Words once each, in their first order.
    private static func NSOrderedWords(_ words: [String]) -> [String] {
        var seen = Set<String>()
        return words.filter { seen.insert($0).inserted }
    }
}

/// `ferry completion bash`: the completion script, for /usr/share/bash-completion/completions/ferry.
struct CompletionCommand: Command {
    static let words = ["completion"]
    static let summary = "Print the shell completion script (bash)."
    static let usage = "completion bash"
    static let details = """
        The package installs it; to use it elsewhere: ferry completion bash > ~/.local/share/bash-completion/completions/ferry
        (zsh reads it too after autoload -U bashcompinit && bashcompinit).
        """
    static let options = [CommonOptions.help]

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(1...1, command: Self.name, what: "the shell (bash)")
        guard arguments.positionals[0] == "bash" else {
            throw .usage("ferry completion: no completion for '\(Printable.name(arguments.positionals[0]))'", hint: "ferry completion bash (zsh reads it through bashcompinit)")
        }
    }

    func run() throws(FerryError) -> ExitCode {
        Console.out(String(Manual.bashCompletion().dropLast()))
        return .inSync
    }
}

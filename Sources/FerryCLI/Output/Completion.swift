import FerryCore
import FerryRuntime

/// Shell completion for bash, zsh and fish, made from the command registry (each command's words,
/// options and their values), so no script can offer what `ferry help` does not list. Option
/// values complete by kind: files, a fixed set, or the session names of the config in use, which
/// the scripts ask of `ferry completion sessions` (reading `--config` from the line being typed).
enum Completion {
    /// What an option's value is, for completing it.
    enum Value: Equatable {
        case none
        case file
        case fixed([String])
        case session
        /// Anything (a duration, a number): nothing to offer.
        case free
    }

    struct Option {
        let name: String
        let help: String
        let value: Value
    }

    struct Entry {
        let words: [String]
        let summary: String
        let options: [Option]
        /// Takes a file or directory as an argument (`manifest build DIR`, `check PATH`).
        let takesPaths: Bool
    }

    static let shells = ["bash", "zsh", "fish"]

    static var entries: [Entry] {
        FerryCLI.commands.map { c in
            let options = c.options.map { o -> Option in
                let value: Value
                switch o.value {
                case nil: value = .none
                case let v? where o.name == "--session": value = v.isEmpty ? .free : .session
                case let v? where ["F", "FILE", "KEY", "DIR"].contains(v): value = .file
                case "LEVEL": value = .fixed(LogLevel.allCases.map(\.rawValue))
                case let v? where v.contains("|"): value = .fixed(v.split(separator: "|").map(String.init))
                default: value = .free
                }
                return Option(name: o.name, help: o.help, value: value)
            }
            return Entry(words: c.words, summary: c.summary, options: options,
                         takesPaths: c.usage.contains("PATH") || c.usage.contains("DIR") || c.usage.contains(" F"))
        }
    }

    /// The words that start a command, and each group's second words.
    static var firstWords: [String] { Array(Set(FerryCLI.commands.map { $0.words[0] })).sorted() }
    static let globalWords = ["--version", "--help", "--config", "--json", "--quiet"]

    /// Words a command's position offers besides its options (`help COMMAND`, `completion SHELL`).
    static func arguments(of e: Entry) -> [String] {
        if e.words == HelpCommand.words { return firstWords }
        if e.words == CompletionCommand.words { return shells }
        return []
    }

    static func unique(_ words: [String]) -> [String] {
        var seen = Set<String>()
        return words.filter { seen.insert($0).inserted }
    }

    /// Every option with a value of a kind, across commands (an option means one thing everywhere).
    static func allOptions(_ test: (Value) -> Bool) -> [String] {
        unique(entries.flatMap(\.options).filter { test($0.value) }.map(\.name)).sorted()
    }

    static var fixedValues: [(String, [String])] {
        var out: [String: [String]] = [:]
        for o in entries.flatMap(\.options) { if case .fixed(let values) = o.value { out[o.name] = values } }
        return out.sorted { $0.key < $1.key }
    }

    /// What bash and zsh offer after the command words typed so far, as `case` branches: the
    /// pattern of those words, the words offered, and whether file names are offered too.
    static var commandCases: [(pattern: String, words: [String], files: Bool)] {
        var out: [(pattern: String, words: [String], files: Bool)] = [("\"\"", firstWords + globalWords, false)]
        for group in firstWords where !FerryCLI.group(group).isEmpty {
            out.append((group, FerryCLI.group(group).map { $0.words[1] }, false))
        }
        for e in entries {
            out.append(("\"\(e.words.joined(separator: " "))\"*", unique(e.options.map(\.name) + arguments(of: e)), e.takesPaths))
        }
        return out
    }

    // MARK: bash

    /// The start of the bash script, which reads the words typed so far (`bash()` adds the registry's `case` branches).
    private static let bashPreamble = """
        # bash completion for ferry (made by `ferry completion bash` from ferry's own help)
        _ferry() {
            local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
            local i command="" config="" rest=()
            for ((i = 1; i < COMP_CWORD; i++)); do
                case "${COMP_WORDS[i]}" in
                    --config) config="${COMP_WORDS[i+1]}"; ((i++)) ;;
                    -*) ;;
                    *) rest+=("${COMP_WORDS[i]}") ;;
                esac
            done
            command="${rest[*]}"

        """

    static func bash() -> String {
        var out = bashPreamble
        out += "    case \"$prev\" in\n"
        out += "        --session) COMPREPLY=($(compgen -W \"$(ferry completion sessions ${config:+--config \"$config\"} 2>/dev/null)\" -- \"$cur\")); return ;;\n"
        for name in allOptions({ $0 == .file }) { out += "        \(name)) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n" }
        for (name, values) in fixedValues { out += "        \(name)) COMPREPLY=($(compgen -W \"\(values.joined(separator: " "))\" -- \"$cur\")); return ;;\n" }
        out += "    esac\n"
        out += "    case \"$command\" in\n"
        for c in commandCases {
            out += "        \(c.pattern)) COMPREPLY=($(compgen -W \"\(c.words.joined(separator: " "))\" -- \"$cur\"))"
                + (c.files ? "; [[ $cur != -* ]] && COMPREPLY+=($(compgen -f -- \"$cur\"))" : "") + " ;;\n"
        }
        out += "    esac\n}\ncomplete -F _ferry ferry\n"
        return out
    }

    // MARK: zsh

    /// An autoloaded completion function (`_ferry` in $fpath, as the package installs it).
    static func zsh() -> String {
        var out = """
            #compdef ferry
            # zsh completion for ferry (made by `ferry completion zsh` from ferry's own help)
            local cur=${words[CURRENT]} prev=${words[CURRENT-1]} config= i
            local -a rest
            for ((i = 2; i < CURRENT; i++)); do
                case ${words[i]} in
                    --config) config=${words[i+1]}; ((i++)) ;;
                    -*) ;;
                    *) rest+=(${words[i]}) ;;
                esac
            done

            """
        out += "case $prev in\n"
        out += "    --session) compadd -- ${(f)\"$(ferry completion sessions ${config:+--config} $config 2>/dev/null)\"}; return ;;\n"
        let files = allOptions { $0 == .file }
        if !files.isEmpty { out += "    \(files.joined(separator: "|"))) _files; return ;;\n" }
        for (name, values) in fixedValues { out += "    \(name)) compadd -- \(values.joined(separator: " ")); return ;;\n" }
        out += "esac\n"
        out += "case \"${rest[*]}\" in\n"
        for c in commandCases {
            out += "    \(c.pattern)) compadd -- \(c.words.joined(separator: " "))" + (c.files ? "; [[ $cur != -* ]] && _files" : "") + " ;;\n"
        }
        out += "esac\n"
        return out
    }

    // MARK: fish

    static func fish() -> String {
        var out = """
            # fish completion for ferry (made by `ferry completion fish` from ferry's own help)
            function __ferry_words --description 'the command words typed so far, and the config'
                set -l tokens (commandline -opc)
                set -e tokens[1]
                set -l config
                set -l skip 0
                for t in $tokens
                    if test $skip = 1
                        set config $t
                        set skip 0
                    else if test "$t" = --config
                        set skip 1
                    else if not string match -q -- '-*' $t
                        echo $t
                    end
                end
            end
            function __ferry_is --description 'the command typed so far is exactly this'
                test "$(string join ' ' (__ferry_words))" = "$argv"
            end
            function __ferry_sessions
                set -l tokens (commandline -opc)
                set -l i (contains -i -- --config $tokens)
                if test -n "$i"; and test (count $tokens) -gt $i
                    ferry completion sessions --config $tokens[(math $i + 1)] 2>/dev/null
                else
                    ferry completion sessions 2>/dev/null
                end
            end
            complete -c ferry -f

            """
        func quoted(_ s: String) -> String { "'" + s.replacingAll("\\", with: "\\\\").replacingAll("'", with: "\\'") + "'" }
        for first in firstWords {
            let summary = FerryCLI.group(first).isEmpty ? FerryCLI.commands.first { $0.words == [first] }?.summary ?? "" : "\(first) commands"
            out += "complete -c ferry -n 'test -z \"$(__ferry_words)\"' -a \(first) -d \(quoted(summary))\n"
        }
        for option in globalWords { out += "complete -c ferry -n 'test -z \"$(__ferry_words)\"' -l \(option.dropFirst(2))\n" }
        for group in firstWords where FerryCLI.group(group).count > 0 {
            for c in FerryCLI.group(group) {
                out += "complete -c ferry -n '__ferry_is \(group)' -a \(c.words[1]) -d \(quoted(c.summary))\n"
            }
        }
        for e in entries {
            let condition = "-n '__ferry_is \(e.words.joined(separator: " "))'"
            for o in e.options {
                let flag = o.name.hasPrefix("--") ? "-l \(o.name.dropFirst(2))" : "-s \(o.name.dropFirst())"
                var line = "complete -c ferry \(condition) \(flag) -d \(quoted(o.help))"
                switch o.value {
                case .none: break
                case .file: line += " -r -F"
                case .fixed(let values): line += " -x -a \(quoted(values.joined(separator: " ")))"
                case .session: line += " -x -a '(__ferry_sessions)'"
                case .free: line += " -x"
                }
                out += line + "\n"
            }
            let args = arguments(of: e)
            if !args.isEmpty { out += "complete -c ferry \(condition) -a \(quoted(args.joined(separator: " ")))\n" }
            if e.takesPaths { out += "complete -c ferry \(condition) -F\n" }
        }
        return out
    }
}

extension String {
    /// Every `target` replaced (FerryCLI does not import Foundation).
    func replacingAll(_ target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}

/// `ferry completion bash|zsh|fish`: the completion script; `ferry completion sessions` lists the
/// config's session names for the scripts.
struct CompletionCommand: Command {
    static let words = ["completion"]
    static let summary = "Print the shell completion script (bash, zsh or fish)."
    static let usage = "completion bash|zsh|fish [--config F]"
    static let details = """
        The package installs all three. To use one elsewhere:
          ferry completion bash > ~/.local/share/bash-completion/completions/ferry
          ferry completion zsh > ~/.zfunc/_ferry      (with fpath+=(~/.zfunc) before compinit)
          ferry completion fish > ~/.config/fish/completions/ferry.fish
        Session names after --session come from the config the line names with --config (else
        $FERRY_CONFIG, else /etc/ferry/ferry.conf), through ferry completion sessions.
        """
    static let options = [CommonOptions.config, CommonOptions.help]

    let what: String
    let configPath: String?

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(1...1, command: Self.name, what: "the shell (bash, zsh or fish)")
        what = arguments.positionals[0]
        configPath = arguments.value("--config")
        guard Completion.shells.contains(what) || what == "sessions" else {
            throw .usage("ferry completion: no completion for '\(Printable.name(what))'", hint: "ferry completion bash, zsh or fish")
        }
    }

    func run() throws(FerryError) -> ExitCode {
        switch what {
        case "bash": Console.json(String(Completion.bash().dropLast()))
        case "zsh": Console.json(String(Completion.zsh().dropLast()))
        case "fish": Console.json(String(Completion.fish().dropLast()))
        default:
            // For the scripts: names only, nothing on error (a completion never prints one).
            guard let config = try? ConfigLoader.load(path: ConfigLoader.resolvePath(configPath), allowingNoSession: true) else { return .usage }
            for s in config.sessions { Console.json(s.name) }
        }
        return .inSync
    }
}

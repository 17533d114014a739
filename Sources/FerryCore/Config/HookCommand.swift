/// A hook's command line (`on-file-done`, `on-session-done`): a program and its arguments, split
/// once when the config is read and never given to a shell. Words are separated by spaces or
/// tabs; '...' keeps everything literally, "..." keeps spaces and takes \" and \\ as escapes, and a
/// backslash outside quotes escapes the next character. There is no expansion of any kind: `$`,
/// `*`, `~`, `;` and `|` are ordinary characters. What changes per event (the session, the path,
/// the result) reaches the hook only through its environment (`FERRY_PATH`, ...), never spliced
/// into its arguments, so a hostile name cannot become a command.
public struct HookCommand: Sendable, Equatable, CustomStringConvertible {
    public let arguments: [String]

    public init(parsing text: String) throws(ConfigProblem) {
        var words: [String] = []
        var word = ""
        var inWord = false
        var iterator = text.unicodeScalars.makeIterator()
        while let c = iterator.next() {
            switch c {
            case " ", "\t":
                if inWord { words.append(word); word = ""; inWord = false }
            case "'":
                inWord = true
                var closed = false
                while let d = iterator.next() {
                    if d == "'" { closed = true; break }
                    word.unicodeScalars.append(d)
                }
                guard closed else { throw ConfigProblem("a ' quote is not closed") }
            case "\"":
                inWord = true
                var closed = false
                while let d = iterator.next() {
                    if d == "\"" { closed = true; break }
                    if d == "\\" {
                        guard let e = iterator.next() else { break }
                        if e != "\"" && e != "\\" { word.unicodeScalars.append("\\") }
                        word.unicodeScalars.append(e)
                    } else {
                        word.unicodeScalars.append(d)
                    }
                }
                guard closed else { throw ConfigProblem("a \" quote is not closed") }
            case "\\":
                guard let e = iterator.next() else { throw ConfigProblem("the command ends with a lone backslash") }
                inWord = true
                word.unicodeScalars.append(e)
            default:
                if c.value < 0x20 || c.value == 0x7F { throw ConfigProblem("the command holds a control character") }
                inWord = true
                word.unicodeScalars.append(c)
            }
        }
        if inWord { words.append(word) }
        guard let program = words.first, !program.isEmpty else { throw ConfigProblem("the command is empty") }
        arguments = words
    }

    public var program: String { arguments[0] }

    /// The words, quoted where needed, as a user would write them.
    public var description: String {
        arguments.map { word in
            word.isEmpty || word.contains(where: { " \t'\"\\".contains($0) }) ? "'" + word.replacingAll("'", with: "'\\''") + "'" : word
        }.joined(separator: " ")
    }
}

extension String {
    func replacingAll(_ target: Character, with replacement: String) -> String {
        var out = ""
        for c in self { if c == target { out += replacement } else { out.append(c) } }
        return out
    }
}

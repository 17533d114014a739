/// The session's `exclude =` and `include =` patterns (and `manifest build --exclude`): which paths
/// a session transfers. The one place that decides it; pull, push, check and the manifest builder
/// ask `admits`.
///
/// Patterns are gitignore's globs: `*` and `?` match within one path segment, `[a-z]` a class
/// (`[!...]` its complement), `**` any number of segments, `\` quotes the next character. A pattern
/// without a `/` (but a trailing one) matches a name at any depth (`*.tmp`); one with a `/` is
/// anchored at the root (`logs/**/*.gz`, `/build`); a trailing `/` matches directories only
/// (`.git/`). A path whose directory matches is matched with everything under it.
///
/// A path is admitted when no `exclude` pattern matches it and, if there are `include` patterns,
/// one of them does (`include = *.iso docs/`: only these). Excluded paths are never transferred,
/// deleted or listed: a local file that matches is protected from pull's deletions and is never
/// published by push.
public struct PathFilter: Sendable, Equatable, CustomStringConvertible {
    public private(set) var excludes: [Pattern] = []
    public private(set) var includes: [Pattern] = []

    public init() {}

    public init(exclude: [String], include: [String] = []) throws(PatternProblem) {
        for text in exclude { excludes.append(try Pattern(text)) }
        for text in include { includes.append(try Pattern(text)) }
    }

    public var isEmpty: Bool { excludes.isEmpty && includes.isEmpty }

    public var description: String {
        var parts: [String] = []
        if !excludes.isEmpty { parts.append("exclude = " + excludes.map(\.text).joined(separator: " ")) }
        if !includes.isEmpty { parts.append("include = " + includes.map(\.text).joined(separator: " ")) }
        return parts.joined(separator: "; ")
    }

    /// Adds `exclude` patterns (a command line's `--exclude`).
    public mutating func exclude(_ texts: [String]) throws(PatternProblem) {
        for text in texts { excludes.append(try Pattern(text)) }
    }

    /// Whether the session transfers `path` (a directory when `isDirectory`). A directory is judged
    /// by `exclude` alone: `include` picks files, and the directories that hold them follow.
    public func admits(_ path: RelativePath, isDirectory: Bool = false) -> Bool {
        if isEmpty { return true }
        let segments = Self.segments(path)
        if matches(excludes, segments, isDirectory: isDirectory) { return false }
        if includes.isEmpty || isDirectory { return true }
        return matches(includes, segments, isDirectory: false)
    }

    /// True when a pattern matches the path itself or one of its directories.
    private func matches(_ patterns: [Pattern], _ segments: [[Unicode.Scalar]], isDirectory: Bool) -> Bool {
        guard !patterns.isEmpty else { return false }
        for end in 1...segments.count {
            let directory = end < segments.count || isDirectory
            for p in patterns where directory || !p.directoriesOnly {
                if p.matches(segments[0..<end]) { return true }
            }
        }
        return false
    }

    static func segments(_ path: RelativePath) -> [[Unicode.Scalar]] {
        path.string.split(separator: "/", omittingEmptySubsequences: false).map { Array($0.unicodeScalars) }
    }

    /// Why a pattern was refused (the config parser names the line).
    public struct PatternProblem: Error, Sendable, CustomStringConvertible {
        public let pattern: String
        public let reason: String
        public var description: String { "'\(pattern)' is not a pattern: \(reason)" }
    }

    /// Splits a config value into patterns at spaces and tabs; `\ ` keeps a space in one.
    public static func words(_ value: String) -> [String] {
        var words: [String] = [], current = "", escaped = false
        for c in value {
            if escaped { current.append(c); escaped = false; continue }
            if c == "\\" { current.append(c); escaped = true; continue }
            if c == " " || c == "\t" {
                if !current.isEmpty { words.append(current); current = "" }
                continue
            }
            current.append(c)
        }
        if !current.isEmpty { words.append(current) }
        return words
    }

    /// One compiled glob.
    public struct Pattern: Sendable, Equatable {
        /// As written.
        public let text: String
        let directoriesOnly: Bool
        /// Matched from the root; otherwise against a name at any depth (a leading `**`).
        let segments: [Segment]

        enum Segment: Sendable, Equatable {
            /// `**`: any number of segments, none included.
            case anyDepth
            case glob([Token])
        }

        enum Token: Sendable, Equatable {
            case literal(Unicode.Scalar)
            case one
            case any
            case set([ClosedRange<Unicode.Scalar>], negated: Bool)
        }

        public init(_ text: String) throws(PatternProblem) {
            self.text = text
            var body = Substring(text)
            guard !body.isEmpty else { throw PatternProblem(pattern: text, reason: "it is empty") }
            if body.hasPrefix("!") {
                throw PatternProblem(pattern: text, reason: "'!' negation is not supported; list what to keep with include =, or write \\! for a name that starts with '!'")
            }
            var directoriesOnly = false
            if body.hasSuffix("/") && !body.hasSuffix("\\/") {
                directoriesOnly = true
                body = body.dropLast()
            }
            let anchored = body.dropFirst().contains("/") || body.hasPrefix("/")
            if body.hasPrefix("/") { body = body.dropFirst() }
            guard !body.isEmpty else { throw PatternProblem(pattern: text, reason: "it names no path") }
            var segments: [Segment] = anchored ? [] : [.anyDepth]
            for part in body.split(separator: "/", omittingEmptySubsequences: false) {
                guard !part.isEmpty else { throw PatternProblem(pattern: text, reason: "it has an empty segment ('//')") }
                if part == "**" {
                    if segments.last != .anyDepth { segments.append(.anyDepth) }
                    continue
                }
                segments.append(.glob(try Self.tokens(Array(part.unicodeScalars), text)))
            }
            self.directoriesOnly = directoriesOnly
            self.segments = segments
        }

        private static func tokens(_ s: [Unicode.Scalar], _ text: String) throws(PatternProblem) -> [Token] {
            var out: [Token] = []
            var i = 0
            while i < s.count {
                let c = s[i]
                switch c {
                case "\\":
                    guard i + 1 < s.count else { throw PatternProblem(pattern: text, reason: "it ends with a lone '\\'") }
                    out.append(.literal(s[i + 1]))
                    i += 2
                    continue
                case "*":
                    if out.last != .any { out.append(.any) }
                case "?":
                    out.append(.one)
                case "[":
                    var j = i + 1
                    var negated = false
                    if j < s.count, s[j] == "!" || s[j] == "^" { negated = true; j += 1 }
                    var ranges: [ClosedRange<Unicode.Scalar>] = []
                    var first = true
                    while j < s.count, s[j] != "]" || first {
                        first = false
                        var lo = s[j]
                        if lo == "\\", j + 1 < s.count { j += 1; lo = s[j] }
                        if j + 2 < s.count, s[j + 1] == "-", s[j + 2] != "]" {
                            var hi = s[j + 2]
                            if hi == "\\", j + 3 < s.count { j += 1; hi = s[j + 2] }
                            guard lo <= hi else { throw PatternProblem(pattern: text, reason: "the range \(lo)-\(hi) is backwards") }
                            ranges.append(lo...hi)
                            j += 3
                        } else {
                            ranges.append(lo...lo)
                            j += 1
                        }
                    }
                    guard j < s.count else { throw PatternProblem(pattern: text, reason: "a '[' has no closing ']'") }
                    out.append(.set(ranges, negated: negated))
                    i = j
                default:
                    out.append(.literal(c))
                }
                i += 1
            }
            return out
        }

        func matches(_ path: ArraySlice<[Unicode.Scalar]>) -> Bool {
            Self.match(segments[...], path)
        }

        private static func match(_ pattern: ArraySlice<Segment>, _ path: ArraySlice<[Unicode.Scalar]>) -> Bool {
            guard let first = pattern.first else { return path.isEmpty }
            switch first {
            case .anyDepth:
                let rest = pattern.dropFirst()
                var p = path
                while true {
                    if match(rest, p) { return true }
                    guard !p.isEmpty else { return false }
                    p = p.dropFirst()
                }
            case .glob(let tokens):
                guard let segment = path.first, glob(tokens[...], segment[...]) else { return false }
                return match(pattern.dropFirst(), path.dropFirst())
            }
        }

        private static func glob(_ tokens: ArraySlice<Token>, _ name: ArraySlice<Unicode.Scalar>) -> Bool {
            guard let t = tokens.first else { return name.isEmpty }
            switch t {
            case .any:
                let rest = tokens.dropFirst()
                if rest.isEmpty { return true }
                var n = name
                while true {
                    if glob(rest, n) { return true }
                    guard !n.isEmpty else { return false }
                    n = n.dropFirst()
                }
            case .one:
                return !name.isEmpty && glob(tokens.dropFirst(), name.dropFirst())
            case .literal(let c):
                return name.first == c && glob(tokens.dropFirst(), name.dropFirst())
            case .set(let ranges, let negated):
                guard let c = name.first else { return false }
                return ranges.contains(where: { $0.contains(c) }) != negated && glob(tokens.dropFirst(), name.dropFirst())
            }
        }
    }
}

/// A switch whose `on-switch-check` has not ended: the generation switched to, the one to return
/// to if the check fails (nil: there was none), and the manifest version it holds. Recorded
/// before the switch and cleared once the check passed or the previous generation is current
/// again, so a run killed in between is finished by the next.
public struct SwitchCheck: Sendable, Equatable {
    public let generation: Int
    public let previous: Int?
    public let version: Int64?

    /// `g<N> g<M>|- <version>|-`, as the state keeps it.
    public var text: String {
        "\(GenerationName.of(generation)) \(previous.map(GenerationName.of) ?? "-") \(version.map(String.init) ?? "-")"
    }

    public init(generation: Int, previous: Int?, version: Int64?) {
        self.generation = generation
        self.previous = previous
        self.version = version
    }

    public init?(text: String) {
        let words = text.split(separator: " ").map(String.init)
        guard words.count == 3, let generation = GenerationName.number(words[0]) else { return nil }
        self.generation = generation
        previous = GenerationName.number(words[1])
        version = Int64(words[2])
    }
}

/// How a generation of `layout = generations` is named in its directory: `g<N>`, N from 1, no
/// leading zero.
public enum GenerationName {
    public static func of(_ number: Int) -> String { "g\(number)" }

    /// `g<N>` → N; nil for any other name.
    public static func number(_ name: String) -> Int? {
        guard name.hasPrefix("g"), name.count > 1, name.count < 19 else { return nil }
        let digits = name.dropFirst()
        guard digits.allSatisfy({ $0 >= "0" && $0 <= "9" }), digits.first != "0" || digits.count == 1 else {
            return nil
        }
        return Int(digits)
    }
}

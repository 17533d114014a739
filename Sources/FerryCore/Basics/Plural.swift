/// Counted nouns in messages: "1 file", "2 files", never "1 files".
public enum Plural {
    /// `n` and `noun`, plural when `n` is not 1 (`noun` + "s" unless `plural` is given).
    public static func count(_ n: Int, _ noun: String, plural: String? = nil) -> String {
        "\(n) " + (n == 1 ? noun : plural ?? noun + "s")
    }

    /// The noun alone, for `n` of them.
    public static func noun(_ n: Int, _ noun: String, plural: String? = nil) -> String {
        n == 1 ? noun : plural ?? noun + "s"
    }
}

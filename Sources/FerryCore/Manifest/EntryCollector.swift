extension Manifest {
    /// Gathers entries as a parser reads them. A duplicate that follows its twin (always, in a
    /// sorted manifest such as ferry writes) is found at once, where the reader can name its place;
    /// entries out of order are sorted at the end, and a duplicate among them is found then.
    struct EntryCollector {
        private(set) var entries: [ManifestEntry] = []
        private var ordered = true

        init(capacity: Int) { entries.reserveCapacity(capacity) }

        /// False when `entry` repeats the path just before it.
        mutating func add(_ entry: ManifestEntry) -> Bool {
            if let last = entries.last {
                let c = last.path.compare(entry.path)
                if c == 0 { return false }
                if c > 0 { ordered = false }
            }
            entries.append(entry)
            return true
        }

        /// The entries in path order, or the first path listed twice.
        consuming func finish() -> (entries: [ManifestEntry], duplicate: RelativePath?) {
            if !ordered {
                entries.sort { $0.path < $1.path }
                for (a, b) in zip(entries, entries.dropFirst()) where a.path == b.path { return (entries, a.path) }
            }
            return (entries, nil)
        }
    }
}

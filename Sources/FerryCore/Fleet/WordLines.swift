/// The lines of a text file of space-separated words (a ledger, the objects kept beside it), split
/// as bytes: splitting a `String` at `Character`s breaks graphemes, and for 10,000 lines of kept
/// reports that was most of a read again (0.9 s of 2.1).
enum WordLines {
    /// Calls `body` with the words of each line that is not empty; after `maxSplits` splits the
    /// rest of the line is the last word. Runs of spaces count as one.
    static func each(_ text: String, maxSplits: Int, _ body: ([String]) -> Void) {
        var copy = text
        copy.withUTF8 { bytes in
            var start = 0
            while start < bytes.count {
                var end = start
                while end < bytes.count && bytes[end] != 0x0A { end += 1 }
                if end > start { body(words(UnsafeBufferPointer(rebasing: bytes[start..<end]), maxSplits: maxSplits)) }
                start = end + 1
            }
        }
    }

    private static func words(_ line: UnsafeBufferPointer<UInt8>, maxSplits: Int) -> [String] {
        var out: [String] = []
        var i = 0
        while i < line.count {
            while i < line.count && line[i] == 0x20 { i += 1 }
            guard i < line.count else { break }
            var j = i
            if out.count < maxSplits {
                while j < line.count && line[j] != 0x20 { j += 1 }
            } else {
                j = line.count
            }
            out.append(String(decoding: UnsafeBufferPointer(rebasing: line[i..<j]), as: UTF8.self))
            i = j
        }
        return out
    }
}

import Foundation
import Testing

/// `scripts/shape.py`, the check `scripts/test.sh` runs before it builds: the project as it is
/// passes it, and a scratch copy of the layout with one violation of each kind planted fails it,
/// naming each: a folder of FerryRuntime that uses one above it, a folder not in the layer order,
/// a file over 600 lines, a Swift function over 80 lines and a Python one.
@Suite
struct ShapeTests {
    static let script = Harness.packageRoot + "/scripts/shape.py"

    func shape(in directory: String) -> FerryRun {
        runProcess("/bin/sh", ["-c", "cd '\(directory)' && exec python3 '\(Self.script)'"])
    }

    func write(_ text: String, to path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// A function of `lines` lines (its declaration to its closing brace).
    func swiftFunction(_ name: String, lines: Int) -> String {
        "    func \(name)() {\n" + (0..<(lines - 2)).map { "        let v\($0) = \($0)\n" }.joined() + "    }\n"
    }

    @Test func theProjectKeepsItsShape() {
        let run = shape(in: Harness.packageRoot)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(run.stdout.contains("layers hold"), "\(run.output)")
    }

    @Test func eachKindOfViolationFailsTheCheckAndIsNamed() throws {
        let root = Harness.temporaryDirectory("shape")
        defer { Harness.remove(root) }
        let runtime = root + "/Sources/FerryRuntime"
        // Local (the lowest layer) names a type Session declares: an upward use, so a cycle.
        try write("struct SessionThing {}\nstruct Caller { let s: LocalThing }\n",
                  to: runtime + "/Session/SessionThing.swift")
        try write("struct LocalThing { let up: SessionThing? }\n", to: runtime + "/Local/LocalThing.swift")
        try write("struct Loose {}\n", to: runtime + "/Unlisted/Loose.swift")
        try write("enum Core {}\n", to: root + "/Sources/FerryCore/Basics/Core.swift")
        try write(String(repeating: "// line\n", count: 601), to: root + "/Tests/Long/LongTests.swift")
        try write("struct Holder {\n" + swiftFunction("long", lines: 81) + swiftFunction("short", lines: 80) + "}\n",
                  to: runtime + "/Engine/Holder.swift")
        try write("def long():\n" + (0..<80).map { "    x\($0) = \($0)\n" }.joined(), to: root + "/scripts/long.py")

        let run = shape(in: root)
        #expect(run.exitCode == 1, "\(run.output)")
        let said = run.stderr
        #expect(said.contains("Sources/FerryRuntime/Local uses Session, a layer above it (SessionThing)"), "\(said)")
        #expect(said.contains("Sources/FerryRuntime/Unlisted: not in the layer order"), "\(said)")
        #expect(said.contains("Tests/Long/LongTests.swift: 601 lines (at most 600"), "\(said)")
        #expect(said.contains("Sources/FerryRuntime/Engine/Holder.swift:2: long is 81 lines (at most 80)"), "\(said)")
        #expect(!said.contains(": short is"), "a function of 80 lines is within the limit: \(said)")
        #expect(said.contains("scripts/long.py:1: long is 81 lines (at most 80)"), "\(said)")
        #expect(!said.contains("Session uses Local"), "a use of a layer below is no problem: \(said)")
    }
}

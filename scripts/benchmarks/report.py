"""The report, docs/benchmarks.md: written whole after a full run, or with the sections measured
alone (--only) put in place of theirs; one renderer per kind of section.

A section is (title, table, reference, target, target text[, note]); its reference says its kind:
"at-rest" (table: agent_at_rest's tuple), "text" (table: the lines), "resend" (table: MiB a relaunch
sent, by tool), None (a kill: (MiB again, of it on disk, all correct) by tool), else a table of
measure()'s rows against a tool's label or ("absolute", wall seconds, RSS MiB)."""
import os
import subprocess
import sys


def peer_versions():
    """The first line of each peer's (and server's) version, by tool."""
    versions = {}
    for tool, cmd in [("curl", ["curl", "--version"]), ("aria2c", ["aria2c", "--version"]),
                      ("rclone", ["rclone", "--version"]), ("wget", ["wget", "--version"]), ("nginx", ["nginx", "-v"]),
                      ("sshd", ["/usr/sbin/sshd", "-V"]), ("zsync", ["zsync", "-V"]),
                      ("casync", ["casync", "--version"])]:
        p = subprocess.run(cmd, capture_output=True, text=True)
        versions[tool] = ((p.stdout or p.stderr).splitlines() or ["?"])[0]
    return versions


def merge_report(path, sections, runs):
    """Renders `sections` and puts each in place of the section of the same title in the report at
    `path` (appended when new); the rest of the report stays as it was."""
    scratch = path + ".part"
    write_report(scratch, sections, runs, {})
    fresh_parts = open(scratch).read().split("\n## ")[1:]
    os.unlink(scratch)
    old = open(path).read().split("\n## ")
    head, parts = old[0], old[1:]
    for part in fresh_parts:
        title = part.split("\n", 1)[0]
        index = next((i for i, p in enumerate(parts) if p.split("\n", 1)[0] == title), None)
        if index is None:
            parts.append(part)
        else:
            parts[index] = part
    open(path, "w").write("\n## ".join([head] + [p.rstrip("\n") + "\n" for p in parts]))
    print(f"merged {len(fresh_parts)} sections into {path}", file=sys.stderr)


def write_report(path, sections, runs, versions):
    """Writes the report at `path`: its head, then each section by the renderer for its kind."""
    lines = ["# Benchmarks", "",
             "Written by `scripts/bench.sh` (do not edit by hand). nginx on 127.0.0.1, output on tmpfs "
             f"(`/dev/shm`), fresh directories for every run, one untimed warm-up round, then the median of {runs} "
             "alternated runs; RSS is the peak "
             "over the runs, from /usr/bin/time. ferry verifies size and SHA-256, fsyncs, renames atomically and "
             "records every task in SQLite; curl, rclone and wget do none of that (aria2c `--checksum` verifies). "
             "ferry is built as the Debian package ships it (Swift's libraries linked in).",
             "", f"Machine: {os.cpu_count()} cores, {os.uname().release}. Peers: "
             + "; ".join(f"{k}: {v}" for k, v in versions.items()), ""]
    for title, table, reference, target, target_text, *note in sections:
        if reference == "at-rest":
            lines += at_rest_lines(title, table, target_text)
        elif reference == "text":
            lines += [f"## {title}", ""] + table + [""]
        elif reference == "resend":
            lines += resend_lines(title, table, target, target_text)
        elif reference is None:
            lines += kill_lines(title, table, target, target_text)
        else:
            lines += table_lines(title, table, reference, target, target_text, note)
    open(path, "w").write("\n".join(lines))
    print(f"wrote {path}", file=sys.stderr)


def at_rest_lines(title, table, target_text):
    """An agent at rest: CPU per unchanged poll and RSS (judged against the target for 10,000 files only)."""
    ms, rss, polls, files, note = table
    verdict = ": meets the target" if files != "10,000" or (ms <= 50 and rss <= 64) else ": misses the target"
    if files != "10,000":
        verdict = ""
    return [f"## {title}", "", f"Target: {target_text}.", "",
            f"ferry agent, {polls} unchanged polls (304) of an in-sync {files}-file session: **{ms:.1f} ms CPU per "
            f"poll** (user + system, every thread), **{rss:.1f} MiB RSS** at rest{verdict}. An unchanged poll is one "
            "conditional GET: inotify watches say the tree is untouched, so there is no scan (a full one every "
            "verify-interval, 1 h by default). " + note, ""]


def resend_lines(title, table, target, target_text):
    """A killed upload relaunched: the MiB each tool's relaunch sent, and ferry's against the target."""
    lines = [f"## {title}", "", f"Target: {target_text}.", "", "| tool | median MiB the relaunch sent |", "|---|---:|"]
    for tool, mib in table.items():
        lines.append(f"| {tool} | {mib:.1f} |")
    fa = table.get("ferry sync now", float("nan"))
    lines += ["", f"ferry's relaunch sent **{fa:.1f} MiB** of 48 (target ≤ {target}): "
              f"{'meets' if fa <= target else 'misses'} the target. "
              "It asks the store which parts it holds (ListParts), keeps those its task table recorded, and sends the "
              "rest; rclone starts its upload again from zero.", ""]
    return lines


def kill_lines(title, table, target, target_text):
    """A download killed at half and relaunched: what the server sent again, and whether every result was right."""
    lines = [f"## {title}", "", f"Target: {target_text}.", "",
             "| tool | median MiB sent again by the server | of which the tool had on disk at the kill | "
             "every result correct |",
             "|---|---:|---:|---|"]
    for tool, (again, client, ok) in table.items():
        lines.append(f"| {tool} | {again:.1f} | {client:.1f} | {'yes' if ok else 'NO'} |")
    fa, fc, fok = next(v for k, v in table.items() if k.startswith("ferry"))
    verdict = "meets" if fa <= target and fok else "misses"
    lines += ["", f"ferry: the server sent **{fa:.1f} MiB** again (target ≤ {target} MiB): {verdict} the target; "
              f"{fc:.1f} MiB of it had reached ferry's disk (what its checkpoints lose), the rest was in kernel socket "
              "buffers when the process died, counted by nginx as sent. curl -C - appends to whatever is on disk "
              "without checking that the file is the same one; aria2c -c without its control file starts over.", ""]
    return lines


def table_lines(title, table, reference, target, target_text, note):
    """Tools side by side (wall, RSS, ratio, CPU), then the verdict against `reference`."""
    store = any(len(v) == 4 for v in table.values())
    server, which = ("store", "weed") if title.startswith("S3") else ("server", "sshd") if title.startswith("SFTP") \
        else ("server", "nginx")
    cores = os.cpu_count()
    lines = [f"## {title}", "", f"Target: {target_text}.", "",
             "| tool | median wall | peak RSS | ferry ÷ tool |"
             + (f" tool CPU | {server} CPU ({which}) | CPU floor ({cores} cores) |" if store
                else " median CPU (user + system) |"),
             "|---|---:|---:|---:|" + ("---:|---:|---:|" if store else "---:|")]
    ferry_label = next(k for k in table if k.startswith("ferry"))
    fw, frss = table[ferry_label][:2]
    for tool, values in table.items():
        w, rss = values[:2]
        ratio = "—" if tool.startswith("ferry") else f"{fw / w:.2f}"
        lines.append(f"| {tool} | {w:.3f} s | {rss:.1f} MiB | {ratio} |" +
                     (f" {values[3]:.2f} s | {values[2]:.2f} s | {(values[2] + values[3]) / cores:.2f} s |"
                      if store else f" {values[2]:.2f} s |" if len(values) > 2 else " — |"))
    if isinstance(reference, tuple):
        _, wall, rss = reference
        for tool, values in table.items():
            w, peak = values[:2]
            if tool.startswith("ferry"):
                verdict = "meets" if w <= wall and peak <= rss else "misses"
                lines += ["", f"{tool}: **{w:.2f} s, {peak:.0f} MiB** (target ≤ {wall:g} s, ≤ {rss} MiB): "
                          f"{verdict} the target."]
    elif reference in table:
        lines += reference_lines(table, reference, target, note, store, server, cores, ferry_label)
    lines.append("")
    return lines


def reference_lines(table, reference, target, note, store, server, cores, ferry_label):
    """The verdict against the tool `reference`, with the CPU floor, the note and the hashing floor."""
    fw = table[ferry_label][0]
    lines = []
    r = fw / table[reference][0]
    if store:
        fcpu, fstore = table[ferry_label][3], table[ferry_label][2]
        rw = table[reference][0]
        lines += ["", f"The {server} runs on the same {cores} cores as the client. Beside each tool: its own CPU per "
                  f"run and the {server}'s (user + system, every thread, medians), and the least wall time the two "
                  f"allow together (their sum ÷ {cores} cores). ferry's floor here is {(fcpu + fstore) / cores:.2f} s, "
                  f"{(fcpu + fstore) / cores / rw:.2f}× {reference}, and ferry took "
                  f"{fw / ((fcpu + fstore) / cores):.2f}× its floor; the {server}'s CPU alone, for a client that cost "
                  f"nothing, allows no less than {fstore / cores:.2f} s ({fstore / cores / rw:.2f}×)."]
    verdict = "meets" if r <= target else "misses"
    lines += ["", f"ferry ÷ {reference} = **{r:.2f}** (target ≤ {target}): {verdict} the target."]
    lines += ["", note[0]] if note else []
    floor = next((k for k in table if "floor with a hash" in k), None)
    if floor:
        lines += ["", f"ferry ÷ {floor} = **{fw / table[floor][0]:.2f}**. That row is the least a tool that hashes "
                  f"what it sends can take on this {os.cpu_count()}-core machine, where the hash competes with the "
                  "server for the second core."]
    return lines

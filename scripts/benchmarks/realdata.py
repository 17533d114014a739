"""Real data: ferry's delta beside zsync and casync on files a fleet really updates (realdata_sets:
a Debian root as a tar and as an ext4 image, a SQLite database, a native library), in both of
ferry's remote layouts: plain (the file as it is, fetched by ranges) and objects (pushed as its
pieces, compressed). Bytes on the wire are nginx's own count; each tool's result is checked."""
import os
import shutil
import statistics
import subprocess
import sys
import time

from .delta import kill_loop, logged
from .realdata_sets import realdata_sets
from .runners import BASE, ferry_config, fresh, received_bytes, run, run_events, sha256_of
from .servers import Nginx

GIB = 1 << 30
PLAIN, OBJECTS = "ferry, plain layout", "ferry, objects layout"


class RealDataBench:
    """One set: its versions served by nginx (old/, new/, cur/ and /slow/, zsync's and casync's
    files), an nginx WebDAV root for the objects layout, the mirrors, the measured rows."""

    def __init__(self, ferry, runs, label, name, old, new):
        """Copies the versions to tmpfs, publishes them for every tool, and starts both servers."""
        self.ferry, self.runs, self.label, self.name = ferry, runs, label, name
        self.size_old, self.size = os.path.getsize(old), os.path.getsize(new)
        self.sha = sha256_of(new)
        print(f"== realdata: {label} ({self.size_old:,} → {self.size:,} B)", file=sys.stderr)
        www = self.www = fresh(BASE + "/realdata-www")
        work = self.work = fresh(BASE + "/realdata-work")
        for version, path in (("old", old), ("new", new)):
            os.makedirs(f"{www}/{version}")
            shutil.copyfile(path, f"{www}/{version}/{name}")
            subprocess.run([ferry, "manifest", "build", f"{www}/{version}", "--version",
                            "1" if version == "old" else "2", "--quiet"], check=True)
        # nginx's validators are the mtime (in seconds) and the size: the new root must not share the old one's.
        later = os.stat(www + "/old/manifest.json").st_mtime + 60
        os.utime(www + "/new/manifest.json", (later, later))
        subprocess.run(["zsyncmake", "-b", "4096", "-u", name, "-o", f"{www}/new/{name}.zsync", f"{www}/new/{name}"],
                       check=True, stdout=subprocess.DEVNULL, cwd=www + "/new")
        subprocess.run(["casync", "make", "--compression=zstd", "--store=" + www + "/new.castr", www + "/new.caibx",
                        f"{www}/new/{name}"], check=True, stdout=subprocess.DEVNULL)
        shutil.copyfile(old, work + "/seed.bin")
        # /slow/ serves the same files paced to a thousandth of the file a second (the kill loop's link).
        self.nginx = Nginx(www, log=True, slow=f"{max(64, self.size // 1000 >> 10)}k")
        self.dav = Nginx(fresh(BASE + "/realdata-dav"), log=True, dav=True)
        self.mirror, self.state, self.cfg = work + "/mirror", work + "/state", work + "/ferry.conf"
        self.omirror, self.ostate, self.ocfg = work + "/omirror", work + "/ostate", work + "/objects.conf"
        self.src, self.pcfg = fresh(work + "/push-src"), work + "/push.conf"
        open(self.pcfg, "w").write(f"[agent]\nstate = {fresh(work + '/push-state')}\ntransfers = 8\n\n"
                                   f"[session up]\ndirection = push\nremote = {self.dav.url}\nlocal = {self.src}\n"
                                   "remote-layout = objects\n")
        self.first_push = self.push(work + "/seed.bin")
        self.pushes = []

    def sync(self, cfg):
        """An untimed `ferry sync now` that must succeed."""
        subprocess.run([self.ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)

    def push(self, path):
        """Pushes the file at `path` to the objects remote: (bytes received in PUTs, PUTs, wall, CPU)."""
        shutil.copyfile(path, f"{self.src}/{self.name}")
        open(self.dav.log, "w").close()
        wall, _, code, cpu = run([self.ferry, "sync", "now", "--config", self.pcfg, "--quiet"])
        if code != 0:
            raise SystemExit(f"the push of {path} failed")
        sent, puts = received_bytes(self.dav.log)
        return sent, puts, wall, cpu

    def seeded(self, mirror, state):
        """`mirror` holding the old version, written an hour ago (one written within the second would be
        hashed again by the timed run: its hash cache cannot vouch for it yet), and a fresh `state`."""
        fresh(mirror)
        fresh(state)
        shutil.copyfile(self.work + "/seed.bin", f"{mirror}/{self.name}")
        os.utime(f"{mirror}/{self.name}", (time.time() - 3600, time.time() - 3600))

    def plain_prepare(self, path="cur/"):
        """The plain mirror in sync with the old version (its index cached, as after any earlier sync),
        then the remote moved to the new one. `path`: under nginx (the kill loop's is /slow/cur/)."""
        www = self.www
        self.seeded(self.mirror, self.state)
        if os.path.lexists(www + "/cur"):
            os.unlink(www + "/cur")
        os.symlink("old", www + "/cur")
        ferry_config(self.cfg, self.nginx.url + path, self.mirror, self.state, 8)
        self.sync(self.cfg)
        os.unlink(www + "/cur")
        os.symlink("new", www + "/cur")
        open(self.nginx.log, "w").close()

    def objects_prepare(self):
        """The objects remote at the old version, a mirror in sync with it, then the new version
        pushed (that push measured, into `pushes`), and an empty log."""
        self.push(self.work + "/seed.bin")
        self.seeded(self.omirror, self.ostate)
        ferry_config(self.ocfg, self.dav.url, self.omirror, self.ostate, 8)
        self.sync(self.ocfg)
        # The root manifest's validators are its mtime in seconds and its size: let the second change.
        time.sleep(1.1)
        self.pushes.append(self.push(f"{self.www}/new/{self.name}"))
        open(self.dav.log, "w").close()

    def seed_prepare(self, target):
        """No output at `target` yet, and an empty log."""
        if os.path.exists(target):
            os.unlink(target)
        open(self.nginx.log, "w").close()

    def tools(self):
        """(name, prepare(), command, log, prefix fetched, prefix of the index, output) of every tool."""
        ferry, work, url, name = self.ferry, self.work, self.nginx.url, self.name
        return [
            (PLAIN, self.plain_prepare, [ferry, "sync", "now", "--config", self.cfg, "--quiet"], self.nginx.log,
             "/cur/", "/cur/.ferry/meta/", f"{self.mirror}/{name}"),
            (OBJECTS, self.objects_prepare, [ferry, "sync", "now", "--config", self.ocfg, "--quiet"], self.dav.log,
             "/", "/.ferry/meta/", f"{self.omirror}/{name}"),
            # From the output's directory: zsync renames its temporary file from there.
            ("zsync -b 4096", lambda: self.seed_prepare(work + "/zsync.bin"),
             ["sh", "-c", f"cd {work} && exec zsync -q -i seed.bin -o zsync.bin {url}new/{name}.zsync"],
             self.nginx.log, "/new/", f"/new/{name}.zsync", work + "/zsync.bin"),
            ("casync", lambda: self.seed_prepare(work + "/casync.bin"),
             ["casync", "extract", "--store=" + url + "new.castr", "--seed=" + work + "/seed.bin", url + "new.caibx",
              work + "/casync.bin"], self.nginx.log, "/new", "/new.caibx", work + "/casync.bin"),
        ]

    def measure(self):
        """Every tool's delta, `runs` alternated rounds: [(tool, sent, index, requests, wall, CPU, peak RSS,
        every result right)], medians but the peak of RSS."""
        tools = self.tools()
        results = {tool[0]: [] for tool in tools}
        for r in range(self.runs):
            for name, prepare, command, log, prefix, index, output in tools:
                prepare()
                wall, rss, code, cpu = run(command)
                sent, requests = logged(log, prefix)
                right = code == 0 and sha256_of(output) == self.sha
                results[name].append((sent, logged(log, index)[0], requests, wall, cpu, rss, right))
                print(f"  run {r + 1} {name:22s} {sent / 1e6:8.2f} MB {requests:6d} requests {wall:6.2f} s "
                      f"{cpu:6.2f} s CPU {rss:6.1f} MiB{'' if right else ' WRONG'}", file=sys.stderr)
        rows = []
        for name, values in results.items():
            med = [statistics.median(v[i] for v in values) for i in range(5)]
            rows.append((name, *med, max(v[5] for v in values), all(v[6] for v in values)))
        return rows

    def cold(self):
        """Each tool fetching the new version with nothing local, once: rows as measure()'s."""
        work, url, name = self.work, self.nginx.url, self.name
        ferry_config(self.cfg, url + "cur/", fresh(work + "/cold"), fresh(work + "/cold-state"), 8)
        ferry_config(self.ocfg, self.dav.url, fresh(work + "/ocold"), fresh(work + "/ocold-state"), 8)
        for path in (work + "/zsync-cold.bin", work + "/casync-cold.bin"):
            if os.path.exists(path):
                os.unlink(path)
        rows = []
        for tool, command, log, prefix, index, output in [
                (PLAIN, [self.ferry, "sync", "now", "--config", self.cfg, "--quiet"], self.nginx.log, "/cur/",
                 "/cur/.ferry/meta/", f"{work}/cold/{name}"),
                (OBJECTS, [self.ferry, "sync", "now", "--config", self.ocfg, "--quiet"], self.dav.log, "/",
                 "/.ferry/meta/", f"{work}/ocold/{name}"),
                ("zsync (no seed)", ["sh", "-c", f"cd {work} && exec zsync -q -o zsync-cold.bin {url}new/{name}.zsync"],
                 self.nginx.log, "/new/", f"/new/{name}.zsync", work + "/zsync-cold.bin"),
                ("casync (no seed)", ["casync", "extract", "--store=" + url + "new.castr", url + "new.caibx",
                                      work + "/casync-cold.bin"], self.nginx.log, "/new", "/new.caibx",
                 work + "/casync-cold.bin")]:
            open(log, "w").close()
            wall, rss, code, cpu = run(command)
            sent, requests = logged(log, prefix)
            right = code == 0 and sha256_of(output) == self.sha
            rows.append((tool, sent, logged(log, index)[0], requests, wall, cpu, rss, right))
            print(f"  cold {tool:22s} {sent / 1e6:8.2f} MB {requests:6d} requests {wall:6.2f} s {cpu:6.2f} s CPU "
                  f"{rss:6.1f} MiB{'' if right else ' WRONG'}", file=sys.stderr)
        return rows

    def events(self):
        """One untimed run of each ferry delta with --json: its delta-fallback and warning events, quoted, and
        what its delta-planned events said (for the log)."""
        quoted = []
        for tool, prepare, cfg in ((PLAIN, self.plain_prepare, self.cfg), (OBJECTS, self.objects_prepare, self.ocfg)):
            pushes = len(self.pushes)
            prepare()
            del self.pushes[pushes:]
            _, _, events = run_events([self.ferry, "sync", "now", "--config", cfg])
            for e in events:
                if e.get("event") == "delta-planned":
                    print(f"  {tool} --json: {e}", file=sys.stderr)
                if e.get("event") in ("delta-fallback", "warning"):
                    quoted.append(f"{tool}: `{e}`")
        return quoted

    def kills(self, uninterrupted):
        """10 kill -9s during the plain delta over the paced /slow/cur/, then a run that completes: the
        report's line, against an uninterrupted delta's `uninterrupted` bytes (target ≤ 1.05×)."""
        self.plain_prepare("slow/cur/")
        kills = 10
        finished = kill_loop(self.ferry, self.cfg, kills)
        total = logged(self.nginx.log, "/slow/cur/")[0]
        right = sha256_of(f"{self.mirror}/{self.name}") == self.sha
        ratio = total / uninterrupted
        return ratio, (f"Kill loop, {self.label}, plain layout: {kills} kill -9s at random moments during the delta "
                       f"(nginx paced to {max(64, self.size // 1000 >> 10)} KiB/s a connection, {finished} of the runs "
                       f"ended before their kill), then a run that completes: nginx sent {total / 1e6:.2f} MB in all, "
                       f"{ratio:.3f} × an uninterrupted delta's {uninterrupted / 1e6:.2f} MB (target ≤ 1.05×: "
                       f"{'meets' if ratio <= 1.05 else 'misses'} it); the result is the new version: "
                       f"{'yes' if right else 'NO'}.")

    def stop(self):
        """Stops both servers and removes the set's files from tmpfs."""
        self.nginx.stop()
        self.dav.stop()
        for d in (self.www, self.work, BASE + "/realdata-dav"):
            shutil.rmtree(d, ignore_errors=True)


def push_line(bench):
    """The report's line on the objects layout's pushes of one set."""
    received, puts, wall, cpu = bench.first_push
    med = [statistics.median(p[i] for p in bench.pushes) for i in range(4)]
    return (f"Push, objects layout, {bench.label}: the first push of the old version ({bench.size_old / 1e6:,.1f} MB) "
            f"sent {received / 1e6:,.2f} MB in {puts:,} PUTs, {wall:.2f} s, {cpu:.2f} s CPU "
            f"(**{cpu / (bench.size_old / GIB):.2f} s/GiB**, the publisher's hashing and compression); the push of "
            f"the new version sent {med[0] / 1e6:,.2f} MB in {med[1]:,.0f} PUTs, {med[2]:.2f} s, {med[3]:.2f} s CPU "
            f"(medians of {len(bench.pushes)}).")


def table(rows, cold=False):
    """The markdown table of (set, row) pairs."""
    head = ("| set | tool | on the wire | of it index | requests | wall | client CPU | peak RSS | new version |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|")
    lines = list(head)
    for label, (tool, sent, index, requests, wall, cpu, rss, right) in rows:
        lines.append(f"| {label} | {tool} | {sent / 1e6:,.2f} MB | {index / 1e6:,.2f} MB | {requests:,.0f} | "
                     f"{wall:.2f} s | {cpu:.2f} s | {rss:.0f} MiB | {'yes' if right else 'NO'} |")
    return lines


def verdicts(label, size, rows):
    """The targets of one set: ferry's bytes against zsync's and casync's, its CPU per GiB and its RSS."""
    by = {row[0]: row for row in rows}
    lines = []

    def judge(what, value, target, unit="×"):
        """One verdict line."""
        lines.append(f"{label}: {what} {value:.2f}{unit} (target ≤ {target:g}{unit}): "
                     f"{'meets' if value <= target else 'misses'} it.")

    if PLAIN in by and "zsync -b 4096" in by:
        judge("ferry plain layout ÷ zsync -b 4096, on the wire:", by[PLAIN][1] / by["zsync -b 4096"][1], 1.0)
    if OBJECTS in by and "casync" in by:
        ratio = by[OBJECTS][1] / by["casync"][1]
        if label == "native library":
            lines.append(f"{label}: ferry objects layout ÷ casync, on the wire: {ratio:.2f}× (no target).")
        else:
            judge("ferry objects layout ÷ casync, on the wire:", ratio, 1.0)
    for tool in (PLAIN, OBJECTS):
        if tool in by:
            judge(f"{tool}, client CPU", by[tool][5] / (size / GIB), 5, " s/GiB")
            judge(f"{tool}, peak RSS", by[tool][6], 128, " MiB")
    return lines


def realdata_sections(ferry, runs):
    """Every set (BENCH_REALDATA_SETS: a comma-separated list of the served names, e.g. app.db, to
    measure only those): the deltas side by side, the objects layout's pushes, the cold fetches, the
    verdicts, the kill loop on the ext4 image, and what ferry's --json runs warned of."""
    start = time.monotonic()
    sets = realdata_sets()
    built = time.monotonic() - start
    wanted = [w for w in os.environ.get("BENCH_REALDATA_SETS", "").split(",") if w]
    described, rows, cold_rows, pushes, judged, kills, quoted = [], [], [], [], [], [], []
    for label, name, old, new, how in sets:
        if wanted and name not in wanted:
            continue
        described.append(f"- **{label}** (`{name}`): {how}. Old {os.path.getsize(old) / 1e6:,.1f} MB, new "
                         f"{os.path.getsize(new) / 1e6:,.1f} MB.")
        bench = RealDataBench(ferry, runs, label, name, old, new)
        try:
            measured = bench.measure()
            rows += [(label, row) for row in measured]
            quoted += bench.events()
            if name == "root.img":
                kills.append(bench.kills(next(row[1] for row in measured if row[0] == PLAIN))[1])
            cold_rows += [(label, row) for row in bench.cold()]
            pushes.append(push_line(bench))
            judged += verdicts(label, bench.size, measured)
        finally:
            bench.stop()
    lines = ["Each tool starts from the old version of a real file (ferry: a mirror in sync with it, its index "
             "cached; zsync and casync: it as their seed) and fetches the new one from nginx on 127.0.0.1. ferry, "
             "plain layout: the file as published by `ferry manifest build`, fetched by ranges. ferry, objects "
             "layout: the file pushed with `remote-layout = objects` to nginx's WebDAV (its pieces stored, those that "
             "compress as zstd frames), the old version then the new one, and pulled from there. zsync: "
             "`zsyncmake -b 4096`, `zsync -i seed`. casync: `casync make --compression=zstd` (default chunking), "
             "`casync extract --seed`. On the wire: nginx's own count of body bytes for the tool's requests (index "
             f"included), medians of {runs} alternated runs; peak RSS is the peak over the runs. Targets: ferry plain "
             "≤ 1.0 × zsync and ferry objects ≤ 1.0 × casync on the wire; client CPU ≤ 5 s/GiB of the file; peak RSS "
             "≤ 128 MiB; the kill loop ≤ 1.05 × an uninterrupted delta.", "", "The sets (built once with the "
             "machine's tools by scripts/benchmarks/realdata_sets.py, cached outside tmpfs):", ""]
    lines += described + [""] + table(rows) + [""] + pushes + ["", "Cold: each tool fetching the new version with "
                                                               "nothing local, once (ferry: a fresh mirror of each "
                                                               "layout; zsync and casync without a seed).", ""]
    lines += table(cold_rows) + [""] + judged + [""] + kills
    lines.append("One untimed run of each ferry delta per set with `--json`: "
                 + ("; ".join(quoted) if quoted else "no `delta-fallback` or `warning` event") + ".")
    lines.append(f"(This run: {(time.monotonic() - start) / 60:.1f} min, of which {built / 60:.1f} min building or "
                 "finding the sets.)")
    return [("real data: a Debian root (tar, ext4), a SQLite database, a native library", lines, "text", None, None)]

"""Large manifests: the 1,000,000-entry tree with one file changed (and the agent at rest on it),
what a change costs a mirror in metadata under format 1 and format 2, and layout = generations."""
import hashlib
import os
import shutil
import subprocess
import sys

from .runners import BASE, agent_at_rest, ferry_config, fresh, measure, metadata_bytes, run, run_events
from .servers import Nginx


def million_entries(ferry, runs, dirs=1000, per=1000):
    """A 1,000,000-entry tree (1,000 directories × 1,000 small files) mirrored in sync but for one
    file changed on the remote: each run changes one more file and publishes again, first as
    format 2 (`manifest build`, the default: `manifest.json` and its objects), then as a flat
    format-1 manifest (`flat.json`), each read by its own session (and state) into one mirror.
    (Two trees of a million files: a tmpfs has room for about three million inodes.)"""
    www = fresh(BASE + "/m-www")
    local = fresh(BASE + "/m-local")
    entries = million_tree(www, local, dirs, per)

    def publish(version, flat):
        """Publishes the remote's tree: format 2 by `manifest build`, or the flat format-1 manifest."""
        if not flat:
            subprocess.run([ferry, "manifest", "build", www, "--exclude", "flat.json", "--quiet"], check=True)
            return
        body = ",\n".join(f'{{"path": "{r}", "size": {n}, "sha256": "{h}", "mtime": "2023-11-14T22:13:20Z", '
                          f'"mode": "0644"}}'
                          for r, n, h in entries)
        with open(www + "/flat.json", "w") as f:
            f.write(f'{{"format": "ferry-manifest/1", "version": {version}, "files": [\n{body}\n]}}\n')

    nginx = Nginx(www)
    cfg = BASE + "/ferry-m.conf"
    cfg1 = BASE + "/ferry-m1.conf"
    ferry_config(cfg, nginx.url, local, BASE + "/m-state", 8, "max-delete = 100%\n")
    ferry_config(cfg1, nginx.url, local, BASE + "/m-state1", 8, "max-delete = 100%\nmanifest = flat.json\n")
    version = [1]

    def change_one(flat):
        """Changes one more file on the remote and publishes again."""
        version[0] += 1
        k = version[0] * 7919 % len(entries)
        data = f"changed {version[0]}\n".encode()
        with open(f"{www}/{entries[k][0]}", "wb") as f:
            f.write(data)
        entries[k][1:] = [len(data), hashlib.sha256(data).hexdigest()]
        publish(version[0], flat)

    table = {}
    for flat, conf, label in ((False, cfg, ""), (True, cfg1, "format 1, ")):
        publish(version[0], flat)
        # The first run hashes the adopted tree into the session's cache; it is not measured.
        subprocess.run([ferry, "sync", "now", "--config", conf, "--quiet"], check=True)
        tools = [
            (f"ferry sync now ({label}1 changed)", lambda flat=flat: change_one(flat),
             lambda conf=conf: [ferry, "sync", "now", "--config", conf, "--quiet"]),
            (f"ferry sync now ({label}304)", None,
             lambda conf=conf: [ferry, "sync", "now", "--config", conf, "--quiet"]),
        ]
        if not flat:
            tools.append(("find -printf size, mtime, mode (floor)", None,
                          lambda: ["sh", "-c", f"find {local} -printf '%s %T@ %m\\n' >/dev/null"]))
        table.update(measure(f"1,000,000 entries, one changed ({'format 1' if flat else 'format 2'})", tools, runs))
    publish(version[0], False)
    # The agent at rest on the same in-sync session: its first poll scans (and sets up the inotify
    # watches on 1,000 directories); after that each unchanged poll is one conditional GET.
    with open(cfg, "a") as f:
        f.write("poll = 2s\n")
    at_rest = agent_at_rest(ferry, cfg, files="1,000,000",
                            note="The first poll's full scan gives its memory back when it ends.")
    nginx.stop()
    for d in (www, local):
        shutil.rmtree(d, ignore_errors=True)
    return table, at_rest


def million_tree(www, local, dirs, per):
    """The same small files in `www` and `local`: their entries, [path, size, SHA-256] each."""
    mtime = 1_700_000_000
    entries = []
    print("== 1,000,000 entries: making the tree (about a minute)...", file=sys.stderr)
    for d in range(dirs):
        for root in (www, local):
            os.makedirs(f"{root}/d{d:03}")
        for i in range(per):
            rel, data = f"d{d:03}/f{i:03}.bin", f"{d}-{i}\n".encode()
            for root in (www, local):
                with open(f"{root}/{rel}", "wb") as f:
                    f.write(data)
                os.chmod(f"{root}/{rel}", 0o644)
                os.utime(f"{root}/{rel}", (mtime, mtime))
            entries.append([rel, len(data), hashlib.sha256(data).hexdigest()])
    return entries


def million_sections(ferry, runs):
    """The 1,000,000-entry rows (median of 3 at most: each run rebuilds a million-file manifest)
    and the agent at rest on that session."""
    million, at_rest = million_entries(ferry, min(runs, 3))
    return [("1,000,000-entry manifest, one file changed", million, ("absolute", 3.0, 256), None,
             "wall ≤ 3 s and peak RSS ≤ 256 MiB for a run that changes one file (and for a 304 run)"),
            ("ferry agent at rest, 1,000,000-file session", at_rest, "at-rest", None,
             "cheap at rest: an unchanged poll (304) costs one request and no scan")]


def format_cost(ferry, files, per=1000):
    """What a change costs a mirror in metadata, format 1 beside format 2, at `files` files: the
    cold fetch, one changed file, 100 changed files scattered over the tree; and the build and the
    one-change sync (time, RSS). Each format starts from the same tree; changes accumulate."""
    www = fresh(BASE + "/fc-www")
    local = fresh(BASE + "/fc-local")
    mtime = 1_700_000_000
    print(f"== format cost at {files:,} files: making the tree...", file=sys.stderr)
    paths = []
    for d in range(files // per):
        for root in (www, local):
            os.makedirs(f"{root}/d{d:04}")
        for i in range(per):
            rel = f"d{d:04}/f{i:03}.bin"
            for root in (www, local):
                with open(f"{root}/{rel}", "wb") as f:
                    f.write(f"{d}-{i}\n".encode())
                os.utime(f"{root}/{rel}", (mtime, mtime))
            paths.append(rel)
    nginx = Nginx(www, log=True)
    rows = {}
    counter = [0]

    def logged():
        """The lines of nginx's access log so far."""
        return open(nginx.log).read().splitlines() if os.path.exists(nginx.log) else []

    def change(count):
        """Changes `count` more files on the remote, scattered over the tree."""
        for k in range(count):
            counter[0] += 1
            rel = paths[(counter[0] * 7919 + k * 104729) % len(paths)]
            with open(f"{www}/{rel}", "wb") as f:
                f.write(f"changed {counter[0]}\n".encode())

    for fmt in (1, 2):
        state = fresh(BASE + f"/fc-state{fmt}")
        cfg = BASE + f"/fc{fmt}.conf"
        ferry_config(cfg, nginx.url, local, state, 8, "max-delete = 100%\n")
        build_wall, build_rss, _, _ = run([ferry, "manifest", "build", www, "--format", str(fmt), "--quiet"])
        before = len(logged())
        _, _, cold = run_events([ferry, "sync", "now", "--config", cfg])
        # The mirror starts with the same files: a cold run fetches the manifest and its metadata only.
        cold_requests = len(logged()) - before
        change(1)
        run([ferry, "manifest", "build", www, "--format", str(fmt), "--quiet"])
        one_wall, one_rss, one = run_events([ferry, "sync", "now", "--config", cfg])
        change(100)
        run([ferry, "manifest", "build", www, "--format", str(fmt), "--quiet"])
        _, _, hundred = run_events([ferry, "sync", "now", "--config", cfg])
        rows[fmt] = (metadata_bytes(cold), cold_requests, metadata_bytes(one), metadata_bytes(hundred), build_wall,
                     build_rss, one_wall, one_rss)
    nginx.stop()
    shutil.rmtree(www, ignore_errors=True)
    shutil.rmtree(local, ignore_errors=True)
    return rows


def format_sections(ferry, runs):
    """The metadata a change costs a mirror, format 1 beside format 2, and a signed root's check."""
    lines = ["Bytes of manifest and metadata objects one mirror fetched (`metadata_bytes` of its `manifest-fetched` "
             "event), for a cold mirror, then one changed file, then 100 changed files scattered over the tree (each "
             "after a new `manifest build`); the build and the one-change sync timed once (wall, peak RSS). Targets "
             "(issue 20): one change ≤ 10 KB, 100 changes ≤ 200 KB at 100,000 files; cold ≤ 1.25 × the flat manifest; "
             "one change ≤ 10 KB at 1,000,000; build of 1,000,000 ≤ 16.6 s and 668 MiB, sync with one change ≤ 5.4 s "
             "and 382 MiB; issue 56: a cold 100,000-file format-2 mirror's metadata in ≤ 64 requests (its requests "
             "from nginx's log; the mirror holds the same files, so it fetches nothing else).", "",
             "| files | format | cold | cold requests | one change | 100 changes | build | build RSS | sync, one change "
             "| its RSS |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    for files in (100_000, 1_000_000):
        rows = format_cost(ferry, files)
        for fmt, (cold, requests, one, hundred, bw, brss, sw, srss) in rows.items():
            lines.append(f"| {files:,} | {fmt} | {cold:,} B | {requests:,} | {one:,} B | {hundred:,} B | {bw:.1f} s | "
                         f"{brss:.0f} MiB | {sw:.2f} s | {srss:.0f} MiB |")
        ratio = rows[2][0] / rows[1][0]
        verdict = ("target ≤ 64: " + ("meets it" if rows[2][1] <= 64 else "misses it")) if files == 100_000 else "no target"
        verdicts.append(f"At {files:,} files format 2 costs a cold mirror {ratio:.2f} × the flat manifest in "
                        f"{rows[2][1]:,} requests ({verdict}), one change {rows[2][2]:,} B "
                        f"({rows[1][2] / max(rows[2][2], 1):,.0f} × less than format 1), 100 changes {rows[2][3]:,} B.")
    speed = subprocess.run(["openssl", "speed", "-seconds", "1", "ed25519"], capture_output=True, text=True).stdout
    verify = next((float(l.split()[-1]) for l in speed.splitlines()
                   if "Ed25519" in l and l.split()[-1].replace(".", "").isdigit()), 0.0)
    if verify:
        verdicts.append(f"Verifying the signed root is one Ed25519 verification: {1e6 / verify:.0f} µs with libcrypto "
                        f"here (`openssl speed ed25519`: {verify:,.0f} verifications/s), the library ferry calls.")
    return [("manifest formats: what a change costs a mirror", lines + [""] + verdicts, "text", None, None)]


def generation_switch(ferry, runs, dirs, per, base):
    """layout = generations on a tree of dirs × per small files over file://, in sync but for one
    file changed on the remote before each run: the whole run (scan, plan, removing the generation
    that falls out of keep-generations, linking every unchanged file, one download, the switch)
    beside `cp -al` of one generation (the links alone) and, for the smaller tree, the same change
    synced in place."""
    files = dirs * per
    www, local, inplace = fresh(base + "/g-www"), base + "/g-local", fresh(base + "/g-inplace")
    shutil.rmtree(local + ".generations", ignore_errors=True)
    fresh(local)
    compare_in_place = files <= 100_000
    entries = generations_tree(www, local, inplace, dirs, per, compare_in_place)

    def publish(version):
        """Publishes the remote's tree as a flat format-1 manifest of `version`."""
        body = ",\n".join(f'{{"path": "{r}", "size": {n}, "sha256": "{h}", "mtime": "2023-11-14T22:13:20Z"}}'
                          for r, n, h in entries)
        with open(www + "/manifest.json", "w") as f:
            f.write(f'{{"format": "ferry-manifest/1", "version": {version}, "files": [\n{body}\n]}}\n')

    publish(1)
    subprocess.run(["sync"])
    cfg, cfg_in_place = BASE + "/ferry-g.conf", BASE + "/ferry-gi.conf"
    ferry_config(cfg, "file://" + www + "/", local, fresh(BASE + "/g-state"), 8, "max-delete = 100%\n")
    ferry_config(cfg_in_place, "file://" + www + "/", inplace, fresh(BASE + "/gi-state"), 8, "max-delete = 100%\n")
    # The first runs hash the adopted trees into the cache; not measured.
    subprocess.run([ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)
    if compare_in_place:
        subprocess.run([ferry, "sync", "now", "--config", cfg_in_place, "--quiet"], check=True)
    with open(cfg, "a") as f:
        f.write("layout = generations\n")
    # Converting the in-place mirror: one build of links, then the exchange.
    convert_wall, convert_rss, _, _ = run([ferry, "sync", "now", "--config", cfg, "--quiet"])
    version = [1]

    def change_one():
        """Changes one more file on the remote and publishes again."""
        version[0] += 1
        k = version[0] * 7919 % len(entries)
        data = f"changed {version[0]}\n".encode()
        with open(f"{www}/{entries[k][0]}", "wb") as f:
            f.write(data)
        entries[k][1:] = [len(data), hashlib.sha256(data).hexdigest()]
        publish(version[0])

    scratch = base + "/g-cp"

    def current():
        """The generation `local` points to now."""
        return os.path.join(os.path.dirname(local), os.readlink(local))

    # cp -al links the remote's tree (the same shape): linking the mirror's files would move their
    # ctime, and ferry would rightly hash them all again on its next run.
    tools = [("ferry sync now, generations (1 changed)", change_one,
              lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"])]
    if compare_in_place:
        tools.append(("ferry sync now, in place (1 changed)", None,
                      lambda: [ferry, "sync", "now", "--config", cfg_in_place, "--quiet"]))
    tools.append(("cp -al of one generation (floor)", lambda: shutil.rmtree(scratch, ignore_errors=True),
                  lambda: ["cp", "-al", www, scratch]))
    table = measure(f"generations: {files:,} files, one changed", tools, runs)
    shutil.rmtree(scratch, ignore_errors=True)

    def kib(path):
        """The disk space under `path`, in KiB (du -sk: a file linked more than once counted once)."""
        return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True).stdout.split()[0])
    kept = sorted(n for n in os.listdir(local + ".generations") if n.startswith("g"))
    space = (kib(local + ".generations"), kib(current()), len(kept))
    for path in (www, local + ".generations", inplace):
        shutil.rmtree(path, ignore_errors=True)
    os.unlink(local)
    if base != BASE:
        shutil.rmtree(base, ignore_errors=True)
    return table, convert_wall, convert_rss, space


def generations_tree(www, local, inplace, dirs, per, compare_in_place):
    """The same small files in `www`, `local` (and `inplace`): their entries, [path, size, SHA-256]."""
    mtime = 1_700_000_000
    entries = []
    print(f"== generations, {dirs * per:,} files: making the tree...", file=sys.stderr)
    for d in range(dirs):
        roots = (www, local, inplace) if compare_in_place else (www, local)
        for root in roots:
            os.makedirs(f"{root}/d{d:03}")
        for i in range(per):
            rel, data = f"d{d:03}/f{i:04}.bin", f"{d}-{i}\n".encode()
            for root in roots:
                with open(f"{root}/{rel}", "wb") as f:
                    f.write(data)
                os.utime(f"{root}/{rel}", (mtime, mtime))
            entries.append([rel, len(data), hashlib.sha256(data).hexdigest()])
    return entries


def generations_sections(ferry, runs):
    """layout = generations at 10,000 and 1,000,000 files: the switch and the disk space."""
    lines = ["`layout = generations` (issue 21): a sync that finds one file changed builds the next generation "
             "(hard links for the unchanged files, one download) and switches `local` with one rename; "
             "`keep-generations = 2`, so each run also removes the generation that falls out. Small files over "
             "`file://`, 10,000 on tmpfs, 1,000,000 on ext4 (the VM's disk; tmpfs counts each hard link as an inode "
             "and runs out); the whole `ferry sync now` process, median of alternated runs, beside `cp -al` of one "
             "generation of the same shape (the same links, nothing else) and, at 10,000 files, the same change "
             "synced in place.", "",
             "| files | ferry, generations | ferry, in place | cp -al (floor) | generations ÷ cp -al | peak RSS | "
             "converting an in-place mirror | disk: all generations / one |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    # tmpfs counts every hard link against its inode limit (half the RAM's pages), which three
    # generations of 1,000,000 files and the remote's tree pass: that size runs on the disk (ext4).
    for dirs, per, base in ((10, 1000, BASE), (1000, 1000, "/var/tmp/ferry-bench-generations")):
        table, convert_wall, convert_rss, (all_kib, one_kib, count) = generation_switch(ferry, runs, dirs, per, base)
        g = table["ferry sync now, generations (1 changed)"]
        cp = table["cp -al of one generation (floor)"]
        place = table.get("ferry sync now, in place (1 changed)")
        lines.append(f"| {dirs * per:,} | {g[0]:.3f} s | {f'{place[0]:.3f} s' if place else '—'} | {cp[0]:.3f} s | "
                     f"{g[0] / cp[0]:.2f} | {g[1]:.0f} MiB | {convert_wall:.2f} s | "
                     f"{count} × = {all_kib / 1024:.1f} MiB / {one_kib / 1024:.1f} MiB |")
    lines += ["", "Disk: `du -sk` counts a file once however many generations link it, so what the kept generations "
              "add is their changed files and their directories\' blocks, not their unchanged files. Each measured run "
              "also removed the generation that fell out of `keep-generations` (a million unlinks at 1,000,000 files)."]
    return [("layout = generations: the switch and its disk space", lines, "text", None, None)]

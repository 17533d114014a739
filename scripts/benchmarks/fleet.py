"""A fleet of agents behind a site cache (issue 42): an nginx origin for several fleet sizes, the
cache killed mid-run, an S3 origin, and a hostile mirror that serves every content object wrong."""
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from .runners import BASE, SCRIPTS, free_port, fresh, wait_port
from .servers import Nginx, SiteCache, Weed


def fleet_sections(ferry, runs):
    """A fleet behind a site cache (issue 42): N agents (separate processes, state and mirrors,
    started at once) with the origin as their remote and examples/site-cache's nginx as their
    mirror, fetching a release with BENCH_FLEET_MIB (default 256) MiB of new content: what the
    origin sent, the cache's hit ratio, each agent's wall against a lone agent's through a cold
    cache, every file checked; with an nginx origin for BENCH_FLEET_AGENTS (default 5,10,20)
    agents, then the most with the cache killed mid-run; with an S3 origin (SeaweedFS, a bucket
    anyone may read, which the cache fronts); and with a hostile mirror that serves every content
    object wrong."""
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[name]
    fleet = FleetBench(ferry)
    fleet.nginx_origin()
    fleet.cache_killed()
    fleet.s3_origin()
    fleet.hostile_mirror()
    return [("fleet: agents behind a site cache", fleet.lines + [""] + fleet.notes + [""] + fleet.verdicts, "text",
             None, None)]


def nginx_sent(log):
    """The body bytes nginx sent for files, by its log (the root manifest and metadata objects aside)."""
    total = 0
    for line in open(log):
        parts = line.split()
        if len(parts) >= 6 and parts[-2].isdigit() and parts[1] != "/manifest.json" and \
                not parts[1].startswith("/.ferry/meta/"):
            total += int(parts[-2])
    return total


def received(root, n):
    """What the agents' partial files hold now (bytes on their way in)."""
    total = 0
    for i in range(n):
        d = f"{root}/{i}/mirror/.ferry/partial"
        for name in (os.listdir(d) if os.path.isdir(d) else []):
            try:
                total += os.path.getsize(os.path.join(d, name))
            except OSError:
                pass
    return total


def from_origin_by_agents(r):
    """What the agents took from the origin themselves (their own count, files and metadata objects)."""
    return sum(s.get("origin", {}).get("bytes", 0) for s in r["served"])


class FleetBench:
    """What the fleet rows share: the release, its origin, the report's lines so far; a method per origin."""

    def __init__(self, ferry):
        """Makes the release (with its manifest) and starts its nginx origin."""
        self.ferry = ferry
        self.mib = int(os.environ.get("BENCH_FLEET_MIB", "256"))
        self.sizes = [int(x) for x in os.environ.get("BENCH_FLEET_AGENTS", "5,10,20").split(",")]
        self.most = max(self.sizes)
        self.www = www = fresh(BASE + "/fleet-www")
        os.makedirs(www + "/small")
        print(f"== fleet: making a {self.mib} MiB release...", file=sys.stderr)
        with open(www + "/release.bin", "wb") as f:
            for _ in range(self.mib):
                f.write(os.urandom(1 << 20))
        for n in range(100):
            open(f"{www}/small/{n}.txt", "w").write(f"release 1, file {n}\n")
        self.wanted = {}
        for d, _, fs in os.walk(www):
            for f in fs:
                path = os.path.join(d, f)
                self.wanted[os.path.relpath(path, www)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
        self.release = sum(os.path.getsize(os.path.join(www, p)) for p in self.wanted)
        subprocess.run([ferry, "manifest", "build", www, "--version", "1", "--quiet"], check=True)
        self.origin = Nginx(www, log=True)
        self.lines, self.verdicts, self.notes = [], [], []

    def fleet(self, n, session, mirror, cache=None, kill_cache_at=None):
        """n agents at once, each with `session`'s lines and `mirror` as its mirror: walls, exit
        codes, failed files, wrong or missing files (every file hashed against the release), and
        what each source served each agent (its `source-served` events). `kill_cache_at`: the
        cache is killed once the agents' partial files hold that many bytes."""
        root = fresh(BASE + "/fleet-agents")
        procs = []
        for i in range(n):
            d = f"{root}/{i}"
            os.makedirs(d)
            open(d + "/ferry.conf", "w").write(f"[agent]\nstate = {d}/state\ntransfers = 4\n\n[session site]\n"
                                               f"{session}\nmirrors = {mirror}\nlocal = {d}/mirror\n"
                                               "retry-delay = 0.2s\n")
        began = time.monotonic()
        for i in range(n):
            d = f"{root}/{i}"
            out = open(d + "/run.jsonl", "w")
            procs.append((subprocess.Popen([self.ferry, "sync", "now", "--config", d + "/ferry.conf", "--json"],
                                           stdout=out, stderr=subprocess.DEVNULL), out))
        walls = [None] * n
        killed = False
        while any(w is None for w in walls):
            for i, (p, _) in enumerate(procs):
                if walls[i] is None and p.poll() is not None:
                    walls[i] = time.monotonic() - began
            if kill_cache_at is not None and not killed and received(root, n) >= kill_cache_at:
                cache.stop()
                killed = True
            time.sleep(0.01)
        r = self.results(root, procs, walls)
        shutil.rmtree(root, ignore_errors=True)
        return r

    def results(self, root, procs, walls):
        """What the agents under `root` did, once all have ended: see fleet()."""
        r = {"walls": walls, "codes": [], "failed": 0, "wrong": 0, "served": []}
        for i, (p, out) in enumerate(procs):
            out.close()
            r["codes"].append(p.returncode)
            served = {}
            for line in open(f"{root}/{i}/run.jsonl"):
                if '"file-failed"' in line:
                    r["failed"] += 1
                if '"source-served"' in line:
                    e = json.loads(line)
                    served[e["source"]] = e
            r["served"].append(served)
            for path, digest in self.wanted.items():
                try:
                    with open(f"{root}/{i}/mirror/{path}", "rb") as f:
                        good = hashlib.file_digest(f, "sha256").hexdigest() == digest
                except OSError:
                    good = False
                r["wrong"] += 0 if good else 1
        r["ok"] = all(c == 0 for c in r["codes"]) and r["wrong"] == 0
        return r

    def header(self):
        """The report's introduction and the table's head."""
        release, mib = self.release, self.mib
        return [f"A release of {release / 1e6:,.1f} MB (one {mib} MiB file of new bytes and 100 small files) fetched "
                "by N agents at once, each its own process, state and mirror, with the origin as `remote` and a site "
                "cache (examples/site-cache/site-cache.conf, nginx, cold) as `mirrors`. Every agent's every file is "
                "hashed against the release afterwards (wrong or missing files). For the nginx origin, its bytes are "
                "its own count of the files' bodies; for the S3 origin (SeaweedFS), they are what the cache took from "
                "it (nginx's `$upstream_bytes_received`) and what the agents took from it themselves (their "
                "`source-served` counts); the root manifest and metadata objects aside. "
                "Targets (issue 42): origin ≤ 1.25 × the release for 20 agents, not growing with N; the slowest agent "
                "≤ 2 × a lone agent's time through the same (cold) cache; the cache killed mid-run: every agent "
                "converges from the origin, 0 failed files; a mirror that serves wrong bytes: 0 wrong files, demoted "
                "after its first bad object, ≤ 1 object refetched per demotion. "
                f"Here every agent shares this machine's {os.cpu_count()} cores (each hashes and writes the whole "
                f"release), so N agents cannot take less than a lone agent's time × N / {os.cpu_count()}: the floor "
                "column.", "",
                "| origin | agents | origin sent | × the release | cache hits | slowest agent | × a lone agent | "
                "× the floor | median agent | failed files | wrong files | every agent exit 0 |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

    def row(self, kind, n, r, sent, hits, answers, lone_wall):
        """A row of the table for a fleet of `n` (and, for the most agents, its verdict)."""
        release, most = self.release, self.most
        walls = r["walls"]
        floor = lone_wall * n / os.cpu_count()
        print(f"  {kind}, {n} agents: origin {sent / 1e6:.1f} MB, hits {hits}/{answers}, slowest {max(walls):.2f} s, "
              f"wrong {r['wrong']}", file=sys.stderr)
        self.lines.append(f"| {kind} | {n} | {sent / 1e6:,.1f} MB | {sent / release:.2f} | {hits}/{answers} | "
                          f"{max(walls):.2f} s | {max(walls) / lone_wall:.2f} | "
                          f"{max(walls) / max(floor, lone_wall):.2f} | {statistics.median(walls):.2f} s | "
                          f"{r['failed']} | {r['wrong']} | {'yes' if r['ok'] else 'NO'} |")
        if n == most:
            self.verdicts.append(f"{kind}, {n} agents: the origin sent {sent / release:.2f} × the release (target ≤ "
                                 f"1.25: {'meets' if sent <= 1.25 * release else 'misses'} it); the slowest agent took "
                                 f"{max(walls) / lone_wall:.2f} × a lone agent (target ≤ 2: "
                                 f"{'meets' if max(walls) <= 2 * lone_wall else 'misses'} it on one machine), "
                                 f"{max(walls) / max(floor, lone_wall):.2f} × the floor of {n} agents sharing "
                                 f"{os.cpu_count()} cores.")

    def nginx_origin(self):
        """A lone agent through a cold cache, then a fleet of each size, the nginx origin behind the cache."""
        origin = self.origin
        print("  nginx origin...", file=sys.stderr)
        through = lambda cache: self.fleet(1, f"remote = {origin.url}", cache.url, cache)
        cache = SiteCache(origin.url)
        open(origin.log, "w").close()
        lone = through(cache)
        cache.stop()
        self.lone_wall, self.lone_sent = lone["walls"][0], nginx_sent(origin.log)
        print(f"  lone agent: {self.lone_wall:.2f} s, origin sent {self.lone_sent / 1e6:.1f} MB", file=sys.stderr)
        self.lines = self.header()
        for n in self.sizes:
            cache = SiteCache(origin.url)
            open(origin.log, "w").close()
            r = self.fleet(n, f"remote = {origin.url}", cache.url, cache)
            hits, answers = cache.hits()
            cache.stop()
            self.row("nginx", n, r, nginx_sent(origin.log), hits, answers, self.lone_wall)

    def cache_killed(self):
        """The most agents with the cache killed once they hold 30% of the release."""
        origin, most, release = self.origin, self.most, self.release
        cache = SiteCache(origin.url)
        open(origin.log, "w").close()
        r = self.fleet(most, f"remote = {origin.url}", cache.url, cache, kill_cache_at=int(release * most * 0.3))
        cache.stop()
        sent = nginx_sent(origin.log)
        self.verdicts.append(f"nginx, {most} agents, the cache killed once they held 30% of the release: every agent "
                             f"exit 0 with every file right: {'yes' if r['ok'] else 'NO'}, {r['failed']} failed files "
                             f"(target 0), the origin sent {sent / release:.2f} × the release, the slowest agent "
                             f"{max(r['walls']):.2f} s.")
        self.notes.append(f"Lone agent through the cold cache, nginx origin: {self.lone_wall:.2f} s; the origin sent "
                          f"{self.lone_sent / 1e6:,.1f} MB.")

    def s3_origin(self):
        """A lone agent, then the most, with an S3 origin (SeaweedFS) behind the cache."""
        # S3: the release pushed to a bucket anyone may read; the agents read it with credentials, the
        # cache (at the bucket's path) without.
        print("  S3 origin...", file=sys.stderr)
        weed = Weed(BASE + "/fleet-weed", public=True)
        try:
            creds = BASE + "/fleet-s3-credentials"
            open(creds, "w").write(f"[default]\naws_access_key_id = {weed.KEY}\n"
                                   f"aws_secret_access_key = {weed.SECRET}\n")
            os.chmod(creds, 0o600)
            subprocess.run(weed.rclone(["mkdir", ":s3:fleet"]), check=True, capture_output=True)
            s3 = f"remote = s3://fleet/\ns3-endpoint = {weed.endpoint}\ns3-credentials = {creds}"
            push = BASE + "/fleet-push.conf"
            open(push, "w").write(f"[agent]\nstate = {BASE}/fleet-push-state\n\n[session up]\ndirection = push\n{s3}\n"
                                  f"local = {self.www}\n")
            shutil.rmtree(BASE + "/fleet-push-state", ignore_errors=True)
            subprocess.run([self.ferry, "sync", "now", "--config", push, "--quiet"], check=True)
            s3_lone_wall = None
            for n in [1, self.most]:
                cache = SiteCache(weed.endpoint)
                r = self.fleet(n, s3, cache.url + "fleet/", cache)
                hits, answers = cache.hits()
                cache.stop()
                sent = cache.from_origin() + from_origin_by_agents(r)
                if n == 1:
                    s3_lone_wall = r["walls"][0]
                    self.notes.append(f"Lone agent through the cold cache, S3 origin: {s3_lone_wall:.2f} s; the origin "
                                      f"sent {sent / 1e6:,.1f} MB.")
                else:
                    self.row("S3", n, r, sent, hits, answers, s3_lone_wall)
        finally:
            weed.stop()

    def hostile_copy(self, objects):
        """A copy of `objects` with every content object damaged: (its directory, {URL path: size})."""
        bad = BASE + "/fleet-hostile"
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(objects, bad)
        # Each file, or each piece of one stored as pieces, is an object the agents ask for once.
        bad_objects = {}
        for d, _, fs in os.walk(bad + "/.ferry/data"):
            for f in fs:
                path = os.path.join(d, f)
                with open(path, "r+b") as h:
                    size = os.path.getsize(path)
                    h.seek(size // 3)
                    byte = h.read(1)
                    h.seek(size // 3)
                    h.write(bytes([byte[0] ^ 0x10]))
                bad_objects["/" + os.path.relpath(path, bad)] = size
        return bad, bad_objects

    def hostile_mirror(self):
        """The most agents with a mirror that serves every content object wrong, before the cache."""
        # A hostile mirror: the release in the objects layout (each file or piece an object named by
        # its SHA-256) on the nginx origin, and the project's own test server serving a copy of it
        # with every content object's bytes flipped, each body's bytes logged.
        print("  hostile mirror...", file=sys.stderr)
        most, release = self.most, self.release
        self.origin.stop()
        objects = fresh(BASE + "/fleet-objects")
        push = BASE + "/fleet-objects.conf"
        open(push, "w").write(f"[agent]\nstate = {BASE}/fleet-objects-state\n\n[session up]\ndirection = push\n"
                              f"remote = file://{objects}/\nlocal = {self.www}\nremote-layout = objects\n")
        shutil.rmtree(BASE + "/fleet-objects-state", ignore_errors=True)
        subprocess.run([self.ferry, "sync", "now", "--config", push, "--quiet"], check=True)
        bad, bad_objects = self.hostile_copy(objects)
        log = BASE + "/fleet-hostile.jsonl"
        faults = BASE + "/fleet-hostile-faults.json"
        json.dump({"*": {"log_sent": True}}, open(faults, "w"))
        open(log, "w").close()
        port = free_port()
        hostile = subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "testserver.py"), "--port", str(port),
                                    "--directory", bad, "--log", log, "--faults", faults],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port)
        objects_origin = Nginx(objects, log=True)
        cache = SiteCache(objects_origin.url)
        try:
            # The hostile mirror first, then the site cache: once it is demoted, the cache serves.
            r = self.fleet(most, f"remote = {objects_origin.url}", f"http://127.0.0.1:{port}/ {cache.url}")
            hits, answers = cache.hits()
        finally:
            cache.stop()
            objects_origin.stop()
            hostile.terminate()
            hostile.wait()
        sent = nginx_sent(objects_origin.log)
        bodies = [json.loads(line) for line in open(log) if '"sent_path"' in line]
        bodies = [b for b in bodies if b["sent_path"] in bad_objects]
        whole = sum(1 for b in bodies if b["sent"] >= bad_objects[b["sent_path"]])
        demoted = sum(1 for s in r["served"] if any(v.get("demoted") for k, v in s.items() if k != "origin"))
        self.lines.append(f"| nginx, objects layout, a hostile mirror before the cache | {most} | "
                          f"{sent / 1e6:,.1f} MB | {sent / release:.2f} | {hits}/{answers} | "
                          f"{max(r['walls']):.2f} s | | | "
                          f"{statistics.median(r['walls']):.2f} s | {r['failed']} | {r['wrong']} | "
                          f"{'yes' if r['ok'] else 'NO'} |")
        self.verdicts.append(f"nginx, {most} agents with a mirror that serves every content object wrong before the "
                             f"site cache (the release in the objects layout): {r['wrong']} wrong files (target 0), "
                             f"{r['failed']} failed files, the mirror demoted by {demoted} of {most} agents; it sent "
                             f"{len(bodies)} object bodies ({sum(b['sent'] for b in bodies) / 1e6:.2f} MB), {whole} of "
                             f"them whole: {whole / max(1, demoted):.2f} whole wrong objects per demotion (target ≤ 1; "
                             "the rest were stopped in flight).")
        shutil.rmtree(objects, ignore_errors=True)
        shutil.rmtree(bad, ignore_errors=True)

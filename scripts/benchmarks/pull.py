"""Pulls over HTTP from nginx: the 1 GiB download, the unchanged 10,000-file tree, the agent at
rest on it, and the 1 GiB download killed at half and relaunched."""
import hashlib
import os
import signal
import statistics
import subprocess
import sys
import time

from .runners import BASE, agent_at_rest, ferry_config, fresh, make_workloads, measure, sent_bytes, sha256_of
from .servers import Nginx


def pull_workloads(ferry):
    """The pull workloads and their manifests in BASE/www: (www, the tools' output, the 1 GiB's SHA-256)."""
    www = fresh(BASE + "/www")
    out = BASE + "/out"
    print("preparing data on tmpfs...", file=sys.stderr)
    big, small = make_workloads(www)
    subprocess.run([ferry, "manifest", "build", big, "--quiet"], check=True)
    subprocess.run([ferry, "manifest", "build", small, "--quiet"], check=True)
    h = hashlib.sha256()
    with open(big + "/1GiB.bin", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    big_sha = h.hexdigest()
    return www, out, big_sha


def pull_sections(ferry, runs, www, out, big_sha):
    """The 1 GiB download, the unchanged 10,000-file tree and the agent at rest, from one nginx."""
    nginx = Nginx(www)
    url = nginx.url
    sections = [one_gib_download(ferry, runs, nginx, out, big_sha), unchanged_tree(ferry, runs, url, out),
                pull_agent_at_rest(ferry, url, out)]
    nginx.stop()
    return sections


def one_gib_download(ferry, runs, nginx, out, big_sha):
    """The 1 GiB file pulled from `nginx` by ferry beside curl, rclone and aria2c (and curl followed
    by sha256sum), with nginx's CPU beside each: on 2 cores, what the server and the client use
    together bounds the wall (ferry hashes every byte, which curl -o does not)."""
    url = nginx.url
    cfg = BASE + "/ferry-big.conf"
    ferry_config(cfg, url + "big/", out + "/ferry", out + "/ferry-state", 8)
    tools = [
        ("ferry sync now",
         lambda: (fresh(out), ferry_config(cfg, url + "big/", out + "/ferry", out + "/ferry-state", 8)),
         lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]),
        ("curl -o", lambda: fresh(out), lambda: ["curl", "-sf", "-o", out + "/curl.bin", url + "big/1GiB.bin"]),
        ("rclone copyurl", lambda: fresh(out), lambda: ["rclone", "--config", "/dev/null", "copyurl",
                                                        url + "big/1GiB.bin", out + "/rclone.bin"]),
        ("aria2c --checksum", lambda: fresh(out), lambda: ["aria2c", "-q", "--file-allocation=none",
                                                           "--allow-overwrite=true", f"--checksum=sha-256={big_sha}",
                                                           "-d", out, "-o", "aria2.bin", url + "big/1GiB.bin"]),
        ("curl + sha256sum", lambda: fresh(out),
         lambda: ["sh", "-c", f"curl -sf -o {out}/c.bin {url}big/1GiB.bin && sha256sum {out}/c.bin"]),
    ]
    return ("1 GiB file", measure("1 GiB download", tools, runs, server=nginx), "curl -o", 0.8,
            "wall ≤ 0.8 × curl -o; peak RSS ≤ 64 MiB")


def unchanged_tree(ferry, runs, url, out):
    """The 10,000-file tree, in sync: ferry's 304 beside rclone's no-op copy and a stat of every file."""
    scfg = BASE + "/ferry-small.conf"
    fresh(out)
    ferry_config(scfg, url + "small/", out + "/ferry", out + "/ferry-state", 16)
    subprocess.run([ferry, "sync", "now", "--config", scfg, "--quiet"], check=True)
    subprocess.run(["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone", "--http-url", url + "small/",
                    "--transfers", "16", "--exclude", "manifest.json", "--exclude", ".ferry/**"], check=True,
                   stderr=subprocess.DEVNULL)
    tools = [
        ("ferry sync now (304)", None, lambda: [ferry, "sync", "now", "--config", scfg, "--quiet"]),
        ("rclone copy (no-op)", None, lambda: ["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone",
                                              "--http-url", url + "small/", "--transfers", "16",
                                              "--exclude", "manifest.json", "--exclude", ".ferry/**"]),
        ("find + stat of every file (floor)", None,
         lambda: ["sh", "-c", f"find {out}/ferry -type f -print0 | xargs -0 stat >/dev/null"]),
    ]
    return ("unchanged 10,000-file tree", measure("unchanged tree", tools, runs), "rclone copy (no-op)", 0.3,
            "wall ≤ 0.3 × rclone no-op copy")


def pull_agent_at_rest(ferry, url, out):
    """The agent at rest: unchanged polls of the in-sync 10,000-file session."""
    fresh(out)
    rcfg = BASE + "/ferry-rest.conf"
    ferry_config(rcfg, url + "small/", out + "/ferry", out + "/ferry-state", 16, "poll = 1s\n")
    subprocess.run([ferry, "sync", "now", "--config", rcfg, "--quiet"], check=True)
    return ("ferry agent at rest",
            agent_at_rest(ferry, rcfg, note="Without the watch (before) a poll cost 80 ms: the scan and the plan."),
            "at-rest", None, "≤ 50 ms CPU per unchanged poll (304) of a 10,000-file session; RSS ≤ 64 MiB")


def kill_section(ferry, www, out, big_sha, runs):
    """The kill -9 at half of 1 GiB, then relaunch, section (kill_and_resume's medians)."""
    return ("kill -9 at half of 1 GiB, then relaunch", kill_and_resume(ferry, www, out, big_sha, runs), None, 8,
            "≤ 8 MiB fetched again, result verified")


def kill_and_resume(ferry, www, out, big_sha, runs):
    """Each tool downloads 1 GiB, is killed with SIGKILL once half is on disk, and is run again to
    finish. 'fetched again' = bytes nginx sent over both runs minus the file's size."""
    nginx = Nginx(www, log=True)
    url = nginx.url + "big/1GiB.bin"
    size = 1 << 30
    cfg = BASE + "/ferry-kill.conf"

    def ferry_partial():
        """The bytes in ferry's partial files."""
        d = out + "/ferry/.ferry/partial"
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) if os.path.isdir(d) else 0

    def size_of(path):
        """A function that says how many bytes `path` holds (0 before it exists)."""
        return lambda: os.path.getsize(path) if os.path.exists(path) else 0

    tools = [
        ("ferry sync now", lambda: ferry_config(cfg, nginx.url + "big/", out + "/ferry", out + "/ferry-state", 8),
         [ferry, "sync", "now", "--config", cfg, "--quiet"], [ferry, "sync", "now", "--config", cfg, "--quiet"],
         ferry_partial, lambda: sha256_of(out + "/ferry/1GiB.bin")),
        ("curl -C -", None, ["curl", "-sf", "-o", out + "/curl.bin", url],
         ["curl", "-sf", "-C", "-", "-o", out + "/curl.bin", url],
         size_of(out + "/curl.bin"), lambda: sha256_of(out + "/curl.bin")),
        ("aria2c -c", None, ["aria2c", "-q", "--file-allocation=none", "-d", out, "-o", "aria2.bin", url],
         ["aria2c", "-q", "-c", "--file-allocation=none", f"--checksum=sha-256={big_sha}", "-d", out, "-o",
          "aria2.bin", url],
         size_of(out + "/aria2.bin"), lambda: sha256_of(out + "/aria2.bin")),
    ]
    results = {label: [] for label, *_ in tools}
    print("== kill -9 at half, relaunch", file=sys.stderr)
    for r in range(runs):
        for label, prepare, first, second, progress, digest in tools:
            fresh(out)
            if prepare:
                prepare()
            open(nginx.log, "w").close()
            proc = subprocess.Popen(first, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while progress() < size // 2 and proc.poll() is None:
                time.sleep(0.002)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            on_disk = progress()
            deadline = time.time() + 10
            while time.time() < deadline and not open(nginx.log).read().strip():
                time.sleep(0.01)  # nginx logs the cut-off request once it notices the client is gone
            sent_first = sent_bytes(nginx.log)
            open(nginx.log, "w").close()
            subprocess.run(second, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            sent_second = sent_bytes(nginx.log)
            ok = digest() == big_sha
            mib = 1 << 20
            again = (sent_first + sent_second - size) / mib
            # Bytes the tool had on disk at the kill and still fetched again.
            again_client = max(0, on_disk + sent_second - size) / mib
            results[label].append((again, again_client, ok))
            print(f"  run {r + 1} {label:14s} killed with {on_disk / mib:6.0f} MiB on disk; fetched again "
                  f"{again:7.1f} MiB (of which on disk at the kill: {again_client:6.1f} MiB); result "
                  f"{'verified' if ok else 'WRONG'}", file=sys.stderr)
    nginx.stop()
    return {label: (statistics.median(a for a, _, _ in v), statistics.median(c for _, c, _ in v),
                    all(ok for _, _, ok in v))
            for label, v in results.items()}

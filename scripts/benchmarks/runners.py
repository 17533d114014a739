"""The shared runners: running and timing a command, measuring tools side by side, the workloads,
ferry's configs, and reading what nginx logged."""
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

BASE = "/dev/shm/ferry-bench"
# The scripts directory (this package's parent): the repository's files are found from it.
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    """A TCP port on 127.0.0.1 nothing listens on just now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=10):
    """Waits until something listens on `port` (exits the benchmark after `timeout` seconds)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"nothing listening on {port}")


def run(cmd, env=None, cwd=None):
    """Runs a command; returns (wall seconds, peak RSS in MiB, exit status, CPU seconds). The peak
    RSS and the CPU (user + system, every thread) are the command's own, from /usr/bin/time: a
    process spawned straight from this Python starts out with the interpreter's high-water mark
    (the 1M-entry workload makes that ~800 MiB)."""
    errfile = BASE + "/stderr.txt"
    rssfile = BASE + "/rss.txt"
    start = time.monotonic()
    with open(errfile, "wb") as err_out:
        pid = os.posix_spawnp("/usr/bin/time", ["/usr/bin/time", "-f", "%U %S %M", "-o", rssfile] + cmd,
                              env or os.environ,
                              file_actions=[(os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                                            (os.POSIX_SPAWN_DUP2, err_out.fileno(), 2)])
        _, status, _ = os.wait4(pid, 0)
    wall = time.monotonic() - start
    err = open(errfile, errors="replace").read()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"  ! {' '.join(cmd[:3])}... exited {code}: {err[-400:]}", file=sys.stderr)
    fields = open(rssfile).read().split()
    measured = len(fields) >= 3 and fields[-1].isdigit()
    rss = int(fields[-1]) / 1024 if measured else 0.0
    cpu = float(fields[-3]) + float(fields[-2]) if measured else 0.0
    return wall, rss, code, cpu


def fresh(path):
    """`path` as a new, empty directory (whatever was there removed)."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def proc_stat(pid):
    """The fields of /proc/`pid`/stat after the command name: [0] is the state, [1] the parent,
    [11] and [12] user and system time in clock ticks."""
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()


def cpu_seconds(fields):
    """User + system seconds from proc_stat's fields."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_events(cmd):
    """Runs a ferry command with --json; returns (wall seconds, peak RSS in MiB, events)."""
    rssfile = BASE + "/rss-json.txt"
    start = time.monotonic()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rssfile] + cmd + ["--json"], capture_output=True,
                          text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        print(f"  ! {' '.join(cmd[:3])}... exited {done.returncode}: {done.stderr[-400:]}", file=sys.stderr)
    fields = open(rssfile).read().split()
    rss = int(fields[-1]) / 1024 if fields and fields[-1].isdigit() else 0.0
    return wall, rss, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def metadata_bytes(events):
    """The manifest and metadata bytes a run fetched, by its `manifest-fetched` events."""
    return sum(e.get("metadata_bytes", 0) for e in events if e.get("event") == "manifest-fetched")


def per_file_cpu(table, files):
    """A note with ferry's CPU per file beside each other tool's."""
    parts = [f"{tool}: {values[-1] * 1e6 / files:.0f} µs" for tool, values in table.items() if len(values) > 2]
    return "CPU a file (user + system, every thread, median): " + "; ".join(parts) + "."


def median_table(results):
    """Each tool's runs, column by column: the median of each, but the peak of RSS (column 1)."""
    return {tool: tuple(max(column) if i == 1 else statistics.median(column) for i, column in enumerate(zip(*runs)))
            for tool, runs in results.items()}


def measure(name, tools, runs, warmup=True, server=None):
    """tools: list of (label, prepare(), command()) — prepare runs untimed before each run.
    Rows: (median wall, peak RSS, median CPU); with a `server` (nginx, SeaweedFS: `.cpu()`,
    `.name`) its CPU per run goes beside the tool's: (median wall, peak RSS, server CPU, tool CPU)."""
    print(f"== {name}", file=sys.stderr)
    results = {label: [] for label, _, _ in tools}
    # Round 0 warms caches and the page allocator and is not counted: on a shared 2-core machine the
    # first round is often the slowest for whichever tool runs first.
    for r in range(0 if warmup else 1, runs + 1):
        for label, prepare, command in tools:
            if prepare:
                prepare()
            before = server.cpu() if server else 0
            wall, rss, code, cpu = run(command())
            used = server.cpu() - before if server else 0
            if code == 0 and r > 0:
                results[label].append((wall, rss, used, cpu) if server else (wall, rss, cpu))
            beside = f"  {server.name} {used:6.2f}s CPU" if server else ""
            print(f"  run {r} {label:34s} {wall:7.3f}s {rss:7.1f} MiB {cpu:6.2f}s CPU{beside}"
                  f"{' (warm-up)' if r == 0 else ''}", file=sys.stderr)
    return median_table({k: v for k, v in results.items() if v})


def ferry_config(path, remote, local, state, transfers, session=""):
    """Writes a ferry config at `path`: one pull session, `bench`, with `session`'s extra lines."""
    open(path, "w").write(f"[agent]\nstate = {state}\ntransfers = {transfers}\n\n"
                          f"[session bench]\nremote = {remote}\nlocal = {local}\n{session}")


def private_ca(directory):
    """A private CA and a certificate for 127.0.0.1 signed by it: (ca.pem, server.pem, server.key)."""
    d = fresh(directory)
    open(d + "/ext.cnf", "w").write("subjectAltName = IP:127.0.0.1\n")
    for cmd in ["openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -subj /CN=ferry-bench-ca -days 2",
                "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1",
                "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
                "-extfile ext.cnf"]:
        subprocess.run(cmd.split(), cwd=d, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return d + "/ca.pem", d + "/server.pem", d + "/server.key"


def agent_at_rest(ferry, cfg, seconds=20, settle_timeout=900, files="10,000", note=""):
    """`ferry agent` on an in-sync session (its config at `cfg`, polling every second or so):
    after its first polls, the CPU time (user + system, every thread) it spends per unchanged
    poll over `seconds`, and its resident memory at rest. Returns (ms per poll, RSS MiB, polls, files, note)."""
    prom = cfg + ".prom"
    text = open(cfg).read().replace("[agent]\n", f"[agent]\nmetrics = {prom}\n", 1)
    open(cfg, "w").write(text)
    if os.path.exists(prom):
        os.unlink(prom)
    agent = subprocess.Popen([ferry, "agent", "--config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def polls():
        """The polls the agent has counted so far, by its metrics file."""
        try:
            for line in open(prom):
                if line.startswith("ferry_polls_total{"):
                    return int(line.split()[-1])
        except OSError:
            pass
        return 0

    def cpu():
        """The agent's CPU seconds so far."""
        return cpu_seconds(proc_stat(agent.pid))

    deadline = time.time() + settle_timeout
    while polls() < 2 and time.time() < deadline:
        time.sleep(0.2)
    c0, n0 = cpu(), polls()
    time.sleep(seconds)
    c1, n1 = cpu(), polls()
    status = open(f"/proc/{agent.pid}/status").read()
    rss = int(next(l for l in status.splitlines() if l.startswith("VmRSS:")).split()[1]) / 1024
    agent.terminate()
    agent.wait(timeout=60)
    n = max(1, n1 - n0)
    print(f"  agent at rest: {n1 - n0} polls, {(c1 - c0) * 1000 / n:.1f} ms CPU per poll, RSS {rss:.1f} MiB",
          file=sys.stderr)
    return (c1 - c0) * 1000 / n, rss, n1 - n0, files, note


def parse_size(text):
    """'37.500 MiB' → 37.5 (MiB); '0 B' → 0."""
    try:
        number, unit = text.replace("i", "").split()
        scale = {"B": 1 / (1 << 20), "KB": 1 / 1024, "MB": 1, "GB": 1024}[unit.upper()]
        return float(number) * scale
    except (ValueError, KeyError):
        return float("nan")


def sent_bytes(log):
    """The body bytes nginx sent, by its log (format `bench`: ... body_bytes_sent request_length)."""
    total = 0
    for line in open(log):
        parts = line.split()
        if len(parts) >= 2 and parts[-2].isdigit():
            total += int(parts[-2])
    return total


def received_bytes(log, method="PUT"):
    """The bytes of requests of `method` nginx received (request line, headers and body), and how
    many there were, by its log (format `bench`)."""
    total, requests = 0, 0
    for line in open(log):
        parts = line.split()
        if len(parts) >= 2 and parts[0] == method and parts[-1].isdigit():
            total += int(parts[-1])
            requests += 1
    return total, requests


def sha256_of(path):
    """The SHA-256 of the file at `path` (hex), or None when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def make_workloads(root):
    """Under `root`: big/1GiB.bin, and small/ with 10,000 files of 4 KiB in 100 directories, all
    random. Returns (big, small)."""
    big = fresh(root + "/big")
    with open(big + "/1GiB.bin", "wb") as f:
        for _ in range(1024):
            f.write(os.urandom(1 << 20))
    return big, make_small(root)


def curl_list(path, url, out):
    """Writes at `path` a `curl -K` list of make_small's 10,000 files under `url`small/, each into
    `out`/curl/ at its place. Returns `path`."""
    with open(path, "w") as f:
        for d in range(100):
            for i in range(100):
                f.write(f'url = "{url}small/d{d:02}/f{i:03}.bin"\noutput = "{out}/curl/d{d:02}/f{i:03}.bin"\n')
    return path


def make_small(root):
    """`root`/small: 10,000 random files of 4 KiB in 100 directories."""
    small = fresh(root + "/small")
    for d in range(100):
        os.makedirs(f"{small}/d{d:02}")
        for i in range(100):
            with open(f"{small}/d{d:02}/f{i:03}.bin", "wb") as f:
                f.write(os.urandom(4096))
    return small

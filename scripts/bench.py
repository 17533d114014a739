#!/usr/bin/env python3
"""Side-by-side benchmark of ferry and its peers (see scripts/bench.sh).

Every workload runs each tool in turn, round after round (alternated, so drift hits all alike),
into fresh directories on tmpfs, and reports the median wall time and peak RSS per tool, with
ferry's ratio to each peer and to the workload's target (docs/benchmarks.md states each).
"""
import argparse
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

BASE = "/dev/shm/ferry-bench"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=10):
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
        pid = os.posix_spawnp("/usr/bin/time", ["/usr/bin/time", "-f", "%U %S %M", "-o", rssfile] + cmd, env or os.environ,
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


class Nginx:
    def __init__(self, root, log=False, tls=None, dav=False, slow=None):
        """tls: (certificate, key) to serve HTTPS with HTTP/2. dav: accept WebDAV writes, with
        PROPFIND (Debian's dav-ext module) for rclone."""
        self.dir = fresh(BASE + ("/nginx-tls" if tls else "/nginx-dav" if dav else "/nginx"))
        # With `log`: its access log, a line per answer ('$request $status $body_bytes_sent $request_length').
        self.log = self.dir + "/access.log"
        self.port = free_port()
        user = "user root;" if os.getuid() == 0 else ""
        access = f"access_log {self.log} bench;" if log else "access_log off;"
        dav_ext = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so"
        load = f"load_module {dav_ext};" if dav else ""
        methods = ("dav_methods PUT DELETE MKCOL COPY MOVE; dav_ext_methods PROPFIND OPTIONS; create_full_put_path on; "
                   "client_max_body_size 0;") if dav else ""
        # slow: /slow/ serves the same files paced by nginx at that rate (limit_rate).
        slow_location = ("location /slow/ { alias %s/; limit_rate %s; }" % (root, slow)) if slow else ""
        conf = f"""
{user}
{load}
daemon off; worker_processes 2; pid {self.dir}/nginx.pid; error_log {self.dir}/error.log;
events {{ worker_connections 1024; }}
http {{
  log_format bench '$request $status $body_bytes_sent $request_length';
  {access}
  client_body_temp_path {self.dir}/b; proxy_temp_path {self.dir}/p; fastcgi_temp_path {self.dir}/f;
  uwsgi_temp_path {self.dir}/u; scgi_temp_path {self.dir}/s;
  default_type application/octet-stream; sendfile on; tcp_nopush on; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{self.port}{" ssl http2" if tls else ""}; root {root}; autoindex on; index .no-index-page; {methods}
           {slow_location}
           {f"ssl_certificate {tls[0]}; ssl_certificate_key {tls[1]};" if tls else ""} }}
}}"""
        open(self.dir + "/nginx.conf", "w").write(conf)
        self.proc = subprocess.Popen(["nginx", "-c", self.dir + "/nginx.conf", "-p", self.dir + "/"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/"

    name = "nginx"

    def cpu(self):
        """The CPU (user + system) that the master and its workers have used so far."""
        total = 0.0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                fields = proc_stat(pid)
            except OSError:
                continue
            if int(pid) == self.proc.pid or int(fields[1]) == self.proc.pid:
                total += cpu_seconds(fields)
        return total

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class SSHD:
    """A real OpenSSH sshd on 127.0.0.1 serving SFTP (`internal-sftp`), set up as the integration
    tests' SSHServer is: an ed25519 host key and client key of its own, key login for the current
    user only, no password, no PAM; everything under BASE/sshd. SFTP paths are the server's
    absolute paths. `cpu()`: its user + system seconds so far, every connection's included."""
    name = "sshd"

    def __init__(self):
        self.dir = fresh(BASE + "/sshd")
        self.port = free_port()
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ferry-bench", "-f", f"{self.dir}/{key}"], check=True)
        self.key = self.dir + "/client_key"
        shutil.copy(self.key + ".pub", self.dir + "/authorized_keys")
        kind, blob = open(self.dir + "/host_key.pub").read().split()[:2]
        self.known_hosts = self.dir + "/known_hosts"
        open(self.known_hosts, "w").write(f"[127.0.0.1]:{self.port} {kind} {blob}\n")
        # curl (libssh2) checks the host key by its SHA-256, unpadded base64 as ssh-keygen -l prints it.
        printed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", self.dir + "/host_key.pub"], capture_output=True, text=True, check=True)
        self.fingerprint = printed.stdout.split()[1].removeprefix("SHA256:")
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", 0o755, exist_ok=True)  # sshd run as root insists on it
        # StrictModes off: the keys sit on tmpfs under directories sshd would judge. MaxStartups up
        # from 10: 16 parallel transfers open their connections at once. SHLVL=1: bash, run by sshd
        # for a command (rclone's md5sum of each file it sent), would otherwise source the user's
        # ~/.bashrc, which on a developer's machine can cost more than the transfer (root's here runs
        # `pyenv init`: 1,000 files took rclone 121 s, 157 ms of sshd's CPU a file).
        open(self.dir + "/sshd_config", "w").write(f"""ListenAddress 127.0.0.1:{self.port}
HostKey {self.dir}/host_key
PidFile {self.dir}/sshd.pid
AuthorizedKeysFile {self.dir}/authorized_keys
AllowUsers {self.user}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 100
SetEnv SHLVL=1
Subsystem sftp internal-sftp
""")
        # sshd re-executes itself, so it is named by its absolute path; -D -e: foreground, log on stderr.
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", self.dir + "/sshd_config"],
                                     stdout=subprocess.DEVNULL, stderr=open(self.dir + "/sshd.log", "w"))
        try:
            wait_port(self.port)
        except SystemExit:
            self.stop()
            raise SystemExit("sshd did not start: " + open(self.dir + "/sshd.log").read()[-2000:])
        self.url = f"sftp://{self.user}@127.0.0.1:{self.port}"

    def session(self):
        """A ferry session's sftp keys."""
        return f"sftp-key = {self.key}\nsftp-known-hosts = {self.known_hosts}\n"

    def curl(self, args):
        """curl over SFTP (its libssh2), logging in with the client key and checking the host key
        by its SHA-256 (--hostpubsha256), as ferry checks known_hosts."""
        return ["curl", "-sS", "--key", self.key, "--hostpubsha256", self.fingerprint] + args

    def rclone(self, args):
        """rclone with an on-the-fly :sftp: remote on this server, host key checked against known_hosts."""
        return ["rclone", "--config", "/dev/null"] + args + ["--sftp-host", "127.0.0.1", "--sftp-port", str(self.port), "--sftp-user",
                                                              self.user, "--sftp-key-file", self.key, "--sftp-known-hosts-file", self.known_hosts]

    def cpu(self, settle=5):
        """The listener's CPU and its descendants': each connection is a process of its own, whose
        CPU moves into the listener's children's time once it has ended and been reaped. Waits (up
        to `settle` seconds) for the connections of the run just measured to end first."""
        deadline = time.time() + settle
        while True:
            stats = {}
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        stats[int(pid)] = proc_stat(pid)
                    except OSError:
                        pass
            tree, queue = [], [self.proc.pid]
            while queue:
                pid = queue.pop()
                tree.append(pid)
                queue += [p for p, fields in stats.items() if int(fields[1]) == pid]
            if len(tree) == 1 or time.time() > deadline:
                break
            time.sleep(0.02)
        # utime, stime, cutime, cstime: a process's own and its reaped children's.
        ticks = sum(int(stats[pid][i]) for pid in tree if pid in stats for i in (11, 12, 13, 14))
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def ferry_config(path, remote, local, state, transfers, session=""):
    open(path, "w").write(f"[agent]\nstate = {state}\ntransfers = {transfers}\n\n"
                          f"[session bench]\nremote = {remote}\nlocal = {local}\n{session}")


def private_ca(directory):
    """A private CA and a certificate for 127.0.0.1 signed by it: (ca.pem, server.pem, server.key)."""
    d = fresh(directory)
    open(d + "/ext.cnf", "w").write("subjectAltName = IP:127.0.0.1\n")
    for cmd in ["openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -subj /CN=ferry-bench-ca -days 2",
                "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1",
                "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext.cnf"]:
        subprocess.run(cmd.split(), cwd=d, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return d + "/ca.pem", d + "/server.pem", d + "/server.key"


def million_entries(ferry, runs, dirs=1000, per=1000):
    """A 1,000,000-entry tree (1,000 directories × 1,000 small files) mirrored in sync but for one
    file changed on the remote: each run changes one more file and publishes again, first as
    format 2 (`manifest build`, the default: `manifest.json` and its objects), then as a flat
    format-1 manifest (`flat.json`), each read by its own session (and state) into one mirror.
    (Two trees of a million files: a tmpfs has room for about three million inodes.)"""
    www = fresh(BASE + "/m-www")
    local = fresh(BASE + "/m-local")
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

    def publish(version, flat):
        if not flat:
            subprocess.run([ferry, "manifest", "build", www, "--exclude", "flat.json", "--quiet"], check=True)
            return
        body = ",\n".join(f'{{"path": "{r}", "size": {n}, "sha256": "{h}", "mtime": "2023-11-14T22:13:20Z", "mode": "0644"}}'
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
            (f"ferry sync now ({label}1 changed)", lambda flat=flat: change_one(flat), lambda conf=conf: [ferry, "sync", "now", "--config", conf, "--quiet"]),
            (f"ferry sync now ({label}304)", None, lambda conf=conf: [ferry, "sync", "now", "--config", conf, "--quiet"]),
        ]
        if not flat:
            tools.append(("find -printf size, mtime, mode (floor)", None, lambda: ["sh", "-c", f"find {local} -printf '%s %T@ %m\\n' >/dev/null"]))
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


def million_sections(ferry, runs):
    """The 1,000,000-entry rows (median of 3 at most: each run rebuilds a million-file manifest)
    and the agent at rest on that session."""
    million, at_rest = million_entries(ferry, min(runs, 3))
    return [("1,000,000-entry manifest, one file changed", million, ("absolute", 3.0, 256), None,
             "wall ≤ 3 s and peak RSS ≤ 256 MiB for a run that changes one file (and for a 304 run)"),
            ("ferry agent at rest, 1,000,000-file session", at_rest, "at-rest", None,
             "cheap at rest: an unchanged poll (304) costs one request and no scan")]


def run_events(cmd):
    """Runs a ferry command with --json; returns (wall seconds, peak RSS in MiB, events)."""
    rssfile = BASE + "/rss-json.txt"
    start = time.monotonic()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rssfile] + cmd + ["--json"], capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        print(f"  ! {' '.join(cmd[:3])}... exited {done.returncode}: {done.stderr[-400:]}", file=sys.stderr)
    fields = open(rssfile).read().split()
    rss = int(fields[-1]) / 1024 if fields and fields[-1].isdigit() else 0.0
    return wall, rss, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def metadata_bytes(events):
    return sum(e.get("metadata_bytes", 0) for e in events if e.get("event") == "manifest-fetched")


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
    nginx = Nginx(www)
    rows = {}
    counter = [0]

    def change(count):
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
        _, _, cold = run_events([ferry, "sync", "now", "--config", cfg])
        change(1)
        run([ferry, "manifest", "build", www, "--format", str(fmt), "--quiet"])
        one_wall, one_rss, one = run_events([ferry, "sync", "now", "--config", cfg])
        change(100)
        run([ferry, "manifest", "build", www, "--format", str(fmt), "--quiet"])
        _, _, hundred = run_events([ferry, "sync", "now", "--config", cfg])
        rows[fmt] = (metadata_bytes(cold), metadata_bytes(one), metadata_bytes(hundred), build_wall, build_rss, one_wall, one_rss)
    nginx.stop()
    shutil.rmtree(www, ignore_errors=True)
    shutil.rmtree(local, ignore_errors=True)
    return rows


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
    mtime = 1_700_000_000
    entries = []
    print(f"== generations, {files:,} files: making the tree...", file=sys.stderr)
    compare_in_place = files <= 100_000
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

    def publish(version):
        body = ",\n".join(f'{{"path": "{r}", "size": {n}, "sha256": "{h}", "mtime": "2023-11-14T22:13:20Z"}}' for r, n, h in entries)
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
        version[0] += 1
        k = version[0] * 7919 % len(entries)
        data = f"changed {version[0]}\n".encode()
        with open(f"{www}/{entries[k][0]}", "wb") as f:
            f.write(data)
        entries[k][1:] = [len(data), hashlib.sha256(data).hexdigest()]
        publish(version[0])

    scratch = base + "/g-cp"

    def current():
        return os.path.join(os.path.dirname(local), os.readlink(local))

    # cp -al links the remote's tree (the same shape): linking the mirror's files would move their
    # ctime, and ferry would rightly hash them all again on its next run.
    tools = [("ferry sync now, generations (1 changed)", change_one, lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"])]
    if compare_in_place:
        tools.append(("ferry sync now, in place (1 changed)", None, lambda: [ferry, "sync", "now", "--config", cfg_in_place, "--quiet"]))
    tools.append(("cp -al of one generation (floor)", lambda: shutil.rmtree(scratch, ignore_errors=True), lambda: ["cp", "-al", www, scratch]))
    table = measure(f"generations: {files:,} files, one changed", tools, runs)
    shutil.rmtree(scratch, ignore_errors=True)

    def kib(path):
        return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True).stdout.split()[0])
    kept = sorted(n for n in os.listdir(local + ".generations") if n.startswith("g"))
    space = (kib(local + ".generations"), kib(current()), len(kept))
    for path in (www, local + ".generations", inplace):
        shutil.rmtree(path, ignore_errors=True)
    os.unlink(local)
    if base != BASE:
        shutil.rmtree(base, ignore_errors=True)
    return table, convert_wall, convert_rss, space


def generations_sections(ferry, runs):
    lines = ["`layout = generations` (issue 21): a sync that finds one file changed builds the next generation "
             "(hard links for the unchanged files, one download) and switches `local` with one rename; "
             "`keep-generations = 2`, so each run also removes the generation that falls out. Small files over `file://`, "
             "10,000 on tmpfs, 1,000,000 on ext4 (the VM's disk; tmpfs counts each hard link as an inode and runs out); the whole `ferry sync now` process, median of alternated runs, beside `cp -al` of one generation "
             "of the same shape (the same links, nothing else) and, at 10,000 files, the same change synced in place.", "",
             "| files | ferry, generations | ferry, in place | cp -al (floor) | generations ÷ cp -al | peak RSS | converting an in-place mirror | disk: all generations / one |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    # tmpfs counts every hard link against its inode limit (half the RAM's pages), which three
    # generations of 1,000,000 files and the remote's tree pass: that size runs on the disk (ext4).
    for dirs, per, base in ((10, 1000, BASE), (1000, 1000, "/var/tmp/ferry-bench-generations")):
        table, convert_wall, convert_rss, (all_kib, one_kib, count) = generation_switch(ferry, runs, dirs, per, base)
        g = table["ferry sync now, generations (1 changed)"]
        cp = table["cp -al of one generation (floor)"]
        place = table.get("ferry sync now, in place (1 changed)")
        lines.append(f"| {dirs * per:,} | {g[0]:.3f} s | {f'{place[0]:.3f} s' if place else '—'} | {cp[0]:.3f} s | {g[0] / cp[0]:.2f} | "
                     f"{g[1]:.0f} MiB | {convert_wall:.2f} s | {count} × = {all_kib / 1024:.1f} MiB / {one_kib / 1024:.1f} MiB |")
    lines += ["", "Disk: `du -sk` counts a file once however many generations link it, so what the kept generations add "
              "is their changed files and their directories\' blocks, not their unchanged files. Each measured run also removed "
              "the generation that fell out of `keep-generations` (a million unlinks at 1,000,000 files)."]
    return [("layout = generations: the switch and its disk space", lines, "text", None, None)]


def format_sections(ferry, runs):
    lines = ["Bytes of manifest and metadata objects one mirror fetched (`metadata_bytes` of its `manifest-fetched` event), "
             "for a cold mirror, then one changed file, then 100 changed files scattered over the tree (each after a new "
             "`manifest build`); the build and the one-change sync timed once (wall, peak RSS). Targets (issue 20): one change "
             "≤ 10 KB, 100 changes ≤ 200 KB at 100,000 files; cold ≤ 1.25 × the flat manifest; one change ≤ 10 KB at 1,000,000; "
             "build of 1,000,000 ≤ 16.6 s and 668 MiB, sync with one change ≤ 5.4 s and 382 MiB.", "",
             "| files | format | cold | one change | 100 changes | build | build RSS | sync, one change | its RSS |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    for files in (100_000, 1_000_000):
        rows = format_cost(ferry, files)
        for fmt, (cold, one, hundred, bw, brss, sw, srss) in rows.items():
            lines.append(f"| {files:,} | {fmt} | {cold:,} B | {one:,} B | {hundred:,} B | {bw:.1f} s | {brss:.0f} MiB | {sw:.2f} s | {srss:.0f} MiB |")
        ratio = rows[2][0] / rows[1][0]
        verdicts.append(f"At {files:,} files format 2 costs a cold mirror {ratio:.2f} × the flat manifest, one change "
                        f"{rows[2][1]:,} B ({rows[1][1] / max(rows[2][1], 1):,.0f} × less than format 1), 100 changes {rows[2][2]:,} B.")
    speed = subprocess.run(["openssl", "speed", "-seconds", "1", "ed25519"], capture_output=True, text=True).stdout
    verify = next((float(l.split()[-1]) for l in speed.splitlines() if "Ed25519" in l and l.split()[-1].replace(".", "").isdigit()), 0.0)
    if verify:
        verdicts.append(f"Verifying the signed root is one Ed25519 verification: {1e6 / verify:.0f} µs with libcrypto here "
                        f"(`openssl speed ed25519`: {verify:,.0f} verifications/s), the library ferry calls.")
    return [("manifest formats: what a change costs a mirror", lines + [""] + verdicts, "text", None, None)]


def delta_patterns(size):
    """The four change patterns of issue 41, each 1% of `size` (insertions: 104 × 1 KiB per GiB),
    as functions that turn the old bytes into the new ones in place (a bytearray)."""
    import random
    rng = random.Random(41)
    one = size // 100

    def one_run(b):
        at = size // 2
        b[at:at + one] = os.urandom(one)

    def runs_100k(b):
        n = max(1, one // (100 << 10))
        for k in range(n):
            at = (k * 2 + 1) * size // (2 * n)
            b[at:at + (100 << 10)] = os.urandom(100 << 10)

    def scattered(b):
        for at in sorted(rng.sample(range(0, size - 4096, 4096), one // 4096)):
            b[at:at + 4096] = os.urandom(4096)

    def insertions(b):
        n = max(1, 104 * size // (1 << 30))
        for at in sorted(rng.sample(range(1 << 20, size - (1 << 20)), n), reverse=True):
            b[at:at] = os.urandom(1024)

    return [("one 1% run", one_run), ("1% in 100 KiB runs", runs_100k), ("1% in scattered 4 KiB writes", scattered),
            (f"{max(1, 104 * size // (1 << 30))} × 1 KiB insertions", insertions)]


def delta_kills_and_repair(ferry, prepare, cfg, mirror, new, wire, log, uninterrupted, url, state):
    """On the one-run pattern: 10 kill -9s during the delta, served by nginx paced to about a
    tenth of it a second (`/slow/`: the link is the bottleneck, as over a network), then a run that
    completes: what nginx sent for it all against an uninterrupted delta (target ≤ 1.05×); and
    `check --repair` of three 4 KiB spots damaged in the new version (target ≤ 1 MB fetched).
    Returns the report's lines."""
    import random
    rng = random.Random(7)
    prepare()
    open(log, "w").close()
    kills, finished = 10, 0
    for _ in range(kills):
        p = subprocess.Popen([ferry, "sync", "now", "--config", cfg, "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.5))
        if p.poll() is not None:
            finished += 1
        p.kill()
        p.wait()
    subprocess.run([ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)
    total = wire("/slow/cur/")[0]
    right = open(mirror + "/big.bin", "rb").read() == new
    lines = [f"{kills} kill -9s during the one-run delta (nginx paced to a tenth of it a second, {finished} of the runs ended before their kill), "
             f"then a run that completes: nginx sent {total / 1e6:.2f} MB in all, "
             f"{total / uninterrupted:.3f} × an uninterrupted delta's {uninterrupted / 1e6:.2f} MB (target ≤ 1.05×: "
             f"{'meets' if total <= 1.05 * uninterrupted else 'misses'} it); the result is the new version: {'yes' if right else 'NO'}."]
    size = len(new)
    with open(mirror + "/big.bin", "r+b") as f:
        for at in (size // 10, size // 2, size * 9 // 10):
            f.seek(at)
            f.write(os.urandom(4096))
    open(log, "w").close()
    start = time.monotonic()
    subprocess.run([ferry, "check", "--config", cfg, "--repair", "--quiet"], check=True)
    wall = time.monotonic() - start
    fetched = wire("/slow/cur/")[0]
    right = open(mirror + "/big.bin", "rb").read() == new
    lines.append(f"`check --repair` of three 4 KiB spots damaged in the file: {fetched:,} B fetched (target ≤ 1 MB at 1 GiB: "
                 f"{'meets' if fetched <= 1e6 else 'misses'} it), {wall:.2f} s with the hash of the whole tree (over the paced link); repaired: {'yes' if right else 'NO'}.")
    return lines


def delta_sections(ferry, runs):
    """A large file with 1% changed, four ways: bytes on the wire (nginx's own count), wall, client
    CPU and peak RSS for ferry's delta beside zsync (4 KiB blocks, HTTP ranges) and casync (its
    chunk store over HTTP), each seeded with the old version; the index bytes each fetched, cold
    and per update. BENCH_DELTA_MIB sets the size (default 256)."""
    mib = int(os.environ.get("BENCH_DELTA_MIB", "256"))
    size = mib << 20
    www = fresh(BASE + "/delta-www")
    work = fresh(BASE + "/delta-work")
    # /slow/ serves the same files paced by the server (the kill loop's link).
    nginx = Nginx(www, log=True, slow=f"{max(64, int(size / 100 / 10) >> 10)}k")
    log = nginx.log
    print(f"== delta: making {mib} MiB...", file=sys.stderr)
    old = bytearray(os.urandom(size))
    os.makedirs(www + "/old")
    open(www + "/old/big.bin", "wb").write(old)
    subprocess.run([ferry, "manifest", "build", www + "/old", "--version", "1", "--quiet"], check=True)
    open(work + "/seed.bin", "wb").write(old)

    def wire(prefix):
        total, requests = 0, 0
        for line in open(log, errors="replace"):
            parts = line.split()
            if len(parts) >= 6 and parts[1].startswith(prefix):
                total += int(parts[-2])
                requests += 1
        return total, requests

    rows = []
    verdicts = []
    extras = []
    for label, change in delta_patterns(size):
        new = bytearray(old)
        change(new)
        d = fresh(www + "/new")
        open(d + "/big.bin", "wb").write(new)
        subprocess.run([ferry, "manifest", "build", d, "--version", "2", "--quiet"], check=True)
        # nginx's validators are the mtime (in seconds) and the size: the new root must not share
        # the old one's, or the mirror's conditional GET is answered 304.
        later = os.stat(www + "/old/manifest.json").st_mtime + 60
        os.utime(d + "/manifest.json", (later, later))
        subprocess.run(["zsyncmake", "-b", "4096", "-u", "big.bin", "-o", d + "/big.zsync", d + "/big.bin"], check=True,
                       stdout=subprocess.DEVNULL, cwd=d)
        subprocess.run(["casync", "make", "--store=" + www + "/new.castr", www + "/new.caibx", d + "/big.bin"], check=True,
                       stdout=subprocess.DEVNULL)
        mirror, state, cfg = work + "/mirror", work + "/state", work + "/ferry.conf"

        def ferry_prepare(path="cur/"):
            # A mirror in sync with the old version (its index cached, as after any earlier
            # sync), then the remote moves to the new one. `path`: under nginx (the kill loop's
            # is the paced /slow/cur/, so that its runs find the old index cached, as a mirror would).
            fresh(mirror)
            fresh(state)
            shutil.copyfile(work + "/seed.bin", mirror + "/big.bin")
            # Written an hour ago, as a mirror's file is: one written within the second would be
            # hashed again by the timed run (its hash cache cannot vouch for it yet).
            os.utime(mirror + "/big.bin", (time.time() - 3600, time.time() - 3600))
            if os.path.lexists(www + "/cur"):
                os.unlink(www + "/cur")
            os.symlink("old", www + "/cur")
            ferry_config(cfg, nginx.url + path, mirror, state, 8)
            subprocess.run([ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)
            os.unlink(www + "/cur")
            os.symlink("new", www + "/cur")
            open(log, "w").close()

        def seed_prepare(target):
            if os.path.exists(target):
                os.unlink(target)
            open(log, "w").close()

        tools = [
            ("ferry sync now", ferry_prepare, lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"], "/cur/"),
            ("zsync", lambda: seed_prepare(work + "/zsync.bin"),
             # From the output's directory: zsync renames its temporary file from there.
             lambda: ["sh", "-c", f"cd {work} && exec zsync -q -i seed.bin -o zsync.bin {nginx.url}new/big.zsync"], "/new/"),
            ("casync extract", lambda: seed_prepare(work + "/casync.bin"),
             lambda: ["casync", "extract", "--store=" + nginx.url + "new.castr", "--seed=" + work + "/seed.bin",
                      nginx.url + "new.caibx", work + "/casync.bin"], "/new"),
        ]
        results = {name: [] for name, _, _, _ in tools}
        for r in range(runs):
            for name, prepare, command, prefix in tools:
                prepare()
                wall, rss, code, cpu = run(command())
                sent, requests = wire(prefix)
                index = wire("/cur/.ferry/meta/")[0] if name.startswith("ferry") else wire("/new/big.zsync")[0] if name == "zsync" else wire("/new.caibx")[0]
                if code == 0:
                    results[name].append((sent, wall, cpu, rss, requests, index))
                print(f"  {label} run {r + 1} {name:16s} {sent / 1e6:8.2f} MB {requests:6d} requests {wall:6.2f} s {cpu:6.2f} s CPU {rss:6.1f} MiB",
                      file=sys.stderr)
        for name, values in results.items():
            if not values:
                continue
            med = lambda i: statistics.median(v[i] for v in values)
            rows.append((label, name, med(0), med(5), med(1), med(2), max(v[3] for v in values), med(4)))
        if label == "one 1% run":
            extras = delta_kills_and_repair(ferry, lambda: ferry_prepare("slow/cur/"), cfg, mirror, bytes(new), wire, log,
                                            statistics.median(v[0] for v in results["ferry sync now"]), nginx.url, state)
        same = all(open(p, "rb").read() == bytes(new) for p in (mirror + "/big.bin", work + "/zsync.bin", work + "/casync.bin"))
        verdicts.append(f"{label}: every tool's result is the new version byte for byte: {'yes' if same else 'NO'}.")
        shutil.rmtree(www + "/new.castr", ignore_errors=True)
    # The index a cold mirror fetches: every metadata object of a fresh sync of the last version.
    cold_state, cold_mirror = fresh(work + "/cold-state"), fresh(work + "/cold")
    ferry_config(cfg, nginx.url + "new/", cold_mirror, cold_state, 8)
    open(log, "w").close()
    subprocess.run([ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)
    cold = wire("/new/.ferry/meta/")[0]
    zsync_index = os.path.getsize(www + "/new/big.zsync")
    nginx.stop()
    targets = {"one 1% run": 12, "1% in 100 KiB runs": 12, "1% in scattered 4 KiB writes": 32}
    lines = [f"A {mib} MiB file with 1% of it changed, four ways; each tool starts from the old version (ferry: a mirror in sync "
             "with it; zsync and casync: it as their seed) and fetches the new one from nginx on 127.0.0.1. On the wire: nginx's "
             "own count of body bytes for the tool's requests (index included), medians of "
             f"{runs} alternated runs. Targets at 1 GiB (issue 41), scaled to the size: ≤ 12 MB for one run and for 100 KiB runs, "
             "≤ 32 MB for scattered 4 KiB writes, ≤ 3 MB for 104 insertions; client CPU ≤ 5 s/GiB; peak RSS ≤ 128 MiB; wall ≤ zsync's.", "",
             "| change | tool | on the wire | of it index | requests | wall | client CPU | peak RSS |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for label, name, sent, index, wall, cpu, rss, requests in rows:
        lines.append(f"| {label} | {name} | {sent / 1e6:,.2f} MB | {index / 1e6:,.2f} MB | {requests:,.0f} | {wall:.2f} s | {cpu:.2f} s | {rss:.0f} MiB |")
    scale = size / (1 << 30)
    for label, name, sent, *_ in rows:
        if name.startswith("ferry"):
            target = targets.get(label, 3) * 1e6 * scale
            verdicts.append(f"ferry, {label}: {sent / 1e6:.2f} MB against a target of {target / 1e6:.2f} MB at this size: "
                            f"{'meets' if sent <= target else 'misses'} it.")
    walls = {(label, name): wall for label, name, _, _, wall, *_ in rows}
    faster = [label for label, _ in delta_patterns(size) if walls.get((label, "ferry sync now"), 1e9) <= walls.get((label, "zsync"), 0)]
    verdicts.append(f"Wall ≤ zsync's in {len(faster)} of 4 patterns ({', '.join(faster) or 'none'}). ferry's wall is a whole `sync now` "
                    "(manifest, plan, state); the version it holds is known by the cached index of its content, so it reads only the "
                    "bytes it reuses; it asks for up to 64 ranges in a request (multipart/byteranges), as zsync asks for many. One "
                    "range a request (S3) would cost 40 ms a request here: on loopback (64 KiB segments) nginx's `tcp_nopush` holds "
                    "the last segment of an answer of more than one until the client's delayed ACK.")
    verdicts += extras
    verdicts += delta_push(ferry, size, old, work)
    verdicts.append(f"The index a cold mirror fetches: {cold:,} B of metadata objects ({cold / size * 100:.3f}% of the file; "
                    f"zsync's .zsync file: {zsync_index:,} B, {zsync_index / size * 100:.3f}%, fetched whole on every update).")
    return [(f"delta: a {mib} MiB file, 1% changed", lines + [""] + verdicts, "text", None, None)]


def delta_push(ferry, size, old, work):
    """A push of each change pattern with remote-layout = objects (the file stored as its pieces)
    to nginx's WebDAV, from a push of the old version: the bytes nginx received for the push's
    PUTs (headers included), against the whole file a push with the tree layout sends. Between
    patterns the source goes back to the old version (whose pieces the remote still stores)."""
    root = fresh(BASE + "/delta-push-www")
    dav = Nginx(root, log=True, dav=True)
    log = dav.log
    src, state, cfg = fresh(work + "/push-src"), fresh(work + "/push-state"), work + "/push.conf"
    open(cfg, "w").write(f"[agent]\nstate = {state}\ntransfers = 8\n\n[session up]\ndirection = push\nremote = {dav.url}\n"
                         f"local = {src}\nremote-layout = objects\n")
    open(src + "/big.bin", "wb").write(old)
    subprocess.run([ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)
    first = received_bytes(log)[0]
    lines = []
    for label, change in delta_patterns(size):
        new = bytearray(old)
        change(new)
        open(src + "/big.bin", "wb").write(new)
        open(log, "w").close()
        wall, rss, code, cpu = run([ferry, "sync", "now", "--config", cfg, "--quiet"])
        sent, puts = received_bytes(log)
        target = 15e6 * size / (1 << 30)
        verdict = f" (target for a 1% change, ≤ {target / 1e6:.2f} MB at this size: {'meets' if sent <= target else 'misses'} it)" if label == "one 1% run" else ""
        lines.append(f"Push, objects layout, {label}: {sent / 1e6:,.2f} MB received by the server in {puts:,} PUTs{verdict}, "
                     f"{wall:.2f} s, {cpu:.2f} s CPU, {rss:.0f} MiB peak RSS{'' if code == 0 else ', FAILED'}.")
        print(f"  push {label}: {sent / 1e6:.2f} MB in {puts} PUTs, {wall:.2f} s", file=sys.stderr)
        open(src + "/big.bin", "wb").write(old)
        subprocess.run([ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)
    dav.stop()
    lines.append(f"(The first push of the old version sent {first / 1e6:,.2f} MB; with the tree layout every change sends the "
                 f"whole {size / 1e6:,.0f} MB file. A piece is about 145 KiB: a change touches the pieces that hold it, so one "
                 "run of 1% costs about 1%, while 4 KiB writes scattered over the file touch most pieces.)")
    return lines


class SiteCache:
    """nginx as a site cache in front of `origin` (a base URL): examples/site-cache/site-cache.conf
    as shipped, its values filled in; its log says, for every answer, HIT or MISS and what it took
    from the origin for it."""

    def __init__(self, origin):
        self.dir = fresh(BASE + "/site-cache")
        self.port = free_port()
        conf = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "site-cache", "site-cache.conf")).read()
        conf = conf.replace("@LISTEN@", f"127.0.0.1:{self.port}").replace("@ORIGIN@", origin.rstrip("/")).replace("@CACHE@", self.dir + "/cache")
        open(self.dir + "/site.conf", "w").write(conf)
        user = "user root;" if os.getuid() == 0 else ""
        open(self.dir + "/nginx.conf", "w").write(f"""
{user}
daemon off; worker_processes 2; pid {self.dir}/nginx.pid; error_log {self.dir}/error.log;
events {{ worker_connections 4096; }}
http {{
  log_format cache '$upstream_cache_status|$upstream_bytes_received|$uri';
  access_log {self.dir}/access.log cache;
  client_body_temp_path {self.dir}/b; proxy_temp_path {self.dir}/p; fastcgi_temp_path {self.dir}/f;
  uwsgi_temp_path {self.dir}/u; scgi_temp_path {self.dir}/s;
  default_type application/octet-stream; sendfile on;
  include {self.dir}/site.conf;
}}""")
        self.proc = subprocess.Popen(["nginx", "-c", self.dir + "/nginx.conf", "-p", self.dir + "/"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        self.url = f"http://127.0.0.1:{self.port}/"

    def lines(self):
        return [line.rstrip("\n").split("|", 2) for line in open(self.dir + "/access.log") if line.count("|") >= 2]

    def hits(self):
        statuses = [status for status, _, _ in self.lines()]
        return sum(1 for x in statuses if x in ("HIT", "REVALIDATED")), len(statuses)

    def from_origin(self):
        """What the cache took from the origin for files (the root manifest and metadata objects
        aside): the bodies and headers of its upstream answers."""
        total = 0
        for _, received, uri in self.lines():
            if uri.endswith("/manifest.json") or "/.ferry/meta/" in uri:
                continue
            total += sum(int(x) for x in received.replace(",", " ").replace(":", " ").split() if x.isdigit())
        return total

    def stop(self):
        """A fast shutdown (SIGTERM): the master closes its workers' connections and waits for
        them (a SIGKILL to the master alone would leave the workers serving)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


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
    mib = int(os.environ.get("BENCH_FLEET_MIB", "256"))
    sizes = [int(x) for x in os.environ.get("BENCH_FLEET_AGENTS", "5,10,20").split(",")]
    most = max(sizes)
    www = fresh(BASE + "/fleet-www")
    os.makedirs(www + "/small")
    print(f"== fleet: making a {mib} MiB release...", file=sys.stderr)
    with open(www + "/release.bin", "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
    for n in range(100):
        open(f"{www}/small/{n}.txt", "w").write(f"release 1, file {n}\n")
    wanted = {}
    for d, _, fs in os.walk(www):
        for f in fs:
            path = os.path.join(d, f)
            wanted[os.path.relpath(path, www)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    release = sum(os.path.getsize(os.path.join(www, p)) for p in wanted)
    subprocess.run([ferry, "manifest", "build", www, "--version", "1", "--quiet"], check=True)
    origin = Nginx(www, log=True)

    def nginx_sent(log):
        total = 0
        for line in open(log):
            parts = line.split()
            if len(parts) >= 6 and parts[-2].isdigit() and parts[1] != "/manifest.json" and not parts[1].startswith("/.ferry/meta/"):
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

    def fleet(n, session, mirror, cache=None, kill_cache_at=None):
        """n agents at once, each with `session`'s lines and `mirror` as its mirror: walls, exit
        codes, failed files, wrong or missing files (every file hashed against the release), and
        what each source served each agent (its `source-served` events). `kill_cache_at`: the
        cache is killed once the agents' partial files hold that many bytes."""
        root = fresh(BASE + "/fleet-agents")
        procs = []
        for i in range(n):
            d = f"{root}/{i}"
            os.makedirs(d)
            open(d + "/ferry.conf", "w").write(f"[agent]\nstate = {d}/state\ntransfers = 4\n\n[session site]\n{session}\n"
                                               f"mirrors = {mirror}\nlocal = {d}/mirror\nretry-delay = 0.2s\n")
        began = time.monotonic()
        for i in range(n):
            d = f"{root}/{i}"
            out = open(d + "/run.jsonl", "w")
            procs.append((subprocess.Popen([ferry, "sync", "now", "--config", d + "/ferry.conf", "--json"], stdout=out, stderr=subprocess.DEVNULL), out))
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
            for path, digest in wanted.items():
                try:
                    with open(f"{root}/{i}/mirror/{path}", "rb") as f:
                        good = hashlib.file_digest(f, "sha256").hexdigest() == digest
                except OSError:
                    good = False
                r["wrong"] += 0 if good else 1
        r["ok"] = all(c == 0 for c in r["codes"]) and r["wrong"] == 0
        shutil.rmtree(root, ignore_errors=True)
        return r

    def from_origin_by_agents(r):
        """What the agents took from the origin themselves (their own count, files and metadata objects)."""
        return sum(s.get("origin", {}).get("bytes", 0) for s in r["served"])

    print("  nginx origin...", file=sys.stderr)
    through = lambda cache: fleet(1, f"remote = {origin.url}", cache.url, cache)
    cache = SiteCache(origin.url)
    open(origin.log, "w").close()
    lone = through(cache)
    cache.stop()
    lone_wall, lone_sent = lone["walls"][0], nginx_sent(origin.log)
    print(f"  lone agent: {lone_wall:.2f} s, origin sent {lone_sent / 1e6:.1f} MB", file=sys.stderr)
    lines = [f"A release of {release / 1e6:,.1f} MB (one {mib} MiB file of new bytes and 100 small files) fetched by N agents at once, each "
             "its own process, state and mirror, with the origin as `remote` and a site cache (examples/site-cache/site-cache.conf, "
             "nginx, cold) as `mirrors`. Every agent's every file is hashed against the release afterwards (wrong or missing files). "
             "For the nginx origin, its bytes are its own count of the files' bodies; for the S3 origin (SeaweedFS), they are what "
             "the cache took from it (nginx's `$upstream_bytes_received`) and what the agents took from it themselves (their "
             "`source-served` counts); the root manifest and metadata objects aside. "
             "Targets (issue 42): origin ≤ 1.25 × the release for 20 agents, not growing with N; the slowest agent ≤ 2 × a lone agent's "
             "time through the same (cold) cache; the cache killed mid-run: every agent converges from the origin, 0 failed files; "
             "a mirror that serves wrong bytes: 0 wrong files, demoted after its first bad object, ≤ 1 object refetched per demotion. "
             f"Here every agent shares this machine's {os.cpu_count()} cores (each hashes and writes the whole release), so N agents "
             f"cannot take less than a lone agent's time × N / {os.cpu_count()}: the floor column.", "",
             "| origin | agents | origin sent | × the release | cache hits | slowest agent | × a lone agent | × the floor | median agent | failed files | wrong files | every agent exit 0 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    verdicts, notes = [], []

    def row(kind, n, r, sent, hits, answers, lone_wall):
        walls = r["walls"]
        floor = lone_wall * n / os.cpu_count()
        print(f"  {kind}, {n} agents: origin {sent / 1e6:.1f} MB, hits {hits}/{answers}, slowest {max(walls):.2f} s, wrong {r['wrong']}", file=sys.stderr)
        lines.append(f"| {kind} | {n} | {sent / 1e6:,.1f} MB | {sent / release:.2f} | {hits}/{answers} | {max(walls):.2f} s | {max(walls) / lone_wall:.2f} | "
                     f"{max(walls) / max(floor, lone_wall):.2f} | {statistics.median(walls):.2f} s | {r['failed']} | {r['wrong']} | {'yes' if r['ok'] else 'NO'} |")
        if n == most:
            verdicts.append(f"{kind}, {n} agents: the origin sent {sent / release:.2f} × the release (target ≤ 1.25: {'meets' if sent <= 1.25 * release else 'misses'} it); "
                            f"the slowest agent took {max(walls) / lone_wall:.2f} × a lone agent (target ≤ 2: {'meets' if max(walls) <= 2 * lone_wall else 'misses'} it "
                            f"on one machine), {max(walls) / max(floor, lone_wall):.2f} × the floor of {n} agents sharing {os.cpu_count()} cores.")

    for n in sizes:
        cache = SiteCache(origin.url)
        open(origin.log, "w").close()
        r = fleet(n, f"remote = {origin.url}", cache.url, cache)
        hits, answers = cache.hits()
        cache.stop()
        row("nginx", n, r, nginx_sent(origin.log), hits, answers, lone_wall)
    cache = SiteCache(origin.url)
    open(origin.log, "w").close()
    r = fleet(most, f"remote = {origin.url}", cache.url, cache, kill_cache_at=int(release * most * 0.3))
    cache.stop()
    sent = nginx_sent(origin.log)
    verdicts.append(f"nginx, {most} agents, the cache killed once they held 30% of the release: every agent exit 0 with every file right: "
                    f"{'yes' if r['ok'] else 'NO'}, {r['failed']} failed files (target 0), the origin sent "
                    f"{sent / release:.2f} × the release, the slowest agent {max(r['walls']):.2f} s.")
    notes.append(f"Lone agent through the cold cache, nginx origin: {lone_wall:.2f} s; the origin sent {lone_sent / 1e6:,.1f} MB.")

    # S3: the release pushed to a bucket anyone may read; the agents read it with credentials, the
    # cache (at the bucket's path) without.
    print("  S3 origin...", file=sys.stderr)
    weed = Weed(BASE + "/fleet-weed", public=True)
    try:
        creds = BASE + "/fleet-s3-credentials"
        open(creds, "w").write(f"[default]\naws_access_key_id = {weed.KEY}\naws_secret_access_key = {weed.SECRET}\n")
        os.chmod(creds, 0o600)
        subprocess.run(weed.rclone(["mkdir", ":s3:fleet"]), check=True, capture_output=True)
        s3 = f"remote = s3://fleet/\ns3-endpoint = {weed.endpoint}\ns3-credentials = {creds}"
        push = BASE + "/fleet-push.conf"
        open(push, "w").write(f"[agent]\nstate = {BASE}/fleet-push-state\n\n[session up]\ndirection = push\n{s3}\nlocal = {www}\n")
        shutil.rmtree(BASE + "/fleet-push-state", ignore_errors=True)
        subprocess.run([ferry, "sync", "now", "--config", push, "--quiet"], check=True)
        s3_lone_wall = None
        for n in [1, most]:
            cache = SiteCache(weed.endpoint)
            r = fleet(n, s3, cache.url + "fleet/", cache)
            hits, answers = cache.hits()
            cache.stop()
            sent = cache.from_origin() + from_origin_by_agents(r)
            if n == 1:
                s3_lone_wall = r["walls"][0]
                notes.append(f"Lone agent through the cold cache, S3 origin: {s3_lone_wall:.2f} s; the origin sent {sent / 1e6:,.1f} MB.")
            else:
                row("S3", n, r, sent, hits, answers, s3_lone_wall)
    finally:
        weed.stop()

    # A hostile mirror: the release in the objects layout (each file or piece an object named by
    # its SHA-256) on the nginx origin, and the project's own test server serving a copy of it
    # with every content object's bytes flipped, each body's bytes logged.
    print("  hostile mirror...", file=sys.stderr)
    origin.stop()
    objects = fresh(BASE + "/fleet-objects")
    push = BASE + "/fleet-objects.conf"
    open(push, "w").write(f"[agent]\nstate = {BASE}/fleet-objects-state\n\n[session up]\ndirection = push\nremote = file://{objects}/\n"
                          f"local = {www}\nremote-layout = objects\n")
    shutil.rmtree(BASE + "/fleet-objects-state", ignore_errors=True)
    subprocess.run([ferry, "sync", "now", "--config", push, "--quiet"], check=True)
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
    log = BASE + "/fleet-hostile.jsonl"
    faults = BASE + "/fleet-hostile-faults.json"
    json.dump({"*": {"log_sent": True}}, open(faults, "w"))
    open(log, "w").close()
    port = free_port()
    hostile = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testserver.py"), "--port", str(port),
                                "--directory", bad, "--log", log, "--faults", faults], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    objects_origin = Nginx(objects, log=True)
    cache = SiteCache(objects_origin.url)
    try:
        # The hostile mirror first, then the site cache: once it is demoted, the cache serves.
        r = fleet(most, f"remote = {objects_origin.url}", f"http://127.0.0.1:{port}/ {cache.url}")
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
    lines.append(f"| nginx, objects layout, a hostile mirror before the cache | {most} | {sent / 1e6:,.1f} MB | {sent / release:.2f} | {hits}/{answers} | {max(r['walls']):.2f} s | | | "
                 f"{statistics.median(r['walls']):.2f} s | {r['failed']} | {r['wrong']} | {'yes' if r['ok'] else 'NO'} |")
    verdicts.append(f"nginx, {most} agents with a mirror that serves every content object wrong before the site cache (the release in the objects layout): "
                    f"{r['wrong']} wrong files (target 0), {r['failed']} failed files, the mirror demoted by {demoted} of {most} agents; it sent "
                    f"{len(bodies)} object bodies ({sum(b['sent'] for b in bodies) / 1e6:.2f} MB), {whole} of them whole: "
                    f"{whole / max(1, demoted):.2f} whole wrong objects per demotion (target ≤ 1; the rest were stopped in flight).")
    shutil.rmtree(objects, ignore_errors=True)
    shutil.rmtree(bad, ignore_errors=True)
    return [("fleet: agents behind a site cache", lines + [""] + notes + [""] + verdicts, "text", None, None)]


def make_workloads(root):
    """Under `root`: big/1GiB.bin, and small/ with 10,000 files of 4 KiB in 100 directories, all
    random. Returns (big, small)."""
    big = fresh(root + "/big")
    with open(big + "/1GiB.bin", "wb") as f:
        for _ in range(1024):
            f.write(os.urandom(1 << 20))
    return big, make_small(root)


def make_small(root):
    """`root`/small: 10,000 random files of 4 KiB in 100 directories."""
    small = fresh(root + "/small")
    for d in range(100):
        os.makedirs(f"{small}/d{d:02}")
        for i in range(100):
            with open(f"{small}/d{d:02}/f{i:03}.bin", "wb") as f:
                f.write(os.urandom(4096))
    return small


def small_only(ferry, runs):
    """--only small: the 10,000-file rows over HTTP and HTTPS, and the real tree on disk."""
    www = fresh(BASE + "/www")
    small = make_small(www)
    subprocess.run([ferry, "manifest", "build", small, "--quiet"], check=True)
    return small_file_sections(ferry, runs, www, BASE + "/out") + [real_tree_section(ferry, runs)]


def push_sections(ferry, runs):
    """Push to nginx WebDAV: 1 GiB against curl -T, 10,000 × 4 KiB against rclone copy, and an
    unchanged 10,000-file push. Returns the report's sections."""
    src = fresh(BASE + "/push-src")
    big, small = make_workloads(src)
    www = fresh(BASE + "/push-www")
    dav = Nginx(www, dav=True)
    state = BASE + "/push-state"
    cfg = BASE + "/ferry-push.conf"
    sections = []

    def push_config(local, layout="tree"):
        open(cfg, "w").write(f"[agent]\nstate = {state}\ntransfers = 16\n\n[session bench]\ndirection = push\n"
                             f"remote = {dav.url}ferry/\nlocal = {local}\nconflict = local-wins\nremote-layout = {layout}\n")

    def clean(local, layout="tree"):
        fresh(www + "/ferry"), fresh(www + "/rclone"), fresh(www + "/curl")
        shutil.rmtree(state, ignore_errors=True)
        push_config(local, layout)

    rclone = lambda local: ["rclone", "--config", "/dev/null", "copy", local, ":webdav:", "--webdav-url", dav.url + "rclone/",
                            "--transfers", "16"]
    tools = [
        ("ferry sync now (push)", lambda: clean(big), lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]),
        ("curl -T", lambda: clean(big), lambda: ["curl", "-sf", "-T", big + "/1GiB.bin", dav.url + "curl/1GiB.bin"]),
        ("rclone copy (webdav)", lambda: clean(big), lambda: rclone(big)),
        # The least a tool that hashes what it sends can take here: the hash competes with the
        # server for the second core.
        ("curl -T ∥ openssl sha256 (floor with a hash)", lambda: clean(big),
         lambda: ["sh", "-c", f"openssl dgst -sha256 {big}/1GiB.bin >/dev/null & curl -sf -T {big}/1GiB.bin {dav.url}curl/1GiB.bin; wait"]),
    ]
    sections.append(("push: 1 GiB file to nginx WebDAV", measure("push 1 GiB", tools, runs), "curl -T", 1.1,
                     "wall ≤ 1.1 × curl -T; peak RSS ≤ 64 MiB"))
    # remote-layout = objects: every file hashed before it goes, one object per content under
    # .ferry/data/xx/ (256 more collections), the same PUT + MOVE each.
    table = measure("push 10,000 × 4 KiB", [("ferry sync now (push, 16)", lambda: clean(small),
                                               lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]),
                                              ("ferry sync now (push, 16, remote-layout = objects)", lambda: clean(small, "objects"),
                                               lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"])], runs)
    # The floor of an atomic WebDAV push: curl sending each file to a temporary name, then moving
    # it to its final name (the two requests a reader-safe push needs), with nothing hashed,
    # checked or recorded; its collections made on the server's disk beforehand.
    put_cfg, move_cfg = BASE + "/curl-put.cfg", BASE + "/curl-move.cfg"
    names = [f"d{d:02}/f{i:03}.bin" for d in range(100) for i in range(100)]
    with open(put_cfg, "w") as f:
        f.write("\nnext\n".join(f'url = "{dav.url}curl/tmp/{n}"\nupload-file = "{small}/{name}"\noutput = "/dev/null"'
                                for n, name in enumerate(names)) + "\n")
    with open(move_cfg, "w") as f:
        f.write("\nnext\n".join(f'url = "{dav.url}curl/tmp/{n}"\nrequest = "MOVE"\nheader = "Destination: {dav.url}curl/{name}"\n'
                                f'header = "Overwrite: T"\noutput = "/dev/null"' for n, name in enumerate(names)) + "\n")

    def clean_curl():
        fresh(www + "/curl")
        for d in ["tmp"] + [f"d{d:02}" for d in range(100)]:
            os.makedirs(f"{www}/curl/{d}")
    floor_label = "curl PUT + MOVE (16, floor)"
    table.update(measure("push floor", [(floor_label, clean_curl,
                                         lambda: ["sh", "-c", f"curl -sf --parallel --parallel-max 16 -K {put_cfg} && "
                                                              f"curl -sf --parallel --parallel-max 16 -K {move_cfg}"])], runs))
    push_config(small)
    # rclone takes about 33 ms a file against nginx's DAV (a PROPFIND after each PUT, paced):
    # five minutes a run, so it runs once, and its copy is then the no-op row's starting point.
    fresh(www + "/rclone")
    table.update(measure("push 10,000 × 4 KiB (rclone, once)", [("rclone copy --transfers 16 (webdav, 1 run)", None,
                                                                 lambda: rclone(small))], 1, warmup=False))
    # The pull of the same tree from the same server: a push is to take at most 1.5 × that.
    pull_cfg, pull_out, pull_state = BASE + "/ferry-push-pull.conf", BASE + "/push-pull-out", BASE + "/push-pull-state"

    def clean_pull():
        fresh(pull_out)
        shutil.rmtree(pull_state, ignore_errors=True)
        ferry_config(pull_cfg, dav.url + "ferry/", pull_out, pull_state, 16)
    fresh(www + "/ferry")
    shutil.rmtree(state, ignore_errors=True)
    subprocess.run([ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)
    table.update(measure("pull of the pushed tree", [("ferry sync now (pull of the same tree, 16)", clean_pull,
                                                      lambda: [ferry, "sync", "now", "--config", pull_cfg, "--quiet"])], runs))
    shutil.rmtree(pull_out, ignore_errors=True)
    push_wall, pull_wall = table["ferry sync now (push, 16)"][0], table["ferry sync now (pull of the same tree, 16)"][0]
    ratio = push_wall / pull_wall
    floor_wall = table[floor_label][0]
    sections.append(("push: 10,000 × 4 KiB files to nginx WebDAV", table,
                     "rclone copy --transfers 16 (webdav, 1 run)", 0.6, "wall ≤ 0.6 × rclone copy --transfers 16 to the same server; "
                     "≤ 1.5 × ferry's pull of the same tree",
                     f"ferry's push ÷ ferry's pull of the same tree from the same server = **{ratio:.2f}** (target ≤ 1.5): "
                     f"{'meets' if ratio <= 1.5 else 'misses'} the target. A file pushed is three requests (PUT to a temporary name, "
                     "MOVE into place, GET to read back what the server holds: nginx computes no digest), a file pulled one GET. "
                     f"The floor row, curl's PUT and MOVE of each file with nothing hashed, checked or recorded, takes "
                     f"**{floor_wall / pull_wall:.2f}** × ferry's pull; ferry's push takes {push_wall / floor_wall:.2f} × that floor."))
    fresh(www + "/ferry")
    shutil.rmtree(state, ignore_errors=True)
    subprocess.run([ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)
    tools = [
        ("ferry sync now (push, unchanged)", None, lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]),
        ("rclone copy (webdav, no-op)", None, lambda: rclone(small)),
        ("find + stat of every file (floor)", None, lambda: ["sh", "-c", f"find {small} -type f -print0 | xargs -0 stat >/dev/null"]),
    ]
    sections.append(("push: unchanged 10,000-file tree", measure("push unchanged", tools, runs), "rclone copy (webdav, no-op)", 0.3,
                     "one manifest check, nothing uploaded; wall ≤ 0.3 × rclone's no-op copy"))
    # The agent on the same published session: each poll is one conditional GET of the manifest,
    # and with inotify watching the tree, no scan.
    open(cfg, "a").write("poll = 1s\n")
    sections.append(("ferry agent at rest, push 10,000-file session", agent_at_rest(ferry, cfg, note="Before the cached manifest was parsed only when needed, a push poll cost 23 ms: "
                                                                          "the 10,000-entry manifest last published, parsed every poll."), "at-rest", None,
                     "cheap at rest: an unchanged push poll (304, tree untouched) costs one request and no scan"))
    dav.stop()
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(www, ignore_errors=True)
    return sections


def sftp_sections(ferry, runs):
    """SFTP on a real OpenSSH sshd on 127.0.0.1 (SSHD): 1 GiB pulled against curl and rclone, 1 GiB
    pushed against curl -T and rclone, 10,000 × 4 KiB pushed against rclone. Each row also says
    how much CPU sshd spent (on 2 cores, the encryption on its side competes with the client)."""
    src = fresh(BASE + "/sftp-src")
    big, small = make_workloads(src)
    served = fresh(BASE + "/sftp-served")
    sshd = SSHD()
    try:
        return sftp_measured(ferry, runs, sshd, big, small, served)
    finally:
        sshd.stop()
        for path in (src, served, BASE + "/sftp-out", BASE + "/sftp-state"):
            shutil.rmtree(path, ignore_errors=True)


def sftp_measured(ferry, runs, sshd, big, small, served):
    sections = []
    out, state, cfg = BASE + "/sftp-out", BASE + "/sftp-state", BASE + "/ferry-sftp.conf"
    ferry_run = lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]
    measure_sshd = lambda name, tools, n=runs, warmup=True: measure(name, tools, n, warmup=warmup, server=sshd)
    checks = ("ferry verifies every file's size and SHA-256 against the manifest, fsyncs it and renames it into place, and "
              "records it in its state; ")

    # ---- pull: the served directory holds the file (a hard link to the workload's) and the manifest
    # ferry manifest build wrote for it.
    pull = fresh(served + "/pull")
    os.link(big + "/1GiB.bin", pull + "/1GiB.bin")
    subprocess.run([ferry, "manifest", "build", pull, "--quiet"], check=True)

    def pull_clean():
        fresh(out)
        shutil.rmtree(state, ignore_errors=True)
        ferry_config(cfg, f"{sshd.url}{pull}/", out + "/ferry", state, 8, sshd.session())

    tools = [
        ("ferry sync now (pull)", pull_clean, ferry_run),
        ("curl -o (sftp)", lambda: fresh(out), lambda: sshd.curl(["-o", out + "/curl.bin", f"{sshd.url}{pull}/1GiB.bin"])),
        ("rclone copy (sftp)", lambda: fresh(out), lambda: sshd.rclone(["copy", f":sftp:{pull}/1GiB.bin", out + "/rclone"])),
    ]
    sections.append(("SFTP pull: 1 GiB file from OpenSSH sshd", measure_sshd("SFTP pull 1 GiB", tools), "curl -o (sftp)", 1.1,
                     "wall ≤ 1.1 × curl over the same SSH server",
                     checks + "curl writes the bytes it receives and checks nothing; rclone (1.60) writes to the final name "
                     "and compares the MD5 it computed with one `md5sum` runs on the server over an SSH exec channel (counted in sshd's "
                     "CPU). The host key is checked by all three: ferry and rclone against known_hosts, curl by its SHA-256 "
                     "(--hostpubsha256)."))

    # ---- push: fresh destinations on the server for every run
    push = served + "/push"

    def push_clean(local):
        fresh(push)
        for d in ("ferry", "curl", "rclone"):
            os.makedirs(f"{push}/{d}")
        shutil.rmtree(state, ignore_errors=True)
        open(cfg, "w").write(f"[agent]\nstate = {state}\ntransfers = 16\n\n[session bench]\ndirection = push\n"
                             f"remote = {sshd.url}{push}/ferry/\nlocal = {local}\nconflict = local-wins\n{sshd.session()}")

    push_note = ("ferry sends each file to a temporary name under the remote's .ferry/upload/, sets its mode and mtime, has the "
                 "server fsync it (fsync@openssh.com), reads it back and checks its SHA-256, then renames it over its final name "
                 "(posix-rename@openssh.com), and publishes its manifest the same way. ")
    tools = [
        ("ferry sync now (push)", lambda: push_clean(big), ferry_run),
        ("curl -T (sftp)", lambda: push_clean(big),
         lambda: sshd.curl(["--ftp-create-dirs", "-T", big + "/1GiB.bin", f"{sshd.url}{push}/curl/1GiB.bin"])),
        ("rclone copy (sftp)", lambda: push_clean(big), lambda: sshd.rclone(["copy", big, f":sftp:{push}/rclone"])),
    ]
    sections.append(("SFTP push: 1 GiB file to OpenSSH sshd", measure_sshd("SFTP push 1 GiB", tools), "curl -T (sftp)", 1.1,
                     "wall ≤ 1.1 × curl -T over the same SSH server",
                     push_note + "curl -T writes the final name in place (O_TRUNC) and checks nothing; rclone (1.60) also writes "
                     "the final name in place, then runs `md5sum` on the server over an SSH exec channel and compares (that read "
                     "is in sshd's CPU). Neither asks the server to fsync."))

    # ---- push: 10,000 × 4 KiB, 16 at once
    table = measure_sshd("SFTP push 10,000 × 4 KiB", [("ferry sync now (push, 16)", lambda: push_clean(small), ferry_run)])
    rclone_label = "rclone copy --transfers 16 (sftp)"
    table.update(measure_sshd("SFTP push 10,000 × 4 KiB (rclone)", [(rclone_label, lambda: push_clean(small),
                                                                     lambda: sshd.rclone(["copy", small, f":sftp:{push}/rclone",
                                                                                          "--transfers", "16"]))]))
    sections.append(("SFTP push: 10,000 × 4 KiB files to OpenSSH sshd", table, rclone_label, 0.6,
                     "wall ≤ 0.6 × rclone copy --transfers 16 to the same server",
                     push_note + "rclone writes each final name in place and runs one `md5sum` per file on the server "
                     "(an SSH exec channel and a process each)."))
    return sections


class Weed:
    """SeaweedFS (`weed mini`, from the project's .venv) on 127.0.0.1 with its data on tmpfs and an
    S3 identity of its own; every port named. `cpu()`: its user + system seconds so far."""
    KEY, SECRET = "BENCHKEY", "bench-secret"
    name = "weed"

    def __init__(self, root, public=False):
        """`public`: anyone may read (an `anonymous` identity), as a bucket a CDN or cache fronts."""
        self.root, self.public = root, public
        self.dir = fresh(root)
        os.makedirs(self.dir + "/data")
        identities = [{"name": "bench", "credentials": [{"accessKey": self.KEY, "secretKey": self.SECRET}],
                       "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]
        if public:
            identities.append({"name": "anonymous", "actions": ["Read"]})
        open(self.dir + "/s3.json", "w").write(json.dumps({"identities": identities}))
        self.port = free_port()
        self.ports = [self.port]
        args = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".venv", "bin", "weed"), "mini", f"-dir={self.dir}/data",
                "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false", f"-s3.config={self.dir}/s3.json", "-admin.ui=false",
                "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.port={self.port}", f"-s3.localSocket={self.dir}/s3.sock",
                f"-filer.localSocket={self.dir}/filer.sock"]
        for name in ["s3.port.grpc", "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
                     "admin.port", "admin.port.grpc"]:
            self.ports.append(free_port())
            args.append(f"-{name}={self.ports[-1]}")
        self.proc = subprocess.Popen(args, stdout=open(self.dir + "/weed.log", "w"), stderr=subprocess.STDOUT)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        wait_port(self.port, 60)
        deadline = time.time() + 60
        while time.time() < deadline:
            if subprocess.run(self.rclone(["mkdir", ":s3:ready"]), capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("SeaweedFS did not start: " + open(self.dir + "/weed.log").read()[-2000:])

    def restart(self):
        """A fresh store, empty, on new ports: what earlier runs stored stays on tmpfs otherwise (a
        deleted object's space comes back only when SeaweedFS compacts its volume), and 12 GiB of
        pushed copies make the next rows pay for the kernel reclaiming memory."""
        self.stop()
        self.__init__(self.root, self.public)

    def rclone(self, args):
        return ["rclone", "--config", "/dev/null"] + args + ["--s3-provider", "Other", "--s3-endpoint", self.endpoint, "--s3-access-key-id", self.KEY,
                                                              "--s3-secret-access-key", self.SECRET, "--s3-force-path-style", "--s3-region", "us-east-1"]

    def cpu(self):
        return cpu_seconds(proc_stat(self.proc.pid))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(1)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for port in self.ports:
            for name in ["master-grpc", "volume-grpc", "filer-grpc", "s3-grpc", "s3", "filer"]:
                try:
                    os.unlink(f"/tmp/seaweedfs-{name}-{port}.sock")
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)


def s3_sections(ferry, runs):
    """S3 on SeaweedFS, ferry beside rclone on the same store: 10,000 × 4 KiB and 1 GiB, pulled and
    pushed; unchanged polls; a 48 MiB multipart upload killed at three quarters and relaunched.
    Each row also says how much CPU the store spent (on 2 cores it competes with the client)."""
    # rclone's AWS SDK reads the AWS_* environment (a CA bundle it cannot use here, keys): the
    # comparison runs on the flags alone, as ferry does on its config.
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[name]
    src = fresh(BASE + "/s3-src")
    big, small = make_workloads(src)
    weed = Weed(BASE + "/weed")
    state = BASE + "/s3-state"
    out = BASE + "/s3-out"
    cfg = BASE + "/ferry-s3.conf"
    creds = BASE + "/s3-credentials"
    open(creds, "w").write(f"[default]\naws_access_key_id = {weed.KEY}\naws_secret_access_key = {weed.SECRET}\n")
    os.chmod(creds, 0o600)
    counter = [0]

    def config(direction, bucket, local, extra="", st=state):
        shutil.rmtree(st, ignore_errors=True)
        open(cfg, "w").write(f"[agent]\nstate = {st}\ntransfers = 16\n\n[session bench]\ndirection = {direction}\n"
                             f"remote = s3://{bucket}/\nlocal = {local}\ns3-endpoint = {weed.endpoint}\ns3-credentials = {creds}\n"
                             f"conflict = local-wins\n{extra}")

    def bucket(label):
        counter[0] += 1
        name = f"{label}-{counter[0]}"
        subprocess.run(weed.rclone(["mkdir", f":s3:{name}"]), check=True, capture_output=True)
        return name

    measure_store = lambda name, tools: measure(name, tools, runs, server=weed)

    try:
        return s3_measured(ferry, runs, weed, big, small, state, out, cfg, config, bucket, measure_store)
    finally:
        weed.stop()
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


def s3_measured(ferry, runs, weed, big, small, state, out, cfg, config, bucket, measure_store):
    sections = []
    ferry_run = lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]
    for label, data, target_text in [("10,000 × 4 KiB", small, "wall ≤ 0.6 × rclone copy --transfers 16"),
                                     ("1 GiB", big, "wall ≤ 1.0 × rclone copy")]:
        dest = {}
        tools = [
            ("ferry sync now (push)", lambda: config("push", bucket("pf"), data), ferry_run),
            ("rclone copy --transfers 16", lambda: dest.__setitem__("rclone", bucket("pr")),
             lambda: weed.rclone(["copy", data, f":s3:{dest['rclone']}", "--transfers", "16"])),
        ]
        sections.append((f"S3 push: {label} to SeaweedFS", measure_store(f"S3 push {label}", tools), "rclone copy --transfers 16",
                         0.6 if label.startswith("10") else 1.0, target_text))
        # One bucket holding the tree and ferry's manifest, pulled by both, in a store holding nothing else.
        weed.restart()
        source = bucket("src")
        config("push", source, data)
        subprocess.run(ferry_run(), check=True)
        tools = [
            ("ferry sync now (pull)", lambda: (fresh(out), config("pull", source, out + "/ferry")), ferry_run),
            ("rclone copy --transfers 16", lambda: fresh(out),
             lambda: weed.rclone(["copy", f":s3:{source}", out + "/rclone", "--transfers", "16", "--exclude", "manifest.json"])),
        ]
        note = ("ferry hashes every byte it receives (SHA-256, about 0.5 s of CPU per GiB here, on a second thread) and checks it "
                "against the manifest; rclone checks nothing on a multipart object (no MD5 to compare), which its CPU column shows. "
                "On 2 cores shared with the store, that hash is the distance." if label == "1 GiB" else "")
        sections.append((f"S3 pull: {label} from SeaweedFS", measure_store(f"S3 pull {label}", tools), "rclone copy --transfers 16",
                         0.6 if label.startswith("10") else 1.0, target_text) + ((note,) if note else ()))
        if label.startswith("10"):
            # Unchanged: ferry's push and pull polls are one conditional GET each (S3PushTests
            # counts them through a proxy); rclone lists the bucket and compares.
            fresh(out)
            config("pull", source, out + "/ferry", st=state + "-pull")
            subprocess.run(ferry_run(), check=True)
            pull_cfg = open(cfg).read()
            subprocess.run(weed.rclone(["copy", f":s3:{source}", out + "/rclone", "--transfers", "16", "--exclude", "manifest.json"]), check=True)
            config("push", source, data, st=state + "-push")
            subprocess.run(ferry_run(), check=True)
            subprocess.run(ferry_run(), check=True)  # the first poll after a publish checks the placed files
            push_cfg = open(cfg).read()
            tools = [
                ("ferry sync now (pull, unchanged)", lambda: open(cfg, "w").write(pull_cfg), ferry_run),
                ("ferry sync now (push, unchanged)", lambda: open(cfg, "w").write(push_cfg), ferry_run),
                ("rclone copy (no-op)", None, lambda: weed.rclone(["copy", f":s3:{source}", out + "/rclone", "--transfers", "16",
                                                                   "--exclude", "manifest.json"])),
            ]
            sections.append(("S3: unchanged 10,000-file tree", measure_store("S3 unchanged", tools), "rclone copy (no-op)", 0.3,
                             "one request per poll (a conditional GET of the manifest, 304); wall ≤ 0.3 × rclone's no-op copy"))
    sections.append(s3_kill_and_resume(ferry, weed, config, bucket, state, cfg, runs))
    return sections


def s3_kill_and_resume(ferry, weed, config, bucket, state, cfg, runs):
    """A 48 MiB file as a multipart upload in 5 MiB parts, killed once three quarters of it went,
    then run again: how much the relaunch sends. ferry is killed when its task table records 3/4
    of the parts; rclone (same part size) at 3/4 of the time its whole upload takes."""
    import json
    import sqlite3
    size = 48 << 20
    src = fresh(BASE + "/s3-kill-src")
    with open(src + "/48MiB.bin", "wb") as f:
        f.write(os.urandom(size))
    parts = (size + (5 << 20) - 1) // (5 << 20)
    results = {"ferry sync now": [], "rclone copy": []}
    print("== S3 kill -9 at 3/4 of a 48 MiB multipart upload, relaunch", file=sys.stderr)
    rclone_args = lambda b: weed.rclone(["copy", src, f":s3:{b}", "--s3-chunk-size", "5M", "--s3-upload-cutoff", "5M",
                                         "--s3-upload-concurrency", "1", "--stats", "1h", "--stats-one-line", "-v", "--bwlimit", "24M"])
    for r in range(runs):
        b = bucket("kf")
        config("push", b, src, "upload-part-size = 5M\nbwlimit = 24M\n")
        proc = subprocess.Popen([ferry, "sync", "now", "--config", cfg, "--quiet"])
        recorded = 0
        while proc.poll() is None and recorded * 4 < parts * 3:
            try:
                db = sqlite3.connect(f"file:{state}/ferry.db?mode=ro", uri=True, timeout=1)
                recorded = db.execute("SELECT count(*) FROM upload_parts").fetchone()[0]
                db.close()
            except sqlite3.Error:
                pass
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        again = subprocess.run([ferry, "sync", "now", "--config", cfg, "--json"], capture_output=True, text=True)
        sent = next((json.loads(l).get("fetched", 0) for l in again.stdout.splitlines() if '"file-done"' in l), -1)
        results["ferry sync now"].append(sent / (1 << 20))
        print(f"  run {r + 1} ferry: killed at {recorded}/{parts} parts recorded; relaunch sent {sent / (1 << 20):.1f} MiB", file=sys.stderr)

        b = bucket("kr")
        start = time.time()
        subprocess.run(rclone_args(b), capture_output=True)
        whole = time.time() - start
        b = bucket("kr")
        proc = subprocess.Popen(rclone_args(b), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(whole * 0.75)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        again = subprocess.run(rclone_args(b), capture_output=True, text=True)
        # rclone's last stats line: "... INFO  :   48 MiB / 48 MiB, 100%, ..." (what this run sent).
        import re
        found = [m.group(1) for l in again.stderr.splitlines() for m in [re.search(r"INFO\s+:\s+([\d.]+ [KMGT]?i?B) / ", l)] if m]
        value = found[-1] if found else "?"
        mib = parse_size(value)
        results["rclone copy"].append(mib)
        print(f"  run {r + 1} rclone: killed at {whole * 0.75:.2f} s of {whole:.2f} s; relaunch sent {value}", file=sys.stderr)
    shutil.rmtree(src, ignore_errors=True)
    table = {k: statistics.median(v) for k, v in results.items() if v}
    return ("S3: kill -9 at 3/4 of a 48 MiB multipart upload, relaunch", table, "resend", 24,
            "the relaunch sends ≤ half the file (rclone sends all of it)")


def parse_size(text):
    """'37.500 MiB' → 37.5 (MiB); '0 B' → 0."""
    try:
        number, unit = text.replace("i", "").split()
        scale = {"B": 1 / (1 << 20), "KB": 1 / 1024, "MB": 1, "GB": 1024}[unit.upper()]
        return float(number) * scale
    except (ValueError, KeyError):
        return float("nan")


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
        try:
            for line in open(prom):
                if line.startswith("ferry_polls_total{"):
                    return int(line.split()[-1])
        except OSError:
            pass
        return 0

    def cpu():
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
    print(f"  agent at rest: {n1 - n0} polls, {(c1 - c0) * 1000 / n:.1f} ms CPU per poll, RSS {rss:.1f} MiB", file=sys.stderr)
    return (c1 - c0) * 1000 / n, rss, n1 - n0, files, note


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
            print(f"  run {r} {label:34s} {wall:7.3f}s {rss:7.1f} MiB {cpu:6.2f}s CPU{beside}{' (warm-up)' if r == 0 else ''}", file=sys.stderr)
    return median_table({k: v for k, v in results.items() if v})


def small_file_sections(ferry, runs, www, out):
    """10,000 × 4 KiB files (`www`/small, with its manifest) over HTTP and over HTTPS with HTTP/2,
    ferry beside curl --parallel, rclone, aria2c and wget, each into a fresh `out`."""
    nginx = Nginx(www)
    url = nginx.url
    sections = []
    # ---- 10,000 × 4 KiB
    curl_cfg = BASE + "/curl-small.cfg"
    with open(curl_cfg, "w") as f:
        for d in range(100):
            for i in range(100):
                f.write(f'url = "{url}small/d{d:02}/f{i:03}.bin"\noutput = "{out}/curl/d{d:02}/f{i:03}.bin"\n')
    aria_list = BASE + "/aria2-small.txt"
    with open(aria_list, "w") as f:
        for d in range(100):
            for i in range(100):
                f.write(f"{url}small/d{d:02}/f{i:03}.bin\n  out=d{d:02}/f{i:03}.bin\n")
    scfg = BASE + "/ferry-small.conf"
    # The same tree listed by a flat format-1 manifest (one GET, where format 2's root names
    # 1,206 objects fetched before the first file): what a cold format-2 mirror pays for its tree.
    # Kept under .ferry/, which the format-2 manifest does not list and the peers are told to skip
    # (rclone --exclude, wget -X): they copy the 10,000 files and nothing else.
    subprocess.run([ferry, "manifest", "build", www + "/small", "--format", "1", "--output", www + "/small/.ferry/flat.json",
                    "--exclude", "manifest.json", "--quiet"], check=True)
    fcfg = BASE + "/ferry-small-flat.conf"
    tools = [
        ("ferry sync now (16)", lambda: (fresh(out), ferry_config(scfg, url + "small/", out + "/ferry", out + "/ferry-state", 16)),
         lambda: [ferry, "sync", "now", "--config", scfg, "--quiet"]),
        ("ferry sync now (16, format 1)", lambda: (fresh(out), ferry_config(fcfg, url + "small/", out + "/ferry", out + "/ferry-state", 16,
                                                                            "manifest = .ferry/flat.json\n")),
         lambda: [ferry, "sync", "now", "--config", fcfg, "--quiet"]),
        ("curl --parallel (16)", lambda: fresh(out), lambda: ["curl", "-sf", "--parallel", "--parallel-max", "16", "--create-dirs", "-K", curl_cfg]),
        ("rclone copy --transfers 16", lambda: fresh(out), lambda: ["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone",
                                                                     "--http-url", url + "small/", "--transfers", "16", "--exclude", "manifest.json", "--exclude", ".ferry/**"]),
        ("aria2c -j16", lambda: fresh(out), lambda: ["aria2c", "-q", "-j16", "--file-allocation=none", "-d", out + "/aria2", "-i", aria_list]),
        ("wget -r", lambda: fresh(out), lambda: ["wget", "-q", "-r", "-np", "-nH", "--cut-dirs=1", "-X", "/small/.ferry", "-P", out + "/wget", url + "small/"]),
    ]
    table = measure("10,000 × 4 KiB", tools, runs, server=nginx)
    sections.append(("10,000 × 4 KiB files", table, "curl --parallel (16)", 1.0,
                     "wall ≤ 1.0 × curl --parallel --parallel-max 16; ferry's CPU ≤ 0.5 s",
                     per_file_cpu(table, 10000) + " The format-1 row reads the same tree from one flat manifest: the difference to the "
                     "first row is what fetching and checking format 2's metadata objects costs a cold mirror."))

    nginx.stop()

    # ---- 10,000 × 4 KiB over HTTPS with HTTP/2, private CA
    ca, cert, key = private_ca(BASE + "/tls")
    tls = Nginx(www, tls=(cert, key))
    turl = tls.url
    tls_curl_cfg = BASE + "/curl-small-tls.cfg"
    open(tls_curl_cfg, "w").write(open(curl_cfg).read().replace(url, turl))
    tcfg = BASE + "/ferry-small-tls.conf"
    tools = [
        ("ferry sync now (16)", lambda: (fresh(out), ferry_config(tcfg, turl + "small/", out + "/ferry", out + "/ferry-state", 16, f"ca-file = {ca}\n")),
         lambda: [ferry, "sync", "now", "--config", tcfg, "--quiet"]),
        ("ferry sync now (16, format 1)", lambda: (fresh(out), ferry_config(tcfg, turl + "small/", out + "/ferry", out + "/ferry-state", 16,
                                                                            f"ca-file = {ca}\nmanifest = .ferry/flat.json\n")),
         lambda: [ferry, "sync", "now", "--config", tcfg, "--quiet"]),
        ("curl --parallel --http2 (16)", lambda: fresh(out),
         lambda: ["curl", "-sf", "--http2", "--cacert", ca, "--parallel", "--parallel-max", "16", "--create-dirs", "-K", tls_curl_cfg]),
        ("rclone copy --transfers 16", lambda: fresh(out), lambda: ["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone", "--ca-cert", ca,
                                                                     "--http-url", turl + "small/", "--transfers", "16", "--exclude", "manifest.json", "--exclude", ".ferry/**"]),
    ]
    table = measure("10,000 × 4 KiB over HTTPS", tools, runs, server=tls)
    sections.append(("10,000 × 4 KiB files over HTTPS (HTTP/2, private CA)", table,
                     "curl --parallel --http2 (16)", 1.2, "wall ≤ 1.2 × curl --parallel --http2",
                     per_file_cpu(table, 10000) + " The format-1 row reads the same tree from one flat manifest, as over HTTP. All 10,000 "
                     "files share one HTTP/2 connection, so every byte's decryption is on one thread of the client's."))
    tls.stop()

    return sections


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--output", required=True)
    ap.add_argument("--only", choices=["push", "s3", "sftp", "formats", "generations", "realtree", "small", "million", "delta", "fleet"], help="measure these sections alone and replace them in the existing report")
    a = ap.parse_args()
    ferry = a.ferry
    shutil.rmtree(BASE, ignore_errors=True)
    if a.only:
        os.makedirs(BASE, exist_ok=True)
        merge_report(a.output, {"push": push_sections, "s3": s3_sections, "sftp": sftp_sections, "formats": format_sections,
                                 "generations": generations_sections, "realtree": lambda f, r: [real_tree_section(f, r)], "small": small_only,
                                 "million": million_sections, "delta": delta_sections, "fleet": fleet_sections}[a.only](ferry, a.runs), a.runs)
        shutil.rmtree(BASE, ignore_errors=True)
        return
    www = fresh(BASE + "/www")
    out = BASE + "/out"
    sections = []

    # ---- data
    print("preparing data on tmpfs...", file=sys.stderr)
    big, small = make_workloads(www)
    subprocess.run([ferry, "manifest", "build", big, "--quiet"], check=True)
    subprocess.run([ferry, "manifest", "build", small, "--quiet"], check=True)
    h = hashlib.sha256()
    with open(big + "/1GiB.bin", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    big_sha = h.hexdigest()
    nginx = Nginx(www)
    url = nginx.url

    # ---- 1 GiB download
    cfg = BASE + "/ferry-big.conf"
    ferry_config(cfg, url + "big/", out + "/ferry", out + "/ferry-state", 8)
    tools = [
        ("ferry sync now", lambda: (fresh(out), ferry_config(cfg, url + "big/", out + "/ferry", out + "/ferry-state", 8)),
         lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]),
        ("curl -o", lambda: fresh(out), lambda: ["curl", "-sf", "-o", out + "/curl.bin", url + "big/1GiB.bin"]),
        ("rclone copyurl", lambda: fresh(out), lambda: ["rclone", "--config", "/dev/null", "copyurl", url + "big/1GiB.bin", out + "/rclone.bin"]),
        ("aria2c --checksum", lambda: fresh(out), lambda: ["aria2c", "-q", "--file-allocation=none", "--allow-overwrite=true",
                                                           f"--checksum=sha-256={big_sha}", "-d", out, "-o", "aria2.bin", url + "big/1GiB.bin"]),
        ("curl + sha256sum", lambda: fresh(out), lambda: ["sh", "-c", f"curl -sf -o {out}/c.bin {url}big/1GiB.bin && sha256sum {out}/c.bin"]),
    ]
    sections.append(("1 GiB file", measure("1 GiB download", tools, a.runs), "curl -o", 0.8, "wall ≤ 0.8 × curl -o; peak RSS ≤ 64 MiB"))

    # ---- unchanged 10,000-file tree
    scfg = BASE + "/ferry-small.conf"
    fresh(out)
    ferry_config(scfg, url + "small/", out + "/ferry", out + "/ferry-state", 16)
    subprocess.run([ferry, "sync", "now", "--config", scfg, "--quiet"], check=True)
    subprocess.run(["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone", "--http-url", url + "small/",
                    "--transfers", "16", "--exclude", "manifest.json", "--exclude", ".ferry/**"], check=True, stderr=subprocess.DEVNULL)
    tools = [
        ("ferry sync now (304)", None, lambda: [ferry, "sync", "now", "--config", scfg, "--quiet"]),
        ("rclone copy (no-op)", None, lambda: ["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone", "--http-url",
                                              url + "small/", "--transfers", "16", "--exclude", "manifest.json", "--exclude", ".ferry/**"]),
        ("find + stat of every file (floor)", None, lambda: ["sh", "-c", f"find {out}/ferry -type f -print0 | xargs -0 stat >/dev/null"]),
    ]
    sections.append(("unchanged 10,000-file tree", measure("unchanged tree", tools, a.runs), "rclone copy (no-op)", 0.3,
                     "wall ≤ 0.3 × rclone no-op copy"))

    # ---- the agent at rest: unchanged polls of the in-sync 10,000-file session
    fresh(out)
    rcfg = BASE + "/ferry-rest.conf"
    ferry_config(rcfg, url + "small/", out + "/ferry", out + "/ferry-state", 16, "poll = 1s\n")
    subprocess.run([ferry, "sync", "now", "--config", rcfg, "--quiet"], check=True)
    sections.append(("ferry agent at rest", agent_at_rest(ferry, rcfg, note="Without the watch (before) a poll cost 80 ms: the scan and the plan."), "at-rest", None,
                     "≤ 50 ms CPU per unchanged poll (304) of a 10,000-file session; RSS ≤ 64 MiB"))

    nginx.stop()

    # ---- 10,000 × 4 KiB over HTTP and HTTPS
    sections += small_file_sections(ferry, a.runs, www, out)

    # ---- a real tree, cold, on disk
    sections.append(real_tree_section(ferry, a.runs))

    # ---- 1,000,000-entry manifest, one file changed
    million, million_at_rest = million_sections(ferry, a.runs)
    sections.append(million)
    sections += format_sections(ferry, a.runs)
    sections += generations_sections(ferry, a.runs)
    sections.append(million_at_rest)

    # ---- kill -9 at half of 1 GiB, relaunch
    sections.append(("kill -9 at half of 1 GiB, then relaunch", kill_and_resume(ferry, www, out, big_sha, a.runs), None, 8,
                     "≤ 8 MiB fetched again, result verified"))

    sections += push_sections(ferry, a.runs)
    sections += s3_sections(ferry, a.runs)
    sections += sftp_sections(ferry, a.runs)
    sections += delta_sections(ferry, a.runs)
    sections += fleet_sections(ferry, a.runs)

    versions = {}
    for tool, cmd in [("curl", ["curl", "--version"]), ("aria2c", ["aria2c", "--version"]), ("rclone", ["rclone", "--version"]),
                      ("wget", ["wget", "--version"]), ("nginx", ["nginx", "-v"]),
                      ("sshd", ["/usr/sbin/sshd", "-V"]), ("zsync", ["zsync", "-V"]), ("casync", ["casync", "--version"])]:
        p = subprocess.run(cmd, capture_output=True, text=True)
        versions[tool] = ((p.stdout or p.stderr).splitlines() or ["?"])[0]
    write_report(a.output, sections, a.runs, versions)
    shutil.rmtree(BASE, ignore_errors=True)


REAL_TREE_SOURCES = ["/usr/share/doc", "/usr/share/locale", "/usr/lib/python3.11"]


def real_tree_section(ferry, runs):
    """A tree nobody here wrote (this machine's documentation, locales and Python library: small
    and mid-sized files, symlinks, odd names), served by nginx from tmpfs and mirrored cold into a
    directory on the machine's disk (ext4 under /var/tmp), where every fsync reaches the device."""
    www = fresh(BASE + "/www-real")
    tree = www + "/real"
    os.makedirs(tree)
    for source in REAL_TREE_SOURCES:
        if os.path.isdir(source):
            subprocess.run(["cp", "-a", source, tree + "/" + source.strip("/").replace("/", "_")], check=True)
    # Links whose target is not in the copy would be errors for a tool that lists the server's pages.
    subprocess.run(["find", tree, "-xtype", "l", "-delete"], check=True)
    files = int(subprocess.run(["sh", "-c", f"find {tree} -type f | wc -l"], capture_output=True, text=True).stdout)
    mib = int(subprocess.run(["du", "-sm", tree], capture_output=True, text=True).stdout.split()[0])
    subprocess.run([ferry, "manifest", "build", tree, "--quiet"], check=True)
    disk = "/var/tmp/ferry-bench-disk"
    out = disk + "/out"
    nginx = Nginx(www)
    cfg = BASE + "/ferry-real.conf"

    def clean():
        fresh(out)
        subprocess.run(["sync"], check=True)  # the last run's writeback is not this run's cost

    tools = [
        ("ferry sync now (16)", lambda: (clean(), ferry_config(cfg, nginx.url + "real/", out + "/ferry", out + "/ferry-state", 16)),
         lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]),
        ("rclone copy --transfers 16", clean, lambda: ["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone", "--http-url",
                                                       nginx.url + "real/", "--transfers", "16", "--exclude", "manifest.json", "--exclude", ".ferry/**"]),
        ("cp -a, then sync (floor)", clean, lambda: ["sh", "-c", f"cp -a {tree} {out}/cp && sync"]),
    ]
    table = measure(f"real tree, {files:,} files, {mib} MiB, cold on disk", tools, runs)
    nginx.stop()
    shutil.rmtree(www, ignore_errors=True)
    shutil.rmtree(disk, ignore_errors=True)
    note = (f"The tree: {', '.join(REAL_TREE_SOURCES)} as this machine has them ({files:,} files, {mib} MiB on tmpfs, symlinks kept; "
            "rclone fetches what a link points to, as the server sends it, and verifies nothing). Output on ext4 (`/var/tmp`). "
            "ferry syncs the data of each group of up to 256 verified files at once (one syncfs), then renames them into place; "
            "that writeback is ferry's own system time, where rclone leaves its dirty pages to the kernel (each round here begins "
            "with a `sync`, untimed, so no tool pays for another's). With an fsync per file (before grouping) ferry took 9.29 s "
            "here, 1.54 × rclone.")
    return ("real tree, cold, on disk", table, "rclone copy --transfers 16", 1.2, "wall ≤ 1.2 × rclone copy --transfers 16", note)


def kill_and_resume(ferry, www, out, big_sha, runs):
    """Each tool downloads 1 GiB, is killed with SIGKILL once half is on disk, and is run again to
    finish. 'fetched again' = bytes nginx sent over both runs minus the file's size."""
    nginx = Nginx(www, log=True)
    url = nginx.url + "big/1GiB.bin"
    size = 1 << 30
    cfg = BASE + "/ferry-kill.conf"

    def ferry_partial():
        d = out + "/ferry/.ferry/partial"
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) if os.path.isdir(d) else 0

    def size_of(path):
        return lambda: os.path.getsize(path) if os.path.exists(path) else 0

    tools = [
        ("ferry sync now", lambda: ferry_config(cfg, nginx.url + "big/", out + "/ferry", out + "/ferry-state", 8),
         [ferry, "sync", "now", "--config", cfg, "--quiet"], [ferry, "sync", "now", "--config", cfg, "--quiet"], ferry_partial,
         lambda: sha256_of(out + "/ferry/1GiB.bin")),
        ("curl -C -", None, ["curl", "-sf", "-o", out + "/curl.bin", url], ["curl", "-sf", "-C", "-", "-o", out + "/curl.bin", url],
         size_of(out + "/curl.bin"), lambda: sha256_of(out + "/curl.bin")),
        ("aria2c -c", None, ["aria2c", "-q", "--file-allocation=none", "-d", out, "-o", "aria2.bin", url],
         ["aria2c", "-q", "-c", "--file-allocation=none", f"--checksum=sha-256={big_sha}", "-d", out, "-o", "aria2.bin", url],
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
            print(f"  run {r + 1} {label:14s} killed with {on_disk / mib:6.0f} MiB on disk; fetched again {again:7.1f} MiB"
                  f" (of which on disk at the kill: {again_client:6.1f} MiB); result {'verified' if ok else 'WRONG'}", file=sys.stderr)
    nginx.stop()
    return {label: (statistics.median(a for a, _, _ in v), statistics.median(c for _, c, _ in v), all(ok for _, _, ok in v))
            for label, v in results.items()}


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
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


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
    lines = ["# Benchmarks", "",
             "Written by `scripts/bench.sh` (do not edit by hand). nginx on 127.0.0.1, output on tmpfs "
             f"(`/dev/shm`), fresh directories for every run, one untimed warm-up round, then the median of {runs} alternated runs; RSS is the peak "
             "over the runs, from /usr/bin/time. ferry verifies size and SHA-256, fsyncs, renames atomically and records every task "
             "in SQLite; curl, rclone and wget do none of that (aria2c `--checksum` verifies).",
             "", f"Machine: {os.cpu_count()} cores, {os.uname().release}. Peers: " + "; ".join(f"{k}: {v}" for k, v in versions.items()), ""]
    for title, table, reference, target, target_text, *note in sections:
        if reference == "at-rest":
            ms, rss, polls, files, note = table
            verdict = ": meets the target" if files != "10,000" or (ms <= 50 and rss <= 64) else ": misses the target"
            if files != "10,000":
                verdict = ""
            lines += [f"## {title}", "", f"Target: {target_text}.", "",
                      f"ferry agent, {polls} unchanged polls (304) of an in-sync {files}-file session: **{ms:.1f} ms CPU per poll** "
                      f"(user + system, every thread), **{rss:.1f} MiB RSS** at rest{verdict}. An unchanged poll is one "
                      "conditional GET: inotify watches say the tree is untouched, so there is no scan (a full one every "
                      "verify-interval, 1 h by default). " + note, ""]
            continue
        if reference == "text":
            lines += [f"## {title}", ""] + table + [""]
            continue
        if reference == "resend":
            lines += [f"## {title}", "", f"Target: {target_text}.", "", "| tool | median MiB the relaunch sent |", "|---|---:|"]
            for tool, mib in table.items():
                lines.append(f"| {tool} | {mib:.1f} |")
            fa = table.get("ferry sync now", float("nan"))
            lines += ["", f"ferry's relaunch sent **{fa:.1f} MiB** of 48 (target ≤ {target}): {'meets' if fa <= target else 'misses'} the target. "
                      "It asks the store which parts it holds (ListParts), keeps those its task table recorded, and sends the rest; "
                      "rclone starts its upload again from zero.", ""]
            continue
        if reference is None:
            lines += [f"## {title}", "", f"Target: {target_text}.", "",
                      "| tool | median MiB sent again by the server | of which the tool had on disk at the kill | every result correct |",
                      "|---|---:|---:|---|"]
            for tool, (again, client, ok) in table.items():
                lines.append(f"| {tool} | {again:.1f} | {client:.1f} | {'yes' if ok else 'NO'} |")
            fa, fc, fok = next(v for k, v in table.items() if k.startswith("ferry"))
            verdict = "meets" if fa <= target and fok else "misses"
            lines += ["", f"ferry: the server sent **{fa:.1f} MiB** again (target ≤ {target} MiB): {verdict} the target; "
                      f"{fc:.1f} MiB of it had reached ferry's disk (what its checkpoints lose), the rest was in kernel socket "
                      "buffers when the process died, counted by nginx as sent. curl -C - appends to whatever is on disk "
                      "without checking that the file is the same one; aria2c -c without its control file starts over.", ""]
            continue
        store = any(len(v) == 4 for v in table.values())
        server, which = ("store", "weed") if title.startswith("S3") else ("server", "sshd") if title.startswith("SFTP") else ("server", "nginx")
        cores = os.cpu_count()
        lines += [f"## {title}", "", f"Target: {target_text}.", "",
                  "| tool | median wall | peak RSS | ferry ÷ tool |" + (f" tool CPU | {server} CPU ({which}) | CPU floor ({cores} cores) |" if store else " median CPU (user + system) |"),
                  "|---|---:|---:|---:|" + ("---:|---:|---:|" if store else "---:|")]
        ferry_label = next(k for k in table if k.startswith("ferry"))
        fw, frss = table[ferry_label][:2]
        for tool, values in table.items():
            w, rss = values[:2]
            ratio = "—" if tool.startswith("ferry") else f"{fw / w:.2f}"
            lines.append(f"| {tool} | {w:.3f} s | {rss:.1f} MiB | {ratio} |" +
                         (f" {values[3]:.2f} s | {values[2]:.2f} s | {(values[2] + values[3]) / cores:.2f} s |" if store else
                          f" {values[2]:.2f} s |" if len(values) > 2 else " — |"))
        if isinstance(reference, tuple):
            _, wall, rss = reference
            for tool, values in table.items():
                w, peak = values[:2]
                if tool.startswith("ferry"):
                    verdict = "meets" if w <= wall and peak <= rss else "misses"
                    lines += ["", f"{tool}: **{w:.2f} s, {peak:.0f} MiB** (target ≤ {wall:g} s, ≤ {rss} MiB): {verdict} the target."]
        elif reference in table:
            r = fw / table[reference][0]
            if store:
                fcpu, fstore = table[ferry_label][3], table[ferry_label][2]
                rw = table[reference][0]
                lines += ["", f"The {server} runs on the same {cores} cores as the client. Beside each tool: its own CPU per run and the "
                          f"{server}'s (user + system, every thread, medians), and the least wall time the two allow together (their sum "
                          f"÷ {cores} cores). ferry's floor here is {(fcpu + fstore) / cores:.2f} s, {(fcpu + fstore) / cores / rw:.2f}× "
                          f"{reference}, and ferry took {fw / ((fcpu + fstore) / cores):.2f}× its floor; the {server}'s CPU alone, for a client "
                          f"that cost nothing, allows no less than {fstore / cores:.2f} s ({fstore / cores / rw:.2f}×)."]
            verdict = "meets" if r <= target else "misses"
            lines += ["", f"ferry ÷ {reference} = **{r:.2f}** (target ≤ {target}): {verdict} the target."]
            lines += ["", note[0]] if note else []
            floor = next((k for k in table if "floor with a hash" in k), None)
            if floor:
                lines += ["", f"ferry ÷ {floor} = **{fw / table[floor][0]:.2f}**. That row is the least a tool that hashes what it sends "
                          f"can take on this {os.cpu_count()}-core machine, where the hash competes with the server for the second core."]
        lines.append("")
    open(path, "w").write("\n".join(lines))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()

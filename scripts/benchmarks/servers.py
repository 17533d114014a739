"""The servers the sections start, each on 127.0.0.1 with its files under BASE: nginx (HTTP, HTTPS,
WebDAV), OpenSSH's sshd (SFTP), SeaweedFS (S3) and nginx as the shipped site cache."""
import json
import os
import pwd
import shutil
import signal
import subprocess
import time

from .runners import BASE, SCRIPTS, cpu_seconds, free_port, fresh, proc_stat, wait_port


class Nginx:
    """nginx serving `root` on a port of its own; `cpu()`: what its master and workers used so far."""

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
        methods = ("dav_methods PUT DELETE MKCOL COPY MOVE; dav_ext_methods PROPFIND OPTIONS; "
                   "create_full_put_path on; client_max_body_size 0;") if dav else ""
        # slow: /slow/ serves the same files paced by nginx at that rate (limit_rate).
        slow_location = ("location /slow/ { alias %s/; limit_rate %s; }" % (root, slow)) if slow else ""
        listen = f"127.0.0.1:{self.port}{' ssl http2' if tls else ''}"
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
  server {{ listen {listen}; root {root}; autoindex on; index .no-index-page; {methods}
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
        """Stops nginx and waits for it."""
        self.proc.terminate()
        self.proc.wait()


class SSHD:
    """A real OpenSSH sshd on 127.0.0.1 serving SFTP (`internal-sftp`), set up as the integration
    tests' SSHServer is: an ed25519 host key and client key of its own, key login for the current
    user only, no password, no PAM; everything under BASE/sshd. SFTP paths are the server's
    absolute paths. `cpu()`: its user + system seconds so far, every connection's included."""
    name = "sshd"

    def __init__(self):
        """Makes the keys and the config, and starts sshd."""
        self.dir = fresh(BASE + "/sshd")
        self.port = free_port()
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ferry-bench", "-f",
                            f"{self.dir}/{key}"], check=True)
        self.key = self.dir + "/client_key"
        shutil.copy(self.key + ".pub", self.dir + "/authorized_keys")
        kind, blob = open(self.dir + "/host_key.pub").read().split()[:2]
        self.known_hosts = self.dir + "/known_hosts"
        open(self.known_hosts, "w").write(f"[127.0.0.1]:{self.port} {kind} {blob}\n")
        # curl (libssh2) checks the host key by its SHA-256, unpadded base64 as ssh-keygen -l prints it.
        printed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", self.dir + "/host_key.pub"],
                                 capture_output=True, text=True, check=True)
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
        return ["rclone", "--config", "/dev/null"] + args + ["--sftp-host", "127.0.0.1", "--sftp-port", str(self.port),
                                                              "--sftp-user", self.user, "--sftp-key-file", self.key,
                                                              "--sftp-known-hosts-file", self.known_hosts]

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
        """Stops sshd (killed if it has not ended within 5 s)."""
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


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
        args = [os.path.join(SCRIPTS, "..", ".venv", "bin", "weed"), "mini", f"-dir={self.dir}/data",
                "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false", f"-s3.config={self.dir}/s3.json",
                "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.port={self.port}",
                f"-s3.localSocket={self.dir}/s3.sock", f"-filer.localSocket={self.dir}/filer.sock"]
        for name in ["s3.port.grpc", "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                     "filer.port", "filer.port.grpc", "admin.port", "admin.port.grpc"]:
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
        """rclone with an on-the-fly :s3: remote on this store, with its identity's keys."""
        return ["rclone", "--config", "/dev/null"] + args + ["--s3-provider", "Other", "--s3-endpoint", self.endpoint,
                                                              "--s3-access-key-id", self.KEY,
                                                              "--s3-secret-access-key", self.SECRET,
                                                              "--s3-force-path-style", "--s3-region", "us-east-1"]

    def cpu(self):
        """The store's CPU seconds so far."""
        return cpu_seconds(proc_stat(self.proc.pid))

    def stop(self):
        """Stops the store (killed after 1 s), removes its sockets and its data."""
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


class SiteCache:
    """nginx as a site cache in front of `origin` (a base URL): examples/site-cache/site-cache.conf
    as shipped, its values filled in; its log says, for every answer, HIT or MISS and what it took
    from the origin for it."""

    def __init__(self, origin):
        """Fills in the shipped config and starts nginx with it."""
        self.dir = fresh(BASE + "/site-cache")
        self.port = free_port()
        conf = open(os.path.join(SCRIPTS, "..", "examples", "site-cache", "site-cache.conf")).read()
        conf = conf.replace("@LISTEN@", f"127.0.0.1:{self.port}").replace("@ORIGIN@", origin.rstrip("/")) \
            .replace("@CACHE@", self.dir + "/cache")
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
        """The cache's log: (status, bytes from the origin, URI) per answer."""
        return [line.rstrip("\n").split("|", 2) for line in open(self.dir + "/access.log") if line.count("|") >= 2]

    def hits(self):
        """(answers from the cache, answers)."""
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

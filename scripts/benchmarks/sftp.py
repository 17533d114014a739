"""SFTP on a real OpenSSH sshd: 1 GiB pulled and pushed against curl and rclone, 10,000 × 4 KiB
pushed against rclone, each row with the CPU sshd spent."""
import os
import shutil
import subprocess

from .runners import BASE, ferry_config, fresh, make_workloads, measure
from .servers import SSHD


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
    """The SFTP rows, on a running `sshd`, the workloads in `big` and `small`, the server's files under `served`."""
    sections = []
    out, state, cfg = BASE + "/sftp-out", BASE + "/sftp-state", BASE + "/ferry-sftp.conf"
    ferry_run = lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]
    measure_sshd = lambda name, tools, n=runs, warmup=True: measure(name, tools, n, warmup=warmup, server=sshd)
    checks = ("ferry verifies every file's size and SHA-256 against the manifest, fsyncs it and renames it into place, "
              "and records it in its state; ")

    # ---- pull: the served directory holds the file (a hard link to the workload's) and the manifest
    # ferry manifest build wrote for it.
    pull = fresh(served + "/pull")
    os.link(big + "/1GiB.bin", pull + "/1GiB.bin")
    subprocess.run([ferry, "manifest", "build", pull, "--quiet"], check=True)

    def pull_clean():
        """An empty output directory, no state, and the pull session."""
        fresh(out)
        shutil.rmtree(state, ignore_errors=True)
        ferry_config(cfg, f"{sshd.url}{pull}/", out + "/ferry", state, 8, sshd.session())

    tools = [
        ("ferry sync now (pull)", pull_clean, ferry_run),
        ("curl -o (sftp)", lambda: fresh(out),
         lambda: sshd.curl(["-o", out + "/curl.bin", f"{sshd.url}{pull}/1GiB.bin"])),
        ("rclone copy (sftp)", lambda: fresh(out),
         lambda: sshd.rclone(["copy", f":sftp:{pull}/1GiB.bin", out + "/rclone"])),
    ]
    sections.append(("SFTP pull: 1 GiB file from OpenSSH sshd", measure_sshd("SFTP pull 1 GiB", tools),
                     "curl -o (sftp)", 1.1, "wall ≤ 1.1 × curl over the same SSH server",
                     checks + "curl writes the bytes it receives and checks nothing; rclone (1.60) writes to the final "
                     "name and compares the MD5 it computed with one `md5sum` runs on the server over an SSH exec "
                     "channel (counted in sshd's CPU). The host key is checked by all three: ferry and rclone against "
                     "known_hosts, curl by its SHA-256 (--hostpubsha256)."))

    # ---- push: fresh destinations on the server for every run
    push = served + "/push"

    def push_clean(local):
        """Empty destinations for every tool, no state, and ferry's push session for `local`."""
        fresh(push)
        for d in ("ferry", "curl", "rclone"):
            os.makedirs(f"{push}/{d}")
        shutil.rmtree(state, ignore_errors=True)
        open(cfg, "w").write(f"[agent]\nstate = {state}\ntransfers = 16\n\n[session bench]\ndirection = push\n"
                             f"remote = {sshd.url}{push}/ferry/\nlocal = {local}\nconflict = local-wins\n"
                             f"{sshd.session()}")

    push_note = ("ferry sends each file to a temporary name under the remote's .ferry/upload/, sets its mode and "
                 "mtime, has the server fsync it (fsync@openssh.com), reads it back and checks its SHA-256, then "
                 "renames it over its final name (posix-rename@openssh.com), and publishes its manifest the same way. ")
    tools = [
        ("ferry sync now (push)", lambda: push_clean(big), ferry_run),
        ("curl -T (sftp)", lambda: push_clean(big),
         lambda: sshd.curl(["--ftp-create-dirs", "-T", big + "/1GiB.bin", f"{sshd.url}{push}/curl/1GiB.bin"])),
        ("rclone copy (sftp)", lambda: push_clean(big), lambda: sshd.rclone(["copy", big, f":sftp:{push}/rclone"])),
    ]
    sections.append(("SFTP push: 1 GiB file to OpenSSH sshd", measure_sshd("SFTP push 1 GiB", tools),
                     "curl -T (sftp)", 1.1, "wall ≤ 1.1 × curl -T over the same SSH server",
                     push_note + "curl -T writes the final name in place (O_TRUNC) and checks nothing; rclone (1.60) "
                     "also writes the final name in place, then runs `md5sum` on the server over an SSH exec channel "
                     "and compares (that read is in sshd's CPU). Neither asks the server to fsync."))

    # ---- push: 10,000 × 4 KiB, 16 at once
    table = measure_sshd("SFTP push 10,000 × 4 KiB",
                         [("ferry sync now (push, 16)", lambda: push_clean(small), ferry_run)])
    rclone_label = "rclone copy --transfers 16 (sftp)"
    table.update(measure_sshd("SFTP push 10,000 × 4 KiB (rclone)",
                              [(rclone_label, lambda: push_clean(small),
                                lambda: sshd.rclone(["copy", small, f":sftp:{push}/rclone", "--transfers", "16"]))]))
    sections.append(("SFTP push: 10,000 × 4 KiB files to OpenSSH sshd", table, rclone_label, 0.6,
                     "wall ≤ 0.6 × rclone copy --transfers 16 to the same server",
                     push_note + "rclone writes each final name in place and runs one `md5sum` per file on the server "
                     "(an SSH exec channel and a process each)."))
    return sections

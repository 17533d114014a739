"""S3 on SeaweedFS, ferry beside rclone on the same store: 10,000 × 4 KiB and 1 GiB pulled and
pushed, unchanged polls, and a multipart upload killed at three quarters and relaunched."""
import json
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time

from .runners import BASE, fresh, make_workloads, measure, parse_size
from .servers import Weed


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
        """Writes ferry's session: `direction` between s3://`bucket`/ and `local`, with state `st` (emptied)."""
        shutil.rmtree(st, ignore_errors=True)
        open(cfg, "w").write(f"[agent]\nstate = {st}\ntransfers = 16\n\n[session bench]\ndirection = {direction}\n"
                             f"remote = s3://{bucket}/\nlocal = {local}\ns3-endpoint = {weed.endpoint}\n"
                             f"s3-credentials = {creds}\nconflict = local-wins\n{extra}")

    def bucket(label):
        """A new, empty bucket named after `label`."""
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
    """The S3 rows, on a running store: push and pull of each workload, the unchanged tree, the kill."""
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
        sections.append((f"S3 push: {label} to SeaweedFS", measure_store(f"S3 push {label}", tools),
                         "rclone copy --transfers 16", 0.6 if label.startswith("10") else 1.0, target_text))
        # One bucket holding the tree and ferry's manifest, pulled by both, in a store holding nothing else.
        weed.restart()
        source = bucket("src")
        config("push", source, data)
        subprocess.run(ferry_run(), check=True)
        tools = [
            ("ferry sync now (pull)", lambda: (fresh(out), config("pull", source, out + "/ferry")), ferry_run),
            ("rclone copy --transfers 16", lambda: fresh(out),
             lambda: weed.rclone(["copy", f":s3:{source}", out + "/rclone", "--transfers", "16",
                                  "--exclude", "manifest.json"])),
        ]
        note = ("ferry hashes every byte it receives (SHA-256, about 0.5 s of CPU per GiB here, on a second thread) "
                "and checks it against the manifest; rclone checks nothing on a multipart object (no MD5 to compare), "
                "which its CPU column shows. On 2 cores shared with the store, that hash is the distance."
                if label == "1 GiB" else "")
        sections.append((f"S3 pull: {label} from SeaweedFS", measure_store(f"S3 pull {label}", tools),
                         "rclone copy --transfers 16", 0.6 if label.startswith("10") else 1.0, target_text)
                        + ((note,) if note else ()))
        if label.startswith("10"):
            sections.append(s3_unchanged(ferry, weed, small, source, state, out, cfg, config, measure_store))
    sections.append(s3_kill_and_resume(ferry, weed, config, bucket, state, cfg, runs))
    return sections


def s3_unchanged(ferry, weed, data, source, state, out, cfg, config, measure_store):
    """The unchanged 10,000-file tree in bucket `source`: ferry's pull and push polls beside rclone's no-op copy."""
    ferry_run = lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]
    # Unchanged: ferry's push and pull polls are one conditional GET each (S3PushTests
    # counts them through a proxy); rclone lists the bucket and compares.
    fresh(out)
    config("pull", source, out + "/ferry", st=state + "-pull")
    subprocess.run(ferry_run(), check=True)
    pull_cfg = open(cfg).read()
    subprocess.run(weed.rclone(["copy", f":s3:{source}", out + "/rclone", "--transfers", "16", "--exclude",
                                "manifest.json"]), check=True)
    config("push", source, data, st=state + "-push")
    subprocess.run(ferry_run(), check=True)
    subprocess.run(ferry_run(), check=True)  # the first poll after a publish checks the placed files
    push_cfg = open(cfg).read()
    tools = [
        ("ferry sync now (pull, unchanged)", lambda: open(cfg, "w").write(pull_cfg), ferry_run),
        ("ferry sync now (push, unchanged)", lambda: open(cfg, "w").write(push_cfg), ferry_run),
        ("rclone copy (no-op)", None, lambda: weed.rclone(["copy", f":s3:{source}", out + "/rclone", "--transfers",
                                                           "16", "--exclude", "manifest.json"])),
    ]
    return ("S3: unchanged 10,000-file tree", measure_store("S3 unchanged", tools), "rclone copy (no-op)", 0.3,
            "one request per poll (a conditional GET of the manifest, 304); wall ≤ 0.3 × rclone's no-op copy")


def s3_kill_and_resume(ferry, weed, config, bucket, state, cfg, runs):
    """A 48 MiB file as a multipart upload in 5 MiB parts, killed once three quarters of it went,
    then run again: how much the relaunch sends. ferry is killed when its task table records 3/4
    of the parts; rclone (same part size) at 3/4 of the time its whole upload takes."""
    size = 48 << 20
    src = fresh(BASE + "/s3-kill-src")
    with open(src + "/48MiB.bin", "wb") as f:
        f.write(os.urandom(size))
    parts = (size + (5 << 20) - 1) // (5 << 20)
    results = {"ferry sync now": [], "rclone copy": []}
    print("== S3 kill -9 at 3/4 of a 48 MiB multipart upload, relaunch", file=sys.stderr)
    rclone_args = lambda b: weed.rclone(["copy", src, f":s3:{b}", "--s3-chunk-size", "5M", "--s3-upload-cutoff", "5M",
                                         "--s3-upload-concurrency", "1", "--stats", "1h", "--stats-one-line", "-v",
                                         "--bwlimit", "24M"])
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
        print(f"  run {r + 1} ferry: killed at {recorded}/{parts} parts recorded; relaunch sent "
              f"{sent / (1 << 20):.1f} MiB", file=sys.stderr)
        results["rclone copy"].append(rclone_killed(r, bucket, rclone_args))
    shutil.rmtree(src, ignore_errors=True)
    table = {k: statistics.median(v) for k, v in results.items() if v}
    return ("S3: kill -9 at 3/4 of a 48 MiB multipart upload, relaunch", table, "resend", 24,
            "the relaunch sends ≤ half the file (rclone sends all of it)")


def rclone_killed(r, bucket, rclone_args):
    """rclone's upload timed, killed at 3/4 of that time and run again: the MiB the relaunch sent."""
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
    found = [m.group(1) for l in again.stderr.splitlines()
             for m in [re.search(r"INFO\s+:\s+([\d.]+ [KMGT]?i?B) / ", l)] if m]
    value = found[-1] if found else "?"
    mib = parse_size(value)
    print(f"  run {r + 1} rclone: killed at {whole * 0.75:.2f} s of {whole:.2f} s; relaunch sent {value}",
          file=sys.stderr)
    return mib

"""`ferry fleet` over 10,000 signed status reports in SeaweedFS (issue 58): list, read 16 at a
time, every signature verified, forged and malformed ones counted."""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

from .runners import BASE, fresh
from .runners import SCRIPTS
from .servers import Weed


def measured(weed, cmd, walls, cpu):
    """Runs `cmd` (it must succeed) and appends its wall, its CPU and the store's CPU meanwhile to
    `walls` and `cpu` ([client], [store]). Returns its standard output."""
    began, store0 = time.monotonic(), weed.cpu()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    walls.append(time.monotonic() - began)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu[0].append(usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime)
    cpu[1].append(weed.cpu() - store0)
    return out


def fleet_reports_sections(ferry, runs):
    """BENCH_FLEET_REPORTS reports (default 10,000), 20 of them forged and 10 malformed, read by
    `ferry fleet --json` from a fresh ledger (every key new) and again with the ledger kept."""
    n = int(os.environ.get("BENCH_FLEET_REPORTS", "10000"))
    # rclone (which makes the bucket) and boto3 read the AWS_* environment (a CA bundle, keys): the
    # store's own keys are given instead.
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[name]
    weed = Weed(BASE + "/fleet-reports-weed")
    work = fresh(BASE + "/fleet-reports")
    try:
        subprocess.run(weed.rclone(["mkdir", ":s3:reports"]), check=True, capture_output=True)
        made = json.loads(subprocess.run(
            [os.path.join(SCRIPTS, "..", ".venv", "bin", "python"), os.path.join(SCRIPTS, "benchmarks", "make_reports.py"),
             "--endpoint", weed.endpoint, "--key", weed.KEY, "--secret", weed.SECRET, "--bucket", "reports",
             "--count", str(n), "--forged", "20", "--malformed", "10"], check=True, capture_output=True, text=True).stdout)
        creds = work + "/credentials"
        open(creds, "w").write(f"[default]\naws_access_key_id = {weed.KEY}\naws_secret_access_key = {weed.SECRET}\n")
        os.chmod(creds, 0o600)
        cfg = work + "/ferry.conf"
        open(cfg, "w").write(f"[agent]\nstate = {work}/state\n\n[session assets]\nremote = s3://reports/site/\n"
                             f"local = {work}/mirror\nreport = s3://reports/fleet/\ns3-endpoint = {weed.endpoint}\n"
                             f"s3-credentials = {creds}\n")
        cold, warm, peer, view = [], [], [], {}
        cpu = {"cold": ([], []), "warm": ([], []), "peer": ([], [])}
        copy = work + "/rclone-copy"
        for _ in range(runs):
            # The peer: rclone copying the same objects to a local directory, 16 at a time (no
            # signature checked, no view made): what reading the bucket alone costs.
            shutil.rmtree(copy, ignore_errors=True)
            measured(weed, weed.rclone(["copy", ":s3:reports/fleet/", copy, "--transfers", "16", "--checkers", "16",
                                        "--no-check-dest", "--use-server-modtime"]), peer, cpu["peer"])
            ledger = work + "/ledger"
            for walls, label in ((cold, "cold"), (warm, "warm")):
                view = json.loads(measured(weed, [ferry, "fleet", "--config", cfg, "--session", "assets", "--json", "--ledger", ledger],
                                           walls, cpu[label]))
            os.unlink(ledger)
            os.unlink(ledger + ".objects")
        kinds = {}
        for r in view["refused"]:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        right = view["taken"] == n - 20 and kinds == {"forged": 20, "malformed": 10}
        served = ", ".join(f"v{s['version']}: {s['machines']:,}" for s in view["served"])
        lines = [f"{n:,} reports ({made['bytes'] / 1e6:.2f} MB in all), each signed by its own machine key, in a SeaweedFS "
                 "bucket on this machine, plus 20 whose body was altered after signing and 10 that are not reports. "
                 f"`ferry fleet --json` lists the bucket ({(n + 30 + 999) // 1000} ListObjectsV2 pages) and reads every "
                 "report, 16 at a time, checking each signature. Median of "
                 f"{runs} runs; each reads once with an empty ledger (every key new: trust on first report) and once "
                 "more with the ledger and the reports it kept (listed with the same ETag and size, a report is not "
                 "fetched again). Target (issue 58): ≤ 5 s.", "",
                 "| read | wall (median) | slowest | vs rclone copy | client CPU | store CPU | reports taken | refused (counted, never merged) |",
                 "|---|---:|---:|---:|---:|---:|---:|---|",
                 f"| first (empty ledger) | {statistics.median(cold):.2f} s | {max(cold):.2f} s | "
                 f"{statistics.median(cold) / statistics.median(peer):.2f}× | "
                 f"{statistics.median(cpu['cold'][0]):.2f} s | {statistics.median(cpu['cold'][1]):.2f} s | {view['taken']:,} | "
                 f"{kinds.get('forged', 0)} forged, {kinds.get('malformed', 0)} malformed |",
                 f"| rclone copy of the same objects (peer: no check, no view) | {statistics.median(peer):.2f} s | {max(peer):.2f} s | "
                 f"1.00× | {statistics.median(cpu['peer'][0]):.2f} s | {statistics.median(cpu['peer'][1]):.2f} s | — | — |",
                 f"| again (ledger and reports kept, none changed) | {statistics.median(warm):.2f} s | {max(warm):.2f} s | "
                 f"{statistics.median(warm) / statistics.median(peer):.2f}× | "
                 f"{statistics.median(cpu['warm'][0]):.2f} s | {statistics.median(cpu['warm'][1]):.2f} s | {view['taken']:,} | same |", "",
                 "rclone copies with `--transfers 16 --checkers 16 --no-check-dest --use-server-modtime` (one GET per "
                 "object, no HEAD): the floor for reading the bucket on this machine. "
                 "CPU is user + system seconds of the whole process; the store (SeaweedFS) shares the machine's 2 cores "
                 "with ferry. A report whose bytes' SHA-256 is in the ledger is not verified again; one listed "
                 "unchanged is parsed and judged from the bytes kept, without a GET.", "",
                 f"Served: {served}. Every count right: {'yes' if right else 'NO'}. "
                 f"Target ≤ 5 s: the first read {'meets' if statistics.median(cold) <= 5 else 'misses'} it, "
                 f"the read again {'meets' if statistics.median(warm) <= 5 else 'misses'} it."]
        print("\n".join(lines[-4:]), file=sys.stderr)
    finally:
        weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    return [("fleet: 10,000 signed status reports read by ferry fleet", lines, "text", None, None)]

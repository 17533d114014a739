#!/usr/bin/env python3
"""Side-by-side benchmark of ferry and its peers (see scripts/bench.sh).

Every workload runs each tool in turn, round after round (alternated, so drift hits all alike),
into fresh directories on tmpfs, and reports the median wall time and peak RSS per tool, with
ferry's ratio to each peer and to the workload's target (docs/benchmarks.md states each).

The sections are in the package scripts/benchmarks/ (its __init__ says what is where); this file
parses the arguments and runs them in the report's order.
"""
import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmarks.delta import delta_sections  # noqa: E402
from benchmarks.fleet import fleet_sections  # noqa: E402
from benchmarks.fleet_delta import fleet_delta_sections  # noqa: E402
from benchmarks.fleet_reports import fleet_reports_sections  # noqa: E402
from benchmarks.manifests import format_sections, generations_sections, million_sections  # noqa: E402
from benchmarks.pull import kill_section, pull_sections, pull_workloads  # noqa: E402
from benchmarks.push import push_sections  # noqa: E402
from benchmarks.realdata import realdata_sections  # noqa: E402
from benchmarks.report import merge_report, peer_versions, write_report  # noqa: E402
from benchmarks.runners import BASE  # noqa: E402
from benchmarks.s3 import s3_sections  # noqa: E402
from benchmarks.sftp import sftp_sections  # noqa: E402
from benchmarks.wan import wan_objects_sections, wan_sections, wan_tar_sections  # noqa: E402
from benchmarks.small import real_tree_section, small_file_sections, small_only  # noqa: E402

# --only NAME: the sections it measures alone, put in place of theirs in the existing report.
ONLY = {"push": push_sections, "s3": s3_sections, "sftp": sftp_sections, "formats": format_sections,
        "generations": generations_sections, "realtree": lambda f, r: [real_tree_section(f, r)], "small": small_only,
        "million": million_sections, "delta": delta_sections, "fleet": fleet_sections, "realdata": realdata_sections,
        "wan": wan_sections, "wan-objects": wan_objects_sections, "wan-tar": wan_tar_sections, "fleet-delta": fleet_delta_sections,
        "fleet-reports": fleet_reports_sections,
        "pull": lambda f, r: pull_sections(f, r, *pull_workloads(f))}

# The sections a full run measures after the pulls, in the report's order: each sets up its own
# data and servers, and returns its sections. A new section is a function (ferry, runs) -> [section],
# in a module of its own, added here and to ONLY.
SECTIONS = [push_sections, s3_sections, sftp_sections, delta_sections, realdata_sections, wan_sections,
            fleet_sections, fleet_delta_sections, fleet_reports_sections]


def full_run(ferry, runs):
    """Every section in the report's order: those sharing the pull workloads in BASE/www, then SECTIONS."""
    # ---- data
    www, out, big_sha = pull_workloads(ferry)
    # ---- 1 GiB download, unchanged 10,000-file tree, the agent at rest
    sections = pull_sections(ferry, runs, www, out, big_sha)
    # ---- 10,000 × 4 KiB over HTTP and HTTPS
    sections += small_file_sections(ferry, runs, www, out)
    # ---- a real tree, cold, on disk
    sections.append(real_tree_section(ferry, runs))
    # ---- 1,000,000-entry manifest, one file changed (its agent at rest after formats and generations)
    million, million_at_rest = million_sections(ferry, runs)
    sections.append(million)
    sections += format_sections(ferry, runs)
    sections += generations_sections(ferry, runs)
    sections.append(million_at_rest)
    # ---- kill -9 at half of 1 GiB, relaunch
    sections.append(kill_section(ferry, www, out, big_sha, runs))
    for section in SECTIONS:
        sections += section(ferry, runs)
    return sections


def main():
    """Measures every section and writes the report, or (--only) one family and merges it in."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--output", required=True)
    ap.add_argument("--only", choices=list(ONLY),
                    help="measure these sections alone and replace them in the existing report")
    a = ap.parse_args()
    ferry = a.ferry
    shutil.rmtree(BASE, ignore_errors=True)
    if a.only:
        os.makedirs(BASE, exist_ok=True)
        merge_report(a.output, ONLY[a.only](ferry, a.runs), a.runs)
        shutil.rmtree(BASE, ignore_errors=True)
        return
    sections = full_run(ferry, a.runs)
    write_report(a.output, sections, a.runs, peer_versions())
    shutil.rmtree(BASE, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Benchmarks ferry against curl, aria2c, rclone and wget on loopback nginx (and OpenSSH's sshd for
# SFTP), output on tmpfs
# (/dev/shm), and writes docs/benchmarks.md. Not a test: it asserts nothing, it measures.
#   scripts/bench.sh            medians of 7 alternated runs per workload (after a warm-up round)
#   BENCH_RUNS=9 scripts/bench.sh
#   scripts/bench.sh --only push   the push rows alone, replaced in docs/benchmarks.md (also: s3, sftp, formats,
#                                  generations, realtree, small, million, delta; BENCH_DELTA_MIB=1024 for 1 GiB;
#                                  fleet; realdata: a Debian root as tar and ext4, SQLite, a native library, built
#                                  once into /var/tmp/ferry-bench-data, BENCH_REALDATA_SETS=app.db for one set)
#                                  wan: through scripts/wanrelay.py (50 ms at 100 Mbit/s, 150 ms at 20 Mbit/s);
#                                  wan-objects: its objects-layout rows alone; wan-tar: the real tar's rows alone
#                                  fleet-delta: 30 agents take a 1% change through the site cache, BENCH_FLEET_DELTA_AGENTS=N
#                                  fleet-reports: ferry fleet over 10,000 signed reports in SeaweedFS, BENCH_FLEET_REPORTS=N
#                                  pull: the 1 GiB download, the unchanged 10,000-file tree, the agent at rest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --bench
export PATH="/opt/swift/usr/bin:/usr/sbin:$PATH"
# The binary the Debian package ships (scripts/shipped-build.sh): what users run. It ran the
# 10,000-file rows 3-6% faster than the default build, whose Swift runtime calls go through shared
# libraries.
source scripts/shipped-build.sh
swift build "${shipped_build_flags[@]}" 2>&1 | tail -1
exec python3 scripts/bench.py --ferry "$(swift build "${shipped_build_flags[@]}" --show-bin-path)/ferry" \
    --runs "${BENCH_RUNS:-7}" \
    --output docs/benchmarks.md "$@"

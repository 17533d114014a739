#!/usr/bin/env bash
# ferry site-cache example: a fleet of agents on this machine behind one nginx site cache
# (site-cache.conf, beside this script) in front of an nginx origin. Each agent is its own process
# with its own state and mirror, configured as a fleet member would be:
#   remote  = the origin (the authority for the manifest)
#   mirrors = the site cache (tried first for every file)
# It publishes a release, runs the fleet at once, publishes a changed release, runs it again,
# and says what the origin served, the cache's hit ratio and each agent's time.
#   usage: examples/site-cache/run.sh [AGENTS (default 10)] [MiB changed per release (default 64)]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../.." && pwd)"
agents="${1:-10}"
mib="${2:-64}"
[ -n "${FERRY_SKIP_SETUP:-}" ] || "$top/scripts/setup.sh"
export PATH="/opt/swift/usr/bin:/usr/sbin:$PATH"

ferry="${FERRY_BINARY:-}"
if [ -z "$ferry" ]; then
    echo "==> building ferry (release)"
    (cd "$top" && swift build -c release --product ferry 2>&1 | tail -1)
    ferry="$top/.build/release/ferry"
fi

work="${FERRY_SITE_CACHE_DIR:-$(mktemp -d /tmp/ferry-site-cache.XXXXXX)}"
rm -rf "$work/origin" "$work/agents" "$work/nginx-origin" "$work/nginx-cache"
mkdir -p "$work/origin/www" "$work/agents" "$work/nginx-origin" "$work/nginx-cache"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
user=""; [ "$(id -u)" -eq 0 ] && user="user root;"
# nginx_conf DIR LOG_FORMAT SERVER: DIR/nginx.conf, its log DIR/access.log in LOG_FORMAT, and
# SERVER (a server block, or an include) inside its http block.
nginx_conf() {
    cat > "$1/nginx.conf" <<CONF
$user
daemon off; worker_processes 2; pid $1/nginx.pid; error_log $1/error.log;
events { worker_connections 1024; }
http {
  log_format fleet '$2';
  access_log $1/access.log fleet;
  client_body_temp_path $1/b; proxy_temp_path $1/p; fastcgi_temp_path $1/f; uwsgi_temp_path $1/u; scgi_temp_path $1/s;
  sendfile on; default_type application/octet-stream;
  $3
}
CONF
}

# The origin: a plain nginx serving the published tree; its log counts what it sent.
origin_port=$(free_port)
nginx_conf "$work/nginx-origin" '$request $status $body_bytes_sent' "server { listen 127.0.0.1:$origin_port; root $work/origin/www; }"

# The site cache: site-cache.conf as shipped, its three values filled in.
cache_port=$(free_port)
sed -e "s|@LISTEN@|127.0.0.1:$cache_port|" -e "s|@ORIGIN@|http://127.0.0.1:$origin_port|" -e "s|@CACHE@|$work/nginx-cache/cache|" \
    "$here/site-cache.conf" > "$work/nginx-cache/site-cache.conf"
nginx_conf "$work/nginx-cache" '$request $status $body_bytes_sent $upstream_cache_status' "include $work/nginx-cache/site-cache.conf;"

nginx -c "$work/nginx-origin/nginx.conf" -p "$work/nginx-origin/" & origin_pid=$!
nginx -c "$work/nginx-cache/nginx.conf" -p "$work/nginx-cache/" & cache_pid=$!
trap 'kill $origin_pid $cache_pid 2>/dev/null || true' EXIT
for port in $origin_port $cache_port; do
    for _ in $(seq 200); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
done

for i in $(seq "$agents"); do
    mkdir -p "$work/agents/$i"
    cat > "$work/agents/$i/ferry.conf" <<CONF
[agent]
state = $work/agents/$i/state

[session site]
remote = http://127.0.0.1:$origin_port/
mirrors = http://127.0.0.1:$cache_port/
local = $work/agents/$i/mirror
delete = yes
CONF
done

# A release: $mib MiB of new content in one large file, and 100 small files.
publish() {
    local version=$1
    mkdir -p "$work/origin/www/small"
    head -c $((mib << 20)) /dev/urandom > "$work/origin/www/release.bin"
    for n in $(seq 100); do echo "release $version, file $n" > "$work/origin/www/small/$n.txt"; done
    "$ferry" manifest build "$work/origin/www" --version "$version" --quiet
}

# Every agent at once, as a fleet whose timers fire together; then what it cost.
run_fleet() {
    local label=$1
    : > "$work/nginx-origin/access.log"; : > "$work/nginx-cache/access.log"
    local pids=()
    for i in $(seq "$agents"); do
        ( start=$EPOCHREALTIME; "$ferry" sync now --config "$work/agents/$i/ferry.conf" --json > "$work/agents/$i/run.jsonl";
          echo "$start $EPOCHREALTIME" > "$work/agents/$i/seconds" ) &
        pids+=($!)
    done
    local failed=0
    for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
    python3 - "$work" "$agents" "$label" "$failed" "$mib" <<'PY'
import json, sys, os, statistics
work, agents, label, failed, mib = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
origin = sum(int(l.split()[-1]) for l in open(work + "/nginx-origin/access.log") if l.split() and l.split()[-1].isdigit())
statuses = [l.split()[-1] for l in open(work + "/nginx-cache/access.log") if l.strip()]
hits = sum(1 for s in statuses if s == "HIT")
times = []
for i in range(1, agents + 1):
    began, ended = map(float, open(f"{work}/agents/{i}/seconds").read().split())
    times.append(ended - began)
shares = []
for i in range(1, agents + 1):
    for line in open(f"{work}/agents/{i}/run.jsonl"):
        e = json.loads(line)
        if e.get("event") == "source-served" and e.get("source") != "origin":
            shares.append(float(e.get("share", 0)))
release = (mib << 20) + 100 * 25
print(f"== {label}: {agents} agents, {failed} failed")
print(f"   origin sent {origin / 1e6:,.1f} MB for a release of {release / 1e6:,.1f} MB ({origin / release:.2f} x; without the cache: {agents} x)")
print(f"   cache: {hits} of {len(statuses)} answers were hits ({hits * 100 // max(1, len(statuses))}%)")
print(f"   agents: slowest {max(times):.2f} s, median {statistics.median(times):.2f} s; share of bytes from the cache: median {statistics.median(shares or [0]) * 100:.0f}%")
PY
}

publish 1
run_fleet "first release"
publish 2
run_fleet "second release"
# Every agent holds exactly the release.
for i in $(seq "$agents"); do diff -r -q -x .ferry -x manifest.json "$work/origin/www" "$work/agents/$i/mirror" > /dev/null || { echo "agent $i differs"; exit 1; }; done
echo "every agent holds release 2, byte for byte ($work)"

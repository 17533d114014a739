#!/usr/bin/env bash
# ferry quickstart: build ferry, publish a sample tree, serve it over HTTP on 127.0.0.1 and mirror
# it with progress bars; then change the remote and the local copy and watch ferry repair both.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../.." && pwd)"
"$top/scripts/setup.sh"
export PATH="/opt/swift/usr/bin:/usr/sbin:$PATH"

echo "==> building ferry (release)"
(cd "$top" && swift build -c release --product ferry 2>&1 | tail -1)
ferry="$top/.build/release/ferry"

work="${FERRY_QUICKSTART_DIR:-$(mktemp -d /tmp/ferry-quickstart.XXXXXX)}"
mkdir -p "$work"
rm -rf "$work/remote" "$work/mirror" "$work/state"
cp -r "$here/site" "$work/remote"
rm -f "$work/remote/images and media/.keep"
head -c $((64 << 20)) /dev/urandom > "$work/remote/images and media/video.bin"

echo "==> publishing: ferry manifest build"
"$ferry" manifest build "$work/remote"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 "$top/scripts/testserver.py" --port "$port" --directory "$work/remote" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done

cat > "$work/ferry.conf" <<CONF
[agent]
state = $work/state
transfers = 8

[session quickstart]
remote = http://127.0.0.1:$port/
local = $work/mirror
delete = yes
CONF
export FERRY_CONFIG="$work/ferry.conf"

echo "==> ferry sync now"
"$ferry" sync now
echo "==> ferry status"
"$ferry" status

echo "==> the remote changes, and someone edits the local copy"
echo "a new page" > "$work/remote/docs/new.txt"
rm "$work/remote/docs/empty.txt"
"$ferry" manifest build "$work/remote" --quiet
echo "tampered" > "$work/mirror/css/site.css"
"$ferry" sync now

echo "==> and once more, with nothing to do (one conditional GET, nothing re-hashed)"
"$ferry" sync now
diff -r --exclude=.ferry --exclude=manifest.json "$work/remote" "$work/mirror" && echo "==> mirror is byte-identical to the remote: $work/mirror"

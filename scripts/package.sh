#!/usr/bin/env bash
# Builds the Debian package dist/ferry_<version>_<arch>.deb: a release binary with the Swift
# standard library linked in (it needs no toolchain at run time, only Debian's libcurl, libsqlite3
# and libssl, which Depends names), the systemd units, an example /etc/ferry/ferry.conf as a
# conffile, the man pages ferry(1) and ferry.conf(5) and the bash, zsh and fish completion (made from
# ferry's own help and config/ferry.conf), and a system user `ferry` (sysusers.d) owning /var/lib/ferry (0700).
#   scripts/package.sh            build the package (runs scripts/setup.sh first)
#   FERRY_BINARY=path scripts/package.sh   package that binary instead of building one
# Only Debian's own tools: dpkg-deb, dpkg-shlibdeps, gzip. Prints the package's path.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >&2
export PATH="/opt/swift/usr/bin:/usr/sbin:$PATH"

version=$(sed -n 's/.*public static let string = "\(.*\)".*/\1/p' Sources/FerryRuntime/Transport/Curl.swift)
arch=$(dpkg --print-architecture)
[ -n "$version" ] || { echo "package: cannot read the version from Sources/FerryRuntime/Transport/Curl.swift" >&2; exit 1; }
# Reproducible dates: the last commit's (or now, outside git).
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH=$epoch
date=$(date -u -d "@$epoch" +%Y-%m-%d)

binary=${FERRY_BINARY:-}
if [ -z "$binary" ]; then
  source scripts/shipped-build.sh
  swift build "${shipped_build_flags[@]}" >&2
  binary=$(swift build "${shipped_build_flags[@]}" --show-bin-path)/ferry
fi
if ldd "$binary" | grep -q -e libswift -e libFoundation -e libdispatch; then
  echo "package: $binary links Swift's libraries dynamically; build it with --static-swift-stdlib" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/ferry_${version}_${arch}"
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/ferry" \
  "$root/usr/lib/sysusers.d" "$root/usr/lib/tmpfiles.d" "$root/usr/share/man/man1" "$root/usr/share/man/man5" \
  "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" "$root/usr/share/fish/vendor_completions.d" \
  "$root/usr/share/doc/ferry/examples"

install -m 0755 "$binary" "$root/usr/bin/ferry"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/ferry"
for unit in ferry.service ferry-sync.service ferry-sync.timer; do
  install -m 0644 "config/$unit" "$root/lib/systemd/system/$unit"
done
install -m 0644 config/ferry.sysusers "$root/usr/lib/sysusers.d/ferry.conf"
printf 'd /var/lib/ferry 0700 ferry ferry -\n' > "$root/usr/lib/tmpfiles.d/ferry.conf"
chmod 0644 "$root/usr/lib/tmpfiles.d/ferry.conf"

# /etc/ferry/ferry.conf: every key documented, the example session commented out, so an agent
# started before the admin writes a session says so instead of mirroring example.net.
awk '/^\[session /{s=1} { if (s && $0 != "" && $0 !~ /^#/) print "# " $0; else print }' config/ferry.conf > "$root/etc/ferry/ferry.conf"
chmod 0644 "$root/etc/ferry/ferry.conf"
install -m 0644 config/ferry.conf "$root/usr/share/doc/ferry/examples/ferry.conf"
# The site cache (nginx), and the Prometheus rules with the Grafana dashboard, each with its README.
install -d -m 0755 "$root/usr/share/doc/ferry/examples/site-cache" "$root/usr/share/doc/ferry/examples/prometheus"
install -m 0644 examples/site-cache/site-cache.conf examples/site-cache/README.md "$root/usr/share/doc/ferry/examples/site-cache/"
install -m 0644 examples/prometheus/ferry.rules.yml examples/prometheus/ferry.rules.test.yml examples/prometheus/ferry-dashboard.json \
  examples/prometheus/README.md \
  "$root/usr/share/doc/ferry/examples/prometheus/"

"$root/usr/bin/ferry" help --man --date "$date" | gzip -9n > "$root/usr/share/man/man1/ferry.1.gz"
python3 scripts/manconf.py config/ferry.conf "$version" "$date" | gzip -9n > "$root/usr/share/man/man5/ferry.conf.5.gz"
"$root/usr/bin/ferry" completion bash > "$root/usr/share/bash-completion/completions/ferry"
"$root/usr/bin/ferry" completion zsh > "$root/usr/share/zsh/vendor-completions/_ferry"
"$root/usr/bin/ferry" completion fish > "$root/usr/share/fish/vendor_completions.d/ferry.fish"
chmod 0644 "$root"/usr/share/man/man*/*.gz "$root/usr/share/bash-completion/completions/ferry" \
  "$root/usr/share/zsh/vendor-completions/_ferry" "$root/usr/share/fish/vendor_completions.d/ferry.fish"

install -m 0644 README.md "$root/usr/share/doc/ferry/README.md"
cat > "$root/usr/share/doc/ferry/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ferry
Source: https://github.com/ferry-sync/ferry

Files: *
Copyright: 2026 The ferry developers
License: Apache-2.0
 On Debian systems, the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
cat > "$work/changelog" <<CHANGELOG
ferry ($version) unstable; urgency=medium

  * Built by scripts/package.sh from commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown).

 -- ferry developers <ferry@example.org>  $(date -u -R -d "@$epoch")
CHANGELOG
gzip -9n < "$work/changelog" > "$root/usr/share/doc/ferry/changelog.gz"
find "$root/usr/share/doc/ferry" -type f -exec chmod 0644 {} +

# Depends: what the binary links, as Debian's own tool finds it.
mkdir -p "$work/src/debian"
printf 'Source: ferry\n\nPackage: ferry\nArchitecture: any\n' > "$work/src/debian/control"
depends=$(cd "$work/src" && dpkg-shlibdeps -O "$root/usr/bin/ferry" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "package: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
size=$(du -k -s --exclude=DEBIAN "$root" | cut -f1)

cat > "$root/DEBIAN/control" <<CONTROL
Package: ferry
Version: $version
Architecture: $arch
Maintainer: ferry developers <ferry@example.org>
Installed-Size: $size
Depends: $depends, systemd-sysusers, systemd-tmpfiles
Section: net
Priority: optional
Description: sync agent: mirrors remote manifests into local directories
 ferry mirrors content from HTTP(S), S3 or file:// remotes into local
 directories, verified by SHA-256 and resumable after a crash, kill -9,
 reboot or deadline, and publishes local directories to a remote. It runs
 once (ferry sync now), from a systemd timer, or as an agent polling each
 manifest on its schedule. The agent runs as the system user ferry with
 systemd's sandboxing; see ferry(1) and ferry.conf(5).
CONTROL
echo /etc/ferry/ferry.conf > "$root/DEBIAN/conffiles"
(cd "$root" && find usr lib -type f -print0 | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"

cat > "$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    # The user `ferry` and /var/lib/ferry (0700, its own), as the files under /usr/lib declare them.
    systemd-sysusers /usr/lib/sysusers.d/ferry.conf
    systemd-tmpfiles --create /usr/lib/tmpfiles.d/ferry.conf
    # The units are installed, not enabled: the config names no session until the admin writes one.
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null || true
        # An upgrade restarts an agent that was running.
        if [ -n "$2" ] && systemctl is-active --quiet ferry.service; then systemctl try-restart ferry.service || true; fi
    fi
fi
exit 0
POSTINST
cat > "$root/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    deb-systemd-invoke stop ferry.service ferry-sync.timer ferry-sync.service >/dev/null || true
fi
exit 0
PRERM
cat > "$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = purge ]; then
    # Units the admin enabled are disabled with the package (their links would dangle).
    deb-systemd-helper purge ferry.service ferry-sync.timer ferry-sync.service >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
    # The state (task table, hash cache, event logs) goes with the package; the user stays, as
    # Debian keeps system users (files it owned elsewhere must not fall to a reused uid).
    rm -rf /var/lib/ferry
fi
if [ -d /run/systemd/system ]; then systemctl --system daemon-reload >/dev/null || true; fi
exit 0
POSTRM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

mkdir -p dist
deb="dist/ferry_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
echo "$deb"

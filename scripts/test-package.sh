#!/usr/bin/env bash
# The package test (issue 22): builds dist/ferry_*.deb, installs it with dpkg -i, checks what it
# installed, runs the installed ferry with the Swift toolchain hidden (a private mount namespace
# with an empty tmpfs over /opt/swift), syncs with it as the user `ferry`, checks the units, runs
# lintian, and removes and purges the package. Needs root (CI is); leaves the machine as it was.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "test-package: needs root (dpkg -i)" >&2; exit 1; }
fail() { echo "test-package: FAIL: $*" >&2; exit 1; }
step() { echo "test-package: $*" >&2; }

deb=$(scripts/package.sh)
step "built $deb ($(du -h "$deb" | cut -f1))"

step "lintian"
lintian --fail-on error --suppress-tags spelling-error-in-binary "$deb" 2>&1 | grep -v 'root privileges' >&2 || true
lintian --fail-on error "$deb" >/dev/null 2>&1 || fail "lintian reports errors"

# A ferry installed before (a run cut short) goes first.
dpkg -P ferry >/dev/null 2>&1 || true
work=$(mktemp -d /tmp/ferry-package.XXXXXX)
chmod 755 "$work"
cleanup() { dpkg -P ferry >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

step "dpkg -i"
dpkg -i "$deb" >&2
[ -x /usr/bin/ferry ] || fail "/usr/bin/ferry is not there"
getent passwd ferry >/dev/null || fail "no user ferry"
[ "$(getent passwd ferry | cut -d: -f7)" = /usr/sbin/nologin ] || fail "the user ferry has a login shell"
for f in site-cache/site-cache.conf site-cache/README.md prometheus/ferry.rules.yml prometheus/ferry.rules.test.yml prometheus/ferry-dashboard.json prometheus/README.md; do
  [ -f "/usr/share/doc/ferry/examples/$f" ] || fail "the package does not ship examples/$f"
done
(cd /usr/share/doc/ferry/examples/prometheus && promtool test rules ferry.rules.test.yml >/dev/null) \
  || fail "the shipped Prometheus rules fail their tests"
[ "$(stat -c '%U:%G %a' /var/lib/ferry)" = "ferry:ferry 700" ] || fail "/var/lib/ferry is $(stat -c '%U:%G %a' /var/lib/ferry), not ferry:ferry 700"
dpkg-query -W -f='${Conffiles}' ferry | grep -q '/etc/ferry/ferry.conf' || fail "/etc/ferry/ferry.conf is not a conffile"
for f in /usr/share/man/man1/ferry.1.gz /usr/share/man/man5/ferry.conf.5.gz /usr/share/bash-completion/completions/ferry \
         /usr/share/zsh/vendor-completions/_ferry /usr/share/fish/vendor_completions.d/ferry.fish \
         /lib/systemd/system/ferry.service /lib/systemd/system/ferry-sync.service /lib/systemd/system/ferry-sync.timer; do
  [ -f "$f" ] || fail "$f is not installed"
done
for page in /usr/share/man/man1/ferry.1.gz /usr/share/man/man5/ferry.conf.5.gz; do
  warnings=$(zcat "$page" | groff -man -Tutf8 -ww -z 2>&1) || fail "$page does not render"
  [ -z "$warnings" ] || fail "$page: $warnings"
done
bash -c 'source /usr/share/bash-completion/completions/ferry && complete -p ferry' >/dev/null || fail "the bash completion does not load"
HOME="$work" zsh -f -c 'autoload -U compinit && compinit -u -D && fpath=(/usr/share/zsh/vendor-completions $fpath) && autoload -U _ferry && whence -w _ferry' >/dev/null \
  || fail "the zsh completion does not load"
fished=$(HOME="$work" fish -N -c 'source /usr/share/fish/vendor_completions.d/ferry.fish && complete -C "ferry sync n"') || fail "the fish completion does not load"
[[ "$fished" == now* ]] || fail "the fish completion offers '$fished' for 'ferry sync n'"

step "the installed ferry without the toolchain"
if ldd /usr/bin/ferry | grep -e libswift -e /opt/swift; then fail "/usr/bin/ferry links the toolchain's libraries"; fi
# The installed config names no session until the admin writes one: the agent says so.
out=$(unshare -m sh -c 'mount -t tmpfs none /opt/swift && /usr/bin/ferry config check' 2>&1) && fail "an unconfigured ferry passed config check"
echo "$out" | grep -q "no \[session NAME\] section" || fail "config check of the installed config said: $out"
mkdir -p "$work/published/docs" "$work/mirror"
echo "alpha" > "$work/published/a.txt"
echo "bravo" > "$work/published/docs/b.txt"
chown ferry:ferry "$work/mirror"
cat > "$work/ferry.conf" <<CONF
[agent]
state = /var/lib/ferry
[session assets]
remote = file://$work/published/
local = $work/mirror
CONF
chmod 644 "$work/ferry.conf"
unshare -m sh -c "
  set -e
  mount -t tmpfs none /opt/swift
  [ -z \"\$(ls -A /opt/swift)\" ]
  /usr/bin/ferry --version
  /usr/bin/ferry manifest build '$work/published' --quiet
  runuser -u ferry -- /usr/bin/ferry sync now --config '$work/ferry.conf'
  runuser -u ferry -- /usr/bin/ferry status --config '$work/ferry.conf'
" >&2 || fail "the installed ferry did not sync with the toolchain hidden"
cmp "$work/published/a.txt" "$work/mirror/a.txt" && cmp "$work/published/docs/b.txt" "$work/mirror/docs/b.txt" || fail "the mirror differs"
[ "$(stat -c %U /var/lib/ferry/state.db 2>/dev/null || stat -c %U "$(ls -d /var/lib/ferry/* | head -1)")" = ferry ] || fail "the state is not ferry's"

step "the units"
verify=$(systemd-analyze verify /lib/systemd/system/ferry.service /lib/systemd/system/ferry-sync.service /lib/systemd/system/ferry-sync.timer 2>&1) \
  || fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify has remarks: $verify"
for unit in ferry.service ferry-sync.service; do
  score=$(systemd-analyze security --offline=yes "/lib/systemd/system/$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
  step "$unit: exposure $score"
  awk -v s="$score" 'BEGIN { exit !(s != "" && s <= 2.0) }' || fail "$unit: exposure $score, above 2.0"
done

step "dpkg -r keeps the config and the state, dpkg -P removes them"
echo "# edited by the admin" >> /etc/ferry/ferry.conf
dpkg -r ferry >&2
[ ! -e /usr/bin/ferry ] || fail "/usr/bin/ferry is left after dpkg -r"
grep -q "edited by the admin" /etc/ferry/ferry.conf || fail "dpkg -r lost the edited conffile"
[ -d /var/lib/ferry ] || fail "dpkg -r removed the state"
dpkg -P ferry >&2
[ ! -e /etc/ferry/ferry.conf ] || fail "dpkg -P left /etc/ferry/ferry.conf"
[ ! -e /var/lib/ferry ] || fail "dpkg -P left /var/lib/ferry"
dpkg -s ferry >/dev/null 2>&1 && fail "ferry is still installed"
# Nothing here may replace a device (zsh's compinit once wrote its dump over /dev/null).
[ -c /dev/null ] || fail "/dev/null is no longer a character device"
step "passed"

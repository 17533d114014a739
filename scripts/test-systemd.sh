#!/usr/bin/env bash
# The systemd test: boots a minimal Debian (debootstrap, cached) under systemd-nspawn with systemd
# as its PID 1, installs the package (scripts/package.sh) in it and checks the shipped units there:
#   a  the package installs with dpkg -i (its Depends met by systemd, libcurl4, libsqlite3-0, libssl3)
#   r  ExecReload runs on a system without procps (no /bin/kill)
#   b  ferry.service with the shipped config (no session) starts, sends READY, says it waits for a reload
#   c  a session: reload takes it; with the drop-in `ferry config units` prints and a restart (the
#      sandbox is set at start), the mirror fills, owned by ferry
#   d  systemctl reload applies a config change
#   e  a broken config: systemctl reload fails, the agent goes on (same MainPID), the journal says why
#   f  the watchdog restarts a hung agent (SIGSTOP)
#   g  ferry-sync.timer runs ferry-sync.service, which syncs and exits 0
#   h  a failing session reaches the journal at warning priority or worse
#   i  `ferry sync now` run by root leaves nothing of root's in /var/lib/ferry; the service still syncs
# Each check prints one line (FAIL with the reason and journal lines); the run fails if any failed.
# Needs root, namespaces and the Debian mirror of apt's sources; prints "skipped: <why>" and exits 0
# where systemd-nspawn or debootstrap cannot run at all. The debootstrapped root is cached in
# /var/cache/ferry-test/ (keyed by suite, architecture and package list); each run boots an overlay
# of it, so the cache is never written. Leaves no container, mount or temporary directory behind.
#   scripts/test-systemd.sh                        build the package and test it
#   FERRY_DEB=dist/ferry_X_amd64.deb scripts/test-systemd.sh   test that package instead
set -euo pipefail
cd "$(dirname "$0")/.."

start_us=${EPOCHREALTIME//[!0-9]/}
elapsed() { local now=${EPOCHREALTIME//[!0-9]/}; printf '%d.%d' $(((now - start_us) / 1000000)) $(((now - start_us) / 100000 % 10)); }
say() { printf 'test-systemd: [%6ss] %s\n' "$(elapsed)" "$*" >&2; }
skip() { echo "test-systemd: skipped: $*" >&2; exit 0; }
die() { say "FAIL: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, systemd-nspawn)"
scripts/setup.sh >&2
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
for tool in debootstrap systemd-nspawn nsenter unshare; do
  command -v "$tool" >/dev/null || die "$tool is missing after scripts/setup.sh"
done
why=$(unshare --mount --pid --fork --uts --ipc true 2>&1) || skip "cannot create namespaces: $why"

# The container runs the package built here, so it is the host's Debian release.
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$suite" ] || die "no VERSION_CODENAME in /etc/os-release: cannot tell which Debian release to debootstrap"
arch=$(dpkg --print-architecture)
include=systemd,systemd-sysv,dbus,libcurl4,libsqlite3-0,libssl3
# The mirror apt uses for this release (deb822 sources, then one-line sources), else Debian's CDN.
mirror=$(awk -v s="$suite" '
    FNR == 1 || /^[[:space:]]*$/ { uri = ""; hit = 0 }
    tolower($1) == "uris:" { uri = $2 }
    tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) hit = 1 }
    uri ~ /^(https?|file):/ && hit { print uri; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk -v s="$suite" '
    $1 == "deb" { i = 2; if ($i ~ /^\[/) while ($i !~ /\]$/) i++; if ($i ~ /^\[/ || $i ~ /\]$/) i++
                  if ($(i + 1) == s && $i ~ /^(https?|file):/) { print $i; exit } }' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

cache_dir=/var/cache/ferry-test
cache="$cache_dir/nspawn-$suite-$arch-$(printf '%s minbase %s' "$suite" "$include" | sha256sum | cut -c1-12)"
machine="ferry-test-$$"
run="" build="" bootstrap_pid="" nspawn_pid="" ct_pid=""

# Mounts left under DIR (debootstrap mounts /proc and /sys in its target while it works): unmounted
# before DIR is removed, deepest first, so that rm never reaches the host through them.
unmount_under() {
  awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m"; done
}
remove_dir() { [ -n "$1" ] && [ -d "$1" ] || return 0; unmount_under "$1"; rm -rf --one-file-system "$1"; }
alive() { local s; s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) && [ -n "$s" ] && [ "$s" != Z ]; }
# Polls `command` every 0.2 s until it succeeds or SECONDS pass.
until_true() {
  local deadline=$((${EPOCHREALTIME//[!0-9]/} + $1 * 1000000)); shift
  until "$@"; do
    [ "${EPOCHREALTIME//[!0-9]/}" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
not_alive() { ! alive "$1"; }

stop_container() {
  [ -n "$nspawn_pid" ] || return 0
  if alive "$nspawn_pid"; then
    # A clean poweroff first (the agent stops within its TimeoutStopSec), then SIGKILL to the
    # container's PID 1, which ends every process of its PID namespace.
    if [ -n "$ct_pid" ]; then timeout 10 nsenter -t "$ct_pid" -a systemctl poweroff --no-block >/dev/null 2>&1 || true
    else kill -TERM "$nspawn_pid" 2>/dev/null || true; fi
    if ! until_true 40 not_alive "$nspawn_pid"; then
      say "the container did not power off within 40 s; killing it"
      [ -z "$ct_pid" ] || kill -KILL "$ct_pid" 2>/dev/null || true
      kill -KILL "$nspawn_pid" 2>/dev/null || true
      until_true 10 not_alive "$nspawn_pid" || say "systemd-nspawn ($nspawn_pid) is still there"
    fi
  fi
  wait "$nspawn_pid" 2>/dev/null || true
  nspawn_pid=""
}
cleanup() {
  set +e
  if [ -n "$bootstrap_pid" ]; then
    kill -TERM -- "-$bootstrap_pid" 2>/dev/null
    until_true 20 not_alive "$bootstrap_pid" || kill -KILL -- "-$bootstrap_pid" 2>/dev/null
    wait "$bootstrap_pid" 2>/dev/null
  fi
  stop_container
  remove_dir "$run"
  remove_dir "$build"
  # systemd-nspawn removes this itself, except where /run is no tmpfs and it refuses to (this host).
  rmdir "/run/systemd/nspawn/propagate/$machine" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# --- the package ---------------------------------------------------------------------------------
deb=${FERRY_DEB:-$(scripts/package.sh)}
[ -f "$deb" ] || die "no package at $deb"
say "package $deb"

# --- the root: debootstrapped once, renamed into the cache only when complete --------------------
mkdir -p "$cache_dir"
if [ ! -d "$cache/root" ]; then
  exec 9>"$cache_dir/.lock"
  flock 9  # one build at a time; a run that waited finds the cache made
  if [ ! -d "$cache/root" ]; then
    # Builds a run cut short left behind (no one else builds while the lock is held).
    for old in "$cache_dir"/.build.*; do remove_dir "$old"; done
    build=$(mktemp -d "$cache_dir/.build.XXXXXX")
    say "debootstrap $suite ($include) from $mirror into $cache (about a minute)"
    # In the background, in a process group of its own: a signal to this script ends it (and the
    # dpkg it runs) at once instead of after the whole minute.
    setsid debootstrap --variant=minbase --include="$include" "$suite" "$build/root" "$mirror" >"$build/debootstrap.log" 2>&1 &
    bootstrap_pid=$!
    if ! wait "$bootstrap_pid"; then
      bootstrap_pid=""
      tail -n 15 "$build/debootstrap.log" >&2
      tail -n 15 "$build/root/debootstrap/debootstrap.log" >&2 2>/dev/null || true
      die "debootstrap failed (the lines above say why)"
    fi
    bootstrap_pid=""
    rm -f "$build/debootstrap.log"
    # Roots made for another package list or release are not used again.
    for old in "$cache_dir"/nspawn-*; do [ "$old" = "$cache" ] || remove_dir "$old"; done
    mv -T "$build" "$cache"
    build=""
  fi
  exec 9>&-
fi

# --- boot ----------------------------------------------------------------------------------------
# The run's root is an overlay of the cached one (its changes go to $run/upper), mounted in a mount
# namespace of its own that ends with systemd-nspawn: nothing is left mounted whatever happens.
run=$(mktemp -d /var/tmp/ferry-systemd.XXXXXX)
mkdir "$run/upper" "$run/work" "$run/root"
unshare --mount --propagation private sh -c '
  mount -t overlay overlay -o "lowerdir=$1/root,upperdir=$2/upper,workdir=$2/work" "$2/root" &&
  exec systemd-nspawn -D "$2/root" -b --register=no --keep-unit --console=pipe -M "$3"' \
  sh "$cache" "$run" "$machine" </dev/null >"$run/console.log" 2>&1 &
nspawn_pid=$!
# The container's PID 1: the child of systemd-nspawn that has become systemd.
find_init() {
  local c
  for c in $(cat "/proc/$nspawn_pid/task/"*/children 2>/dev/null); do
    [ "$(cat "/proc/$c/comm" 2>/dev/null)" = systemd ] && { ct_pid=$c; return 0; }
  done
  alive "$nspawn_pid" || return 0  # gone: the check below says so
  return 1
}
boot_failed() { tail -n 30 "$run/console.log" >&2; die "$*"; }
until_true 30 find_init || boot_failed "systemd did not start in the container within 30 s"
[ -n "$ct_pid" ] || boot_failed "systemd-nspawn ended (its output above)"

# Runs a command in the container (all its namespaces), with an environment of its own.
ct() { nsenter -t "$ct_pid" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
ct_sh() { ct sh -euc "$1"; }
booted() { state=$(ct systemctl is-system-running 2>/dev/null) || true; [ "$state" = running ] || [ "$state" = degraded ]; }
until_true 60 booted || boot_failed "the container did not finish booting within 60 s (state: ${state:-none})"
[ "$state" = running ] || say "note: the container booted degraded: $(ct systemctl --failed --plain --no-legend | cut -d' ' -f1 | tr '\n' ' ')"
say "booted $suite in $machine (PID 1 is $ct_pid)"
ct_sh 'cat > /root/ferry.deb' <"$deb"

# --- helpers for the checks ----------------------------------------------------------------------
failed=()
check_id="" check_title=""
# Ends the current check (it runs in a subshell) with its reason.
fail() { say "$check_id FAIL ($check_title): $*"; exit 1; }
# The unit's journal lines since the check began (the last 15), for a failure's message.
journal() { ct journalctl -u "$1" --since="$check_mark" -n 15 --no-pager -o short-monotonic 2>&1 | sed 's/^/    /' >&2; }
fail_with_journal() { local unit=$1; shift; say "$check_id FAIL ($check_title): $*"; journal "$unit"; exit 1; }
prop() { ct systemctl show -p "$2" --value "$1"; }
# Now, for journalctl --since: what is logged from here on. (Not a cursor: journalctl 252 shows
# nothing for --after-cursor with -p.)
mark() { date +@%s.%6N; }
# Whether the unit's journal since MARK has a line matching the extended regexp (case-insensitive),
# at PRIORITY or worse if given. (Read whole: grep -q in a pipe would kill journalctl, and pipefail
# would take that for no match.)
logged_since() { local lines; lines=$(ct journalctl -u "$2" --since="$1" -o cat --no-pager ${4:+-p "$4"}); grep -qiE -- "$3" <<<"$lines"; }
run_check() {
  check_id=$1 check_title=$2 check_mark=$(mark)
  local rc
  set +e
  ( set -eE; trap 'fail "a command failed: $BASH_COMMAND (line $LINENO)"' ERR; "$3" )
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then say "$check_id ok: $check_title"; else failed+=("$check_id"); fi
  return 0
}

# Publishes /srv/published again after a change (a new manifest version).
publish() { ct ferry manifest build /srv/published --quiet; }
# The config: session assets mirrors /srv/published into /srv/mirror every second; extra lines go
# at the end (into the last session).
write_config() {
  ct_sh "cat > /etc/ferry/ferry.conf" <<CONF
[agent]
state = /var/lib/ferry

[session assets]
remote = file:///srv/published/
local = /srv/mirror
poll = 1s
$1
CONF
}
# The drop-in that gives the units write access to the sessions' local directories, as an admin
# makes it: `ferry config units`, installed for ferry.service and ferry-sync.service. If that
# command fails (check c says so), one is written by hand from the directories given, so that the
# other checks still test what they are about.
install_dropin() {
  local out rc=0 dir
  if out=$(ct ferry config units --config /etc/ferry/ferry.conf 2>&1); then
    for dir in "$@"; do
      grep -qxE "ReadWritePaths=(.* )?-?$dir( .*)?" <<<"$out" || { rc=1; echo "ferry config units names no ReadWritePaths=$dir: $out"; }
    done
  else
    rc=1; echo "ferry config units failed: $out"
    out=$(printf '[Service]\n'; printf 'ReadWritePaths=%s\n' "$@")
  fi
  ct_sh 'dropin=$(cat)
         for unit in ferry.service ferry-sync.service; do
           mkdir -p /etc/systemd/system/$unit.d
           printf "%s\n" "$dropin" > /etc/systemd/system/$unit.d/ferry-paths.conf
         done
         systemctl daemon-reload' <<<"$out"
  return "$rc"
}
mirror_has() { ct cmp -s "/srv/published/$1" "/srv/mirror/$1"; }
is_active() { [ "$(prop "$1" ActiveState)" = active ]; }
# Files under DIR not owned by ferry (none, if all is well).
not_ferrys() { local found; found=$(ct find "$1" ! -user ferry -printf '%u %p\n'); head -n 5 <<<"$found"; }

# --- the checks ----------------------------------------------------------------------------------
check_install() {
  out=$(ct dpkg -i /root/ferry.deb 2>&1) || { echo "$out" | tail -n 15 | sed 's/^/    /' >&2; fail "dpkg -i failed (its output above)"; }
  ct test -x /usr/bin/ferry || fail "/usr/bin/ferry is not installed"
  ct getent passwd ferry >/dev/null || fail "the postinst made no user ferry"
  owner=$(ct stat -c '%U:%G %a' /var/lib/ferry) || fail "no /var/lib/ferry"
  [ "$owner" = "ferry:ferry 700" ] || fail "/var/lib/ferry is $owner, not ferry:ferry 700"
  [ "$(prop ferry.service LoadState)" = loaded ] || fail "systemd does not know ferry.service after the install"
}

check_reload_command() {
  reload=$(prop ferry.service ExecReload)
  program=$(sed -n 's/^{ path=\([^ ;]*\).*/\1/p' <<<"$reload")
  [ -n "$program" ] || fail "ferry.service has no ExecReload ($reload)"
  ct test -x "$program" || fail "ExecReload runs $program, which this system lacks (a minimal Debian has no procps): systemctl reload cannot work here"
}

check_unconfigured() {
  since=$(mark)
  out=$(ct timeout 40 systemctl start ferry.service 2>&1) || fail_with_journal ferry.service "systemctl start ferry.service with the shipped config failed: $out"
  is_active ferry.service || fail_with_journal ferry.service "ferry.service is $(prop ferry.service ActiveState) after start"
  # Type=notify: start returned, so READY=1 came; the STATUS= beside it says what the agent does.
  status=$(prop ferry.service StatusText)
  grep -qi 'no session' <<<"$status" || fail_with_journal ferry.service "the agent's status (sd_notify STATUS) does not say it has no session: '$status'"
  until_true 10 logged_since "$since" ferry.service 'no session.*reload' \
    || fail_with_journal ferry.service "the journal does not say that no session is configured and the agent waits for a reload"
}

# The agent restarted with the config (write_config's EXTRA) and the drop-in for DIRS: the starting
# point of each check after c, so that each tests its own thing whatever the others found.
agent_with() {
  write_config "$1"; shift
  install_dropin "$@" >/dev/null || true  # check c reports a failing `ferry config units`
  # The checks restart the agent more often than StartLimitBurst allows in StartLimitIntervalSec;
  # reset-failed resets that count.
  ct systemctl reset-failed ferry.service 2>/dev/null || true
  out=$(ct timeout 40 systemctl restart ferry.service 2>&1) || fail_with_journal ferry.service "systemctl restart ferry.service failed: $out"
}

check_configured() {
  write_config "exclude = extra/"
  why=$(install_dropin /srv/mirror) || fail "$why"
  # The agent of check b, waiting for a reload, takes the session on one...
  if is_active ferry.service; then
    out=$(ct timeout 40 systemctl reload ferry.service 2>&1) || fail_with_journal ferry.service "systemctl reload of the agent waiting for a session failed: $out"
  fi
  # ...but what its sandbox lets it write was fixed when it started: the drop-in applies from a
  # restart (with only the reload, the session fails with "Read-only file system").
  ct systemctl reset-failed ferry.service 2>/dev/null || true
  out=$(ct timeout 40 systemctl restart ferry.service 2>&1) || fail_with_journal ferry.service "systemctl restart with the drop-in failed: $out"
  until_true 20 mirror_has a.txt && until_true 5 mirror_has docs/b.txt \
    || fail_with_journal ferry.service "the mirror did not get a.txt and docs/b.txt within 20 s of the restart"
  ! ct test -e /srv/mirror/extra/e.txt || fail "extra/e.txt is in the mirror although the session excludes extra/"
  wrong=$(not_ferrys /srv/mirror); [ -z "$wrong" ] || fail "mirror files not owned by ferry: $wrong"
}

check_reload_applies() {
  agent_with "exclude = extra/" /srv/mirror
  until_true 20 mirror_has a.txt || fail_with_journal ferry.service "the agent did not sync a.txt within 20 s of its start"
  ! ct test -e /srv/mirror/extra/e.txt || fail "extra/e.txt is in the mirror although the session excludes extra/"
  pid=$(prop ferry.service MainPID)
  write_config ""
  out=$(ct timeout 40 systemctl reload ferry.service 2>&1) || fail_with_journal ferry.service "systemctl reload after removing the session's exclude failed: $out"
  until_true 20 mirror_has extra/e.txt || fail_with_journal ferry.service "extra/e.txt did not reach the mirror within 20 s of the reload that removed 'exclude = extra/'"
  [ "$(prop ferry.service MainPID)" = "$pid" ] || fail "the reload restarted the agent (MainPID $pid, now $(prop ferry.service MainPID))"
}

check_broken_reload() {
  agent_with "" /srv/mirror
  pid=$(prop ferry.service MainPID)
  write_config "retries = often"
  since=$(mark)
  if out=$(ct timeout 40 systemctl reload ferry.service 2>&1); then fail "systemctl reload with 'retries = often' in the config succeeded"; fi
  is_active ferry.service || fail_with_journal ferry.service "ferry.service is $(prop ferry.service ActiveState) after the refused reload"
  [ "$(prop ferry.service MainPID)" = "$pid" ] || fail_with_journal ferry.service "the refused reload restarted the agent (MainPID $pid, now $(prop ferry.service MainPID))"
  until_true 10 logged_since "$since" ferry.service "retries.*often" \
    || fail_with_journal ferry.service "the journal does not name the config error (retries = often)"
}

check_watchdog() {
  ct_sh 'mkdir -p /etc/systemd/system/ferry.service.d
         printf "[Service]\nWatchdogSec=3s\nTimeoutAbortSec=2s\nTimeoutStopSec=5s\nRestartSec=1s\n" > /etc/systemd/system/ferry.service.d/zz-test-watchdog.conf'
  agent_with "" /srv/mirror  # (its daemon-reload reads the drop-in; the agent learns WatchdogSec at start)
  [ "$(prop ferry.service WatchdogUSec)" = 3s ] || fail "the test drop-in did not set WatchdogSec=3s ($(prop ferry.service WatchdogUSec))"
  pid=$(prop ferry.service MainPID) restarts=$(prop ferry.service NRestarts)
  since=$(mark)
  ct sh -c 'kill -STOP "$1"' sh "$pid"  # the shell's kill: the container has no /bin/kill
  restarted() { local now; now=$(prop ferry.service MainPID); [ "$now" -gt 0 ] && [ "$now" != "$pid" ] && is_active ferry.service; }
  until_true 30 restarted || fail_with_journal ferry.service "the hung agent (MainPID $pid, stopped) was not restarted within 30 s"
  [ "$(prop ferry.service NRestarts)" -gt "$restarts" ] || fail "NRestarts did not grow ($restarts, now $(prop ferry.service NRestarts))"
  logged_since "$since" ferry.service 'watchdog' || fail_with_journal ferry.service "the journal does not say the watchdog fired"
  ct_sh 'rm /etc/systemd/system/ferry.service.d/zz-test-watchdog.conf; systemctl daemon-reload'
}

check_timer() {
  # The timer's service instead of the agent, as an admin chooses one of the two.
  ct systemctl stop ferry.service
  write_config ""
  install_dropin /srv/mirror >/dev/null || true
  ct_sh 'echo golf > /srv/published/g.txt'
  publish
  ct_sh 'mkdir -p /etc/systemd/system/ferry-sync.timer.d
         printf "[Timer]\nOnCalendar=\nOnActiveSec=1s\nRandomizedDelaySec=0\nPersistent=no\n" > /etc/systemd/system/ferry-sync.timer.d/zz-test.conf
         systemctl daemon-reload'
  [ "$(prop ferry-sync.service ExecMainExitTimestampMonotonic)" = 0 ] || fail "ferry-sync.service ran before its timer"
  ct systemctl start ferry-sync.timer
  ran() { [ "$(prop ferry-sync.service ExecMainExitTimestampMonotonic)" != 0 ] && ! is_active ferry-sync.service; }
  until_true 30 ran || fail_with_journal ferry-sync.service "ferry-sync.timer did not run ferry-sync.service within 30 s"
  result=$(prop ferry-sync.service Result) status=$(prop ferry-sync.service ExecMainStatus)
  [ "$result" = success ] && [ "$status" = 0 ] || fail_with_journal ferry-sync.service "ferry-sync.service ended with $result, exit status $status"
  mirror_has g.txt || fail_with_journal ferry-sync.service "ferry-sync.service exited 0 but g.txt is not in the mirror"
  wrong=$(not_ferrys /srv/mirror); [ -z "$wrong" ] || fail "mirror files not owned by ferry: $wrong"
  ct_sh 'systemctl stop ferry-sync.timer; rm /etc/systemd/system/ferry-sync.timer.d/zz-test.conf; systemctl daemon-reload'
}

check_failure_priority() {
  since=$(mark)
  agent_with "
[session broken]
remote = file:///srv/no-such-remote/
local = /srv/mirror-broken
poll = 1s" /srv/mirror /srv/mirror-broken
  until_true 20 logged_since "$since" ferry.service 'broken' warning \
    || fail_with_journal ferry.service "no line about session broken at warning priority or worse (journalctl -u ferry -p warning) within 20 s"
}

check_root_sync() {
  # With the agent running, sync now hands the work over to it; with the agent stopped, it syncs
  # itself. Both as root, as an operator would type it.
  agent_with "" /srv/mirror
  ct_sh 'echo india > /srv/published/i1.txt'
  publish
  out=$(ct ferry sync now --config /etc/ferry/ferry.conf 2>&1) || fail "ferry sync now as root, with the agent running, failed: $out"
  mirror_has i1.txt || fail "ferry sync now as root (agent running) exited 0 but i1.txt is not in the mirror"
  ct systemctl stop ferry.service
  ct_sh 'echo india > /srv/published/i2.txt'
  publish
  out=$(ct ferry sync now --config /etc/ferry/ferry.conf 2>&1) || fail "ferry sync now as root, with the agent stopped, failed: $out"
  mirror_has i2.txt || fail "ferry sync now as root (agent stopped) exited 0 but i2.txt is not in the mirror"
  wrong=$(not_ferrys /var/lib/ferry); [ -z "$wrong" ] || fail "ferry sync now as root left files in /var/lib/ferry not owned by ferry: $wrong"
  wrong=$(not_ferrys /srv/mirror); [ -z "$wrong" ] || fail "ferry sync now as root left mirror files not owned by ferry: $wrong"
  ct_sh 'echo india > /srv/published/i3.txt'
  publish
  out=$(ct timeout 40 systemctl start ferry.service 2>&1) || fail_with_journal ferry.service "ferry.service does not start after root's sync now: $out"
  until_true 20 mirror_has i3.txt || fail_with_journal ferry.service "after root's sync now, the agent did not bring i3.txt within 20 s"
  is_active ferry.service || fail_with_journal ferry.service "ferry.service is $(prop ferry.service ActiveState)"
}

run_check a "the package installs (dpkg -i)" check_install
[ ${#failed[@]} -eq 0 ] || die "the package did not install; the other checks need it"
run_check r "ExecReload works without procps" check_reload_command
# What the sessions mirror: published by root, readable by all; the local directories are ferry's.
ct_sh 'mkdir -p /srv/published/docs /srv/published/extra /srv/mirror /srv/mirror-broken
       echo alpha > /srv/published/a.txt; echo bravo > /srv/published/docs/b.txt; echo echo > /srv/published/extra/e.txt
       chown ferry:ferry /srv/mirror /srv/mirror-broken'
publish
run_check b "ferry.service starts with the shipped config and waits for a reload" check_unconfigured
run_check c "a session with the drop-in of ferry config units: reload takes it, after a restart the mirror fills, owned by ferry" check_configured
run_check d "systemctl reload applies a config change" check_reload_applies
run_check e "a broken config: reload fails, the agent goes on" check_broken_reload
run_check f "the watchdog restarts a hung agent" check_watchdog
run_check g "ferry-sync.timer runs ferry-sync.service, which syncs" check_timer
run_check h "a failing session reaches journalctl -p warning" check_failure_priority
run_check i "ferry sync now as root leaves the service working" check_root_sync

stop_container
if [ ${#failed[@]} -gt 0 ]; then die "checks ${failed[*]} failed"; fi
say "passed"

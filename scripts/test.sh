#!/usr/bin/env bash
# The whole test suite: installs what the tests need (nginx, python3, openssl, the C libraries),
# builds ferry and runs unit and integration tests against real servers on 127.0.0.1.
#   FERRY_SOAK=1 scripts/test.sh   also runs the long kill/soak loops
set -euo pipefail
cd "$(dirname "$0")/.."
# SwiftPM leaves TemporaryDirectory.* in $TMPDIR on every build and test run: the run gets a
# temporary directory of its own (the tests' directories go there too), removed when it ends.
TMPDIR=$(mktemp -d /tmp/ferry-run.XXXXXX)
chmod 755 "$TMPDIR"  # tests that run ferry as nobody pass through it
export TMPDIR
# A server a killed test process could not stop (SeaweedFS runs from the run's directory) goes too.
trap 'pkill -KILL -f -- "$TMPDIR/" 2>/dev/null || true; rm -rf "$TMPDIR"' EXIT
scripts/setup.sh
export PATH="/opt/swift/usr/bin:/usr/sbin:$PATH"
# The shape the project keeps (docs/design.md, "The shape CI keeps"): FerryRuntime's folders in
# their layer order, no file over 600 lines, no function over 80. Seconds, so before the build.
python3 scripts/shape.py
swift build --build-tests
swift test --skip-build
# The tests remove what they make: anything left in their directory is a defect.
if [ -e "$TMPDIR/ferry-tests" ]; then
    echo "the tests left files behind:" >&2
    ls -la "$TMPDIR/ferry-tests" >&2
    exit 1
fi
# The Debian package: built, installed, run without the toolchain, removed; then installed in a
# minimal Debian booted under systemd-nspawn, whose systemd runs its units (needs root, as CI is).
if [ "$(id -u)" -eq 0 ]; then
    scripts/test-package.sh
    scripts/test-systemd.sh
else
    echo "test.sh: the package tests need root (dpkg -i, systemd-nspawn); skipped" >&2
fi

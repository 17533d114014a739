#!/usr/bin/env bash
# The whole test suite: installs what the tests need (nginx, python3, openssl, the C libraries),
# builds ferry and runs unit and integration tests against real servers on 127.0.0.1.
#   FERRY_SOAK=1 scripts/test.sh   also runs the long kill/soak loops
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="/opt/swift/usr/bin:/usr/sbin:$PATH"
swift build --build-tests
swift test --skip-build

# Sourced by scripts/package.sh and scripts/bench.sh: how the binary the Debian package ships is
# built, so that the bench measures what users run. Swift's standard library is linked in (the
# binary needs no toolchain at run time), and -z now resolves relocations at start, then makes
# them read-only (Debian's hardening).
shipped_build_flags=(-c release --product ferry --static-swift-stdlib -Xlinker -z -Xlinker now)

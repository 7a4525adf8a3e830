#!/bin/sh
# test.sh: the whole test suite, as CI runs it. Installs what it needs when run as root on
# Debian 12, builds, checks format and lints, then runs unit, loader and cluster tests.
# The loader and cluster tests need root; elsewhere they fail loudly unless
# ENERGY_TESTS_ALLOW_SKIP=1.
set -eu
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] && sh ci/deps.sh
[ -x "$HOME/.cargo/bin/cargo" ] && PATH="$HOME/.cargo/bin:$PATH"
echo "== build"
cargo build --release --workspace
echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== tests"
cargo test --release --workspace -- --test-threads=1 "$@"

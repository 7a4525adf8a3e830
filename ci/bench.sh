#!/bin/sh
# bench.sh: regenerates BENCHMARKS.md (cost per poll, rust_ipmi latency, accuracy against
# Slurm's rapl plugin on identical simulated counters, footprint). Root, Debian 12; about
# 13 minutes on a 2-CPU machine. Prints every figure as it goes.
set -eu
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench.sh needs root (Slurm daemons, mount namespaces)" >&2; exit 1; }
sh ci/deps.sh
sh ci/apt-install.sh strace valgrind
[ -x "$HOME/.cargo/bin/cargo" ] && PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --workspace
SLURM_VERSIONS=22.05 cargo test --release -p energy-tests --test benchmarks -- --ignored --nocapture
echo "== written to BENCHMARKS.md"

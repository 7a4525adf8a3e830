#!/bin/sh
# aarch64-check.sh: the workspace type-checked for aarch64-unknown-linux-gnu (NVIDIA
# Grace): the check that nothing assumes x86 where it builds. Without --all-targets and
# without linking (ARM_LINK=1 also builds and links the plugins, as was done once by hand):
# CI's build lane waits for it, and a check is a fraction of a build. rustup's target,
# Debian's gcc-aarch64-linux-gnu and libc6-dev-arm64-cross (the linker, and the C compiler
# and headers ring's build needs) are installed when missing. Nothing is run on aarch64.
# Usage: sh ci/aarch64-check.sh (in the environment a release builds in, SLURM_INCLUDE_DIR
# set for bindgen).
set -eu
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    rustup target add "$target"
fi
# the cross C library's headers: ring's C includes <stdint.h>, whose bits/ are per target
sh ci/apt-install.sh gcc-aarch64-linux-gnu libc6-dev-arm64-cross
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
cargo check --target "$target" --workspace --exclude energy-tests
if [ "${ARM_LINK:-0}" = 1 ]; then
    cargo build --target "$target" -p acct-gather-energy-rust-hwmon \
        -p acct-gather-energy-rust-rapl -p acct-gather-energy-rust-gpu
    echo "aarch64-check: the plugins link for $target"
fi
echo "aarch64-check: the workspace checks for $target"

#!/bin/sh
# deps.sh: installs, from Debian 12 packages, what building and testing needs: Slurm
# 22.05 (daemons, client, headers, the influxdb profile plugin), munge, MariaDB, libclang
# for bindgen, iproute2 for network namespaces, OpenIPMI's ipmi_sim (the simulated BMC),
# gcc and jansson (for the stand-in libvariorum.so), dpkg-dev and rpm (ci/package.sh and
# the package tests), through ci/apt-install.sh (root when
# something is missing; package scripts never start system daemons).
set -eu
sh "$(dirname "$0")/apt-install.sh" slurmd slurmctld slurmdbd slurm-client libslurm-dev \
    slurm-wlm-influxdb-plugin munge mariadb-server libclang-dev clang gcc libc6-dev iproute2 \
    util-linux procps python3 ca-certificates curl openipmi libopenipmi-dev ipmitool libjansson4 \
    dpkg-dev rpm

# Rust: the machine's toolchain (rustup) if present; Debian 12's rustc is too old.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "== using $HOME/.cargo/bin/cargo"
fi
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    echo "== installing Rust with rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component clippy,rustfmt
fi

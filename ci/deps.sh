#!/bin/sh
# deps.sh: installs, from Debian 12 packages, what building and testing needs: Slurm
# 22.05 (daemons, client, headers, the influxdb profile plugin), munge, MariaDB, libclang
# for bindgen, iproute2 for network namespaces, btrfs-progs (a step's socket found on btrfs, SLES's root), OpenIPMI's ipmi_sim (the simulated BMC),
# gcc and jansson (for the stand-in libvariorum.so), openssl (test certificates), what the
# packages need (ci/package.sh: dpkg-dev, and slurm-wlm-basic-plugins, whose libslurmfull.so
# marks the plugin directory and whose version the .deb depends on, pulled in by slurmd but
# not by libslurm-dev; ci/rpm.sh: rpm and git, which makes its source tarball), equivs (the
# package tests' stand-in Slurm packages), Prometheus and node_exporter (the metrics file
# scraped as sites scrape it), DejaVu fonts (senergy's plots), qemu-system-x86 and debootstrap
# (the site-node tier's Debian VM, ci/site-node; without Recommends, which would pull a
# qemu-utils of bookworm's that the image's newer one conflicts with), through ci/apt-install.sh (root when something is missing;
# package scripts never start system daemons); and sushy-tools (a real Redfish server,
# sushy-static) from PyPI into a virtual environment cached under /var/cache/rust-energy-slurm.
set -eu
sh "$(dirname "$0")/apt-install.sh" slurmd slurmctld slurmdbd slurm-client libslurm-dev \
    slurm-wlm-basic-plugins git equivs \
    slurm-wlm-influxdb-plugin munge mariadb-server libclang-dev clang gcc libc6-dev iproute2 \
    util-linux procps btrfs-progs debootstrap python3 python3-venv ca-certificates curl openssl openipmi libopenipmi-dev \
    ipmitool libjansson4 dpkg-dev rpm prometheus prometheus-node-exporter fonts-dejavu-core \
    qemu-system-x86

sushy=/var/cache/rust-energy-slurm/sushy-tools
if [ ! -x "$sushy/bin/sushy-static" ]; then
    echo "== installing sushy-tools into $sushy"
    mkdir -p "$(dirname "$sushy")"
    rm -rf "$sushy"
    /usr/bin/python3 -m venv "$sushy"
    "$sushy/bin/pip" install -q sushy-tools==2.2.0
fi

# Rust: the machine's toolchain (rustup) if present; Debian 12's rustc is too old.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "== using $HOME/.cargo/bin/cargo"
fi
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    echo "== installing Rust with rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component clippy,rustfmt
fi

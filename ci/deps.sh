#!/bin/sh
# deps.sh: installs, from Debian 12 packages, what building and testing needs: Slurm
# 22.05 (daemons, client, headers, the influxdb profile plugin), munge, MariaDB, libclang
# for bindgen, iproute2 for network namespaces, OpenIPMI's ipmi_sim (the simulated BMC),
# gcc and jansson (for the stand-in libvariorum.so). Run as root. Package scripts are kept from starting system daemons.
set -eu
need=""
for p in slurmd slurmctld slurmdbd slurm-client libslurm-dev slurm-wlm-influxdb-plugin munge mariadb-server \
         libclang-dev clang gcc libc6-dev iproute2 util-linux procps python3 ca-certificates curl \
         openipmi libopenipmi-dev ipmitool libjansson4; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need="$need $p"
done
if [ -n "$need" ]; then
    echo "== installing:$need"
    added_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        added_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $need
    [ -n "$added_policy" ] && rm -f /usr/sbin/policy-rc.d
fi

# Rust: the machine's toolchain (rustup) if present; Debian 12's rustc is too old.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "== using $HOME/.cargo/bin/cargo"
fi
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    echo "== installing Rust with rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component clippy,rustfmt
fi

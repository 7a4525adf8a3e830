#!/bin/sh
# multiarch.sh: prints Debian's multiarch tuple of this machine (x86_64-linux-gnu,
# aarch64-linux-gnu, i386-linux-gnu, ...), the directory name under /usr/lib where
# Debian's Slurm keeps libslurmfull and its plugins (/usr/lib/<tuple>/slurm-wlm).
dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null ||
    gcc -print-multiarch 2>/dev/null ||
    echo "$(uname -m)-linux-gnu"

#!/usr/bin/env python3
"""seed-target.py FROM TO: gives the target dir TO the third-party crates FROM's release
profile has compiled, so that cargo builds only the workspace's crates there (for another
Slurm release they differ; the third-party crates do not).

The crates' files are hard links, not copies: they take no space (nine releases' target dirs
once filled a CI machine's disk), and cargo never writes a fresh unit's files again. The
workspace's own files (its packages' fingerprints, build-script runs, libraries, binaries,
test executables, examples) are not linked: cargo writes them anew in TO, and some of them
(dep-info, fingerprints) it would rewrite in place, through the link, in FROM too. Where TO
is on another file system, the crates are copied instead.
"""

import json
import os
import re
import shutil
import subprocess
import sys

HASHED = re.compile(r"^(?:lib)?(?P<name>.+?)-[0-9a-f]{16}(?:\..*)?$")


def workspace_names():
    """The workspace's package names (fingerprint and build-script directories) and target
    names (files in deps/), all with '-' as '_' (cargo writes either)."""
    out = subprocess.run(
        [os.environ.get("CARGO", "cargo"), "metadata", "--no-deps", "--offline", "--format-version", "1"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    names = set()
    for package in json.loads(out)["packages"]:
        names.add(package["name"].replace("-", "_"))
        for target in package["targets"]:
            names.add(target["name"].replace("-", "_"))
    return names


def third_party(entry, names):
    m = HASHED.match(entry)
    return m is not None and m.group("name").replace("-", "_") not in names


def link_or_copy(src, dst, link):
    if os.path.isdir(src) and not os.path.islink(src):
        os.makedirs(dst, exist_ok=True)
        for entry in os.listdir(src):
            link = link_or_copy(os.path.join(src, entry), os.path.join(dst, entry), link)
        return link
    if link:
        try:
            os.link(src, dst, follow_symlinks=False)
            return True
        except OSError:
            pass  # another file system: copies from here on
    shutil.copy2(src, dst, follow_symlinks=False)
    return False


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: seed-target.py FROM_TARGET_DIR TO_TARGET_DIR")
    source = os.path.join(sys.argv[1], "release")
    dest = os.path.join(sys.argv[2], "release")
    names = workspace_names()
    link = True
    count = 0
    # deps/ holds each crate's files; .fingerprint/ and build/ a directory per unit
    for sub in ["deps", ".fingerprint", "build"]:
        src_dir = os.path.join(source, sub)
        if not os.path.isdir(src_dir):
            continue
        os.makedirs(os.path.join(dest, sub), exist_ok=True)
        for entry in sorted(os.listdir(src_dir)):
            if third_party(entry, names):
                link = link_or_copy(os.path.join(src_dir, entry), os.path.join(dest, sub, entry), link)
                count += 1
    print(f"seed-target.py: {count} files and directories of third-party crates "
          f"{'linked' if link else 'copied'} from {source} into {dest}")


if __name__ == "__main__":
    main()

#!/bin/sh
# How many items crate slurm-energy-logic exports: one page of `cargo doc` per item (struct,
# enum, fn, trait, type, constant, static, macro) and one per public module, leaving out the
# redirect pages rustdoc writes at a re-exported item's private path. The surface is the
# list of `pub use` in logic/src/lib.rs; it aims under 150. With `--check N` (CI's lints),
# more than N fails.
set -e
cd "$(dirname "$0")/.."
doc=${CARGO_TARGET_DIR:-target}/doc/slurm_energy_logic
rm -rf "$doc"  # rustdoc leaves the pages of items gone since
cargo doc --release --no-deps -p slurm-energy-logic --all-features --quiet
items=$(find "$doc" -name '*.html' ! -name index.html ! -name all.html \
    -exec grep -L 'http-equiv="refresh"' {} + | wc -l)
modules=$(find "$doc" -mindepth 2 -name index.html -exec grep -L 'http-equiv="refresh"' {} + | wc -l)
total=$((items + modules))
echo "slurm-energy-logic exports $total items ($items items, $modules modules)"
if [ "${1:-}" = --check ] && [ "$total" -gt "$2" ]; then
    echo "logic-surface: over $2: export less (logic/src/lib.rs's pub use list)" >&2
    exit 1
fi

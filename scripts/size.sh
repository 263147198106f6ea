#!/usr/bin/env bash
# Footprint check: builds the release binary and prints its size in bytes and the number of
# distinct crates in the normal (non-dev, non-build) dependency tree. Budgets (issue 10):
# binary <= 4 MiB (4,194,304 bytes), crates <= 60.
# Usage: scripts/size.sh   (honours CARGO_TARGET_DIR; defaults to ./target)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --release --locked >&2
bin="$target/release/baton"
bytes=$(stat -c %s "$bin")
# `--prefix none` prints a crate again, with a ` (*)` suffix, wherever it was already expanded;
# strip the suffix so each crate (baton included) counts once.
crates=$(cargo tree --locked -e normal --prefix none | sed 's/ (\*)$//' | sort -u | wc -l)
echo "binary: $bin"
echo "bytes: $bytes (budget 4194304)"
echo "crates: $crates (budget 60; distinct packages in cargo tree -e normal, baton included)"
status=0
[ "$bytes" -le 4194304 ] || { echo "over the binary budget" >&2; status=1; }
[ "$crates" -le 60 ] || { echo "over the crate budget" >&2; status=1; }
exit "$status"

#!/usr/bin/env bash
# Footprint check: builds the release binary and prints its size in bytes and the number of
# distinct crates in the normal (non-dev, non-build) dependency tree. Budgets (issue 10):
# binary <= 4 MiB (4,194,304 bytes), crates <= 60. With --minimal, the build without the
# optional surfaces (`--no-default-features`, issue 22; in <target>/minimal so that the two
# builds never overwrite each other): binary <= 4 MiB (rustls, ring, serde and the YAML parser
# dominate both builds: the left-out surfaces are about 440 KB), crates <= 55.
# Usage: scripts/size.sh [--minimal]   (honours CARGO_TARGET_DIR; defaults to ./target)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
flags=() max_bytes=4194304 max_crates=60
if [ "${1:-}" = "--minimal" ]; then
  flags=(--no-default-features) target="$target/minimal" max_bytes=4194304 max_crates=55
fi
cargo build --release --locked "${flags[@]}" --target-dir "$target" >&2
bin="$target/release/baton"
bytes=$(stat -c %s "$bin")
# `--prefix none` prints a crate again, with a ` (*)` suffix, wherever it was already expanded;
# strip the suffix so each crate (baton included) counts once.
crates=$(cargo tree --locked "${flags[@]}" -e normal --prefix none | sed 's/ (\*)$//' | sort -u | wc -l)
echo "binary: $bin"
echo "bytes: $bytes (budget $max_bytes)"
echo "crates: $crates (budget $max_crates; distinct packages in cargo tree -e normal, baton included)"
status=0
[ "$bytes" -le "$max_bytes" ] || { echo "over the binary budget" >&2; status=1; }
[ "$crates" -le "$max_crates" ] || { echo "over the crate budget" >&2; status=1; }
exit "$status"

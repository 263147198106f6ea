#!/bin/sh
# Figures for durable state (issue 11): time per write of 1,000 known issues (with and without
# fsync) and the size of state.json. Release build; the ignored test prints the numbers.
# Usage: scripts/bench/state_write.sh [dir]   (dir: filesystem to measure on; default: $TMPDIR)
set -eu
cd "$(dirname "$0")/../.."
if [ $# -gt 0 ]; then
    BATON_BENCH_DIR=$1
    export BATON_BENCH_DIR
fi
exec cargo test --release --test it -- --ignored --exact durable_state::bench_state_write_1000_issues --nocapture

#!/usr/bin/env bash
# Issue 12 figure: GitHub requests caused by a refresh storm. Runs the ignored test
# `bench_refresh_storm_real_time` (tests/tracker_budget.rs): the baton binary with `--port 0`
# against the fake GitHub on loopback, 400 `POST /api/v1/refresh` in 20 s, then 400 more while
# the fake answers every request with a secondary rate limit (Retry-After: 120). Requests are
# counted at the fake. Takes about 45 s. Loopback only.
# Usage: scripts/bench/refresh_storm.sh   (honours CARGO_TARGET_DIR)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo test --release --locked --test it -- \
  --ignored --exact tracker_budget::bench_refresh_storm_real_time --nocapture 2>&1 |
  grep -E '^refresh_storm:|test result|panicked'

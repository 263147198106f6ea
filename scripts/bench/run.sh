#!/usr/bin/env bash
# Scale benchmarks (docs/performance.md): builds the release binary and the fake GitHub (the
# ignored `bench_fake_github_server` test of tests/it/tracker_github.rs), then runs bench.py, which
# starts both with generated boards (100 / 1,000 / 10,000 items) and stub agents and prints every
# figure. Usage: scripts/bench/run.sh [scenario ...]  (idle b1000 b10000 b10000-arena1 run100 big flood
# parse; default: all but b10000-arena1). BENCH_QUICK=1 shortens the windows.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/build.sh
python3 scripts/bench/bench.py "$bin/baton" "$bin/fake-github" "$@"

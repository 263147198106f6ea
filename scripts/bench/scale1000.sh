#!/usr/bin/env bash
# Issue 25 figures: 1,000 stub agents (agent_stub.sh, 60-s turns) on one Baton against the fake
# GitHub (the ignored `bench_fake_github_server` test), with per-agent cgroups (where this
# machine has a writable cgroup v2 subtree; Baton prints its containment) and with process
# groups, plus the two descriptor cases. Prints every figure with its target (scale.py).
# Usage: scripts/bench/scale1000.sh [scenario ...]  (scale scale-pgroup nofile-raise nofile-tight;
# default: all four). Small runs: BENCH_AGENTS=50 BENCH_TURN_S=10 scripts/bench/scale1000.sh scale
# Needs a quiet machine: check `uptime` (load < 4) first.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/build.sh
[ $# -gt 0 ] || set -- scale scale-pgroup nofile-raise nofile-tight
python3 scripts/bench/scale.py "$bin/baton" "$bin/fake-github" "$@"

#!/usr/bin/env bash
# Issue 25 figure: 4 loopback sshd with stock MaxSessions (10) and MaxStartups (10:30:100), 100
# stub agents each (BENCH_PER_HOST), in 60-s turns (BENCH_TURN_S): all started, hosts marked
# down, later-turn spawn latency (scale.py). Needs sshd (BENCH_SSHD, default /usr/sbin/sshd).
# Small run: BENCH_PER_HOST=20 BENCH_TURN_S=10 scripts/bench/ssh400.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/build.sh
python3 scripts/bench/scale.py "$bin/baton" "$bin/fake-github" ssh400

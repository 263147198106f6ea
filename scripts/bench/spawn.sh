#!/usr/bin/env bash
# Spawn latency with 0 and 3,000 idle threads in the process (issue 25 item 1), per-agent cgroups
# on where this machine has a writable cgroup v2 subtree (BATON_CONTAINMENT=process_group for the
# fallback). Prints the FIGURE lines.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo test --release --quiet --test reliability_containment bench_spawn_latency_with_idle_threads \
    -- --include-ignored --exact --nocapture 2>&1 | grep -E '^FIGURE|panicked|FAILED' || true

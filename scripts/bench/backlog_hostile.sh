#!/usr/bin/env bash
# CPU of one Backlog.md board read holding a 195 KB task file of nested YAML flow collections,
# in an optimized build (issue 21: 46.7 CPU-s before the YAML bounds of src/front_matter.rs).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo test --release --test it -- --ignored --nocapture \
    tracker_backlog::bench_hostile_task_file_read_cpu

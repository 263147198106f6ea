#!/usr/bin/env bash
# Times one read of a generated 5,000-task Backlog.md board (read + parse + map to issues), in an
# optimized build, and fails if it takes more than 200 ms of CPU. Prints the best of three reads.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo test --release --test it -- --ignored --nocapture \
    tracker_backlog::bench_five_thousand_task_board_reads_within_budget

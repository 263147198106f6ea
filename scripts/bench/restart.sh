#!/bin/sh
# Figures for durable state (issue 11): restart of a daemon whose state.json holds 1,000 known
# issues (999 queued retries, one interrupted run with a recorded session) until the resumed
# agent runs, against the fake GitHub (one board poll of 1,000 items included). Release build;
# the ignored test prints the numbers. Write cost: scripts/bench/state_write.sh.
set -eu
cd "$(dirname "$0")/../.."
exec cargo test --release --test it -- --ignored --exact durable_daemon::bench_restart_to_first_resumed_agent --nocapture

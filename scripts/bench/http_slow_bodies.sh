#!/usr/bin/env bash
# Issue 21 item 6 figure: latency of /livez and /api/v1/state while N clients trickle POST
# bodies (one byte per connection every 100 ms, reconnecting when the server closes them).
# Runs the ignored test `http_hardening::trickling::bench_trickling_bodies` in release mode:
# Baton's HTTP server (baton::http::spawn) with a fake main loop on an ephemeral loopback port;
# probes are sequential, each on a fresh connection with a 5 s read timeout.
# Usage: scripts/bench/http_slow_bodies.sh [clients ...]   (default: 4 40; BATON_SLOW_SECS=15)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || set -- 4 40
for n in "$@"; do
  BATON_SLOW_CLIENTS="$n" cargo test --release --locked --test it -- \
    --ignored --exact http_hardening::trickling::bench_trickling_bodies --nocapture 2>&1 |
    grep -E '^http_slow_bodies:|test result|panicked'
done

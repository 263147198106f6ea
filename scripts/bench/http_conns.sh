#!/usr/bin/env bash
# Issue 12 figure: how many threads 10,000 idle HTTP connections cost, and whether a request
# is still answered meanwhile. Runs the ignored test `bench_ten_thousand_idle_connections`
# (tests/http_hardening.rs) in release mode: a tiny_http server (the vendored, patched crate,
# default ConnectionLimits) on an ephemeral loopback port, N idle client sockets, the peak of
# /proc/self/task, then one GET on a fresh connection. Loopback only.
# Usage: scripts/bench/http_conns.sh [connections]   (default 10000; honours CARGO_TARGET_DIR)
set -euo pipefail
cd "$(dirname "$0")/../.."
conns="${1:-10000}"
# Each client socket is one descriptor; the server holds at most 2 x 256 more.
need=$((conns + 1024))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
  echo "ulimit -Hn is $hard; $need descriptors are needed for $conns connections" >&2
  exit 1
fi
ulimit -n "$need"
BATON_HTTP_CONNS="$conns" cargo test --release --locked --test it -- \
  --ignored --exact http_hardening::bench_ten_thousand_idle_connections --nocapture 2>&1 |
  grep -E '^http_conns:|slowest connect|test result|panicked|threads'

#!/usr/bin/env bash
# The sandbox's per-turn start overhead (issue 23): spawn -> the agent's first stdout line, with
# and without `sandbox.kind: bubblewrap`, median of 20 each. Needs bwrap: `source
# .ci/setup-sandbox.sh` (exports BATON_BWRAP). Prints the FIGURE line.
set -euo pipefail
cd "$(dirname "$0")/../.."
export BATON_BWRAP="${BATON_BWRAP:-$(command -v bwrap || true)}"
[ -x "$BATON_BWRAP" ] || { echo "sandbox.sh: no bwrap (source .ci/setup-sandbox.sh)" >&2; exit 1; }
HOME="$(mktemp -d)" cargo test --release --quiet --test it sandbox::bench_sandbox_turn_start \
    -- --include-ignored --exact --nocapture 2>&1 | grep -E '^FIGURE|panicked|FAILED' || true

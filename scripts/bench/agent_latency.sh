#!/bin/sh
# Turn start latency of the Codex and Gemini adapters (issue 26): 20 first turns each of the real
# CLIs against their fake model APIs, release build; prints the medians from `run_turn` (just
# before the spawn) to the first event, to `session_started` and to the end of the turn.
# Needs BATON_CODEX_BIN and BATON_GEMINI_BIN (source .ci/setup-codex.sh and .ci/setup-gemini.sh).
set -eu
cd "$(dirname "$0")/../.."
for t in codex_real_cli::bench_codex_turn_start_latency gemini_real_cli::bench_gemini_turn_start_latency; do
    cargo test --release --test it -- --ignored --exact "$t" --nocapture 2>&1 | grep -E "median|test result|panicked"
done

#!/usr/bin/env bash
# Scale benchmarks (docs/performance.md): builds the release binary and the fake GitHub (the
# ignored `bench_fake_github_server` test of tests/it/tracker_github.rs), then runs bench.py, which
# starts both with generated boards (100 / 1,000 / 10,000 items) and stub agents and prints every
# figure. Usage: scripts/bench/run.sh [scenario ...]  (idle b1000 b10000 b10000-arena1 run100 big flood
# parse; default: all but b10000-arena1). BENCH_QUICK=1 shortens the windows.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
# The executables of this checkout (a shared CARGO_TARGET_DIR's `release/baton` may be another
# checkout's), copied so that a concurrent build cannot replace them mid-run.
artifact() {
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$1"
}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cp "$(cargo build --release --message-format=json 2>/dev/null | artifact baton)" "$bin/baton"
cp "$(cargo test --release --test it --no-run --message-format=json 2>/dev/null | artifact it)" "$bin/fake-github"
chmod +x scripts/bench/agent_stub.sh
python3 scripts/bench/bench.py "$bin/baton" "$bin/fake-github" "$@"

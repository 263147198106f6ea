# Sourced by the bench scripts: builds the release binary and the fake GitHub (the ignored
# `bench_fake_github_server` test of tests/it/tracker_github.rs) and copies them into "$bin" (a
# temporary directory removed on exit), so that a concurrent build cannot replace them mid-run.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
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
# BENCH_BATON=path: measure another build of Baton (e.g. main's, for "before" figures).
[ -z "${BENCH_BATON:-}" ] || cp "$BENCH_BATON" "$bin/baton"
chmod +x scripts/bench/agent_stub.sh

#!/usr/bin/env bash
# Task file edit -> agent process started, through the real daemon and its board watch, with
# polling.interval_ms 60000 (so polling cannot be what reacts). Runs RUNS edits (default 10) on
# a fresh board, one task at a time: each edit moves a "Backlog" task to "To Do"; the agent
# script records the time it started (date +%s%N) and moves its task to Done. Prints every
# latency and the median, in ms. BATON_BIN selects the binary (default: a debug build).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS="${RUNS:-10}"
if [ -z "${BATON_BIN:-}" ]; then
    cargo build --quiet --bin baton
    BATON_BIN="$(cargo build --bin baton --message-format=json 2>/dev/null \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)"
fi
dir="$(mktemp -d "${TMPDIR:-/tmp}/baton-bench-watch.XXXXXX")"
pid=""
cleanup() { [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
mkdir -p "$dir/backlog/tasks" "$dir/home"
cat > "$dir/backlog/config.yml" <<'YML'
project_name: "bench"
default_status: "Backlog"
statuses: ["Backlog", "To Do", "In Progress", "Done"]
task_prefix: "task"
YML
cat > "$dir/agent.sh" <<'SH'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
date +%s%N > "$here/started-$BATON_ISSUE_IDENTIFIER"
printf '{"type":"system","subtype":"init","session_id":"s","model":"bench"}\n'
for f in "$here/backlog/tasks/$BATON_ISSUE_IDENTIFIER - "*.md; do
  sed 's/^status: .*/status: Done/' "$f" > "$f.tmp" && mv "$f.tmp" "$f"
done
printf '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"ok","session_id":"s","total_cost_usd":0,"usage":{"input_tokens":1,"output_tokens":1}}\n'
SH
task() { # n status
    printf -- "---\nid: TASK-%s\ntitle: Bench %s\nstatus: %s\nassignee: []\ncreated_date: '2026-11-30 06:40'\nlabels: []\ndependencies: []\n---\n\nBody.\n" "$1" "$1" "$2"
}
for i in $(seq 1 "$RUNS"); do task "$i" Backlog > "$dir/backlog/tasks/task-$i - Bench-$i.md"; done
cat > "$dir/WORKFLOW.md" <<EOF2
---
tracker:
  kind: backlog_md
polling:
  interval_ms: 60000
workspace:
  root: ws
agent:
  kind: claude_code
claude_code:
  command: sh '$dir/agent.sh'
---
Do {{ issue.identifier }}.
EOF2
HOME="$dir/home" RUST_LOG=info "$BATON_BIN" "$dir/WORKFLOW.md" 2> "$dir/baton.log" &
pid=$!
# The board watch is armed before the daemon logs event=startup.
for _ in $(seq 1 1000); do grep -q event=startup "$dir/baton.log" && break; sleep 0.01; done
lat=()
for i in $(seq 1 "$RUNS"); do
    t0=$(date +%s%N)
    task "$i" "To Do" > "$dir/backlog/tasks/task-$i - Bench-$i.md.new"
    mv "$dir/backlog/tasks/task-$i - Bench-$i.md.new" "$dir/backlog/tasks/task-$i - Bench-$i.md"
    for _ in $(seq 1 500); do [ -s "$dir/started-task-$i" ] && break; sleep 0.01; done
    [ -s "$dir/started-task-$i" ] || { echo "task-$i: agent not started within 5 s" >&2; cat "$dir/baton.log" >&2; exit 1; }
    ms=$(( ($(cat "$dir/started-task-$i") - t0) / 1000000 ))
    lat+=("$ms")
    echo "task-$i: edit -> agent started: ${ms} ms"
    for _ in $(seq 1 500); do [ -d "$dir/ws/task-$i" ] || break; sleep 0.01; done
done
median=$(printf '%s\n' "${lat[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
echo "median over $RUNS edits: ${median} ms (budget 1000 ms)"
[ "${median%.*}" -le 1000 ]

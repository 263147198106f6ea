#!/usr/bin/env bash
# A stand-in for the Copilot CLI that replays captured transcripts (fixtures/copilot/), used by
# tests/copilot_session.rs to drive the adapter's session logic without the real CLI.
#   FAKE_COPILOT_FIXTURES  fixtures/copilot directory
#   FAKE_COPILOT_LOG       file receiving each invocation's args (one per line) and a `---` line
#   FAKE_COPILOT_SCENARIO  replay | unknown_resume | no_usage | hang | no_result | env
set -u
fx="$FAKE_COPILOT_FIXTURES"
{ printf '%s\n' "$@"; echo "---"; } >>"$FAKE_COPILOT_LOG"
usage=""
mode=new
while [ $# -gt 0 ]; do
    case "$1" in
        --usage-output-file) usage="${2:-}"; shift ;;
        --resume=*) mode=resume ;;
    esac
    shift
done
replay() {
    cat "$fx/$1/stdout.txt"
    cat "$fx/$1/stderr.txt" >&2
    if [ -n "$usage" ] && [ -f "$fx/$1/usage.json" ]; then cp "$fx/$1/usage.json" "$usage"; fi
    exit "$(cat "$fx/$1/exit_code.txt")"
}
case "$FAKE_COPILOT_SCENARIO" in
    replay) if [ "$mode" = resume ]; then replay 09-resume-turn2-json; else replay 08-resume-turn1-json; fi ;;
    unknown_resume) if [ "$mode" = resume ]; then replay 13-resume-unknown; else replay 02-simple-json; fi ;;
    hang)
        echo '{"type":"session.tools_updated","data":{"model":"gpt-4.1"}}'
        sleep 60 &
        wait
        ;;
    no_usage) replay 06-shell-denied-rule-json ;;
    no_result) head -n 5 "$fx/02-simple-json/stdout.txt"; exit 0 ;;
    env) echo "COPILOT_ALLOW_ALL=${COPILOT_ALLOW_ALL-unset}" >>"$FAKE_COPILOT_LOG"; replay 02-simple-json ;;
    *) echo "unknown scenario" >&2; exit 2 ;;
esac

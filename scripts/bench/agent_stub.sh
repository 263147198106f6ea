#!/usr/bin/env bash
# Stub Claude Code CLI for scripts/bench: prints stream-json like the real CLI and ignores its
# arguments. BENCH_AGENT_MODE:
#   hang   init + one assistant line, then wait on a background `sleep` (a turn that stays open,
#          with a grandchild process, like a real agent running a tool)
#   big    init, then the two lines of $BENCH_BIG_FILE (9.4 MB each), then hang
#   flood  the first run only: init, $BENCH_FLOOD_FILE, a result line, exit; later runs hang
#   stream the first run in each workspace only: assistant lines as fast as it can for
#          $BENCH_STREAM_SECS seconds, a result line, exit; later runs hang
#   turns  init + one assistant line, $BENCH_TURN_S seconds (default 60) with a grandchild
#          `sleep`, then a result line and exit: one finished turn (the issue stays active)
# Every start (and the end of big/flood output) is appended to $BENCH_AGENT_LOG with a ns time,
# the pid and the workspace directory's name (the workspace key).
log() { echo "$1 $(date +%s%N) $$ ${PWD##*/}" >> "$BENCH_AGENT_LOG"; }
log start
# A UUID, as Claude Code's session ids are (Baton resumes only those).
sid=$(printf '%08x-0000-4000-8000-%012x' "$$" "$RANDOM")
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","model":"stub","tools":[]}'
hang() {
  echo '{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"working"}],"usage":{"input_tokens":10,"output_tokens":1}},"session_id":"'"$sid"'"}'
  sleep 3600 &
  wait
}
case "${BENCH_AGENT_MODE:-hang}" in
  big)
    cat "$BENCH_BIG_FILE"
    log printed
    hang
    ;;
  flood)
    if mkdir "$BENCH_AGENT_LOG.flooded" 2>/dev/null; then
      cat "$BENCH_FLOOD_FILE"
      log flooded
      echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"'"$sid"'","num_turns":1,"usage":{"input_tokens":1,"output_tokens":1}}'
    else
      hang
    fi
    ;;
  stream)
    if mkdir .streamed 2>/dev/null; then
      line='{"type":"assistant","message":{"id":"m2","role":"assistant","content":[{"type":"text","text":"still working on the task, printing another progress line"}],"usage":{"input_tokens":10,"output_tokens":1}},"session_id":"'"$sid"'"}'
      timeout "${BENCH_STREAM_SECS:-60}" yes "$line"
      log streamed
      echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"'"$sid"'","num_turns":1,"usage":{"input_tokens":1,"output_tokens":1}}'
    else
      hang
    fi
    ;;
  turns)
    echo '{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"working"}],"usage":{"input_tokens":10,"output_tokens":1}},"session_id":"'"$sid"'"}'
    sleep "${BENCH_TURN_S:-60}" &
    wait
    echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"'"$sid"'","num_turns":1,"usage":{"input_tokens":1,"output_tokens":1}}'
    ;;
  *) hang ;;
esac

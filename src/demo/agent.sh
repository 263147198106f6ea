#!/bin/sh
# The Baton demo agent: a stand-in for Claude Code that needs no account and no network.
#
# Baton starts it exactly as it starts `claude`: `<command> -p --output-format stream-json
# --verbose ... -- <prompt>`, in the task's workspace, with BATON_ISSUE_IDENTIFIER (e.g. task-2)
# in the environment. It ignores its arguments and prints Claude Code's stream-json protocol:
# the init line, assistant text, a tool use that writes a file in the workspace, its tool
# result, and a result line with usage and cost. Then it moves its own task to Done by editing
# the `status:` line of its task file, as the workflow prompt tells a real agent to.
#
# It finds its task file from BATON_ISSUE_IDENTIFIER, which Baton derives from the task id;
# it never reads the task's text. One task (FAIL_ONCE) fails on its first attempt, so the
# retry path shows on the dashboard.
set -eu

FAIL_ONCE="task-2"   # this task's first attempt fails
PAUSE=2              # seconds between steps, so the dashboard shows the work

here=$(cd "$(dirname "$0")" && pwd)
board="$here/backlog"
id="${BATON_ISSUE_IDENTIFIER:?BATON_ISSUE_IDENTIFIER is not set}"
session="demo-$id-$$"

task=""
for f in "$board/tasks/$id - "*.md; do
    if [ -f "$f" ]; then task="$f"; fi
done
if [ -z "$task" ]; then
    echo "demo agent: no task file for $id in $board/tasks" >&2
    exit 1
fi

# JSON string escaping for the few values that come from paths.
json() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'; }
cwd=$(json "$PWD")
usage='"usage":{"input_tokens":1200,"output_tokens":40,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}'

say() { # one assistant text message
    printf '{"type":"assistant","message":{"id":"msg_demo_%s","type":"message","role":"assistant","model":"demo-agent","content":[{"type":"text","text":"%s"}],"stop_reason":null,"stop_sequence":null,%s},"parent_tool_use_id":null,"session_id":"%s"}\n' \
        "$2" "$1" "$usage" "$session"
}
tool_use() { # name, json input, tool id
    printf '{"type":"assistant","message":{"id":"msg_demo_%s","type":"message","role":"assistant","model":"demo-agent","content":[{"type":"tool_use","id":"toolu_demo_%s","name":"%s","input":%s}],"stop_reason":null,"stop_sequence":null,%s},"parent_tool_use_id":null,"session_id":"%s"}\n' \
        "$3" "$3" "$1" "$2" "$usage" "$session"
}
tool_result() { # text, tool id
    printf '{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_demo_%s","type":"tool_result","content":"%s","is_error":false}]},"parent_tool_use_id":null,"session_id":"%s"}\n' \
        "$2" "$1" "$session"
}
result() { # subtype, is_error, text, num_turns
    printf '{"type":"result","subtype":"%s","is_error":%s,"duration_ms":3000,"duration_api_ms":2000,"num_turns":%s,"result":"%s","session_id":"%s","total_cost_usd":0.0125,"usage":{"input_tokens":3600,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":120},"permission_denials":[]}\n' \
        "$1" "$2" "$4" "$3" "$session"
}

printf '{"type":"system","subtype":"init","cwd":"%s","session_id":"%s","tools":["Bash","Edit","Read","Write"],"mcp_servers":[],"model":"demo-agent","permissionMode":"acceptEdits","apiKeySource":"none","claude_code_version":"demo"}\n' \
    "$cwd" "$session"
sleep "$PAUSE"

if [ "$id" = "$FAIL_ONCE" ] && [ ! -e .demo-failed-once ]; then
    : > .demo-failed-once
    say "Starting $id... simulating a failure on this first attempt (Baton will retry)." 1
    sleep "$PAUSE"
    result error_during_execution true "Simulated failure: the demo agent fails $id once." 1
    exit 1
fi

say "Working on $id: writing RESULT.md in the workspace." 1
tool_use Write "{\"file_path\":\"$cwd/RESULT.md\",\"content\":\"Done by the demo agent.\"}" 1
printf '# %s\n\nDone by the Baton demo agent at %s.\n' "$id" "$(date -u '+%Y-%m-%d %H:%M:%S')" > RESULT.md
tool_result "File created successfully at: $cwd/RESULT.md" 1
sleep "$PAUSE"

# Move the task to Done: rewrite the first `status:` line of the front matter, then rename the
# new file over the old one (the board never sees a half-written file).
tool_use Edit "{\"file_path\":\"$(json "$task")\",\"old_string\":\"status: To Do\",\"new_string\":\"status: Done\"}" 2
awk 'BEGIN { fence = 0; done = 0 }
     /^---[[:space:]]*$/ { fence++ }
     fence == 1 && !done && /^status:/ { print "status: Done"; done = 1; next }
     { print }' "$task" > "$task.tmp"
mv "$task.tmp" "$task"
tool_result "The file has been updated: status is now Done." 2
say "Finished $id and moved it to Done." 2
result success false "Finished $id and moved it to Done." 3

#!/usr/bin/env python3
"""A fake `claude` CLI for tests/it/claude_process.rs (stdlib only).

Behaviour is chosen by FAKE_CLAUDE_MODE; argv is recorded as JSON to FAKE_CLAUDE_ARGS_FILE (if
set) before anything else. Modes:
  replay      print FAKE_CLAUDE_FIXTURE line by line (FAKE_CLAUDE_DELAY_MS between lines), exit
              FAKE_CLAUDE_EXIT (default 0)
  flood       print FAKE_CLAUDE_LINES assistant lines as fast as possible, then a success result
  hang        print an init line, then sleep forever
  ignore_term like hang, but SIGTERM is ignored
  garbage     non-JSON, binary and non-object lines, then a success result
  huge        one FAKE_CLAUDE_HUGE_BYTES long line (no newline for a while), then a success result
  grandchild  start a background `sleep` that keeps stdout open (pid in FAKE_CLAUDE_PID_FILE),
              print a success result and exit 0
  setsid_grandchild  like grandchild, but the `sleep` runs in its own session (out of the group)
  close_stdout_hang  print an init line, close stdout, then sleep forever
  noresult    print an init line and exit 0
  stdin       report whether stdin is at EOF (result text "stdin-eof" / "stdin-open"), exit 0
"""
import json
import os
import signal
import subprocess
import sys
import time

SID = "00000000-0000-4000-8000-00000000fa4e"


def out(line):
    if isinstance(line, str):
        line = line.encode()
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.buffer.flush()


def init():
    out(json.dumps({"type": "system", "subtype": "init", "session_id": SID, "model": "fake",
                    "permissionMode": "acceptEdits", "claude_code_version": "0.0.0-fake"}))


def result(text="done", cost=0.5):
    out(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": text,
                    "session_id": SID, "total_cost_usd": cost,
                    "usage": {"input_tokens": 7, "output_tokens": 3,
                              "cache_read_input_tokens": 2, "cache_creation_input_tokens": 1},
                    "permission_denials": []}))


def main():
    args_file = os.environ.get("FAKE_CLAUDE_ARGS_FILE")
    if args_file:
        with open(args_file, "w") as f:
            json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(),
                       "env": {k: v for k, v in os.environ.items()
                               if k.startswith(("API_TIMEOUT", "CLAUDE_", "BATON_", "FAKE_"))}}, f)
    mode = os.environ.get("FAKE_CLAUDE_MODE", "replay")
    if mode == "replay":
        delay = int(os.environ.get("FAKE_CLAUDE_DELAY_MS", "0")) / 1000.0
        with open(os.environ["FAKE_CLAUDE_FIXTURE"], "rb") as f:
            for line in f:
                out(line.rstrip(b"\n"))
                time.sleep(delay)
        sys.exit(int(os.environ.get("FAKE_CLAUDE_EXIT", "0")))
    elif mode == "flood":
        init()
        n = int(os.environ.get("FAKE_CLAUDE_LINES", "100000"))
        line = json.dumps({"type": "assistant", "session_id": SID,
                           "message": {"content": [{"type": "text", "text": "x" * 200}]}}).encode()
        w = sys.stdout.buffer
        for _ in range(n):
            w.write(line + b"\n")
        w.flush()
        result()
    elif mode in ("hang", "ignore_term"):
        if mode == "ignore_term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        init()
        while True:
            time.sleep(3600)
    elif mode == "garbage":
        init()
        out("this is not json")
        out(b"\xff\xfe\x00\x01 binary")
        out("[1, 2, 3]")
        out("{\"type\": ")
        out("")
        result("survived garbage")
    elif mode == "huge":
        init()
        n = int(os.environ.get("FAKE_CLAUDE_HUGE_BYTES", str(12 * 1024 * 1024)))
        chunk = b"y" * 65536
        w = sys.stdout.buffer
        left = n
        while left > 0:
            w.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)
        w.write(b"\n")
        w.flush()
        result("survived huge line")
    elif mode in ("grandchild", "setsid_grandchild"):
        init()
        # The sleep inherits stdout and keeps the pipe open; with setsid it runs in its own
        # session, where group signals cannot reach it.
        setsid = mode == "setsid_grandchild"
        p = subprocess.Popen(["sleep", "1000"], start_new_session=setsid)
        with open(os.environ["FAKE_CLAUDE_PID_FILE"], "w") as f:
            f.write(str(p.pid))
        result("left a setsid grandchild behind" if setsid else "left a grandchild behind")
        os._exit(0)
    elif mode == "close_stdout_hang":
        init()
        sys.stdout.flush()
        os.close(1)
        while True:
            time.sleep(3600)
    elif mode == "noresult":
        init()
    elif mode == "stdin":
        init()
        data = sys.stdin.read()
        result("stdin-eof" if data == "" else "stdin-open")
    else:
        print("unknown mode " + mode, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()

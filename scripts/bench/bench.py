#!/usr/bin/env python3
"""Baton scale benchmarks (issue 13), driven by scripts/bench/run.sh.

Runs the release `baton` binary against the project's fake GitHub (the `bench_fake_github_server`
test of tests/tracker_github.rs, a generated board) with stub agents (agent_stub.sh), and prints
every figure of docs/performance.md. Processes it starts are stopped by pid at the end of each
scenario. Nothing here is a pass/fail test: the figures are printed for the performance page.

Usage: bench.py BATON_BIN FAKE_BIN [scenario ...]   (default: all scenarios)
Env: BENCH_QUICK=1 shortens the steady-state windows; BENCH_KEEP=1 keeps each run's directory
(with Baton's log in baton.log).
"""

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CLK = os.sysconf("SC_CLK_TCK")
QUICK = os.environ.get("BENCH_QUICK") == "1"
MARK = "BENCH_MARK"


def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except OSError:
        pass
    return out


def rss_mib(pid, key="VmRSS"):
    v = proc_status(pid).get(key, "0 kB").split()[0]
    return int(v) / 1024.0


def threads(pid):
    return int(proc_status(pid).get("Threads", "0"))


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / CLK


def cpu_split(pid):
    """(user, system) CPU seconds of the whole process."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) / CLK, int(rest[12]) / CLK


def marked_pids(mark):
    """Live (non-zombie) processes whose environment carries BENCH_MARK=mark."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in env.split(b"\0") and state not in ("Z", "X"):
            found.append(int(d))
    return found


class Run:
    """One fake GitHub + one baton daemon in a fresh directory."""

    def __init__(self, baton, fake, name, items, status, interval_ms, agent_extra="",
                 agent_mode="hang", env=None, max_turns=1, extra_yaml="", log_level="debug",
                 nofile=None):
        self.dir = tempfile.mkdtemp(prefix=f"baton-bench-{name}-")
        self.mark = f"{name}-{os.getpid()}-{time.time_ns()}"
        self.reqlog = os.path.join(self.dir, "requests.log")
        self.agentlog = os.path.join(self.dir, "agents.log")
        addr = os.path.join(self.dir, "addr")
        fenv = dict(os.environ, BENCH_ADDR_FILE=addr, BENCH_ITEMS=str(items),
                    BENCH_STATUS=status, BENCH_REQUEST_LOG=self.reqlog)
        self.fake = subprocess.Popen(
            [fake, "--ignored", "--exact", "tracker_github::bench_fake_github_server", "--nocapture"],
            env=fenv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not os.path.exists(addr):
            if time.time() > deadline or self.fake.poll() is not None:
                raise RuntimeError("fake GitHub did not start")
            time.sleep(0.02)
        endpoint = open(addr).read().strip()
        stub = os.path.join(HERE, "agent_stub.sh")
        wf = os.path.join(self.dir, "WORKFLOW.md")
        with open(wf, "w") as f:
            f.write(
                "---\ntracker:\n  kind: github_projects\n"
                f"  endpoint: {endpoint}\n  token: $BENCH_TOKEN\n  owner: acme\n  project_number: 7\n"
                "  active_states: [Todo, In Progress]\n  terminal_states: [Done]\n"
                "  page_size: 100\n  timeout_ms: 30000\n"
                f"workspace:\n  root: {self.dir}/ws\n"
                f"polling:\n  interval_ms: {interval_ms}\n"
                f"agent:\n  kind: claude_code\n  max_turns: {max_turns}\n{agent_extra}"
                f"claude_code:\n  command: \"'{stub}'\"\n{extra_yaml}"
                "---\nWork on {{ issue.identifier }}.\n")
        home = os.path.join(self.dir, "home")
        os.makedirs(home)
        benv = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "BENCH_TOKEN": "ghp_fakeTOKEN0123456789abcdefSECRET",
            "BENCH_AGENT_LOG": self.agentlog,
            "BENCH_AGENT_MODE": agent_mode,
            MARK: self.mark,
        }
        # BENCH_BATON_ENV="K=V K2=V2": extra environment for every baton run (e.g. malloc knobs).
        for kv in os.environ.get("BENCH_BATON_ENV", "").split():
            k, _, v = kv.partition("=")
            benv[k] = v
        benv.update(env or {})
        self.log_lines = []
        self.t_exec = time.time()
        # nofile=(soft, hard): Baton starts with that RLIMIT_NOFILE (it raises soft to hard).
        limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile)) if nofile else None
        self.baton = subprocess.Popen(
            [baton, "--port", "0", "--log-level", log_level, wf],
            env=benv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, preexec_fn=limit)
        self.pid = self.baton.pid
        threading.Thread(target=self._read_log, daemon=True).start()
        self.port = None

    def _read_log(self):
        for line in self.baton.stderr:
            self.log_lines.append((time.time(), line))

    def wait_log(self, needle, limit=60, after=0.0):
        deadline = time.time() + limit
        while time.time() < deadline:
            for t, line in list(self.log_lines):
                if t >= after and needle in line:
                    return t
            time.sleep(0.01)
        tail = "".join(l for _, l in self.log_lines[-20:])
        raise RuntimeError(f"no log line {needle!r} within {limit}s; baton log tail:\n{tail}")

    def api_state(self):
        return json.loads(self.get("/api/v1/state")[1])

    def get(self, path, timeout=10):
        """(status, body) of `GET path` on Baton's HTTP server."""
        if self.port is None:
            self.wait_log("http server listening addr=")
            line = next(l for _, l in self.log_lines if "http server listening addr=" in l)
            self.port = line.split("http server listening addr=")[1].split()[0].rsplit(":", 1)[1]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def requests(self):
        out = []
        try:
            with open(self.reqlog) as f:
                for line in f:
                    p = line.split()
                    if len(p) == 3:
                        out.append((int(p[0]) / 1000.0, p[1], int(p[2])))
        except OSError:
            pass
        return out

    def agent_events(self, kind):
        out = []
        try:
            with open(self.agentlog) as f:
                for line in f:
                    p = line.split()
                    if len(p) >= 3 and p[0] == kind:
                        out.append(int(p[1]) / 1e9)
        except OSError:
            pass
        return out

    def wait_agents(self, kind, n, limit):
        deadline = time.time() + limit
        while time.time() < deadline:
            got = self.agent_events(kind)
            if len(got) >= n:
                return got
            time.sleep(0.02)
        return self.agent_events(kind)

    def sigterm(self, limit=120):
        t0 = time.time()
        self.baton.send_signal(signal.SIGTERM)
        try:
            self.baton.wait(limit)
        except subprocess.TimeoutExpired:
            pass
        return time.time() - t0

    def close(self):
        if self.baton.poll() is None:
            self.baton.kill()
            self.baton.wait()
        for pid in marked_pids(self.mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.fake.kill()
        self.fake.wait()
        if os.environ.get("BENCH_KEEP") == "1":
            # Keep the run's directory (workflow, request and agent logs) and Baton's log.
            with open(os.path.join(self.dir, "baton.log"), "w") as f:
                f.writelines(l for _, l in self.log_lines)
            print(f"  (kept {self.dir})", flush=True)
            return
        shutil.rmtree(self.dir, ignore_errors=True)


def ticks_by_gap(reqs, gap_s):
    """Group requests into poll ticks: a new tick starts after `gap_s` without a request."""
    ticks = []
    last = None
    for t, op, cost in reqs:
        if op.startswith("Resolve"):
            continue
        if last is None or t - last > gap_s:
            ticks.append({"start": t, "requests": 0, "points": 0, "ops": []})
        last = t
        ticks[-1]["requests"] += 1
        ticks[-1]["points"] += cost
        ticks[-1]["ops"].append(op)
    return ticks


def split_ticks(reqs, pages_per_tick):
    ticks = []
    pages = 0
    for t, op, cost in reqs:
        if op.startswith("Resolve"):
            continue
        if op.startswith("ProjectItems"):
            if pages % pages_per_tick == 0:
                ticks.append({"start": t, "requests": 0, "points": 0, "ops": []})
            pages += 1
        if not ticks:
            continue
        ticks[-1]["requests"] += 1
        ticks[-1]["points"] += cost
        ticks[-1]["ops"].append(op)
    return ticks


RESULTS = []


def report(name, value, unit=""):
    RESULTS.append((name, value, unit))
    print(f"  {name}: {value}{(' ' + unit) if unit else ''}", flush=True)


def board(baton, fake, items, interval_ms, window_s, label, env=None):
    """A board with nothing to dispatch (every item In Review): RSS, CPU per tick, exec->idle."""
    r = Run(baton, fake, f"board{items}", items, "In Review", interval_ms, env=env)
    try:
        t_idle = r.wait_log("tracker_requests op=fetch_board", limit=120)
        time.sleep(0.2)  # the fake appends its request log every 20 ms
        first = [x for x in r.requests() if x[0] <= t_idle + 0.001]
        time.sleep(window_s)
        cpu = cpu_s(r.pid)
        reqs = r.requests()
        pages = max(1, (items + 99) // 100)
        ticks = split_ticks(reqs, pages)
        report(f"{label}: exec -> first tick done", f"{(t_idle - r.t_exec) * 1000:.0f}", "ms")
        report(f"{label}: requests until then", len(first))
        report(f"{label}: ticks in {window_s:.0f} s", len(ticks))
        report(f"{label}: CPU per tick (total CPU / ticks)", f"{cpu / max(1, len(ticks)):.3f}", "s")
        report(f"{label}: RSS", f"{rss_mib(r.pid):.1f}", "MiB")
        report(f"{label}: peak RSS (VmHWM)", f"{rss_mib(r.pid, 'VmHWM'):.1f}", "MiB")
        report(f"{label}: threads", threads(r.pid))
        full = [t for t in ticks if sum(op.startswith("ProjectItems") for op in t["ops"]) >= pages]
        if full:
            report(f"{label}: requests / points per tick", f"{full[-1]['requests']} / {full[-1]['points']}")
    finally:
        r.close()


def running100(baton, fake):
    """100 Todo issues, 100 slots, hanging stub agents: start-up, per-tick cost, SIGTERM."""
    r = Run(baton, fake, "run100", 100, "Todo", 2000,
            "  max_concurrent_agents: 100\n")
    try:
        starts = r.wait_agents("start", 100, limit=120)
        reqs = r.requests()
        first_read = next((t for t, op, _ in reqs if op.startswith("ProjectItems")), None)
        report("100 agents: started", len(starts))
        if starts and first_read:
            report("100 agents: exec -> all 100 agent processes started", f"{(max(starts) - r.t_exec) * 1000:.0f}", "ms")
            lat = sorted(s - first_read for s in starts)
            report("tick start -> agent spawn latency (first / median / last)",
                   f"{lat[0] * 1000:.0f} / {lat[len(lat) // 2] * 1000:.0f} / {lat[-1] * 1000:.0f}", "ms")
        time.sleep(4 if QUICK else 9)
        st = r.api_state()
        report("100 agents: running / retrying (failures)", f"{st['counts']['running']} / {st['counts']['retrying']}")
        ticks = ticks_by_gap(r.requests(), 0.5)
        steady = ticks[1:-1] if len(ticks) > 2 else ticks
        if steady:
            last = steady[-1]
            report("100 running: requests per tick", last["requests"], f"({' '.join(last['ops'])})")
            report("100 running: points per tick", last["points"])
        report("100 running: RSS", f"{rss_mib(r.pid):.1f}", "MiB")
        report("100 running: threads", threads(r.pid))
        children = len(marked_pids(r.mark)) - 1
        exit_s = r.sigterm()
        time.sleep(0.5)
        left = [p for p in marked_pids(r.mark) if p != r.pid]
        report("SIGTERM with 100 running: exit time", f"{exit_s * 1000:.0f}", "ms")
        report("SIGTERM with 100 running: exit status", r.baton.returncode)
        report("SIGTERM with 100 running: agent processes before / left after", f"{children} / {len(left)}")
    finally:
        r.close()


def agent_line(text_len, sid="bench"):
    text = ("lorem ipsum dolor sit amet " * (text_len // 27 + 1))[:text_len]
    return json.dumps({"type": "assistant", "message": {"id": "m", "role": "assistant",
                       "content": [{"type": "text", "text": text}],
                       "usage": {"input_tokens": 10, "output_tokens": 1}},
                       "session_id": sid}) + "\n"


def big_lines(baton, fake):
    """10 agents each print two 9.4 MB lines and keep their turn open."""
    d = tempfile.mkdtemp(prefix="baton-bench-big-")
    big = os.path.join(d, "big.jsonl")
    with open(big, "w") as f:
        line = agent_line(9_400_000)
        f.write(line)
        f.write(line)
    r = Run(baton, fake, "big", 10, "Todo", 5000, "  max_concurrent_agents: 10\n",
            agent_mode="big", env={"BENCH_BIG_FILE": big})
    try:
        printed = r.wait_agents("printed", 10, limit=120)
        report("big lines: agents that printed two 9.4 MB lines", len(printed))
        report("big lines: peak RSS (VmHWM)", f"{rss_mib(r.pid, 'VmHWM'):.1f}", "MiB")
        time.sleep(10)
        report("big lines: RSS 10 s after (turns still open)", f"{rss_mib(r.pid):.1f}", "MiB")
    finally:
        r.close()
        shutil.rmtree(d, ignore_errors=True)


def parse_throughput(baton, fake):
    """One agent prints ~200 MB of stream-json; Baton's CPU time over the bytes read."""
    d = tempfile.mkdtemp(prefix="baton-bench-flood-")
    flood = os.path.join(d, "flood.jsonl")
    total = 0
    target = 60_000_000 if QUICK else 200_000_000
    with open(flood, "w") as f:
        n = 0
        while total < target:
            line = agent_line(512 + (n * 977) % 6000, sid="bench-flood")
            f.write(line)
            total += len(line)
            n += 1
    r = Run(baton, fake, "flood", 1, "Todo", 600000, "  max_concurrent_agents: 1\n",
            agent_mode="flood", env={"BENCH_FLOOD_FILE": flood})
    try:
        r.wait_agents("start", 1, limit=60)
        c0 = cpu_s(r.pid)
        u0, s0 = cpu_split(r.pid)
        r.wait_agents("flooded", 1, limit=300)
        prev = -1.0
        while True:  # let Baton finish the lines still in the pipe
            time.sleep(0.3)
            c = cpu_s(r.pid)
            if c - prev < 0.02:
                break
            prev = c
        used = c - c0
        u1, s1 = cpu_split(r.pid)
        report("stream-json: bytes parsed", f"{total / 1e6:.0f}", "MB")
        report("stream-json: Baton CPU (user / system)", f"{used:.2f} ({u1 - u0:.2f} / {s1 - s0:.2f})", "s")
        report("stream-json: throughput", f"{total / 1e6 / max(used, 1e-9):.0f}", "MB per CPU-second")
    finally:
        r.close()
        shutil.rmtree(d, ignore_errors=True)


def stream_flood(baton, fake):
    """10 agents print valid stream-json lines as fast as they can for 60 s (issue 21, item 1):
    Baton's RSS during (sampled every 0.5 s) and 10 s after the floods ended. A run whose RSS
    passes BENCH_RSS_ABORT_MIB (default 2048) is stopped there, so a Baton without backpressure
    cannot take the machine down."""
    secs = 20 if QUICK else 60
    abort = float(os.environ.get("BENCH_RSS_ABORT_MIB", "2048"))
    r = Run(baton, fake, "stream", 10, "Todo", 5000, "  max_concurrent_agents: 10\n",
            agent_mode="stream", env={"BENCH_STREAM_SECS": str(secs)})
    try:
        started = r.wait_agents("start", 10, limit=120)
        report("stream flood: agents started", len(started))
        c0 = cpu_s(r.pid)
        peak, t0, aborted = 0.0, time.time(), False
        while len(r.agent_events("streamed")) < 10 and time.time() - t0 < secs + 30:
            peak = max(peak, rss_mib(r.pid))
            if peak > abort:
                aborted = True
                break
            time.sleep(0.5)
        if aborted:
            report(f"stream flood: RSS passed {abort:.0f} MiB after", f"{time.time() - t0:.1f}", "s (stopped)")
            return
        report(f"stream flood: max RSS during {secs} s (0.5 s samples)", f"{peak:.1f}", "MiB")
        report("stream flood: Baton CPU during the flood", f"{cpu_s(r.pid) - c0:.1f}", "s")
        time.sleep(10)
        report("stream flood: RSS 10 s after the floods ended", f"{rss_mib(r.pid):.1f}", "MiB")
        report("stream flood: peak RSS (VmHWM)", f"{rss_mib(r.pid, 'VmHWM'):.1f}", "MiB")
        st = r.api_state()
        t = st["agent_totals"]
        report("stream flood: turns / output tokens counted (10 / 10 expected)", f"{t['turns']} / {t['output_tokens']}")
    finally:
        r.close()


def main():
    baton, fake = sys.argv[1], sys.argv[2]
    wanted = sys.argv[3:] or ["idle", "b1000", "b10000", "run100", "big", "parse", "flood"]
    w = 10 if QUICK else 20
    print(f"machine: {os.cpu_count()} CPUs, {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, kernel {os.uname().release}")
    for s in wanted:
        print(f"== {s}", flush=True)
        if s == "idle":
            board(baton, fake, 100, 5000, 30 if not QUICK else 15, "100 items, 5 s polling")
        elif s == "b1000":
            board(baton, fake, 1000, 2000, w, "1,000 items")
        elif s == "b10000":
            board(baton, fake, 10000, 5000, w * 2, "10,000 items")
        elif s == "b10000-arena1":
            board(baton, fake, 10000, 5000, w * 2, "10,000 items, MALLOC_ARENA_MAX=1",
                  env={"MALLOC_ARENA_MAX": "1"})
        elif s == "run100":
            running100(baton, fake)
        elif s == "big":
            big_lines(baton, fake)
        elif s == "parse":
            parse_throughput(baton, fake)
        elif s == "flood":
            stream_flood(baton, fake)
        else:
            print(f"unknown scenario {s}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Issue 25 benchmarks ("1,000 agents on one Baton"), driven by scripts/bench/scale1000.sh and
scripts/bench/ssh400.sh. Nothing here is pass/fail: the figures are printed for
docs/performance.md, with the targets of issue 25 next to them.

Scenarios (BENCH_AGENTS agents, default 1,000, in BENCH_TURN_S-second turns, default 60, on a
board with one Todo item per agent at 5 s polling, agent.max_turns 20):
  scale          per-agent cgroups where Baton can manage a cgroup v2 subtree (the containment
                 Baton reports is printed; without a subtree it runs with process groups and says
                 so): time until all started, later turns' spawn latency ("turn starting" log line
                 to the process), Baton CPU per minute, GET /api/v1/state p50 and errors, RSS,
                 GitHub requests and points per hour (measured at the fake and projected by
                 Baton), between-turn refresh and retry fetch requests per second, SIGTERM to
                 exit and what is left
  scale-pgroup   the same with BATON_CONTAINMENT=process_group
  nofile-raise   soft RLIMIT_NOFILE 1,024, hard 65,536 (or the hard limit this machine allows):
                 Baton raises the soft limit, every agent runs
  nofile-tight   soft = hard = BENCH_NOFILE_TIGHT (1,024): Baton runs as many agents as fit; the
                 API, /livez and state writes keep working; no failed attempt
  ssh400         4 loopback sshd with stock MaxSessions/MaxStartups, BENCH_PER_HOST agents each
                 (default 100): all started, hosts marked down, later-turn spawn latency

Usage: scale.py BATON_BIN FAKE_BIN scenario [...]
Env: BENCH_AGENTS, BENCH_TURN_S, BENCH_WINDOW_S (steady-state window, default 3 turns),
     BENCH_NOFILE_TIGHT, BENCH_PER_HOST, BENCH_SSHD (default /usr/sbin/sshd).
"""

import bisect
import datetime
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import bench
from bench import Run, cpu_s, marked_pids, report, rss_mib, threads

AGENTS = int(os.environ.get("BENCH_AGENTS", "1000"))
TURN_S = int(os.environ.get("BENCH_TURN_S", "60"))
WINDOW_S = int(os.environ.get("BENCH_WINDOW_S", str(3 * TURN_S)))
PER_HOST = int(os.environ.get("BENCH_PER_HOST", "100"))
# Baton's state directory inside the run's directory (Run's `extra_yaml`).
STATE_DIR = "state:\n  dir: state\n"
TURN_RE = re.compile(r"turn starting .*issue_identifier=(\S+) turn=(\d+)")
DONE_RE = re.compile(r"turn completed .*issue_identifier=(\S+) .*turn=(\d+)")


def log_time(line):
    """The epoch seconds of a timestamped Baton log line (`2026-01-01T00:00:00.123Z INFO …`)."""
    try:
        t = datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        return None
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def starts_by_key(run):
    """Workspace key -> sorted agent process start times (the stub's log)."""
    out = {}
    try:
        with open(run.agentlog) as f:
            for line in f:
                p = line.split()
                if len(p) == 4 and p[0] == "start":
                    out.setdefault(p[3], []).append(int(p[1]) / 1e9)
    except OSError:
        pass
    for v in out.values():
        v.sort()
    return out


def turn_bursts(run, since, until, within=0.05):
    """For each "turn starting" line of a turn >= 2 in [since, until]: how many such lines were
    logged within `within` s of it (turns whose processes start together)."""
    times = []
    for _, line in list(run.log_lines):
        m = TURN_RE.search(line)
        t = log_time(line) if m and int(m.group(2)) >= 2 else None
        if t is not None and since <= t <= until:
            times.append(t)
    times.sort()
    out, lo, hi = [], 0, 0
    for t in times:
        while times[lo] < t - within:
            lo += 1
        while hi < len(times) and times[hi] <= t + within:
            hi += 1
        out.append(hi - lo)
    return out


def later_turn_latencies(run, since, until):
    """Seconds from each "turn starting" line of a turn >= 2 (logged in [since, until]) to the
    agent process of that turn; and how many such turns had no process yet."""
    starts = starts_by_key(run)
    used = {}
    lat, missing = [], 0
    for _, line in list(run.log_lines):
        m = TURN_RE.search(line)
        if not m or int(m.group(2)) < 2:
            continue
        t = log_time(line)
        if t is None or not since <= t <= until:
            continue
        key = m.group(1)
        cands = starts.get(key, [])
        i = used.get(key, 0)
        # Baton's timestamp is cut to the millisecond; the stub's is in nanoseconds.
        while i < len(cands) and cands[i] < t - 0.001:
            i += 1
        if i < len(cands):
            lat.append(max(0.0, cands[i] - t))
            used[key] = i + 1
        else:
            missing += 1
    return lat, missing


def between_turns(run, since, until):
    """Seconds from a turn's end ("turn completed") to the next turn's "turn starting" line of
    the same run (the between-turn refresh), for turns starting in [since, until]."""
    done, gaps = {}, []
    for _, line in list(run.log_lines):
        t = log_time(line)
        m = DONE_RE.search(line)
        if m and t is not None:
            done[(m.group(1), int(m.group(2)))] = t
            continue
        m = TURN_RE.search(line)
        if m and t is not None and since <= t <= until:
            prev = done.get((m.group(1), int(m.group(2)) - 1))
            if prev is not None:
                gaps.append(t - prev)
    return gaps


def pct(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def metric(run, name, labels=""):
    """One sample of /metrics (0 when absent)."""
    status, body = run.get("/metrics")
    if status != 200:
        return None
    want = f"{name}{labels} " if labels else f"{name} "
    for line in body.splitlines():
        if line.startswith(want):
            return float(line.split()[-1])
    return 0.0


def containment(run):
    t = run.wait_log("process containment", limit=120)
    line = next(l for _, l in run.log_lines if "process containment" in l)
    return line.split("process containment", 1)[1].strip()


def cgroups_left(containment_line, pid):
    m = re.search(r"cgroup=(\S+)", containment_line)
    if not m:
        return 0
    try:
        return sum(1 for n in os.listdir(m.group(1)) if n.startswith(f"baton-{pid}-"))
    except OSError:
        return 0


def sample_state(run, samples, spacing):
    """GET /api/v1/state `samples` times, `spacing` s apart: (latencies of the 200s, errors)."""
    lat, errors = [], []
    for _ in range(samples):
        t0 = time.perf_counter()
        try:
            status, body = run.get("/api/v1/state", timeout=10)
        except OSError as e:
            status, body = None, str(e)
        took = time.perf_counter() - t0
        if status == 200:
            lat.append(took)
        else:
            errors.append(f"{status} {body[:60]}")
        time.sleep(max(0.0, spacing - took))
    return lat, errors


def github_in(run, t0, t1):
    """(requests, points, {operation prefix: requests}) the fake served in [t0, t1]."""
    reqs = [x for x in run.requests() if t0 <= x[0] <= t1]
    ops = {}
    for _, op, _ in reqs:
        key = re.sub(r"\d+$", "", op)
        ops[key] = ops.get(key, 0) + 1
    return len(reqs), sum(c for _, _, c in reqs), ops


def scale(baton, fake, label, n, env=None, nofile=None, sigterm=True):
    env = dict(env or {}, BENCH_TURN_S=str(TURN_S))
    r = Run(baton, fake, "scale", n, "Todo", 5000,
            f"  max_concurrent_agents: {n}\n", agent_mode="turns", env=env, max_turns=20,
            log_level="info", nofile=nofile, extra_yaml=STATE_DIR)
    state_json = os.path.join(r.dir, "state", "state.json")
    try:
        cont = containment(r)
        report(f"{label}: containment", cont)
        nofile_line = next((l for _, l in r.log_lines if "event=nofile_limit" in l), "")
        if nofile_line:
            report(f"{label}: descriptors", nofile_line.split("event=nofile_limit", 1)[1].strip())
        capped = next((l for _, l in r.log_lines if "agents_capped_by_nofile" in l), "")
        if capped:
            report(f"{label}: capped", capped.split("event=", 1)[1].strip())
        m = re.search(r"allowed=(\d+)", capped)
        want = min(n, int(m.group(1))) if m else n
        all_started(r, label, n, want, limit=max(120, n // 5), target="15 s at 1,000")
        t0 = time.time()
        c0 = cpu_s(r.pid)
        lat, errors = sample_state(r, 20, WINDOW_S / 20)
        t1 = time.time()
        used = cpu_s(r.pid) - c0
        st = r.api_state()
        report(f"{label}: running / retrying / blocked",
               f"{st['counts']['running']} / {st['counts']['retrying']} / {st['counts']['blocked']}")
        report(f"{label}: Baton CPU (target <= 6 s per minute)",
               f"{used / ((t1 - t0) / 60):.1f}", "s per minute")
        report(f"{label}: GET /api/v1/state p50 / max (target p50 <= 100 ms, 0 errors)",
               f"{pct(lat, 0.5) * 1000:.0f} / {max(lat or [0]) * 1000:.0f} ms, "
               f"{len(errors)} errors of 20 {errors[:3]}")
        report(f"{label}: RSS / peak (target <= 100 MB)",
               f"{rss_mib(r.pid):.0f} / {rss_mib(r.pid, 'VmHWM'):.0f}", "MiB")
        report(f"{label}: threads", threads(r.pid))
        report(f"{label}: RSS by mapping", memory_breakdown(r.pid))
        spawn, missing = later_turn_latencies(r, t0 - TURN_S, t1)
        report(f"{label}: later turns' spawn median / p99 / max (target <= 50 ms / - / 1 s)",
               f"{pct(spawn, 0.5) * 1000:.0f} / {pct(spawn, 0.99) * 1000:.0f} / "
               f"{max(spawn or [float('nan')]) * 1000:.0f} ms over {len(spawn)} turns"
               f" ({missing} not started yet; median {pct(turn_bursts(r, t0 - TURN_S, t1), 0.5)}"
               " turns starting within 50 ms of each other)")
        gaps = between_turns(r, t0 - TURN_S, t1)
        report(f"{label}: turn end -> next turn starting (the between-turn refresh) median / max",
               f"{pct(gaps, 0.5) * 1000:.0f} / {max(gaps or [float('nan')]) * 1000:.0f} ms over {len(gaps)} turns")
        github(r, label, t0, t1, st)
        status, _ = r.get("/livez")
        age = time.time() - os.stat(state_json).st_mtime if os.path.exists(state_json) else None
        report(f"{label}: /livez; state.json last written", f"{status}; "
               + (f"{age:.1f} s ago" if age is not None else "never"))
        failed = metric(r, "baton_worker_exits_total", '{outcome="failed"}')
        exhausted = metric(r, "baton_worker_exits_total", '{outcome="resource_exhausted"}')
        report(f"{label}: worker exits failed / resource_exhausted", f"{failed:.0f} / {exhausted:.0f}")
        if sigterm:
            before = len(marked_pids(r.mark)) - 1
            took = r.sigterm(limit=120)
            time.sleep(0.5)
            left = [p for p in marked_pids(r.mark) if p != r.pid]
            report(f"{label}: SIGTERM -> exit (target <= 5 s, 0 left)",
                   f"{took:.1f} s, exit {r.baton.returncode}, processes {before} before / "
                   f"{len(left)} left, cgroups left {cgroups_left(cont, r.pid)}")
    finally:
        r.close()


def memory_breakdown(pid):
    """RSS split into thread stacks (the mapping holding each thread's stack pointer, from
    /proc/<pid>/task/*/syscall; by thread name without digits), other anonymous memory (heap
    and malloc arenas) and files."""
    sps = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                w = f.read().split()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = re.sub(r"\d+", "", f.read().strip())
            if len(w) >= 8:
                sps.append((int(w[-2], 16), name))
        except OSError:
            pass
    sps.sort()
    kib = {"stacks": 0, "anon": 0, "file": 0}
    by_name = {}
    with open(f"/proc/{pid}/smaps") as f:
        lo = hi = 0
        anon = False
        for line in f:
            w = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                lo, hi = (int(x, 16) for x in w[0].split("-"))
                anon = len(w) < 6 or w[5].startswith("[")
            elif w[0] == "Rss:":
                i = bisect.bisect_left(sps, (lo, ""))
                if i < len(sps) and sps[i][0] < hi:
                    kib["stacks"] += int(w[1])
                    n, total = by_name.get(sps[i][1], (0, 0))
                    by_name[sps[i][1]] = (n + 1, total + int(w[1]))
                else:
                    kib["anon" if anon else "file"] += int(w[1])
    n = threads(pid)
    kinds = ", ".join(f"{k or '?'} {c} x {t / c:.0f} KiB" for k, (c, t) in
                      sorted(by_name.items(), key=lambda kv: -kv[1][1])[:4])
    return (f"thread stacks {kib['stacks'] / 1024:.1f} MiB ({kib['stacks'] / max(n, 1):.0f} KiB "
            f"per thread; {kinds}), heap and other anonymous {kib['anon'] / 1024:.1f} MiB, "
            f"files {kib['file'] / 1024:.1f} MiB")


def all_started(r, label, n, want, limit, target):
    """Wait for `want` of the `n` agents' first processes; report when they had all started."""
    deadline = time.time() + limit
    while True:
        firsts = sorted(v[0] for v in starts_by_key(r).values())
        if len(firsts) >= want or time.time() > deadline:
            break
        time.sleep(0.1)
    report(f"{label}: agents started", f"{len(firsts)} of {n}" + (f" (room for {want})" if want < n else ""))
    if len(firsts) >= want:
        report(f"{label}: exec -> all started (target <= {target})",
               f"{firsts[want - 1] - r.t_exec:.1f}", "s")


def github(r, label, t0, t1, st):
    hours = (t1 - t0) / 3600
    n, points, ops = github_in(r, t0, t1)
    tr = st.get("tracker", {})
    report(f"{label}: GitHub measured in {t1 - t0:.0f} s", f"{n / hours:.0f} requests/h, "
           f"{points / hours:.0f} points/h (target <= 2,500) {ops}")
    report(f"{label}: GitHub projected by Baton", f"{tr.get('points_projected_per_hour', 'n/a')} "
           f"points/h of {tr.get('points_target_per_hour', 'n/a')}, poll every "
           f"{tr.get('poll_interval_ms', 'n/a')} ms")
    per_s = lambda k: ops.get(k, 0) / (t1 - t0)
    report(f"{label}: between-turn refresh / retry fetch requests (target <= 1 per second)",
           f"{per_s('RefreshRunning'):.2f} / {per_s('RefreshIssues'):.2f}", "per second")


def hard_limit():
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


# --- SSH ----------------------------------------------------------------------------------------


def keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "baton-bench", "-f", path],
                   check=True, stdin=subprocess.DEVNULL)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Hosts:
    """`count` private sshd on 127.0.0.1 with stock MaxSessions (10) and MaxStartups (10:30:100),
    and an ssh_config naming them `h1`…, given to Baton through a wrapper `ssh` on PATH."""

    def __init__(self, count):
        self.dir = tempfile.mkdtemp(prefix="baton-bench-sshd-")
        # The remote agents' environment comes from sshd (SetEnv), not from Baton.
        self.agentlog = os.path.join(self.dir, "agents.log")
        self.mark = f"ssh-{os.getpid()}-{time.time_ns()}"
        # HOME too: bash run by sshd reads ~/.bashrc, and this machine's user's may be slow.
        home = os.path.join(self.dir, "home")
        os.makedirs(home)
        setenv = (f"SetEnv BENCH_AGENT_LOG={self.agentlog} BENCH_AGENT_MODE=turns "
                  f"BENCH_TURN_S={TURN_S} {bench.MARK}={self.mark} HOME={home}\n")
        self.key = os.path.join(self.dir, "id_ed25519")
        keygen(self.key)
        os.makedirs(os.path.join(self.dir, "bin"))
        cfg = os.path.join(self.dir, "ssh_config")
        kh = os.path.join(self.dir, "known_hosts")
        user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
        os.makedirs("/run/sshd", exist_ok=True)
        self.procs, self.names, entries, known = [], [], [], []
        sshd = os.environ.get("BENCH_SSHD", "/usr/sbin/sshd")
        for i in range(1, count + 1):
            d = os.path.join(self.dir, f"h{i}")
            os.makedirs(d)
            hk = os.path.join(d, "host_ed25519")
            keygen(hk)
            shutil.copy(self.key + ".pub", os.path.join(d, "authorized_keys"))
            port = free_port()
            with open(os.path.join(d, "sshd_config"), "w") as f:
                f.write(f"MaxSessions 10\nMaxStartups 10:30:100\nPort {port}\nListenAddress 127.0.0.1\n"
                        f"HostKey {hk}\nPidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n"
                        "StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n"
                        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                        f"PubkeyAuthentication yes\nLogLevel ERROR\n{setenv}")
            log = open(os.path.join(d, "sshd.log"), "w")
            self.procs.append(subprocess.Popen([sshd, "-D", "-e", "-f", os.path.join(d, "sshd_config")],
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=log))
            entries.append(f"Host h{i}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n"
                           f"  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
                           f"  UserKnownHostsFile {kh}\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n")
            known.append(f"[127.0.0.1]:{port} {open(hk + '.pub').read().strip()}\n")
            self.names.append(f"h{i}")
            deadline = time.time() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.time() > deadline:
                        raise RuntimeError(f"sshd h{i} did not listen: {open(log.name).read()}")
                    time.sleep(0.02)
        with open(cfg, "w") as f:
            f.writelines(entries)
        with open(kh, "w") as f:
            f.writelines(known)
        wrapper = os.path.join(self.dir, "bin", "ssh")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nexec /usr/bin/ssh -F '{cfg}' \"$@\"\n")
        os.chmod(wrapper, 0o755)
        self.path = f"{os.path.join(self.dir, 'bin')}:{os.environ.get('PATH', '/usr/bin:/bin')}"

    def close(self):
        for p in self.procs:
            # The listener and its session processes (children of the listener).
            for child in bench_children(p.pid):
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
            p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def bench_children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except OSError:
                pass
    return out


def ssh400(baton, fake, hosts_n=4):
    n = hosts_n * PER_HOST
    label = f"ssh {hosts_n} x {PER_HOST}"
    hosts = Hosts(hosts_n)
    names = ", ".join(hosts.names)
    r = None
    try:
        r = Run(baton, fake, "ssh", n, "Todo", 5000,
                f"  max_concurrent_agents: {n}\n", agent_mode="turns", max_turns=20,
                log_level=os.environ.get("BENCH_LOG_LEVEL", "info"),
                env={"PATH": hosts.path, "BENCH_TURN_S": str(TURN_S)},
                extra_yaml=f"worker:\n  ssh_hosts: [{names}]\n"
                           f"  max_concurrent_agents_per_host: {PER_HOST}\n")
        r.agentlog = hosts.agentlog
        all_started(r, label, n, n, limit=max(120, n // 2), target="30 s at 4 x 100")
        t0 = time.time()
        lat, errors = sample_state(r, 10, WINDOW_S / 10)
        t1 = time.time()
        down = [l for _, l in r.log_lines if "host marked down" in l]
        report(f"{label}: hosts marked down (target 0)", f"{len(down)} {[d.split('host=')[1].split()[0] for d in down][:8]}")
        st = r.api_state()
        report(f"{label}: running / retrying", f"{st['counts']['running']} / {st['counts']['retrying']}")
        report(f"{label}: GET /api/v1/state p50, errors", f"{pct(lat, 0.5) * 1000:.0f} ms, {len(errors)} of 10")
        spawn, missing = later_turn_latencies(r, t0 - TURN_S, t1)
        report(f"{label}: later turns' spawn median / max (target median <= 200 ms)",
               f"{pct(spawn, 0.5) * 1000:.0f} / {max(spawn or [float('nan')]) * 1000:.0f} ms over "
               f"{len(spawn)} turns ({missing} not started yet)")
        before = len(marked_pids(hosts.mark))
        took = r.sigterm(limit=120)
        time.sleep(1)
        left = marked_pids(hosts.mark) + [p for p in marked_pids(r.mark) if p != r.pid]
        report(f"{label}: SIGTERM -> exit", f"{took:.1f} s, exit {r.baton.returncode}, "
               f"{before} remote agent processes before / {len(left)} processes left")
    finally:
        if r:
            r.close()
        hosts.close()


def main():
    baton, fake = sys.argv[1], sys.argv[2]
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, kernel {os.uname().release}; "
          f"{AGENTS} agents, {TURN_S} s turns, {WINDOW_S} s window", flush=True)
    for s in sys.argv[3:]:
        print(f"== {s}", flush=True)
        if s == "scale":
            scale(baton, fake, f"{AGENTS} agents", AGENTS)
        elif s == "scale-pgroup":
            scale(baton, fake, f"{AGENTS} agents, process groups", AGENTS,
                  env={"BATON_CONTAINMENT": "process_group"})
        elif s == "nofile-raise":
            hard = min(65536, hard_limit())
            scale(baton, fake, f"nofile 1024/{hard}", AGENTS, nofile=(1024, hard))
        elif s == "nofile-tight":
            lim = int(os.environ.get("BENCH_NOFILE_TIGHT", "1024"))
            scale(baton, fake, f"nofile {lim}/{lim}", AGENTS, nofile=(lim, lim))
        elif s == "ssh400":
            ssh400(baton, fake)
        else:
            print(f"unknown scenario {s}")


if __name__ == "__main__":
    main()

//! The `baton` binary with SSH worker hosts (`worker.ssh_hosts`) against real private OpenSSH
//! servers on 127.0.0.1 (tests/it/support/sshd.rs) and the fake GitHub. The servers run on this
//! machine, so "remote" processes are visible here; each server's sessions carry
//! `BATON_TEST_HOST=<alias>` (sshd `SetEnv`) so a test can tell which host ran what. Baton gets
//! the test `ssh_config` through a wrapper `ssh` first on `PATH`. Needs `BATON_SSHD`.

use crate::support;

use crate::support::daemon_proc::{logged_runs, DaemonProc};
use crate::support::fake_responses::FakeResponses;
use crate::support::real_cli::{
    assert_claude_two_turns, claude_env, claude_two_turns, codex_env, slow_poll, CLAUDE_KEYS,
};
use crate::support::sshd;
use crate::support::tool;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::procs::wait_none_matching;
use sshd::Lab;
use support::fake_github::{BoardFixture, FakeGithub, IssueFixture, FAKE_TOKEN};

/// A fake Claude-compatible agent: logs where it ran and its arguments, then one successful
/// stream-json turn, or (E2E_MODE=hang) hangs with a background grandchild.
const FAKE_AGENT: &str = r#"#!/usr/bin/env bash
printf 'run host=%s pgid=%s cwd=%s\n' "$BATON_TEST_HOST" "$(ps -o pgid= $$ | tr -d ' ')" "$PWD" >> "$E2E_LOG"
for a in "$@"; do printf 'arg %s\n' "$a" >> "$E2E_LOG.args"; done
echo '{"type":"system","subtype":"init","session_id":"ssh-session-1","model":"fake","tools":[]}'
if [ "${E2E_MODE:-ok}" != ok ]; then
  sleep "$E2E_MODE" &
  wait
  exit 0
fi
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"ssh-session-1","total_cost_usd":0.01,"num_turns":1,"usage":{"input_tokens":10,"output_tokens":1}}'
"#;

const HOSTILE_TITLE: &str = "Fix $(touch /tmp/baton-ssh-never) `id` it's \"x\"\nnext line";

fn board(n: u64) -> BoardFixture {
    let mut b = BoardFixture::empty("acme", 7);
    for i in 1..=n {
        let title = if i == 1 {
            HOSTILE_TITLE.to_string()
        } else {
            format!("issue {i}")
        };
        b.push_issue(IssueFixture::new("acme/api", i, &title), Some("Todo"));
    }
    b
}

/// Write the agent script, the workflow and return the workflow path.
fn setup(lab: &Lab, github: &FakeGithub, hosts: &[&str], extra: &str) -> PathBuf {
    let dir = &lab.tmp.0;
    let agent = dir.join("fake-claude");
    std::fs::write(&agent, FAKE_AGENT).unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hosts: Vec<String> = hosts.iter().map(|h| format!("'{h}'")).collect();
    let wf = dir.join("WORKFLOW.md");
    let text = format!(
        "---\ntracker:\n  kind: github_projects\n  endpoint: {}\n  token: $BATON_E2E_TOKEN\n  owner: acme\n  project_number: 7\n  active_states: [Todo, In Progress]\n  terminal_states: [Done]\n  timeout_ms: 5000\npolling:\n  interval_ms: 300\nworkspace:\n  root: {}\nhooks:\n  timeout_ms: 10000\n  after_create: |\n    echo \"created on $BATON_TEST_HOST\" > .baton-created\n  before_remove: |\n    echo \"removed $BATON_ISSUE_IDENTIFIER on $BATON_TEST_HOST\" >> {}\nagent:\n  kind: claude_code\n  max_turns: 1\n  max_runs_per_issue: 50\nclaude_code:\n  command: \"'{}'\"\nworker:\n  ssh_hosts: [{}]\n{extra}---\nWork on {{{{ issue.identifier }}}}: {{{{ issue.title }}}}\n",
        github.endpoint(),
        dir.join("ws").display(),
        dir.join("removed.log").display(),
        agent.display(),
        hosts.join(", "),
    );
    std::fs::write(&wf, text).unwrap();
    wf
}

/// A lab (see [`lab_env`]), a board of `issues` issues, and a workflow running on `hosts` with
/// `worker_keys` under `worker:`.
fn ssh_setup(
    tag: &str,
    servers: usize,
    mode: &str,
    issues: u64,
    hosts: &[&str],
    worker_keys: &str,
) -> (Lab, FakeGithub, PathBuf) {
    let lab = lab_env(tag, servers, mode);
    let github = FakeGithub::start(board(issues));
    let wf = setup(&lab, &github, hosts, worker_keys);
    (lab, github, wf)
}

fn lab_env(tag: &str, n: usize, mode: &str) -> Lab {
    let tmp_log = format!("/tmp/bs-{}-{tag}-agent.log", std::process::id());
    let _ = std::fs::remove_file(&tmp_log);
    let _ = std::fs::remove_file(format!("{tmp_log}.args"));
    let mode = match mode {
        "hang" => hang_marker(tag),
        m => m.to_string(),
    };
    Lab::start(tag, n, &[("E2E_LOG", &tmp_log), ("E2E_MODE", &mode)])
}

/// `sleep <this>` is the hung agent's grandchild: unique per test process and tag.
fn hang_marker(tag: &str) -> String {
    let n: u32 = tag.bytes().map(u32::from).sum();
    format!("300.{}{n}", std::process::id())
}

fn agent_log(tag: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/bs-{}-{tag}-agent.log", std::process::id()))
}

/// Start `baton` for `wf` with the lab's `ssh` wrapper first on `PATH`.
fn start_baton(lab: &Lab, wf: &Path) -> DaemonProc {
    let envs = [
        ("PATH", lab.client.path_env()),
        ("BATON_E2E_TOKEN", FAKE_TOKEN.to_string()),
    ];
    DaemonProc::start(wf, &lab.tmp.0, &envs)
}

#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn dispatch_over_ssh_with_hostile_title_and_cleanup_on_the_owning_host() {
    let tag = "e2e";
    let (lab, github, wf) = ssh_setup(tag, 2, "ok", 1, &["h2", "h1"], "");
    let d = start_baton(&lab, &wf);
    let log = agent_log(tag);
    let ws = lab.tmp.join("ws").join("acme__api-1");
    // Dispatched to the first configured host (least loaded, config order), run in the
    // workspace there; after_create ran there too.
    let first = d.wait("a remote agent run", Duration::from_secs(30), || {
        logged_runs(&log).into_iter().next()
    });
    assert!(first.contains("host=h2"), "{first}");
    assert!(first.contains(&format!("cwd={}", ws.display())), "{first}");
    assert_eq!(
        std::fs::read_to_string(ws.join(".baton-created")).unwrap(),
        "created on h2\n"
    );
    // The prompt (with the hostile title) arrived as one argument, byte for byte.
    let args = std::fs::read_to_string(format!("{}.args", log.display())).unwrap();
    assert!(args.contains(HOSTILE_TITLE), "{args}");
    // Continuations stay on the host that has the workspace.
    d.wait("a continuation run", Duration::from_secs(30), || {
        (logged_runs(&log).len() >= 3).then_some(())
    });
    assert!(
        logged_runs(&log).iter().all(|r| r.contains("host=h2")),
        "{:?}",
        logged_runs(&log)
    );
    let state = d.state();
    assert_eq!(state["hosts"][0]["host"], "h2", "{state}");
    assert_eq!(state["hosts"][1]["up"], true, "{state}");
    // Terminal: before_remove and the removal run on h2, the owner.
    github.set_status("acme/api#1", Some("Done"));
    d.wait("terminal cleanup", Duration::from_secs(30), || {
        (!ws.exists()).then_some(())
    });
    let removed = std::fs::read_to_string(lab.tmp.join("removed.log")).unwrap_or_default();
    assert_eq!(removed, "removed acme__api-1 on h2\n");
    assert!(d.log().contains("host=h2"), "logs name the host");
    assert_eq!(d.terminate(Duration::from_secs(30)).code(), Some(0));
    assert!(!Path::new("/tmp/baton-ssh-never").exists());
}

#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn per_host_cap_with_two_hosts_and_sigterm_leaves_no_remote_process() {
    let tag = "cap";
    let (lab, _github, wf) = ssh_setup(
        tag,
        2,
        "hang",
        5,
        &["h1", "h2"],
        "  max_concurrent_agents_per_host: 2\n",
    );
    let d = start_baton(&lab, &wf);
    let log = agent_log(tag);
    d.wait("four remote agents", Duration::from_secs(60), || {
        (logged_runs(&log).len() >= 4).then_some(())
    });
    let state = d.wait("state with 4 running", Duration::from_secs(10), || {
        let s = d.state();
        (s["counts"]["running"] == 4).then_some(s)
    });
    assert_eq!(state["hosts"][0]["running"], 2, "{state}");
    assert_eq!(state["hosts"][1]["running"], 2, "{state}");
    assert_eq!(state["hosts"][0]["cap"], 2, "{state}");
    let hosts: Vec<&str> = state["running"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.iter().filter(|h| **h == "h1").count(), 2, "{state}");
    // The fifth waits: every host is full (never local).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(logged_runs(&log).len(), 4, "{:?}", logged_runs(&log));
    assert_eq!(d.state()["counts"]["running"], 4);
    assert!(d.terminate(Duration::from_secs(60)).success());
    let left = wait_none_matching(
        &format!("sleep {}", hang_marker(tag)),
        Duration::from_secs(10),
    );
    assert!(
        left.is_empty(),
        "remote processes left: {left:?}\n{}",
        ps(&left)
    );
}

fn ps(pids: &[i32]) -> String {
    let mut out = String::new();
    for p in pids {
        let o = Command::new("ps")
            .args(["-o", "pid,ppid,pgid,sid,stat,args", "-p", &p.to_string()])
            .output()
            .unwrap();
        out.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    let o = Command::new("sh").arg("-c").arg("ps -eo pid,ppid,pgid,sid,stat,args | grep -E 'baton|sshd|sleep' | grep -v grep | cut -c1-160").output().unwrap();
    out.push_str(&String::from_utf8_lossy(&o.stdout));
    out
}

#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn killing_sshd_mid_run_marks_the_host_down_and_fails_the_run_as_a_host_failure() {
    let tag = "kill";
    let (mut lab, _github, wf) = ssh_setup(tag, 1, "hang", 1, &["h1"], "");
    let d = start_baton(&lab, &wf);
    let log = agent_log(tag);
    d.wait("the remote agent", Duration::from_secs(30), || {
        (!logged_runs(&log).is_empty()).then_some(())
    });
    lab.servers[0].kill_hard();
    let state = d.wait("the host marked down", Duration::from_secs(40), || {
        let s = d.state();
        (s["hosts"][0]["up"] == false).then_some(s)
    });
    assert!(
        state["hosts"][0]["error"]
            .as_str()
            .unwrap()
            .contains("host_unavailable"),
        "{state}"
    );
    let retry = d.wait("a failure retry", Duration::from_secs(20), || {
        let s = d.state();
        s["retrying"].as_array().and_then(|r| r.first().cloned())
    });
    assert!(
        retry["error"]
            .as_str()
            .unwrap_or("")
            .contains("host_unavailable"),
        "{retry}"
    );
    let left = wait_none_matching(
        &format!("sleep {}", hang_marker(tag)),
        Duration::from_secs(10),
    );
    assert!(
        left.is_empty(),
        "remote processes left: {left:?}\n{}",
        ps(&left)
    );
    assert!(d.log().contains("host marked down host=h1"));
    assert!(d.terminate(Duration::from_secs(30)).success());
}

#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn baton_check_probes_every_host() {
    let lab = lab_env("check", 1, "ok");
    lab.client.add_host("dead", sshd::free_port(), None);
    let github = FakeGithub::start(board(1));
    let wf = setup(&lab, &github, &["h1", "dead"], "");
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("check")
        .arg(&wf)
        .env_remove("GITHUB_TOKEN")
        .env("HOME", &lab.tmp.0)
        .env("PATH", lab.client.path_env())
        .env("BATON_E2E_TOKEN", FAKE_TOKEN)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let h1 = text.lines().find(|l| l.contains("host h1")).expect(&text);
    assert!(h1.starts_with("ok"), "{text}");
    assert!(h1.contains("writable"), "{text}");
    let dead = text.lines().find(|l| l.contains("host dead")).expect(&text);
    assert!(dead.starts_with("FAIL"), "{text}");
    assert!(dead.contains("host_unavailable"), "{text}");
}

#[test]
#[ignore = "needs OpenSSH's sshd and the real claude CLI (BATON_SSHD, BATON_CLAUDE_BIN, .ci/setup-ssh.sh, .ci/setup-claude.sh)"]
fn real_claude_over_ssh_two_turns_on_one_session() {
    let claude = tool::required("BATON_CLAUDE_BIN", ".ci/setup-claude.sh");
    let github = Arc::new(FakeGithub::start(board(1)));
    let api = claude_two_turns(&github, "acme/api#1", "hello over ssh\n");
    // The remote session's environment is the remote host's business: here sshd's SetEnv gives
    // the CLI its API endpoint and a private HOME.
    let home = format!("/tmp/bs-{}-claude-home", std::process::id());
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let mut remote_env = vec![("HOME", home.clone())];
    remote_env.extend(claude_env(&api.base_url));
    let remote_env: Vec<(&str, &str)> = remote_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let lab = Lab::start("claude", 1, &remote_env);
    let wf = setup(&lab, &github, &["h1"], "");
    let text = std::fs::read_to_string(&wf).unwrap();
    let agent = lab.tmp.join("fake-claude");
    let text = text
        .replace(
            &format!("command: \"'{}'\"\n", agent.display()),
            &format!("command: \"'{}'\"\n{CLAUDE_KEYS}", claude.display()),
        )
        .replace("max_turns: 1\n", "max_turns: 5\n");
    std::fs::write(&wf, text).unwrap();
    slow_poll(&wf);
    let d = start_baton(&lab, &wf);
    let ws = lab.tmp.join("ws").join("acme__api-1");
    assert_claude_two_turns(&d, &api, &ws, "hello over ssh\n");
    assert_eq!(
        std::fs::read_to_string(ws.join(".baton-created")).unwrap(),
        "created on h1\n"
    );
    assert!(d.log().contains("host=h1"));
    assert_eq!(d.terminate(Duration::from_secs(30)).code(), Some(0));
    let _ = std::fs::remove_dir_all(&home);
}

/// Codex on an SSH worker host, through the daemon: the config with `agent.kind: codex` and
/// `worker.ssh_hosts` passes preflight, and two turns run on one thread there (the JSON-RPC over
/// the connection's stdin); the fake model's hook moves the issue out of the active states when
/// a request carries two prompts.
#[cfg(feature = "codex")]
#[test]
#[ignore = "needs OpenSSH's sshd and the real codex CLI (BATON_SSHD, BATON_CODEX_BIN, .ci/setup-ssh.sh, .ci/setup-codex.sh)"]
fn real_codex_over_ssh_two_turns_on_one_thread() {
    let codex = tool::required("BATON_CODEX_BIN", ".ci/setup-codex.sh");
    let github = Arc::new(FakeGithub::start(board(1)));
    let g = Arc::clone(&github);
    let api = FakeResponses::start_with_hook(move |r| {
        if r.prompts >= 2 {
            g.set_status("acme/api#1", Some("In Review"));
        }
    });
    // The remote session's environment (sshd's SetEnv): Codex's home pointing at the fake.
    let codex_home =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ssh-codex-{}", std::process::id()));
    let home = format!("/tmp/bs-{}-codex-home", std::process::id());
    std::fs::create_dir_all(&home).unwrap();
    let mut remote_env = vec![("HOME", home.clone())];
    remote_env.extend(codex_env(&api, &codex_home));
    let remote_env: Vec<(&str, &str)> = remote_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let lab = Lab::start("codex", 1, &remote_env);
    let wf = setup(&lab, &github, &["h1"], "");
    let text = std::fs::read_to_string(&wf).unwrap();
    let agent = lab.tmp.join("fake-claude");
    let codex_section = format!(
        "codex:\n  command: \"'{}' app-server\"\n  turn_timeout_ms: 120000\n  stall_timeout_ms: 60000\n",
        codex.display()
    );
    let text = text
        .replace("kind: claude_code\n", "kind: codex\n")
        .replace(
            &format!("claude_code:\n  command: \"'{}'\"\n", agent.display()),
            &codex_section,
        )
        .replace("max_turns: 1\n", "max_turns: 5\n");
    std::fs::write(&wf, text).unwrap();
    slow_poll(&wf);
    let d = start_baton(&lab, &wf);
    d.wait("release after two turns", Duration::from_secs(150), || {
        let s = d.state();
        (api.requests().len() >= 2 && s["counts"]["running"] == 0 && s["counts"]["retrying"] == 0)
            .then_some(())
    });
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2, "one model call per turn: {reqs:?}");
    assert!(
        reqs[0].thread.is_some() && reqs[0].thread == reqs[1].thread,
        "{reqs:?}"
    );
    let log = d.log();
    assert!(
        log.contains("host=h1") && log.contains("releasing claim"),
        "{log}"
    );
    assert_eq!(d.terminate(Duration::from_secs(30)).code(), Some(0));
    let _ = std::fs::remove_dir_all(&home);
    let _ = std::fs::remove_dir_all(&codex_home);
}

/// Resident memory of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Figures: 20 remote agents on 2 hosts — all start (0 failures), Baton's own memory per remote
/// running agent, and 0 processes left after SIGTERM.
#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn bench_twenty_remote_agents_on_two_hosts() {
    let tag = "twenty";
    let (lab, github, wf) = ssh_setup(
        tag,
        2,
        "hang",
        20,
        &["h1", "h2"],
        "  max_concurrent_agents_per_host: 10\n",
    );
    let active = std::fs::read_to_string(&wf).unwrap().replace(
        "max_runs_per_issue: 50\n",
        "max_runs_per_issue: 50\n  max_concurrent_agents: 20\n",
    );
    // Idle first (no active state matches) for the baseline.
    std::fs::write(
        &wf,
        active.replace(
            "active_states: [Todo, In Progress]",
            "active_states: [Someday]",
        ),
    )
    .unwrap();
    let d = start_baton(&lab, &wf);
    let pid = d.pid();
    let polls = || {
        github
            .operations()
            .iter()
            .filter(|o| o.contains("ProjectItems"))
            .count()
    };
    d.wait("idle polls", Duration::from_secs(30), || {
        (polls() >= 3).then_some(())
    });
    let idle = rss_kib(pid);
    std::fs::write(&wf, &active).unwrap();
    let started = Instant::now();
    let log = agent_log(tag);
    d.wait("20 remote agents", Duration::from_secs(120), || {
        (logged_runs(&log).len() >= 20).then_some(())
    });
    let all_running = started.elapsed();
    let state = d.wait("20 running", Duration::from_secs(10), || {
        let s = d.state();
        (s["counts"]["running"] == 20).then_some(s)
    });
    assert_eq!(state["counts"]["retrying"], 0, "0 failures: {state}");
    assert_eq!(state["hosts"][0]["running"], 10, "{state}");
    assert_eq!(state["hosts"][1]["running"], 10, "{state}");
    std::thread::sleep(Duration::from_millis(500));
    let busy = rss_kib(pid);
    let per_agent = busy.saturating_sub(idle) as f64 / 20.0;
    let t = Instant::now();
    assert!(d.terminate(Duration::from_secs(90)).success());
    let stop = t.elapsed();
    let left = wait_none_matching(
        &format!("sleep {}", hang_marker(tag)),
        Duration::from_secs(10),
    );
    println!(
        "FIGURE 20 remote agents on 2 hosts: all running after {:.1} s, 0 failures; baton RSS idle {idle} KiB, with 20 agents {busy} KiB, {per_agent:.0} KiB per remote agent; SIGTERM -> exit {:.1} s, {} processes left",
        all_running.as_secs_f64(),
        stop.as_secs_f64(),
        left.len()
    );
    assert!(
        left.is_empty(),
        "remote processes left: {left:?}\n{}",
        ps(&left)
    );
    assert!(per_agent <= 1024.0, "{per_agent} KiB per agent");
}

#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn sigkill_of_the_daemon_leaves_no_remote_process() {
    let tag = "sigkill";
    let (lab, _github, wf) = ssh_setup(tag, 1, "hang", 2, &["h1"], "");
    let mut d = start_baton(&lab, &wf);
    let log = agent_log(tag);
    d.wait("two remote agents", Duration::from_secs(30), || {
        (logged_runs(&log).len() >= 2).then_some(())
    });
    // No shutdown code runs: the ssh clients see their stdin close, the remote watchers act.
    d.stop_with(libc::SIGKILL, Duration::from_secs(10));
    let left = wait_none_matching(
        &format!("sleep {}", hang_marker(tag)),
        Duration::from_secs(15),
    );
    assert!(
        left.is_empty(),
        "remote processes left: {left:?}\n{}",
        ps(&left)
    );
}

/// Issue 21 item 5: a host that accepts connections but whose commands never return (sshd
/// `ForceCommand sleep …`) is marked down once a workspace command exceeds
/// `worker.ssh_command_timeout_ms`, the run is re-dispatched as a host failure, and SIGTERM is
/// prompt. Before, the workspace command waited for as long as the host did, the host stayed
/// "up" and the run "running" with no agent.
#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn a_host_whose_commands_never_return_is_marked_down() {
    let tag = "hung";
    let marker = hang_marker(tag);
    let lab = Lab::start_with(
        tag,
        1,
        &[("E2E_LOG", "/dev/null"), ("E2E_MODE", "ok")],
        &format!("ForceCommand sleep {marker}\n"),
    );
    let github = FakeGithub::start(board(1));
    let wf = setup(&lab, &github, &["h1"], "  ssh_command_timeout_ms: 1000\n");
    let d = start_baton(&lab, &wf);
    let state = d.wait("the host marked down", Duration::from_secs(30), || {
        let s = d.state();
        (s["hosts"][0]["up"] == false).then_some(s)
    });
    let error = state["hosts"][0]["error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let started = Instant::now();
    let status = d.terminate(Duration::from_secs(30));
    let took = started.elapsed();
    for pid in crate::support::procs::processes_matching(&format!("sleep {marker}")) {
        // SAFETY: kill(2) of a process this test's server started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        error.contains("host_unavailable") && error.contains("ssh_command_timeout_ms"),
        "{state}"
    );
    assert!(
        state["running"].as_array().is_some_and(|r| r.is_empty()),
        "{state}"
    );
    assert!(status.success());
    assert!(took < Duration::from_secs(10), "SIGTERM took {took:?}");
}

//! Durable state end to end (issue 11): the built `baton` binary against the fake GitHub with a
//! scripted agent CLI (fast, always run) and with the real Claude Code and Copilot CLIs against
//! fake model APIs (skipped when the CLIs are not installed; see `.ci/setup-*.sh`). Restarts
//! after SIGTERM and `kill -9`, the instance lock, bad state files, write failures, pid reuse.

// The real Codex and Gemini runs need those features; their helpers are unused without them.
#![cfg_attr(
    not(all(feature = "codex", feature = "gemini")),
    allow(unused_imports, dead_code)
)]

use crate::support;
use crate::support::tempdir::TempDir;

use crate::support::daemon_proc;
use crate::support::fake_anthropic;
use crate::support::fake_gemini::FakeGemini;
use crate::support::fake_openai;
use crate::support::fake_responses::FakeResponses;
use crate::support::procs;
use crate::support::real_cli::{
    agent_yaml, agent_yaml_args, claude_env, codex_env, copilot_env, gemini_env, slow_poll,
};
use crate::support::tool;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daemon_proc::{baton_command, DaemonProc};
use serde_json::Value;
use support::fake_github::{BoardFixture, FakeGithub, IssueFixture, FAKE_TOKEN};

const ISSUE: &str = "acme/api#1";
const IDENT: &str = "acme__api-1";
const LIMIT: Duration = Duration::from_secs(60);

/// A fresh temporary directory with a `home` directory inside (the daemon's `HOME`).
fn tempdir(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    std::fs::create_dir_all(d.join("home")).unwrap();
    d
}

fn board() -> BoardFixture {
    let mut b = BoardFixture::empty("acme", 7);
    b.push_issue(IssueFixture::new("acme/api", 1, "Add a file"), Some("Todo"));
    b
}

/// WORKFLOW.md in `dir` (workspaces in `dir/ws`, the state dir `dir/state`).
fn workflow(dir: &Path, github: &FakeGithub, agent_yaml: &str, body: &str) -> PathBuf {
    let p = dir.join("WORKFLOW.md");
    let text = format!(
        "---\ntracker:\n  kind: github_projects\n  endpoint: {}\n  token: $BATON_E2E_TOKEN\n  owner: acme\n  project_number: 7\n  active_states: [Todo, In Progress]\n  terminal_states: [Done]\n  timeout_ms: 5000\npolling:\n  interval_ms: 300\nworkspace:\n  root: {}\nhooks:\n  timeout_ms: 10000\n  after_create: |\n    echo created >> .baton-created\nstate:\n  dir: {}\n{agent_yaml}---\n{body}\n",
        github.endpoint(),
        dir.join("ws").display(),
        state_dir(dir).display(),
    );
    std::fs::write(&p, text).unwrap();
    p
}

fn state_dir(dir: &Path) -> PathBuf {
    dir.join("state")
}

fn stored(dir: &Path) -> Value {
    std::fs::read(state_dir(dir).join("state.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

/// The stored running entry of the issue once it has a process group and a session id.
fn stored_run(dir: &Path) -> Option<(i32, String)> {
    let s = stored(dir);
    let run = s["running"]
        .as_object()?
        .values()
        .find(|e| e["issue"]["identifier"] == IDENT)?
        .clone();
    let pgid = run["agent_pid"].as_i64().filter(|&p| p > 1)? as i32;
    Some((pgid, run["agent_session"].as_str()?.to_string()))
}

/// A scripted agent speaking Claude's stream-json: logs each invocation (pid, process group,
/// `--resume=` value, whether the prompt is the interruption notice), prints an init line and
/// hangs in a child until stopped. With `$E2E_DIR/forget` present it does not know any resumed
/// session (exit 1, like the real CLI).
const FAKE_AGENT: &str = r#"#!/usr/bin/env bash
resume=""; interrupted=0
for a in "$@"; do
  case "$a" in --resume=*) resume="${a#--resume=}";; *"was interrupted"*) interrupted=1;; esac
done
echo "run pid=$$ pgid=$(ps -o pgid= $$ | tr -d ' ') resume=$resume interrupted=$interrupted" >> "$E2E_DIR/agent.log"
if [ -n "$resume" ] && [ -e "$E2E_DIR/forget" ]; then
  echo "No conversation found with session ID: $resume" >&2
  exit 1
fi
sid="${resume:-$(printf '00000000-0000-4000-8000-%012d' $$)}"
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","model":"fake","tools":[]}'
sleep 300 &
wait
"#;

fn fake_setup(tag: &str) -> (TempDir, FakeGithub, PathBuf) {
    let dir = tempdir(tag);
    let github = FakeGithub::start(board());
    let agent = dir.join("fake-claude");
    std::fs::write(&agent, FAKE_AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let wf = workflow(
        &dir,
        &github,
        &format!(
            "agent:\n  kind: claude_code\nclaude_code:\n  command: \"'{}'\"\n",
            agent.display()
        ),
        "Work on {{ issue.identifier }}",
    );
    (dir, github, wf)
}

fn start(dir: &Path, wf: &Path) -> DaemonProc {
    DaemonProc::start(
        wf,
        &dir.join("home"),
        &[
            ("BATON_E2E_TOKEN", FAKE_TOKEN.to_string()),
            ("E2E_DIR", dir.display().to_string()),
        ],
    )
}

/// `(pid, pgid, resume, interrupted)` of each logged agent invocation.
fn runs(dir: &Path) -> Vec<(i32, i32, String, bool)> {
    std::fs::read_to_string(dir.join("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let field = |k: &str| l.split(&format!("{k}=")).nth(1)?.split(' ').next();
            Some((
                field("pid")?.parse().ok()?,
                field("pgid")?.parse().ok()?,
                field("resume")?.to_string(),
                field("interrupted")? == "1",
            ))
        })
        .collect()
}

fn running_row(d: &DaemonProc) -> Option<Value> {
    d.state()["running"].as_array()?.first().cloned()
}

fn after_create_runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("ws").join(IDENT).join(".baton-created"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn sigterm_then_restart_resumes_the_recorded_session() {
    let (dir, _github, wf) = fake_setup("sigterm");
    let mut d = start(&dir, &wf);
    let session = d.wait("the first run's session", LIMIT, || {
        running_row(&d)?["session_id"].as_str().map(str::to_string)
    });
    let first = runs(&dir);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].2, "", "a fresh session first");
    assert_eq!(d.stop_with(libc::SIGTERM, LIMIT).code(), Some(0));
    assert!(procs::wait_group_gone(first[0].1, Duration::from_secs(10)));
    let (_, sid) = stored_run(&dir).expect("shutdown recorded the stopped run");
    assert!(session.starts_with(&sid), "{session} vs raw {sid}");

    let d = start(&dir, &wf);
    let resumed = d.wait("the resumed run", LIMIT, || runs(&dir).get(1).cloned());
    assert_eq!(resumed.2, sid, "--resume <recorded session id>");
    assert!(
        resumed.3,
        "the continuation prompt says the run was interrupted"
    );
    let row = d.wait("the running row", LIMIT, || running_row(&d));
    assert_eq!(row["resumed"], true, "{row}");
    assert_eq!(row["attempt"], 1, "not a failed attempt: {row}");
    let html = d.get("/").1;
    assert!(
        html.contains("class=\"muted resumed\""),
        "the dashboard marks it"
    );
    let log = d.log();
    assert!(log.contains("event=state_recovered"), "{log}");
    assert!(log.contains("resumed_sessions=1"), "{log}");
    assert_eq!(after_create_runs(&dir), 1, "the workspace was reused");
}

#[test]
fn kill9_then_restart_stops_the_orphan_and_resumes_once() {
    let (dir, _github, wf) = fake_setup("kill9");
    let mut d = start(&dir, &wf);
    let (pgid, sid) = d.wait("the recorded run", LIMIT, || stored_run(&dir));
    assert_eq!(runs(&dir)[0].1, pgid, "the recorded group is the agent's");
    let st = d.stop_with(libc::SIGKILL, LIMIT);
    assert_eq!(st.code(), None, "killed");
    assert!(
        !procs::live_group_members(pgid).is_empty(),
        "the agent outlived the daemon (an orphan)"
    );
    // Sample the agent processes in the workspace while the daemon restarts.
    let ws = dir.join("ws").join(IDENT);
    let sampler = Sampler::start(ws, "fake-claude", any_process);

    let d = start(&dir, &wf);
    d.wait_log("event=orphan_stopped", LIMIT);
    let line = d
        .log()
        .lines()
        .find(|l| l.contains("event=orphan_stopped"))
        .unwrap()
        .to_string();
    assert!(
        line.contains(&format!("pgid={pgid}")) && line.contains(IDENT),
        "{line}"
    );
    assert!(procs::live_group_members(pgid).is_empty(), "old group gone");
    let resumed = d.wait("the resumed run", LIMIT, || runs(&dir).get(1).cloned());
    assert_eq!(resumed.2, sid);
    d.wait("the resumed row", LIMIT, || {
        (running_row(&d)?["resumed"] == true).then_some(())
    });
    let (most, seen) = sampler.finish();
    assert!(most >= 1, "the sampler saw the agent");
    assert!(most <= 1, "never two agents at once:\n{seen}");
    assert_eq!(runs(&dir).len(), 2, "exactly one new invocation");
    assert_eq!(after_create_runs(&dir), 1);
    assert!(d.log().contains("orphans_stopped=1"));
}

#[test]
fn an_unknown_session_falls_back_once_to_a_fresh_session_with_the_full_prompt() {
    let (dir, _github, wf) = fake_setup("forget");
    let mut d = start(&dir, &wf);
    d.wait("the recorded run", LIMIT, || stored_run(&dir));
    assert_eq!(d.stop_with(libc::SIGTERM, LIMIT).code(), Some(0));
    std::fs::write(dir.join("forget"), "").unwrap();
    let d = start(&dir, &wf);
    let third = d.wait("the fallback run", LIMIT, || runs(&dir).get(2).cloned());
    let second = &runs(&dir)[1];
    assert!(
        !second.2.is_empty() && second.3,
        "resume tried first: {second:?}"
    );
    assert_eq!(third.2, "", "then a fresh session");
    assert!(!third.3, "with the full prompt");
    assert!(
        d.log().contains("event=session_resume_failed"),
        "{}",
        d.log()
    );
}

/// Samples, every 10 ms until stopped, the process groups of the processes `find` returns; keeps
/// the largest sample with its processes, for the failure message.
struct Sampler {
    stop: Arc<AtomicBool>,
    worst: Arc<Mutex<(usize, String)>>,
}

impl Sampler {
    /// Start sampling the live processes in `ws` whose program is named like `marker` and that
    /// `keep` accepts (given their `comm`).
    fn start(ws: PathBuf, marker: &'static str, keep: fn(&str) -> bool) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let worst = Arc::new(Mutex::new((0, String::new())));
        let (s, w) = (Arc::clone(&stop), Arc::clone(&worst));
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let seen = processes_in(&ws, marker, keep);
                let groups: BTreeSet<i32> = seen.iter().map(|p| p.0).collect();
                let mut worst = w.lock().unwrap();
                if groups.len() > worst.0 {
                    let text = seen
                        .iter()
                        .map(|p| format!("pgid {} pid {}: {}", p.0, p.1, p.2));
                    *worst = (groups.len(), text.collect::<Vec<_>>().join("\n"));
                }
                drop(worst);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Sampler { stop, worst }
    }

    /// Stop sampling: the most groups seen at once, and the processes of that sample.
    fn finish(&self) -> (usize, String) {
        self.stop.store(true, Ordering::SeqCst);
        self.worst.lock().unwrap().clone()
    }
}

/// `(pgid, pid, "comm: cmdline")` of the live processes in `ws` whose program (argv[0] or
/// argv[1]) is named like `marker` and whose `comm` `keep` accepts.
fn processes_in(ws: &Path, marker: &str, keep: fn(&str) -> bool) -> Vec<(i32, i32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let pids = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok());
    pids.filter_map(|pid| {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let raw = String::from_utf8_lossy(&raw);
        // The program itself (argv[0], or the script an interpreter runs), not any argument:
        // a tool the CLI runs may name paths that contain the marker.
        let program = raw.split('\0').take(2).any(|a| {
            let name = Path::new(a).file_name().and_then(|n| n.to_str());
            name.is_some_and(|n| n.contains(marker))
        });
        let cmdline = raw.replace('\0', " ");
        let here = std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == ws);
        let wanted = here && keep(comm.trim()) && program;
        (wanted && procs::pid_alive(pid))
            .then(|| Some((group_of(pid)?, pid, format!("{}: {cmdline}", comm.trim()))))?
    })
    .collect()
}

/// Every process counts (the fake agent is a shell script).
fn any_process(_: &str) -> bool {
    true
}

/// The agent CLI itself, not the shells and tools it runs.
fn cli_process(comm: &str) -> bool {
    !matches!(comm, "bash" | "sh" | "sleep" | "env")
}

#[test]
fn a_second_instance_exits_1_with_one_line_and_check_reports_the_holder() {
    let (dir, _github, wf) = fake_setup("lock");
    let d = start(&dir, &wf);
    d.wait("the recorded run", LIMIT, || stored_run(&dir));
    let out = baton_command(
        &wf,
        &dir.join("home"),
        &[("BATON_E2E_TOKEN", FAKE_TOKEN.into())],
    )
    .stderr(std::process::Stdio::piped())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        format!(
            "baton: state_locked: {} is in use by pid {}",
            state_dir(&dir).display(),
            d.pid()
        ),
        "exactly one line"
    );
    assert_eq!(
        runs(&dir).len(),
        1,
        "the second instance dispatched nothing"
    );
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("check")
        .arg(&wf)
        .env("HOME", dir.join("home"))
        .env("BATON_E2E_TOKEN", FAKE_TOKEN)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        text.contains(&format!("a daemon holds the lock (pid {})", d.pid())),
        "{text}"
    );
    assert!(text.contains("stored state: issues=1"), "{text}");
}

#[test]
fn a_corrupt_file_is_moved_aside_and_a_newer_schema_is_refused() {
    let (dir, _github, wf) = fake_setup("corrupt");
    let sd = state_dir(&dir);
    std::fs::create_dir_all(&sd).unwrap();
    std::fs::write(
        sd.join("state.json"),
        b"{\"schema_version\": 1, \"issues\": [tru",
    )
    .unwrap();
    let mut d = start(&dir, &wf);
    d.wait("a dispatch after the fresh start", LIMIT, || {
        runs(&dir).first().cloned()
    });
    let log = d.log();
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("event=state_corrupt"))
        .collect();
    assert_eq!(errors.len(), 1, "{log}");
    assert!(
        errors[0].contains("state.json") && errors[0].contains("ERROR"),
        "{}",
        errors[0]
    );
    let aside: Vec<_> = std::fs::read_dir(&sd)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("state.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(d.stop_with(libc::SIGTERM, LIMIT).code(), Some(0));

    let newer = b"{\"schema_version\": 99, \"issues\": {\"shape\": \"unknown\"}}";
    std::fs::write(sd.join("state.json"), newer).unwrap();
    let out = baton_command(
        &wf,
        &dir.join("home"),
        &[("BATON_E2E_TOKEN", FAKE_TOKEN.into())],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("state_version_unsupported"), "{err}");
    assert_eq!(
        std::fs::read(sd.join("state.json")).unwrap(),
        newer,
        "left as it is"
    );
    assert_eq!(runs(&dir).len(), 1, "nothing dispatched after the refusal");
}

#[test]
fn an_unwritable_state_dir_is_logged_and_the_daemon_keeps_running() {
    let (dir, github, wf) = fake_setup("readonly");
    let mut d = start(&dir, &wf);
    d.wait("the recorded run", LIMIT, || stored_run(&dir));
    let sd = state_dir(&dir);
    // Read-only, and (since tests may run as root, which ignores modes) the temp file's name
    // taken by a directory: every write now fails.
    std::fs::create_dir(sd.join(".state.json.tmp")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sd, std::fs::Permissions::from_mode(0o500)).unwrap();
    github.set_status(ISSUE, Some("Done"));
    d.wait_log("event=state_write_failed", LIMIT);
    assert!(d.alive());
    d.wait("the terminal issue to be released", LIMIT, || {
        (d.state()["counts"]["running"] == 0).then_some(())
    });
    std::fs::set_permissions(&sd, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::remove_dir(sd.join(".state.json.tmp")).unwrap();
    d.wait_log("event=state_write_recovered", LIMIT);
    d.wait("the released issue to leave the file", LIMIT, || {
        let s = stored(&dir);
        let empty = ["running", "retry_attempts", "runs_since_active"]
            .iter()
            .all(|k| s[k].as_object().is_some_and(|m| m.is_empty()));
        empty.then_some(())
    });
    assert_eq!(d.stop_with(libc::SIGTERM, LIMIT).code(), Some(0));
}

#[test]
fn a_recorded_pgid_whose_start_time_differs_is_left_alone() {
    let (dir, _github, wf) = fake_setup("pidreuse");
    use std::os::unix::process::CommandExt;
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = bystander.id();
    let real_start = baton::host::orphan::leader_start_time(pid).unwrap();
    let sd = state_dir(&dir);
    std::fs::create_dir_all(&sd).unwrap();
    let doc = serde_json::json!({
        "schema_version": 1,
        "issues": [{
            "id": support::fake_github::issue_node_id(ISSUE),
            "identifier": IDENT,
            "attempt": 0,
            "runs": 1,
            "future_field": {"ignored": true},
            "running": {"pgid": pid, "leader_start_time": real_start + 1, "agent": "claude"}
        }]
    });
    std::fs::write(sd.join("state.json"), doc.to_string()).unwrap();
    let d = start(&dir, &wf);
    d.wait("the re-dispatch of the interrupted run", LIMIT, || {
        runs(&dir).first().cloned()
    });
    let log = d.log();
    assert!(!log.contains("event=orphan_stopped"), "{log}");
    assert!(log.contains("orphans_stopped=0"), "{log}");
    assert!(
        procs::pid_alive(pid as i32),
        "the unrelated process was not signalled"
    );
    assert_eq!(runs(&dir)[0].2, "", "no session recorded: a fresh one");
    let _ = bystander.kill();
    let _ = bystander.wait();
}

/// A state file can hold up to 10,000 runs. Each becomes a local orphan check at startup, on the
/// loop thread before the loop reads its channels; their answers must not have to fit in the
/// loop's bounded channel (1,024), or startup blocks for ever. The groups (above any `pid_max`)
/// do not exist: each check answers `not_running` and the board's issue is dispatched.
#[test]
fn a_state_file_with_more_local_orphans_than_the_loop_channel_holds_still_starts() {
    const ORPHANS: u32 = 1_100;
    let (dir, _github, wf) = fake_setup("manyorphans");
    let issues: Vec<Value> = (0..ORPHANS)
        .map(|n| {
            serde_json::json!({
                "id": format!("I_orphan{n}"),
                "identifier": format!("acme__gone-{n}"),
                "attempt": 0,
                "runs": 1,
                "running": {"pgid": 5_000_000 + n, "leader_start_time": 1, "agent": "claude"}
            })
        })
        .collect();
    let sd = state_dir(&dir);
    std::fs::create_dir_all(&sd).unwrap();
    let doc = serde_json::json!({"schema_version": 1, "issues": issues});
    std::fs::write(sd.join("state.json"), doc.to_string()).unwrap();
    let d = start(&dir, &wf);
    d.wait(
        "the board issue's dispatch after the orphan checks",
        LIMIT,
        || runs(&dir).first().cloned(),
    );
    let log = d.log();
    let checked = log.matches("event=orphan_check ").count();
    assert_eq!(checked, ORPHANS as usize, "one check per recorded group");
    assert_eq!(log.matches("outcome=not_running").count(), ORPHANS as usize);
}

fn group_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// The shared part of the real-CLI kill -9 tests: start, wait until the agent is blocked in
/// `sleep 30` with its run recorded, kill -9 the daemon, restart it, wait for the orphan to be
/// stopped. Returns the new daemon, the old group and the sampler.
fn kill9_and_restart(
    dir: &Path,
    wf: &Path,
    cli_env: Vec<(&'static str, String)>,
    marker: &'static str,
    tool_marker: &str,
    api_log: &dyn Fn() -> String,
) -> (DaemonProc, i32, Sampler) {
    let ws = dir.join("ws").join(IDENT);
    let mut envs = cli_env;
    envs.push(("BATON_E2E_TOKEN", FAKE_TOKEN.to_string()));
    let mut d = DaemonProc::start(wf, &dir.join("home"), &envs);
    let log = || format!("{}\nmodel API requests: {}", d.log(), api_log());
    let blocked = "the agent blocked in its tool call";
    let (pgid, _sid) = daemon_proc::wait_until(blocked, Duration::from_secs(120), log, || {
        let run = stored_run(dir)?;
        let sleeping = std::fs::read_dir("/proc").ok()?.any(|e| {
            e.ok().is_some_and(|e| {
                let p = e.path();
                std::fs::read_to_string(p.join("cmdline")).is_ok_and(|c| c.contains(tool_marker))
                    && std::fs::read_link(p.join("cwd")).is_ok_and(|c| c == ws)
            })
        });
        sleeping.then_some(run)
    });
    let sampler = Sampler::start(ws, marker, cli_process);
    assert_eq!(d.stop_with(libc::SIGKILL, LIMIT).code(), None);
    assert!(
        !procs::live_group_members(pgid).is_empty(),
        "an orphan is left"
    );
    let d = DaemonProc::start(wf, &dir.join("home"), &envs);
    d.wait_log("event=orphan_stopped", LIMIT);
    assert!(d.log().contains(&format!("pgid={pgid}")));
    assert!(
        procs::wait_group_gone(pgid, Duration::from_secs(10)),
        "old group gone"
    );
    (d, pgid, sampler)
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn real_claude_kill9_restart_resumes_the_same_session() {
    let claude = tool::required("BATON_CLAUDE_BIN", ".ci/setup-claude.sh");
    let dir = tempdir("claude-kill9");
    let github = Arc::new(FakeGithub::start(board()));
    let g = Arc::clone(&github);
    use fake_anthropic::Step;
    // Request 1: a Bash tool call that blocks for 30 s (Claude Code refuses a plain `sleep 30`). After the restart, the resumed request
    // (the interruption notice as the last user message) gets a text reply and the issue moves
    // out of the active states, so the run ends there.
    let api = fake_anthropic::FakeAnthropic::start_with_hook(
        vec![
            Step::ToolUse {
                text: Some("Running the slow build.".into()),
                name: "Bash".into(),
                input: serde_json::json!({
                    "command": "python3 -c 'import time; time.sleep(30)'",
                    "description": "slow build"
                }),
            },
            Step::Text("Picked up after the interruption; done.".into()),
        ],
        move |rec| {
            if rec.last_user_text.contains("was interrupted") {
                g.set_status(ISSUE, Some("In Review"));
            }
        },
    );
    let wf = workflow(
        &dir,
        &github,
        &agent_yaml(
            "claude_code",
            &claude,
            "  max_turns: 3\n",
            "  permission_mode: acceptEdits\n  allowed_tools: [\"Bash(python3:*)\"]\n  stall_timeout_ms: 120000\n  turn_timeout_ms: 120000\n",
        ),
        "Build {{ issue.identifier }}.",
    );
    slow_poll(&wf);
    let cli_env = claude_env(&api.base_url);
    let (d, _pgid, sampler) =
        kill9_and_restart(&dir, &wf, cli_env, "claude", "time.sleep(30)", &|| {
            format!("{:?}", api.requests())
        });
    let reqs = d.wait("the resumed request", Duration::from_secs(120), || {
        let r = api.requests();
        r.iter()
            .any(|x| x.last_user_text.contains("was interrupted"))
            .then_some(r)
    });
    let first = reqs[0].session_header.clone();
    assert!(first.is_some(), "{reqs:?}");
    let resumed = reqs
        .iter()
        .find(|x| x.last_user_text.contains("was interrupted"))
        .unwrap();
    assert_eq!(
        resumed.session_header, first,
        "the same CLI session: {reqs:?}"
    );
    assert!(
        resumed.n_assistant >= 1,
        "with the history of the interrupted run"
    );
    let limit = Duration::from_secs(120);
    assert_resumed_once(&d, &dir, &sampler, "claude", "event=session_resume ", limit);
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn real_copilot_kill9_restart_resumes_the_same_session() {
    let copilot = tool::required("BATON_COPILOT_BIN", ".ci/setup-copilot.sh");
    let dir = tempdir("copilot-kill9");
    let github = Arc::new(FakeGithub::start(board()));
    let g = Arc::clone(&github);
    // Turn 1's request asks for `sleep 30`; the resumed conversation carries two user messages.
    let api = fake_openai::FakeOpenAi::start_with_hook(move |users| {
        if users >= 2 {
            g.set_status(ISSUE, Some("In Review"));
        }
    });
    let wf = workflow(
        &dir,
        &github,
        &agent_yaml(
            "copilot",
            &copilot,
            "  max_turns: 3\n",
            "  allow_all_tools: true\n  stall_timeout_ms: 120000\n  turn_timeout_ms: 120000\n",
        ),
        "SCENARIO:sleep REMEMBER:pineapple Build {{ issue.identifier }}.",
    );
    slow_poll(&wf);
    let cli_env = copilot_env(&api.base_url);
    let (d, _pgid, sampler) =
        kill9_and_restart(&dir, &wf, cli_env, "copilot", "sleep\u{0}30", &|| {
            format!("{:?}", api.requests())
        });
    let reqs = d.wait("the resumed request", Duration::from_secs(150), || {
        let r = api.requests();
        r.iter()
            .any(|x| x.last_user.contains("was interrupted"))
            .then_some(r)
    });
    let resumed = reqs
        .iter()
        .find(|x| x.last_user.contains("was interrupted"))
        .unwrap();
    assert!(
        resumed.user_messages >= 2,
        "the resumed session carries the interrupted conversation: {reqs:?}"
    );
    let limit = Duration::from_secs(150);
    assert_resumed_once(&d, &dir, &sampler, "copilot", "mode=resume", limit);
}

/// After the restart resumed the interrupted run: wait (up to `limit`) for the run to end, stop
/// the process sampler, and check there never were two `cli` processes for the
/// issue, `after_create` ran once, the log shows `resumed` and no session fallback.
fn assert_resumed_once(
    d: &DaemonProc,
    dir: &Path,
    sampler: &Sampler,
    cli: &str,
    resumed: &str,
    limit: Duration,
) {
    d.wait("the run to end", limit, || {
        (d.state()["counts"]["running"] == 0).then_some(())
    });
    let (most, seen) = sampler.finish();
    // The log first: a resume that fell back to a fresh session explains a second process.
    let log = d.log();
    assert!(log.contains(resumed), "{log}");
    assert!(!log.contains("event=session_resume_failed"), "{log}");
    assert!(most >= 1, "the sampler saw the {cli} process");
    assert!(
        most <= 1,
        "never two {cli} processes for the issue:\n{seen}"
    );
    assert_eq!(after_create_runs(dir), 1);
}

/// Figures for issue 11: restart with 1,000 known issues in `state.json` (999 queued retries and
/// one interrupted run with a recorded session) → the resumed agent running, on the fake GitHub.
/// Also the main-loop cost of projecting 1,000 issues. Run with `scripts/bench/restart.sh`.
#[test]
#[ignore = "benchmark: run scripts/bench/restart.sh"]
fn bench_restart_to_first_resumed_agent() {
    use baton::orchestrator::state::{OrchestratorState, RetryEntry, RetryKind, RunningEntry};
    let dir = tempdir("bench-restart");
    let github = FakeGithub::start(BoardFixture::generated(1_000, "Todo"));
    let agent = dir.join("fake-claude");
    std::fs::write(&agent, FAKE_AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let wf = workflow(
        &dir,
        &github,
        &format!(
            "agent:\n  kind: claude_code\nclaude_code:\n  command: \"'{}'\"\n",
            agent.display()
        ),
        "Work on {{ issue.identifier }}",
    );
    slow_poll(&wf);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut st = OrchestratorState::default();
    for n in 1..=1_000u64 {
        let id = support::fake_github::issue_node_id(&format!("acme/app#{n}"));
        let ident = format!("acme__app-{n}");
        let ws = dir.join("ws").join(&ident);
        st.runs_since_active.insert(id.clone(), 1);
        if n == 1 {
            let mut e = RunningEntry {
                workspace_path: ws,
                started_at: now - 60_000,
                agent: "claude_code".into(),
                agent_session: Some("00000000-0000-4000-8000-000000000001".into()),
                ..RunningEntry::default()
            };
            (e.issue.id, e.issue.identifier) = (id.clone(), ident);
            st.running.insert(id, e);
        } else {
            st.queue_retry(RetryEntry {
                issue_id: id,
                identifier: ident,
                attempt: 2,
                due_at: now + 3_600_000,
                error: Some("worker exited: boom".into()),
                kind: RetryKind::Failure,
                workspace_path: ws,
                ..RetryEntry::default()
            });
        }
    }
    let sd = state_dir(&dir);
    std::fs::create_dir_all(&sd).unwrap();
    let text = baton::orchestrator::restore::to_json(&st).unwrap();
    std::fs::write(sd.join("state.json"), &text).unwrap();
    let t0 = std::time::Instant::now();
    let d = start(&dir, &wf);
    let run = d.wait("the resumed agent", LIMIT, || {
        runs(&dir)
            .into_iter()
            .find(|r| r.2 == "00000000-0000-4000-8000-000000000001")
    });
    let to_agent = t0.elapsed();
    let log = d.log();
    let summary = log
        .lines()
        .find(|l| l.contains("event=state_recovered"))
        .unwrap_or("");
    println!("state.json with 1,000 known issues: {} bytes", text.len());
    println!(
        "restart -> resumed agent running (pid {}): {} ms (includes one board poll of 1,000 items)",
        run.0,
        to_agent.as_millis()
    );
    println!("{summary}");
    assert_eq!(
        runs(&dir).len(),
        1,
        "only the interrupted run was dispatched"
    );
}

/// Wait (up to `limit`) for `d` to exit by itself; its exit code.
fn exit_code(d: &mut DaemonProc, limit: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + limit;
    while d.alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "still running: {}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d.stop_with(libc::SIGKILL, limit).code()
}

fn second_instance(dir: &Path, wf: &Path) -> std::process::Output {
    baton_command(
        wf,
        &dir.join("home"),
        &[("BATON_E2E_TOKEN", FAKE_TOKEN.into())],
    )
    .stderr(std::process::Stdio::piped())
    .output()
    .unwrap()
}

#[test]
fn lock_survives_deletion_and_replacement() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let (dir, github, wf) = fake_setup("steal");
    let mut d = start(&dir, &wf);
    let (pgid, _) = d.wait("the recorded run", LIMIT, || stored_run(&dir));
    let sd = state_dir(&dir);
    // Files in the directory are not the lock: deleting, replacing or renaming them changes
    // nothing for a second instance.
    std::fs::remove_file(sd.join("pid")).unwrap();
    std::fs::write(sd.join("lock"), "").unwrap();
    std::fs::rename(sd.join("lock"), sd.join("lock.moved")).unwrap();
    symlink("/dev/null", sd.join("lock")).unwrap();
    let out = second_instance(&dir, &wf);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("state_locked:"), "{err}");
    assert_eq!(
        runs(&dir).len(),
        1,
        "the second instance dispatched nothing"
    );
    // The directory itself renamed away and a new one put in its place: the first instance
    // sees it before its next write and stops (its agent with it) rather than run beside
    // whoever takes the new directory.
    std::fs::rename(&sd, dir.join("state.moved")).unwrap();
    std::fs::create_dir(&sd).unwrap();
    std::fs::set_permissions(&sd, std::fs::Permissions::from_mode(0o700)).unwrap();
    github.set_status(ISSUE, Some("Done"));
    d.wait_log("event=state_lock_lost", LIMIT);
    assert_eq!(exit_code(&mut d, LIMIT), Some(1), "{}", d.log());
    assert!(procs::wait_group_gone(pgid, Duration::from_secs(10)));
    assert!(
        !sd.join("state.json").exists(),
        "never written into the new directory"
    );
    assert!(d.log().contains("state_lock_lost: "), "{}", d.log());
}

#[test]
fn state_dir_planted_by_another_user_is_refused() {
    use std::os::unix::fs::{chown, symlink, PermissionsExt};
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: planting a directory as another user needs root");
        return;
    }
    let (dir, _github, wf) = fake_setup("planted");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = bystander.id();
    let start = baton::host::orphan::leader_start_time(pid).unwrap();
    // Another user (nobody) pre-created the state directory, world-writable, with symlinks to
    // a file of ours and a state file naming a process of ours as an orphan to stop.
    let sd = state_dir(&dir);
    std::fs::create_dir(&sd).unwrap();
    for name in ["pid", "lock", ".state.json.tmp"] {
        symlink(&victim, sd.join(name)).unwrap();
    }
    let doc = serde_json::json!({"version": 2, "running": {"I_x": {
        "issue": {"id": "I_x", "identifier": IDENT}, "workspace_path": dir.join("ws").join(IDENT),
        "agent": "claude_code", "agent_session": "--dangerously-skip-permissions",
        "agent_pid": pid, "leader_start": start}}});
    std::fs::write(sd.join("state.json"), doc.to_string()).unwrap();
    chown(&sd, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&sd, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = second_instance(&dir, &wf);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "baton: state_dir_unsafe: {}: owned by uid 65534, not by uid 0",
            sd.display()
        )
    );
    // The same directory, ours but writable by others; then ours under a parent others can
    // write (not sticky): refused as well.
    chown(&sd, Some(0), Some(0)).unwrap();
    let err = String::from_utf8_lossy(&second_instance(&dir, &wf).stderr).into_owned();
    assert!(
        err.contains("writable by group or others (mode 777)"),
        "{err}"
    );
    std::fs::set_permissions(&sd, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = String::from_utf8_lossy(&second_instance(&dir, &wf).stderr).into_owned();
    assert!(
        err.contains(&format!("{} is writable by group or others", dir.display())),
        "{err}"
    );
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A workspace root planted by another user: refused too.
    let ws = dir.join("ws");
    let _ = std::fs::remove_dir(&ws);
    std::fs::create_dir(&ws).unwrap();
    chown(&ws, Some(65534), Some(65534)).unwrap();
    let err = String::from_utf8_lossy(&second_instance(&dir, &wf).stderr).into_owned();
    assert!(err.contains("workspace_root_unsafe: "), "{err}");
    // Nothing was followed, nothing signalled, nothing run.
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(
        procs::pid_alive(pid as i32),
        "the named process was not signalled"
    );
    assert!(runs(&dir).is_empty(), "no agent started");
    let _ = bystander.kill();
    let _ = bystander.wait();
}

#[test]
fn bad_state_entry_is_dropped_alone() {
    let (dir, _github, wf) = fake_setup("badentry");
    let id = support::fake_github::issue_node_id(ISSUE);
    let sd = state_dir(&dir);
    std::fs::create_dir_all(&sd).unwrap();
    let doc = serde_json::json!({
        "version": 2,
        "blocked": {id.clone(): {"identifier": IDENT, "state": "Todo", "reason": "max_runs_per_issue reached",
            "kind": "max_runs", "since": 1, "fingerprint": "todo|false|",
            "workspace_path": dir.join("ws").join(IDENT)}},
        "retry_attempts": {"I_bogus": {"identifier": "acme__api-9", "attempt": "x", "due_at": 1,
            "kind": "failure", "workspace_path": dir.join("ws").join("acme__api-9")}},
        "runs_since_active": {id.clone(): 10},
        "spend": {id.clone(): {"cost_usd": 2.5, "turns": 7}}
    });
    std::fs::write(sd.join("state.json"), doc.to_string()).unwrap();
    let d = start(&dir, &wf);
    d.wait_log("event=state_recovered", LIMIT);
    let log = d.log();
    let dropped: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("event=state_entry_dropped"))
        .collect();
    assert_eq!(dropped.len(), 1, "{log}");
    assert!(
        dropped[0].contains("WARN")
            && dropped[0].contains("issue_id=\"I_bogus\"")
            && dropped[0].contains("field=attempt"),
        "{}",
        dropped[0]
    );
    // The rest is kept: the issue is still parked with its spend, the file was not moved aside.
    let blocked = d.wait("the parked issue", LIMIT, || {
        d.state()["blocked"].as_array()?.first().cloned()
    });
    assert_eq!(blocked["issue_identifier"], IDENT);
    let detail = d.get(&format!("/api/v1/{IDENT}")).1;
    assert!(detail.contains("\"cost_usd\":2.5"), "{detail}");
    assert!(log.contains("restored_retries=0 parked_issues=1"), "{log}");
    let aside = std::fs::read_dir(&sd).unwrap().flatten();
    let aside = aside.filter(|e| e.file_name().to_string_lossy().contains("corrupt"));
    assert_eq!(aside.count(), 0, "the file was not moved aside");
    assert!(runs(&dir).is_empty(), "parked: not dispatched");
}

/// A Claude CLI stand-in for the usage tests: invocation 1 completes a turn (100 input tokens,
/// session cost 0.40), 2 hangs (Baton is killed there), 3 must be the resumed one (50 tokens,
/// cumulative cost 0.60), later ones hang.
const FAKE_CLAUDE_USAGE: &str = r#"#!/usr/bin/env bash
resume=""; interrupted=0
for a in "$@"; do
  case "$a" in --resume=*) resume="${a#--resume=}";; *"was interrupted"*) interrupted=1;; esac
done
n=$(( $(cat "$E2E_DIR/n" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$E2E_DIR/n"
sid="${resume:-0b9c6e1e-58a5-4a51-9d4b-123456789012}"
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","model":"fake","tools":[]}'
result() {
  echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"'"$sid"'","total_cost_usd":'"$1"',"num_turns":1,"usage":{"input_tokens":'"$2"',"output_tokens":1}}'
}
case "$n.$interrupted" in
  1.0) result 0.40 100 ;;
  3.1) result 0.60 50 ;;
  *) sleep 300 & wait ;;
esac
"#;

/// A Copilot CLI stand-in: the usage file holds the session's cumulative tokens. Invocation 1
/// reaches 1,000 input tokens, 2 hangs, 3 (the resumed one) reaches 1,500, later ones hang.
const FAKE_COPILOT_USAGE: &str = r#"#!/usr/bin/env bash
usage=""; sid=""; interrupted=0
while [ $# -gt 0 ]; do
  case "$1" in
    --usage-output-file) usage="$2"; shift ;;
    --resume=*) sid="${1#--resume=}" ;;
    --session-id=*) sid="${1#--session-id=}" ;;
    --prompt=*"was interrupted"*) interrupted=1 ;;
  esac
  shift
done
n=$(( $(cat "$E2E_DIR/n" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$E2E_DIR/n"
echo '{"type":"session.tools_updated","data":{"model":"gpt-4.1"}}'
finish() {
  printf '{"modelMetrics":{"gpt-4.1":{"usage":{"inputTokens":%s,"outputTokens":%s,"cacheReadTokens":0,"cacheWriteTokens":0}}}}' "$1" "$2" > "$usage"
  echo '{"type":"result","sessionId":"'"$sid"'","exitCode":0,"usage":{"premiumRequests":1}}'
}
case "$n.$interrupted" in
  1.0) finish 1000 100 ;;
  3.1) finish 1500 150 ;;
  *) sleep 300 & wait ;;
esac
"#;

/// Run `script` as the agent (`agent_yaml` selects it), let it finish a turn and hang in the
/// next, kill -9 Baton, restart: the resumed session's turn completes and the next hangs. The
/// restarted daemon, once its totals count two turns.
fn kill9_mid_session(tag: &str, script: &str, agent_yaml: &str) -> (TempDir, DaemonProc) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir(tag);
    let github = FakeGithub::start(board());
    let agent = dir.join("fake-agent");
    std::fs::write(&agent, script).unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let yaml = agent_yaml.replace("{agent}", &agent.display().to_string());
    let wf = workflow(&dir, &github, &yaml, "Work on {{ issue.identifier }}");
    slow_poll(&wf);
    let n = |dir: &Path| std::fs::read_to_string(dir.join("n")).unwrap_or_default();
    // Process groups only: another test's Baton starting meanwhile sweeps the cgroups a killed
    // Baton left, which would stop this orphan before the restart looks at it.
    let start = |dir: &Path, wf: &Path| {
        let envs = [
            ("BATON_E2E_TOKEN", FAKE_TOKEN.to_string()),
            ("E2E_DIR", dir.display().to_string()),
            ("BATON_CONTAINMENT", "process_group".to_string()),
        ];
        DaemonProc::start(wf, &dir.join("home"), &envs)
    };
    let mut d = start(&dir, &wf);
    d.wait("the second invocation, recorded", LIMIT, || {
        let pgid = stored_run(&dir)?.0;
        (n(&dir).trim() == "2" && !procs::live_group_members(pgid).is_empty()).then_some(())
    });
    assert_eq!(d.stop_with(libc::SIGKILL, LIMIT).code(), None);
    let d = start(&dir, &wf);
    d.wait_log("event=orphan_stopped", LIMIT);
    d.wait(
        "the resumed turn counted, the next one started",
        LIMIT,
        || {
            let counted = d.state()["agent_totals"]["turns"] == 2;
            (counted && n(&dir).trim() == "4").then_some(())
        },
    );
    (dir, d)
}

#[test]
fn resumed_claude_session_counts_usage_once() {
    let yaml =
        "agent:\n  kind: claude_code\n  max_turns: 5\nclaude_code:\n  command: \"'{agent}'\"\n";
    let (_dir, d) = kill9_mid_session("usage-claude", FAKE_CLAUDE_USAGE, yaml);
    let s = d.state();
    // The CLI reported a session cost of 0.60 in all and 100 + 50 input tokens per invocation.
    let totals = &s["agent_totals"];
    assert!(
        (totals["cost_usd"].as_f64().unwrap() - 0.6).abs() < 1e-9,
        "{totals}"
    );
    assert_eq!(totals["input_tokens"], 150, "{totals}");
    let spend = &s["running"][0]["spend"];
    assert!(
        (spend["cost_usd"].as_f64().unwrap() - 0.6).abs() < 1e-9,
        "{spend}"
    );
    assert_eq!(spend["tokens"]["input_tokens"], 150, "{spend}");
    assert_eq!(spend["turns"], 2);
    assert_eq!(s["running"][0]["resumed"], true);
}

#[test]
fn resumed_copilot_session_counts_usage_once() {
    let yaml = "agent:\n  kind: copilot\n  max_turns: 5\ncopilot:\n  command: \"'{agent}'\"\n";
    let (_dir, d) = kill9_mid_session("usage-copilot", FAKE_COPILOT_USAGE, yaml);
    let s = d.state();
    // The usage file said 1,500 input tokens for the whole session in the end.
    let totals = &s["agent_totals"];
    assert_eq!(totals["input_tokens"], 1500, "{totals}");
    assert_eq!(totals["output_tokens"], 150, "{totals}");
    let spend = &s["running"][0]["spend"];
    assert_eq!(spend["tokens"]["input_tokens"], 1500, "{spend}");
    assert_eq!(s["running"][0]["resumed"], true);
}

#[test]
fn a_state_file_at_the_old_default_location_is_moved_once() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, _github, wf) = fake_setup("legacy");
    // The workflow without `state.dir`: the default, under the private HOME.
    let text = std::fs::read_to_string(&wf).unwrap();
    let without: String = text
        .lines()
        .filter(|l| !l.starts_with("state:") && !l.starts_with("  dir: "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&wf, without).unwrap();
    let legacy = dir.join("ws").join(".baton");
    std::fs::create_dir_all(&legacy).unwrap();
    std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(0o700)).unwrap();
    let v1 = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/state/v1-state.json"
    ))
    .unwrap();
    std::fs::write(legacy.join("state.json"), &v1).unwrap();
    let d = start(&dir, &wf);
    d.wait_log("event=state_recovered", LIMIT);
    let log = d.log();
    let moved = log
        .lines()
        .find(|l| l.contains("event=state_moved"))
        .unwrap();
    let home_state = dir.join("home/.local/state/baton");
    assert!(moved.contains(home_state.to_str().unwrap()), "{moved}");
    assert!(log.contains("restored_retries=3 parked_issues=1"), "{log}");
    assert!(!legacy.join("state.json").exists(), "read once");
    let kept = std::fs::read_dir(&legacy).unwrap().flatten();
    assert!(kept
        .map(|e| e.file_name().into_string().unwrap())
        .any(|n| n.starts_with("state.json.moved-")));
}

#[test]
fn state_writes_are_timed_in_the_metrics() {
    let (dir, _github, wf) = fake_setup("metrics");
    let d = start(&dir, &wf);
    d.wait("the recorded run", LIMIT, || stored_run(&dir));
    let written = d.wait("a timed state write", LIMIT, || {
        let m = d.get("/metrics").1;
        let count = m
            .lines()
            .find(|l| l.starts_with("baton_state_write_duration_seconds_count"))?
            .rsplit(' ')
            .next()?
            .parse::<f64>()
            .ok()?;
        (count >= 1.0).then_some(m)
    });
    let sum = written
        .lines()
        .find(|l| l.starts_with("baton_state_write_duration_seconds_sum"))
        .unwrap();
    assert!(!sum.ends_with(" 0"), "{sum}");
}

/// A real CLI blocked in a slow model stream (`SCENARIO:slow`), the daemon stopped with SIGTERM
/// and started again: `resumed()` says whether the interrupted-run request the fake saw came
/// from the recorded session; the run then ends, once.
fn real_sigterm_restart(
    tag: &str,
    github: &FakeGithub,
    agent: &str,
    mut envs: Vec<(&'static str, String)>,
    requests: &dyn Fn() -> usize,
    resumed: &dyn Fn() -> Option<bool>,
) {
    let dir = tempdir(tag);
    let body = "SCENARIO:slow Work on {{ issue.identifier }}.";
    let wf = workflow(&dir, github, agent, body);
    slow_poll(&wf);
    envs.push(("BATON_E2E_TOKEN", FAKE_TOKEN.to_string()));
    let mut d = DaemonProc::start(&wf, &dir.join("home"), &envs);
    let (pgid, _) = d.wait("the recorded, streaming run", LIMIT * 2, || {
        stored_run(&dir).filter(|_| requests() >= 1)
    });
    assert_eq!(d.stop_with(libc::SIGTERM, LIMIT).code(), Some(0));
    assert!(procs::wait_group_gone(pgid, Duration::from_secs(10)));
    let d = DaemonProc::start(&wf, &dir.join("home"), &envs);
    let same = d.wait("the resumed request", LIMIT * 2, resumed);
    assert!(same, "the resumed request belongs to the recorded session");
    d.wait("the run to end", LIMIT * 2, || {
        (d.state()["counts"]["running"] == 0).then_some(())
    });
    let log = d.log();
    assert!(log.contains("event=session_resume "), "{log}");
    assert!(!log.contains("event=session_resume_failed"), "{log}");
    assert_eq!(after_create_runs(&dir), 1);
}

/// A fake board whose issue moves to In Review once the model sees the interrupted-run prompt.
fn board_ending_on_resume() -> (Arc<FakeGithub>, impl Fn(&str) + Send + Sync + 'static) {
    let github = Arc::new(FakeGithub::start(board()));
    let g = Arc::clone(&github);
    let on_prompt = move |last_user: &str| {
        if last_user.contains("was interrupted") {
            g.set_status(ISSUE, Some("In Review"));
        }
    };
    (github, on_prompt)
}

#[cfg(feature = "codex")]
#[test]
#[ignore = "needs the real codex CLI (BATON_CODEX_BIN, .ci/setup-codex.sh)"]
fn real_codex_sigterm_restart_resumes_the_thread() {
    let codex = tool::required("BATON_CODEX_BIN", ".ci/setup-codex.sh");
    let (github, on_prompt) = board_ending_on_resume();
    let api = FakeResponses::start_with_hook(move |r| on_prompt(&r.last_user));
    let home =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("restart-{}", std::process::id()));
    let agent = agent_yaml_args("codex", &codex, " app-server", "  max_turns: 3\n", "");
    let resumed = || {
        let reqs = api.requests();
        let r = reqs
            .iter()
            .find(|r| r.last_user.contains("was interrupted"))?;
        Some(r.thread.is_some() && r.thread == reqs[0].thread && r.prompts == 2)
    };
    let requests = || api.requests().len();
    let env = codex_env(&api, &home);
    real_sigterm_restart("codex-restart", &github, &agent, env, &requests, &resumed);
}

#[cfg(feature = "gemini")]
#[test]
#[ignore = "needs the real gemini CLI (BATON_GEMINI_BIN, .ci/setup-gemini.sh)"]
fn real_gemini_sigterm_restart_resumes_the_session() {
    let gemini = tool::required("BATON_GEMINI_BIN", ".ci/setup-gemini.sh");
    let (github, on_prompt) = board_ending_on_resume();
    let api = FakeGemini::start_with_hook(move |r| on_prompt(&r.last_user));
    let keys = "  model: gemini-2.5-flash\n  auth_type: gemini-api-key\n";
    let agent = agent_yaml("gemini", &gemini, "  max_turns: 3\n", keys);
    // The resumed session carries the interrupted turn's prompt.
    let resumed = || {
        let reqs = api.requests();
        let r = reqs
            .iter()
            .find(|r| r.last_user.contains("was interrupted"))?;
        Some(r.prompts == 2)
    };
    let requests = || api.requests().len();
    let env = gemini_env(&api.base_url);
    real_sigterm_restart("gemini-restart", &github, &agent, env, &requests, &resumed);
}

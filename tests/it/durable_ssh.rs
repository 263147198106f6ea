//! Restart recovery with SSH worker hosts: an agent group recorded on a remote host is checked
//! and stopped only through that host (never by a local signal), and while the host does not
//! answer the issue waits (`worker.orphan_grace_ms`) instead of running elsewhere. The "remote"
//! hosts are private sshd servers on 127.0.0.1 (tests/it/support/sshd.rs), some in a PID
//! namespace of their own so their process ids are not this machine's. Needs `BATON_SSHD`.

use crate::support::daemon_proc::{logged_runs, DaemonProc};
use crate::support::fake_github::{
    issue_node_id, BoardFixture, FakeGithub, IssueFixture, FAKE_TOKEN,
};
use crate::support::procs;
use crate::support::procs::processes_matching;
use crate::support::sshd::Lab;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ISSUE: &str = "acme/api#1";
const IDENT: &str = "acme__api-1";
const LIMIT: Duration = Duration::from_secs(60);

/// An agent that records where it ran and hangs (its `sleep` carries `$E2E_MARK`).
const FAKE_AGENT: &str = r#"#!/usr/bin/env bash
printf 'run host=%s\n' "$BATON_TEST_HOST" >> "$E2E_LOG"
echo '{"type":"system","subtype":"init","session_id":"5a5e55e0-0000-4000-8000-000000000001","model":"fake","tools":[]}'
sleep "$E2E_MARK" &
wait
"#;

struct Setup {
    lab: Lab,
    _github: FakeGithub,
    wf: PathBuf,
    log: PathBuf,
    mark: String,
}

/// A lab of `servers` hosts (in PID namespaces when `pid_ns`), a one-issue board and a workflow
/// running on `hosts` with the state in `<tmp>/state`.
fn setup(tag: &str, servers: usize, pid_ns: bool, hosts: &str, grace_ms: u64) -> Setup {
    let mark = format!("300.{}{}", std::process::id(), tag.len());
    let log = PathBuf::from(format!("/tmp/bs-{}-{tag}-agent.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let env = [
        ("E2E_LOG", log.to_str().unwrap()),
        ("E2E_MARK", mark.as_str()),
    ];
    let lab = Lab::start_in(tag, servers, &env, "", pid_ns);
    let mut board = BoardFixture::empty("acme", 7);
    board.push_issue(IssueFixture::new("acme/api", 1, "work"), Some("Todo"));
    let github = FakeGithub::start(board);
    let dir = &lab.tmp.0;
    let agent = dir.join("fake-claude");
    std::fs::write(&agent, FAKE_AGENT).unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let wf = dir.join("WORKFLOW.md");
    let text = format!(
        "---\ntracker:\n  kind: github_projects\n  endpoint: {}\n  token: $BATON_E2E_TOKEN\n  owner: acme\n  project_number: 7\n  active_states: [Todo]\n  terminal_states: [Done]\npolling:\n  interval_ms: 600000\nworkspace:\n  root: {}\nstate:\n  dir: {}\nagent:\n  kind: claude_code\n  max_turns: 1\nclaude_code:\n  command: \"'{}'\"\nworker:\n  ssh_hosts: [{hosts}]\n  orphan_grace_ms: {grace_ms}\n---\nWork on {{{{ issue.identifier }}}}\n",
        github.endpoint(),
        dir.join("ws").display(),
        dir.join("state").display(),
        agent.display(),
    );
    std::fs::write(&wf, text).unwrap();
    Setup {
        lab,
        _github: github,
        wf,
        log,
        mark,
    }
}

impl Setup {
    fn start(&self) -> DaemonProc {
        let envs = [
            ("PATH", self.lab.client.path_env()),
            ("BATON_E2E_TOKEN", FAKE_TOKEN.to_string()),
        ];
        DaemonProc::start(&self.wf, &self.lab.tmp.0, &envs)
    }

    fn state_file(&self) -> PathBuf {
        self.lab.tmp.join("state").join("state.json")
    }

    /// The recorded remote run: (host, pgid, leader start time).
    fn recorded(&self) -> Option<(String, u32, u64)> {
        let s: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.state_file()).ok()?).ok()?;
        let e = s["running"].as_object()?.values().next()?.clone();
        Some((
            e["host"].as_str()?.to_string(),
            e["agent_pid"].as_u64()? as u32,
            e["leader_start"].as_u64()?,
        ))
    }

    fn runs(&self) -> Vec<String> {
        logged_runs(&self.log)
    }
}

/// The state file of a run of the issue recorded on `host` with process group `pgid`.
fn plant(path: &Path, ws: &Path, host: &str, pgid: u32, start: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let id = issue_node_id(ISSUE);
    let doc = serde_json::json!({"version": 2, "running": {id.clone(): {
        "issue": {"id": id, "identifier": IDENT}, "workspace_path": ws.join(IDENT),
        "agent": "claude_code", "agent_pid": pgid, "leader_start": start, "host": host}}});
    std::fs::write(path, doc.to_string()).unwrap();
}

fn line_with<'a>(log: &'a str, needle: &str) -> Option<&'a str> {
    log.lines().find(|l| l.contains(needle))
}

#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn restart_never_signals_a_local_group_for_a_remote_run() {
    let s = setup("rs-local", 1, true, "h1", 600_000);
    // A local process group whose id and start time are exactly what the file records for the
    // run on h1: a local signal would stop it.
    use std::os::unix::process::CommandExt;
    let mut local = std::process::Command::new("sleep")
        .arg("61")
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = local.id();
    let start = baton::host::orphan::leader_start_time(pgid).unwrap();
    plant(&s.state_file(), &s.lab.tmp.join("ws"), "h1", pgid, start);
    let d = s.start();
    d.wait_log("event=orphan_check", LIMIT);
    let log = d.log();
    let check = line_with(&log, "event=orphan_check").unwrap();
    assert!(
        check.contains("host=h1") && check.contains(&format!("pgid={pgid}")),
        "{check}"
    );
    assert!(
        check.contains("outcome=not_running"),
        "h1 has no such group: {check}"
    );
    assert!(!log.contains("event=orphan_stopped"), "{log}");
    // The issue runs again, on its host.
    d.wait("the re-dispatch", LIMIT, || s.runs().first().cloned());
    assert_eq!(s.runs()[0], "run host=h1");
    assert!(
        procs::pid_alive(pgid as i32),
        "the local group was never signalled"
    );
    let _ = local.kill();
    let _ = local.wait();
}

#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn restart_stops_a_remote_orphan_through_its_host() {
    let s = setup("rs-stop", 1, true, "h1", 600_000);
    let mut d = s.start();
    let (host, pgid, start) = d.wait("the recorded remote run", LIMIT, || {
        let r = s.recorded().filter(|r| r.2 > 0)?;
        (!processes_matching(&s.mark).is_empty()).then_some(r)
    });
    assert_eq!(host, "h1");
    let agent = processes_matching(&s.mark);
    assert!(
        !agent.contains(&(pgid as i32)),
        "the recorded group is h1's (its PID namespace), not this machine's"
    );
    // Keep the remote watcher from reacting to the dropped connection (a host that does not
    // notice), so the agent outlives Baton there.
    let watchers = processes_matching("baton-watch");
    for w in &watchers {
        // SAFETY: kill(2) on a process of this test's sshd.
        unsafe { libc::kill(*w, libc::SIGSTOP) };
    }
    assert_eq!(d.stop_with(libc::SIGKILL, LIMIT).code(), None);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !processes_matching(&s.mark).is_empty(),
        "an orphan is left on h1"
    );
    let d = s.start();
    d.wait_log("event=orphan_stopped", LIMIT);
    let log = d.log();
    let stopped = line_with(&log, "event=orphan_stopped").unwrap();
    assert!(
        stopped.contains("host=h1") && stopped.contains(&format!("pgid={pgid}")),
        "{stopped}"
    );
    assert!(
        sshd_wait_none(&s.mark, &agent),
        "the old agent is gone on h1"
    );
    for w in &watchers {
        // SAFETY: as above.
        unsafe { libc::kill(*w, libc::SIGCONT) };
    }
    assert!(start > 0);
    // Then the session resumes, on its host.
    d.wait("the resumed run", LIMIT, || s.runs().get(1).cloned());
    assert_eq!(s.runs()[1], "run host=h1");
}

/// True once none of `old` is alive any more (bounded).
fn sshd_wait_none(mark: &str, old: &[i32]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !processes_matching(mark).iter().any(|p| old.contains(p)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
#[ignore = "needs OpenSSH's sshd (BATON_SSHD, .ci/setup-ssh.sh)"]
fn restart_waits_for_an_unreachable_host_before_redispatch() {
    let grace = Duration::from_secs(4);
    let mut s = setup("rs-wait", 2, false, "h1, h2", grace.as_millis() as u64);
    let mut d = s.start();
    let (host, pgid, _) = d.wait("the recorded remote run", LIMIT, || {
        let r = s.recorded().filter(|r| r.2 > 0)?;
        (!processes_matching(&s.mark).is_empty()).then_some(r)
    });
    assert_eq!(host, "h1");
    // h1 goes away without noticing that the connection dropped: what runs there is unknown.
    let watchers = processes_matching("baton-watch");
    for w in &watchers {
        // SAFETY: kill(2) on a process of this test's sshd.
        unsafe { libc::kill(*w, libc::SIGSTOP) };
    }
    assert_eq!(d.stop_with(libc::SIGKILL, LIMIT).code(), None);
    s.lab.servers[0].kill_hard();
    let started = Instant::now();
    let d = s.start();
    d.wait_log("event=orphan_unknown", LIMIT);
    assert!(line_with(&d.log(), "event=orphan_unknown")
        .unwrap()
        .contains("host=h1"));
    // Not dispatched on h2 while the grace runs.
    while started.elapsed() < grace - Duration::from_millis(500) {
        assert_eq!(s.runs().len(), 1, "{}", d.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = d.wait("the run on h2 after the grace", LIMIT, || {
        s.runs().get(1).cloned()
    });
    assert_eq!(second, "run host=h2");
    assert!(started.elapsed() >= grace);
    // The group recorded on h1 (visible here: that sshd shares this machine's pids) was never
    // signalled from here.
    let log = d.log();
    assert!(!log.contains("event=orphan_stopped"), "{log}");
    assert!(
        !procs::live_group_members(pgid as i32).is_empty(),
        "left alone"
    );
    for p in processes_matching(&s.mark).into_iter().chain(watchers) {
        // SAFETY: kill(2) on this test's leftover processes.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
}

//! Orphaned agent process groups checked on this machine (`LocalHost::stop_orphan`, the same
//! script an SSH host runs): a reused pid is never signalled, nor another user's process, and a
//! group that ignores SIGTERM is SIGKILLed.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::procs::{live_group_members, pid_alive};
use baton::host::orphan::leader_start_time;
use baton::host::{Host, LocalHost, OrphanOutcome};

/// The check of the group `pgid` recorded with `start`, as a restart runs it here.
fn stop_local(pgid: u32, start: u64) -> OrphanOutcome {
    LocalHost.stop_orphan(pgid, start).unwrap()
}

fn group_running(pgid: u32) -> bool {
    !live_group_members(pgid as i32).is_empty()
}

/// A child in its own process group, reaped by a thread (as init reaps a dead daemon's orphans),
/// so the group vanishes once its processes exit. The receiver fires when it is reaped.
fn spawn_group(script: &str) -> (u32, mpsc::Receiver<()>) {
    let mut child: Child = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn sh");
    let pgid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = child.wait();
        let _ = tx.send(());
    });
    (pgid, rx)
}

/// Wait (bounded) until `pid` has a readable start time, i.e. it has been forked.
fn start_time_of(pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(t) = leader_start_time(pid) {
            return t;
        }
        assert!(Instant::now() < deadline, "no /proc entry for {pid}");
        thread::yield_now();
    }
}

/// Wait until the shell reports `ready` (its trap is installed) on stdout.
fn wait_ready(rx: &mpsc::Receiver<String>) {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("child did not report ready");
}

#[test]
fn reused_pid_is_left_alone_and_the_recorded_group_is_stopped() {
    let (pgid, reaped) = spawn_group("exec sleep 60");
    let start = start_time_of(pgid);

    let wrong = start.wrapping_add(1);
    let out = stop_local(pgid, wrong);
    assert_eq!(out, OrphanOutcome::StartTimeMismatch);
    assert!(!out.stopped());
    assert!(
        group_running(pgid),
        "a different start time is a reused pid: not signalled"
    );
    assert!(reaped.try_recv().is_err());

    let out = stop_local(pgid, start);
    assert_eq!(out, OrphanOutcome::Terminated);
    assert!(out.stopped());
    assert!(!group_running(pgid));
    reaped.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(!pid_alive(pgid as i32), "reaped");

    assert_eq!(stop_local(pgid, start), OrphanOutcome::NotRunning);
}

#[test]
fn group_ignoring_sigterm_is_killed_after_the_grace_period() {
    // The shell ignores TERM and so does its background child (ignored dispositions are
    // inherited); it reports readiness on stdout once the trap is set.
    let mut child = Command::new("sh")
        .args(["-c", r#"trap "" TERM; sleep 60 & echo ready; wait"#])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    thread::spawn(move || {
        let _ = child.wait();
    });
    wait_ready(&rx);
    let start = start_time_of(pgid);

    let t0 = Instant::now();
    let out = stop_local(pgid, start);
    assert_eq!(out, OrphanOutcome::Killed);
    assert!(
        t0.elapsed() >= Duration::from_secs(3),
        "grace period honoured"
    );
    // The reparented background sleep may linger as a zombie until init reaps it; nothing in
    // the group runs any more.
    assert!(!group_running(pgid), "the background sleep too");
}

#[test]
fn a_group_of_another_user_is_left_alone() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: starting a process as another user needs root");
        return;
    }
    let mut child = Command::new("sleep")
        .arg("60")
        .uid(65534)
        .gid(65534)
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id();
    let start = start_time_of(pgid);
    let out = stop_local(pgid, start);
    assert_eq!(out, OrphanOutcome::NotPermitted);
    assert!(
        group_running(pgid),
        "another user's process was not signalled"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The leader exited but a member of its group lives on: whose group that is cannot be proven,
/// so nothing is signalled. (`kill -0` finds the group, so the check scans `/proc`.)
#[test]
fn a_group_whose_leader_is_gone_is_left_alone() {
    let out = Command::new("sh")
        .args(["-c", "sleep 60 >/dev/null 2>&1 & echo $$ $!"])
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let pids: Vec<u32> = text
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (pgid, member) = (pids[0], pids[1]);
    let out = stop_local(pgid, 12345);
    let alive = pid_alive(member as i32);
    if alive {
        // Before the asserts, so that a failure leaves nothing running. SAFETY: plain syscall on
        // the member this test started (it is alive, so not reused).
        unsafe { libc::kill(member as i32, libc::SIGKILL) };
    }
    assert_eq!(out, OrphanOutcome::LeaderGone);
    assert!(alive, "the member was not signalled");
}

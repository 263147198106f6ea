//! The SSH host pool in the pure core, on a virtual clock (spec Appendix A.2): placement by load
//! and cap, continuation and retry stickiness, waiting when full, host failures before and after
//! the agent started, probes, and cleanup on the owning host.

use crate::support::engine_sim::{poll_started, EngineSim};
use crate::support::issues;

use std::path::PathBuf;

use baton::orchestrator::hosts::{probe_delay, Placement};
use baton::orchestrator::state::{Millis, OrchestratorState, Policy};
use baton::orchestrator::{handle, next_deadline, Action, Event, StopReason, WorkerOutcome};
use issues::issue;

const T0: Millis = 1_700_000_000_000;

struct H {
    s: OrchestratorState,
    now: Millis,
}

impl H {
    fn new(hosts: &[&str], cap: Option<u32>) -> H {
        let p = Policy {
            workspace_root: PathBuf::from("/ws"),
            ssh_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            max_concurrent_agents_per_host: cap,
            ..Policy::default()
        };
        H {
            s: OrchestratorState::new(p, T0),
            now: T0,
        }
    }

    /// A poll tick offering issues 1..=n (all active).
    fn poll(&mut self, n: u64) -> Vec<Action> {
        self.poll_with((1..=n).map(|i| issue(i, "Todo")).collect())
    }

    /// A poll tick whose board is `issues` (the running ones refreshed from it too).
    fn poll_with(&mut self, issues: Vec<baton::model::Issue>) -> Vec<Action> {
        self.now = self.now.max(self.s.poll.next_poll_at);
        let a = self.ev(Event::Wake);
        let running_ids = poll_started(&a).expect("a poll");
        let refreshed = (!running_ids.is_empty()).then(|| Ok(issues.clone()));
        self.ev(Event::PollResult {
            running_ids,
            refreshed,
            candidates: Ok(issues),
            rate_limit: None,
        })
    }

    fn exit(&mut self, n: u64, outcome: WorkerOutcome) -> Vec<Action> {
        let id = format!("I_{n}");
        let run_id = self.s.running[&id].run_id;
        self.ev(Event::WorkerExited {
            issue_id: id,
            run_id,
            outcome,
        })
    }
}

impl EngineSim for H {
    fn parts(&mut self) -> (&mut OrchestratorState, &mut Millis) {
        (&mut self.s, &mut self.now)
    }

    fn ev(&mut self, e: Event) -> Vec<Action> {
        handle(&mut self.s, e, self.now)
    }
}

/// (issue id, host, attempt) of each dispatch.
fn dispatches(a: &[Action]) -> Vec<(String, Option<String>, Option<u32>)> {
    a.iter()
        .filter_map(|x| match x {
            Action::Dispatch {
                issue,
                host,
                attempt,
                ..
            } => Some((issue.id.clone(), host.clone(), *attempt)),
            _ => None,
        })
        .collect()
}

/// (issue id, host, stale workspace) of each dispatch.
fn placed(a: &[Action]) -> Vec<(String, Option<String>, bool)> {
    a.iter()
        .filter_map(|x| match x {
            Action::Dispatch {
                issue,
                host,
                stale_workspace,
                ..
            } => Some((issue.id.clone(), host.clone(), *stale_workspace)),
            _ => None,
        })
        .collect()
}

/// The hosts of the workspace removals `a` asks for.
fn clean_hosts(a: &[Action]) -> Vec<Option<String>> {
    a.iter()
        .filter_map(|x| match x {
            Action::CleanWorkspace { host, .. } => Some(host.clone()),
            _ => None,
        })
        .collect()
}

fn host(h: &str) -> Option<String> {
    Some(h.to_string())
}

#[test]
fn without_hosts_everything_is_local() {
    let mut h = H::new(&[], None);
    let d = dispatches(&h.poll(2));
    assert_eq!(d.len(), 2);
    assert!(d.iter().all(|(_, host, _)| host.is_none()));
}

#[test]
fn least_loaded_host_and_the_per_host_cap_with_the_global_cap() {
    let mut h = H::new(&["a", "b"], Some(2));
    let d = dispatches(&h.poll(6));
    let on = |x: &str| {
        d.iter()
            .filter(|(_, hh, _)| hh.as_deref() == Some(x))
            .count()
    };
    assert_eq!((on("a"), on("b")), (2, 2), "{d:?}");
    // Alternating: least loaded first, ties in config order.
    assert_eq!(d[0].1, host("a"));
    assert_eq!(d[1].1, host("b"));
    // Full: the rest wait (never local).
    assert_eq!(
        baton::orchestrator::hosts::place(&h.s, None),
        Placement::Full
    );
    assert!(dispatches(&h.poll(6)).is_empty());
    // A freed slot is used on the next tick, on the host that has it.
    h.exit(2, WorkerOutcome::Failed("boom".into()));
    let d = dispatches(&h.poll(6));
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].1, host("b"));
    // The global cap still counts: 3 slots overall.
    let mut h = H::new(&["a", "b"], Some(5));
    h.s.policy.max_concurrent_agents = 3;
    assert_eq!(dispatches(&h.poll(6)).len(), 3);
}

#[test]
fn continuations_and_retries_prefer_the_previous_host() {
    let mut h = H::new(&["a", "b"], None);
    h.poll(2); // I_1 on a, I_2 on b
    h.exit(2, WorkerOutcome::Normal);
    assert_eq!(h.s.retry_attempts["I_2"].host, host("b"));
    // a is less loaded after I_1 exits, but I_2's continuation goes back to b.
    h.exit(1, WorkerOutcome::Failed("x".into()));
    let d = dispatches(&h.fire_retry(2, Ok(Some(issue(2, "Todo")))));
    assert_eq!(d, vec![("I_2".into(), host("b"), Some(1))]);
    let d = dispatches(&h.fire_retry(1, Ok(Some(issue(1, "Todo")))));
    assert_eq!(d, vec![("I_1".into(), host("a"), Some(1))]);
}

#[test]
fn a_host_failure_before_the_agent_started_redispatches_elsewhere_without_an_attempt() {
    let mut h = H::new(&["a", "b"], None);
    h.poll(1);
    assert_eq!(h.s.running["I_1"].host, host("a"));
    let runs_before = h.s.runs_since_active["I_1"];
    h.exit(
        1,
        WorkerOutcome::HostFailed {
            started: false,
            error: "host_unavailable: ssh a: Connection refused".into(),
        },
    );
    assert!(h.s.hosts_down.contains_key("a"));
    assert_eq!(
        h.s.runs_since_active["I_1"],
        runs_before - 1,
        "the run does not count"
    );
    let d = dispatches(&h.fire_retry(1, Ok(Some(issue(1, "Todo")))));
    assert_eq!(
        d,
        vec![("I_1".into(), host("b"), None)],
        "a first run again, on b"
    );
}

#[test]
fn a_host_failure_after_start_is_a_normal_failed_attempt() {
    let mut h = H::new(&["a", "b"], None);
    h.poll(1);
    h.exit(
        1,
        WorkerOutcome::HostFailed {
            started: true,
            error: "agent turn error: exit code 255; host_unavailable: ssh a".into(),
        },
    );
    let r = &h.s.retry_attempts["I_1"];
    assert_eq!(r.attempt, 1);
    assert!(r.error.as_deref().unwrap().contains("host_unavailable"));
    assert!(r.due_at >= h.now + 10_000, "failure backoff");
    let d = dispatches(&h.fire_retry(1, Ok(Some(issue(1, "Todo")))));
    assert_eq!(d, vec![("I_1".into(), host("b"), Some(1))], "a is down");
}

#[test]
fn down_hosts_are_probed_with_backoff_and_come_back() {
    let mut h = H::new(&["a"], Some(1));
    h.poll(1);
    h.exit(
        1,
        WorkerOutcome::HostFailed {
            started: false,
            error: "host_unavailable: ssh a".into(),
        },
    );
    // The only host is down: the retry waits (no slot), never runs locally.
    let d = dispatches(&h.fire_retry(1, Ok(Some(issue(1, "Todo")))));
    assert!(d.is_empty());
    // The probe is a deadline; a failed probe backs off, a good one brings the host back.
    let probe_at = h.s.hosts_down["a"].probe_at;
    assert_eq!(probe_at, T0 + probe_delay(1));
    assert!(next_deadline(&h.s).unwrap() <= probe_at);
    h.now = probe_at;
    let a = h.ev(Event::Wake);
    assert!(a.contains(&Action::ProbeHost { host: "a".into() }), "{a:?}");
    h.ev(Event::HostProbed {
        host: "a".into(),
        result: Err("host_unavailable: still".into()),
    });
    assert_eq!(h.s.hosts_down["a"].probe_at, h.now + probe_delay(2));
    h.ev(Event::HostProbed {
        host: "a".into(),
        result: Ok(()),
    });
    assert!(h.s.hosts_down.is_empty());
    let d = dispatches(&h.fire_retry(1, Ok(Some(issue(1, "Todo")))));
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].1, host("a"));
}

#[test]
fn terminal_cleanup_runs_on_the_owning_host() {
    let mut h = H::new(&["a", "b"], None);
    h.poll(2);
    let run_id = h.s.running["I_2"].run_id;
    h.s.running.get_mut("I_2").unwrap().stop = Some(StopReason::Terminal);
    let a = h.ev(Event::WorkerExited {
        issue_id: "I_2".into(),
        run_id,
        outcome: WorkerOutcome::Cancelled,
    });
    let clean = clean_hosts(&a);
    assert_eq!(clean, vec![host("b")]);
}

#[test]
fn startup_cleanup_on_every_host_holds_the_issue_until_the_last_removal() {
    let mut h = H::new(&["a", "b"], None);
    let a = h.ev(Event::TerminalAtStartup(vec![issue(3, "Done")]));
    let clean = clean_hosts(&a);
    // No record says which host holds an old workspace: it is removed wherever it may be.
    assert_eq!(clean, vec![host("a"), host("b")]);
    let removed = || Event::WorkspaceRemoved {
        issue_id: "I_3".into(),
    };
    h.ev(removed());
    let d = dispatches(&h.poll(3));
    assert!(
        d.iter().all(|(id, ..)| id != "I_3"),
        "held while host b still removes: {d:?}"
    );
    h.ev(removed());
    assert!(h.s.cleaning.is_empty(), "released by the last removal");
}

#[test]
fn reload_applies_hosts_to_future_dispatches() {
    let mut h = H::new(&["a"], Some(1));
    h.poll(1);
    let mut p = h.s.policy.clone();
    p.ssh_hosts = vec!["c".into()];
    h.ev(Event::ConfigReloaded(p));
    let d = dispatches(&h.poll(2));
    assert_eq!(d, vec![("I_2".into(), host("c"), None)]);
    assert_eq!(
        h.s.running["I_1"].host,
        host("a"),
        "running work is not moved"
    );
}

/// Issue 24 item 6: an issue that left the active states and came back returns to the host that
/// holds its workspace, even when another host is less loaded (before: the least-loaded host,
/// leaving the old workspace behind). When it had to move (its host was down), a later run back
/// on the old host is told to replace the stale copy, never to reuse it, and terminal cleanup
/// removes the copies on every host that holds one.
#[test]
fn a_reactivated_issue_returns_to_its_host_and_never_reuses_a_stale_copy() {
    let mut h = H::new(&["a", "b"], None);
    let leave_and_exit = |h: &mut H, board: Vec<baton::model::Issue>| {
        let a = h.poll_with(board);
        assert!(
            a.iter().any(|x| matches!(x, Action::StopWorker { .. })),
            "{a:?}"
        );
        h.exit(1, WorkerOutcome::Cancelled);
    };
    assert_eq!(
        placed(&h.poll_with(vec![issue(1, "Todo")])),
        vec![("I_1".into(), host("a"), false)]
    );
    leave_and_exit(&mut h, vec![issue(1, "Human Review")]);
    assert!(h.s.retry_attempts.is_empty(), "no retry remembers the host");
    // I_2 takes a: now b is the least loaded host.
    let board = || vec![issue(1, "Todo"), issue(2, "Todo")];
    assert_eq!(
        placed(&h.poll_with(vec![issue(1, "Human Review"), issue(2, "Todo")])),
        vec![("I_2".into(), host("a"), false)]
    );
    assert_eq!(
        placed(&h.poll_with(board())),
        vec![("I_1".into(), host("a"), false)],
        "back to the host with the workspace"
    );
    // Its host is down when it comes back: it moves to b (a fresh workspace there).
    leave_and_exit(&mut h, vec![issue(1, "Human Review"), issue(2, "Todo")]);
    baton::orchestrator::hosts::mark_down(&mut h.s, "a", "host_unavailable: x", h.now);
    assert_eq!(
        placed(&h.poll_with(board())),
        vec![("I_1".into(), host("b"), false)]
    );
    // Back on a later: the copy there is older than b's, so the run replaces it.
    leave_and_exit(&mut h, vec![issue(1, "Human Review"), issue(2, "Todo")]);
    h.ev(Event::HostProbed {
        host: "a".into(),
        result: Ok(()),
    });
    baton::orchestrator::hosts::mark_down(&mut h.s, "b", "host_unavailable: x", h.now);
    assert_eq!(
        placed(&h.poll_with(board())),
        vec![("I_1".into(), host("a"), true)]
    );
    // Done: both copies are removed, each on its own host.
    h.poll_with(vec![issue(1, "Done"), issue(2, "Todo")]);
    let a = h.exit(1, WorkerOutcome::Cancelled);
    assert_eq!(clean_hosts(&a), vec![host("a"), host("b")]);
    assert!(!h.s.workspace_hosts.contains_key("I_1"));
}

/// The hosts holding each issue's workspace copies survive a restart (`state.json`): a
/// re-activated issue goes back to the host with its latest copy, not the least loaded one, and
/// terminal cleanup still removes the copies on every recorded host.
#[test]
fn a_restart_keeps_the_hosts_holding_each_workspace() {
    use baton::orchestrator::restore::{parse, restore, to_json};
    let mut h = H::new(&["a", "b"], None);
    let leave_and_exit = |h: &mut H| {
        h.poll_with(vec![issue(1, "Human Review")]);
        h.exit(1, WorkerOutcome::Cancelled);
    };
    h.poll_with(vec![issue(1, "Todo")]);
    leave_and_exit(&mut h);
    // Its host is down when it comes back: the latest copy is now on b.
    baton::orchestrator::hosts::mark_down(&mut h.s, "a", "host_unavailable: x", h.now);
    assert_eq!(
        placed(&h.poll_with(vec![issue(1, "Todo")])),
        vec![("I_1".into(), host("b"), false)]
    );
    leave_and_exit(&mut h);
    assert_eq!(h.s.workspace_hosts["I_1"], ["b", "a"]);

    // Restart: both hosts are up and idle, so placement alone would pick a (config order).
    let stored = parse(&to_json(&h.s).unwrap()).unwrap();
    let (s, _) = restore(stored, h.s.policy.clone(), h.now);
    h.s = s;
    assert_eq!(h.s.workspace_hosts["I_1"], ["b", "a"]);
    assert_eq!(
        placed(&h.poll_with(vec![issue(1, "Todo")])),
        vec![("I_1".into(), host("b"), false)],
        "back to the host with the latest workspace"
    );
    // Done: the copies on both hosts are removed, each on its own host.
    h.poll_with(vec![issue(1, "Done")]);
    let a = h.exit(1, WorkerOutcome::Cancelled);
    assert_eq!(clean_hosts(&a), vec![host("b"), host("a")]);
    assert!(!h.s.workspace_hosts.contains_key("I_1"));
}

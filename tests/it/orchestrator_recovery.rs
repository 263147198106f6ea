//! Durable state through the pure core on a virtual clock: the engine records a run's durable
//! facts from its events, `state.json` is the projection of that state, a "restart" restores it
//! with one pure function, and the engine carries on: the interrupted run waits for its orphan
//! check, then resumes its session counting only the usage that comes on top.

use crate::support::issues::issue;

use baton::agent::{AgentEvent, AgentEventKind, TokenUsage};
use baton::orchestrator::restore::{parse, restore, to_json};
use baton::orchestrator::state::{Budget, OrchestratorState, Policy, RetryEntry, RetryKind};
use baton::orchestrator::{handle, Action, Event, ParkKind, WorkerOutcome};

fn dispatched(actions: &[Action]) -> Vec<(String, u64, Option<u32>, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Dispatch {
                run_id,
                issue,
                attempt,
                resume,
                ..
            } => Some((issue.id.clone(), *run_id, *attempt, resume.is_some())),
            _ => None,
        })
        .collect()
}

fn poll(candidates: Vec<baton::model::Issue>) -> Event {
    Event::PollResult {
        running_ids: vec![],
        refreshed: None,
        candidates: Ok(candidates),
        rate_limit: None,
    }
}

fn update(id: &str, run_id: u64, event: AgentEvent) -> Event {
    Event::AgentUpdates {
        issue_id: id.into(),
        run_id,
        events: vec![event],
    }
}

/// A Claude turn's terminal event: per-invocation tokens, the session's cumulative cost.
fn claude_turn(session: &str, tokens: u64, cumulative_cost: f64) -> AgentEvent {
    let mut ev = AgentEvent::new(AgentEventKind::TurnCompleted, "turn completed");
    ev.agent_session_id = Some(session.into());
    ev.agent_pid = Some(4321);
    ev.agent_start_time = Some(99_999);
    ev.usage_delta = Some(TokenUsage {
        input_tokens: tokens,
        ..TokenUsage::default()
    });
    ev.session_cost_usd = Some(cumulative_cost);
    ev
}

/// Project, write, read and restore `st` at `now` (a restart), and answer the orphan checks
/// (the old group was gone): the state the new process runs with.
fn restart(st: &OrchestratorState, policy: &Policy, now: u64) -> OrchestratorState {
    let stored = parse(&to_json(st).unwrap()).unwrap();
    let (mut st2, actions) = restore(stored, policy.clone(), now);
    for a in actions {
        let Action::StopOrphan { issue_id, .. } = a else {
            panic!("{a:?}");
        };
        let ev = Event::OrphanChecked {
            issue_id,
            result: Ok(false),
        };
        assert!(handle(&mut st2, ev, now).is_empty());
    }
    st2
}

/// Wake at `now`, refresh the due retry of `id` with the issue still active: the dispatch.
fn resume_retry(st: &mut OrchestratorState, id: &str, n: u64, now: u64) -> Vec<Action> {
    let acts = handle(st, Event::Wake, now);
    let seq = acts
        .iter()
        .find_map(|a| match a {
            Action::FetchIssues { retries, .. } => {
                retries.iter().find(|(i, _)| i == id).map(|(_, seq)| *seq)
            }
            _ => None,
        })
        .expect("the retry is fetched");
    let (op, points) = (baton::orchestrator::TrackerOp::Fetch, 1);
    handle(st, Event::TrackerSpent { op, points }, now);
    let ev = Event::RetryRefreshed {
        issue_id: id.into(),
        seq,
        result: Ok(Some(issue(n, "Todo"))),
    };
    handle(st, ev, now + 5)
}

#[test]
fn restart_restores_retries_parked_counts_and_resumes_the_interrupted_session() {
    let t0 = 1_796_000_000_000;
    let policy = Policy {
        active_states: vec!["Todo".into()],
        max_attempts: Some(1),
        workspace_root: "/ws".into(),
        agent: "claude_code".into(),
        ..Policy::default()
    };
    let mut st = OrchestratorState::new(policy.clone(), t0);
    let _ = handle(&mut st, Event::Wake, t0);
    let acts = handle(
        &mut st,
        poll(vec![issue(1, "Todo"), issue(2, "Todo"), issue(3, "Todo")]),
        t0,
    );
    let runs = dispatched(&acts);
    let run_of = |id: &str| runs.iter().find(|r| r.0 == id).unwrap().1;
    // Issue 1's agent starts: its own session id, process group, start time and usage are
    // facts of the running entry.
    let _ = handle(
        &mut st,
        update("I_1", run_of("I_1"), claude_turn("sess-abc", 100, 0.5)),
        t0 + 10,
    );
    let e = &st.running["I_1"];
    assert_eq!(
        (e.agent_session.as_deref(), e.agent_pid, e.leader_start),
        (Some("sess-abc"), Some(4321), Some(99_999))
    );
    assert_eq!(e.agent, "claude_code");
    // Issue 3 fails twice (parked by max_attempts 1), issue 2 once (backoff retry 10 s).
    let t1 = t0 + 2_000;
    for (id, at) in [("I_3", t1), ("I_2", t1 + 9_000)] {
        let ev = Event::WorkerExited {
            issue_id: id.into(),
            run_id: run_of(id),
            outcome: WorkerOutcome::Failed("boom".into()),
        };
        let _ = handle(&mut st, ev, at);
    }
    let again = resume_retry(&mut st, "I_3", 3, t1 + 10_000);
    let ev = Event::WorkerExited {
        issue_id: "I_3".into(),
        run_id: dispatched(&again)[0].1,
        outcome: WorkerOutcome::Failed("boom".into()),
    };
    let _ = handle(&mut st, ev, t1 + 10_500);
    assert!(st.blocked.contains_key("I_3"), "parked before the restart");
    let i2_due = st.retry_attempts["I_2"].due_at;

    // Restart 3 s later.
    let now2 = t1 + 14_000;
    let stored = parse(&to_json(&st).unwrap()).unwrap();
    let (mut st2, actions) = restore(stored, policy, now2);
    assert_eq!(
        actions,
        [Action::StopOrphan {
            issue_id: "I_1".into(),
            host: None,
            pgid: 4321,
            leader_start: 99_999,
        }]
    );
    let r1 = &st2.retry_attempts["I_1"];
    assert_eq!(
        (r1.due_at, r1.kind, r1.attempt),
        (now2, RetryKind::Continuation, 1)
    );
    assert_eq!(
        st2.retry_attempts["I_2"].due_at, i2_due,
        "original due time"
    );
    assert!(st2.blocked.contains_key("I_3"), "still parked");
    assert_eq!(st2.blocked["I_3"].kind, ParkKind::MaxAttempts);
    assert_eq!(st2.runs_since_active["I_1"], 0);
    assert_eq!(st2.runs_since_active["I_3"], 2);
    assert_eq!(st2.spend["I_1"].turns, 1, "the budgets keep counting");
    assert_eq!(st2.agent_totals.cost_usd, 0.5);

    // Nothing runs for issue 1 before its old agent is known to be stopped; a poll does not
    // dispatch the claimed or parked issues either.
    assert!(handle(&mut st2, Event::Wake, now2)
        .iter()
        .all(|a| !matches!(a, Action::FetchIssues { .. })));
    let acts = handle(
        &mut st2,
        poll(vec![issue(1, "Todo"), issue(2, "Todo"), issue(3, "Todo")]),
        now2,
    );
    assert!(dispatched(&acts).is_empty(), "{acts:?}");
    let checked = Event::OrphanChecked {
        issue_id: "I_1".into(),
        result: Ok(true),
    };
    let _ = handle(&mut st2, checked, now2 + 1);
    let d = dispatched(&resume_retry(&mut st2, "I_1", 1, now2 + 2));
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].0.as_str(), d[0].2, d[0].3), ("I_1", Some(1), true));
    let e = &st2.running["I_1"];
    assert!(e.resumed);
    assert_eq!(e.agent_session.as_deref(), Some("sess-abc"));
    assert_eq!(st2.runs_since_active.get("I_1"), Some(&1), "counted once");
    assert_eq!(st2.counters.orphans_stopped, 1);
}

/// Issue 1 dispatched at `t0` under `policy`, its agent group 777 and session `sess-1` reported.
fn running_with_group(policy: &Policy, t0: u64) -> OrchestratorState {
    let mut st = OrchestratorState::new(policy.clone(), t0);
    let _ = handle(&mut st, Event::Wake, t0);
    let d = dispatched(&handle(&mut st, poll(vec![issue(1, "Todo")]), t0));
    let mut ev = claude_turn("sess-1", 1, 0.1);
    ev.agent_pid = Some(777);
    let _ = handle(&mut st, update("I_1", d[0].1, ev), t0);
    st
}

#[cfg(feature = "ssh")] // the host pool marks the host down and probes it
#[test]
fn an_unreachable_host_holds_the_issue_until_it_answers_or_the_grace_passes() {
    let t0 = 1_796_000_000_000;
    let policy = Policy {
        active_states: vec!["Todo".into()],
        workspace_root: "/ws".into(),
        ssh_hosts: vec!["a".into(), "b".into()],
        orphan_grace_ms: 600_000,
        ..Policy::default()
    };
    let st = running_with_group(&policy, t0);
    assert_eq!(st.running["I_1"].host.as_deref(), Some("a"));
    let (mut st2, actions) = restore(parse(&to_json(&st).unwrap()).unwrap(), policy, t0 + 10);
    assert!(
        matches!(&actions[..], [Action::StopOrphan { host: Some(h), pgid: 777, .. }] if h == "a")
    );
    let unreachable = Event::OrphanChecked {
        issue_id: "I_1".into(),
        result: Err("host_unavailable: ssh a: timed out".into()),
    };
    let _ = handle(&mut st2, unreachable, t0 + 20);
    assert!(st2.hosts_down.contains_key("a"), "probed until it answers");
    // While unknown, the issue is not run anywhere, however often the loop wakes.
    wake_until(&mut st2, t0 + 20, t0 + 10 + 600_000, |st, a, now| {
        assert!(!matches!(
            a,
            Action::FetchIssues { .. } | Action::Dispatch { .. }
        ));
        if let Action::ProbeHost { host } = a {
            let failed = Event::HostProbed {
                host,
                result: Err("host_unavailable: still down".into()),
            };
            let _ = handle(st, failed, now);
        }
    });
    // The grace is over: the issue may run again, on the host that is up.
    assert_fetched_after_grace(&mut st2, t0 + 10 + 600_000);
}

/// Wake the engine at each of its deadlines after `from` and before `until`, handing every action
/// (with the state and the time) to `check`.
fn wake_until(
    st: &mut OrchestratorState,
    from: u64,
    until: u64,
    mut check: impl FnMut(&mut OrchestratorState, Action, u64),
) {
    let mut now = from;
    loop {
        now = baton::orchestrator::next_deadline(st).unwrap().max(now + 1);
        if now >= until {
            return;
        }
        for a in handle(st, Event::Wake, now) {
            check(st, a, now);
        }
    }
}

/// At `at` the orphan of issue 1 is given up and its retry fetched.
fn assert_fetched_after_grace(st: &mut OrchestratorState, at: u64) {
    let acts = handle(st, Event::Wake, at);
    assert!(st.orphans.is_empty());
    let fetched = acts
        .iter()
        .any(|a| matches!(a, Action::FetchIssues { retries, .. } if retries[0].0 == "I_1"));
    assert!(fetched, "{acts:?}");
}

/// A run recorded on an SSH host that is no longer configured (or a state file from a build with
/// `ssh` read by one without it): that host is never contacted, probed or marked down, and the
/// issue waits out the orphan grace before it may run again.
#[test]
fn a_remote_orphan_of_an_unconfigured_host_holds_the_issue_until_the_grace_passes() {
    let t0 = 1_796_000_000_000;
    let policy = Policy {
        active_states: vec!["Todo".into()],
        workspace_root: "/ws".into(),
        orphan_grace_ms: 600_000,
        ..Policy::default()
    };
    let mut st = running_with_group(&policy, t0);
    st.running.get_mut("I_1").unwrap().host = Some("old-host".into());
    let (mut st2, actions) = restore(parse(&to_json(&st).unwrap()).unwrap(), policy, t0 + 10);
    assert!(actions.is_empty(), "{actions:?}");
    wake_until(&mut st2, t0 + 10, t0 + 10 + 600_000, |_, a, _| {
        assert!(
            matches!(a, Action::StartPoll { .. }),
            "only polls while the orphan is unknown: {a:?}"
        );
    });
    assert!(st2.hosts_down.is_empty());
    assert_fetched_after_grace(&mut st2, t0 + 10 + 600_000);
}

/// The per-issue cost budget parks an issue after the same turn whether or not Baton restarted
/// (killed mid-run) in between: the resumed session's cumulative cost is counted once.
#[test]
fn a_budget_parks_at_the_same_turn_with_or_without_a_restart() {
    let policy = Policy {
        active_states: vec!["Todo".into()],
        workspace_root: "/ws".into(),
        agent: "claude_code".into(),
        budget: Budget {
            max_cost_usd_per_issue: Some(1.0),
            ..Budget::default()
        },
        ..Policy::default()
    };
    // Each turn costs 0.3 and 1,000 tokens: the budget is reached after turn 4 (1.2 >= 1.0).
    let parked_after = |restart_after: Option<u32>| -> (u32, f64, u64) {
        let t0 = 1_796_000_000_000;
        let mut st = OrchestratorState::new(policy.clone(), t0);
        let _ = handle(&mut st, Event::Wake, t0);
        let mut run = dispatched(&handle(&mut st, poll(vec![issue(1, "Todo")]), t0))[0].1;
        let mut now = t0;
        for turn in 1..=10u32 {
            now += 1_000;
            let cost = 0.3 * f64::from(turn);
            let acts = handle(
                &mut st,
                update("I_1", run, claude_turn("s", 1_000, cost)),
                now,
            );
            if acts.iter().any(|a| matches!(a, Action::StopWorker { .. })) {
                let ev = Event::WorkerExited {
                    issue_id: "I_1".into(),
                    run_id: run,
                    outcome: WorkerOutcome::Cancelled,
                };
                let _ = handle(&mut st, ev, now);
                let b = &st.blocked["I_1"];
                assert_eq!(b.kind, ParkKind::BudgetExceeded);
                let sp = st.spend["I_1"];
                return (sp.turns, sp.cost_usd, sp.tokens.total_tokens);
            }
            if restart_after == Some(turn) {
                // kill -9: the running entry is all that is left.
                now += 60_000;
                st = restart(&st, &policy, now);
                let d = dispatched(&resume_retry(&mut st, "I_1", 1, now));
                assert!(d[0].3, "resumed");
                run = d[0].1;
                now += 5;
            }
        }
        panic!("never parked");
    };
    let without = parked_after(None);
    assert_eq!(without.0, 4);
    assert!((without.1 - 1.2).abs() < 1e-9);
    for k in 1..=3 {
        let with = parked_after(Some(k));
        assert_eq!(with.0, without.0, "same turn (restart after turn {k})");
        assert!(
            (with.1 - without.1).abs() < 1e-9,
            "cost {} vs {}",
            with.1,
            without.1
        );
        assert_eq!(with.2, without.2, "tokens");
    }
}

#[test]
fn spend_and_totals_never_overflow_decrease_or_reset() {
    let policy = Policy {
        active_states: vec!["Todo".into()],
        workspace_root: "/ws".into(),
        ..Policy::default()
    };
    let t0 = 1_796_000_000_000;
    let mut st = OrchestratorState::new(policy.clone(), t0);
    let _ = handle(&mut st, Event::Wake, t0);
    let run = dispatched(&handle(&mut st, poll(vec![issue(1, "Todo")]), t0))[0].1;
    let mut last = 0.0;
    for cost in [f64::MAX, 0.5, f64::MAX, 1e308, 3.0] {
        let _ = handle(
            &mut st,
            update("I_1", run, claude_turn("s", u64::MAX, cost)),
            t0,
        );
        let c = st.agent_totals.cost_usd;
        assert!(c.is_finite() && c >= last, "{c} after {last}");
        assert!(st.spend["I_1"].cost_usd.is_finite());
        last = c;
    }
    assert_eq!(last, baton::orchestrator::budget::MAX_COST_USD);
    assert_eq!(st.agent_totals.tokens.input_tokens, u64::MAX, "saturating");
    let st2 = restart(&st, &policy, t0 + 1);
    assert_eq!(st2.agent_totals.cost_usd, last, "a restart keeps it");
    assert_eq!(st2.spend["I_1"].cost_usd, st.spend["I_1"].cost_usd);
}

/// Figure: the main-loop cost of one projection of 1,000 known issues (at most ten per second;
/// the fsyncs run on the writer thread). `cargo test --release --test it -- --ignored
/// --nocapture bench_projection_of_1000_issues`.
#[test]
#[ignore = "benchmark"]
fn bench_projection_of_1000_issues() {
    let mut st = OrchestratorState::new(Policy::default(), 0);
    for n in 1..=1_000u64 {
        let i = issue(n, "Todo");
        st.runs_since_active.insert(i.id.clone(), 3);
        let ws = format!("/ws/{}", i.identifier).into();
        st.queue_retry(RetryEntry {
            issue_id: i.id.clone(),
            identifier: i.identifier.clone(),
            attempt: 2,
            due_at: 60_000,
            error: Some("worker exited: boom".into()),
            kind: RetryKind::Failure,
            workspace_path: ws,
            ..RetryEntry::default()
        });
    }
    let mut writer = baton::durable::StateWriter::default();
    let rounds = 200u32;
    let t0 = std::time::Instant::now();
    for r in 0..rounds {
        writer.offer(to_json(&st).unwrap(), u64::from(r));
    }
    let per = t0.elapsed().as_secs_f64() * 1e3 / f64::from(rounds);
    println!("projection + change check of 1,000 issues: {per:.3} ms per loop step");
}

/// Issue 21, item 10: what is kept for long-gone issues is bounded. A state file of 50,000 known
/// issues (a board that churned for months) is cut to the entry cap when read, and the first
/// successful poll forgets every issue that is neither on the board's active list nor in hand.
#[test]
fn long_gone_issues_are_forgotten_and_the_state_stays_small() {
    use baton::orchestrator::state::IssueSpend;
    let mut old = OrchestratorState::default();
    for n in 1..=50_000u64 {
        old.runs_since_active.insert(format!("I_{n}"), 1);
        let spend = IssueSpend {
            turns: 1,
            ..IssueSpend::default()
        };
        old.spend.insert(format!("I_{n}"), spend);
    }
    let big = to_json(&old).unwrap();
    let stored = parse(&big).unwrap();
    assert_eq!(stored.runs_since_active.len(), 10_000, "cut to the cap");
    assert_eq!(stored.spend.len(), 10_000);
    let policy = Policy {
        active_states: vec!["Todo".into()],
        workspace_root: "/ws".into(),
        max_concurrent_agents: 1,
        ..Policy::default()
    };
    let t0 = 1_796_000_000_000;
    let (mut st, _) = restore(stored, policy, t0);
    let _ = handle(&mut st, Event::Wake, t0);
    // Issues 1 and 10 are still active (1 runs, 10 waits for a slot); every other one is gone.
    let _ = handle(&mut st, poll(vec![issue(1, "Todo"), issue(10, "Todo")]), t0);
    let kept: Vec<&str> = st.runs_since_active.keys().map(String::as_str).collect();
    assert_eq!(kept, ["I_1", "I_10"]);
    assert_eq!(st.runs_since_active["I_1"], 2, "its count kept and bumped");
    assert_eq!(st.spend.len(), 2);
    let small = to_json(&st).unwrap();
    assert!(
        small.len() < 2_000,
        "{} bytes (was {})",
        small.len(),
        big.len()
    );
}

//! Startup recovery as a pure function on a virtual clock.

use std::path::PathBuf;

use baton::durable::recover::INTERRUPTED;
use baton::durable::{
    recover, StoredIssue, StoredParked, StoredRetry, StoredRetryKind, StoredRun, StoredState,
    StoredTotals,
};

const NOW: u64 = 1_796_000_000_000;

fn known(id: &str) -> StoredIssue {
    let mut i = StoredIssue::new(id, format!("o/r#{id}"));
    i.workspace = Some(PathBuf::from(format!("/ws/{id}")));
    i
}

fn retry(due_at: u64, attempt: u32) -> Option<StoredRetry> {
    Some(StoredRetry {
        due_at,
        attempt,
        error: Some("boom".into()),
        kind: StoredRetryKind::Failure,
    })
}

fn run(pgid: u32, session: Option<&str>) -> Option<StoredRun> {
    Some(StoredRun {
        pgid,
        leader_start_time: 4242,
        started_at: NOW - 60_000,
        agent: "copilot".into(),
        session_id: session.map(str::to_string),
    })
}

#[test]
fn retries_keep_their_due_times_and_past_ones_are_due_now() {
    let mut late = known("a");
    late.retry = retry(NOW - 5_000, 3);
    let mut soon = known("b");
    soon.retry = retry(NOW + 7_000, 2);
    let stored = StoredState::new(vec![soon, late], NOW - 10_000);

    let plan = recover(&stored, NOW);
    let got: Vec<_> = plan
        .retries
        .iter()
        .map(|r| (r.issue_id.as_str(), r.due_in_ms, r.attempt))
        .collect();
    assert_eq!(got, [("a", 0, Some(3)), ("b", 7_000, Some(2))]);
    assert!(plan.retries.iter().all(|r| r.resume.is_none()));
    assert_eq!(plan.retries[1].error.as_deref(), Some("boom"));
    assert_eq!(plan.retries[1].workspace, Some(PathBuf::from("/ws/b")));

    // Later on the virtual clock everything is due at once; nothing else changes.
    let later = recover(&stored, NOW + 60_000);
    assert!(later.retries.iter().all(|r| r.due_in_ms == 0));
    assert!(later.orphans_to_stop.is_empty());
}

#[test]
fn a_running_entry_is_an_immediate_resume_that_is_not_a_failed_attempt() {
    let mut first_run = known("c");
    first_run.runs = 1;
    first_run.running = run(5_000, Some("3b0e9f5a-9c55-4f6e-8d7e-1f2a3b4c5d6e"));
    first_run.host = "local".into();
    let mut retried = known("d");
    retried.attempt = 4;
    retried.runs = 6;
    retried.retry = retry(NOW + 99_000, 4); // stale: the run started after it
    retried.running = run(6_000, None);
    retried.session_id = Some("claude-session-1".into());
    retried.agent = Some("claude".into());
    let mut no_session = known("e");
    no_session.running = run(1, None); // pgid 1 is never an orphan to signal
    let plan = recover(
        &StoredState::new(vec![first_run, retried, no_session], NOW),
        NOW,
    );

    let orphans: Vec<_> = plan
        .orphans_to_stop
        .iter()
        .map(|o| (o.issue_id.as_str(), o.pgid, o.leader_start_time))
        .collect();
    assert_eq!(orphans, [("c", 5_000, 4242), ("d", 6_000, 4242)]);

    assert_eq!(plan.retries.len(), 3);
    for r in &plan.retries {
        assert_eq!(r.due_in_ms, 0, "{}", r.issue_id);
        assert_eq!(r.kind, StoredRetryKind::Continuation);
        assert_eq!(r.error.as_deref(), Some(INTERRUPTED));
        assert!(r.is_interrupted_run());
    }
    let c = &plan.retries[0];
    assert_eq!(c.attempt, None, "still a first run");
    let resume = c.resume.as_ref().unwrap();
    assert_eq!(resume.agent, "copilot");
    assert_eq!(resume.session_id, "3b0e9f5a-9c55-4f6e-8d7e-1f2a3b4c5d6e");
    assert_eq!(resume.workspace, Some(PathBuf::from("/ws/c")));
    assert_eq!(resume.host, "local");

    let d = &plan.retries[1];
    assert_eq!(d.attempt, Some(4), "same attempt, not 5");
    let resume = d.resume.as_ref().unwrap();
    assert_eq!(
        (resume.agent.as_str(), resume.session_id.as_str()),
        ("copilot", "claude-session-1"),
        "run's agent kind wins; the issue's last session id fills in"
    );
    assert_eq!(
        plan.counts["d"].runs, 6,
        "the interrupted run was already counted"
    );
    assert_eq!(plan.retries[2].resume, None, "no session id: fresh session");
    assert_eq!(plan.resumed_sessions(), 2);
}

#[test]
fn parked_issues_counts_and_totals_are_restored() {
    let mut parked = known("p");
    parked.runs = 10;
    parked.retry = retry(NOW, 2); // parking drops the retry
    parked.parked = Some(StoredParked {
        reason: "max_runs_per_issue reached".into(),
        state: "In Progress".into(),
        fingerprint: "in progress|".into(),
        since: NOW - 1,
        kind: None,
    });
    parked.totals = StoredTotals {
        input_tokens: 10,
        output_tokens: 5,
        cache_read_tokens: 100,
        cache_creation_tokens: 7,
        cost_usd: 0.5,
        turns: 0,
    };
    let mut idle = known("q");
    idle.totals = StoredTotals {
        input_tokens: u64::MAX,
        cost_usd: 0.25,
        ..StoredTotals::default()
    };
    let mut dup = known("q"); // a later entry for the same id replaces the earlier one
    dup.totals = idle.totals;
    dup.runs = 2;
    let plan = recover(&StoredState::new(vec![parked, idle, dup], NOW), NOW);

    assert!(plan.retries.is_empty());
    assert_eq!(plan.parked.len(), 1);
    let p = &plan.parked[0];
    assert_eq!(
        (p.issue_id.as_str(), p.reason.as_str(), p.state.as_str()),
        ("p", "max_runs_per_issue reached", "In Progress")
    );
    assert_eq!(p.fingerprint, "in progress|");
    assert_eq!(plan.counts.len(), 2);
    assert_eq!(plan.counts["p"].runs, 10);
    assert_eq!(plan.counts["q"].runs, 2);
    assert_eq!(plan.totals.input_tokens, u64::MAX, "saturating");
    assert_eq!(plan.totals.cache_read_tokens, 100);
    assert_eq!(plan.totals.cost_usd, 0.75);
    assert_eq!(
        plan.summary_fields(0),
        "restored_retries=0 parked_issues=1 resumed_sessions=0 orphans_stopped=0"
    );
}

#[test]
fn an_empty_state_plans_nothing() {
    let plan = recover(&StoredState::default(), NOW);
    assert_eq!(plan, Default::default());
}

#[test]
fn summary_counts_what_check_reports() {
    let mut a = known("a");
    a.retry = retry(NOW, 1);
    a.session_id = Some("s".into());
    let mut b = known("b");
    b.running = run(9, Some("t"));
    let mut c = known("c");
    c.parked = Some(StoredParked {
        reason: "max_attempts reached".into(),
        state: "Todo".into(),
        fingerprint: String::new(),
        since: 0,
        kind: None,
    });
    let s = StoredState::new(vec![a, b, c, known("d")], NOW).summary();
    assert_eq!(
        s.to_string(),
        "issues=4 retries=1 parked=1 running=1 sessions=2"
    );
}

//! Startup restore as one pure function of the stored state, the policy and the time: retries,
//! parked issues, counts and spend come back; interrupted runs resume; orphans are stopped only
//! through the host that owns them; bad entries are dropped alone; schema 1 is upgraded once.

use std::path::PathBuf;

use baton::orchestrator::restore::{
    check_summary, parse, restore, to_json, ParseError, INTERRUPTED,
};
use baton::orchestrator::state::{
    BlockedEntry, IssueSpend, OrchestratorState, ParkKind, Policy, RetryEntry, RetryKind,
    RunningEntry, TokenCounts,
};
use baton::orchestrator::Action;
use serde_json::json;

use crate::support::issues::issue;

const NOW: u64 = 1_796_000_000_000;

fn policy() -> Policy {
    Policy {
        workspace_root: "/ws".into(),
        agent: "claude_code".into(),
        orphan_grace_ms: 600_000,
        ..Policy::default()
    }
}

/// A running entry for issue `n` with agent group `pgid` and session `session`.
fn running(n: u64, pgid: Option<u32>, session: Option<&str>) -> RunningEntry {
    let i = issue(n, "Todo");
    RunningEntry {
        workspace_path: PathBuf::from(format!("/ws/{}", i.identifier)),
        issue: i,
        agent: "claude_code".into(),
        agent_session: session.map(str::to_string),
        agent_pid: pgid,
        leader_start: Some(4242),
        tokens: TokenCounts {
            input_tokens: 100,
            total_tokens: 100,
            ..TokenCounts::default()
        },
        cost_usd: Some(0.25),
        ..RunningEntry::default()
    }
}

/// The state after a JSON round trip (as on disk).
fn stored(s: &OrchestratorState) -> OrchestratorState {
    parse(&to_json(s).unwrap()).unwrap()
}

fn retry(s: &mut OrchestratorState, n: u64, due_at: u64, attempt: u32) {
    let i = issue(n, "Todo");
    let ws = PathBuf::from(format!("/ws/{}", i.identifier));
    s.queue_retry(RetryEntry {
        issue_id: i.id.clone(),
        identifier: i.identifier.clone(),
        attempt,
        due_at,
        error: Some("boom".into()),
        kind: RetryKind::Failure,
        workspace_path: ws,
        ..RetryEntry::default()
    });
}

#[test]
fn retries_keep_their_due_times_and_past_ones_are_due_now() {
    let mut s = OrchestratorState::default();
    retry(&mut s, 1, NOW - 5_000, 3);
    retry(&mut s, 2, NOW + 7_000, 2);
    let (st, actions) = restore(stored(&s), policy(), NOW);
    assert!(actions.is_empty());
    let got: Vec<_> = st
        .retry_attempts
        .values()
        .map(|r| (r.issue_id.as_str(), r.due_at, r.attempt, r.error.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("I_1", NOW - 5_000, 3, Some("boom")),
            ("I_2", NOW + 7_000, 2, Some("boom"))
        ]
    );
    assert!(st.claimed.contains("I_1") && st.claimed.contains("I_2"));
    assert!(
        baton::orchestrator::next_deadline(&st) <= Some(NOW),
        "a past due time is due at once"
    );
}

#[test]
fn a_running_entry_is_an_immediate_resume_that_is_not_a_failed_attempt() {
    let mut s = OrchestratorState::default();
    s.running
        .insert("I_1".into(), running(1, Some(5_000), Some("sess-1")));
    let mut second = running(2, Some(6_000), None);
    second.attempt = Some(4);
    s.running.insert("I_2".into(), second);
    s.running
        .insert("I_3".into(), running(3, Some(1), Some("sess-3")));
    s.runs_since_active.insert("I_2".into(), 6);
    retry(&mut s, 2, NOW + 99_000, 4); // stale: the run started after it
    let (st, actions) = restore(stored(&s), policy(), NOW + 60_000);

    let stops: Vec<_> = actions
        .iter()
        .map(|a| match a {
            Action::StopOrphan {
                issue_id,
                host,
                pgid,
                leader_start,
            } => (issue_id.as_str(), host.clone(), *pgid, *leader_start),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        stops,
        [("I_1", None, 5_000, 4242), ("I_2", None, 6_000, 4242)],
        "pgid 1 is never an orphan to signal"
    );
    assert_eq!(st.orphans.len(), 2);
    assert_eq!(st.orphans["I_1"].give_up_at, NOW + 60_000 + 600_000);
    for r in st.retry_attempts.values() {
        assert_eq!(r.due_at, NOW + 60_000, "{}", r.issue_id);
        assert_eq!(r.kind, RetryKind::Continuation);
        assert_eq!(r.error.as_deref(), Some(INTERRUPTED));
    }
    let r1 = &st.retry_attempts["I_1"];
    assert_eq!(r1.attempt, 1, "a first run resumes as attempt 1");
    let resume = r1.resume.as_ref().unwrap();
    assert_eq!(
        (resume.agent.as_str(), resume.session.as_str()),
        ("claude_code", "sess-1")
    );
    assert_eq!(
        resume.tokens.input_tokens, 100,
        "the session's usage so far"
    );
    assert_eq!(resume.cost_usd, Some(0.25));
    assert_eq!(st.retry_attempts["I_2"].attempt, 4, "same attempt, not 5");
    assert_eq!(st.retry_attempts["I_2"].resume, None, "no session: fresh");
    assert_eq!(
        st.runs_since_active["I_2"], 5,
        "the re-dispatch counts it again"
    );
    assert_eq!(
        baton::orchestrator::restore::summary(&st),
        "restored_retries=3 parked_issues=0 resumed_sessions=2 orphans=2"
    );
    // Held while their orphans are unchecked: only I_3 (no group) may be fetched.
    let acts = baton::orchestrator::handle(
        &mut st.clone(),
        baton::orchestrator::Event::Wake,
        NOW + 60_000,
    );
    let fetched: Vec<_> = acts
        .iter()
        .flat_map(|a| match a {
            Action::FetchIssues { retries, .. } => {
                retries.iter().map(|(id, _)| id.as_str()).collect()
            }
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(fetched, ["I_3"]);
}

#[test]
fn parked_issues_counts_spend_and_totals_are_restored() {
    let mut s = OrchestratorState::default();
    let i = issue(1, "In Progress");
    s.blocked.insert(
        i.id.clone(),
        BlockedEntry {
            issue_id: i.id.clone(),
            identifier: i.identifier.clone(),
            url: i.url.clone(),
            state: "In Progress".into(),
            reason: "max_runs_per_issue reached".into(),
            kind: ParkKind::MaxRuns,
            since: NOW - 1,
            fingerprint: "in progress|false|".into(),
            workspace_path: "/ws/acme__repo-1".into(),
        },
    );
    retry(&mut s, 1, NOW, 2); // parking wins over a queued retry
    s.runs_since_active.insert("I_1".into(), 10);
    s.spend.insert(
        "I_2".into(),
        IssueSpend {
            cost_usd: 0.5,
            turns: 3,
            ..IssueSpend::default()
        },
    );
    s.agent_totals.cost_usd = 7.5;
    s.agent_totals.turns = 40;
    let (st, _) = restore(stored(&s), policy(), NOW);
    assert!(st.retry_attempts.is_empty() && st.claimed.is_empty());
    assert_eq!(st.blocked, s.blocked);
    assert_eq!(st.runs_since_active["I_1"], 10);
    assert_eq!(st.spend["I_2"].cost_usd, 0.5);
    assert_eq!(st.spend["I_2"].turns, 3);
    assert_eq!(
        (st.agent_totals.cost_usd, st.agent_totals.turns),
        (7.5, 40),
        "a restart keeps the service totals"
    );
    assert_eq!(
        check_summary(&stored(&s)),
        "issues=2 retries=1 parked=1 running=0 sessions=0"
    );
}

#[test]
fn an_empty_state_restores_nothing() {
    let (st, actions) = restore(OrchestratorState::default(), policy(), NOW);
    assert!(actions.is_empty());
    assert_eq!(st, OrchestratorState::new(policy(), NOW));
}

#[test]
fn remote_orphans_are_checked_only_through_a_configured_host() {
    let mut s = OrchestratorState::default();
    let mut on_host = running(1, Some(777), Some("s1"));
    on_host.host = Some("build-1".into());
    let mut gone_host = running(2, Some(778), Some("s2"));
    gone_host.host = Some("old-host".into());
    s.running.insert("I_1".into(), on_host);
    s.running.insert("I_2".into(), gone_host);
    let p = Policy {
        ssh_hosts: vec!["build-1".into()],
        ..policy()
    };
    let (st, actions) = restore(stored(&s), p, NOW);
    assert_eq!(
        actions,
        [Action::StopOrphan {
            issue_id: "I_1".into(),
            host: Some("build-1".into()),
            pgid: 777,
            leader_start: 4242,
        }],
        "never a local stop for a remote group; an unconfigured host is not contacted"
    );
    assert_eq!(st.retry_attempts["I_1"].host.as_deref(), Some("build-1"));
    assert!(st.orphans.contains_key("I_2"), "waits out the grace");
}

/// The hosts holding workspace copies come back for configured hosts only (no other host is
/// ever contacted); a list with a bad destination, a duplicate or no host is dropped alone.
#[test]
fn workspace_hosts_are_restored_for_configured_hosts_only() {
    let many: Vec<String> = (0..300).map(|i| format!("h{i}")).collect();
    let doc = json!({
        "version": 2,
        "workspace_hosts": {
            "I_1": ["build-2", "build-1"],
            "I_2": ["old-host", "build-1"],
            "I_3": ["old-host"],
            "I_4": ["-oProxyCommand=x"],
            "I_5": ["build-1", "build-1"],
            "I_6": [],
            "I_7": "build-1",
            "I_8": many,
        }
    });
    let s = parse(doc.to_string().as_bytes()).unwrap();
    let kept: Vec<&str> = s.workspace_hosts.keys().map(String::as_str).collect();
    assert_eq!(kept, ["I_1", "I_2", "I_3"]);
    let p = Policy {
        ssh_hosts: vec!["build-1".into(), "build-2".into()],
        ..policy()
    };
    let (st, _) = restore(s, p, NOW);
    let hosts: Vec<(&str, &[String])> = st
        .workspace_hosts
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let (b1, b2) = ("build-1".to_string(), "build-2".to_string());
    assert_eq!(hosts, [("I_1", &[b2, b1.clone()][..]), ("I_2", &[b1][..])]);
}

#[test]
fn bad_entries_are_dropped_alone_and_hostile_values_are_made_safe() {
    let doc = json!({
        "version": 2,
        "retry_attempts": {
            "I_1": {"identifier": "acme__repo-1", "attempt": 2, "due_at": 5, "kind": "failure",
                    "workspace_path": "/ws/acme__repo-1"},
            "I_2": {"identifier": "acme__repo-2", "attempt": "two", "due_at": 5, "kind": "failure",
                    "workspace_path": "/ws/acme__repo-2"},
            "I_3": {"identifier": "acme__repo-3", "attempt": 1, "due_at": 5, "kind": "failure",
                    "workspace_path": "/etc"},
            "I_4": {"identifier": "acme__repo-4", "attempt": 1, "due_at": 5, "kind": "failure",
                    "workspace_path": "/ws/acme__repo-4", "host": "-oProxyCommand=x"},
            "I_5": {"identifier": "acme__repo-5", "attempt": 1, "due_at": 5, "kind": "failure",
                    "workspace_path": "/ws/acme__repo-5",
                    "resume": {"agent": "claude_code", "session": "--dangerously-skip-permissions"}}
        },
        "running": {
            "I_6": {"issue": {"id": "I_6", "identifier": "acme__repo-6"},
                    "workspace_path": "/ws/acme__repo-6", "agent_pid": 0, "agent_session": "a b",
                    "cost_usd": -3.0}
        },
        "spend": {"I_7": {"cost_usd": null, "turns": 2}, "I_8": {"turns": "x"}},
        "runs_since_active": {"I_1": 3, "I_9": -1},
        "from_a_newer_build": [1, 2]
    });
    let s = parse(doc.to_string().as_bytes()).unwrap();
    let kept: Vec<&str> = s.retry_attempts.keys().map(String::as_str).collect();
    assert_eq!(kept, ["I_1", "I_5"]);
    assert_eq!(
        s.retry_attempts["I_5"].resume, None,
        "a flag is never a session"
    );
    let e = &s.running["I_6"];
    assert_eq!(e.agent_pid, None, "pgid 0 is never signalled");
    assert_eq!(e.agent_session, None);
    assert_eq!(e.cost_usd, Some(0.0));
    assert_eq!(
        s.spend["I_7"].cost_usd,
        baton::orchestrator::budget::MAX_COST_USD,
        "an unknown (infinite) cost keeps the budget reached"
    );
    assert!(!s.spend.contains_key("I_8"));
    assert_eq!(s.runs_since_active.len(), 1);
}

#[test]
fn whole_files_are_corrupt_or_newer() {
    for bad in [
        &b""[..],
        b"\x00\x01garbage",
        br#"{"issues": []}"#,
        br#"[1, 2]"#,
        br#"{"version": 2, "running": {"#,
    ] {
        assert!(
            matches!(parse(bad), Err(ParseError::Corrupt(_))),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(parse(br#"{"version": 3}"#), Err(ParseError::Newer(3)));
    assert_eq!(
        parse(br#"{"schema_version": 99, "issues": {"shape": "unknown"}}"#),
        Err(ParseError::Newer(99))
    );
}

/// `fixtures/state/v1-state.json` was written by the build before "one state" (schema 1). An
/// upgrade keeps retries, parked issues, spend and sessions.
#[test]
fn a_schema_1_file_from_the_previous_build_is_upgraded() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/state/v1-state.json"
    ))
    .unwrap();
    let stored = parse(&bytes).unwrap();
    let p = Policy {
        ssh_hosts: vec!["build-1".into()],
        ..policy()
    };
    let (st, actions) = restore(stored, p, NOW + 1_000);
    // I_1 (claude, local) and I_2 (copilot, build-1) were running: both resume their sessions.
    let r1 = &st.retry_attempts["I_1"];
    let res1 = r1.resume.as_ref().unwrap();
    assert_eq!(
        (res1.agent.as_str(), res1.session.as_str()),
        ("claude_code", "0b9c6e1e-58a5-4a51-9d4b-123456789012")
    );
    assert_eq!(
        r1.workspace_path,
        PathBuf::from("/srv/baton/ws/acme__repo-1")
    );
    let r2 = &st.retry_attempts["I_2"];
    assert_eq!(r2.resume.as_ref().unwrap().agent, "copilot");
    assert_eq!(r2.host.as_deref(), Some("build-1"));
    // The local orphan is checked here with its start time; the remote one's start time was
    // read on the wrong machine, so it is checked through its host but never signalled.
    assert_eq!(
        actions,
        [
            Action::StopOrphan {
                issue_id: "I_1".into(),
                host: None,
                pgid: 424242,
                leader_start: 987654,
            },
            Action::StopOrphan {
                issue_id: "I_2".into(),
                host: Some("build-1".into()),
                pgid: 515151,
                leader_start: 0,
            },
        ]
    );
    // I_3: its failure retry with the original due time (wall clock of the old file).
    let r3 = &st.retry_attempts["I_3"];
    assert_eq!(
        (r3.attempt, r3.due_at, r3.kind),
        (1, 1_796_000_009_940, RetryKind::Failure)
    );
    assert_eq!(r3.error.as_deref(), Some("worker exited: boom"));
    // I_4: parked for its budget, with its spend.
    let b = &st.blocked["I_4"];
    assert_eq!(b.kind, ParkKind::BudgetExceeded);
    assert_eq!(b.fingerprint, "todo|false|");
    assert_eq!(st.spend["I_4"].cost_usd, 1.5);
    assert_eq!(st.spend["I_1"].tokens.cache_read_input_tokens, 400);
    assert_eq!(st.spend["I_1"].turns, 1);
    assert_eq!(st.agent_totals.turns, 3);
    assert!((st.agent_totals.cost_usd - 1.5094).abs() < 1e-9);
    assert_eq!(
        st.runs_since_active["I_1"], 0,
        "counted again when it resumes"
    );
    assert_eq!(st.runs_since_active["I_4"], 1);
    // Written back, it is a schema 2 file that restores to the same state.
    let again = parse(&to_json(&st).unwrap()).unwrap();
    assert_eq!(again.retry_attempts.len(), 3);
    assert_eq!(again.blocked, st.blocked);
}

/// A schema-1 entry without totals (or without `cost_usd`) spent nothing; a `null` cost is how
/// serde_json wrote a non-finite spend, read fail-closed as the maximum.
#[test]
fn a_schema_1_entry_without_a_cost_spent_nothing_and_a_null_cost_is_the_maximum() {
    let file = |totals: &str| {
        format!(
            r#"{{"schema_version":1,"issues":[{{"id":"I_9","identifier":"acme__repo-9",
            "retry":{{"due_at":1796000009940,"attempt":1,"error":"boom","kind":"failure"}}
            {totals}}}]}}"#
        )
    };
    for (totals, cost) in [
        ("", None),
        (r#","totals":{"input_tokens":5}"#, Some(0.0)),
        (r#","totals":{"cost_usd":null}"#, Some(1e12)),
    ] {
        let (st, _) = restore(parse(file(totals).as_bytes()).unwrap(), policy(), NOW);
        assert!(st.retry_attempts.contains_key("I_9"), "{totals}");
        assert_eq!(st.spend.get("I_9").map(|s| s.cost_usd), cost, "{totals}");
        assert_eq!(st.agent_totals.cost_usd, cost.unwrap_or(0.0), "{totals}");
    }
}

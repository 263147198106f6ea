//! Pure scheduling rules (spec §8.2–§8.4): eligibility, routability, dispatch order, slots and
//! backoff math. No state mutation here.

use std::cmp::Ordering;

use crate::model::{contains_name as contains, normalize_name, Issue};
use crate::timefmt::parse_rfc3339;

use super::state::{OrchestratorState, Policy};

/// Delay of the continuation re-check after a normal worker exit (spec §8.4).
pub const CONTINUATION_DELAY_MS: u64 = 1000;
/// Base of the failure backoff (spec §8.4).
pub const FAILURE_BASE_MS: u64 = 10_000;
/// Requeue reason when no slot is free (spec §8.4).
pub const NO_SLOTS_ERROR: &str = "no available orchestrator slots";

/// Terminal: the GitHub issue is CLOSED, or its Status is a terminal state.
pub fn is_terminal(p: &Policy, issue: &Issue) -> bool {
    issue.closed || contains(&p.terminal_states, &issue.state)
}

/// Active: Status in `active_states`, not terminal, not closed.
pub fn is_active(p: &Policy, issue: &Issue) -> bool {
    contains(&p.active_states, &issue.state) && !is_terminal(p, issue)
}

/// Routable (Symphony §8.2 `issue_routable`): repository allowed, every required label present
/// (a blank configured label matches nothing), no excluded label present.
pub fn is_routable(p: &Policy, issue: &Issue) -> bool {
    let repo_ok = p.repos.is_empty() || contains(&p.repos, &issue.repository);
    repo_ok
        && p.required_labels.iter().all(|l| issue.has_label(l))
        && !p.excluded_labels.iter().any(|l| issue.has_label(l))
}

/// The record has the fields dispatch needs.
pub fn has_required_fields(issue: &Issue) -> bool {
    !issue.id.trim().is_empty()
        && !issue.identifier.trim().is_empty()
        && !issue.title.trim().is_empty()
        && !issue.state.trim().is_empty()
}

/// Blocker rule: an issue in the *first* active state is not dispatched while any blocker is
/// non-terminal.
pub fn blockers_allow(p: &Policy, issue: &Issue) -> bool {
    let Some(first) = p.active_states.first() else {
        return true;
    };
    if normalize_name(first) != issue.normalized_state() {
        return true;
    }
    issue
        .blocked_by
        .iter()
        .all(|b| b.terminal || contains(&p.terminal_states, &b.state))
}

/// Everything about the issue itself that dispatch requires (claims and slots checked separately).
pub fn issue_dispatchable(p: &Policy, issue: &Issue) -> bool {
    has_required_fields(issue)
        && is_active(p, issue)
        && is_routable(p, issue)
        && blockers_allow(p, issue)
}

/// Dispatch order: priority ascending (null last), `created_at` oldest first (null/unparseable
/// last), identifier.
pub fn dispatch_order(a: &Issue, b: &Issue) -> Ordering {
    let prio = |i: &Issue| (i.priority.is_none(), i.priority.unwrap_or(0));
    let created = |i: &Issue| {
        let t = i.created_at.as_deref().and_then(parse_rfc3339);
        (t.is_none(), t)
    };
    prio(a)
        .cmp(&prio(b))
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.identifier.cmp(&b.identifier))
}

/// Sort candidates for dispatch.
pub fn sort_for_dispatch(issues: &mut [Issue]) {
    issues.sort_by(dispatch_order);
}

/// Free global slots: `max(max_concurrent_agents - running, 0)`.
pub fn global_slots(s: &OrchestratorState) -> usize {
    (s.policy.max_concurrent_agents as usize).saturating_sub(s.running.len())
}

/// True when another worker in `state` fits the per-state cap (falls back to the global cap).
pub fn state_slot_free(s: &OrchestratorState, state: &str) -> bool {
    let key = normalize_name(state);
    let cap = s
        .policy
        .max_concurrent_agents_by_state
        .iter()
        .find(|(k, _)| normalize_name(k) == key)
        .map(|(_, v)| *v)
        .unwrap_or(s.policy.max_concurrent_agents) as usize;
    let used = s
        .running
        .values()
        .filter(|r| r.issue.normalized_state() == key)
        .count();
    used < cap
}

/// Failure backoff: `min(10000 · 2^(attempt−1), cap)` (attempt ≥ 1), without overflow.
pub fn failure_backoff_ms(attempt: u32, cap_ms: u64) -> u64 {
    let exp = attempt.saturating_sub(1).min(40);
    FAILURE_BASE_MS.saturating_mul(1u64 << exp).min(cap_ms)
}

/// A fingerprint of what un-parks a blocked issue: normalized state and sorted labels.
pub fn block_fingerprint(issue: &Issue) -> String {
    let mut labels: Vec<String> = issue.labels.iter().map(|l| normalize_name(l)).collect();
    labels.sort();
    labels.dedup();
    format!(
        "{}|{}|{}",
        issue.normalized_state(),
        issue.closed,
        labels.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BlockerRef;

    fn issue(id: &str, state: &str) -> Issue {
        Issue {
            id: id.into(),
            identifier: format!("o__r-{id}"),
            title: "t".into(),
            state: state.into(),
            repository: "o/r".into(),
            ..Issue::default()
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(failure_backoff_ms(1, 300_000), 10_000);
        assert_eq!(failure_backoff_ms(2, 300_000), 20_000);
        assert_eq!(failure_backoff_ms(3, 300_000), 40_000);
        assert_eq!(failure_backoff_ms(6, 300_000), 300_000);
        assert_eq!(failure_backoff_ms(5, 25_000), 25_000);
        assert_eq!(failure_backoff_ms(u32::MAX, u64::MAX), 10_000u64 << 40);
        assert_eq!(failure_backoff_ms(0, 300_000), 10_000);
    }

    #[test]
    fn sort_priority_then_created_then_identifier() {
        let mut a = issue("a", "Todo");
        a.priority = Some(2);
        let mut b = issue("b", "Todo");
        b.priority = Some(1);
        let mut c = issue("c", "Todo");
        c.priority = None;
        c.created_at = Some("2020-01-01T00:00:00Z".into());
        let mut d = issue("d", "Todo");
        d.priority = Some(2);
        d.created_at = Some("2021-01-01T00:00:00Z".into());
        let mut e = issue("e", "Todo");
        e.priority = Some(2);
        e.created_at = Some("2019-01-01T00:00:00Z".into());
        let mut f = issue("f", "Todo");
        f.priority = Some(7); // any positive integer is a real priority
        let mut v = vec![a, b, c, d, e, f];
        sort_for_dispatch(&mut v);
        let ids: Vec<&str> = v.iter().map(|i| i.id.as_str()).collect();
        // priority 1, then priority 2 by created (2019, 2021, null), then 7, then null.
        assert_eq!(ids, ["b", "e", "d", "a", "f", "c"]);
    }

    #[test]
    fn identifier_breaks_ties() {
        let mut v = vec![issue("z", "Todo"), issue("a", "Todo")];
        sort_for_dispatch(&mut v);
        assert_eq!(v[0].id, "a");
    }

    #[test]
    fn active_terminal_closed() {
        let p = Policy::default();
        assert!(is_active(&p, &issue("1", " in progress ")));
        assert!(!is_active(&p, &issue("1", "Backlog")));
        assert!(is_terminal(&p, &issue("1", "DONE")));
        let mut closed = issue("1", "Todo");
        closed.closed = true;
        assert!(is_terminal(&p, &closed) && !is_active(&p, &closed));
    }

    #[test]
    fn routable_labels_and_repos() {
        let mut p = Policy {
            required_labels: vec![" Baton ".into()],
            excluded_labels: vec!["hold".into()],
            ..Policy::default()
        };
        let mut i = issue("1", "Todo");
        assert!(!is_routable(&p, &i));
        i.labels = vec!["baton".into()];
        assert!(is_routable(&p, &i));
        i.labels.push("HOLD".into());
        assert!(!is_routable(&p, &i));
        i.labels.pop();
        p.repos = vec!["other/repo".into()];
        assert!(!is_routable(&p, &i));
        p.repos = vec!["O/R".into()];
        assert!(is_routable(&p, &i));
        p.required_labels = vec!["  ".into()];
        assert!(
            !is_routable(&p, &i),
            "a blank required label matches nothing"
        );
    }

    #[test]
    fn blocker_rule_applies_to_first_active_state_only() {
        let p = Policy::default();
        let mut i = issue("1", "Todo");
        i.blocked_by = vec![BlockerRef {
            id: "b".into(),
            identifier: "o__r-2".into(),
            state: "In Progress".into(),
            terminal: false,
        }];
        assert!(!blockers_allow(&p, &i));
        i.state = "In Progress".into();
        assert!(blockers_allow(&p, &i));
        i.state = "Todo".into();
        i.blocked_by[0].state = "Done".into();
        assert!(blockers_allow(&p, &i));
        i.blocked_by[0].state = "CLOSED".into();
        i.blocked_by[0].terminal = true;
        assert!(blockers_allow(&p, &i));
    }

    #[test]
    fn missing_fields_are_not_dispatchable() {
        let p = Policy::default();
        let mut i = issue("1", "Todo");
        assert!(issue_dispatchable(&p, &i));
        i.title = " ".into();
        assert!(!issue_dispatchable(&p, &i));
    }
}

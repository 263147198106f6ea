//! Pure scheduling rules (spec §8.2–§8.4): the one eligibility function ([`ineligibility`]),
//! dispatch order, slots and backoff math. No state mutation here.

use std::cmp::Ordering;
use std::fmt;

use crate::model::{contains_name as contains, normalize_name, Issue};
use crate::text::single_line;
use crate::timefmt::parse_rfc3339;

use super::state::{OrchestratorState, Policy, StopReason};

/// Delay of the continuation re-check after a normal worker exit (spec §8.4).
pub(crate) const CONTINUATION_DELAY_MS: u64 = 1000;
/// Base of the failure backoff (spec §8.4).
pub(crate) const FAILURE_BASE_MS: u64 = 10_000;
/// Quiet time after the last "WORKFLOW.md may have changed" ping before it is re-read.
pub const RELOAD_DEBOUNCE_MS: u64 = 200;
/// Shutdown waits `hooks.timeout_ms` plus this for workers to stop before exiting anyway.
pub(crate) const SHUTDOWN_GRACE_EXTRA_MS: u64 = 30_000;
pub(crate) const NO_SLOTS_ERROR: &str = "no available orchestrator slots";

/// Active: Status in `active_states`, not terminal, not closed.
pub fn is_active(p: &Policy, issue: &Issue) -> bool {
    let terminal = issue.closed || contains(&p.terminal_states, &issue.state);
    contains(&p.active_states, &issue.state) && !terminal
}

/// Routable (Symphony §8.2 `issue_routable`): repository allowed, every required label present
/// (a blank configured label matches nothing), no excluded label present.
pub fn is_routable(p: &Policy, issue: &Issue) -> bool {
    ineligibility(p, issue)
        .iter()
        .all(|r| r.stop_reason() != Some(StopReason::Unroutable))
}

/// Why an issue is not dispatchable (spec §8.2); claims and slots are checked separately.
/// `Display` is the operator text `baton check` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ineligible {
    /// `id`, `identifier`, `title` or `state`.
    BlankField(&'static str),
    Closed,
    TerminalState(String),
    InactiveState(String),
    RepoNotAllowed(String),
    MissingLabels(Vec<String>),
    ExcludedLabels(Vec<String>),
    /// Non-terminal blockers `(identifier, state)` of an issue in the first active state.
    BlockedBy(Vec<(String, String)>),
    /// Lists the tracker returned only in part that a rule depends on (`labels`, `blocked_by`):
    /// an unread label could be excluded or required, an unread blocker open.
    FieldsTruncated(Vec<String>),
}

impl Ineligible {
    /// How a *running* worker of an issue with this problem is stopped (spec §8.5); `None` for
    /// problems that only gate a new dispatch (blank fields, blockers).
    pub fn stop_reason(&self) -> Option<StopReason> {
        match self {
            Ineligible::Closed | Ineligible::TerminalState(_) => Some(StopReason::Terminal),
            Ineligible::InactiveState(_) => Some(StopReason::Inactive),
            Ineligible::RepoNotAllowed(_)
            | Ineligible::MissingLabels(_)
            | Ineligible::ExcludedLabels(_) => Some(StopReason::Unroutable),
            Ineligible::BlankField(_)
            | Ineligible::BlockedBy(_)
            | Ineligible::FieldsTruncated(_) => None,
        }
    }
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ineligible::BlankField(name) => write!(f, "required field {name} is blank"),
            Ineligible::Closed => f.write_str("closed on GitHub (closed issues are terminal)"),
            Ineligible::TerminalState(s) => write!(f, "Status {s:?} is terminal"),
            Ineligible::InactiveState(s) => write!(f, "Status {s:?} is not an active state"),
            Ineligible::RepoNotAllowed(r) => write!(f, "repository {r} is not in tracker.repos"),
            Ineligible::MissingLabels(l) => write!(f, "missing required label {}", l.join(", ")),
            Ineligible::ExcludedLabels(l) => write!(f, "has excluded label {}", l.join(", ")),
            Ineligible::BlockedBy(b) => {
                let list: Vec<String> = b
                    .iter()
                    .map(|(id, state)| format!("{id} ({})", single_line(state, 40)))
                    .collect();
                write!(f, "blocked by {}", list.join(", "))
            }
            Ineligible::FieldsTruncated(l) => write!(
                f,
                "issue_fields_truncated: {} not read in full and a rule depends on them",
                l.join(", ")
            ),
        }
    }
}

/// THE eligibility rule (spec §8.2): every reason `issue` is not dispatchable under `p`, in a
/// stable order; empty when it is. The engine's dispatch and retry decisions, the running-issue
/// reconciliation (through [`Ineligible::stop_reason`]) and `baton check` all use it.
pub fn ineligibility(p: &Policy, issue: &Issue) -> Vec<Ineligible> {
    let mut why = Vec::new();
    for (name, value) in [
        ("id", &issue.id),
        ("identifier", &issue.identifier),
        ("title", &issue.title),
        ("state", &issue.state),
    ] {
        if value.trim().is_empty() {
            why.push(Ineligible::BlankField(name));
        }
    }
    if issue.closed {
        why.push(Ineligible::Closed);
    }
    if contains(&p.terminal_states, &issue.state) {
        why.push(Ineligible::TerminalState(issue.state.clone()));
    } else if !contains(&p.active_states, &issue.state) {
        why.push(Ineligible::InactiveState(issue.state.clone()));
    }
    if !p.repos.is_empty() && !contains(&p.repos, &issue.repository) {
        why.push(Ineligible::RepoNotAllowed(issue.repository.clone()));
    }
    let labels = |want: bool, list: &[String]| -> Vec<String> {
        list.iter()
            .filter(|l| issue.has_label(l) == want)
            .cloned()
            .collect()
    };
    let missing = labels(false, &p.required_labels);
    let labels_decide = !p.excluded_labels.is_empty() || !missing.is_empty();
    why.extend((!missing.is_empty()).then_some(Ineligible::MissingLabels(missing)));
    let excluded = labels(true, &p.excluded_labels);
    why.extend((!excluded.is_empty()).then_some(Ineligible::ExcludedLabels(excluded)));
    let blockers = open_blockers(p, issue);
    why.extend((!blockers.is_empty()).then_some(Ineligible::BlockedBy(blockers)));
    let cut: Vec<String> = issue
        .truncated
        .iter()
        .filter(|list| match list.as_str() {
            "labels" => labels_decide,
            "blocked_by" => blocker_rule_applies(p, issue),
            _ => true,
        })
        .cloned()
        .collect();
    why.extend((!cut.is_empty()).then_some(Ineligible::FieldsTruncated(cut)));
    why
}

/// True when the blocker rule applies: the issue is in the *first* active state.
fn blocker_rule_applies(p: &Policy, issue: &Issue) -> bool {
    p.active_states
        .first()
        .is_some_and(|first| normalize_name(first) == issue.normalized_state())
}

pub(crate) fn is_eligible(p: &Policy, issue: &Issue) -> bool {
    ineligibility(p, issue).is_empty()
}

/// The stop a running worker of `issue` needs (the most severe of its problems), if any.
pub(crate) fn stop_reason(p: &Policy, issue: &Issue) -> Option<StopReason> {
    ineligibility(p, issue)
        .iter()
        .filter_map(Ineligible::stop_reason)
        .min()
}

/// Blocker rule: an issue in the *first* active state is not dispatched while any blocker is
/// non-terminal. Returns those blockers as `(identifier, state)`.
fn open_blockers(p: &Policy, issue: &Issue) -> Vec<(String, String)> {
    if !blocker_rule_applies(p, issue) {
        return Vec::new();
    }
    issue
        .blocked_by
        .iter()
        .filter(|b| !b.terminal && !contains(&p.terminal_states, &b.state))
        .map(|b| (b.identifier.clone(), b.state.clone()))
        .collect()
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

/// Free global slots: `max(max_concurrent_agents - running, 0)`.
pub(crate) fn global_slots(s: &OrchestratorState) -> usize {
    (s.policy.max_concurrent_agents as usize).saturating_sub(s.running.len())
}

/// True when another worker in `state` fits the per-state cap (falls back to the global cap).
pub(crate) fn state_slot_free(s: &OrchestratorState, state: &str) -> bool {
    let (key, p) = (normalize_name(state), &s.policy);
    let mut by_state = p.max_concurrent_agents_by_state.iter();
    let found = by_state.find(|(k, _)| normalize_name(k) == key);
    let cap = found.map_or(p.max_concurrent_agents, |(_, v)| *v) as usize;
    let same = s
        .running
        .values()
        .filter(|r| r.issue.normalized_state() == key);
    same.count() < cap
}

/// Exponential backoff `min(base · 2^(n−1), cap)` (n ≥ 1), without overflow: failure retries
/// (spec §8.4, base [`FAILURE_BASE_MS`]), host probes and the credential back-off.
pub(crate) fn backoff_ms(base: u64, n: u32, cap_ms: u64) -> u64 {
    let exp = n.saturating_sub(1).min(40);
    base.saturating_mul(1u64 << exp).min(cap_ms)
}

/// A fingerprint of what un-parks a blocked issue: normalized state and sorted labels.
pub(crate) fn block_fingerprint(issue: &Issue) -> String {
    let mut labels: Vec<String> = issue.labels.iter().map(|l| normalize_name(l)).collect();
    labels.sort();
    labels.dedup();
    let (state, closed) = (issue.normalized_state(), issue.closed);
    format!("{state}|{closed}|{}", labels.join(","))
}

/// Reconciliation from the tick's board read: the running issues the read contains (cloned from
/// `candidates` or `others`, in `running_ids` order) and the ids it does not contain, which alone
/// need a refresh request (filtered out server-side, archived, removed from the board).
pub fn running_from_read(
    running_ids: &[String],
    candidates: &[Issue],
    others: &[Issue],
) -> (Vec<Issue>, Vec<String>) {
    let by_id: std::collections::HashMap<&str, &Issue> = candidates
        .iter()
        .chain(others)
        .map(|i| (i.id.as_str(), i))
        .collect();
    let (mut present, mut missing) = (Vec::new(), Vec::new());
    for id in running_ids {
        match by_id.get(id.as_str()) {
            Some(i) => present.push((*i).clone()),
            None => missing.push(id.clone()),
        }
    }
    (present, missing)
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
        let failure_backoff_ms = |n, cap| backoff_ms(FAILURE_BASE_MS, n, cap);
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
        let mut v = [a, b, c, d, e, f];
        v.sort_by(dispatch_order);
        let ids: Vec<&str> = v.iter().map(|i| i.id.as_str()).collect();
        // priority 1, then priority 2 by created (2019, 2021, null), then 7, then null.
        assert_eq!(ids, ["b", "e", "d", "a", "f", "c"]);
    }

    #[test]
    fn identifier_breaks_ties() {
        let mut v = [issue("z", "Todo"), issue("a", "Todo")];
        v.sort_by(dispatch_order);
        assert_eq!(v[0].id, "a");
    }

    #[test]
    fn active_terminal_closed() {
        let p = Policy::default();
        assert!(is_active(&p, &issue("1", " in progress ")));
        assert!(!is_active(&p, &issue("1", "Backlog")));
        assert_eq!(
            stop_reason(&p, &issue("1", "DONE")),
            Some(StopReason::Terminal)
        );
        let mut closed = issue("1", "Todo");
        closed.closed = true;
        assert_eq!(stop_reason(&p, &closed), Some(StopReason::Terminal));
        assert!(!is_active(&p, &closed));
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
        assert!(!open_blockers(&p, &i).is_empty());
        i.state = "In Progress".into();
        assert!(open_blockers(&p, &i).is_empty());
        i.state = "Todo".into();
        i.blocked_by[0].state = "Done".into();
        assert!(open_blockers(&p, &i).is_empty());
        i.blocked_by[0].state = "CLOSED".into();
        i.blocked_by[0].terminal = true;
        assert!(open_blockers(&p, &i).is_empty());
    }

    #[test]
    fn blank_fields_are_not_dispatchable() {
        let p = Policy::default();
        let mut i = issue("1", "Todo");
        assert!(is_eligible(&p, &i));
        i.title = " ".into();
        assert_eq!(ineligibility(&p, &i), [Ineligible::BlankField("title")]);
        assert_eq!(
            ineligibility(&p, &i)[0].to_string(),
            "required field title is blank"
        );
        assert_eq!(stop_reason(&p, &i), None, "a running issue is not stopped");
    }

    #[test]
    fn every_reason_is_reported_with_the_check_text() {
        let p = Policy {
            repos: vec!["acme/app".into()],
            required_labels: vec!["baton".into()],
            excluded_labels: vec!["wontfix".into()],
            ..Policy::default()
        };
        let mut i = issue("1", "todo");
        i.repository = "acme/app".into();
        i.labels = vec!["baton".into()];
        assert!(is_eligible(&p, &i));
        i.labels = vec!["wontfix".into()];
        i.repository = "acme/web".into();
        i.closed = true;
        i.blocked_by = vec![BlockerRef {
            id: "I_2".into(),
            identifier: "acme__app-2".into(),
            state: "OPEN".into(),
            terminal: false,
        }];
        let why: Vec<String> = ineligibility(&p, &i)
            .iter()
            .map(|r| r.to_string())
            .collect();
        assert_eq!(
            why,
            [
                "closed on GitHub (closed issues are terminal)",
                "repository acme/web is not in tracker.repos",
                "missing required label baton",
                "has excluded label wontfix",
                "blocked by acme__app-2 (OPEN)",
            ]
        );
        assert_eq!(stop_reason(&p, &i), Some(StopReason::Terminal));
        i.closed = false;
        assert_eq!(stop_reason(&p, &i), Some(StopReason::Unroutable));
        i.state = "Backlog".into();
        assert_eq!(
            ineligibility(&p, &i)[0].to_string(),
            "Status \"Backlog\" is not an active state"
        );
        assert_eq!(stop_reason(&p, &i), Some(StopReason::Inactive));
        i.state = "Done".into();
        assert_eq!(
            ineligibility(&p, &i)[0].to_string(),
            "Status \"Done\" is terminal"
        );
        // The blocker rule applies to the first active state only.
        let mut i = issue("1", "In Progress");
        i.blocked_by = vec![BlockerRef::default()];
        assert!(open_blockers(&p, &i).is_empty());
    }
}

//! The SSH host pool (spec Appendix A.2): placement and host health, as pure functions of the
//! state and the time. The hosts that may hold a copy of an issue's workspace are remembered
//! (`OrchestratorState::workspace_hosts`): a run on one holding an older copy replaces it, and
//! terminal cleanup removes them all. A host whose connection failed is down until a probe
//! succeeds.

use std::collections::BTreeMap;

use crate::model::Issue;

use super::engine::{check_orphan, Action};
use super::state::{HostDown, Millis, OrchestratorState};

pub const PROBE_BASE_MS: u64 = 5_000;
pub const PROBE_MAX_MS: u64 = 300_000;

/// Where a dispatch goes: this machine (no `worker.ssh_hosts`), an SSH host, or nowhere yet
/// (`Full`: every up host is at its cap; never a fallback to running locally).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    Local,
    Host(String),
    Full,
}

/// The host of a dispatch of `issue` ([`place`], `preferred` first, else the host holding its
/// latest workspace), recorded as holding its workspace. True when that host holds an older copy
/// (the issue ran on another host since): the run must replace it, never reuse it.
pub fn assign(
    s: &mut OrchestratorState,
    issue: &Issue,
    preferred: Option<&str>,
) -> (Option<String>, bool) {
    let id = &issue.id;
    let latest = s.workspace_hosts.get(id).and_then(|h| h.first()).cloned();
    let Placement::Host(host) = place(s, preferred.or(latest.as_deref())) else {
        return (None, false); // this machine (a full pool is checked before)
    };
    let hosts = s.workspace_hosts.entry(id.to_string()).or_default();
    let at = hosts.iter().position(|h| *h == host);
    if let Some(i) = at {
        hosts.remove(i);
    }
    hosts.insert(0, host.clone());
    (Some(host), at.is_some_and(|i| i > 0))
}

/// Running agents per configured host (hosts with none included).
pub fn loads(s: &OrchestratorState) -> BTreeMap<String, usize> {
    let mut m: BTreeMap<String, usize> =
        s.policy.ssh_hosts.iter().map(|h| (h.clone(), 0)).collect();
    for h in s.running.values().filter_map(|e| e.host.as_ref()) {
        *m.entry(h.clone()).or_insert(0) += 1;
    }
    m
}

/// True when every configured host is down or at its cap: a dispatch waits, wherever it would
/// prefer to go (never a fallback to running locally).
pub fn is_full(s: &OrchestratorState) -> bool {
    place(s, None) == Placement::Full
}

/// Choose where the next dispatch goes: `preferred` (the host holding the issue's latest
/// workspace) when it is up and has a free slot, else the least-loaded up host with a free slot
/// (ties: config order).
pub fn place(s: &OrchestratorState, preferred: Option<&str>) -> Placement {
    if s.policy.ssh_hosts.is_empty() {
        return Placement::Local;
    }
    let loads = loads(s);
    let cap = s.policy.max_concurrent_agents_per_host.map(|c| c as usize);
    let free = |h: &str| {
        !s.hosts_down.contains_key(h) && cap.is_none_or(|c| loads.get(h).copied().unwrap_or(0) < c)
    };
    if let Some(p) = preferred.filter(|p| s.policy.ssh_hosts.iter().any(|h| h == p)) {
        if free(p) {
            return Placement::Host(p.to_string());
        }
    }
    s.policy
        .ssh_hosts
        .iter()
        .filter(|h| free(h))
        .min_by_key(|h| loads.get(h.as_str()).copied().unwrap_or(0))
        .map_or(Placement::Full, |h| Placement::Host(h.clone()))
}

/// Mark `host` down after a connection failure (or a failed probe) at `now`.
pub fn mark_down(s: &mut OrchestratorState, host: &str, error: &str, now: Millis) {
    let e = s.hosts_down.entry(host.to_string()).or_insert(HostDown {
        since: now,
        ..HostDown::default()
    });
    e.failures = e.failures.saturating_add(1);
    e.probing = false;
    e.probe_at = now.saturating_add(probe_delay(e.failures));
    e.error = error.chars().take(300).collect();
    log::warn!(
        "host marked down host={host} failures={} next_probe_in_ms={} error={:?}",
        e.failures,
        e.probe_at.saturating_sub(now),
        e.error
    );
}

/// A probe result: down for longer, or up again; then the checks of its orphans not being
/// checked.
pub fn probed(
    s: &mut OrchestratorState,
    host: &str,
    result: Result<(), String>,
    now: Millis,
) -> Vec<Action> {
    if let Err(e) = result {
        mark_down(s, host, &e, now);
        return Vec::new();
    }
    if s.hosts_down.remove(host).is_some() {
        log::info!("host is up again host={host}");
    }
    let on_host = s.orphans.iter_mut();
    let due = on_host.filter(|(_, o)| !o.checking && o.host.as_deref() == Some(host));
    due.map(|(id, o)| check_orphan(id, o)).collect()
}

/// The probes of hosts whose probe is due at `now`; they are marked as probing.
pub fn due_probes(s: &mut OrchestratorState, now: Millis) -> Vec<Action> {
    let mut due = Vec::new();
    for (h, d) in s.hosts_down.iter_mut() {
        if !d.probing && d.probe_at <= now {
            d.probing = true;
            due.push(Action::ProbeHost { host: h.clone() });
        }
    }
    due
}

/// The earliest probe due (for `next_deadline`).
pub fn next_probe(s: &OrchestratorState) -> Option<Millis> {
    s.hosts_down
        .values()
        .filter(|d| !d.probing)
        .map(|d| d.probe_at)
        .min()
}

/// Forget hosts no longer configured (after a reload).
pub fn retain_configured(s: &mut OrchestratorState) {
    let hosts = &s.policy.ssh_hosts;
    s.hosts_down.retain(|h, _| hosts.contains(h));
}

/// Exponential probe backoff: 5 s, 10 s, 20 s, … capped at 5 min.
pub fn probe_delay(failures: u32) -> u64 {
    super::rules::backoff_ms(PROBE_BASE_MS, failures, PROBE_MAX_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrator::state::Policy;

    fn state(hosts: &[&str], cap: Option<u32>) -> OrchestratorState {
        OrchestratorState::new(
            Policy {
                ssh_hosts: hosts.iter().map(|h| h.to_string()).collect(),
                max_concurrent_agents_per_host: cap,
                ..Policy::default()
            },
            0,
        )
    }

    // Placement against running work (load, cap, preference) is tested through the engine in
    // tests/ssh_scheduling.rs.

    #[test]
    fn no_hosts_is_local() {
        assert_eq!(place(&state(&[], Some(1)), None), Placement::Local);
    }

    #[test]
    fn config_order_breaks_ties_and_unknown_preferences_are_ignored() {
        let s = state(&["a", "b", "c"], None);
        assert_eq!(place(&s, None), Placement::Host("a".into()));
        assert_eq!(place(&s, Some("c")), Placement::Host("c".into()));
        assert_eq!(place(&s, Some("gone")), Placement::Host("a".into()));
    }

    #[test]
    fn down_hosts_take_no_work_and_are_probed_with_backoff() {
        let mut s = state(&["a", "b"], None);
        mark_down(&mut s, "a", "host_unavailable: ssh a: refused", 1_000);
        assert_eq!(place(&s, Some("a")), Placement::Host("b".into()));
        mark_down(&mut s, "b", "x", 1_000);
        assert_eq!(place(&s, None), Placement::Full);
        assert_eq!(next_probe(&s), Some(6_000));
        assert!(due_probes(&mut s, 5_999).is_empty());
        let probe = |h: &str| Action::ProbeHost { host: h.into() };
        assert_eq!(due_probes(&mut s, 6_000), [probe("a"), probe("b")]);
        assert_eq!(next_probe(&s), None, "in flight");
        probed(&mut s, "a", Ok(()), 6_100);
        probed(&mut s, "b", Err("still down".into()), 6_100);
        assert_eq!(place(&s, None), Placement::Host("a".into()));
        assert_eq!(s.hosts_down["b"].failures, 2);
        assert_eq!(next_probe(&s), Some(16_100));
    }

    #[test]
    fn probe_delay_is_capped() {
        assert_eq!(probe_delay(1), 5_000);
        assert_eq!(probe_delay(2), 10_000);
        assert_eq!(probe_delay(40), PROBE_MAX_MS);
    }

    #[test]
    fn reload_forgets_removed_hosts() {
        let mut s = state(&["a"], None);
        mark_down(&mut s, "a", "x", 0);
        let mut p = s.policy.clone();
        p.ssh_hosts.clear();
        crate::orchestrator::handle(&mut s, crate::orchestrator::Event::ConfigReloaded(p), 0);
        assert!(s.hosts_down.is_empty());
    }
}

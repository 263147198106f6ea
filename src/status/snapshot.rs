//! Building the status surface's rows (spec §13.3, §13.5) from orchestrator state (pure). It
//! lives above the core, so that the core never names a surface type.

use std::time::{Duration, UNIX_EPOCH};

use super::{
    AgentTotals, BlockedRow, Counts, HostRow, IssueDetail, IssueSpend, RecentEvent, RetryRow,
    RunningRow, StateSnapshot, TrackerHealth,
};
use crate::timefmt::rfc3339_millis;

use crate::orchestrator::hosts;
use crate::orchestrator::state::{
    BlockedEntry, Millis, OrchestratorState, RetryEntry, RunningEntry,
};

/// The issue's lifetime spend row (zero when it has spent nothing yet).
fn spend(s: &OrchestratorState, issue_id: &str) -> IssueSpend {
    s.spend.get(issue_id).copied().unwrap_or_default()
}

/// RFC 3339 (milliseconds) of an orchestrator-clock time.
pub(crate) fn fmt_millis(t: Millis) -> String {
    rfc3339_millis(UNIX_EPOCH + Duration::from_millis(t))
}

fn running_row(s: &OrchestratorState, e: &RunningEntry) -> RunningRow {
    RunningRow {
        issue_id: e.issue.id.clone(),
        issue_identifier: e.issue.identifier.clone(),
        title: e.issue.title.clone(),
        url: e.issue.url.clone(),
        state: e.issue.state.clone(),
        session_id: e.session_id.clone(),
        turn_count: e.turn_count,
        last_event: e.last_event.clone(),
        last_message: e.last_message.clone(),
        started_at: fmt_millis(e.started_at),
        last_event_at: e.last_event_at.map(fmt_millis),
        tokens: e.tokens,
        spend: spend(s, &e.issue.id),
        cost_usd: e.cost_usd,
        attempt: e.attempt,
        resumed: e.resumed,
        host: e.host.clone(),
    }
}

fn retry_row(r: &RetryEntry, now: Millis) -> RetryRow {
    RetryRow {
        issue_id: r.issue_id.clone(),
        issue_identifier: r.identifier.clone(),
        url: r.url.clone(),
        attempt: r.attempt,
        due_at: fmt_millis(r.due_at),
        due_in_ms: r.due_at.saturating_sub(now),
        error: r.error.clone(),
    }
}

fn blocked_row(b: &BlockedEntry) -> BlockedRow {
    BlockedRow {
        issue_id: b.issue_id.clone(),
        issue_identifier: b.identifier.clone(),
        url: b.url.clone(),
        state: b.state.clone(),
        reason: b.reason.clone(),
        since: fmt_millis(b.since),
    }
}

/// `GET /api/v1/state`: rows sorted by identifier; runtime totals include live elapsed time.
pub fn state_snapshot(s: &OrchestratorState, now: Millis) -> StateSnapshot {
    let mut running: Vec<RunningRow> = s.running.values().map(|e| running_row(s, e)).collect();
    running.sort_by(|a, b| a.issue_identifier.cmp(&b.issue_identifier));
    let mut retrying: Vec<RetryRow> = s
        .retry_attempts
        .values()
        .map(|r| retry_row(r, now))
        .collect();
    retrying
        .sort_by(|a, b| (&a.due_at, &a.issue_identifier).cmp(&(&b.due_at, &b.issue_identifier)));
    let mut blocked: Vec<BlockedRow> = s.blocked.values().map(blocked_row).collect();
    blocked.sort_by(|a, b| a.issue_identifier.cmp(&b.issue_identifier));
    let live: f64 = s
        .running
        .values()
        .map(|e| now.saturating_sub(e.started_at) as f64 / 1000.0)
        .sum();
    let t = &s.agent_totals;
    StateSnapshot {
        generated_at: fmt_millis(now),
        counts: Counts {
            running: running.len(),
            retrying: retrying.len(),
            blocked: blocked.len(),
        },
        running,
        retrying,
        blocked,
        agent_totals: AgentTotals {
            tokens: t.tokens,
            turns: t.turns,
            seconds_running: t.ended_seconds + live,
            cost_usd: t.cost_usd,
        },
        budget: s.policy.budget,
        rate_limits: s.agent_rate_limits.clone(),
        tracker: TrackerHealth {
            last_successful_poll_at: s.poll.last_success_at.map(fmt_millis),
            last_error: s.poll.last_error.clone(),
            rate_limit: s.poll.rate_limit.clone(),
            poll_interval_ms: s.poll.gate.poll_interval(s.policy.poll_interval_ms),
            points_target_per_hour: s.poll.gate.pace.plan.target_per_hour,
            points_projected_per_hour: s.poll.gate.pace.plan.projected_per_hour,
        },
        hosts: host_rows(s),
    }
}

/// The SSH hosts' load, cap and health, in config order.
fn host_rows(s: &OrchestratorState) -> Vec<HostRow> {
    let loads = hosts::loads(s);
    s.policy
        .ssh_hosts
        .iter()
        .map(|h| {
            let down = s.hosts_down.get(h);
            HostRow {
                host: h.clone(),
                running: loads.get(h).copied().unwrap_or(0),
                cap: s.policy.max_concurrent_agents_per_host,
                up: down.is_none(),
                error: down.map(|d| d.error.clone()),
                next_probe_at: down.map(|d| fmt_millis(d.probe_at)),
            }
        })
        .collect()
}

/// `GET /api/v1/<issue_identifier>`: `None` when the issue is not running, retrying or blocked.
pub fn issue_detail(s: &OrchestratorState, identifier: &str, now: Millis) -> Option<IssueDetail> {
    let running = s
        .running
        .values()
        .find(|e| e.issue.identifier == identifier);
    let retry = s
        .retry_attempts
        .values()
        .find(|r| r.identifier == identifier);
    let blocked = s.blocked.values().find(|b| b.identifier == identifier);
    let (issue_id, status, workspace) = (running
        .map(|e| (&e.issue.id, "running", &e.workspace_path)))
    .or(retry.map(|r| (&r.issue_id, "retrying", &r.workspace_path)))
    .or(blocked.map(|b| (&b.issue_id, "blocked", &b.workspace_path)))?;
    let recent_events = s
        .recent_events
        .get(issue_id)
        .map(|ring| {
            ring.iter()
                .map(|r| RecentEvent {
                    at: fmt_millis(r.at),
                    event: r.event.clone(),
                    message: r.message.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(IssueDetail {
        issue_identifier: identifier.to_string(),
        issue_id: issue_id.clone(),
        status: status.to_string(),
        workspace: Some(workspace.display().to_string()),
        attempts: s.runs_since_active.get(issue_id).copied().unwrap_or(0),
        running: running.map(|e| running_row(s, e)),
        retry: retry.map(|r| retry_row(r, now)),
        blocked: blocked.map(blocked_row),
        last_error: s.last_errors.get(issue_id).cloned(),
        spend: spend(s, issue_id),
        budget: s.policy.budget,
        recent_events,
    })
}

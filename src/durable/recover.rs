//! Startup recovery as a pure function of the stored state and the wall clock: which orphaned
//! agent groups to stop, which retries to restore (with their original due times), which
//! interrupted runs to resume, and the parked issues, counts and totals to put back.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::schema::{StoredIssue, StoredRetryKind, StoredState, StoredTotals};

/// Error text of the retry that resumes an interrupted run.
pub const INTERRUPTED: &str = "interrupted: the previous Baton process stopped while the agent ran";

/// A recorded agent process group to stop before the first dispatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanToStop {
    /// Issue id.
    pub issue_id: String,
    /// Issue identifier (for the `orphan_stopped` log line).
    pub identifier: String,
    /// Process-group id.
    pub pgid: u32,
    /// Recorded leader start time.
    pub leader_start_time: u64,
}

/// The agent session an interrupted run resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeInfo {
    /// Agent kind (`claude`, `copilot`).
    pub agent: String,
    /// The agent's own session id (claude `--resume <id>`, copilot `--resume=<uuid>`).
    pub session_id: String,
    /// Workspace of the interrupted run.
    pub workspace: Option<PathBuf>,
    /// Host of the interrupted run.
    pub host: String,
}

/// A retry to queue.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredRetry {
    /// Issue id.
    pub issue_id: String,
    /// Issue identifier.
    pub identifier: String,
    /// Milliseconds from now until due (0 when the due time has passed).
    pub due_in_ms: u64,
    /// Attempt the retry runs as: the stored retry's attempt; for an interrupted run the
    /// attempt it had (`None` = it was a first run), since an interruption is not a failure.
    pub attempt: Option<u32>,
    /// Why (for an interrupted run, [`INTERRUPTED`]).
    pub error: Option<String>,
    /// Continuation or failure (an interrupted run: continuation).
    pub kind: StoredRetryKind,
    /// Workspace of the previous run.
    pub workspace: Option<PathBuf>,
    /// Set for an interrupted run whose session id is known.
    pub resume: Option<ResumeInfo>,
}

impl RecoveredRetry {
    /// True if this retry continues an interrupted run.
    pub fn is_interrupted_run(&self) -> bool {
        self.error.as_deref() == Some(INTERRUPTED)
    }
}

/// A parked issue to restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredParked {
    /// Issue id.
    pub issue_id: String,
    /// Issue identifier.
    pub identifier: String,
    /// Why it is parked.
    pub reason: String,
    /// Board status when parked.
    pub state: String,
    /// State + labels fingerprint that releases it when it changes.
    pub fingerprint: String,
    /// When parked (Unix ms).
    pub since: u64,
    /// The reason's class (`max_attempts`, `max_runs`, `budget_exceeded`), when known.
    pub kind: Option<String>,
    /// Workspace of the last run.
    pub workspace: Option<PathBuf>,
}

/// Per-issue counters to restore.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RecoveredCounts {
    /// Latest attempt number (0 = none).
    pub attempt: u32,
    /// Runs since the issue last entered an active state.
    pub runs: u32,
    /// Token and cost totals.
    pub totals: StoredTotals,
}

/// Everything startup recovery does, in order: stop orphans, then queue retries and restore the
/// rest, then poll.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecoveryPlan {
    /// Groups to stop (only if still alive with a matching leader start time).
    pub orphans_to_stop: Vec<OrphanToStop>,
    /// Retries to queue, soonest first (interrupted runs are due at once).
    pub retries: Vec<RecoveredRetry>,
    /// Parked issues, by issue id.
    pub parked: Vec<RecoveredParked>,
    /// Counters per issue id (every known issue).
    pub counts: BTreeMap<String, RecoveredCounts>,
    /// Sum of all issues' totals.
    pub totals: StoredTotals,
}

impl RecoveryPlan {
    /// Number of interrupted runs that will resume their agent session.
    pub fn resumed_sessions(&self) -> usize {
        self.retries.iter().filter(|r| r.resume.is_some()).count()
    }

    /// `key=value` fields of the startup summary line, given how many orphans were stopped.
    pub fn summary_fields(&self, orphans_stopped: usize) -> String {
        format!(
            "restored_retries={} parked_issues={} resumed_sessions={} orphans_stopped={}",
            self.retries.len(),
            self.parked.len(),
            self.resumed_sessions(),
            orphans_stopped
        )
    }
}

/// Plan recovery from `stored` at wall-clock `now_unix_ms`. A later entry for the same issue id
/// replaces an earlier one. A running entry becomes an immediate continuation that keeps its
/// attempt and resumes its session; otherwise a parked issue stays parked (its retry, if any,
/// is dropped) and a retry keeps its due time (past = now).
pub fn recover(stored: &StoredState, now_unix_ms: u64) -> RecoveryPlan {
    let by_id: BTreeMap<&str, &StoredIssue> =
        stored.issues.iter().map(|i| (i.id.as_str(), i)).collect();
    let mut plan = RecoveryPlan::default();
    for issue in by_id.values() {
        plan.counts.insert(
            issue.id.clone(),
            RecoveredCounts {
                attempt: issue.attempt,
                runs: issue.runs,
                totals: issue.totals,
            },
        );
        add_totals(&mut plan.totals, &issue.totals);
        if let Some(run) = &issue.running {
            if run.pgid > 1 {
                plan.orphans_to_stop.push(OrphanToStop {
                    issue_id: issue.id.clone(),
                    identifier: issue.identifier.clone(),
                    pgid: run.pgid,
                    leader_start_time: run.leader_start_time,
                });
            }
            plan.retries.push(interrupted(issue));
        } else if let Some(p) = &issue.parked {
            plan.parked.push(RecoveredParked {
                issue_id: issue.id.clone(),
                identifier: issue.identifier.clone(),
                reason: p.reason.clone(),
                state: p.state.clone(),
                fingerprint: p.fingerprint.clone(),
                since: p.since,
                kind: p.kind.clone(),
                workspace: issue.workspace.clone(),
            });
        } else if let Some(r) = &issue.retry {
            plan.retries.push(RecoveredRetry {
                issue_id: issue.id.clone(),
                identifier: issue.identifier.clone(),
                due_in_ms: r.due_at.saturating_sub(now_unix_ms),
                attempt: Some(r.attempt),
                error: r.error.clone(),
                kind: r.kind,
                workspace: issue.workspace.clone(),
                resume: None,
            });
        }
    }
    // Stable sort: equal due times stay in issue-id order.
    plan.retries.sort_by_key(|r| r.due_in_ms);
    plan
}

/// The immediate retry of an interrupted run: same attempt, its session resumed when known.
fn interrupted(issue: &StoredIssue) -> RecoveredRetry {
    let run = issue.running.as_ref();
    let session = run
        .and_then(|r| r.session_id.clone())
        .or_else(|| issue.session_id.clone())
        .filter(|s| !s.is_empty());
    let agent = run
        .map(|r| r.agent.clone())
        .filter(|a| !a.is_empty())
        .or_else(|| issue.agent.clone())
        .unwrap_or_default();
    RecoveredRetry {
        issue_id: issue.id.clone(),
        identifier: issue.identifier.clone(),
        due_in_ms: 0,
        attempt: (issue.attempt > 0).then_some(issue.attempt),
        error: Some(INTERRUPTED.to_string()),
        kind: StoredRetryKind::Continuation,
        workspace: issue.workspace.clone(),
        resume: session.map(|session_id| ResumeInfo {
            agent,
            session_id,
            workspace: issue.workspace.clone(),
            host: issue.host.clone(),
        }),
    }
}

/// Add `t` to `sum` (saturating; a non-finite cost is skipped).
pub(crate) fn add_totals(sum: &mut StoredTotals, t: &StoredTotals) {
    sum.input_tokens = sum.input_tokens.saturating_add(t.input_tokens);
    sum.output_tokens = sum.output_tokens.saturating_add(t.output_tokens);
    sum.cache_read_tokens = sum.cache_read_tokens.saturating_add(t.cache_read_tokens);
    sum.cache_creation_tokens = sum
        .cache_creation_tokens
        .saturating_add(t.cache_creation_tokens);
    if t.cost_usd.is_finite() {
        sum.cost_usd += t.cost_usd;
    }
    sum.turns = sum.turns.saturating_add(t.turns);
}

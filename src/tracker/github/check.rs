//! The `github_projects` section of `baton check`: the project, its Status and priority
//! fields, the configured states, the rate-limit budget, and the board with what was skipped.

use super::project::PriorityField;
use super::{Board, GithubTracker};
use crate::model::Issue;
use crate::text::quoted;
use crate::tracker::config::{report_states, CheckLines, TrackerConfig};
use crate::tracker::Tracker;

/// The GitHub part of the report; the board's issues for the plan, `None` when the project or
/// the board could not be read.
pub(crate) fn report(cfg: &TrackerConfig, r: &mut CheckLines) -> Option<Vec<Issue>> {
    if let Some(w) = super::config::cleartext_warning(&cfg.endpoint) {
        r.push("warn", w);
    }
    // It fails only on what the preflight has reported already (the kind, token, owner, number).
    let tracker = GithubTracker::new(cfg).ok()?;
    if !check_project(r, &tracker, cfg) {
        return None;
    }
    check_board(r, &tracker).map(|b| b.issues)
}

/// The project, its Status and priority fields, the configured states and the rate limit;
/// false when the project cannot be resolved.
fn check_project(r: &mut CheckLines, tracker: &GithubTracker, cfg: &TrackerConfig) -> bool {
    let project = match tracker.project() {
        Ok(p) => p,
        Err(e) => {
            r.push("fail", format!("project: {e}"));
            return false;
        }
    };
    let (owner, number, title) = (&tracker.owner, tracker.number, quoted(&project.title));
    let text = format!("project: {owner} #{number} {title} ({})", project.id);
    r.push("ok", text);
    if project.closed {
        r.push("warn", "the project is closed");
    }
    let names: Vec<&str> = (project.status.options.iter())
        .map(|o| o.1.as_str())
        .collect();
    let label = format!("status field {}", quoted(&project.status.name));
    report_states(r, &label, &names, cfg, "option of the status field");
    match &project.priority {
        PriorityField::NotConfigured => {
            r.push("ok", "priority field: not configured (priority is null)")
        }
        PriorityField::Resolved(f) => {
            let rank = |(i, o): (usize, &(String, String))| format!("{}={}", i + 1, quoted(&o.1));
            let ranks: Vec<String> = f.options.iter().enumerate().map(rank).collect();
            let text = format!("priority field {}: {}", quoted(&f.name), ranks.join(" "));
            r.push("ok", text)
        }
        PriorityField::Unusable(why) => r.push("fail", why),
    }
    let text = match tracker.rate_limit() {
        Some(rl) => format!(
            "rate limit: {} of {} points left, resets {}",
            rl.remaining.map_or("?".into(), |n| n.to_string()),
            rl.limit.map_or("?".into(), |n| n.to_string()),
            rl.reset_at.as_deref().unwrap_or("?")
        ),
        None => "rate limit: not reported (rate limits disabled on this server)".into(),
    };
    r.push("ok", text);
    true
}

/// Fetch the whole board and summarize what was skipped; `None` when the fetch failed.
fn check_board(r: &mut CheckLines, tracker: &GithubTracker) -> Option<Board> {
    let _ = crate::tracker::take_points();
    let read = tracker.fetch_board(None);
    let points = crate::tracker::take_points();
    r.1 = tracker
        .rate_limit()
        .and_then(|rl| rl.limit)
        .map(|l| (points, l));
    let board = match read {
        Ok(b) => b,
        Err(e) => {
            r.push("fail", format!("board: {e}"));
            return None;
        }
    };
    let d = &board.dropped;
    r.push("ok", format!(
        "board: {} issues with a Status; skipped {} draft, {} pull request, {} redacted, {} archived, {} malformed, {} without Status",
        board.issues.len(),
        d.drafts,
        d.pull_requests,
        d.redacted,
        d.archived,
        d.malformed,
        d.no_status
    ));
    if d.malformed > 0 {
        r.push("warn", "malformed items were skipped (see the log)");
    }
    if !tracker.dependencies_supported() {
        r.push(
            "warn",
            "this server has no issue dependencies: blockers are ignored",
        );
    }
    Some(board)
}

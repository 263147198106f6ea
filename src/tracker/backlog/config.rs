//! The `backlog_md` entry of the tracker registry: its keys (`tracker.path` plus the shared
//! ones), the preflight check, the constructor of [`BacklogTracker`], the configured states
//! checked against the board's `statuses`, and its section of `baton check`.

use std::path::PathBuf;
use std::sync::Arc;

use super::board::{Location, WarningKind};
use super::read::LOCATIONS;
use super::{read_board, BacklogTracker};
use crate::config::{resolve_path, ConfigError, Section};
use crate::model::{contains_name, Issue};
use crate::tracker::config::{closest, report_states, CheckLines, TrackerAdapter, TrackerConfig};
use crate::tracker::{Tracker, TrackerError};

/// The `tracker.kind` spelling of Backlog.md boards.
pub const TRACKER_KIND: &str = "backlog_md";

/// The default `tracker.path`, relative to WORKFLOW.md's directory.
pub const DEFAULT_BOARD_DIR: &str = "backlog";

/// The keys every kind has, the ones this kind reads besides `path`.
const SHARED_KEYS: &[&str] = &[
    "kind",
    "active_states",
    "terminal_states",
    "required_labels",
    "excluded_labels",
];

/// The `backlog_md` entry of the tracker registry.
pub(crate) const ADAPTER: TrackerAdapter = TrackerAdapter {
    kind: TRACKER_KIND,
    parse,
    check,
    open,
    report,
};

/// The shared keys and `tracker.path` (default `backlog`, relative to WORKFLOW.md's directory;
/// `~` and `$VAR` accepted). Backlog.md's own default statuses are the state lists' defaults.
fn parse(s: &Section<'_>) -> Result<TrackerConfig, ConfigError> {
    let mut cfg: TrackerConfig = s.read_keys(Some(SHARED_KEYS))?;
    cfg.path = match s.path("path")? {
        Some(p) => Some(p),
        None => resolve_path(DEFAULT_BOARD_DIR, s.dir(), s.env()),
    };
    if s.raw("active_states").is_none() {
        cfg.active_states = vec!["To Do".into(), "In Progress".into()];
    }
    Ok(cfg)
}

/// Preflight (no I/O): the board path is set. Whether it exists is a startup check
/// ([`BacklogTracker::validate`]), so that `baton check` can say what it found there.
fn check(cfg: &TrackerConfig) -> Vec<TrackerError> {
    let kind = crate::tracker::TrackerErrorKind::MissingTrackerProject;
    let unset = TrackerError::with_class(kind, super::read::MISSING, "tracker.path is not set");
    cfg.path.is_none().then_some(unset).into_iter().collect()
}

/// The board directory of a parsed config (`backlog` in the current directory when unset).
pub(crate) fn board_dir(cfg: &TrackerConfig) -> PathBuf {
    cfg.path
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BOARD_DIR))
}

fn open(cfg: &TrackerConfig) -> Result<Arc<dyn Tracker>, TrackerError> {
    Ok(Arc::new(BacklogTracker::new(cfg)?))
}

/// One message per configured state that is not a board status (compared trimmed and
/// lowercased), naming the setting and the state, with a "did you mean" hint when a status is
/// within 3 edits. Empty when every state is known.
pub fn validate_states(statuses: &[String], active: &[String], terminal: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (which, states) in [("active", active), ("terminal", terminal)] {
        for s in states {
            if contains_name(statuses, s) {
                continue;
            }
            let hint = closest(statuses, s)
                .map(|o| format!("; did you mean {o:?}?"))
                .unwrap_or_default();
            let known: Vec<String> = statuses.iter().map(|o| format!("{o:?}")).collect();
            let known = known.join(", ");
            out.push(format!("tracker.{which}_states: {s:?} is not a status of the Backlog.md board (config.yml statuses: {known}){hint}"));
        }
    }
    out
}

/// The Backlog.md part of the report; every task as an issue for the plan, `None` when the
/// board cannot be read.
pub(crate) fn report(cfg: &TrackerConfig, r: &mut CheckLines) -> Option<Vec<Issue>> {
    // Read directly, not through the tracker's reader: the report lists the warnings itself,
    // so they are not logged too.
    let board = (read_board(&board_dir(cfg)))
        .map_err(|e| r.push("fail", format!("board: {e}")))
        .ok()?;
    r.push("ok", format!("board: {}", board.dir.display()));
    let names: Vec<&str> = board.config.statuses.iter().map(String::as_str).collect();
    let noun = "status of the Backlog.md board (config.yml statuses)";
    report_states(r, "statuses (config.yml)", &names, cfg, noun);
    let count = |loc: Location| board.tasks.iter().filter(|t| t.location == loc).count();
    let [tasks, completed, archived] = LOCATIONS.map(count);
    let warnings = board.warnings.len();
    r.push("ok", format!("tasks: {tasks} in tasks/, {completed} in completed/, {archived} in archive/tasks/ (terminal); {warnings} warning(s)"));
    for w in &board.warnings {
        match w.kind {
            WarningKind::DuplicateId => r.push("fail", &w.message),
            _ => r.push("warn", &w.message),
        }
    }
    // Tasks in completed/ and archive/tasks/ are terminal whatever their status: not in the plan.
    let mut issues = board.issues(&cfg.terminal_states);
    issues.retain(|i| !i.closed);
    Some(issues)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_the_misspelled_state_with_a_hint() {
        let statuses = v(&["To Do", "In Progress", "Done"]);
        assert!(
            validate_states(&statuses, &v(&["to do", " In Progress"]), &v(&["DONE"])).is_empty()
        );
        let m = validate_states(&statuses, &v(&["To Do", "In Progres"]), &v(&["Closed"]));
        assert_eq!(m.len(), 2);
        assert!(
            m[0].starts_with("tracker.active_states: \"In Progres\""),
            "{}",
            m[0]
        );
        assert!(m[0].ends_with("did you mean \"In Progress\"?"), "{}", m[0]);
        assert!(
            m[1].starts_with("tracker.terminal_states: \"Closed\""),
            "{}",
            m[1]
        );
        assert!(!m[1].contains("did you mean"), "{}", m[1]);
    }
}

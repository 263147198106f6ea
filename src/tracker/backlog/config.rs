//! The `backlog_md` entry of the tracker registry: its keys (`tracker.path` plus the shared
//! ones), their parsing, the preflight check, and the constructor of [`BacklogTracker`].

use std::path::PathBuf;
use std::sync::Arc;

use super::tracker::BacklogTracker;
use crate::config::{resolve_path, ConfigError, Section};
use crate::tracker::config::{TrackerAdapter, TrackerConfig, SHARED_KEYS};
use crate::tracker::{Tracker, TrackerError};

/// The `tracker.kind` spelling of Backlog.md boards.
pub const TRACKER_KIND: &str = "backlog_md";

/// The default `tracker.path`, relative to WORKFLOW.md's directory.
pub const DEFAULT_BOARD_DIR: &str = "backlog";

/// The `backlog_md` entry of the tracker registry.
pub(crate) const ADAPTER: TrackerAdapter = TrackerAdapter {
    kind: TRACKER_KIND,
    parse,
    check,
    open,
    report: super::check::report,
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
    match cfg.path {
        Some(_) => Vec::new(),
        None => vec![TrackerError::with_class(
            crate::tracker::TrackerErrorKind::MissingTrackerProject,
            "backlog_board_missing",
            "tracker.path is not set",
        )],
    }
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

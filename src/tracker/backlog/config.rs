//! The `backlog_md` entry of the tracker registry: its keys (`tracker.path` plus the shared
//! ones), their parsing, the preflight check, and the constructor of [`BacklogTracker`].

use std::path::PathBuf;
use std::sync::Arc;

use serde_yaml::Value;

use super::tracker::BacklogTracker;
use crate::tracker::config::{ParseContext, TrackerAdapter, TrackerConfig};
use crate::tracker::{Tracker, TrackerError};
use crate::workflow::config::section::{describe, Section};
use crate::workflow::config::{resolve_path, ConfigError};

/// The `tracker.kind` spelling of Backlog.md boards.
pub const TRACKER_KIND: &str = "backlog_md";

/// The default `tracker.path`, relative to WORKFLOW.md's directory.
pub const DEFAULT_BOARD_DIR: &str = "backlog";

/// The `backlog_md` entry of the tracker registry.
pub(crate) const ADAPTER: TrackerAdapter = TrackerAdapter {
    kind: TRACKER_KIND,
    keys: &[
        "kind",
        "path",
        "required_labels",
        "excluded_labels",
        "active_states",
        "terminal_states",
    ],
    parse,
    check,
    open,
    report: super::check::report,
};

/// Parse `tracker.path` (default `backlog`, relative to WORKFLOW.md's directory; `~` and `$VAR`
/// accepted). Backlog.md's own default statuses are the shared state lists' defaults here.
fn parse(
    s: &Section<'_>,
    ctx: &ParseContext<'_>,
    cfg: &mut TrackerConfig,
) -> Result<(), ConfigError> {
    let raw = match s.raw("path") {
        None | Some(Value::Null) => DEFAULT_BOARD_DIR.to_string(),
        Some(Value::String(p)) => p.clone(),
        Some(other) => return Err(s.invalid("path", "a path string", &describe(other))),
    };
    let path = resolve_path(&raw, ctx.workflow_dir, ctx.env).ok_or_else(|| {
        s.invalid(
            "path",
            "a path (or $VAR naming a set variable)",
            &format!("{raw:?}"),
        )
    })?;
    cfg.path = Some(path);
    cfg.active_states = vec!["To Do".into(), "In Progress".into()];
    cfg.terminal_states = vec!["Done".into()];
    Ok(())
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

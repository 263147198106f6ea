//! `tracker.*` (spec §5.3.1) and the registry of tracker kinds.
//!
//! The section has keys every kind shares (`kind`, the state lists, the label rules), which the
//! core reads, and keys that belong to one kind, which only that kind's module parses and reads.
//! Each kind registers a [`TrackerAdapter`] in [`ADAPTERS`]: its key list, its parser, its
//! preflight check and its constructor. Adding a tracker kind: a module with such an adapter, its
//! fields in [`TrackerConfig`], and one line in [`ADAPTERS`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{backlog, github};
use super::{Tracker, TrackerError, TrackerErrorKind};
use crate::check::Report;
use crate::model::Issue;
use crate::workflow::config::section::Section;
use crate::workflow::config::{ConfigEnv, ConfigError, Secret};

pub use super::github::config::{OwnerType, DEFAULT_ENDPOINT, DEFAULT_MAX_ITEMS, MAX_MAX_ITEMS};

/// `tracker.budget_share` when unset: half the hourly limit, leaving the rest to the agents and
/// people sharing the token.
pub const DEFAULT_BUDGET_SHARE: f64 = 0.5;

/// `tracker.*` (spec §5.3.1; every key in docs/trackers/). `kind` and the state and label lists
/// are shared by every kind; the other fields belong to one kind and keep their defaults for
/// the others.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackerConfig {
    /// `None` when absent.
    pub kind: Option<String>,
    /// Never rewritten.
    pub endpoint: String,
    /// Resolved (`$VAR`, `GITHUB_TOKEN`, then `gh auth token`); `None` when missing.
    pub token: Option<Secret>,
    pub owner: Option<String>,
    pub owner_type: OwnerType,
    pub project_number: Option<u64>,
    pub status_field: String,
    pub priority_field: Option<String>,
    /// `owner/name` repositories allowed (empty = all).
    pub repos: Vec<String>,
    pub required_labels: Vec<String>,
    pub excluded_labels: Vec<String>,
    pub active_states: Vec<String>,
    pub terminal_states: Vec<String>,
    pub page_size: u32,
    pub server_side_filter: bool,
    pub timeout_ms: u64,
    /// Most project items one board read may return before it fails with
    /// `github_board_too_large`.
    pub max_items: u64,
    /// `backlog_md`: the board directory, resolved (default `backlog` next to WORKFLOW.md).
    pub path: Option<PathBuf>,
    /// The share of the token's hourly limit polls and fetches may spend (default 0.5).
    pub budget_share: f64,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            kind: None,
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token: None,
            owner: None,
            owner_type: OwnerType::Organization,
            project_number: None,
            status_field: "Status".into(),
            priority_field: None,
            repos: Vec::new(),
            required_labels: Vec::new(),
            excluded_labels: Vec::new(),
            active_states: vec!["Todo".into(), "In Progress".into()],
            terminal_states: vec!["Done".into()],
            page_size: 50,
            server_side_filter: false,
            timeout_ms: 30_000,
            max_items: DEFAULT_MAX_ITEMS,
            path: None,
            budget_share: DEFAULT_BUDGET_SHARE,
        }
    }
}

/// What a kind's parser may use besides its section: the environment `$VAR`, `~` and
/// credentials resolve against, and the directory relative paths start from.
pub(crate) struct ParseContext<'a> {
    pub env: &'a dyn ConfigEnv,
    pub workflow_dir: &'a Path,
}

/// One tracker kind: everything the core needs to configure and build it.
pub(crate) struct TrackerAdapter {
    pub kind: &'static str,
    /// Every key of `tracker.*` for this kind, the shared ones included (unknown-key hints).
    pub keys: &'static [&'static str],
    /// Parse the kind's own keys into `cfg` (the shared ones are parsed already).
    pub parse: fn(&Section<'_>, &ParseContext<'_>, &mut TrackerConfig) -> Result<(), ConfigError>,
    /// Preflight of the kind's own keys (no I/O): every problem, each naming the key.
    pub check: fn(&TrackerConfig) -> Vec<TrackerError>,
    /// Builds the tracker (no request yet).
    pub open: fn(&TrackerConfig) -> Result<Arc<dyn Tracker>, TrackerError>,
    /// The kind's section of `baton check` (what it resolved, read and skipped); returns every
    /// issue it could read, for the dispatch plan, or `None` when it could not read them.
    pub report: fn(&TrackerConfig, &mut Report<'_>) -> Option<Vec<Issue>>,
}

/// The registry of tracker kinds. The first one is the default shown in messages.
pub(crate) const ADAPTERS: &[&TrackerAdapter] =
    &[&github::config::ADAPTER, &backlog::config::ADAPTER];

fn registered(kind: Option<&str>) -> Option<&'static TrackerAdapter> {
    ADAPTERS.iter().copied().find(|a| Some(a.kind) == kind)
}

/// The adapter that parses and checks the section. A missing or unknown kind is parsed as the
/// default kind, so that preflight reports every problem at once (the kind and the rest).
fn adapter_for(kind: Option<&str>) -> &'static TrackerAdapter {
    registered(kind).unwrap_or(ADAPTERS[0])
}

/// For unknown-key hints.
pub(crate) fn known_keys(kind: Option<&str>) -> &'static [&'static str] {
    adapter_for(kind).keys
}

/// The message for a missing or unregistered `tracker.kind` (the one text for preflight and for
/// a tracker's constructor).
pub(crate) fn kind_message(kind: Option<&str>) -> String {
    let kinds: Vec<&str> = ADAPTERS.iter().map(|a| a.kind).collect();
    let kinds = kinds.join(" or ");
    match kind {
        None => format!("tracker.kind is required; set it to {kinds}"),
        Some(other) => format!("tracker.kind must be {kinds}, got {other:?}"),
    }
}

/// Parse `tracker.*`: `kind`, the kind's own keys, then the shared lists.
pub(crate) fn parse(s: &Section<'_>, ctx: &ParseContext<'_>) -> Result<TrackerConfig, ConfigError> {
    let mut cfg = TrackerConfig {
        kind: s.string("kind", ctx.env)?,
        ..TrackerConfig::default()
    };
    (adapter_for(cfg.kind.as_deref()).parse)(s, ctx, &mut cfg)?;
    if let Some(v) = s.string_list("required_labels")? {
        cfg.required_labels = v;
    }
    if let Some(v) = s.string_list("excluded_labels")? {
        cfg.excluded_labels = v;
    }
    if let Some(v) = s.string_list("active_states")? {
        cfg.active_states = v;
    }
    if let Some(v) = s.string_list("terminal_states")? {
        cfg.terminal_states = v;
    }
    Ok(cfg)
}

/// Dispatch preflight of `tracker.*` (spec §6.3, no I/O): the kind, then the kind's own check.
pub(crate) fn preflight(cfg: &TrackerConfig) -> Vec<ConfigError> {
    let kind = cfg.kind.as_deref();
    let mut errs = Vec::new();
    if registered(kind).is_none() {
        let class = match kind {
            None => "missing_tracker_kind",
            Some(_) => TrackerErrorKind::UnsupportedTrackerKind.as_str(),
        };
        errs.push(ConfigError::new(class, kind_message(kind)));
    }
    errs.extend(
        (adapter_for(kind).check)(cfg)
            .into_iter()
            .map(|e| ConfigError::new(e.class, e.message)),
    );
    errs
}

/// The kind's section of `baton check`; `None` (nothing printed) for an unregistered kind, which
/// the preflight has reported already.
pub(crate) fn check_report(cfg: &TrackerConfig, r: &mut Report<'_>) -> Option<Vec<Issue>> {
    registered(cfg.kind.as_deref()).and_then(|a| (a.report)(cfg, r))
}

/// Build the tracker `tracker.kind` selects (no request yet).
pub fn open(cfg: &TrackerConfig) -> Result<Arc<dyn Tracker>, TrackerError> {
    match registered(cfg.kind.as_deref()) {
        Some(a) => (a.open)(cfg),
        None => Err(TrackerError::new(
            TrackerErrorKind::UnsupportedTrackerKind,
            kind_message(cfg.kind.as_deref()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_lists_the_shared_keys_and_is_named_in_messages() {
        let shared = [
            "kind",
            "required_labels",
            "excluded_labels",
            "active_states",
            "terminal_states",
        ];
        for a in ADAPTERS {
            for k in shared {
                assert!(a.keys.contains(&k), "{} lacks {k}", a.kind);
            }
            assert!(kind_message(None).contains(a.kind));
            assert_eq!(adapter_for(Some(a.kind)).kind, a.kind);
        }
        assert_eq!(
            kind_message(Some("jira")),
            "tracker.kind must be github_projects or backlog_md, got \"jira\""
        );
    }

    #[test]
    fn preflight_and_the_constructor_share_one_text() {
        use crate::tracker::github::GithubTracker;
        let cfg = TrackerConfig {
            kind: Some("github_projects".into()),
            ..TrackerConfig::default()
        };
        let pre: Vec<String> = preflight(&cfg).iter().map(|e| e.to_string()).collect();
        assert_eq!(pre.len(), 3, "{pre:?}");
        let err = GithubTracker::new(&cfg).unwrap_err();
        assert_eq!(pre[0], err.to_string());
        let none = TrackerConfig::default();
        let pre = preflight(&none);
        assert_eq!(pre[0].class, "missing_tracker_kind");
        let err = GithubTracker::new(&none).unwrap_err();
        assert_eq!(err.class, "unsupported_tracker_kind");
        assert_eq!(err.message, pre[0].message);
    }
}

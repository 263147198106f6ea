//! `tracker.*` (spec §5.3.1) and the registry of tracker kinds ([`ADAPTERS`]; ARCHITECTURE.md,
//! "Tracker seam"): the core reads the shared keys, each kind's module parses its own.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use super::github;
use super::{Tracker, TrackerError, TrackerErrorKind};
use crate::config::{ConfigError, Secret, Section};
use crate::model::{normalize_name, Issue};
use crate::text::{quoted, quoted_list};

pub use super::github::config::{OwnerType, DEFAULT_ENDPOINT};

/// `tracker.*` (every key in docs/trackers/). `kind` and the state and label lists are shared;
/// the other fields belong to one kind and keep their defaults for the others.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct TrackerConfig {
    pub kind: Option<String>,
    /// Never rewritten.
    pub endpoint: String,
    /// Resolved (`$VAR`, `GITHUB_TOKEN`, then `gh auth token`); `None` when missing.
    #[serde(skip)]
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
    #[serde(skip)]
    pub page_size: u32,
    pub server_side_filter: bool,
    pub timeout_ms: u64,
    /// Most project items one board read may return before it fails with
    /// `github_board_too_large`.
    #[serde(skip)]
    pub max_items: u64,
    /// `backlog_md`: the board directory, resolved (default `backlog` next to WORKFLOW.md).
    #[serde(skip)]
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
            max_items: 20_000,
            path: None,
            // Half the hourly limit, leaving the rest to the agents and people sharing the token.
            budget_share: 0.5,
        }
    }
}

/// The lines of a `baton check` section: `(tag, text)` with tag `ok`, `note`, `warn` or `fail`;
/// and, for a tracker with a budget, what one board read cost and the hourly limit (the check
/// shows the poll interval the daemon starts from).
#[derive(Debug, Default)]
pub(crate) struct CheckLines(pub Vec<(&'static str, String)>, pub Option<(u64, i64)>);

impl CheckLines {
    pub(crate) fn push(&mut self, tag: &'static str, text: impl Into<String>) {
        self.0.push((tag, text.into()));
    }
}

/// One tracker kind: everything the core needs to configure and build it.
pub(crate) struct TrackerAdapter {
    pub kind: &'static str,
    /// Read `tracker.*` for this kind (the keys it reads are the known ones).
    pub parse: fn(&Section<'_>) -> Result<TrackerConfig, ConfigError>,
    /// Preflight of the kind's own keys (no I/O): every problem, each naming the key.
    pub check: fn(&TrackerConfig) -> Vec<TrackerError>,
    /// Builds the tracker (no request yet).
    pub open: fn(&TrackerConfig) -> Result<Arc<dyn Tracker>, TrackerError>,
    /// The kind's section of `baton check` (what it resolved, read and skipped); returns every
    /// issue it could read, for the dispatch plan, or `None` when it could not read them.
    pub report: fn(&TrackerConfig, &mut CheckLines) -> Option<Vec<Issue>>,
}

/// The registry of tracker kinds; the first is the default.
pub(crate) const ADAPTERS: &[&TrackerAdapter] = &[
    &github::config::ADAPTER,
    #[cfg(feature = "backlog")]
    &super::backlog::config::ADAPTER,
];

fn registered(kind: Option<&str>) -> Option<&'static TrackerAdapter> {
    ADAPTERS.iter().copied().find(|a| Some(a.kind) == kind)
}

/// The adapter that parses and checks the section. A missing or unknown kind is parsed as the
/// default kind, so that preflight reports every problem at once (the kind and the rest).
fn adapter_for(kind: Option<&str>) -> &'static TrackerAdapter {
    registered(kind).unwrap_or(ADAPTERS[0])
}

/// The message for a missing or unregistered `tracker.kind` (preflight and constructors).
pub(crate) fn kind_message(kind: Option<&str>) -> String {
    let kinds: Vec<&str> = ADAPTERS.iter().map(|a| a.kind).collect();
    let kinds = kinds.join(" or ");
    match kind {
        None => format!("tracker.kind is required; set it to {kinds}"),
        Some(other) => format!("tracker.kind must be {kinds}, got {other:?}"),
    }
}

/// Read `tracker.*` as its kind says.
pub(crate) fn parse(s: &Section<'_>) -> Result<TrackerConfig, ConfigError> {
    let kind: Option<String> = s.get("kind")?;
    (adapter_for(kind.as_deref()).parse)(s)
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
    let problems = (adapter_for(kind).check)(cfg).into_iter();
    errs.extend(problems.map(|e| ConfigError::new(e.class, e.message)));
    errs
}

/// The kind's section of `baton check`; `None` (nothing printed) for an unregistered kind, which
/// the preflight has reported already.
pub(crate) fn check_report(cfg: &TrackerConfig, out: &mut CheckLines) -> Option<Vec<Issue>> {
    registered(cfg.kind.as_deref()).and_then(|a| (a.report)(cfg, out))
}

/// The tracker's state names under `label` (e.g. `status field "Status"`), then both configured
/// state lists checked against them: a note for a case/whitespace-only match, a failure with a
/// "did you mean" hint when one is within 3 edits. `none_of` names what the names are (e.g.
/// `option of the status field`).
pub(crate) fn report_states(
    out: &mut CheckLines,
    label: &str,
    names: &[&str],
    cfg: &TrackerConfig,
    none_of: &str,
) {
    out.push("ok", format!("{label}: {}", quoted_list(names, " | ")));
    for (which, states) in [
        ("active", &cfg.active_states),
        ("terminal", &cfg.terminal_states),
    ] {
        let mut all_ok = true;
        for s in states {
            if names.iter().any(|o| *o == s.trim()) {
                continue;
            }
            let (s_q, norm) = (quoted(s), normalize_name(s));
            if let Some(o) = names.iter().find(|o| normalize_name(o) == norm) {
                let o = quoted(o);
                let text =
                    format!("{which} state {s_q} matches option {o} ignoring case/whitespace");
                out.push("note", text);
                continue;
            }
            all_ok = false;
            let hint = (closest(names, s).map(|o| format!(" (did you mean {}?)", quoted(o))))
                .unwrap_or_default();
            let text = format!("tracker.{which}_states: {s_q} matches no {none_of}{hint}");
            out.push("fail", text);
        }
        if all_ok {
            let list = quoted_list(states, ", ");
            out.push("ok", format!("{which} states: {list}"));
        }
    }
}

/// The name closest to `s` within 3 edits (both normalized), for a "did you mean" hint.
pub(crate) fn closest<'a, S: AsRef<str>>(names: &'a [S], s: &str) -> Option<&'a str> {
    let want = normalize_name(s);
    (names.iter().map(AsRef::as_ref))
        .map(|o| (crate::config::edit_distance(&normalize_name(o), &want), o))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, o)| o)
}

/// Build the tracker `tracker.kind` selects (no request yet). A missing or unknown kind fails in
/// the default kind's constructor with `unsupported_tracker_kind` and [`kind_message`].
pub fn open(cfg: &TrackerConfig) -> Result<Arc<dyn Tracker>, TrackerError> {
    (adapter_for(cfg.kind.as_deref()).open)(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_named_in_messages() {
        for a in ADAPTERS {
            assert!(kind_message(None).contains(a.kind));
            assert_eq!(adapter_for(Some(a.kind)).kind, a.kind);
        }
        #[cfg(feature = "backlog")]
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

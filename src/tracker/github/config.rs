//! The `github_projects` part of `tracker.*` (spec §5.3.1): its keys, their parsing (token
//! resolution included), the preflight check shared by `baton check`, startup and
//! [`super::GithubTracker::new`], and its section of `baton check` (the project, its Status and
//! priority fields, the configured states, the rate-limit budget, the board and what it skipped).

use std::sync::Arc;

use serde::{de, Deserialize};

use super::normalize::PriorityField;
use super::{Board, GithubTracker, TRACKER_KIND};
use crate::config::{ConfigError, Secret, Section};
use crate::model::Issue;
use crate::text::quoted;
use crate::tracker::config::{report_states, CheckLines, TrackerAdapter, TrackerConfig};
use crate::tracker::{Tracker, TrackerError, TrackerErrorKind};

/// Default GitHub GraphQL endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://api.github.com/graphql";

/// Largest accepted `tracker.max_items`.
pub const MAX_MAX_ITEMS: u64 = 1_000_000;

/// `tracker.owner_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerType {
    /// `organization` (default; `org` too): resolved with `organization(login:)`.
    Organization,
    /// `user`: resolved with `user(login:)`.
    User,
}

impl<'de> Deserialize<'de> for OwnerType {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "organization" | "org" => Ok(OwnerType::Organization),
            "user" => Ok(OwnerType::User),
            other => Err(de::Error::custom(format!(
                "must be organization or user, got {other:?}"
            ))),
        }
    }
}

/// The `github_projects` entry of the tracker registry.
pub(crate) const ADAPTER: TrackerAdapter = TrackerAdapter {
    kind: TRACKER_KIND,
    parse,
    check,
    open,
    report,
};

fn open(cfg: &TrackerConfig) -> Result<Arc<dyn Tracker>, TrackerError> {
    Ok(Arc::new(GithubTracker::new(cfg)?))
}

/// Every key of [`TrackerConfig`] but `path`; the token is a literal or `$VAR` (one that resolves
/// empty is missing), else `GITHUB_TOKEN`, else `gh auth token`.
fn parse(s: &Section<'_>) -> Result<TrackerConfig, ConfigError> {
    let mut cfg: TrackerConfig = s.read()?;
    let env = s.env();
    cfg.token = match s.get::<Option<Secret>>("token")? {
        None if s.raw("token").is_none() => (env.var("GITHUB_TOKEN").filter(|v| !v.is_empty()))
            .or_else(|| env.gh_auth_token())
            .map(Secret::new),
        token => token,
    };
    cfg.page_size = s.ranged("page_size", cfg.page_size.into(), 100)? as u32;
    cfg.max_items = s.ranged("max_items", cfg.max_items, MAX_MAX_ITEMS)?;
    if cfg.budget_share > 1.0 {
        let got = crate::config::describe(s.raw("budget_share").unwrap_or(&Default::default()));
        return Err(s.invalid("budget_share", "a number above 0 and at most 1", &got));
    }
    for repo in &cfg.repos {
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.trim().is_empty()) {
            let got = format!("{repo:?}");
            return Err(s.invalid("repos", "a list of owner/name strings", &got));
        }
    }
    Ok(cfg)
}

/// The token, owner and project number a [`GithubTracker`] cannot start without, or every
/// missing one as a typed error naming the key.
pub(crate) fn required(cfg: &TrackerConfig) -> Result<(Secret, String, u64), Vec<TrackerError>> {
    let owner = cfg.owner.clone().filter(|o| !o.trim().is_empty());
    if let (Some(token), Some(owner), Some(number)) = (&cfg.token, &owner, cfg.project_number) {
        return Ok((token.clone(), owner.clone(), number));
    }
    let problems = [
        (cfg.token.is_none(), TrackerErrorKind::MissingTrackerToken, "tracker.token is missing: set tracker.token (literal or $VAR), export GITHUB_TOKEN, or run `gh auth login`"),
        (owner.is_none(), TrackerErrorKind::MissingTrackerProject, "tracker.owner is required (organization or user login owning the project)"),
        (cfg.project_number.is_none(), TrackerErrorKind::MissingTrackerProject, "tracker.project_number is required (the number in the project's URL)"),
    ];
    let missing = problems.into_iter().filter(|p| p.0);
    Err(missing.map(|p| TrackerError::new(p.1, p.2)).collect())
}

/// The warning for an `http://` endpoint whose host is not loopback: the token would cross the
/// network in cleartext. `None` for `https://` and loopback hosts (a local proxy or test server).
pub(crate) fn cleartext_warning(endpoint: &str) -> Option<String> {
    let (scheme, rest) = endpoint.split_at_checked("http://".len())?;
    if !scheme.eq_ignore_ascii_case("http://") {
        return None;
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = &authority[authority.rfind('@').map_or(0, |i| i + 1)..];
    let host = match host_port.strip_prefix('[') {
        Some(v6) => &v6[..v6.find(']').unwrap_or(v6.len())],
        None => &host_port[..host_port.find(':').unwrap_or(host_port.len())],
    };
    let ip = host.parse::<std::net::IpAddr>();
    if host.eq_ignore_ascii_case("localhost") || ip.is_ok_and(|ip| ip.is_loopback()) {
        return None;
    }
    let shown = super::client::redact_userinfo(endpoint);
    Some(format!("tracker.endpoint {shown} is plain http:// to a host that is not loopback: the token is sent in cleartext (use https://)"))
}

fn check(cfg: &TrackerConfig) -> Vec<TrackerError> {
    required(cfg).err().unwrap_or_default()
}

/// The GitHub part of the report; the board's issues for the plan, `None` when the project or
/// the board could not be read.
fn report(cfg: &TrackerConfig, r: &mut CheckLines) -> Option<Vec<Issue>> {
    if let Some(w) = cleartext_warning(&cfg.endpoint) {
        r.push("warn", w);
    }
    // It fails only on what the preflight has reported already (the kind, token, owner, number).
    let tracker = GithubTracker::new(cfg).ok()?;
    check_project(r, &tracker, cfg)?;
    check_board(r, &tracker).map(|b| b.issues)
}

/// The project, its Status and priority fields, the configured states and the rate limit;
/// `None` when the project cannot be resolved.
fn check_project(r: &mut CheckLines, tracker: &GithubTracker, cfg: &TrackerConfig) -> Option<()> {
    let project = (tracker.project())
        .map_err(|e| r.push("fail", format!("project: {e}")))
        .ok()?;
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
    Some(())
}

/// Fetch the whole board and summarize what was skipped; `None` when the fetch failed.
fn check_board(r: &mut CheckLines, tracker: &GithubTracker) -> Option<Board> {
    let _ = crate::tracker::take_points();
    let read = tracker.fetch_board(None);
    let points = crate::tracker::take_points();
    let limit = tracker.rate_limit().and_then(|rl| rl.limit);
    r.1 = limit.map(|l| (points, l));
    let board = read
        .map_err(|e| r.push("fail", format!("board: {e}")))
        .ok()?;
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
        let why = "this server has no issue dependencies: blockers are ignored";
        r.push("warn", why);
    }
    Some(board)
}

#[cfg(test)]
mod tests {
    use super::cleartext_warning;

    #[test]
    fn cleartext_endpoints_off_loopback_are_warned_about() {
        for quiet in [
            "https://api.github.com/graphql",
            "http://127.0.0.1:8080/graphql",
            "http://127.9.9.9/graphql",
            "HTTP://localhost:1/x",
            "http://[::1]:80/graphql",
            "http://user:pw@127.0.0.1/graphql",
        ] {
            assert_eq!(cleartext_warning(quiet), None, "{quiet}");
        }
        for loud in [
            "http://ghe.example/api/graphql",
            "http://10.0.0.1:80/graphql",
            "http://[2001:db8::1]/graphql",
            "http://127.0.0.1.evil.example/graphql",
            "http://0.0.0.0:9/graphql",
        ] {
            let w = cleartext_warning(loud).unwrap();
            assert!(w.contains("cleartext"), "{w}");
        }
        let w = cleartext_warning("http://bob:SECRET@ghe.example/graphql").unwrap();
        assert!(!w.contains("SECRET"), "{w}");
    }
}

//! The `github_projects` part of `tracker.*` (spec §5.3.1): its keys, their parsing (token
//! resolution included), and the preflight check shared by `baton check`, startup and
//! [`super::GithubTracker::new`].

use std::sync::Arc;

use super::{GithubTracker, TRACKER_KIND};
use crate::tracker::config::{ParseContext, TrackerAdapter, TrackerConfig};
use crate::tracker::{Tracker, TrackerError, TrackerErrorKind};
use crate::workflow::config::section::Section;
use crate::workflow::config::{ConfigError, Secret};

/// Default GitHub GraphQL endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://api.github.com/graphql";

/// Default `tracker.max_items`: the most project items one board read may return.
pub const DEFAULT_MAX_ITEMS: u64 = 20_000;

/// Largest accepted `tracker.max_items`.
pub const MAX_MAX_ITEMS: u64 = 1_000_000;

/// `tracker.owner_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerType {
    /// `organization` (default): resolved with `organization(login:)`.
    Organization,
    /// `user`: resolved with `user(login:)`.
    User,
}

/// The `github_projects` entry of the tracker registry.
pub(crate) const ADAPTER: TrackerAdapter = TrackerAdapter {
    kind: TRACKER_KIND,
    keys: &[
        "kind",
        "endpoint",
        "token",
        "owner",
        "owner_type",
        "project_number",
        "status_field",
        "priority_field",
        "repos",
        "required_labels",
        "excluded_labels",
        "active_states",
        "terminal_states",
        "page_size",
        "server_side_filter",
        "timeout_ms",
        "max_items",
        "budget_share",
    ],
    parse,
    check,
    open,
    report: super::check::report,
};

fn open(cfg: &TrackerConfig) -> Result<Arc<dyn Tracker>, TrackerError> {
    Ok(Arc::new(GithubTracker::new(cfg)?))
}

fn parse(
    s: &Section<'_>,
    ctx: &ParseContext<'_>,
    cfg: &mut TrackerConfig,
) -> Result<(), ConfigError> {
    let env = ctx.env;
    // A literal or `$VAR` (one that resolves empty is missing), else GITHUB_TOKEN, else `gh`.
    cfg.token = match s.secret("token", env)? {
        Some((tok, _)) => Some(tok),
        None if s.is_set("token") => None,
        None => (env.var("GITHUB_TOKEN").filter(|v| !v.is_empty()))
            .or_else(|| env.gh_auth_token())
            .map(Secret::new),
    };
    cfg.owner_type = match s.string("owner_type", env)?.as_deref() {
        None | Some("organization") | Some("org") => OwnerType::Organization,
        Some("user") => OwnerType::User,
        Some(other) => {
            return Err(s.invalid("owner_type", "organization or user", &format!("{other:?}")))
        }
    };
    let ranged = |key: &str, default: u64, max: u64| match s.uint(key)?.unwrap_or(default) {
        v if (1..=max).contains(&v) => Ok(v),
        v => Err(s.invalid(key, &format!("an integer from 1 to {max}"), &v.to_string())),
    };
    cfg.page_size = ranged("page_size", 50, 100)? as u32;
    if let Some(endpoint) = s.plain_string("endpoint")? {
        cfg.endpoint = endpoint;
    }
    cfg.owner = s.string("owner", env)?;
    cfg.project_number = match s.uint("project_number")? {
        Some(0) => return Err(s.invalid("project_number", "a positive integer", "0")),
        other => other,
    };
    if let Some(field) = s.string("status_field", env)? {
        cfg.status_field = field;
    }
    cfg.priority_field = s.string("priority_field", env)?;
    cfg.repos = s.string_list("repos")?.unwrap_or_default();
    cfg.server_side_filter = s.boolean("server_side_filter")?.unwrap_or(false);
    cfg.timeout_ms = s.positive("timeout_ms")?.unwrap_or(30_000);
    cfg.max_items = ranged("max_items", DEFAULT_MAX_ITEMS, MAX_MAX_ITEMS)?;
    match s.positive_number("budget_share") {
        Ok(None) => {}
        Ok(Some(share)) if share <= 1.0 => cfg.budget_share = share,
        _ => {
            let got = s.got("budget_share");
            return Err(s.invalid("budget_share", "a number above 0 and at most 1", &got));
        }
    }
    for repo in &cfg.repos {
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.trim().is_empty()) {
            let got = format!("{repo:?}");
            return Err(s.invalid("repos", "a list of owner/name strings", &got));
        }
    }
    Ok(())
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
    Err(missing
        .map(|(_, kind, msg)| TrackerError::new(kind, msg))
        .collect())
}

/// The warning for an `http://` endpoint whose host is not loopback: the token would cross the
/// network in cleartext. `None` for `https://` and loopback hosts (a local proxy or test server).
pub(crate) fn cleartext_warning(endpoint: &str) -> Option<String> {
    let scheme_len = "http://".len();
    let rest = endpoint
        .get(..scheme_len)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &endpoint[scheme_len..])?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = &authority[authority.rfind('@').map_or(0, |i| i + 1)..];
    let host = match host_port.strip_prefix('[') {
        Some(v6) => &v6[..v6.find(']').unwrap_or(v6.len())],
        None => &host_port[..host_port.find(':').unwrap_or(host_port.len())],
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (!loopback).then(|| {
        format!(
            "tracker.endpoint {} is plain http:// to a host that is not loopback: the token is sent in cleartext (use https://)",
            super::client::redact_userinfo(endpoint)
        )
    })
}

fn check(cfg: &TrackerConfig) -> Vec<TrackerError> {
    required(cfg).err().unwrap_or_default()
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

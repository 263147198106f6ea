//! The optional surfaces a Baton is built with (Cargo features, all on by default): `http` (the
//! dashboard, JSON API, webhook, `/metrics`, `/livez`, `/readyz`), `ssh` (SSH worker hosts),
//! `backlog` (the Backlog.md tracker; with `http`, `baton demo`), `codex` and `gemini` (those
//! agents). A key, flag or command that
//! needs a surface this build left out is refused by the one rule table here, which startup,
//! reload and `baton check` all apply: it is never silently ignored.

use crate::cli::Command;
use crate::workflow::config::{AgentKind, ServiceConfig};

/// The features this binary was built with (`baton --version`).
pub const BUILT: &[&str] = &[
    #[cfg(feature = "http")]
    "http",
    #[cfg(feature = "ssh")]
    "ssh",
    #[cfg(feature = "backlog")]
    "backlog",
    #[cfg(feature = "codex")]
    "codex",
    #[cfg(feature = "gemini")]
    "gemini",
];

/// Every key of `cfg` and every flag or command of `cmd` that needs a feature this build left
/// out, one `feature_not_built: <key or flag> needs a Baton built with --features <name>` each.
pub fn not_built(cfg: Option<&ServiceConfig>, cmd: Option<&Command>) -> Vec<String> {
    missing(cfg, cmd, BUILT)
}

/// [`not_built`] for a build with the features `built`.
fn missing(cfg: Option<&ServiceConfig>, cmd: Option<&Command>, built: &[&str]) -> Vec<String> {
    let mut wanted: Vec<(&str, &str)> = Vec::new();
    match cmd {
        Some(Command::Run(a)) => {
            wanted.extend(a.port.map(|_| ("--port", "http")));
            wanted.extend(a.bind.as_ref().map(|_| ("--bind", "http")));
        }
        Some(Command::Demo(_)) => {
            wanted.extend([("baton demo", "backlog"), ("baton demo", "http")])
        }
        _ => {}
    }
    if let Some(c) = cfg {
        let (s, kind) = (&c.server, c.agent.kind);
        let backlog = c.tracker.kind.as_deref() == Some("backlog_md");
        for (set, what, feature) in [
            (s.port.is_some(), "server.port", "http"),
            (s.host.is_some(), "server.host", "http"),
            (s.webhook_secret.is_some(), "server.webhook_secret", "http"),
            (!c.worker.ssh_hosts.is_empty(), "worker.ssh_hosts", "ssh"),
            (backlog, "tracker.kind: backlog_md", "backlog"),
            (kind == Some(AgentKind::Codex), "agent.kind: codex", "codex"),
            (
                kind == Some(AgentKind::Gemini),
                "agent.kind: gemini",
                "gemini",
            ),
        ] {
            wanted.extend(set.then_some((what, feature)));
        }
    }
    wanted
        .into_iter()
        .filter(|(_, feature)| !built.contains(feature))
        .map(|(what, feature)| {
            format!("feature_not_built: {what} needs a Baton built with --features {feature}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{DemoArgs, RunArgs};
    use crate::config::Secret;

    #[test]
    fn a_minimal_build_refuses_every_surface_key_flag_and_command() {
        let mut cfg = ServiceConfig::default();
        cfg.tracker.kind = Some("backlog_md".into());
        cfg.server.port = Some(8080);
        cfg.server.host = Some("0.0.0.0".into());
        cfg.server.webhook_secret = Some(Secret::new("s"));
        cfg.worker.ssh_hosts = vec!["build-1".into()];
        let run = Command::Run(RunArgs {
            workflow: "WORKFLOW.md".into(),
            port: Some(0),
            bind: Some("::1".into()),
            log_level: None,
        });
        let found = missing(Some(&cfg), Some(&run), &[]);
        let need = |what: &str, f: &str| {
            format!("feature_not_built: {what} needs a Baton built with --features {f}")
        };
        assert_eq!(
            found,
            [
                need("--port", "http"),
                need("--bind", "http"),
                need("server.port", "http"),
                need("server.host", "http"),
                need("server.webhook_secret", "http"),
                need("worker.ssh_hosts", "ssh"),
                need("tracker.kind: backlog_md", "backlog"),
            ]
        );
        let all = ["http", "ssh", "backlog", "codex", "gemini"];
        assert!(missing(Some(&cfg), Some(&run), &all).is_empty());
        for (kind, name) in [(AgentKind::Codex, "codex"), (AgentKind::Gemini, "gemini")] {
            cfg.agent.kind = Some(kind);
            let key = format!("agent.kind: {name}");
            assert_eq!(missing(Some(&cfg), None, &all[..3]), [need(&key, name)]);
            assert!(missing(Some(&cfg), None, &all).is_empty());
        }
        let demo = Command::Demo(DemoArgs {
            port: 1,
            real_claude: false,
            log_level: None,
        });
        assert_eq!(
            missing(None, Some(&demo), &["backlog"]),
            [need("baton demo", "http")]
        );
        assert!(missing(Some(&ServiceConfig::default()), None, &[]).is_empty());
    }
}

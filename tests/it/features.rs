//! Issue 22: the optional surfaces are Cargo features. `baton --version` names the built ones;
//! in a build without one (`cargo test --no-default-features`, run by `.ci/run`), a WORKFLOW.md
//! key, flag or command that needs it fails at startup (exit 1) and in `baton check` with
//! `feature_not_built`, never silently ignored. The rule table itself is unit-tested in
//! `features::tests` for every build.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::daemon_proc::bare_baton as baton;

#[test]
fn version_lists_the_built_features() {
    let out = baton().arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let built: Vec<&str> = [
        (cfg!(feature = "http"), "http"),
        (cfg!(feature = "ssh"), "ssh"),
        (cfg!(feature = "backlog"), "backlog"),
        (cfg!(feature = "codex"), "codex"),
        (cfg!(feature = "gemini"), "gemini"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    let features = if built.is_empty() {
        "none".to_string()
    } else {
        built.join(" ")
    };
    let want = format!(
        "baton {}\nfeatures: {features}\n",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(text, want);
}

/// A GitHub workflow (a closed endpoint: nothing is ever reached) with `extra` front matter.
#[allow(dead_code)] // used by the tests of the builds without a feature
fn workflow(dir: &Path, tracker_kind: &str, extra: &str) -> PathBuf {
    let p = dir.join("WORKFLOW.md");
    let text = format!(
        "---\ntracker:\n  kind: {tracker_kind}\n  endpoint: http://127.0.0.1:9/graphql\n  owner: acme\n  \
         project_number: 7\n  token: t\n  timeout_ms: 2000\nworkspace:\n  root: {ws}\nstate:\n  dir: {st}\n\
         agent:\n  kind: claude_code\n{extra}---\nDo {{{{ issue.title }}}}\n",
        ws = dir.join("ws").display(),
        st = dir.join("state").display(),
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// Startup and `baton check` both refuse `p` (plus `flags` at startup) with `needs` (the text
/// after `feature_not_built: `).
#[allow(dead_code)]
fn refused(p: &Path, flags: &[&str], needs: &str) {
    let line = format!("feature_not_built: {needs}");
    let out: Output = baton().args(flags).arg(p).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(&format!("baton: {line}")), "{err}");
    if flags.is_empty() {
        assert!(
            err.contains(&p.display().to_string()),
            "names the file: {err}"
        );
        let out = baton().arg("check").arg(p).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.contains(&format!("FAIL  {line}")), "{text}");
    }
}

#[test]
#[cfg(not(feature = "http"))]
fn without_http_server_keys_and_flags_fail_with_feature_not_built() {
    let d = crate::support::tempdir::TempDir::new("no-http");
    let plain = workflow(&d, "github_projects", "");
    refused(
        &plain,
        &["--port", "0"],
        "--port needs a Baton built with --features http",
    );
    refused(
        &plain,
        &["--bind", "::1"],
        "--bind needs a Baton built with --features http",
    );
    for (key, yaml) in [
        ("server.port", "server:\n  port: 0\n"),
        ("server.host", "server:\n  host: 0.0.0.0\n"),
        ("server.webhook_secret", "server:\n  webhook_secret: s\n"),
    ] {
        let d = crate::support::tempdir::TempDir::new("no-http-key");
        let p = workflow(&d, "github_projects", yaml);
        refused(
            &p,
            &[],
            &format!("{key} needs a Baton built with --features http"),
        );
    }
    let out = baton().arg("demo").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("feature_not_built: baton demo needs a Baton built with --features http"),
        "{err}"
    );
}

#[test]
#[cfg(not(feature = "ssh"))]
fn without_ssh_worker_ssh_hosts_fail_with_feature_not_built() {
    let d = crate::support::tempdir::TempDir::new("no-ssh");
    let p = workflow(&d, "github_projects", "worker:\n  ssh_hosts: [build-1]\n");
    refused(
        &p,
        &[],
        "worker.ssh_hosts needs a Baton built with --features ssh",
    );
}

#[test]
#[cfg(not(feature = "backlog"))]
fn without_backlog_the_backlog_tracker_and_demo_fail_with_feature_not_built() {
    let d = crate::support::tempdir::TempDir::new("no-backlog");
    let p = workflow(&d, "backlog_md", "");
    refused(
        &p,
        &[],
        "tracker.kind: backlog_md needs a Baton built with --features backlog",
    );
    let out = baton().arg("demo").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err.lines().next(),
        Some("baton: feature_not_built: baton demo needs a Baton built with --features backlog")
    );
}

/// A GitHub workflow whose `agent.kind` is `kind`.
#[allow(dead_code)]
fn agent_workflow(dir: &Path, kind: &str) -> PathBuf {
    let p = workflow(dir, "github_projects", "");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(
        &p,
        text.replace("kind: claude_code", &format!("kind: {kind}")),
    )
    .unwrap();
    p
}

#[test]
#[cfg(not(feature = "codex"))]
fn without_codex_agent_kind_codex_fails_with_feature_not_built() {
    let d = crate::support::tempdir::TempDir::new("no-codex");
    let p = agent_workflow(&d, "codex");
    refused(
        &p,
        &[],
        "agent.kind: codex needs a Baton built with --features codex",
    );
}

#[test]
#[cfg(not(feature = "gemini"))]
fn without_gemini_agent_kind_gemini_fails_with_feature_not_built() {
    let d = crate::support::tempdir::TempDir::new("no-gemini");
    let p = agent_workflow(&d, "gemini");
    refused(
        &p,
        &[],
        "agent.kind: gemini needs a Baton built with --features gemini",
    );
}

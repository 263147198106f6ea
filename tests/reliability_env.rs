//! Issue 12, failure 16: the agent environment policy. `agent.env_remove` / `agent.env_keep_only`
//! are validated and applied to every process Baton starts (agents and hooks), and the variable
//! `server.webhook_secret: $VAR` names is never passed on.
//!
//! A test binary of its own (not in `tests/it/`) because it sets process environment variables and the process-wide agent environment policy.

#[path = "it/support/tempdir.rs"]
mod tempdir;

use std::fs;
use std::path::{Path, PathBuf};

use baton::host::{set_env_policy, LocalHost};
use baton::model::Issue;
use baton::workflow::config::ConfigEnv;
use baton::workflow::loader::load_workflow;
use baton::workspace::hooks::{run_hook, HookEnv};
use tempdir::TempDir;

struct Env;

impl ConfigEnv for Env {
    fn var(&self, k: &str) -> Option<String> {
        (k == "BATON_TEST_HOOK_SECRET").then(|| "s3cret".to_string())
    }
    fn home(&self) -> Option<PathBuf> {
        None
    }
    fn gh_auth_token(&self) -> Option<String> {
        None
    }
}

/// The variables the `env` hook sees for `issue` in `d`, one `K=V` a line.
fn hook_env(d: &Path, issue: &Issue) -> String {
    run_hook(&LocalHost, "env", d, &HookEnv::for_issue(issue), 5_000)
        .expect("hook runs")
        .stdout
}

fn workflow(d: &Path, agent_extra: &str) -> Result<baton::workflow::loader::Workflow, String> {
    let p = d.join("WORKFLOW.md");
    fs::write(
        &p,
        format!(
            "---\ntracker:\n  kind: github_projects\n  token: t\n  owner: acme\n  project_number: 1\n\
             agent:\n  kind: claude_code\n{agent_extra}server:\n  webhook_secret: $BATON_TEST_HOOK_SECRET\n---\nWork.\n"
        ),
    )
    .unwrap();
    load_workflow(&p, &Env).map_err(|e| e.to_string())
}

#[test]
fn env_policy_is_validated_and_applied_to_hooks() {
    let d = TempDir::new("rel-env");
    let wf = workflow(
        &d,
        "  env_remove: [BATON_TEST_DROP]\n  env_keep_only: [PATH, HOME, BATON_TEST_KEEP, BATON_TEST_DROP, BATON_TEST_HOOK_SECRET]\n",
    )
    .expect("valid");
    let cfg = &wf.config.config;
    let policy = cfg.env_policy();
    assert!(policy.remove.contains(&"BATON_TEST_DROP".to_string()));
    assert!(policy
        .remove
        .contains(&"BATON_TEST_HOOK_SECRET".to_string()));
    assert!(!policy
        .keep_only
        .as_ref()
        .unwrap()
        .contains(&"BATON_TEST_HOOK_SECRET".to_string()));

    let err = workflow(&d, "  env_remove: [\"A=B\"]\n").unwrap_err();
    assert!(err.contains("agent.env_remove"), "{err}");

    // This test binary has one test: nothing else reads the environment concurrently.
    std::env::set_var("BATON_TEST_KEEP", "kept");
    std::env::set_var("BATON_TEST_DROP", "dropped");
    std::env::set_var("BATON_TEST_OTHER", "other");
    std::env::set_var("BATON_TEST_HOOK_SECRET", "s3cret");
    set_env_policy(policy);
    let issue = Issue {
        id: "I_1".into(),
        identifier: "acme__repo-1".into(),
        ..Issue::default()
    };
    let out = hook_env(&d, &issue);
    let vars: Vec<&str> = out.lines().collect();
    assert!(vars.contains(&"BATON_TEST_KEEP=kept"), "{vars:?}");
    assert!(
        vars.contains(&"BATON_ISSUE_ID=I_1"),
        "Baton's own variables are set"
    );
    for absent in [
        "BATON_TEST_DROP",
        "BATON_TEST_OTHER",
        "BATON_TEST_HOOK_SECRET",
    ] {
        assert!(
            !vars.iter().any(|v| v.starts_with(&format!("{absent}="))),
            "{absent} must not reach the hook: {vars:?}"
        );
    }

    // Without keep_only, everything but the removed variables is inherited.
    set_env_policy(
        workflow(&d, "  env_remove: [BATON_TEST_DROP]\n")
            .unwrap()
            .config
            .config
            .env_policy(),
    );
    let out = hook_env(&d, &issue);
    assert!(out.contains("BATON_TEST_OTHER=other"));
    assert!(!out.contains("BATON_TEST_DROP="));
    assert!(
        !out.contains("BATON_TEST_HOOK_SECRET="),
        "never the webhook secret"
    );
}

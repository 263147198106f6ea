//! Issue 12, failure 10: a NUL byte in an issue body never makes every attempt fail. The worker
//! runs the real Claude adapter against the fake CLI; the prompt arrives without the NUL.

use std::sync::Arc;

use crossbeam_channel::unbounded;

use baton::agent::claude::ClaudeRunner;
use baton::agent::CancelToken;
use baton::model::Issue;
use baton::orchestrator::{Policy, WorkerOutcome};
use baton::runtime::mailbox::Mailbox;
use baton::runtime::worker::{run_attempt, WorkerContext};
use baton::tracker::{Tracker, TrackerBudget, TrackerError};
use baton::workflow::config::HooksConfig;
use baton::workflow::template::PromptTemplate;
use baton::workspace::workspace_path;

use crate::support::agent::{claude_config, fake_claude_command, Knobs, Sandbox};
use crate::support::stand_ins::serving_refresher;

struct Gone;

impl Tracker for Gone {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![])
    }
    fn fetch_issues_by_states(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![])
    }
    fn fetch_issue_states_by_ids(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![]) // ends the run normally after the first turn
    }
    fn validate(&self) -> Result<(), TrackerError> {
        Ok(())
    }
    fn reset_cache(&self) {}
    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }
}

#[test]
fn nul_in_the_issue_body_is_stripped_and_the_turn_runs() {
    let sb = Sandbox::new("nul");
    let args_file = sb.file("args.json");
    let runner = ClaudeRunner::new(claude_config(fake_claude_command(), 30_000))
        .with_env("FAKE_CLAUDE_MODE", "flood")
        .with_env("FAKE_CLAUDE_LINES", "0")
        .with_env("FAKE_CLAUDE_ARGS_FILE", &args_file)
        .with_env("HOME", &sb.home);
    let issue = Issue {
        id: "I_1".into(),
        identifier: "acme__repo-1".into(),
        number: 1,
        repository: "acme/repo".into(),
        title: "t".into(),
        description: Some("before\0after".into()),
        state: "Todo".into(),
        ..Issue::default()
    };
    let (refresher, _rx) = serving_refresher(Arc::new(Gone));
    let ctx = WorkerContext {
        run_id: 1,
        issue,
        attempt: None,
        workspace_path: workspace_path(&sb.root, "acme__repo-1"),
        hooks: HooksConfig {
            timeout_ms: 5_000,
            ..HooksConfig::default()
        },
        max_turns: 1,
        template: PromptTemplate::compile("Body: {{ issue.description }}", 5).unwrap(),
        policy: Policy::default(),
        runner: Arc::new(runner),
        refresher,
        cancel: CancelToken::new(),
        mailbox: Mailbox::new("I_1", 1, unbounded().0),
        host: baton::host::LocalHost::shared(),
        stale_workspace: false,
        resume: None,
    };
    let outcome = run_attempt(&ctx);
    assert_eq!(outcome, WorkerOutcome::Normal);
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&args_file).unwrap()).unwrap();
    let prompt = recorded["argv"].as_array().unwrap().last().unwrap();
    assert_eq!(prompt, "Body: beforeafter");
}

//! Issue 12, failure 10: a NUL byte in an issue body never makes every attempt fail. The worker
//! runs the real Claude adapter against the fake CLI; the prompt arrives without the NUL.

use std::path::Path;
use std::sync::Arc;

use crossbeam_channel::unbounded;

use baton::agent::claude::ClaudeRunner;
use baton::agent::CancelToken;
use baton::model::Issue;
use baton::orchestrator::{Event, Policy, WorkerOutcome};
use baton::runtime::worker::{run_attempt, WorkerContext};
use baton::tracker::{Tracker, TrackerBudget, TrackerError};
use baton::workflow::config::{ClaudeCodeConfig, HooksConfig};
use baton::workflow::template::PromptTemplate;
use baton::workspace::workspace_path;

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
    let dir = std::env::temp_dir().join(format!("baton-rel-nul-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let args_file = dir.join("args.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/fake_claude.py");
    let runner = ClaudeRunner::new(ClaudeCodeConfig {
        command: format!("python3 '{}'", script.display()),
        model: None,
        permission_mode: "acceptEdits".into(),
        allowed_tools: vec![],
        disallowed_tools: vec![],
        append_system_prompt: None,
        extra_args: vec![],
        turn_timeout_ms: 30_000,
        stall_timeout_ms: 300_000,
    })
    .with_envs(vec![
        ("FAKE_CLAUDE_MODE".into(), "flood".into()),
        ("FAKE_CLAUDE_LINES".into(), "0".into()),
        (
            "FAKE_CLAUDE_ARGS_FILE".into(),
            args_file.display().to_string(),
        ),
        ("HOME".into(), dir.display().to_string()),
    ]);
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
    let (tx, _rx) = unbounded::<Event>();
    let ctx = WorkerContext {
        run_id: 1,
        issue,
        attempt: None,
        workspace_path: workspace_path(&dir.join("ws"), "acme__repo-1"),
        hooks: HooksConfig {
            timeout_ms: 5_000,
            ..HooksConfig::default()
        },
        max_turns: 1,
        template: PromptTemplate::compile("Body: {{ issue.description }}", 5).unwrap(),
        policy: Policy::default(),
        runner: Arc::new(runner),
        tracker: Arc::new(Gone),
        cancel: CancelToken::new(),
        events: tx,
        host: baton::host::LocalHost::shared(),
    };
    let outcome = run_attempt(&ctx);
    assert_eq!(outcome, WorkerOutcome::Normal);
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&args_file).unwrap()).unwrap();
    let prompt = recorded["argv"].as_array().unwrap().last().unwrap();
    assert_eq!(prompt, "Body: beforeafter");
    let _ = std::fs::remove_dir_all(&dir);
}

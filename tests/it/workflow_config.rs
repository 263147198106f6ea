//! Spec §17.1: WORKFLOW.md loading and typed config (defaults, `$VAR`, `~`, errors that name the key).

use crate::support::tempdir::TempDir;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use baton::workflow::config::{AgentKind, ConfigEnv, OwnerType};
use baton::workflow::loader::{load_workflow, split_workflow, DEFAULT_PROMPT, MAX_WORKFLOW_BYTES};

#[derive(Default)]
struct FakeEnv {
    vars: HashMap<String, String>,
    home: Option<PathBuf>,
    gh: Option<String>,
}

impl ConfigEnv for FakeEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }
    fn home(&self) -> Option<PathBuf> {
        self.home.clone()
    }
    fn gh_auth_token(&self) -> Option<String> {
        self.gh.clone()
    }
}

fn env(vars: &[(&str, &str)]) -> FakeEnv {
    FakeEnv {
        vars: vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        home: Some(PathBuf::from("/home/op")),
        gh: None,
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn defaults_apply_when_keys_are_absent() {
    let d = TempDir::new("defaults");
    let p = write(
        &d,
        "WORKFLOW.md",
        "---\ntracker:\n  kind: github_projects\n---\nHello\n",
    );
    let wf = load_workflow(&p, &env(&[])).unwrap();
    let c = &wf.config.config;
    assert_eq!(c.tracker.endpoint, "https://api.github.com/graphql");
    assert_eq!(c.tracker.owner_type, OwnerType::Organization);
    assert_eq!(c.tracker.status_field, "Status");
    assert_eq!(c.tracker.active_states, vec!["Todo", "In Progress"]);
    assert_eq!(c.tracker.terminal_states, vec!["Done"]);
    assert_eq!(c.tracker.page_size, 50);
    assert!(!c.tracker.server_side_filter);
    assert_eq!(c.tracker.timeout_ms, 30_000);
    assert_eq!(c.tracker.max_items, 20_000);
    assert_eq!(c.tracker.budget_share, 0.5);
    assert_eq!(c.poll_interval_ms, 30_000);
    assert_eq!(
        c.workspace_root,
        std::env::temp_dir().join("baton_workspaces")
    );
    assert_eq!(c.hooks.timeout_ms, 60_000);
    assert_eq!(c.agent.kind, None);
    assert_eq!(c.agent.max_concurrent_agents, 10);
    assert_eq!(c.agent.max_turns, 20);
    assert_eq!(c.agent.max_retry_backoff_ms, 300_000);
    assert_eq!(c.agent.max_attempts, None);
    assert_eq!(c.agent.max_runs_per_issue, 10);
    assert_eq!(c.claude_code.cli.command, "claude");
    assert_eq!(c.claude_code.permission_mode, "acceptEdits");
    assert_eq!(c.claude_code.cli.turn_timeout_ms, 3_600_000);
    assert_eq!(c.claude_code.cli.stall_timeout_ms, 300_000);
    assert_eq!(c.copilot.cli.command, "copilot");
    assert!(!c.copilot.allow_all_tools);
    assert_eq!(c.codex.cli.command, "codex app-server");
    assert_eq!(c.codex.approval_policy, "never");
    assert_eq!(c.codex.thread_sandbox, "workspace-write");
    assert_eq!(c.codex.turn_sandbox_policy, None);
    assert_eq!(c.codex.read_timeout_ms, 5000);
    assert_eq!(c.gemini.cli.command, "gemini");
    assert_eq!(c.gemini.approval_mode, "auto_edit");
    assert_eq!(c.gemini.auth_type, "");
    assert_eq!(c.server.port, None);
    assert_eq!(wf.prompt_source, "Hello");
}

#[test]
fn no_front_matter_means_whole_file_is_prompt() {
    let d = TempDir::new("nofm");
    let p = write(
        &d,
        "W.md",
        "\n\n  Just a prompt about {{ issue.title }}.\n\n",
    );
    let wf = load_workflow(&p, &env(&[])).unwrap();
    assert_eq!(wf.prompt_source, "Just a prompt about {{ issue.title }}.");
    assert_eq!(wf.config.config.tracker.kind, None);
}

#[test]
fn empty_body_uses_default_prompt() {
    let d = TempDir::new("empty");
    let p = write(&d, "W.md", "---\npolling:\n  interval_ms: 5\n---\n   \n");
    let wf = load_workflow(&p, &env(&[])).unwrap();
    assert_eq!(wf.prompt_source, "");
    let issue = baton::model::Issue::default();
    assert_eq!(wf.template.render(&issue, None).unwrap(), DEFAULT_PROMPT);
}

#[test]
fn missing_file_is_typed() {
    let e = load_workflow(Path::new("/nonexistent/dir/WORKFLOW.md"), &env(&[])).unwrap_err();
    assert_eq!(e.class, "missing_workflow_file");
    assert!(e.to_string().contains("/nonexistent/dir/WORKFLOW.md"));
}

#[test]
fn yaml_error_reports_file_line_and_column() {
    let d = TempDir::new("badyaml");
    // Line 4 of the file has the bad indentation/colon.
    let p = write(
        &d,
        "W.md",
        "---\ntracker:\n  kind: github_projects\n  owner: [unclosed\n---\nbody\n",
    );
    let e = load_workflow(&p, &env(&[])).unwrap_err();
    assert_eq!(e.class, "workflow_parse_error");
    assert!(e.message.contains("line "), "{}", e.message);
    let line: usize = e
        .message
        .split("line ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (4..=6).contains(&line),
        "line should be counted in the file: {}",
        e.message
    );
}

#[test]
fn yaml_error_line_is_file_relative_exact() {
    let d = TempDir::new("badyaml2");
    let p = write(&d, "W.md", "---\na: 1\nb: 2\nc: : :\n---\n");
    let e = load_workflow(&p, &env(&[])).unwrap_err();
    assert_eq!(e.class, "workflow_parse_error");
    assert!(e.message.starts_with("line 4 column"), "{}", e.message);
}

#[test]
fn unclosed_front_matter_is_a_parse_error() {
    let d = TempDir::new("unclosed");
    let p = write(&d, "W.md", "---\na: 1\nbody without fence\n");
    assert_eq!(
        load_workflow(&p, &env(&[])).unwrap_err().class,
        "workflow_parse_error"
    );
}

#[test]
fn non_map_front_matter_is_typed() {
    let d = TempDir::new("nonmap");
    let p = write(&d, "W.md", "---\n- a\n- b\n---\nbody\n");
    let e = load_workflow(&p, &env(&[])).unwrap_err();
    assert_eq!(e.class, "workflow_front_matter_not_a_map");
    assert!(e.message.contains("a list"));
}

#[test]
fn oversized_file_is_rejected_with_a_clear_error() {
    let d = TempDir::new("big");
    let p = d.join("W.md");
    std::fs::write(&p, vec![b'a'; MAX_WORKFLOW_BYTES as usize + 10]).unwrap();
    let e = load_workflow(&p, &env(&[])).unwrap_err();
    assert_eq!(e.class, "workflow_too_large");
    assert!(e.message.contains("1 MiB"));
}

/// Nested flow collections made the YAML parser's cost grow with depth × tokens (39 s for one
/// `baton check`); the front matter is refused before parsing, naming the file and the line.
#[test]
fn hostile_front_matter_is_refused_before_parsing() {
    let d = TempDir::new("deep");
    let deep = format!(
        "---\nagent:\n  x: {}1{}\n---\nbody\n",
        "{a: ".repeat(100),
        "}".repeat(100)
    );
    let p = write(&d, "W.md", &deep);
    let e = load_workflow(&p, &env(&[])).unwrap_err();
    assert_eq!(e.class, "workflow_front_matter_too_complex", "{e}");
    assert!(e.to_string().contains("W.md"), "{e}");
    assert!(e.message.contains("nested deeper than 64 (line 2"), "{e}");
    let wide = format!("---\nagent:\n  x: [{}]\n---\n", "[\"]\", ".repeat(30_000));
    let p = write(&d, "W2.md", &wide);
    let e = load_workflow(&p, &env(&[])).unwrap_err();
    assert_eq!(e.class, "workflow_front_matter_too_complex", "{e}");
}

#[test]
fn var_indirection_only_for_exact_dollar_name() {
    let d = TempDir::new("vars");
    let text = "---\ntracker:\n  kind: github_projects\n  token: $MY_TOKEN\n  owner: $OWNER\n  endpoint: https://ghe.example/$NOT_EXPANDED\nclaude_code:\n  command: $HOME/bin/claude --x\n---\n";
    let p = write(&d, "W.md", text);
    let wf = load_workflow(
        &p,
        &env(&[
            ("MY_TOKEN", "s3cr3t"),
            ("OWNER", "acme"),
            ("NOT_EXPANDED", "zz"),
        ]),
    )
    .unwrap();
    let c = &wf.config.config;
    assert_eq!(c.tracker.token.as_ref().unwrap().expose(), "s3cr3t");
    assert_eq!(c.tracker.owner.as_deref(), Some("acme"));
    assert_eq!(
        c.tracker.endpoint, "https://ghe.example/$NOT_EXPANDED",
        "URLs are never rewritten"
    );
    assert_eq!(
        c.claude_code.cli.command, "$HOME/bin/claude --x",
        "shell commands are never rewritten"
    );
    // The token never shows up in Debug output.
    assert!(!format!("{c:?}").contains("s3cr3t"));
}

#[test]
fn empty_env_var_means_missing_and_falls_back() {
    let d = TempDir::new("emptyvar");
    let p = write(
        &d,
        "W.md",
        "---\ntracker:\n  kind: github_projects\n  token: $EMPTY\n---\n",
    );
    let wf = load_workflow(&p, &env(&[("EMPTY", ""), ("GITHUB_TOKEN", "ghp_x")])).unwrap();
    // An explicit token reference that resolves empty is missing; it does not silently use GITHUB_TOKEN.
    assert!(wf.config.config.tracker.token.is_none());
    let errs = wf.config.config.preflight_errors();
    assert!(errs.iter().any(|e| e.class == "missing_tracker_token"));
    assert!(errs.iter().all(|e| !e.message.contains("ghp_x")));
}

#[test]
fn token_falls_back_to_github_token_then_gh() {
    let d = TempDir::new("fallback");
    let p = write(&d, "W.md", "---\ntracker:\n  kind: github_projects\n---\n");
    let wf = load_workflow(&p, &env(&[("GITHUB_TOKEN", "from-env")])).unwrap();
    assert_eq!(
        wf.config.config.tracker.token.as_ref().unwrap().expose(),
        "from-env"
    );
    let mut e = env(&[]);
    e.gh = Some("from-gh".into());
    let wf = load_workflow(&p, &e).unwrap();
    assert_eq!(
        wf.config.config.tracker.token.as_ref().unwrap().expose(),
        "from-gh"
    );
}

#[test]
fn workspace_root_expansion() {
    let d = TempDir::new("root");
    let cases: &[(&str, PathBuf)] = &[
        ("~/ws", PathBuf::from("/home/op/ws")),
        ("~", PathBuf::from("/home/op")),
        ("$WS_ROOT", PathBuf::from("/srv/ws")),
        ("$WS_ROOT/sub", PathBuf::from("/srv/ws/sub")),
        ("rel/dir", d.join("rel/dir")),
        ("./a/../b", d.join("b")),
        ("/abs/path", PathBuf::from("/abs/path")),
    ];
    for (raw, want) in cases {
        let p = write(
            &d,
            "W.md",
            &format!("---\nworkspace:\n  root: \"{raw}\"\n---\n"),
        );
        let wf = load_workflow(&p, &env(&[("WS_ROOT", "/srv/ws")])).unwrap();
        assert_eq!(&wf.config.config.workspace_root, want, "root {raw}");
    }
    let p = write(&d, "W.md", "---\nworkspace:\n  root: $UNSET_VAR\n---\n");
    let e = load_workflow(&p, &env(&[])).unwrap_err();
    assert!(e.message.contains("workspace.root"), "{}", e.message);
}

#[test]
fn validation_errors_name_key_and_value() {
    let d = TempDir::new("invalid");
    let cases = [
        (
            "agent:\n  max_turns: 0",
            "agent.max_turns must be a positive integer, got 0",
        ),
        (
            "agent:\n  max_concurrent_agents: -3",
            "agent.max_concurrent_agents must be a positive integer, got -3",
        ),
        (
            "agent:\n  kind: cursor",
            "agent.kind must be claude_code, copilot, codex or gemini, got \"cursor\"",
        ),
        (
            "gemini:\n  approval_mode: plan",
            "gemini.approval_mode must be auto_edit, yolo or default, got \"plan\"",
        ),
        (
            "codex:\n  approval_policy: 3",
            "codex.approval_policy must be a non-empty string or a map, got 3",
        ),
        (
            "codex:\n  turn_sandbox_policy: readOnly",
            "codex.turn_sandbox_policy must be a map with a type, got \"readOnly\"",
        ),
        (
            "codex:\n  read_timeout_ms: 0",
            "codex.read_timeout_ms must be a positive integer, got 0",
        ),
        (
            "polling:\n  interval_ms: soon",
            "polling.interval_ms must be a positive integer, got \"soon\"",
        ),
        (
            "tracker:\n  owner_type: team",
            "tracker.owner_type must be organization or user, got \"team\"",
        ),
        (
            "tracker:\n  page_size: 101",
            "tracker.page_size must be an integer from 1 to 100, got 101",
        ),
        (
            "tracker:\n  max_items: 0",
            "tracker.max_items must be an integer from 1 to 1000000, got 0",
        ),
        (
            "tracker:\n  max_items: 1000001",
            "tracker.max_items must be an integer from 1 to 1000000, got 1000001",
        ),
        (
            "tracker:\n  budget_share: 0",
            "tracker.budget_share must be a positive number, got 0",
        ),
        (
            "tracker:\n  budget_share: 1.5",
            "tracker.budget_share must be a number above 0 and at most 1, got 1.5",
        ),
        (
            "tracker:\n  budget_share: half",
            "tracker.budget_share must be a positive number, got \"half\"",
        ),
        (
            "tracker:\n  budget_share: .nan",
            "tracker.budget_share must be a positive number, got .nan",
        ),
        (
            "tracker:\n  repos: [acme]",
            "tracker.repos must be a list of owner/name strings, got \"acme\"",
        ),
        (
            "tracker:\n  active_states: Todo",
            "tracker.active_states must be a list of strings, got \"Todo\"",
        ),
        (
            "copilot:\n  allow_all_tools: yes-please",
            "copilot.allow_all_tools must be true or false",
        ),
        (
            "claude_code:\n  command: \"  \"",
            "claude_code.command must be a non-empty shell command",
        ),
        (
            "server:\n  port: 70000",
            "server.port must be an integer from 0 to 65535, got 70000",
        ),
        ("hooks: [a]", "hooks must be a map of settings, got a list"),
    ];
    for (yaml, want) in cases {
        let p = write(&d, "W.md", &format!("---\n{yaml}\n---\n"));
        let e = load_workflow(&p, &env(&[])).unwrap_err();
        assert_eq!(e.class, "invalid_config", "{yaml}");
        assert!(
            e.message.contains(want),
            "{yaml}: got {:?}, want {want:?}",
            e.message
        );
    }
}

#[test]
fn secret_type_errors_never_echo_the_value() {
    let d = TempDir::new("secret");
    let p = write(&d, "W.md", "---\ntracker:\n  token: [ghp_leaky]\n---\n");
    let e = load_workflow(&p, &env(&[])).unwrap_err();
    assert!(e.message.contains("tracker.token"));
    assert!(!e.to_string().contains("ghp_leaky"));
}

#[test]
fn kinds_are_enforced_at_preflight() {
    let d = TempDir::new("kinds");
    let p = write(
        &d,
        "W.md",
        "---\ntracker:\n  kind: linear\n  token: t\n  owner: o\n  project_number: 1\nagent:\n  kind: copilot\n---\n",
    );
    let wf = load_workflow(&p, &env(&[])).unwrap();
    assert_eq!(wf.config.config.agent.kind, Some(AgentKind::Copilot));
    let errs = wf.config.config.preflight_errors();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].class, "unsupported_tracker_kind");

    let p = write(&d, "W.md", "---\ntracker:\n  kind: github_projects\n---\n");
    let classes: Vec<_> = load_workflow(&p, &env(&[]))
        .unwrap()
        .config
        .config
        .preflight_errors()
        .iter()
        .map(|e| e.class)
        .collect();
    assert!(classes.contains(&"missing_tracker_token"));
    assert!(classes.contains(&"missing_tracker_project"));
    assert!(classes.contains(&"missing_agent_kind"));

    // Codex runs on SSH worker hosts too (the wrapper forwards its stdin).
    let p = write(
        &d,
        "W.md",
        "---\nagent:\n  kind: codex\nworker:\n  ssh_hosts: [build-1]\n---\n",
    );
    let errs = load_workflow(&p, &env(&[]))
        .unwrap()
        .config
        .config
        .preflight_errors();
    assert!(
        !errs.iter().any(|e| e.message.contains("worker.ssh_hosts")),
        "{errs:?}"
    );
}

#[test]
fn per_state_limits_are_normalized_and_bad_entries_ignored() {
    let d = TempDir::new("bystate");
    let p = write(
        &d,
        "W.md",
        "---\nagent:\n  max_concurrent_agents_by_state:\n    \" In Progress \": 2\n    Todo: 0\n    Review: lots\n    Done: 1\n---\n",
    );
    let wf = load_workflow(&p, &env(&[])).unwrap();
    let m = &wf.config.config.agent.max_concurrent_agents_by_state;
    assert_eq!(m.get("in progress"), Some(&2));
    assert_eq!(m.get("done"), Some(&1));
    assert_eq!(m.len(), 2);
    assert_eq!(wf.config.warnings.len(), 2, "{:?}", wf.config.warnings);
}

/// Only plain strings are state names: a tagged key (`!x Review`) or a number is warned about and
/// ignored, never read as a state.
#[test]
fn per_state_limits_ignore_tagged_and_non_string_keys() {
    let d = TempDir::new("bystate-keys");
    let p = write(
        &d,
        "W.md",
        "---\nagent:\n  max_concurrent_agents_by_state:\n    !x Review: 2\n    7: 1\n    Todo: 3\n---\n",
    );
    let wf = load_workflow(&p, &env(&[])).unwrap();
    let m = &wf.config.config.agent.max_concurrent_agents_by_state;
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(m.get("todo"), Some(&3));
    let w = &wf.config.warnings;
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w.iter().all(|w| w.contains("keys must be state names")),
        "{w:?}"
    );
}

#[test]
fn unknown_keys_warn_with_did_you_mean() {
    let d = TempDir::new("unknown");
    let p = write(
        &d,
        "W.md",
        "---\ntraker:\n  kind: x\nagent:\n  max_turn: 3\nfuture_extension: {}\ncodex:\n  aproval_policy: never\ngemini:\n  approval: yolo\n---\n",
    );
    let wf = load_workflow(&p, &env(&[])).unwrap();
    let w = wf.config.warnings.join("\n");
    assert!(
        w.contains("unknown config key `traker` is ignored; did you mean `tracker`?"),
        "{w}"
    );
    assert!(
        w.contains(
            "unknown config key `agent.max_turn` is ignored; did you mean `agent.max_turns`?"
        ),
        "{w}"
    );
    assert!(
        w.contains("unknown config key `future_extension` is ignored"),
        "{w}"
    );
    assert!(
        w.contains("unknown config key `codex.aproval_policy` is ignored; did you mean `codex.approval_policy`?"),
        "{w}"
    );
    assert!(
        w.contains("unknown config key `gemini.approval` is ignored"),
        "{w}"
    );
}

#[test]
fn codex_and_gemini_sections_pass_codex_values_through() {
    let d = TempDir::new("agents");
    let p = write(
        &d,
        "W.md",
        "---\nagent:\n  kind: codex\ncodex:\n  command: codex --profile ci app-server\n  model: gpt-5.5\n  approval_policy:\n    granular: {mcp_elicitations: false, rules: true, sandbox_approval: true}\n  thread_sandbox: read-only\n  turn_sandbox_policy: {type: workspaceWrite, networkAccess: true}\n  read_timeout_ms: 9000\n  turn_timeout_ms: 60000\ngemini:\n  approval_mode: yolo\n  auth_type: $AUTH\n---\n",
    );
    let wf = load_workflow(&p, &env(&[("AUTH", "vertex-ai")])).unwrap();
    let c = &wf.config.config;
    assert_eq!(
        c.agent.kind,
        Some(baton::workflow::config::AgentKind::Codex)
    );
    assert_eq!(c.agent_cli().command, "codex --profile ci app-server");
    assert_eq!(c.codex.cli.model.as_deref(), Some("gpt-5.5"));
    assert_eq!(c.codex.approval_policy["granular"]["rules"], true);
    assert_eq!(c.codex.thread_sandbox, "read-only");
    let policy = c.codex.turn_sandbox_policy.as_ref().unwrap();
    assert_eq!(policy["type"], "workspaceWrite");
    assert_eq!(policy["networkAccess"], true);
    assert_eq!(
        (c.codex.read_timeout_ms, c.codex.cli.turn_timeout_ms),
        (9000, 60_000)
    );
    assert_eq!(c.gemini.approval_mode, "yolo");
    assert_eq!(c.gemini.auth_type, "vertex-ai");
    assert!(wf.config.warnings.is_empty(), "{:?}", wf.config.warnings);
}

#[test]
fn example_workflow_loads_and_validates() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("WORKFLOW.example.md");
    let wf = load_workflow(&p, &env(&[("GITHUB_TOKEN", "x")])).unwrap();
    let c = &wf.config.config;
    assert!(
        c.preflight_errors().is_empty(),
        "{:?}",
        c.preflight_errors()
    );
    assert_eq!(c.agent.kind, Some(AgentKind::ClaudeCode));
    assert_eq!(c.tracker.project_number, Some(7));
    assert!(wf.config.warnings.is_empty(), "{:?}", wf.config.warnings);
    assert!(wf.prompt_source.contains("gh pr create"));
    assert!(wf.prompt_source.contains("gh issue comment"));
    assert!(wf.prompt_source.contains("gh project item-edit"));
}

#[test]
fn split_handles_crlf_and_bom() {
    let s = split_workflow(
        Path::new("W.md"),
        "\u{feff}---\r\na: 1\r\n---\r\n\r\nbody\r\n",
    )
    .unwrap();
    assert_eq!(s.front_matter.len(), 1);
    assert_eq!(s.body, "body");
    assert_eq!(s.body_first_line, 5);
}

#[test]
fn state_dir_defaults_to_a_directory_of_its_own_and_expands_like_the_root() {
    let d = TempDir::new("statedir");
    let p = write(&d, "W.md", "---\nworkspace:\n  root: /srv/ws\n---\n");
    let default = |vars: &[(&str, &str)]| {
        let c = load_workflow(&p, &env(vars)).unwrap().config.config;
        assert!(c.state_dir_is_default);
        c.state_dir
    };
    // Never under the workspace root: systemd's directory, else one per WORKFLOW.md path.
    assert_eq!(
        default(&[("STATE_DIRECTORY", "/var/lib/baton:/var/lib/other")]),
        PathBuf::from("/var/lib/baton")
    );
    let xdg = default(&[("XDG_STATE_HOME", "/home/op/.st")]);
    assert_eq!(xdg.parent().unwrap(), Path::new("/home/op/.st/baton"));
    let home = default(&[]);
    assert_eq!(
        home.parent().unwrap(),
        Path::new("/home/op/.local/state/baton")
    );
    assert_eq!(
        xdg.file_name(),
        home.file_name(),
        "named after the WORKFLOW.md path"
    );
    let other = write(&d, "W2.md", "---\n---\n");
    let c = load_workflow(&other, &env(&[])).unwrap().config.config;
    assert_ne!(c.state_dir, home, "another workflow, another directory");
    let p = write(&d, "W.md", "---\nstate:\n  dir: /x\n---\n");
    assert!(
        !load_workflow(&p, &env(&[]))
            .unwrap()
            .config
            .config
            .state_dir_is_default
    );
    let cases: &[(&str, PathBuf)] = &[
        ("~/state", PathBuf::from("/home/op/state")),
        ("$STATE_DIRECTORY", PathBuf::from("/var/lib/baton")),
        ("rel/state", d.join("rel/state")),
        ("/var/lib/baton", PathBuf::from("/var/lib/baton")),
    ];
    for (raw, want) in cases {
        let p = write(&d, "W.md", &format!("---\nstate:\n  dir: \"{raw}\"\n---\n"));
        let wf = load_workflow(&p, &env(&[("STATE_DIRECTORY", "/var/lib/baton")])).unwrap();
        assert_eq!(&wf.config.config.state_dir, want, "state.dir {raw}");
        assert!(wf.config.warnings.is_empty(), "{:?}", wf.config.warnings);
    }
    for (yaml, want) in [
        (
            "state:\n  dir: $UNSET_VAR",
            "state.dir must be a path (or $VAR naming a set variable), got \"$UNSET_VAR\"",
        ),
        ("state:\n  dir: 7", "state.dir must be a path string, got 7"),
        (
            "state:\n  dir: \"\"",
            "state.dir must be a non-empty path, got \"\"",
        ),
    ] {
        let p = write(&d, "W.md", &format!("---\n{yaml}\n---\n"));
        let e = load_workflow(&p, &env(&[])).unwrap_err();
        assert_eq!(e.class, "invalid_config", "{yaml}");
        assert!(e.message.contains(want), "{yaml}: got {:?}", e.message);
    }
}

#[test]
fn a_workspace_root_that_is_not_utf8_is_refused() {
    use std::os::unix::ffi::OsStringExt;
    let d = TempDir::new("nonutf8");
    let p = write(&d, "W.md", "---\nworkspace:\n  root: ~/ws\n---\n");
    let bad = FakeEnv {
        home: Some(PathBuf::from(std::ffi::OsString::from_vec(
            b"/home/\xffop".to_vec(),
        ))),
        ..FakeEnv::default()
    };
    let err = load_workflow(&p, &bad).unwrap_err().to_string();
    assert!(err.contains("workspace.root must be a UTF-8 path"), "{err}");
}

#[test]
fn sandbox_section_parses_expands_and_names_bad_values() {
    let d = TempDir::new("sandbox");
    let p = write(&d, "W.md", "---\nworkspace:\n  root: /srv/ws\n---\n");
    let c = load_workflow(&p, &env(&[])).unwrap().config.config;
    assert!(!c.sandbox.bubblewrap, "agents run unconfined unless asked");
    assert!(!c.sandbox.no_network);
    // Hidden from agents: the WORKFLOW.md directory and state.dir.
    assert_eq!(c.sandbox.hidden, vec![d.to_path_buf(), c.state_dir.clone()]);

    let p = write(
        &d,
        "W.md",
        "---\nsandbox:\n  kind: bubblewrap\n  network: none\n  writable: [~/.cache/go-build, $GOCACHE]\n  \
         readable: [$TOOLS/bin, rel]\n  futur: 1\n---\n",
    );
    let wf = load_workflow(&p, &env(&[("GOCACHE", "/var/go"), ("TOOLS", "/opt/t")])).unwrap();
    let s = &wf.config.config.sandbox;
    assert!(s.bubblewrap && s.no_network);
    assert_eq!(
        s.writable,
        [
            PathBuf::from("/home/op/.cache/go-build"),
            PathBuf::from("/var/go")
        ]
    );
    assert_eq!(s.readable, [PathBuf::from("/opt/t/bin"), d.join("rel")]);
    assert_eq!(
        wf.config.warnings,
        ["unknown config key `sandbox.futur` is ignored"]
    );

    for (yaml, want) in [
        (
            "kind: firejail",
            "sandbox.kind must be none or bubblewrap, got \"firejail\"",
        ),
        (
            "kind: true",
            "sandbox.kind must be none or bubblewrap, got true",
        ),
        (
            "network: off",
            "sandbox.network must be host or none, got \"off\"",
        ),
        (
            "writable: /tmp",
            "sandbox.writable must be a list of strings, got \"/tmp\"",
        ),
        (
            "readable: [$UNSET]",
            "sandbox.readable must be paths (a $VAR must be set), got \"$UNSET\"",
        ),
        (
            "writable: [\"\"]",
            "sandbox.writable must be paths (a $VAR must be set), got \"\"",
        ),
    ] {
        let p = write(&d, "W.md", &format!("---\nsandbox:\n  {yaml}\n---\n"));
        let e = load_workflow(&p, &env(&[])).unwrap_err();
        assert_eq!(
            (e.class, e.message.as_str()),
            ("invalid_config", want),
            "{yaml}"
        );
    }
}

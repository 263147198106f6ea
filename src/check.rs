//! `baton check [WORKFLOW.md]`: the operator's preflight. Loads and validates the workflow,
//! resolves the project, prints the Status options and flags configured states that match none,
//! prints the rate-limit budget, then lists the candidate issues in dispatch order and, for every
//! other active issue, why it would not dispatch. Exit code 0 when healthy, 1 on any problem.
//!
//! The eligibility verdicts come from `orchestrator::rules::ineligibility`, the function the
//! scheduler itself dispatches by.

use std::io::Write;
use std::path::Path;

use crate::model::{contains_name, normalize_name, Issue};
use crate::orchestrator::{rules, Policy};
use crate::text::single_line as truncate;
use crate::tracker::github::project::PriorityField;
use crate::tracker::github::{Board, GithubTracker};
use crate::tracker::Tracker;
use crate::workflow::config::{ConfigEnv, ProcessEnv, ServiceConfig};
use crate::workflow::loader::load_workflow;

/// Run the check against the real environment; writes the report to `out`, returns the exit code.
pub(crate) fn run_check(workflow_path: &Path, out: &mut dyn Write) -> i32 {
    run_check_with_env(workflow_path, &ProcessEnv, out)
}

/// [`run_check`] with an injected environment (tests).
pub fn run_check_with_env(workflow_path: &Path, env: &dyn ConfigEnv, out: &mut dyn Write) -> i32 {
    let mut r = Report { out, problems: 0 };
    let code = check(workflow_path, env, &mut r);
    let _ = r.out.flush();
    code
}

struct Report<'a> {
    out: &'a mut dyn Write,
    problems: usize,
}

impl Report<'_> {
    fn line(&mut self, tag: &str, text: impl AsRef<str>) {
        let _ = writeln!(self.out, "{tag:<5} {}", text.as_ref());
    }
    fn ok(&mut self, text: impl AsRef<str>) {
        self.line("ok", text);
    }
    fn fail(&mut self, text: impl AsRef<str>) {
        self.problems += 1;
        self.line("FAIL", text);
    }
    fn raw(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.out, "{}", text.as_ref());
    }
    fn finish(&mut self) -> i32 {
        if self.problems == 0 {
            self.raw("result: healthy (0 problems)");
            0
        } else {
            let s = if self.problems == 1 { "" } else { "s" };
            self.raw(format!("result: {} problem{s}", self.problems));
            1
        }
    }
}

/// Quote untrusted text for one terminal line (control characters removed, length capped).
fn quoted(s: &str) -> String {
    format!("{:?}", truncate(s, 80))
}

fn check(path: &Path, env: &dyn ConfigEnv, r: &mut Report<'_>) -> i32 {
    r.raw(format!("baton check: {}", path.display()));
    let wf = match load_workflow(path, env) {
        Ok(wf) => wf,
        Err(e) => {
            r.fail(format!("workflow: {e}"));
            return r.finish();
        }
    };
    let cfg = &wf.config.config;
    r.ok(format!(
        "workflow loaded (agent {}, poll every {} ms)",
        cfg.agent.kind.map_or("unset", |k| k.as_str()),
        cfg.poll_interval_ms
    ));
    for w in &wf.config.warnings {
        r.line("warn", w);
    }
    for e in cfg.preflight_errors() {
        r.fail(format!("{}: {}", e.class, e.message));
    }
    check_hosts(r, cfg);
    let tracker = match GithubTracker::new(&cfg.tracker) {
        Ok(t) => t,
        Err(e) => {
            // Already reported by the preflight above when it is a config problem.
            if r.problems == 0 {
                r.fail(e.to_string());
            }
            return r.finish();
        }
    };
    if check_project(r, &tracker, cfg) {
        if let Some(board) = check_board(r, &tracker) {
            print_plan(r, &board.issues, cfg);
        }
    }
    r.finish()
}

/// One line per SSH worker host: reachable, `workspace.root` writable, agent CLI version.
fn check_hosts(r: &mut Report<'_>, cfg: &ServiceConfig) {
    if cfg.worker.ssh_hosts.is_empty() {
        return;
    }
    let pool = crate::host::HostPool::new();
    let command = cfg.agent_settings().command;
    for h in &cfg.worker.ssh_hosts {
        match crate::host::ssh::probe_host(&pool.ssh(h), &cfg.workspace_root, command) {
            Ok(v) => r.ok(format!(
                "host {h}: reachable, {} writable, agent {}",
                cfg.workspace_root.display(),
                quoted(&v)
            )),
            Err(e) => r.fail(format!("host {h}: {}", truncate(&e, 200))),
        }
    }
}

/// The project, its Status and priority fields, the configured states and the rate limit;
/// false when the project cannot be resolved.
fn check_project(r: &mut Report<'_>, tracker: &GithubTracker, cfg: &ServiceConfig) -> bool {
    let project = match tracker.project() {
        Ok(p) => p,
        Err(e) => {
            r.fail(format!("project: {e}"));
            return false;
        }
    };
    r.ok(format!(
        "project: {} #{} {} ({})",
        project.owner,
        project.number,
        quoted(&project.title),
        project.id
    ));
    if project.closed {
        r.line("warn", "the project is closed");
    }
    let names: Vec<&str> = project
        .status
        .options
        .iter()
        .map(|o| o.name.as_str())
        .collect();
    r.ok(format!(
        "status field {}: {}",
        quoted(&project.status.name),
        names
            .iter()
            .map(|n| quoted(n))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    check_states(r, "active", &cfg.tracker.active_states, &names);
    check_states(r, "terminal", &cfg.tracker.terminal_states, &names);
    match &project.priority {
        PriorityField::NotConfigured => r.ok("priority field: not configured (priority is null)"),
        PriorityField::Resolved(f) => r.ok(format!(
            "priority field {}: {}",
            quoted(&f.name),
            f.options
                .iter()
                .enumerate()
                .map(|(i, o)| format!("{}={}", i + 1, quoted(&o.name)))
                .collect::<Vec<_>>()
                .join(" ")
        )),
        PriorityField::Unusable(why) => r.fail(why),
    }
    match tracker.rate_limit() {
        Some(rl) => r.ok(format!(
            "rate limit: {} of {} points left, resets {}",
            rl.remaining.map_or("?".into(), |n| n.to_string()),
            rl.limit.map_or("?".into(), |n| n.to_string()),
            rl.reset_at.as_deref().unwrap_or("?")
        )),
        None => r.ok("rate limit: not reported (rate limits disabled on this server)"),
    }
    true
}

/// Fetch the whole board and summarize what was skipped; `None` when the fetch failed.
fn check_board(r: &mut Report<'_>, tracker: &GithubTracker) -> Option<Board> {
    let board = match tracker.fetch_board(None) {
        Ok(b) => b,
        Err(e) => {
            r.fail(format!("board: {e}"));
            return None;
        }
    };
    let d = &board.dropped;
    r.ok(format!(
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
        r.line("warn", "malformed items were skipped (see the log)");
    }
    if !tracker.dependencies_supported() {
        r.line(
            "warn",
            "this server has no issue dependencies: blockers are ignored",
        );
    }
    Some(board)
}

/// The active issues the scheduler would dispatch, in its order, and why the others would not.
fn print_plan(r: &mut Report<'_>, issues: &[Issue], cfg: &ServiceConfig) {
    // The scheduler's own rule, so the plan is what the daemon would do (minus claims and slots).
    let policy = Policy::from_config(cfg);
    let active: Vec<&Issue> = issues
        .iter()
        .filter(|i| contains_name(&policy.active_states, &i.state))
        .collect();
    let mut ready: Vec<&Issue> = Vec::new();
    let mut held: Vec<(&Issue, String)> = Vec::new();
    for i in &active {
        let why = rules::ineligibility(&policy, i);
        if why.is_empty() {
            ready.push(i);
        } else {
            let why: Vec<String> = why.iter().map(ToString::to_string).collect();
            held.push((i, why.join("; ")));
        }
    }
    ready.sort_by(|a, b| rules::dispatch_order(a, b));
    r.raw(format!(
        "dispatch order ({} of {} active issues):",
        ready.len(),
        active.len()
    ));
    if ready.is_empty() {
        r.raw("  (none)");
    }
    for (n, i) in ready.iter().enumerate() {
        r.raw(format!(
            "  {}. {}  [{}]  priority {}  {}",
            n + 1,
            i.identifier,
            truncate(&i.state, 40),
            i.priority.map_or("-".into(), |p| p.to_string()),
            quoted(&i.title)
        ));
    }
    r.raw(format!("not dispatching ({}):", held.len()));
    if held.is_empty() {
        r.raw("  (none)");
    }
    for (i, why) in held {
        r.raw(format!(
            "  {}  [{}]  {}",
            i.identifier,
            truncate(&i.state, 40),
            why
        ));
    }
}

fn check_states(r: &mut Report<'_>, which: &str, states: &[String], options: &[&str]) {
    let mut all_ok = true;
    for s in states {
        if options.iter().any(|o| *o == s.trim()) {
            continue;
        }
        if let Some(o) = options
            .iter()
            .find(|o| normalize_name(o) == normalize_name(s))
        {
            r.line(
                "note",
                format!(
                    "{which} state {} matches option {} ignoring case/whitespace",
                    quoted(s),
                    quoted(o)
                ),
            );
            continue;
        }
        all_ok = false;
        let hint = options
            .iter()
            .map(|o| {
                (
                    crate::workflow::config::edit_distance(&normalize_name(o), &normalize_name(s)),
                    o,
                )
            })
            .filter(|(d, _)| *d <= 3)
            .min_by_key(|(d, _)| *d)
            .map(|(_, o)| format!(" (did you mean {}?)", quoted(o)))
            .unwrap_or_default();
        r.fail(format!(
            "tracker.{which}_states: {} matches no option of the status field{hint}",
            quoted(s)
        ));
    }
    if all_ok {
        r.ok(format!(
            "{which} states: {}",
            states
                .iter()
                .map(|s| quoted(s))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

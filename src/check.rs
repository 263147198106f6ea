//! `baton check [WORKFLOW.md]`: the operator's preflight. Loads and validates the workflow,
//! resolves the project, prints the Status options and flags configured states that match none,
//! prints the rate-limit budget, then lists the candidate issues in dispatch order and, for every
//! other active issue, why it would not dispatch. Exit code 0 when healthy, 1 on any problem.
//!
//! The eligibility rules here mirror spec §8.2 for reporting only; the orchestrator owns the real
//! dispatch decision.

use std::io::Write;
use std::path::Path;

use crate::model::{contains_name, normalize_name, Issue};
use crate::text::single_line as truncate;
use crate::tracker::github::project::PriorityField;
use crate::tracker::github::GithubTracker;
use crate::tracker::Tracker;
use crate::workflow::config::{ConfigEnv, ProcessEnv, TrackerConfig};
use crate::workflow::loader::load_workflow;

/// Run the check against the real environment; writes the report to `out`, returns the exit code.
pub fn run_check(workflow_path: &Path, out: &mut dyn Write) -> i32 {
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
    let project = match tracker.project() {
        Ok(p) => p,
        Err(e) => {
            r.fail(format!("project: {e}"));
            return r.finish();
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
    let board = match tracker.fetch_board(None) {
        Ok(b) => b,
        Err(e) => {
            r.fail(format!("board: {e}"));
            return r.finish();
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
    let tcfg = &cfg.tracker;
    let active: Vec<&Issue> = board
        .issues
        .iter()
        .filter(|i| contains_name(&tcfg.active_states, &i.state))
        .collect();
    let mut ready: Vec<&Issue> = Vec::new();
    let mut held: Vec<(&Issue, String)> = Vec::new();
    for i in &active {
        match ineligibility_reason(i, tcfg) {
            None => ready.push(i),
            Some(why) => held.push((i, why)),
        }
    }
    ready.sort_by(|a, b| crate::orchestrator::rules::dispatch_order(a, b));
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
    r.finish()
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

/// Why an issue in an active state would not dispatch (spec §8.2, minus claims and slots), or
/// `None` when it would. Several reasons are joined with `; `.
pub fn ineligibility_reason(issue: &Issue, cfg: &TrackerConfig) -> Option<String> {
    let mut why: Vec<String> = Vec::new();
    if issue.closed {
        why.push("closed on GitHub (closed issues are terminal)".into());
    }
    if contains_name(&cfg.terminal_states, &issue.state) {
        why.push(format!("Status {:?} is terminal", issue.state));
    } else if !contains_name(&cfg.active_states, &issue.state) {
        why.push(format!("Status {:?} is not an active state", issue.state));
    }
    if !cfg.repos.is_empty() && !contains_name(&cfg.repos, &issue.repository) {
        why.push(format!(
            "repository {} is not in tracker.repos",
            issue.repository
        ));
    }
    let missing: Vec<&str> = cfg
        .required_labels
        .iter()
        .filter(|l| !issue.has_label(l))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        why.push(format!("missing required label {}", missing.join(", ")));
    }
    let excluded: Vec<&str> = cfg
        .excluded_labels
        .iter()
        .filter(|l| issue.has_label(l))
        .map(String::as_str)
        .collect();
    if !excluded.is_empty() {
        why.push(format!("has excluded label {}", excluded.join(", ")));
    }
    let first_active = cfg.active_states.first().map(|s| normalize_name(s));
    if first_active.as_deref() == Some(issue.normalized_state().as_str()) {
        let blockers: Vec<String> = issue
            .blocked_by
            .iter()
            // Same rule as `orchestrator::rules::blockers_allow`.
            .filter(|b| !b.terminal && !contains_name(&cfg.terminal_states, &b.state))
            .map(|b| format!("{} ({})", b.identifier, truncate(&b.state, 40)))
            .collect();
        if !blockers.is_empty() {
            why.push(format!("blocked by {}", blockers.join(", ")));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BlockerRef;

    fn cfg() -> TrackerConfig {
        TrackerConfig {
            kind: Some("github_projects".into()),
            endpoint: String::new(),
            token: None,
            token_source: None,
            owner: None,
            owner_type: crate::workflow::config::OwnerType::Organization,
            project_number: None,
            status_field: "Status".into(),
            priority_field: None,
            repos: vec!["acme/app".into()],
            required_labels: vec!["baton".into()],
            excluded_labels: vec!["wontfix".into()],
            active_states: vec!["Todo".into(), "In Progress".into()],
            terminal_states: vec!["Done".into()],
            page_size: 50,
            server_side_filter: false,
            timeout_ms: 1000,
        }
    }

    fn issue(state: &str, labels: &[&str]) -> Issue {
        Issue {
            id: "I_1".into(),
            identifier: "acme__app-1".into(),
            repository: "acme/app".into(),
            title: "t".into(),
            state: state.into(),
            labels: labels.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn reasons() {
        let c = cfg();
        assert_eq!(ineligibility_reason(&issue("todo", &["baton"]), &c), None);
        let mut i = issue("Todo", &["wontfix"]);
        i.repository = "acme/web".into();
        i.closed = true;
        i.blocked_by = vec![BlockerRef {
            id: "I_2".into(),
            identifier: "acme__app-2".into(),
            state: "OPEN".into(),
            terminal: false,
        }];
        let why = ineligibility_reason(&i, &c).unwrap();
        for part in [
            "closed",
            "not in tracker.repos",
            "missing required label baton",
            "excluded label wontfix",
            "blocked by acme__app-2 (OPEN)",
        ] {
            assert!(why.contains(part), "{why}");
        }
        // The blocker rule applies to the first active state only.
        let mut i = issue("In Progress", &["baton"]);
        i.blocked_by = vec![BlockerRef::default()];
        assert_eq!(ineligibility_reason(&i, &c), None);
    }

    #[test]
    fn order() {
        let mut a = issue("Todo", &[]);
        a.priority = None;
        a.identifier = "a".into();
        let mut b = issue("Todo", &[]);
        b.priority = Some(2);
        b.identifier = "b".into();
        let mut c = issue("Todo", &[]);
        c.priority = Some(2);
        c.created_at = Some("2020-01-01T00:00:00Z".into());
        c.identifier = "c".into();
        let mut v = [&a, &b, &c];
        v.sort_by(|a, b| crate::orchestrator::rules::dispatch_order(a, b));
        let ids: Vec<&str> = v.iter().map(|i| i.identifier.as_str()).collect();
        assert_eq!(ids, vec!["c", "b", "a"]);
    }
}

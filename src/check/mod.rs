//! `baton check [WORKFLOW.md]`: the operator's preflight. Validates the workflow, prints what the
//! state directory and the tracker kind report, then the candidate issues in dispatch order and,
//! for every other active issue, why it would not dispatch (`orchestrator::rules::ineligibility`,
//! the scheduler's own rule). Exit code 0 when healthy, 1 on any problem.

use std::io::Write;
use std::path::Path;

use crate::host::containment;
use crate::model::{contains_name, Issue};
use crate::orchestrator::{rules, Pace};
use crate::text::{quoted, single_line as truncate};
use crate::tracker::config::CheckLines;
use crate::workflow::config::{ConfigEnv, ParsedConfig, ServiceConfig};
use crate::workflow::loader::load_workflow;

#[cfg(feature = "ssh")]
mod ssh;

/// Write the report to `out`; returns the exit code. `env` is [`crate::workflow::config::ProcessEnv`]
/// in the binary.
pub fn run_check_with_env(path: &Path, env: &dyn ConfigEnv, out: &mut dyn Write) -> i32 {
    let r = &mut Report { out, problems: 0 };
    r.raw(format!("baton check: {}", path.display()));
    match load_workflow(path, env) {
        Ok(wf) => check(&wf.config, r),
        Err(e) => r.fail(format!("workflow: {e}")),
    }
    let code = r.finish();
    let _ = r.out.flush();
    code
}

/// The report being written: one tagged line per finding; counts the problems.
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
    /// Lines a section reported, `(tag, text)`; tag `fail` is a problem.
    fn lines(&mut self, lines: Vec<(&str, String)>) {
        for (tag, text) in lines {
            self.problems += usize::from(tag == "fail");
            self.line(if tag == "fail" { "FAIL" } else { tag }, text);
        }
    }
    fn finish(&mut self) -> i32 {
        match self.problems {
            0 => self.raw("result: healthy (0 problems)"),
            1 => self.raw("result: 1 problem"),
            n => self.raw(format!("result: {n} problems")),
        }
        i32::from(self.problems > 0)
    }
}

fn check(parsed: &ParsedConfig, r: &mut Report<'_>) {
    let cfg = &parsed.config;
    r.ok(format!(
        "workflow loaded (agent {}, poll every {} ms)",
        cfg.agent.kind.map_or("unset", |k| k.as_str()),
        cfg.poll_interval_ms
    ));
    r.ok(format!("process containment: {}", containment()));
    for w in &parsed.warnings {
        r.line("warn", w);
    }
    print_nofile(r, cfg);
    print_budget(r, cfg);
    check_sandbox(r, cfg);
    for e in crate::features::not_built(Some(cfg), None) {
        r.fail(e);
    }
    for e in cfg.preflight_errors() {
        r.fail(format!("{}: {}", e.class, e.message));
    }
    #[cfg(feature = "ssh")]
    ssh::check_hosts(r, cfg);
    r.lines(crate::runtime::persist::check_lines(cfg));
    // The tracker kind's own section: what it resolved, found and skipped; the plan needs
    // every issue it could read.
    let mut lines = CheckLines::default();
    let issues = crate::tracker::config::check_report(&cfg.tracker, &mut lines);
    r.lines(lines.0);
    if let Some(read) = lines.1 {
        print_pacing(r, cfg, read);
    }
    if let Some(issues) = issues {
        print_plan(r, &issues, cfg);
    }
}

/// The budget plan the daemon starts from, for the board read's measured cost: the poll
/// interval in force (`polling.interval_ms`, stretched) and its projected points per hour.
fn print_pacing(r: &mut Report<'_>, cfg: &ServiceConfig, (points, limit): (u64, i64)) {
    let mut pace = Pace::default();
    pace.poll_points = Some(points);
    let share = cfg.tracker.budget_share;
    let plan = pace.plan(cfg.poll_interval_ms, share, Some(limit), 0);
    let shown = |v: Option<u64>| v.map_or("?".into(), |n| n.to_string());
    r.ok(format!(
        "tracker budget: a board read costs {points} points; polling every {} ms (polling.interval_ms {}), projected {} of {} points per hour (tracker.budget_share {share} of {limit}); the daemon adds between-turn refreshes and retries",
        plan.poll_interval_ms,
        cfg.poll_interval_ms,
        shown(plan.projected_per_hour),
        shown(plan.target_per_hour),
    ));
}

/// The descriptor limit the daemon raises its soft limit to, and the agents it allows.
fn print_nofile(r: &mut Report<'_>, cfg: &ServiceConfig) {
    use crate::runtime::fds::{agents_allowed, nofile_limit, open_fds, FD_RESERVE};
    let Ok((soft, hard)) = nofile_limit() else {
        return r.line("warn", "file descriptors: cannot read RLIMIT_NOFILE");
    };
    let allowed = agents_allowed(hard, open_fds().unwrap_or(0));
    let text = format!(
        "file descriptors: soft limit {soft}, hard limit {hard} (baton raises the soft one to it): room for {allowed} agents with {FD_RESERVE} kept free"
    );
    let max = cfg.agent.max_concurrent_agents;
    if allowed >= u64::from(max) {
        return r.ok(text);
    }
    let why = format!("agent.max_concurrent_agents ({max}) is capped to it: raise LimitNOFILE");
    r.line("warn", format!("{text}; {why}"));
}

/// Whether agents run confined: a warning when not, else whether the sandbox starts here (SSH
/// hosts: in `ssh::check_hosts`).
fn check_sandbox(r: &mut Report<'_>, cfg: &ServiceConfig) {
    let Some(sb) = cfg.agent_sandbox() else {
        return r.line(
            "warn",
            "sandbox.kind is none: agents run unconfined, with the service user's access to \
             every workspace, the state directory and the home directory (docs/security.md)",
        );
    };
    if !cfg.worker.ssh_hosts.is_empty() {
        return;
    }
    let net = match cfg.sandbox.no_network {
        true => "none",
        false => "host",
    };
    match sb.check(&crate::host::LocalHost) {
        Ok(()) => r.ok(format!("sandbox: bubblewrap starts (network: {net})")),
        Err(e) => r.fail(e),
    }
}

/// The per-issue budget limits; spend itself lives in the daemon (dashboard, `/api/v1/*`,
/// `/metrics`).
fn print_budget(r: &mut Report<'_>, cfg: &ServiceConfig) {
    let a = &cfg.agent;
    let mut limits = Vec::new();
    if let Some(c) = a.budget.max_cost_usd_per_issue {
        limits.push(format!("cost ${}", crate::orchestrator::budget::usd(c)));
    }
    if let Some(t) = a.budget.max_tokens_per_issue {
        limits.push(format!("{t} tokens (cache reads and writes included)"));
    }
    if let Some(t) = a.budget.max_turns_per_issue {
        limits.push(format!("{t} turns"));
    }
    let limits = match limits.is_empty() {
        true => "unlimited".to_string(),
        false => limits.join(", "),
    };
    r.ok(format!(
        "budget per issue: {limits} (spend is shown on the dashboard and in the API)"
    ));
    let cost_limit = a.budget.max_cost_usd_per_issue.is_some();
    if let Some(k) = a.kind.filter(|k| cost_limit && !k.reports_cost()) {
        r.line(
            "warn",
            format!(
                "agent.max_cost_usd_per_issue does not apply to {} (it reports no cost); \
                 use agent.max_tokens_per_issue or agent.max_turns_per_issue",
                k.as_str()
            ),
        );
    }
}

/// The active issues the scheduler would dispatch, in its order, and why the others would not.
fn print_plan(r: &mut Report<'_>, issues: &[Issue], cfg: &ServiceConfig) {
    // The scheduler's own rule, so the plan is what the daemon would do (minus claims and slots).
    let policy = cfg.policy();
    let (mut ready, mut held) = (Vec::new(), Vec::new());
    let is_active = |i: &&Issue| contains_name(&policy.active_states, &i.state);
    for i in issues.iter().filter(is_active) {
        let why: Vec<String> = rules::ineligibility(&policy, i)
            .iter()
            .map(ToString::to_string)
            .collect();
        match why.is_empty() {
            true => ready.push(i),
            false => held.push(format!(
                "  {}  [{}]  {}",
                i.identifier,
                truncate(&i.state, 40),
                why.join("; ")
            )),
        }
    }
    ready.sort_by(|a, b| rules::dispatch_order(a, b));
    let (n, active) = (ready.len(), ready.len() + held.len());
    r.raw(format!("dispatch order ({n} of {active} active issues):"));
    let ready = ready.iter().enumerate().map(|(n, i)| {
        let priority = i.priority.map_or("-".into(), |p| p.to_string());
        let (state, title) = (truncate(&i.state, 40), quoted(&i.title));
        format!(
            "  {}. {}  [{state}]  priority {priority}  {title}",
            n + 1,
            i.identifier
        )
    });
    print_list(r, ready.collect());
    r.raw(format!("not dispatching ({}):", held.len()));
    print_list(r, held);
}

fn print_list(r: &mut Report<'_>, lines: Vec<String>) {
    if lines.is_empty() {
        r.raw("  (none)");
    }
    for line in lines {
        r.raw(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_env::EmptyEnv;
    use crate::workflow::config::parse_config;

    fn budget_lines(agent_yaml: &str) -> String {
        let m: serde_yaml::Mapping =
            serde_yaml::from_str(&format!("agent:\n{agent_yaml}")).unwrap();
        let cfg = parse_config(&m, Path::new("/"), &EmptyEnv).unwrap().config;
        let mut buf = Vec::new();
        let mut r = Report {
            out: &mut buf,
            problems: 0,
        };
        print_budget(&mut r, &cfg);
        assert_eq!(r.problems, 0, "limits are never a problem");
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn budget_limits_are_printed_and_cost_is_flagged_for_agents_without_one() {
        assert!(budget_lines("  kind: claude_code\n").contains("budget per issue: unlimited"));
        let out = budget_lines(
            "  kind: copilot\n  max_cost_usd_per_issue: 2.5\n  max_tokens_per_issue: 1000\n  max_turns_per_issue: 9\n",
        );
        assert!(
            out.contains("budget per issue: cost $2.50, 1000 tokens (cache reads and writes included), 9 turns"),
            "{out}"
        );
        assert!(
            out.contains("warn  agent.max_cost_usd_per_issue does not apply to copilot"),
            "{out}"
        );
        for kind in ["codex", "gemini"] {
            let out = budget_lines(&format!("  kind: {kind}\n  max_cost_usd_per_issue: 1\n"));
            let want = format!("warn  agent.max_cost_usd_per_issue does not apply to {kind}");
            assert!(out.contains(&want), "{out}");
        }
        let out = budget_lines("  kind: claude_code\n  max_cost_usd_per_issue: 1\n");
        assert!(!out.contains("does not apply"), "{out}");
    }
}

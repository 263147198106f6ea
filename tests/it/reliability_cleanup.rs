//! Issue 12, failures 8 and 9 and the re-pointed root: cleanup never deletes live work, and every
//! `before_remove` gets the full `BATON_ISSUE_*` set.

use crate::support::engine_sim::poll_started;
use crate::support::issues;
use crate::support::tempdir::TempDir;
use issues::issue;

use std::fs;
use std::path::{Path, PathBuf};

use baton::model::Issue;
use baton::orchestrator::engine::{handle, Action, Event};
use baton::orchestrator::state::{Millis, OrchestratorState, Policy};
use baton::orchestrator::{StopReason, WorkerOutcome};
use baton::workflow::config::HooksConfig;
use baton::workspace::hooks::HookEnv;
use baton::workspace::{ensure_workspace, remove_workspace_on, sweep_tombstones, workspace_path};

const T0: Millis = 1_700_000_000_000;

fn policy() -> Policy {
    Policy {
        poll_interval_ms: 30_000,
        max_concurrent_agents: 10,
        workspace_root: PathBuf::from("/ws"),
        ..Policy::default()
    }
}

fn poll(
    s: &mut OrchestratorState,
    now: Millis,
    refreshed: Vec<Issue>,
    cands: Vec<Issue>,
) -> Vec<Action> {
    let mut out = handle(s, Event::Wake, now);
    let running_ids = poll_started(&out).expect("a poll");
    let refreshed = (!running_ids.is_empty()).then_some(Ok(refreshed));
    out.extend(handle(
        s,
        Event::PollResult {
            running_ids,
            refreshed,
            candidates: Ok(cands),
            rate_limit: None,
        },
        now,
    ));
    out
}

fn cleans(out: &[Action]) -> Vec<(Issue, PathBuf)> {
    out.iter()
        .filter_map(|a| match a {
            Action::CleanWorkspace {
                issue,
                workspace_path,
                ..
            } => Some((issue.clone(), workspace_path.clone())),
            _ => None,
        })
        .collect()
}

fn dispatched(out: &[Action]) -> usize {
    out.iter()
        .filter(|a| matches!(a, Action::Dispatch { .. }))
        .count()
}

#[test]
fn reopened_during_cleanup_is_not_redispatched_until_the_removal_finished() {
    let mut s = OrchestratorState::new(policy(), T0);
    let mut now = T0;
    assert_eq!(
        dispatched(&poll(&mut s, now, vec![], vec![issue(1, "Todo")])),
        1
    );
    now += 30_000;
    let out = poll(&mut s, now, vec![issue(1, "Done")], vec![]);
    assert!(out.iter().any(|a| matches!(
        a,
        Action::StopWorker {
            reason: StopReason::Terminal,
            ..
        }
    )));
    let run_id = s.running["I_1"].run_id;
    let out = handle(
        &mut s,
        Event::WorkerExited {
            issue_id: "I_1".into(),
            run_id,
            outcome: WorkerOutcome::Cancelled,
        },
        now,
    );
    // Failure 9: the terminal transition while running carries the full last known issue.
    let c = cleans(&out);
    assert_eq!(c.len(), 1);
    let (i, path) = &c[0];
    assert_eq!(
        (i.number, i.repository.as_str(), i.state.as_str()),
        (1, "acme/repo", "Done")
    );
    assert_eq!(
        i.url.as_deref(),
        Some("https://github.com/acme/repo/issues/1")
    );
    assert_eq!(path, &PathBuf::from("/ws/acme__repo-1"));
    // Failure 8: moved back to Todo while before_remove runs: held.
    now += 30_000;
    let out = poll(&mut s, now, vec![], vec![issue(1, "Todo")]);
    assert_eq!(
        dispatched(&out),
        0,
        "held while its workspace is being removed"
    );
    handle(
        &mut s,
        Event::WorkspaceRemoved {
            issue_id: "I_1".into(),
        },
        now,
    );
    now += 30_000;
    let out = poll(&mut s, now, vec![], vec![issue(1, "Todo")]);
    assert_eq!(
        dispatched(&out),
        1,
        "dispatched again once the removal finished"
    );
}

#[test]
fn retry_time_cleanup_carries_the_refreshed_issue() {
    let mut s = OrchestratorState::new(policy(), T0);
    let now = T0;
    poll(&mut s, now, vec![], vec![issue(2, "Todo")]);
    let run_id = s.running["I_2"].run_id;
    handle(
        &mut s,
        Event::WorkerExited {
            issue_id: "I_2".into(),
            run_id,
            outcome: WorkerOutcome::Failed("boom".into()),
        },
        now,
    );
    let seq = s.retry_attempts["I_2"].seq;
    let out = handle(
        &mut s,
        Event::RetryRefreshed {
            issue_id: "I_2".into(),
            seq,
            result: Ok(Some(issue(2, "Done"))),
        },
        now + 60_000,
    );
    let c = cleans(&out);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].0.number, c[0].0.repository.as_str()),
        (2, "acme/repo")
    );
    assert_eq!(c[0].0.state, "Done");
    assert_eq!(s.cleaning.get("I_2"), Some(&1));
}

#[test]
fn startup_cleanup_goes_through_the_engine_with_full_issues() {
    let mut s = OrchestratorState::new(policy(), T0);
    let out = handle(&mut s, Event::TerminalAtStartup(vec![issue(3, "Done")]), T0);
    let c = cleans(&out);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].0.number, 3);
    assert_eq!(c[0].1, PathBuf::from("/ws/acme__repo-3"));
    let out = poll(&mut s, T0, vec![], vec![issue(3, "Todo")]);
    assert_eq!(dispatched(&out), 0, "held until WorkspaceRemoved");
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn removal_runs_before_remove_in_place_with_full_env_then_tombstones() {
    let base = TempDir::new("tomb");
    let root = base.join("root");
    let path = workspace_path(&root, "acme__repo-7");
    let out = base.join("env.txt");
    let hooks = HooksConfig {
        after_create: Some("echo created > marker".into()),
        before_remove: Some(format!(
            "echo \"$PWD $BATON_ISSUE_NUMBER $BATON_ISSUE_REPO $BATON_ISSUE_URL $BATON_ISSUE_STATUS $(cat marker)\" > {}",
            out.display()
        )),
        timeout_ms: 5_000,
        ..HooksConfig::default()
    };
    let i = issue(7, "Done");
    let env = HookEnv::for_issue(&i);
    let ws = ensure_workspace(&baton::host::LocalHost, &root, &path, &hooks, &env).unwrap();
    assert!(ws.created_now);
    assert!(remove_workspace_on(&baton::host::LocalHost, &root, &path, &hooks, &env).unwrap());
    let got = fs::read_to_string(&out).unwrap();
    assert_eq!(
        got.trim(),
        format!(
            "{} 7 acme/repo https://github.com/acme/repo/issues/7 Done created",
            ws.path.display()
        )
    );
    assert!(
        names(&root).is_empty(),
        "no workspace and no tombstone left: {:?}",
        names(&root)
    );
    // A re-dispatch gets a fresh directory and after_create runs again.
    let ws = ensure_workspace(&baton::host::LocalHost, &root, &path, &hooks, &env).unwrap();
    assert!(ws.created_now);
}

#[test]
fn tombstones_left_by_a_crash_are_swept() {
    let root = TempDir::new("sweep");
    fs::create_dir_all(root.join(".trash-acme__repo-1-123/sub")).unwrap();
    fs::write(root.join(".trash-acme__repo-1-123/sub/f"), "x").unwrap();
    fs::create_dir_all(root.join("acme__repo-2")).unwrap();
    let outside = TempDir::new("sweep-outside");
    std::os::unix::fs::symlink(&outside, root.join(".trash-link")).unwrap();
    fs::write(outside.join("keep"), "x").unwrap();
    assert_eq!(sweep_tombstones(&root), 2);
    assert_eq!(names(&root), ["acme__repo-2"]);
    assert!(
        outside.join("keep").exists(),
        "a symlinked tombstone is unlinked, never followed"
    );
}

#[test]
fn a_re_pointed_root_symlink_is_refused_and_nothing_is_deleted() {
    let base = TempDir::new("repoint");
    let (a, b) = (base.join("a"), base.join("b"));
    fs::create_dir_all(a.join("acme__repo-9")).unwrap();
    fs::create_dir_all(b.join("acme__repo-9")).unwrap();
    let link = base.join("root");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let path = workspace_path(&link, "acme__repo-9");
    let hooks = HooksConfig {
        timeout_ms: 5_000,
        ..HooksConfig::default()
    };
    let env = HookEnv::for_issue(&issue(9, "Done"));
    // First use pins the root's resolution.
    ensure_workspace(&baton::host::LocalHost, &link, &path, &hooks, &env).unwrap();
    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&b, &link).unwrap();
    let err = remove_workspace_on(&baton::host::LocalHost, &link, &path, &hooks, &env).unwrap_err();
    assert!(err.0.contains("now resolves to"), "{err}");
    assert!(a.join("acme__repo-9").is_dir() && b.join("acme__repo-9").is_dir());
}

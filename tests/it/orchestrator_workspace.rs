//! Workspace manager and hooks (spec §17.2): creation/reuse, unsafe paths, hook semantics,
//! timeouts that kill the whole process group, and the BATON_* environment.

use crate::support::tempdir::TempDir;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton::host::LocalHost;
use baton::model::Issue;
use baton::workflow::config::HooksConfig;
use baton::workspace::hooks::{run_hook, HookEnv, HookError};
use baton::workspace::{ensure_workspace, remove_workspace_on, workspace_path};

fn issue() -> Issue {
    Issue {
        id: "I_kw1".into(),
        identifier: "acme__repo-12".into(),
        number: 12,
        repository: "acme/repo".into(),
        title: "Title with $(rm -rf /) and `backticks`".into(),
        state: "In Progress".into(),
        url: Some("https://github.com/acme/repo/issues/12".into()),
        ..Issue::default()
    }
}

fn hooks() -> HooksConfig {
    HooksConfig {
        timeout_ms: 5_000,
        ..HooksConfig::default()
    }
}

use crate::support::procs;

#[test]
fn creates_then_reuses_and_runs_after_create_only_once() {
    let tmp = TempDir::new("reuse");
    let root = tmp.join("root"); // root itself is created on demand
    let path = workspace_path(&root, "acme__repo-12");
    let h = HooksConfig {
        after_create: Some("echo created >> marker".into()),
        ..hooks()
    };
    let env = HookEnv::for_issue(&issue());
    let w1 = ensure_workspace(&LocalHost, &root, &path, &h, &env).unwrap();
    assert!(w1.created_now && w1.path.is_dir());
    fs::write(w1.path.join("work.txt"), "keep me").unwrap();
    let w2 = ensure_workspace(&LocalHost, &root, &path, &h, &env).unwrap();
    assert!(!w2.created_now);
    assert_eq!(w1.path, w2.path);
    assert_eq!(
        fs::read_to_string(w2.path.join("marker")).unwrap(),
        "created\n"
    );
    assert_eq!(
        fs::read_to_string(w2.path.join("work.txt")).unwrap(),
        "keep me"
    );
}

#[test]
fn failing_after_create_removes_the_half_made_directory() {
    let root = TempDir::new("after-create-fail");
    let path = workspace_path(&root, "acme__repo-12");
    let h = HooksConfig {
        after_create: Some("touch partial; exit 3".into()),
        ..hooks()
    };
    let err =
        ensure_workspace(&LocalHost, &root, &path, &h, &HookEnv::for_issue(&issue())).unwrap_err();
    assert!(
        err.0.contains("after_create") && err.0.contains("status 3"),
        "{err}"
    );
    assert!(!path.exists());
}

#[test]
fn an_existing_file_at_the_workspace_path_fails_safely() {
    let root = TempDir::new("file");
    let path = workspace_path(&root, "acme__repo-12");
    fs::write(&path, "not a dir").unwrap();
    let err = ensure_workspace(
        &LocalHost,
        &root,
        &path,
        &hooks(),
        &HookEnv::for_issue(&issue()),
    )
    .unwrap_err();
    assert!(err.0.contains("not a directory"), "{err}");
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "not a dir",
        "left untouched"
    );
}

#[test]
fn a_symlink_escaping_the_root_is_rejected_and_never_followed_on_removal() {
    let base = TempDir::new("symlink");
    let root = base.join("root");
    let outside = base.join("outside");
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("precious"), "x").unwrap();
    let path = workspace_path(&root, "acme__repo-12");
    std::os::unix::fs::symlink(&outside, &path).unwrap();
    let env = HookEnv::for_issue(&issue());
    let err = ensure_workspace(&LocalHost, &root, &path, &hooks(), &env).unwrap_err();
    assert!(err.0.contains("outside the workspace root"), "{err}");
    let h = HooksConfig {
        before_remove: Some("touch ran-before-remove".into()),
        ..hooks()
    };
    assert!(remove_workspace_on(&LocalHost, &root, &path, &h, &env).unwrap());
    assert!(
        !path.exists() && fs::symlink_metadata(&path).is_err(),
        "link removed"
    );
    assert!(outside.join("precious").exists(), "target untouched");
    assert!(
        !outside.join("ran-before-remove").exists(),
        "no hook through the link"
    );
}

#[test]
fn paths_that_are_not_a_direct_child_of_the_root_are_refused() {
    let root = TempDir::new("child");
    let env = HookEnv::default();
    for p in [
        root.join("a/b"),
        root.join(".."),
        root.to_path_buf(),
        PathBuf::from("/tmp"),
    ] {
        assert!(
            ensure_workspace(&LocalHost, &root, &p, &hooks(), &env).is_err(),
            "{p:?}"
        );
        assert!(
            remove_workspace_on(&LocalHost, &root, &p, &hooks(), &env).is_err(),
            "{p:?}"
        );
    }
}

#[test]
fn remove_runs_before_remove_and_ignores_its_failure() {
    let root = TempDir::new("remove");
    let path = workspace_path(&root, "acme__repo-12");
    let env = HookEnv::for_issue(&issue());
    ensure_workspace(&LocalHost, &root, &path, &hooks(), &env).unwrap();
    let log = root.join("before_remove.log");
    let h = HooksConfig {
        before_remove: Some(format!(
            "echo \"$BATON_ISSUE_IDENTIFIER\" > {}; exit 1",
            log.display()
        )),
        ..hooks()
    };
    assert!(remove_workspace_on(&LocalHost, &root, &path, &h, &env).unwrap());
    assert!(!path.exists());
    assert_eq!(fs::read_to_string(&log).unwrap(), "acme__repo-12\n");
    assert!(
        !remove_workspace_on(&LocalHost, &root, &path, &h, &env).unwrap(),
        "missing is fine"
    );
}

#[test]
fn hooks_get_the_baton_environment_and_run_in_the_workspace() {
    let root = TempDir::new("env");
    let path = workspace_path(&root, "acme__repo-12");
    let ws = ensure_workspace(
        &LocalHost,
        &root,
        &path,
        &hooks(),
        &HookEnv::for_issue(&issue()),
    )
    .unwrap();
    let env = HookEnv::for_issue(&issue());
    let out = run_hook(
        &LocalHost,
        "pwd; echo \"$BATON_ISSUE_ID|$BATON_ISSUE_IDENTIFIER|$BATON_ISSUE_NUMBER|$BATON_ISSUE_REPO|$BATON_ISSUE_URL|$BATON_ISSUE_STATUS|$BATON_WORKSPACE\"",
        &ws.path,
        &env,
        5_000,
    )
    .unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(Path::new(lines[0]), ws.path);
    assert_eq!(
        lines[1],
        format!(
            "I_kw1|acme__repo-12|12|acme/repo|https://github.com/acme/repo/issues/12|In Progress|{}",
            ws.path.display()
        )
    );
}

#[test]
fn hook_failure_reports_status_and_output() {
    let dir = TempDir::new("fail");
    match run_hook(
        &LocalHost,
        "echo out; echo err >&2; exit 7",
        &dir,
        &HookEnv::default(),
        5_000,
    ) {
        Err(HookError::Failed(o)) => {
            assert_eq!(o.code, Some(7));
            assert_eq!(o.stdout, "out\n");
            assert_eq!(o.stderr, "err\n");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hook_timeout_kills_the_whole_process_group() {
    let dir = TempDir::new("timeout");
    let pidfile = dir.join("bg.pid");
    let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let started = std::time::Instant::now();
    let r = run_hook(&LocalHost, &script, &dir, &HookEnv::default(), 300);
    assert!(
        matches!(
            r,
            Err(HookError::Timeout {
                timeout_ms: 300,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "bounded");
    let pid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The background child was in the hook's group and must be gone (a zombie awaiting its
    // reaper counts as gone).
    let gone = procs::wait_pid_gone(pid, Duration::from_secs(5));
    assert!(gone, "background process {pid} survived the hook timeout");
}

#[test]
fn huge_hook_output_is_bounded() {
    let dir = TempDir::new("huge");
    let out = run_hook(
        &LocalHost,
        "head -c 5000000 /dev/zero | tr '\\0' x",
        &dir,
        &HookEnv::default(),
        10_000,
    )
    .unwrap();
    assert_eq!(out.stdout.len(), baton::workspace::hooks::MAX_CAPTURE_BYTES);
    let line = baton::workspace::hooks::truncate_for_log(&format!("a\nb{}", "y".repeat(5000)));
    assert!(line.chars().count() <= baton::workspace::hooks::LOG_OUTPUT_CHARS + 1);
    assert!(!line.contains('\n'));
}

/// `hooks.timeout_ms` is not bounded by the config: a huge value is a day-long deadline, never an
/// `Instant` overflow panic in the hook runner.
#[test]
fn a_huge_hook_timeout_runs_the_hook_without_overflowing() {
    let dir = TempDir::new("huge-timeout");
    let out = run_hook(&LocalHost, "echo ok", &dir, &HookEnv::default(), u64::MAX).unwrap();
    assert_eq!(out.stdout.trim(), "ok");
}

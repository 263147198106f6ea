//! `baton check` against the fake GitHub: a healthy board and a misspelled state.

use crate::support;
use crate::support::tempdir::TempDir;

use std::path::{Path, PathBuf};

use baton::check::run_check_with_env;
use support::fake_github::{BoardFixture, FakeGithub, Fault, IssueFixture, FAKE_TOKEN};
use support::stand_ins::TestEnv;

fn acme() -> FakeGithub {
    FakeGithub::from_fixture("fixtures/boards/acme.json")
}

/// Copy `fixtures/workflows/check-acme.md` into a fresh temp dir with the fake's endpoint and
/// `edit` applied.
fn workflow(fake: &FakeGithub, name: &str, edit: impl Fn(String) -> String) -> (TempDir, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/workflows/check-acme.md");
    let text = std::fs::read_to_string(src).unwrap();
    let text = text.replace("http://127.0.0.1:9/graphql", &fake.endpoint());
    let dir = TempDir::new(name);
    let path = dir.join("WORKFLOW.md");
    std::fs::write(&path, edit(text)).unwrap();
    (dir, path)
}

/// `baton check` of `path` with the fake's token in `$BATON_FAKE_GITHUB_TOKEN`: exit code, output.
fn run(path: &Path) -> (i32, String) {
    let env = TestEnv::none()
        .with_var("BATON_FAKE_GITHUB_TOKEN", FAKE_TOKEN)
        .with_home(std::env::temp_dir());
    let mut out = Vec::new();
    let code = run_check_with_env(path, &env, &mut out);
    (code, String::from_utf8(out).unwrap())
}

/// `baton check` of the workflow with `from` replaced by `to` fails (exit 1) and prints `needle`.
fn assert_problem(fake: &FakeGithub, name: &str, (from, to): (&str, &str), needle: &str) {
    let (code, out) = run(&workflow(fake, name, |t| t.replace(from, to)).1);
    assert_eq!(code, 1);
    assert_has(&out, &[needle]);
}

/// Assert that the output `out` contains every one of `needles`.
fn assert_has(out: &str, needles: &[&str]) {
    for needle in needles {
        assert!(out.contains(needle), "{out}");
    }
}

/// An issue of `acme/app` with `labels`, blocked by `blockers` (`owner/repo#n`).
fn labelled(number: u64, labels: Vec<String>, blockers: &[String]) -> IssueFixture {
    let mut i = IssueFixture::new("acme/app", number, &format!("issue {number}"));
    i.labels = labels;
    i.blocked_by = blockers.to_vec();
    i
}

/// Issue 24: `labels(first: 50)` and `blockedBy(first: 20)` were read without `pageInfo`, so an
/// excluded 55th label, a required 55th label and an open 21st blocker were never seen. The fake
/// now serves the first page with `pageInfo` as GitHub does; Baton fails closed and says why.
#[test]
fn labels_and_blockers_past_the_first_page_fail_closed() {
    let filler = |n: usize| (0..n).map(|i| format!("l{i}")).collect::<Vec<_>>();
    let mut board = BoardFixture::empty("acme", 7);
    let mut excluded_55th = vec!["baton".to_string()];
    excluded_55th.extend(filler(53));
    excluded_55th.push("wontfix".into());
    board.push_issue(labelled(1, excluded_55th, &[]), Some("Todo"));
    let mut required_55th = filler(54);
    required_55th.push("baton".into());
    board.push_issue(labelled(2, required_55th, &[]), Some("Todo"));
    let blockers: Vec<String> = (100..121).map(|n| format!("acme/lib#{n}")).collect();
    for k in 0..21 {
        let mut i = IssueFixture::new("acme/lib", 100 + k, "blocker");
        i.state = if k < 20 { "CLOSED" } else { "OPEN" }.into();
        board.extra_issues.push(i);
    }
    board.push_issue(labelled(3, vec!["baton".into()], &blockers), Some("Todo"));
    board.push_issue(
        labelled(4, vec!["baton".into()], &blockers[..20]),
        Some("Todo"),
    );
    let fake = FakeGithub::start(board);
    let (_, out) = run(&workflow(&fake, "truncated", |t| t).1);
    assert_has(
        &out,
        &[
            "dispatch order (1 of 4 active issues):",
            "  1. acme__app-4  [Todo]",
            "acme__app-1  [Todo]  issue_fields_truncated: labels not read in full",
            "acme__app-2  [Todo]  missing required label baton; issue_fields_truncated: labels",
            "acme__app-3  [Todo]  issue_fields_truncated: blocked_by not read in full",
        ],
    );
}

/// Issue 21: a plain `http://` endpoint off loopback sends the token in cleartext; `baton check`
/// says so (a loopback one, like the fake's, does not).
#[test]
fn cleartext_endpoint_off_loopback_is_warned_about() {
    let fake = acme();
    let (_, out) = run(&workflow(&fake, "endpoint-ok", |t| t).1);
    assert!(!out.contains("plain http://"), "{out}");
    let (_, out) = run(&workflow(&fake, "cleartext", |t| {
        t.replace(&fake.endpoint(), "http://0.0.0.0:9/graphql")
    })
    .1);
    assert_has(
        &out,
        &[
            "warn  tracker.endpoint http://0.0.0.0:9/graphql is plain http://",
            "cleartext",
        ],
    );
}

#[test]
fn healthy_board_prints_plan_in_dispatch_order_with_reasons() {
    let fake = acme();
    let (code, out) = run(&workflow(&fake, "healthy", |t| t).1);
    println!("{out}");
    assert_eq!(code, 0, "{out}");
    assert_has(
        &out,
        &[
            "ok    project: acme #7 \"Roadmap\" (PVT_",
            "status field \"Status\": \"Todo\" | \"In Progress\" | \"In Review\" | \"Done\"",
            "ok    active states: \"Todo\", \"In Progress\"",
            "rate limit: ",
            "skipped 1 draft, 1 pull request, 1 redacted",
            // Issue 25, item 3: the descriptor limit and the agents it allows.
            "file descriptors: soft limit ",
            "agents with 128 kept free",
        ],
    );
    // Dispatch order: priority (P0=1, P1=2), then null priority by created_at.
    let plan = [
        "dispatch order (4 of 9 active issues):",
        "  1. acme__app-2  [Todo]  priority 1  \"Crash on empty config\"",
        "  2. acme__app-1  [Todo]  priority 2  \"Add retry to uploads\"",
        "  3. acme__lib-3  [In Progress]  priority -  \"Port parser to streaming\"",
        "  4. acme__app-6  [Todo]  priority -  \"Docs for retry\"",
        "not dispatching (5):",
    ];
    let joined = plan.join("\n");
    assert!(out.contains(&joined), "expected\n{joined}\nin\n{out}");
    for reason in [
        "acme__app-4  [Todo]  blocked by acme__lib-3 (In Progress)",
        "acme__app-7  [Todo]  closed on GitHub",
        "acme__app-8  [Todo]  has excluded label wontfix",
        "acme__website-9  [Todo]  repository acme/website is not in tracker.repos",
        "acme__app-10  [Todo]  missing required label baton",
    ] {
        assert!(out.contains(reason), "missing {reason:?} in\n{out}");
    }
    assert!(out.ends_with("result: healthy (0 problems)\n"), "{out}");
    assert!(!out.contains(FAKE_TOKEN));
}

#[test]
fn an_issue_with_a_blank_title_is_not_ready() {
    // The scheduler never dispatches an issue without a title, so `check` must not list it as ready.
    let fake = acme();
    let mut blank = IssueFixture::new("acme/app", 11, "  ");
    blank.labels = vec!["baton".into()];
    fake.add_issue(blank, Some("Todo"));
    let (code, out) = run(&workflow(&fake, "blank-title", |t| t).1);
    assert_eq!(code, 0, "{out}");
    assert_has(
        &out,
        &[
            "dispatch order (4 of 10 active issues):",
            "not dispatching (6):",
            "  acme__app-11  [Todo]  required field title is blank\n",
        ],
    );
}

#[test]
fn misspelled_state_is_flagged_with_a_hint_and_exit_1() {
    let fake = acme();
    let (_dir, path) = workflow(&fake, "typo", |t| {
        t.replace(
            "active_states: [Todo, In Progress]",
            "active_states: [todo, In Progess]",
        )
    });
    let (code, out) = run(&path);
    println!("{out}");
    assert_eq!(code, 1, "{out}");
    assert_has(
        &out,
        &[
            "note  active state \"todo\" matches option \"Todo\" ignoring case",
            "FAIL  tracker.active_states: \"In Progess\" matches no option of the status field (did you mean \"In Progress\"?)",
        ],
    );
    assert!(out.ends_with("result: 1 problem\n"), "{out}");
}

#[test]
fn unreachable_project_and_bad_token_fail_cleanly() {
    let fake = acme();
    assert_problem(
        &fake,
        "nf",
        ("project_number: 7", "project_number: 8"),
        "FAIL  project: missing_tracker_project: tracker.project_number: project #8",
    );

    fake.push_fault(Fault::Unauthorized);
    let (code, out) = run(&workflow(&fake, "auth", |t| t).1);
    assert_eq!(code, 1);
    assert_has(&out, &["github_auth"]);
    assert!(!out.contains(FAKE_TOKEN));
}

#[test]
fn missing_workflow_and_missing_config_are_problems() {
    let (code, out) = run(Path::new("/nonexistent/WORKFLOW.md"));
    assert_eq!(code, 1);
    assert_has(&out, &["FAIL  workflow: missing_workflow_file"]);

    let fake = acme();
    assert_problem(
        &fake,
        "noowner",
        ("  owner: acme\n", ""),
        "FAIL  missing_tracker_project: tracker.owner is required",
    );
    assert_eq!(fake.request_count(), 0);
}

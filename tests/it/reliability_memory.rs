//! Issue 12, failures 6 and 7 through the real daemon: Baton's memory stays bounded under the
//! fat-page attack (board pages of 8 MB with fresh cursors, never ending) and under three agents
//! that each print a 100 MB line. Baton's RSS is sampled every 20 ms from `/proc`.

use crate::support;
use crate::support::tempdir::TempDir;

use crate::support::daemon_proc;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use daemon_proc::DaemonProc;
use support::fake_github::{BoardFixture, FakeGithub, IssueFixture, FAKE_TOKEN};

/// The issue's figure: Baton's RSS stays at or under 100 MB under both attacks.
const RSS_LIMIT_MIB: u64 = 100;

/// A fresh temporary directory with a `home` directory inside (the daemon's `HOME`).
fn tempdir(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    std::fs::create_dir_all(d.join("home")).unwrap();
    d
}

fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Sample `pid`'s RSS every 20 ms until `done` (or `limit`); the peak in MiB.
fn peak_rss_until(pid: u32, limit: Duration, mut done: impl FnMut() -> bool) -> u64 {
    let start = Instant::now();
    let mut peak = 0;
    while !done() && start.elapsed() < limit {
        peak = peak.max(rss_mib(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    peak.max(rss_mib(pid))
}

fn workflow(dir: &Path, github: &FakeGithub, agent: &Path) -> PathBuf {
    let p = dir.join("WORKFLOW.md");
    let text = format!(
        "---\ntracker:\n  kind: github_projects\n  endpoint: {}\n  token: $MEM_TOKEN\n  owner: acme\n  \
         project_number: 7\n  page_size: 100\n  timeout_ms: 10000\npolling:\n  interval_ms: 500\n\
         workspace:\n  root: {}\nagent:\n  kind: claude_code\n  max_concurrent_agents: 3\n  max_turns: 1\n\
         claude_code:\n  command: \"'{}'\"\n---\nWork.\n",
        github.endpoint(),
        dir.join("ws").display(),
        agent.display(),
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// One turn: init, a 100 MB line, the result; then a line in `$MEM_DIR/done.log`.
const LONG_LINE_AGENT: &str = r#"#!/usr/bin/env bash
echo '{"type":"system","subtype":"init","session_id":"mem-1","model":"fake","tools":[]}'
head -c 100000000 /dev/zero | tr '\0' a
echo
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"mem-1","total_cost_usd":0.01,"num_turns":1,"usage":{"input_tokens":1,"output_tokens":1}}'
echo done >> "$MEM_DIR/done.log"
sleep 30
"#;

fn agent(dir: &Path) -> PathBuf {
    let p = dir.join("long-line-agent");
    std::fs::write(&p, LONG_LINE_AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn start(dir: &Path, wf: &Path) -> DaemonProc {
    DaemonProc::start(
        wf,
        &dir.join("home"),
        &[
            ("MEM_TOKEN", FAKE_TOKEN.to_string()),
            ("MEM_DIR", dir.display().to_string()),
        ],
    )
}

#[test]
fn three_agents_printing_100_mb_lines_keep_baton_under_100_mb() {
    let dir = tempdir("lines");
    let mut board = BoardFixture::empty("acme", 7);
    for n in 1..=3 {
        board.push_issue(IssueFixture::new("acme/app", n, "long line"), Some("Todo"));
    }
    let github = FakeGithub::start(board);
    let wf = workflow(&dir, &github, &agent(&dir));
    let mut d = start(&dir, &wf);
    let done = dir.join("done.log");
    let peak = peak_rss_until(d.pid(), Duration::from_secs(90), || {
        std::fs::read_to_string(&done).is_ok_and(|s| s.lines().count() >= 3)
    });
    let finished = std::fs::read_to_string(&done).map_or(0, |s| s.lines().count());
    assert_eq!(
        finished,
        3,
        "all three agents printed their line; log:\n{}",
        d.log()
    );
    assert!(
        peak <= RSS_LIMIT_MIB,
        "peak RSS {peak} MiB > {RSS_LIMIT_MIB} MiB"
    );
    eprintln!("three 100 MB lines: peak RSS {peak} MiB");
    let status = d.stop_with(libc::SIGTERM, Duration::from_secs(60));
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn endless_fat_board_pages_keep_baton_under_100_mb() {
    let dir = tempdir("pages");
    let github = FakeGithub::start(BoardFixture::empty("acme", 7));
    // 100 issues of 80 KB per page: 8 MB pages with fresh cursors, never ending.
    github.set_endless_pages(Some((100, 80 * 1024)));
    let wf = workflow(&dir, &github, &agent(&dir));
    let mut d = start(&dir, &wf);
    let peak = peak_rss_until(d.pid(), Duration::from_secs(60), || {
        d.log().matches("github_board_too_large").count() >= 2
    });
    assert!(
        d.log().matches("github_board_too_large").count() >= 2,
        "each poll stops at a bound with the typed error; log:\n{}",
        d.log()
    );
    assert!(
        peak <= RSS_LIMIT_MIB,
        "peak RSS {peak} MiB > {RSS_LIMIT_MIB} MiB"
    );
    eprintln!(
        "endless 8 MB pages: peak RSS {peak} MiB after {} requests",
        github.request_count()
    );
    let status = d.stop_with(libc::SIGTERM, Duration::from_secs(60));
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

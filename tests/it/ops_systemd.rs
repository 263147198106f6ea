//! contrib/systemd/baton.service: every setting the operations issue asks for, a comment on each
//! hardening line, an ExecStart Baton's CLI accepts, `systemd-analyze verify`, and the exposure
//! score recorded in contrib/systemd/SECURITY-SCORE.txt.
//!
//! systemd-analyze: `$BATON_SYSTEMD_ANALYZE` (set by .ci/setup-systemd.sh), else `systemd-analyze`
//! on PATH. Without it those tests skip with a reason, except under `CI=true`, where they fail.

use crate::support::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::process::Command;

use baton::cli::{parse, Command as Cli};

const UNIT: &str = include_str!("../../contrib/systemd/baton.service");
const SCORE: &str = include_str!("../../contrib/systemd/SECURITY-SCORE.txt");
const SANDBOX_DROP_IN: &str = include_str!("../../contrib/systemd/baton.service.d/sandbox.conf");

/// `(key, value)` of every setting, in order, with whether a comment line precedes it.
fn settings() -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let mut commented = false;
    for line in UNIT.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            commented = true;
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.push((k.to_string(), v.to_string(), commented));
        }
        commented = false;
    }
    out
}

fn value(key: &str) -> String {
    let all: Vec<String> = settings()
        .into_iter()
        .filter(|(k, _, _)| k == key)
        .map(|(_, v, _)| v)
        .collect();
    assert_eq!(all.len(), 1, "{key} must be set exactly once: {all:?}");
    all[0].clone()
}

#[test]
fn unit_sets_what_the_issue_lists_and_comments_each_hardening_line() {
    let required = [
        ("Type", "notify"),
        ("KillMode", "mixed"),
        ("Restart", "on-failure"),
        ("StateDirectory", "baton"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictNamespaces", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("SystemCallArchitectures", "native"),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("UMask", "0077"),
        ("LimitNOFILE", "65536"),
        ("TasksMax", "32768"),
    ];
    for (key, want) in required {
        assert_eq!(value(key), want, "{key}");
    }
    for key in ["WatchdogSec", "TimeoutStopSec", "EnvironmentFile", "User"] {
        assert!(!value(key).is_empty(), "{key}");
    }
    let rw = value("ReadWritePaths");
    for path in ["/srv/baton/workspaces", "/var/lib/baton"] {
        assert!(
            rw.split(' ').any(|p| p == path),
            "ReadWritePaths lacks {path}"
        );
    }
    // Every line from NoNewPrivileges= on, and the supervision lines, carry their own comment.
    let all = settings();
    let first = all
        .iter()
        .position(|(k, _, _)| k == "NoNewPrivileges")
        .unwrap();
    let hardening = all[first..].iter().filter(|(k, _, _)| k != "WantedBy");
    let supervision = all.iter().filter(|(k, _, _)| {
        [
            "Type",
            "WatchdogSec",
            "KillMode",
            "TimeoutStopSec",
            "Restart",
            "EnvironmentFile",
            "LimitNOFILE",
            "TasksMax",
        ]
        .contains(&k.as_str())
    });
    for (key, _, commented) in hardening.chain(supervision) {
        assert!(commented, "{key}= has no comment line above it");
    }
}

#[test]
fn exec_start_is_a_command_line_baton_accepts() {
    let exec = value("ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/baton"));
    let Cli::Run(args) = parse(words).expect("ExecStart arguments parse") else {
        panic!("ExecStart does not run the daemon: {exec}");
    };
    assert_eq!(args.workflow, PathBuf::from("/etc/baton/WORKFLOW.md"));
    assert_eq!(args.port, Some(8787));
    // Agents must not be able to notify systemd in Baton's name.
    assert_eq!(value("NotifyAccess"), "main");
}

/// systemd-analyze (the tests calling this are ignored unless run with `--include-ignored`).
fn analyze_or_skip(_test: &str) -> Option<PathBuf> {
    let tool = std::env::var_os("BATON_SYSTEMD_ANALYZE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            let found = Command::new("systemd-analyze").arg("--version").output();
            found
                .is_ok_and(|o| o.status.success())
                .then(|| PathBuf::from("systemd-analyze"))
        });
    Some(tool.unwrap_or_else(|| {
        crate::support::tool::missing(
            "no systemd-analyze (BATON_SYSTEMD_ANALYZE)",
            ".ci/setup-systemd.sh",
        )
    }))
}

/// A copy of the unit in a fresh directory, with ExecStart pointing at the built binary (verify
/// checks that the executable exists); everything else unchanged.
fn unit_copy(tag: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag);
    let unit = UNIT.replace(
        "ExecStart=/usr/local/bin/baton ",
        &format!("ExecStart={} ", env!("CARGO_BIN_EXE_baton")),
    );
    assert_ne!(unit, UNIT, "ExecStart was not rewritten");
    let path = dir.join("baton.service");
    std::fs::write(&path, unit).unwrap();
    (dir, path)
}

fn run(tool: &Path, args: &[&str], unit: &Path) -> (bool, String, String) {
    let out = Command::new(tool)
        .args(args)
        .arg(unit)
        .env("SYSTEMD_LOG_COLOR", "0")
        .env("SYSTEMD_PAGER", "")
        .output()
        .expect("run systemd-analyze");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs systemd-analyze (BATON_SYSTEMD_ANALYZE, .ci/setup-systemd.sh)"]
fn unit_passes_systemd_analyze_verify() {
    let Some(tool) = analyze_or_skip("unit_passes_systemd_analyze_verify") else {
        return;
    };
    let (_dir, unit) = unit_copy("verify");
    let (ok, stdout, stderr) = run(&tool, &["verify"], &unit);
    assert!(ok, "verify failed:\n{stdout}\n{stderr}");
    // Unknown keys and bad values are warnings with exit code 0: any line about our unit fails.
    let complaints: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .filter(|l| l.contains("baton.service"))
        .collect();
    assert!(
        complaints.is_empty(),
        "verify complained:\n{}",
        complaints.join("\n")
    );
}

/// The "Overall exposure level" line of `systemd-analyze security` output.
fn overall(text: &str) -> Option<&str> {
    text.lines()
        .find(|l| l.contains("Overall exposure level"))
        .map(str::trim)
}

#[test]
#[ignore = "needs systemd-analyze (BATON_SYSTEMD_ANALYZE, .ci/setup-systemd.sh)"]
fn recorded_exposure_score_is_current() {
    let Some(tool) = analyze_or_skip("recorded_exposure_score_is_current") else {
        return;
    };
    let recorded = overall(SCORE).expect("SECURITY-SCORE.txt has an overall line");
    // Weights differ between systemd releases: compare only against the release recorded.
    let version = Command::new(&tool)
        .arg("--version")
        .output()
        .expect("--version");
    let version = String::from_utf8_lossy(&version.stdout);
    let major = |line: &str| line.split_whitespace().nth(1).map(str::to_string);
    let ours = version.lines().next().and_then(major);
    let theirs = SCORE
        .lines()
        .find_map(|l| l.strip_prefix("# systemd "))
        .and_then(|l| major(&format!("systemd {l}")));
    if ours.is_none() || ours != theirs {
        eprintln!(
            "SKIP recorded_exposure_score_is_current: systemd {ours:?} here, {theirs:?} recorded"
        );
        return;
    }
    let (_dir, unit) = unit_copy("security");
    let (ok, stdout, stderr) = run(&tool, &["security", "--offline=true"], &unit);
    if !ok && stderr.contains("offline") {
        eprintln!("SKIP recorded_exposure_score_is_current: this systemd-analyze has no --offline");
        return;
    }
    assert!(ok, "security failed:\n{stdout}\n{stderr}");
    assert_eq!(
        overall(&stdout),
        Some(recorded),
        "regenerate contrib/systemd/SECURITY-SCORE.txt (see contrib/systemd/README.md)"
    );
}

/// `(key, value)` of the sandbox drop-in's settings.
fn drop_in_settings() -> Vec<(&'static str, &'static str)> {
    SANDBOX_DROP_IN
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .collect()
}

#[test]
fn sandbox_drop_in_allows_exactly_the_namespaces_bwrap_needs() {
    assert_eq!(
        drop_in_settings(),
        [
            ("RestrictNamespaces", "user mnt pid ipc uts cgroup net"),
            ("ProtectKernelTunables", "no"),
            ("ProtectKernelLogs", "no"),
            (
                "RestrictAddressFamilies",
                "AF_UNIX AF_INET AF_INET6 AF_NETLINK"
            ),
        ]
    );
    // Each one overrides a line of the unit, which it loosens and nothing more.
    for (key, _) in drop_in_settings() {
        assert!(!value(key).is_empty(), "{key} is not set by baton.service");
    }
    assert_eq!(value("RestrictNamespaces"), "yes");
    assert!(SANDBOX_DROP_IN.contains("[Service]"));
}

#[test]
#[ignore = "needs systemd-analyze (BATON_SYSTEMD_ANALYZE, .ci/setup-systemd.sh)"]
fn unit_with_the_sandbox_drop_in_passes_systemd_analyze_verify() {
    let Some(tool) = analyze_or_skip("unit_with_the_sandbox_drop_in_passes_systemd_analyze_verify")
    else {
        return;
    };
    let (dir, unit) = unit_copy("verify-sandbox");
    let drop_in = dir.join("baton.service.d/sandbox.conf");
    std::fs::create_dir_all(drop_in.parent().unwrap()).unwrap();
    // First prove that verify reads the drop-in: a bad line in it is reported.
    std::fs::write(&drop_in, format!("{SANDBOX_DROP_IN}NotAKey=1\n")).unwrap();
    let (_, stdout, stderr) = run(&tool, &["verify"], &unit);
    assert!(
        stderr.contains("sandbox.conf") && stderr.contains("NotAKey"),
        "the drop-in was not read:\n{stdout}\n{stderr}"
    );
    std::fs::write(&drop_in, SANDBOX_DROP_IN).unwrap();
    let (ok, stdout, stderr) = run(&tool, &["verify"], &unit);
    assert!(ok, "verify failed:\n{stdout}\n{stderr}");
    let complaints: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .filter(|l| l.contains("baton.service"))
        .collect();
    assert!(
        complaints.is_empty(),
        "verify complained:\n{}",
        complaints.join("\n")
    );
}

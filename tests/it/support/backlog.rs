//! The real `backlog` CLI (Backlog.md, `BATON_BACKLOG_BIN`) for the `backlog_md` tracker tests:
//! a fresh git project initialized by the CLI, driven offline with a private HOME and no stdin.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The CLI for one project directory.
pub struct BacklogCli {
    /// The `backlog` binary.
    pub bin: PathBuf,
    /// The project (the board is `backlog/` inside).
    pub proj: PathBuf,
    /// The CLI's private HOME.
    pub home: PathBuf,
    /// Run the CLI in a network namespace of its own (`unshare -n`).
    netns: bool,
}

impl BacklogCli {
    /// `git init` the project `root/proj` (HOME `root/home`) and `backlog init` it with defaults,
    /// no integration and no remote. `netns`: run the CLI without a network (`unshare -n`) when
    /// that is available; proxies always point at a closed port.
    pub fn init(root: &Path, netns: bool) -> BacklogCli {
        let bin = super::tool::required("BATON_BACKLOG_BIN", ".ci/setup-backlog.sh");
        let (proj, home) = (root.join("proj"), root.join("home"));
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let git = Command::new("git")
            .args(["init", "-q", "."])
            .current_dir(&proj)
            .env("HOME", &home)
            .status()
            .expect("git");
        assert!(git.success());
        let netns = netns
            && Command::new("unshare")
                .args(["-n", "true"])
                .status()
                .is_ok_and(|s| s.success());
        let cli = BacklogCli {
            bin,
            proj,
            home,
            netns,
        };
        cli.run(&[
            "init",
            "Demo",
            "--defaults",
            "--integration-mode",
            "none",
            "--check-branches",
            "false",
            "--include-remote",
            "false",
        ]);
        cli
    }

    /// Run `backlog args` in the project; it must succeed. Its stdout and stderr.
    pub fn run(&self, args: &[&str]) -> String {
        let mut cmd = if self.netns {
            let mut c = Command::new("unshare");
            c.arg("-n").arg(&self.bin);
            c
        } else {
            Command::new(&self.bin)
        };
        cmd.args(args)
            .current_dir(&self.proj)
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("NO_COLOR", "1")
            .env("CI", "true")
            .stdin(Stdio::null());
        for var in [
            "http_proxy",
            "https_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
        ] {
            cmd.env(var, "http://127.0.0.1:9");
        }
        let out = cmd.output().expect("run backlog");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "backlog {args:?} failed: {text}");
        text
    }
}

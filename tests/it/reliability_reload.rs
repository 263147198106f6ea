//! Issue 12, failures 12 and 13: a reload never blocks the main loop. Here the reload's token
//! fallback (`gh auth token`) hangs; the loop keeps answering snapshots, and the new config is
//! applied once the token arrives.

use crate::support::tempdir::TempDir;
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver};

use crate::support::stand_ins::run;
use baton::runtime::clock::SystemClock;
use baton::status::ControlRequest;
use baton::workflow::config::ConfigEnv;

use crate::support::stand_ins::{daemon_options, spawn_daemon, StubTracker};

/// `gh auth token` reports on `entered`, then hangs until `release` gets a message.
struct HangingGh {
    entered: crossbeam_channel::Sender<()>,
    release: Receiver<()>,
}

impl ConfigEnv for HangingGh {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
    fn home(&self) -> Option<PathBuf> {
        None
    }
    fn gh_auth_token(&self) -> Option<String> {
        let _ = self.entered.try_send(());
        let _ = self.release.recv_timeout(Duration::from_secs(60));
        Some("from-gh".into())
    }
}

fn text(dir: &std::path::Path, token: &str, interval: u32) -> String {
    format!(
        "---\ntracker:\n  kind: github_projects\n{token}  owner: acme\n  project_number: 1\n\
         polling:\n  interval_ms: {interval}\nworkspace:\n  root: {}\nagent:\n  kind: claude_code\n---\nWork.\n",
        dir.join("ws").display()
    )
}

/// True when the loop answers a snapshot request within 2 s.
fn answers(control: &crossbeam_channel::Sender<ControlRequest>) -> bool {
    let (reply, rx) = bounded(1);
    control.send(ControlRequest::State(reply)).is_ok()
        && rx.recv_timeout(Duration::from_secs(2)).is_ok()
}

#[test]
fn a_hanging_token_lookup_during_reload_does_not_block_the_loop() {
    let dir = TempDir::new("rel-reload");
    let wf_path = dir.join("WORKFLOW.md");
    fs::write(&wf_path, text(&dir, "  token: literal\n", 30_000)).unwrap();
    let (release_tx, release) = bounded(1);
    let (entered_tx, entered) = bounded(1);
    let env: Arc<dyn ConfigEnv + Send + Sync> = Arc::new(HangingGh {
        entered: entered_tx,
        release,
    });
    let clock = Arc::new(SystemClock::default());
    let (opts, inputs) = daemon_options(&wf_path, env, StubTracker::empty(), clock);
    let exited = spawn_daemon(move || run(opts));
    // No token in the file: the reload falls back to `gh auth token`, which hangs.
    fs::write(&wf_path, text(&dir, "", 12_345)).unwrap();
    inputs.reload.send(()).unwrap();
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the reload reaches the token lookup");
    for _ in 0..3 {
        assert!(
            answers(&inputs.control),
            "the loop answers snapshots while the reload hangs"
        );
    }
    release_tx.send(()).unwrap();
    inputs.shutdown.send(()).unwrap();
    assert_eq!(
        exited.recv_timeout(Duration::from_secs(10)).unwrap(),
        Ok(())
    );
}

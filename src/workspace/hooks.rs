//! Workspace hooks (spec §9.4, baton §5.3.4): a trusted shell script run with `sh -lc` in the
//! workspace, in its own process group, killed as a group when `hooks.timeout_ms` passes. Output
//! is captured (bounded) for the log; issue data only ever travels in environment variables, never
//! through the shell parser.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError};

use crate::model::Issue;

/// Bytes of each output stream kept (the rest is read and discarded).
pub const MAX_CAPTURE_BYTES: usize = 64 * 1024;
/// Characters of hook output shown in one log line.
pub const LOG_OUTPUT_CHARS: usize = 2000;

/// Which hook (spec §5.3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    /// After a workspace directory was created (fatal).
    AfterCreate,
    /// Before each attempt (fatal).
    BeforeRun,
    /// After each attempt (logged, ignored).
    AfterRun,
    /// Before a workspace is removed (logged, ignored).
    BeforeRemove,
}

impl HookKind {
    /// Config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::AfterCreate => "after_create",
            HookKind::BeforeRun => "before_run",
            HookKind::AfterRun => "after_run",
            HookKind::BeforeRemove => "before_remove",
        }
    }
}

/// The environment a hook sees about its issue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HookEnv {
    /// `BATON_ISSUE_ID`.
    pub issue_id: String,
    /// `BATON_ISSUE_IDENTIFIER`.
    pub issue_identifier: String,
    /// `BATON_ISSUE_NUMBER`.
    pub issue_number: String,
    /// `BATON_ISSUE_REPO`.
    pub issue_repo: String,
    /// `BATON_ISSUE_URL`.
    pub issue_url: String,
    /// `BATON_ISSUE_STATUS`.
    pub issue_status: String,
    /// `BATON_WORKSPACE`.
    pub workspace: PathBuf,
}

impl HookEnv {
    /// Environment for `issue` in `workspace`.
    pub fn for_issue(issue: &Issue, workspace: &Path) -> Self {
        HookEnv {
            issue_id: issue.id.clone(),
            issue_identifier: issue.identifier.clone(),
            issue_number: issue.number.to_string(),
            issue_repo: issue.repository.clone(),
            issue_url: issue.url.clone().unwrap_or_default(),
            issue_status: issue.state.clone(),
            workspace: workspace.to_path_buf(),
        }
    }

    /// The variables as (name, value) pairs.
    pub fn vars(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        vec![
            ("BATON_ISSUE_ID", self.issue_id.clone().into()),
            (
                "BATON_ISSUE_IDENTIFIER",
                self.issue_identifier.clone().into(),
            ),
            ("BATON_ISSUE_NUMBER", self.issue_number.clone().into()),
            ("BATON_ISSUE_REPO", self.issue_repo.clone().into()),
            ("BATON_ISSUE_URL", self.issue_url.clone().into()),
            ("BATON_ISSUE_STATUS", self.issue_status.clone().into()),
            ("BATON_WORKSPACE", self.workspace.clone().into_os_string()),
        ]
    }
}

/// What a finished hook produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOutput {
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Captured stdout (bounded, lossy UTF-8).
    pub stdout: String,
    /// Captured stderr (bounded, lossy UTF-8).
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

/// Why a hook failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookError {
    /// `sh` could not be started.
    Spawn(String),
    /// It ran longer than `hooks.timeout_ms`; its process group was killed.
    Timeout {
        /// The configured bound.
        timeout_ms: u64,
        /// Output captured before the kill.
        output: HookOutput,
    },
    /// It exited non-zero (or by a signal).
    Failed(HookOutput),
}

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookError::Spawn(e) => write!(f, "could not start sh: {e}"),
            HookError::Timeout { timeout_ms, .. } => {
                write!(f, "timed out after {timeout_ms} ms (process group killed)")
            }
            HookError::Failed(o) => match o.code {
                Some(c) => write!(f, "exited with status {c}"),
                None => write!(f, "was killed by a signal"),
            },
        }
    }
}

/// Shorten hook output for one log line: last `LOG_OUTPUT_CHARS` chars, newlines escaped.
pub fn truncate_for_log(s: &str) -> String {
    let s = s.trim();
    let count = s.chars().count();
    let tail: String = if count > LOG_OUTPUT_CHARS {
        let skip = count - LOG_OUTPUT_CHARS;
        format!("…{}", s.chars().skip(skip).collect::<String>())
    } else {
        s.to_string()
    };
    tail.replace('\n', "\\n").replace('\r', "\\r")
}

fn read_bounded(mut r: impl Read) -> String {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_CAPTURE_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// Run `script` with `sh -lc` in `cwd` with the hook environment; kill its whole process group
/// after `timeout_ms`. Never leaves a process of the group behind on timeout.
pub fn run_hook(
    script: &str,
    cwd: &Path,
    env: &HookEnv,
    timeout_ms: u64,
) -> Result<HookOutput, HookError> {
    let started = Instant::now();
    let mut cmd = Command::new("sh");
    cmd.arg("-lc")
        .arg(script)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in env.vars() {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| HookError::Spawn(e.to_string()))?;
    let pid = child.id() as i32;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (out_tx, out_rx) = bounded::<(u8, String)>(2);
    if let Some(s) = stdout {
        let tx = out_tx.clone();
        thread::spawn(move || {
            let _ = tx.send((1, read_bounded(s)));
        });
    }
    if let Some(s) = stderr {
        let tx = out_tx.clone();
        thread::spawn(move || {
            let _ = tx.send((2, read_bounded(s)));
        });
    }
    drop(out_tx);
    let (exit_tx, exit_rx) = bounded(1);
    thread::spawn(move || {
        let _ = exit_tx.send(child.wait());
    });
    let timeout = Duration::from_millis(timeout_ms);
    let status = match exit_rx.recv_timeout(timeout) {
        Ok(s) => {
            // The shell is gone; kill stragglers it left in its group so pipes close.
            kill_group(pid);
            Some(s)
        }
        Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
            kill_group(pid);
            let _ = exit_rx.recv_timeout(Duration::from_secs(5));
            None
        }
    };
    // Collect output; bounded wait in case something escaped the group and holds a pipe.
    let (mut out, mut err) = (String::new(), String::new());
    let deadline = Instant::now() + Duration::from_secs(2);
    while let Ok((which, text)) =
        out_rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
    {
        if which == 1 {
            out = text;
        } else {
            err = text;
        }
    }
    let output = |code| HookOutput {
        code,
        stdout: out.clone(),
        stderr: err.clone(),
        elapsed: started.elapsed(),
    };
    match status {
        None => Err(HookError::Timeout {
            timeout_ms,
            output: output(None),
        }),
        Some(Err(e)) => Err(HookError::Spawn(format!("wait failed: {e}"))),
        Some(Ok(st)) if st.success() => Ok(output(Some(0))),
        Some(Ok(st)) => Err(HookError::Failed(output(st.code()))),
    }
}

fn kill_group(pgid: i32) {
    if pgid > 0 {
        // SAFETY: plain syscall; pgid is the hook's own process group (process_group(0)).
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}

/// Run a hook if configured and log start/failure/timeout with issue context. Returns `Err` with
/// a one-line reason when it failed (callers decide whether that is fatal).
pub fn run_configured_hook(
    kind: HookKind,
    script: Option<&str>,
    cwd: &Path,
    env: &HookEnv,
    timeout_ms: u64,
) -> Result<(), String> {
    let Some(script) = script else {
        return Ok(());
    };
    log::info!(
        "hook starting hook={} issue_id={} issue_identifier={} workspace={}",
        kind.as_str(),
        env.issue_id,
        env.issue_identifier,
        cwd.display()
    );
    match run_hook(script, cwd, env, timeout_ms) {
        Ok(o) => {
            log::debug!(
                "hook finished hook={} issue_identifier={} elapsed_ms={} stdout={:?}",
                kind.as_str(),
                env.issue_identifier,
                o.elapsed.as_millis(),
                truncate_for_log(&o.stdout)
            );
            Ok(())
        }
        Err(e) => {
            let (out, err) = match &e {
                HookError::Failed(o) | HookError::Timeout { output: o, .. } => {
                    (truncate_for_log(&o.stdout), truncate_for_log(&o.stderr))
                }
                HookError::Spawn(_) => (String::new(), String::new()),
            };
            log::warn!(
                "hook failed hook={} issue_id={} issue_identifier={} error={:?} stdout={:?} stderr={:?}",
                kind.as_str(),
                env.issue_id,
                env.issue_identifier,
                e.to_string(),
                out,
                err
            );
            Err(format!("{} hook {e}", kind.as_str()))
        }
    }
}

//! Running a hook to completion on a supervised process: bounded output capture, a timeout that
//! kills the whole group, and the outcome. Host-independent: it only needs a [`Process`].

use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select};

use super::{Process, StdoutItem};

/// Bytes of stdout kept (the head; the rest is read and discarded) and of stderr (the tail).
pub const MAX_CAPTURE_BYTES: usize = 64 * 1024;
/// After a SIGKILL on timeout, how long to wait for the reap.
const REAP_WAIT: Duration = Duration::from_secs(5);
/// After the exit, how long to wait for the output pipes to close (something may have escaped the
/// group and still hold them).
const OUTPUT_WAIT: Duration = Duration::from_secs(2);

/// What a finished hook produced: its exit code (`None` when killed by a signal), its output
/// (bounded, lossy UTF-8) and how long it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Why a hook failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookError {
    /// `sh` could not be started.
    Spawn(String),
    /// It ran longer than `hooks.timeout_ms`; its process group was killed.
    Timeout { timeout_ms: u64, output: HookOutput },
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

/// Collect `proc`'s output until it exits or `timeout` (counted from `started`) passes; on timeout
/// SIGKILL its group.
pub(crate) fn supervise(
    proc: &dyn Process,
    started: Instant,
    timeout: Duration,
) -> Result<HookOutput, HookError> {
    let (mut stdout, mut lines) = (Vec::new(), proc.lines().clone());
    let deadline = started + timeout;
    let (mut timed_out, mut eof) = (false, false);
    // Pump stdout (so the child never blocks on a full pipe) until the leader is reaped.
    while !proc.has_exited() {
        let left = deadline.saturating_duration_since(Instant::now());
        select! {
            recv(lines) -> item => {
                if !keep(item.ok(), &mut stdout) {
                    eof = true;
                    lines = never();
                }
            }
            recv(proc.exited()) -> _ => {}
            recv(after(left)) -> _ => {
                timed_out = true;
                proc.signal_group(libc::SIGKILL);
                proc.wait_exit(REAP_WAIT);
                break;
            }
        }
    }
    // Drain what is left, bounded in case something escaped the group and holds the pipe.
    let drain_until = Instant::now() + OUTPUT_WAIT;
    while !eof {
        let left = drain_until.saturating_duration_since(Instant::now());
        eof = !keep(lines.recv_timeout(left).ok(), &mut stdout);
    }
    let _ = proc
        .stderr_done()
        .recv_timeout(drain_until.saturating_duration_since(Instant::now()));
    let stderr = String::from_utf8_lossy(&proc.stderr_bytes()).into_owned();
    let output = |code| HookOutput {
        code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: stderr.clone(),
        elapsed: started.elapsed(),
    };
    if timed_out {
        return Err(HookError::Timeout {
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            output: output(None),
        });
    }
    match proc.exit_status() {
        None => Err(HookError::Spawn("wait failed: no exit status".into())),
        Some(st) if st.success() => Ok(output(Some(0))),
        Some(st) => Err(HookError::Failed(output(st.code()))),
    }
}

/// Keep the head of stdout; false once the stream is over.
fn keep(item: Option<StdoutItem>, out: &mut Vec<u8>) -> bool {
    let bytes = match item {
        Some(StdoutItem::Chunk(b)) => b,
        Some(StdoutItem::Line(l)) => format!("{l}\n").into_bytes(),
        Some(StdoutItem::Lines(ls)) => ls
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            .into(),
        Some(StdoutItem::LineTooLong { .. }) | Some(StdoutItem::ReadError(_)) => return true,
        Some(StdoutItem::Eof) | None => return false,
    };
    let room = MAX_CAPTURE_BYTES.saturating_sub(out.len());
    out.extend_from_slice(&bytes[..bytes.len().min(room)]);
    true
}

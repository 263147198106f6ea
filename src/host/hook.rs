//! Running a hook to completion on a supervised process (host-independent: it only needs a
//! [`Process`]): bounded output capture, a timeout that kills the whole group, and the outcome.
//! Also Baton's own short helper commands on this machine (`gh auth token`, and every `ssh`
//! client call that is not an agent or hook), supervised the same way with no shell.

use std::io;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crossbeam_channel::{at, never, select};

use super::{Process, ProcessSpec, StdoutItem};

/// Bytes of stdout kept (the head; the rest is read and discarded) and of stderr (the tail).
pub const MAX_CAPTURE_BYTES: usize = 64 * 1024;
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
    let deadline = started + timeout.min(MAX_TIMEOUT);
    let (mut timed_out, mut eof) = (false, false);
    // Pump stdout (so the child never blocks on a full pipe) until the leader is reaped.
    while !proc.has_exited() {
        select! {
            recv(lines) -> item => {
                if !keep(item.ok(), &mut stdout) {
                    eof = true;
                    lines = never();
                }
            }
            recv(proc.exited()) -> _ => {}
            recv(at(deadline)) -> _ => {
                timed_out = true;
                proc.signal_group(libc::SIGKILL);
                proc.wait_exit(super::REAP_WAIT_AFTER_KILL);
                break;
            }
        }
    }
    // Drain what is left, bounded in case something escaped the group and holds the pipe.
    let drain_until = Instant::now() + OUTPUT_WAIT;
    while !eof {
        eof = !keep(lines.recv_deadline(drain_until).ok(), &mut stdout);
    }
    let _ = proc.stderr_done().recv_deadline(drain_until);
    let status = proc.exit_status().filter(|_| !timed_out);
    let output = HookOutput {
        code: status.and_then(|s| s.code()),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&proc.stderr_bytes()).into_owned(),
        elapsed: started.elapsed(),
    };
    match status {
        _ if timed_out => Err(HookError::Timeout {
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            output,
        }),
        None => Err(HookError::Spawn("wait failed: no exit status".into())),
        Some(st) if st.success() => Ok(output),
        Some(_) => Err(HookError::Failed(output)),
    }
}

/// Keep the head of stdout; false once the stream is over.
fn keep(item: Option<StdoutItem>, out: &mut Vec<u8>) -> bool {
    let bytes = match item {
        Some(StdoutItem::Chunk(b)) => b,
        Some(StdoutItem::Line(l)) => (l + "\n").into_bytes(),
        Some(StdoutItem::Lines(ls)) => (ls.join("\n") + "\n").into_bytes(),
        Some(StdoutItem::LineTooLong { .. }) | Some(StdoutItem::ReadError(_)) => return true,
        Some(StdoutItem::Eof) | None => return false,
    };
    let room = MAX_CAPTURE_BYTES.saturating_sub(out.len());
    out.extend_from_slice(&bytes[..bytes.len().min(room)]);
    true
}

/// Longest deadline (a day): `Instant` arithmetic must not overflow on a huge configured value.
pub(super) const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

pub(super) fn timed_out(timeout: Duration) -> io::Error {
    let ms = timeout.min(MAX_TIMEOUT).as_millis();
    io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {ms} ms"))
}

/// Run `cmd` (stdin as the caller set it) supervised like a hook: the head of stdout and the
/// tail of stderr (64 KiB each, lossy UTF-8), as the leader of a new process group, until it
/// exits or `timeout` passes. One still running then is killed with its group: `Err` of kind
/// `TimedOut`. Output still held open by an escaped descendant is waited for 2 s at most.
pub(crate) fn output_within(cmd: Command, timeout: Duration) -> io::Result<HookOutput> {
    let started = Instant::now();
    let spec = ProcessSpec {
        label: "command",
        ..ProcessSpec::hook("", "")
    };
    let p = super::supervisor::spawn_command(cmd, &spec, None, None)?;
    match supervise(&p, started, timeout.min(MAX_TIMEOUT)) {
        Ok(out) | Err(HookError::Failed(out)) => Ok(out),
        Err(HookError::Timeout { .. }) => Err(timed_out(timeout)),
        Err(e @ HookError::Spawn(_)) => Err(io::Error::other(e.to_string())),
    }
}

/// Run `program args…` (no shell, stdin closed) and return its stdout (at most 64 KiB) when it
/// exits successfully within `timeout`; a hung program is killed with its group and yields `None`.
pub(crate) fn command_output(program: &str, args: &[&str], timeout: Duration) -> Option<Vec<u8>> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    match output_within(cmd, timeout) {
        Ok(out) => (out.code == Some(0)).then(|| out.stdout.into_bytes()),
        Err(e) => {
            if e.kind() == io::ErrorKind::TimedOut {
                log::warn!("`{program}` {e}; killed");
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hung_command_is_killed_at_the_timeout() {
        let started = Instant::now();
        let out = command_output(
            "sh",
            &["-c", "sleep 600 & sleep 600"],
            Duration::from_millis(300),
        );
        assert_eq!(out, None);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn output_of_a_quick_command_is_returned() {
        let out = command_output("sh", &["-c", "echo tok"], Duration::from_secs(5));
        assert_eq!(out.as_deref(), Some(&b"tok\n"[..]));
        assert_eq!(
            command_output("sh", &["-c", "exit 1"], Duration::from_secs(5)),
            None
        );
    }

    /// Both streams are kept (bounded) and the wait ends soon after the exit, although a
    /// background child still holds the pipes.
    #[test]
    fn output_ends_with_the_exit_and_is_bounded() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "head -c 100000 /dev/zero; echo err >&2; sleep 5 & exit 3",
        ]);
        let started = Instant::now();
        let out = output_within(cmd, Duration::from_secs(20)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(4));
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout.len(), 64 * 1024);
        assert_eq!(out.stderr, "err\n");
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        let e = output_within(sleep, Duration::from_millis(100));
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::TimedOut);
    }
}

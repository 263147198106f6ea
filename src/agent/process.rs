//! Generic agent subprocess plumbing shared by the CLI adapters (Claude Code, Copilot).
//!
//! One [`AgentProcess`] is one invocation of an agent CLI:
//!
//! * launched as `bash -lc '<command> "$@"' bash <args…>` — the operator-trusted `command` is the
//!   only shell text; the prompt and every other argument are positional parameters that no shell
//!   ever parses (issue text is untrusted);
//! * cwd = the (already validated) workspace, stdin = `/dev/null`, stdout/stderr piped, extra env
//!   vars applied, and the child is the leader of a **new process group** (`process_group(0)`);
//! * a stdout reader thread splits lines with a bounded buffer ([`ProcessSpec::max_line_bytes`],
//!   10 MB by default). A longer line is never held in memory: it is reported as
//!   [`StdoutItem::LineTooLong`] and skipped up to the next newline;
//! * a stderr reader thread keeps only a bounded tail ([`AgentProcess::stderr_tail`]);
//! * a waiter thread waits for the leader to exit *without reaping it* (`waitid(WNOWAIT)`), kills
//!   whatever is left in its process group (stray grandchildren — no orphans), then reaps the
//!   leader (no zombies). Because the leader stays a zombie until that point, its pid/pgid cannot
//!   be reused while Baton may still signal the group;
//! * [`AgentProcess::terminate`] sends SIGTERM to the group, then SIGKILL after a grace period, and
//!   waits (bounded) for the reap. Dropping an `AgentProcess` does the same with a short grace.
//!
//! The turn loop calls [`AgentProcess::recv`] with the [`CancelToken`] and a turn deadline (and,
//! optionally, an idle deadline); it `select!`s over the line channel, the cancel receiver and a
//! timer, so no wait is ever unbounded.
//!
//! A grandchild that moves itself into another process group or session (`setsid`) escapes group
//! signals; that is out of reach of any group-based supervisor and is not handled here.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, select, Receiver, Sender};

use super::{AgentError, AgentErrorKind, CancelToken};

/// Default bound of one stdout line (10 MB).
pub const DEFAULT_MAX_LINE_BYTES: usize = 10 * 1024 * 1024;
/// Default size of the kept stderr tail (8 KiB).
pub const DEFAULT_STDERR_TAIL_BYTES: usize = 8 * 1024;
/// Default grace between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);
/// How long [`AgentProcess::terminate`] waits for the reap after SIGKILL before giving up.
const REAP_WAIT_AFTER_KILL: Duration = Duration::from_secs(5);
/// Capacity of the stdout line channel (back-pressure on the child beyond this).
const LINE_CHANNEL_CAPACITY: usize = 16;

/// Everything needed to launch one agent invocation.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// Operator-trusted shell text (e.g. `claude` or `/opt/bin/claude --foo`); it becomes
    /// `<command> "$@"` inside `bash -lc`.
    pub command: String,
    /// Positional arguments (flags, prompt…): delivered as `"$@"`, never parsed by a shell.
    pub args: Vec<OsString>,
    /// Working directory (validate it with `validate_workspace_cwd` first).
    pub cwd: PathBuf,
    /// Extra environment variables set for the child (added to the inherited environment).
    pub env: Vec<(OsString, OsString)>,
    /// Environment variables removed from the child's environment.
    pub env_remove: Vec<OsString>,
    /// Bound of one stdout line in bytes (default [`DEFAULT_MAX_LINE_BYTES`]).
    pub max_line_bytes: usize,
    /// Bytes of stderr kept (the tail) for error messages (default [`DEFAULT_STDERR_TAIL_BYTES`]).
    pub stderr_tail_bytes: usize,
    /// Shell binary (default `bash`; tests may point elsewhere).
    pub shell: OsString,
}

impl ProcessSpec {
    /// A spec with default bounds, no args and no extra env.
    pub fn new(command: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        ProcessSpec {
            command: command.into(),
            args: Vec::new(),
            cwd: cwd.into(),
            env: Vec::new(),
            env_remove: Vec::new(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            stderr_tail_bytes: DEFAULT_STDERR_TAIL_BYTES,
            shell: OsString::from("bash"),
        }
    }

    /// Append one positional argument.
    pub fn arg(&mut self, a: impl Into<OsString>) -> &mut Self {
        self.args.push(a.into());
        self
    }

    /// Set one extra environment variable.
    pub fn env(&mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> &mut Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// The script passed to `bash -lc`: `<command> "$@"`.
    pub fn shell_script(&self) -> String {
        format!("{} \"$@\"", self.command)
    }
}

/// One item from the stdout reader thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StdoutItem {
    /// One complete line without its `\n` (and `\r`); invalid UTF-8 is replaced lossily.
    Line(String),
    /// A line longer than the bound was skipped; `bytes` is its full length.
    LineTooLong {
        /// Length of the skipped line in bytes.
        bytes: usize,
    },
    /// Reading stdout failed (reported once, then `Eof`).
    ReadError(String),
    /// stdout closed (the child and every holder of the pipe are gone or closed it).
    Eof,
}

/// What [`AgentProcess::recv`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recv {
    /// A stdout item (a line, an overlong-line marker, a read error, or EOF — after `Eof`, further
    /// calls return `Closed`).
    Item(StdoutItem),
    /// The stdout channel is closed and drained (after `Eof`).
    Closed,
    /// The cancel token fired.
    Cancelled,
    /// The turn deadline passed.
    TurnTimeout,
}

/// What [`AgentProcess::wait_exit_or_cancel`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitExit {
    /// The leader was reaped (status `None` only if waitpid failed).
    Exited(Option<ExitStatus>),
    /// The cancel token fired first.
    Cancelled,
    /// The deadline passed first.
    TimedOut,
}

#[derive(Debug, Default)]
struct ExitState {
    /// Set (under the lock) the moment the leader is reaped; no signal is sent after that.
    reaped: bool,
    status: Option<ExitStatus>,
}

/// A running agent subprocess (see the module docs). Dropping it terminates and reaps the group.
pub struct AgentProcess {
    pid: u32,
    lines: Receiver<StdoutItem>,
    exit: Arc<Mutex<ExitState>>,
    /// Disconnected (ready in `select!`) once the leader has been reaped.
    exited: Receiver<()>,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    stderr_done: Receiver<()>,
}

impl std::fmt::Debug for AgentProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentProcess")
            .field("pid", &self.pid)
            .finish()
    }
}

impl AgentProcess {
    /// Launch `spec`. Fails with `startup_failed` when the shell cannot be started (a missing agent
    /// binary instead shows up as exit code 127, see [`is_command_not_found`]).
    pub fn spawn(spec: &ProcessSpec) -> Result<AgentProcess, AgentError> {
        let mut cmd = Command::new(&spec.shell);
        cmd.arg("-lc")
            .arg(spec.shell_script())
            .arg("bash")
            .args(&spec.args)
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for k in &spec.env_remove {
            cmd.env_remove(k);
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| {
            AgentError::new(
                AgentErrorKind::StartupFailed,
                format!("could not start {:?}: {e}", spec.shell),
            )
        })?;
        let pid = child.id();
        let stdout = child.stdout.take().expect("stdout piped");
        let stderr = child.stderr.take().expect("stderr piped");
        // From here on the waiter thread owns reaping; `Child` is dropped without waiting
        // (dropping a std Child never kills or waits).
        drop(child);

        let (line_tx, lines) = bounded(LINE_CHANNEL_CAPACITY);
        let max_line = spec.max_line_bytes.max(1);
        thread::Builder::new()
            .name(format!("agent-stdout-{pid}"))
            .spawn(move || read_lines(stdout, max_line, line_tx))
            .map_err(|e| startup_thread_error(pid, e))?;

        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let (stderr_done_tx, stderr_done) = bounded::<()>(0);
        {
            let tail = Arc::clone(&stderr_tail);
            let cap = spec.stderr_tail_bytes;
            thread::Builder::new()
                .name(format!("agent-stderr-{pid}"))
                .spawn(move || {
                    read_tail(stderr, cap, &tail);
                    drop(stderr_done_tx);
                })
                .map_err(|e| startup_thread_error(pid, e))?;
        }

        let exit = Arc::new(Mutex::new(ExitState::default()));
        let (exited_tx, exited) = bounded::<()>(0);
        {
            let exit = Arc::clone(&exit);
            thread::Builder::new()
                .name(format!("agent-wait-{pid}"))
                .spawn(move || wait_and_reap(pid, &exit, exited_tx))
                .map_err(|e| startup_thread_error(pid, e))?;
        }

        Ok(AgentProcess {
            pid,
            lines,
            exit,
            exited,
            stderr_tail,
            stderr_done,
        })
    }

    /// The leader's pid (also the process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A receiver that becomes ready (disconnected) once the leader has been reaped.
    pub fn exited(&self) -> &Receiver<()> {
        &self.exited
    }

    /// The exit status once reaped.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exit.lock().map(|s| s.status).unwrap_or(None)
    }

    /// True once the leader has been reaped.
    pub fn has_exited(&self) -> bool {
        self.exit.lock().map(|s| s.reaped).unwrap_or(true)
    }

    /// Wait for the next stdout item, the cancel token or the turn deadline, whichever comes
    /// first. Never blocks past `turn_deadline`. (Inactivity is the orchestrator's stall timer's
    /// business; it cancels through the token.)
    pub fn recv(&self, cancel: &CancelToken, turn_deadline: Instant) -> Recv {
        if cancel.is_cancelled() {
            return Recv::Cancelled;
        }
        let now = Instant::now();
        if now >= turn_deadline {
            return Recv::TurnTimeout;
        }
        let turn_timer = after(turn_deadline - now);
        loop {
            select! {
                recv(self.lines) -> msg => return match msg {
                    Ok(item) => Recv::Item(item),
                    Err(_) => Recv::Closed,
                },
                recv(cancel.receiver()) -> _ => {
                    if cancel.is_cancelled() {
                        return Recv::Cancelled;
                    }
                }
                recv(turn_timer) -> _ => return Recv::TurnTimeout,
            }
        }
    }

    /// Wait up to `timeout` for the leader to be reaped; returns its status if it was.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let _ = self.exited.recv_timeout(timeout);
        self.exit_status()
    }

    /// Wait until the leader is reaped, the cancel token fires, or `deadline` passes — whichever
    /// comes first (for the time after stdout EOF, when the process may still be running).
    pub fn wait_exit_or_cancel(&self, cancel: &CancelToken, deadline: Instant) -> WaitExit {
        loop {
            if self.has_exited() {
                return WaitExit::Exited(self.exit_status());
            }
            if cancel.is_cancelled() {
                return WaitExit::Cancelled;
            }
            let now = Instant::now();
            if now >= deadline {
                return WaitExit::TimedOut;
            }
            select! {
                recv(self.exited) -> _ => return WaitExit::Exited(self.exit_status()),
                recv(cancel.receiver()) -> _ => {}
                recv(after(deadline - now)) -> _ => {}
            }
        }
    }

    /// Send `signal` to the whole process group, unless the leader was already reaped.
    /// Returns true when the signal was sent.
    pub fn signal_group(&self, signal: i32) -> bool {
        let guard = match self.exit.lock() {
            Ok(g) => g,
            Err(_) => return false,
        };
        if guard.reaped {
            return false;
        }
        // SAFETY: plain syscall; the leader is not reaped (checked under the lock that the
        // reaper holds while reaping), so the pgid still names this group.
        unsafe { libc::killpg(self.pid as libc::pid_t, signal) == 0 }
    }

    /// Stop the process group: SIGTERM, wait up to `grace`, then SIGKILL, then wait (bounded) for the
    /// reap. Idempotent. Returns the exit status when the leader was reaped.
    pub fn terminate(&self, grace: Duration) -> Option<ExitStatus> {
        if self.has_exited() {
            return self.exit_status();
        }
        self.signal_group(libc::SIGTERM);
        if let Some(st) = self.wait_exit(grace) {
            return Some(st);
        }
        log::warn!(
            "agent process ignored SIGTERM; sending SIGKILL agent_pid={} grace_ms={}",
            self.pid,
            grace.as_millis()
        );
        self.signal_group(libc::SIGKILL);
        self.wait_exit(REAP_WAIT_AFTER_KILL)
    }

    /// The kept stderr tail (lossy UTF-8), trimmed.
    pub fn stderr_tail(&self) -> String {
        let buf = match self.stderr_tail.lock() {
            Ok(b) => b.iter().copied().collect::<Vec<u8>>(),
            Err(_) => Vec::new(),
        };
        String::from_utf8_lossy(&buf).trim().to_string()
    }

    /// Wait up to `timeout` for stderr to reach EOF (so the tail is complete), then return it.
    pub fn stderr_tail_after(&self, timeout: Duration) -> String {
        let _ = self.stderr_done.recv_timeout(timeout);
        self.stderr_tail()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if !self.has_exited() {
            self.terminate(Duration::from_millis(500));
        }
    }
}

/// True when `status` is the shell's "command not found" (127) — the `agent_not_found` case.
pub fn is_command_not_found(status: &ExitStatus) -> bool {
    status.code() == Some(127)
}

/// A short human description: `exit code 1` or `killed by signal 15`.
pub fn describe_exit(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown exit".to_string(),
    }
}

fn startup_thread_error(pid: u32, e: std::io::Error) -> AgentError {
    // SAFETY: plain syscall on a group we just created and have not reaped.
    unsafe {
        libc::killpg(pid as libc::pid_t, libc::SIGKILL);
    }
    AgentError::new(
        AgentErrorKind::StartupFailed,
        format!("could not start reader thread: {e}"),
    )
}

/// Split `r` into bounded lines and send them; ends with `Eof`. Stops early when the receiver is gone.
pub(crate) fn read_lines<R: Read>(r: R, max_line: usize, tx: Sender<StdoutItem>) {
    let mut reader = BufReader::with_capacity(64 * 1024, r);
    let mut line: Vec<u8> = Vec::new();
    let mut skipping: Option<usize> = None; // Some(bytes seen) while skipping an overlong line
    loop {
        let (consumed, newline) = match reader.fill_buf() {
            Ok([]) => break,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    absorb(&buf[..i], &mut line, &mut skipping, max_line);
                    (i + 1, true)
                }
                None => {
                    absorb(buf, &mut line, &mut skipping, max_line);
                    (buf.len(), false)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.send(StdoutItem::ReadError(e.to_string()));
                let _ = tx.send(StdoutItem::Eof);
                return;
            }
        };
        reader.consume(consumed);
        if newline && !emit(&tx, &mut line, &mut skipping) {
            return;
        }
    }
    if (!line.is_empty() || skipping.is_some()) && !emit(&tx, &mut line, &mut skipping) {
        return;
    }
    let _ = tx.send(StdoutItem::Eof);
}

fn absorb(chunk: &[u8], line: &mut Vec<u8>, skipping: &mut Option<usize>, max_line: usize) {
    if let Some(n) = skipping {
        *n += chunk.len();
        return;
    }
    if line.len() + chunk.len() > max_line {
        *skipping = Some(line.len() + chunk.len());
        *line = Vec::new(); // release the memory now
    } else {
        line.extend_from_slice(chunk);
    }
}

/// Send the finished line (or the overlong marker); false when the receiver is gone.
fn emit(tx: &Sender<StdoutItem>, line: &mut Vec<u8>, skipping: &mut Option<usize>) -> bool {
    let item = match skipping.take() {
        Some(bytes) => StdoutItem::LineTooLong { bytes },
        None => {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let s = String::from_utf8_lossy(line).into_owned();
            line.clear();
            StdoutItem::Line(s)
        }
    };
    tx.send(item).is_ok()
}

/// Keep the last `cap` bytes of `r` in `tail`.
fn read_tail<R: Read>(mut r: R, cap: usize, tail: &Mutex<VecDeque<u8>>) {
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if let Ok(mut t) = tail.lock() {
                    t.extend(&buf[..n]);
                    let excess = t.len().saturating_sub(cap);
                    t.drain(..excess);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
    }
}

/// Wait for the leader to exit without reaping it, kill the rest of its group, then reap it.
fn wait_and_reap(pid: u32, exit: &Mutex<ExitState>, exited_tx: Sender<()>) {
    let p = pid as libc::pid_t;
    loop {
        // SAFETY: zeroed siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain syscall on our own child.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                p as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break; // ECHILD etc.: fall through to the reaping attempt below
        }
    }
    let mut guard = match exit.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    // The leader is a zombie, so the pgid is still ours: clear out stray group members.
    // SAFETY: plain syscall; see above.
    unsafe {
        libc::killpg(p, libc::SIGKILL);
    }
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: plain syscall on our own child.
        let r = unsafe { libc::waitpid(p, &mut status, 0) };
        if r == p {
            guard.status = Some(ExitStatus::from_raw(status));
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break;
    }
    guard.reaped = true;
    drop(guard);
    drop(exited_tx);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(input: &[u8], max: usize) -> Vec<StdoutItem> {
        let (tx, rx) = bounded(1024);
        read_lines(input, max, tx);
        rx.try_iter().collect()
    }

    #[test]
    fn splits_lines_and_strips_cr() {
        let items = collect(b"a\r\nbb\n\nlast", 100);
        assert_eq!(
            items,
            vec![
                StdoutItem::Line("a".into()),
                StdoutItem::Line("bb".into()),
                StdoutItem::Line("".into()),
                StdoutItem::Line("last".into()),
                StdoutItem::Eof
            ]
        );
    }

    #[test]
    fn overlong_line_is_skipped_to_next_newline() {
        let mut input = vec![b'x'; 50];
        input.extend_from_slice(b"\nok\n");
        input.extend(vec![b'y'; 11]);
        let items = collect(&input, 10);
        assert_eq!(
            items,
            vec![
                StdoutItem::LineTooLong { bytes: 50 },
                StdoutItem::Line("ok".into()),
                StdoutItem::LineTooLong { bytes: 11 },
                StdoutItem::Eof
            ]
        );
    }

    #[test]
    fn invalid_utf8_is_lossy() {
        let items = collect(b"\xff\xfe{}\n", 100);
        assert!(matches!(&items[0], StdoutItem::Line(s) if s.ends_with("{}")));
    }

    #[test]
    fn shell_script_quotes_args_as_positional() {
        let s = ProcessSpec::new("claude --x", "/tmp");
        assert_eq!(s.shell_script(), "claude --x \"$@\"");
    }
}

//! The execution-host seam: everything a run does to the world (workspaces, hooks, agent process
//! groups, their output and signals) goes through one object-safe [`Host`]: [`LocalHost`] or the
//! SSH host. Nothing outside this module calls `killpg`, starts a shell or deletes a workspace.
//!
//! Adding a host: implement the three workspace operations with [`LocalHost`]'s containment
//! rules, and `spawn`, returning a [`Process`] whose `pid` is the (remote) group id, whose
//! `signal_group` reaches that group only while its leader is unreaped, and whose channels close
//! when the process ends (a dropped connection too). Hooks run on `spawn` too
//! (`workspace::hooks::run_hook`).

mod cgroup;
pub mod config;
mod hook;
mod local;
#[cfg(not(feature = "ssh"))]
mod no_ssh;
pub mod orphan;
pub mod sandbox;
#[cfg(feature = "ssh")]
pub mod ssh;
mod supervisor;

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use crossbeam_channel::Receiver;

pub use cgroup::{containment, Containment};
pub(crate) use hook::{command_output, supervise};
pub use hook::{HookError, HookOutput, MAX_CAPTURE_BYTES};
pub use local::{sweep_tombstones, LocalHost};
#[cfg(not(feature = "ssh"))]
pub use no_ssh::HostPool;
pub use orphan::OrphanOutcome;
#[cfg(feature = "ssh")]
pub use ssh::{HostPool, SshHost, SshSettings};
pub use supervisor::{kill_live_groups, set_env_policy, EnvPolicy};

pub const DEFAULT_MAX_LINE_BYTES: usize = 10 * 1024 * 1024;
/// Between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);
/// How long [`Process::terminate`] and a hook's timeout wait for the reap after SIGKILL.
const REAP_WAIT_AFTER_KILL: Duration = Duration::from_secs(5);

/// A prepared workspace (spec §4.1.4): its canonical path, and whether this call created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub path: PathBuf,
    pub created_now: bool,
}

/// A workspace failure (spec §14.1 class 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceError(pub String);

impl fmt::Display for WorkspaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WorkspaceError {}

/// Called with a workspace's resolved path just before it is removed (the `before_remove` hook).
pub type BeforeRemove<'a> = dyn FnMut(&Path) + 'a;

/// Whether a workspace was removed (`false`: there was nothing to remove).
pub type Removal = Result<bool, WorkspaceError>;

/// Where runs execute. Object-safe; shared between threads as `Arc<dyn Host>` / `&dyn Host`.
pub trait Host: Send + Sync + fmt::Debug {
    /// Ensure `path` (= `<root>/<key>`) exists as a directory strictly inside `root` (creating the
    /// root and the directory when missing). An existing non-directory or an escaping symlink
    /// fails without touching anything.
    fn create_workspace(&self, root: &Path, path: &Path) -> Result<Workspace, WorkspaceError>;

    /// Check that `path` is an existing directory strictly inside `root` (both resolved); returns
    /// the resolved path. Run before every launch (spec §9.5).
    fn check_workspace(&self, root: &Path, path: &Path) -> Result<PathBuf, WorkspaceError>;

    /// Remove the workspace `path` inside `root`: a symlink or non-directory is unlinked (never
    /// followed); a directory gets `hook(<resolved path>)` (`before_remove`) first, then is
    /// renamed atomically to a tombstone `<root>/.trash-<key>-<ts>-<n>` and deleted, so a
    /// concurrent re-creation gets a fresh directory. A root that resolves elsewhere than at its
    /// first use is refused. Returns false when there was nothing to remove.
    fn remove_workspace(&self, root: &Path, path: &Path, hook: &mut BeforeRemove) -> Removal;

    /// Start `spec` as the leader of a new process group (see [`ProcessSpec`]).
    fn spawn(&self, spec: &ProcessSpec) -> io::Result<Box<dyn Process>>;

    /// The host's id in logs and status (`None`: this machine).
    fn name(&self) -> Option<&str> {
        None
    }

    /// Check that the host is usable (a remote host: it answers over SSH). `Err` starts with
    /// `host_unavailable` for connection failures.
    fn probe(&self) -> Result<(), String> {
        Ok(())
    }

    /// Stop the agent group `pgid` a previous Baton left on this host, only if its leader is
    /// this user's and started at `leader_start` (see [`orphan`]). `Err` when the host cannot be
    /// asked (the group's fate is unknown); a host that cannot check never signals.
    fn stop_orphan(&self, pgid: u32, leader_start: u64) -> Result<OrphanOutcome, String> {
        let _ = (pgid, leader_start);
        Err(format!("{:?} cannot check orphaned agents", self))
    }
}

/// How stdout is delivered on [`Process::lines`]: bounded lines (a longer one becomes
/// [`StdoutItem::LineTooLong`]), or raw chunks whose consumer bounds what it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdoutMode {
    Lines { max_line_bytes: usize },
    Chunks,
}

/// One process to launch: `<shell> -lc <script> [<arg0> <args…>]` in `cwd`, stdin `/dev/null`
/// (or a pipe, see `stdin_pipe`), stdout/stderr piped, as the leader of a new process group.
///
/// Only `script` is shell text (operator-trusted); `args` are positional parameters no shell ever
/// parses, so issue text can travel there safely.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// `bash` for agents, `sh` for hooks (tests may point elsewhere).
    pub shell: OsString,
    /// The text after `-lc`.
    pub script: String,
    /// `$0` followed by the positional arguments (`"$@"`); empty for none.
    pub args: Vec<OsString>,
    /// Check it with [`Host::check_workspace`] first.
    pub cwd: PathBuf,
    /// Added to the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    pub env_remove: Vec<OsString>,
    pub stdout: StdoutMode,
    /// Bytes of stderr kept (the tail) for error messages.
    pub stderr_tail_bytes: usize,
    /// For thread names and logs (`agent`, `hook`).
    pub label: &'static str,
    /// Give the child a stdin pipe for [`Process::take_stdin`] (a JSON-RPC agent such as `codex
    /// app-server`) instead of `/dev/null`. Hosts that cannot forward one hand out none.
    pub stdin_pipe: bool,
}

impl ProcessSpec {
    /// An agent CLI invocation: `bash -lc '<command> "$@"' bash <args…>` — the operator-trusted
    /// `command` is the only shell text; push the CLI arguments with [`ProcessSpec::arg`].
    pub fn command(command: &str, cwd: impl Into<PathBuf>) -> Self {
        ProcessSpec {
            shell: OsString::from("bash"),
            script: format!("{command} \"$@\""),
            args: vec![OsString::from("bash")],
            cwd: cwd.into(),
            env: Vec::new(),
            env_remove: Vec::new(),
            stdout: StdoutMode::Lines {
                max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            },
            stderr_tail_bytes: 8 * 1024,
            label: "agent",
            stdin_pipe: false,
        }
    }

    /// A hook: `sh -lc <script>` with no positional arguments; stdout in raw chunks.
    pub fn hook(script: &str, cwd: impl Into<PathBuf>) -> Self {
        ProcessSpec {
            shell: OsString::from("sh"),
            script: script.to_string(),
            args: Vec::new(),
            stdout: StdoutMode::Chunks,
            stderr_tail_bytes: MAX_CAPTURE_BYTES,
            label: "hook",
            ..ProcessSpec::command("", cwd)
        }
    }

    pub fn arg(&mut self, a: impl Into<OsString>) -> &mut Self {
        self.args.push(a.into());
        self
    }

    pub fn env(&mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> &mut Self {
        self.env.push((k.into(), v.into()));
        self
    }
}

/// One item from the stdout reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StdoutItem {
    /// One complete line without its `\n` (and `\r`); invalid UTF-8 is replaced lossily.
    Line(String),
    /// Several complete lines (each like [`StdoutItem::Line`]) read together, sent as one item
    /// so that a fast producer costs one consumer wake-up per read, not per line.
    Lines(Vec<String>),
    /// A line longer than the bound was skipped; `bytes` is its full length.
    LineTooLong { bytes: usize },
    /// [`StdoutMode::Chunks`].
    Chunk(Vec<u8>),
    /// Reading stdout failed (reported once, then `Eof`).
    ReadError(String),
    /// stdout closed (the child and every holder of the pipe are gone or closed it).
    Eof,
}

/// A running process group started by a [`Host`]. The leader stays unreaped (a zombie at worst)
/// until the implementation has cleared its group, so signalling the group never hits a reused
/// pid. Dropping a handle whose leader is still running terminates the group.
pub trait Process: Send + fmt::Debug {
    /// The leader's pid, which is also the process group id (on the executing host).
    fn pid(&self) -> u32;
    /// stdout items, ending with [`StdoutItem::Eof`] (then disconnected).
    fn lines(&self) -> &Receiver<StdoutItem>;
    /// Becomes ready (disconnected) once the leader has been reaped.
    fn exited(&self) -> &Receiver<()>;
    /// The exit status once reaped (`None` before, or when it could not be collected).
    fn exit_status(&self) -> Option<ExitStatus>;
    fn has_exited(&self) -> bool;
    /// Send `signal` to the whole group unless the leader was already reaped; true when sent.
    fn signal_group(&self, signal: i32) -> bool;
    fn stderr_bytes(&self) -> Vec<u8>;
    /// Becomes ready (disconnected) once stderr reached EOF.
    fn stderr_done(&self) -> &Receiver<()>;

    /// The leader's start time on its host (`/proc/<pid>/stat` field 22), recorded with the pid
    /// so a restart never mistakes a reused pid for the agent.
    fn start_time(&self) -> Option<u64> {
        None
    }

    /// The write end of the child's stdin, once, when its spec asked for a pipe and this host
    /// forwards one (dropping it closes the child's stdin).
    fn take_stdin(&self) -> Option<Box<dyn io::Write + Send>> {
        None
    }

    /// The kept stderr tail (lossy UTF-8), trimmed.
    fn stderr_tail(&self) -> String {
        let bytes = self.stderr_bytes();
        String::from_utf8_lossy(&bytes).trim().to_string()
    }

    /// Wait up to `timeout` for the leader to be reaped; its status if it was.
    fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let _ = self.exited().recv_timeout(timeout);
        self.exit_status()
    }

    /// Stop the group: SIGTERM, wait up to `grace`, then SIGKILL and wait (bounded) for the reap.
    /// Idempotent. Returns the exit status when the leader was reaped.
    fn terminate(&self, grace: Duration) -> Option<ExitStatus> {
        if self.has_exited() {
            return self.exit_status();
        }
        self.signal_group(libc::SIGTERM);
        if let Some(st) = self.wait_exit(grace) {
            return Some(st);
        }
        log::warn!(
            "agent process ignored SIGTERM; sending SIGKILL agent_pid={} grace_ms={}",
            self.pid(),
            grace.as_millis()
        );
        self.signal_group(libc::SIGKILL);
        self.wait_exit(REAP_WAIT_AFTER_KILL)
    }

    /// Wait up to `timeout` for stderr to reach EOF (so the tail is complete), then return it.
    fn stderr_tail_after(&self, timeout: Duration) -> String {
        let _ = self.stderr_done().recv_timeout(timeout);
        self.stderr_tail()
    }
}

/// Error-text prefix of connection and startup failures (the `host_unavailable` class).
pub const HOST_UNAVAILABLE: &str = "host_unavailable";

/// Whether `err` (an error message from a host operation) is a connection/startup failure, or
/// a host whose sandbox cannot start (`host_sandbox_unavailable`): either way the host is not used.
pub fn is_host_unavailable(err: &str) -> bool {
    err.contains(HOST_UNAVAILABLE) || err.contains(sandbox::SANDBOX_UNAVAILABLE)
}

/// A short description of how a process ended: `exit code 1`, `killed by signal 15`, or
/// `unknown exit`.
pub(crate) fn describe_exit(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown exit".to_string(),
    }
}

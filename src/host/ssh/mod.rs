//! [`SshHost`]: a worker host reached with the system OpenSSH client (spec Appendix A).
//!
//! * Every operation runs the `ssh` found on `PATH` with `BatchMode=yes`, a connect timeout and
//!   keep-alives; one multiplexing master per host (`ControlPath` in a private 0700 directory,
//!   `ControlPersist`) is started on first use so later dispatches and hooks skip the handshake.
//!   The operator's `ssh_config` (keys, `known_hosts`, `ProxyJump`) applies unchanged.
//! * The remote command line is built only from operator config and Baton-chosen values, each
//!   word single-quoted ([`shell_quote`]); issue text travels as quoted positional arguments and
//!   environment values, never as shell text.
//! * Processes start under a tiny `sh` wrapper ([`process`]) that `setsid`s the program, prints
//!   `BATON_PGID <n>` first, and kills that group when the connection's stdin reaches EOF (the
//!   `ssh` client, the master or `sshd` died). Signals go to the remote group over a second
//!   `ssh`.
//! * Workspace operations are small fixed `sh` scripts ([`workspace`]) with the same containment
//!   rules as locally, resolved with `cd -P`/`pwd -P` on the remote host.

mod probe;
mod process;
mod quote;
mod workspace;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::WorkspaceError;
use super::{BeforeRemove, Host, OrphanOutcome, Process, ProcessSpec, Removal, Workspace};

pub use probe::probe_host;
pub use quote::{shell_join, shell_quote};

/// Error-text prefix of connection and startup failures (the `host_unavailable` class).
pub const HOST_UNAVAILABLE: &str = "host_unavailable";
/// `ssh` exits with this status when the connection (not the remote command) failed.
const SSH_CONNECTION_FAILED: i32 = 255;
/// Default `ConnectTimeout` in seconds.
const DEFAULT_CONNECT_TIMEOUT_S: u64 = 10;
/// How long the multiplexing master outlives its last client (seconds).
const CONTROL_PERSIST_S: u64 = 120;

/// A remote worker host: an SSH destination exactly as passed to `ssh`. Clones share the
/// multiplexing master.
#[derive(Clone)]
pub struct SshHost {
    destination: String,
    control_path: Option<PathBuf>,
    connect_timeout_s: u64,
    /// The client program (`ssh`, looked up on `PATH`).
    program: OsString,
    /// Serializes starting the multiplexing master.
    master: Arc<Mutex<()>>,
}

impl fmt::Debug for SshHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshHost")
            .field("destination", &self.destination)
            .finish()
    }
}

impl SshHost {
    /// A host for `destination` whose multiplexing socket lives in `control_dir` (see
    /// [`control_dir`]; an empty path disables multiplexing).
    pub fn new(destination: &str, control_dir: &Path) -> Self {
        SshHost {
            destination: destination.to_string(),
            control_path: (!control_dir.as_os_str().is_empty())
                .then(|| control_dir.join(socket_name(destination))),
            connect_timeout_s: DEFAULT_CONNECT_TIMEOUT_S,
            program: OsString::from("ssh"),
            master: Arc::new(Mutex::new(())),
        }
    }

    /// Use `program` as the `ssh` client (default: `ssh` on `PATH`; a wrapper adding
    /// `-F <ssh_config>` is how a custom config is given).
    pub fn with_ssh_program(mut self, program: impl Into<OsString>) -> Self {
        self.program = program.into();
        self
    }

    /// Bound the connection set-up to `secs` seconds (`ConnectTimeout`; default 10).
    pub fn with_connect_timeout(mut self, secs: u64) -> Self {
        self.connect_timeout_s = secs.max(1);
        self
    }

    /// The destination as configured.
    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// `ssh` with Baton's options (before the destination); `master` starts the multiplexing
    /// master instead of using it (ssh keeps the first value of an option, so it is chosen here).
    fn ssh(&self, master: bool) -> Command {
        let mut c = Command::new(&self.program);
        let opts = [
            "BatchMode=yes".to_string(),
            format!("ConnectTimeout={}", self.connect_timeout_s),
            "ServerAliveInterval=5".to_string(),
            "ServerAliveCountMax=3".to_string(),
            if master {
                format!("ControlMaster=yes\nControlPersist={CONTROL_PERSIST_S}")
            } else {
                "ControlMaster=no".to_string()
            },
        ];
        for o in opts.iter().flat_map(|o| o.split('\n')) {
            c.arg("-o").arg(o);
        }
        c.arg("-o").arg({
            let mut s = OsString::from("ControlPath=");
            match &self.control_path {
                Some(p) => s.push(p),
                None => s.push("none"),
            }
            s
        });
        c
    }

    /// `ssh … -T <dest> -- <words quoted>`, multiplexed.
    fn command(&self, words: &[&OsStr]) -> Command {
        let _ = self.ensure_master();
        let mut c = self.ssh(false);
        c.arg("-T").arg("--").arg(&self.destination);
        c.arg(shell_join(words));
        c
    }

    /// Start the multiplexing master unless its socket exists. Failures are left to the
    /// operation itself (it then connects directly and reports the error).
    fn ensure_master(&self) -> io::Result<()> {
        let _guard = self.master.lock();
        if self.control_path.as_ref().is_none_or(|p| p.exists()) {
            return Ok(());
        }
        let st = self.control(true, &["-f", "-N"])?;
        if st.success() {
            Ok(())
        } else {
            Err(io::Error::other("could not start the ssh master"))
        }
    }

    /// Run `words` remotely with stdin `/dev/null` and collect the output. A connection failure
    /// is an `Err` starting with [`HOST_UNAVAILABLE`].
    pub(crate) fn run(&self, words: &[&OsStr]) -> Result<Output, String> {
        let out = self
            .command(words)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{HOST_UNAVAILABLE}: cannot run ssh: {e}"))?;
        if out.status.code() == Some(SSH_CONNECTION_FAILED) {
            return Err(self.unavailable(&out.stderr));
        }
        Ok(out)
    }

    /// The `host_unavailable` message for `stderr` of a failed `ssh`.
    fn unavailable(&self, stderr: &[u8]) -> String {
        let e = String::from_utf8_lossy(stderr);
        let e = e.trim();
        let e = e.get(e.len().saturating_sub(300)..).unwrap_or(e);
        format!("{HOST_UNAVAILABLE}: ssh {}: {e}", self.destination)
    }

    /// Check that the host answers (`ssh <dest> true`).
    pub fn check_reachable(&self) -> Result<(), String> {
        let out = self.run(&[OsStr::new("true")])?;
        if out.status.success() {
            Ok(())
        } else {
            Err(self.unavailable(&out.stderr))
        }
    }

    /// Run `sh -c <script> baton <args…>` remotely; stdout on success, an error (with the
    /// stderr tail) otherwise.
    pub(crate) fn sh(&self, script: &str, args: &[&OsStr]) -> Result<String, String> {
        let mut words: Vec<&OsStr> = vec![OsStr::new("sh"), OsStr::new("-c")];
        words.push(OsStr::new(script));
        words.push(OsStr::new("baton"));
        words.extend_from_slice(args);
        let out = self.run(&words)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            let e = String::from_utf8_lossy(&out.stderr);
            Err(e.trim().to_string())
        }
    }

    /// Stop the multiplexing master (best effort; used at shutdown).
    pub fn close(&self) {
        let _ = self.control(false, &["-O", "exit"]);
    }

    /// `ssh <flags> -- <dest>` with no stdio (master start and control commands).
    fn control(&self, master: bool, flags: &[&str]) -> io::Result<std::process::ExitStatus> {
        self.ssh(master)
            .args(flags)
            .arg("--")
            .arg(&self.destination)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
    }
}

impl Host for SshHost {
    fn create_workspace(&self, root: &Path, path: &Path) -> Result<Workspace, WorkspaceError> {
        workspace::create(self, root, path)
    }

    fn check_workspace(&self, root: &Path, path: &Path) -> Result<PathBuf, WorkspaceError> {
        workspace::check(self, root, path)
    }

    fn remove_workspace(&self, root: &Path, path: &Path, hook: &mut BeforeRemove) -> Removal {
        workspace::remove(self, root, path, hook)
    }

    fn spawn(&self, spec: &ProcessSpec) -> io::Result<Box<dyn Process>> {
        Ok(Box::new(process::spawn(self, spec)?))
    }

    fn name(&self) -> Option<&str> {
        Some(&self.destination)
    }

    fn probe(&self) -> Result<(), String> {
        self.check_reachable()
    }

    /// The orphan check run on this host (never a local signal: the pgid is this host's).
    fn stop_orphan(&self, pgid: u32, leader_start: u64) -> Result<OrphanOutcome, String> {
        crate::host::orphan::stop_with(pgid, leader_start, |args| {
            let rest: Vec<&OsStr> = args[2..].iter().map(OsStr::new).collect();
            self.sh(args[0], &rest)
        })
    }
}

/// The private directory for multiplexing sockets: `<tmp>/baton-ssh-<uid>` (falling back to
/// `/tmp` when `$TMPDIR` is long: a socket path must stay under 108 bytes), created 0700 and
/// refused unless owned by this user with no group/other access.
pub fn control_dir() -> io::Result<PathBuf> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut base = std::env::temp_dir();
    if base.as_os_str().len() > 40 {
        base = PathBuf::from("/tmp");
    }
    let dir = base.join(format!("baton-ssh-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} must be a directory owned by uid {uid} with mode 0700",
            dir.display()
        )));
    }
    Ok(dir)
}

/// `<pid>-<hash of destination>`: short (the socket path must stay under 108 bytes), distinct per
/// destination and per Baton process (another process may mean another `ssh_config`).
fn socket_name(destination: &str) -> String {
    format!(
        "{:x}-{:016x}",
        std::process::id(),
        fnv1a(destination.as_bytes())
    )
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Whether `err` (an error message from a host operation) is a connection/startup failure.
pub fn is_host_unavailable(err: &str) -> bool {
    err.contains(HOST_UNAVAILABLE)
}

/// A short wait used by remote kill verification.
pub(crate) const VERIFY_POLL: Duration = Duration::from_millis(100);

//! [`SshHost`]: a worker host reached with the system OpenSSH client (spec Appendix A;
//! docs/hosts.md). The remote command line holds only operator config and Baton-chosen values,
//! each word single-quoted ([`shell_join`]), so issue text is never shell text; every short
//! command has a deadline (`worker.ssh_command_timeout_ms`); processes start under the
//! [`process`] wrapper, which kills the remote group when the connection drops.

mod process;
mod workspace;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use super::hook::{output_within, timed_out, MAX_TIMEOUT};
use super::local::check_name;
use super::{BeforeRemove, HookOutput, Host, OrphanOutcome, Process, ProcessSpec, Removal};
use super::{LocalHost, Workspace, WorkspaceError, HOST_UNAVAILABLE};
use crate::host::config::WorkerConfig;

/// `ssh` exits with this status when the connection (not the remote command) failed.
const SSH_CONNECTION_FAILED: i32 = 255;
/// How long the multiplexing master outlives its last client (seconds).
const CONTROL_PERSIST_S: u64 = 120;
/// Signals and their checks wait at most this long (or the command timeout when shorter): a
/// hung host must not hold a cancellation or a shutdown for a whole command timeout per signal.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

/// `worker.ssh_command_timeout_ms` and `worker.ssh_sessions_per_connection`, shared by the hosts
/// of a pool; a reload changes them in place.
#[derive(Debug, Default)]
pub struct SshSettings(RwLock<WorkerConfig>);

impl SshSettings {
    pub fn set(&self, worker: &WorkerConfig) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = worker.clone();
    }

    fn get(&self) -> RwLockReadGuard<'_, WorkerConfig> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.get().ssh_command_timeout_ms)
    }
}

/// The multiplexing connections of one host, one master each (`ControlPath` `<base>-<n>`): the
/// sessions each carries, so that another connection opens when they reach
/// `worker.ssh_sessions_per_connection` instead of sshd refusing the session (`MaxSessions`).
#[derive(Debug, Default)]
struct Mux {
    /// Open sessions per connection, and a lower limit learned from a refused session.
    conns: Mutex<Vec<(usize, Option<usize>)>>,
    /// Serializes starting masters: one handshake at a time per host (`MaxStartups`).
    starting: Mutex<()>,
}

/// A session's place on one of a host's connections; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Session {
    mux: Arc<Mux>,
    conn: usize,
}

impl Drop for Session {
    fn drop(&mut self) {
        // Connections are never removed: `conn` stays a valid index.
        let mut conns = self.mux.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns[self.conn].0 = conns[self.conn].0.saturating_sub(1);
    }
}

/// Whether `stderr` of an `ssh` client says the master's session was refused (sshd's
/// `MaxSessions`): the server is up, the connection is full.
fn session_refused(stderr: &str) -> bool {
    stderr.contains("Session open refused") || stderr.contains("administratively prohibited")
}

/// A remote worker host: an SSH destination exactly as passed to `ssh`. Clones share the
/// multiplexing connections.
#[derive(Clone, Debug)]
pub struct SshHost {
    destination: String,
    /// `<dir>/<pid>-<hash>`; connection `n` uses the socket `<base>-<n>` (`None`: no
    /// multiplexing).
    control_base: Option<PathBuf>,
    program: OsString,
    settings: Arc<SshSettings>,
    mux: Arc<Mux>,
}

impl SshHost {
    /// A host for `destination` whose multiplexing sockets live in `control_dir` (see
    /// [`control_dir`]; an empty path disables multiplexing).
    pub fn new(destination: &str, control_dir: &Path) -> Self {
        // `<pid>-<FNV-1a of destination>`: short (a socket path must stay under 108 bytes),
        // distinct per destination and per Baton process (another may mean another ssh_config).
        let hash = destination.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let name = format!("{:x}-{hash:016x}", std::process::id());
        SshHost {
            destination: destination.to_string(),
            control_base: (!control_dir.as_os_str().is_empty()).then(|| control_dir.join(name)),
            program: OsString::from("ssh"),
            settings: Arc::default(),
            mux: Arc::default(),
        }
    }

    /// Use `program` as the `ssh` client (default: `ssh` on `PATH`; a wrapper adding
    /// `-F <ssh_config>` is how a custom config is given).
    pub fn with_ssh_program(mut self, program: impl Into<OsString>) -> Self {
        self.program = program.into();
        self
    }

    /// Use `settings` (the pool's, so that a reload reaches every host).
    pub fn with_settings(mut self, settings: Arc<SshSettings>) -> Self {
        self.settings = settings;
        self
    }

    fn control_path(&self, conn: usize) -> Option<PathBuf> {
        let mut path = self.control_base.clone()?.into_os_string();
        path.push(format!("-{conn}"));
        Some(path.into())
    }

    /// `ssh <Baton's options> <args…> -- <destination>` for connection `conn`, stdin `/dev/null`;
    /// `master` starts its multiplexing master instead of using it (ssh keeps the first value of
    /// an option, so it is chosen here).
    fn ssh(&self, master: bool, conn: usize, args: &[&str]) -> Command {
        let mut c = Command::new(&self.program);
        let persist = format!("ControlPersist={CONTROL_PERSIST_S}");
        let mux: &[&str] = match master {
            true => &["ControlMaster=yes", &persist],
            false => &["ControlMaster=no"],
        };
        let alive = ["ServerAliveInterval=5", "ServerAliveCountMax=3"];
        for o in [&["BatchMode=yes", "ConnectTimeout=10"][..], &alive, mux].concat() {
            c.arg("-o").arg(o);
        }
        let mut path = OsString::from("ControlPath=");
        path.push(self.control_path(conn).unwrap_or_else(|| "none".into()));
        c.arg("-o").arg(path).args(args).arg("--");
        c.arg(&self.destination).stdin(Stdio::null());
        c
    }

    /// `ssh … -T -- <dest> <line>` (a remote command line, every word quoted; stdin `/dev/null`),
    /// multiplexed over the first connection with room for one more session, else a new one.
    pub(crate) fn command(&self, line: &OsStr) -> (Command, Session) {
        let limit = self.settings.get().ssh_sessions_per_connection.max(1) as usize;
        let mut conns = self.mux.conns.lock().unwrap_or_else(|p| p.into_inner());
        let conn = conns
            .iter()
            .position(|(open, learned)| *open < learned.unwrap_or(limit).min(limit))
            .unwrap_or_else(|| {
                conns.push((0, None));
                conns.len() - 1
            });
        conns[conn].0 += 1;
        drop(conns);
        self.ensure_master(conn);
        let mut c = self.ssh(false, conn, &["-T"]);
        c.arg(line);
        let mux = Arc::clone(&self.mux);
        (c, Session { mux, conn })
    }

    /// The server refused a session on `s`'s connection: take what it carries now as its limit
    /// (the server's `MaxSessions` is lower than `worker.ssh_sessions_per_connection`).
    pub(crate) fn refused(&self, s: &Session) {
        let mut conns = self.mux.conns.lock().unwrap_or_else(|p| p.into_inner());
        let c = &mut conns[s.conn];
        let limit = c.0.saturating_sub(1).max(1);
        c.1 = Some(limit);
        log::warn!(
            "event=ssh_session_refused host={} connection={} sessions={limit}; the server allows fewer sessions per connection (sshd MaxSessions) than worker.ssh_sessions_per_connection",
            self.destination,
            s.conn
        );
    }

    /// Start connection `conn`'s master unless its socket exists (within the command timeout); a
    /// failure is left to the operation (it then connects directly and reports the error).
    fn ensure_master(&self, conn: usize) {
        let Some(path) = self.control_path(conn).filter(|p| !p.exists()) else {
            return;
        };
        let _one_at_a_time = self.mux.starting.lock();
        if path.exists() {
            return;
        }
        let master = self.ssh(true, conn, &["-f", "-N"]);
        if let Err(e) = status_within(master, self.settings.timeout()) {
            let host = &self.destination;
            log::warn!("cannot start the ssh master host={host} connection={conn} error={e}");
        }
    }

    /// Run `words` remotely with stdin `/dev/null` and collect the output within the command
    /// timeout (at most `cap`); a connection failure or a timeout is [`HOST_UNAVAILABLE`].
    /// A session the server refused (that the client could not replace by a fresh connection)
    /// is tried once more on another connection, and is never `host_unavailable`.
    fn run(&self, words: &[&OsStr], cap: Duration) -> Result<HookOutput, String> {
        let timeout = self.settings.timeout().min(cap);
        for _ in 0..2 {
            let (cmd, session) = self.command(&shell_join(words));
            let out = match output_within(cmd, timeout) {
                Ok(out) => out,
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    return Err(format!(
                        "{HOST_UNAVAILABLE}: ssh {}: {e} (worker.ssh_command_timeout_ms)",
                        self.destination
                    ))
                }
                Err(e) => return Err(format!("{HOST_UNAVAILABLE}: cannot run ssh: {e}")),
            };
            let refused = session_refused(&out.stderr);
            if refused {
                self.refused(&session);
            }
            match out.code == Some(SSH_CONNECTION_FAILED) {
                true if refused => continue,
                true => return Err(self.unavailable(&out.stderr)),
                false => return Ok(out),
            }
        }
        let host = &self.destination;
        Err(format!(
            "ssh {host}: session refused on two connections (sshd MaxSessions)"
        ))
    }

    /// The `host_unavailable` message for `stderr` of a failed `ssh`.
    fn unavailable(&self, stderr: &str) -> String {
        let e = stderr.trim();
        let e = e.get(e.len().saturating_sub(300)..).unwrap_or(e);
        format!("{HOST_UNAVAILABLE}: ssh {}: {e}", self.destination)
    }

    /// Run `sh -c <script> baton <args…>` remotely; stdout on success, an error (with the
    /// stderr tail) otherwise.
    pub(crate) fn sh(&self, script: &str, args: &[&OsStr]) -> Result<String, String> {
        let mut words = ["sh", "-c", script, "baton"].map(OsStr::new).to_vec();
        words.extend_from_slice(args);
        let out = self.run(&words, MAX_TIMEOUT)?;
        match out.code {
            Some(0) => Ok(out.stdout),
            _ => Err(out.stderr.trim().to_string()),
        }
    }

    /// Stop every multiplexing master (best effort, bounded; used at shutdown).
    pub fn close(&self) {
        let conns = self.mux.conns.lock().map(|c| c.len()).unwrap_or(0);
        for conn in 0..conns {
            let _ = output_within(self.ssh(false, conn, &["-O", "exit"]), SIGNAL_TIMEOUT);
        }
    }
}

impl Host for SshHost {
    fn create_workspace(&self, root: &Path, path: &Path) -> Result<Workspace, WorkspaceError> {
        let line = self.workspace_sh(workspace::CREATE, root, path, "create")?;
        let Some((created, p)) = line.split_once(' ') else {
            return Err(self.workspace_error(format!("unexpected reply {line:?}")));
        };
        Ok(Workspace {
            path: PathBuf::from(p),
            created_now: created == "1",
        })
    }

    fn check_workspace(&self, root: &Path, path: &Path) -> Result<PathBuf, WorkspaceError> {
        self.workspace_sh(workspace::CHECK, root, path, "check")
            .map(PathBuf::from)
    }

    fn remove_workspace(&self, root: &Path, path: &Path, hook: &mut BeforeRemove) -> Removal {
        check_name(root, path)?; // its error is never "nothing to remove"
        let line = match self.workspace_sh(workspace::INSPECT, root, path, "inspect") {
            Ok(l) => l,
            // No root: nothing to remove (as locally).
            Err(e) if e.0.contains("is not accessible") => return Ok(false),
            Err(e) => return Err(e),
        };
        let Some(("dir", p)) = line.split_once(' ') else {
            return Ok(line == "unlinked");
        };
        hook(Path::new(p));
        self.workspace_sh(workspace::DELETE, root, path, "delete")?;
        Ok(true)
    }

    fn spawn(&self, spec: &ProcessSpec) -> io::Result<Box<dyn Process>> {
        Ok(Box::new(process::spawn(self, spec)?))
    }

    fn name(&self) -> Option<&str> {
        Some(&self.destination)
    }

    /// `ssh <dest> true`.
    fn probe(&self) -> Result<(), String> {
        let out = self.run(&[OsStr::new("true")], MAX_TIMEOUT)?;
        match out.code {
            Some(0) => Ok(()),
            _ => Err(self.unavailable(&out.stderr)),
        }
    }

    /// The orphan check run on this host (never a local signal: the pgid is this host's).
    fn stop_orphan(&self, pgid: u32, leader_start: u64) -> Result<OrphanOutcome, String> {
        crate::host::orphan::stop_with(pgid, leader_start, |args| {
            let rest: Vec<&OsStr> = args[3..].iter().map(OsStr::new).collect();
            self.sh(args[1], &rest)
        })
    }
}

/// `output_within` with stdout and stderr on `/dev/null`, for a command that leaves a daemon
/// behind (`ssh -f` starting a master), which must not inherit pipes Baton reads.
fn status_within(mut cmd: Command, timeout: Duration) -> io::Result<ExitStatus> {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + timeout.min(MAX_TIMEOUT);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            // SAFETY: plain syscall on the group of a child that `try_wait` just found running,
            // so it is not reaped and its pid still names this group.
            unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
            let _ = child.wait();
            return Err(timed_out(timeout));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Join `words` into one POSIX shell command line, each word quoted as `'…'` with each `'`
/// written as `'\''`: one word whatever it contains (`$(…)`, backquotes, quotes, newlines,
/// globs; NUL excepted: no argument can carry NUL).
pub fn shell_join<I, S>(words: I) -> OsString
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut out = Vec::new();
    for w in words {
        if !out.is_empty() {
            out.push(b' ');
        }
        out.push(b'\'');
        for &b in w.as_ref().as_bytes() {
            match b {
                b'\'' => out.extend_from_slice(b"'\\''"),
                _ => out.push(b),
            }
        }
        out.push(b'\'');
    }
    OsString::from_vec(out)
}

/// True for a portable environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_env_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && !b[0].is_ascii_digit()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
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
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
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

/// `baton check`'s probe script: `$1` = workspace root, `$2` = the agent command (operator shell
/// text, run as agents are: `bash -lc`). Prints the CLI's version line.
const PROBE: &str = r#"root=$1; agent=$2
mkdir -p -- "$root" 2>/dev/null && t=$(mktemp "$root/.baton-check.XXXXXX" 2>/dev/null) && rm -f -- "$t" || { echo "workspace.root $root is not writable" >&2; exit 3; }
v=$(bash -lc "$agent --version" </dev/null 2>&1) || { echo "agent CLI ($agent) did not run: $(printf '%s' "$v" | tail -n 1)" >&2; exit 4; }
printf '%s\n' "$v" | head -n 1
"#;

/// `baton check`'s per-host probe: SSH reachable, `workspace.root` writable, the agent CLI
/// present; `Ok(agent version)` or the first problem found.
pub fn probe_host(host: &SshHost, root: &Path, agent_command: &str) -> Result<String, String> {
    host.probe()?;
    let out = host.sh(PROBE, &[root.as_os_str(), OsStr::new(agent_command)])?;
    Ok(out.trim().to_string())
}

/// The runtime's SSH hosts by destination, created on first use and kept across reloads: one
/// shared [`SshHost`] per destination, so its multiplexing masters are reused.
#[derive(Debug)]
pub struct HostPool {
    /// Empty: no multiplexing.
    control_dir: PathBuf,
    hosts: Mutex<BTreeMap<String, Arc<SshHost>>>,
    /// Shared by every host: [`HostPool::configure`] reaches the existing ones too.
    settings: Arc<SshSettings>,
}

impl HostPool {
    /// A pool whose multiplexing sockets live in [`control_dir`] (without one when that
    /// directory cannot be made private: every `ssh` then does its own handshake).
    pub fn new() -> Self {
        let control_dir = control_dir()
            .inspect_err(|e| log::warn!("ssh multiplexing disabled: {e}"))
            .unwrap_or_default();
        HostPool {
            control_dir,
            hosts: Mutex::new(BTreeMap::new()),
            settings: Arc::default(),
        }
    }

    /// Apply `worker.ssh_command_timeout_ms` and `worker.ssh_sessions_per_connection` (at
    /// startup and on every reload).
    pub fn configure(&self, worker: &WorkerConfig) {
        self.settings.set(worker);
    }

    /// The host for a run: this machine for `None`, else the SSH host `destination`.
    pub fn get(&self, destination: Option<&str>) -> Arc<dyn Host> {
        match destination {
            None => LocalHost::shared(),
            Some(d) => self.ssh(d),
        }
    }

    pub fn ssh(&self, destination: &str) -> Arc<SshHost> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(hosts.entry(destination.to_string()).or_insert_with(|| {
            let h = SshHost::new(destination, &self.control_dir);
            Arc::new(h.with_settings(Arc::clone(&self.settings)))
        }))
    }

    /// Stop every multiplexing master (shutdown).
    pub fn close_all(&self) {
        let hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        hosts.values().for_each(|h| h.close());
    }
}

impl Default for HostPool {
    fn default() -> Self {
        HostPool::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// What `sh -c 'printf "%s\n" <quoted>'` prints for `word`.
    fn round_trip(word: &str) -> String {
        let mut script = OsString::from("printf '%s' ");
        script.push(shell_join([word]));
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env_clear()
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn hostile_words_survive_a_shell_unchanged() {
        for w in [
            "",
            "plain",
            "it's",
            "'",
            "''",
            "$(touch /tmp/baton-pwned)",
            "`id`",
            "a\nb\n",
            "\"double\" $HOME ${PATH} \\ \\' *?[a] ~ ; | & > <",
            "'; rm -rf / #",
            "-n",
        ] {
            assert_eq!(round_trip(w), w, "word {w:?}");
        }
    }

    #[test]
    fn join_is_one_word_each() {
        let line = shell_join(["printf", "%s|", "a b", "c'd", "$(x)"]);
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|c'd|$(x)|");
    }

    #[test]
    fn a_hung_daemon_starter_is_killed_at_the_timeout() {
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        let e = status_within(sleep, Duration::from_millis(100));
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn env_names() {
        assert!(is_env_name(OsStr::new("BATON_ISSUE_ID")));
        assert!(is_env_name(OsStr::new("_x1")));
        assert!(!is_env_name(OsStr::new("1X")));
        assert!(!is_env_name(OsStr::new("A=B")));
        assert!(!is_env_name(OsStr::new("")));
        assert!(!is_env_name(OsStr::new("A B")));
    }
}

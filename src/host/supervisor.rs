//! The one local process supervisor, used by hooks and agents alike (ARCHITECTURE.md, "Host
//! seam"). The child leads a **new process group**, stdin `/dev/null` (or a pipe,
//! `ProcessSpec::stdin_pipe`), its environment per the process-wide [`EnvPolicy`]; it is spawned
//! through std's `posix_spawn` path ([`find_program`]), in `cgroup` containment through a shim
//! that joins its own child cgroup first. One named thread per process ([`Watch`]) polls stdout,
//! stderr and a pidfd. The exit is detected *without reaping* (`waitid(WNOWAIT)`); the thread then
//! kills whatever is left in the group and the cgroup (no orphans), reaps the leader (no zombies)
//! and removes the cgroup. The leader stays a zombie until then, so its pgid cannot be reused
//! while [`Process::signal_group`] may still signal the group (checked under the lock the thread
//! holds while reaping).
//!
//! Without a cgroup, a grandchild that moves itself into another process group or session
//! (`setsid`) escapes group signals. The turn driver does not wait for such a process to close
//! stdout once the leader has exited.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, SendTimeoutError, Sender};

use super::cgroup::ProcCgroup;
use super::{Process, ProcessSpec, StdoutItem, StdoutMode};

/// Capacity of the stdout channel in lines (back-pressure on the child beyond this). A line over
/// [`SHRINK_ABOVE`] is only sent into an empty channel (see [`Watch::send_stdout`]), so at most one line
/// near the cap (10 MB) is ever queued per agent. (Measured: a capacity of 2 for every line costs
/// about 40 % of stream-json throughput in thread wake-ups.)
const LINE_CHANNEL_CAPACITY: usize = 16;
/// Line buffers that grew above this are shrunk back (to `SHRUNK_CAPACITY`) after the line.
const SHRINK_ABOVE: usize = 1024 * 1024;
const SHRUNK_CAPACITY: usize = 64 * 1024;

#[derive(Debug, Default)]
struct ExitState {
    reaped: bool,
    status: Option<ExitStatus>,
}

/// Every supervised group whose handle may still be alive: what a forced shutdown stops
/// ([`kill_live_groups`]). Entries of reaped or dropped processes are pruned as new ones come.
static LIVE: Mutex<Vec<(u32, Weak<Mutex<ExitState>>)>> = Mutex::new(Vec::new());

fn reaped(exit: &Mutex<ExitState>) -> bool {
    exit.lock().map_or(true, |s| s.reaped)
}

fn register_live(pid: u32, exit: &Arc<Mutex<ExitState>>) {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|(_, w)| w.upgrade().is_some_and(|e| !reaped(&e)));
    live.push((pid, Arc::downgrade(exit)));
}

/// SIGKILL every supervised process group whose leader is not reaped yet, then wait up to `wait`
/// for their watch threads to reap them (and end their cgroups). Returns how many groups were
/// signalled. For a forced shutdown: the process is about to exit with workers still running.
pub fn kill_live_groups(wait: Duration) -> usize {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    let exits: Vec<_> = (live.into_iter())
        .filter_map(|(pid, w)| {
            w.upgrade()
                .filter(|e| signal_unreaped(pid, e, libc::SIGKILL))
        })
        .collect();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && exits.iter().any(|e| !reaped(e)) {
        thread::sleep(Duration::from_millis(10));
    }
    exits.len()
}

/// `killpg(pid, signal)` unless the group's leader was reaped; true when sent.
fn signal_unreaped(pid: u32, exit: &Mutex<ExitState>, signal: i32) -> bool {
    let Ok(state) = exit.lock() else {
        return false;
    };
    // SAFETY: plain syscall; the leader is not reaped (checked under the lock the reaper holds
    // while reaping), so the pgid still names this group.
    !state.reaped && unsafe { libc::killpg(pid as libc::pid_t, signal) } == 0
}

/// Which inherited variables agents and hooks keep (`agent.env_remove`, `agent.env_keep_only`,
/// never the `server.webhook_secret` variable): one process-wide policy, set at startup and on
/// every valid reload, applied before a process's own `BATON_*` variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    pub remove: Vec<String>,
    /// When set, only these inherited variables are passed (then `remove` applies).
    pub keep_only: Option<Vec<String>>,
}

/// The current policy: inherit everything until one was set.
static ENV_POLICY: RwLock<EnvPolicy> = RwLock::new(EnvPolicy {
    remove: Vec::new(),
    keep_only: None,
});

/// Replace the process-wide policy (the daemon does this on startup and reload).
pub fn set_env_policy(policy: EnvPolicy) {
    *ENV_POLICY.write().unwrap_or_else(|p| p.into_inner()) = policy;
}

/// A local process group started by [`spawn`].
#[derive(Debug)]
pub(crate) struct LocalProcess {
    pid: u32,
    lines: Receiver<StdoutItem>,
    exit: Arc<Mutex<ExitState>>,
    exited: Receiver<()>,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    stderr_done: Receiver<()>,
    /// The write end of the child's stdin when it was piped ([`spawn_command`]): held open until
    /// the handle drops (the SSH host uses its EOF as "Baton is gone"), or lent out once by
    /// [`Process::take_stdin`] when the spec asked for a pipe.
    stdin: Mutex<Option<std::process::ChildStdin>>,
    lend_stdin: bool,
}

/// Launch `spec` locally (see the module docs). The one place a local agent's or hook's command
/// line and environment are built; [`spawn_command`] is the one place it is spawned.
pub(crate) fn spawn(spec: &ProcessSpec) -> io::Result<LocalProcess> {
    let program = find_program(&spec.shell)?;
    let cgroup = ProcCgroup::create(spec.label);
    let mut cmd = match &cgroup {
        Some(cg) => cg.command(&program),
        None => Command::new(&program),
    };
    let stdin = if spec.stdin_pipe {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    cmd.arg("-lc").arg(&spec.script).args(&spec.args);
    cmd.current_dir(&spec.cwd).stdin(stdin);
    let policy = ENV_POLICY.read().unwrap_or_else(|p| p.into_inner());
    if let Some(keep) = &policy.keep_only {
        cmd.env_clear();
        cmd.envs(keep.iter().filter_map(|k| Some((k, std::env::var_os(k)?))));
    }
    for k in &policy.remove {
        cmd.env_remove(k);
    }
    drop(policy);
    for k in &spec.env_remove {
        cmd.env_remove(k);
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    spawn_command(cmd, spec, cgroup, None)
}

/// `program` as a path: as given when it has a `/`, else the first executable file of that name
/// on Baton's `PATH`. An absolute program keeps std on its `posix_spawn` path even when the
/// environment policy sets `PATH`, and a missing one fails the spawn (not the shim's `exec`).
fn find_program(program: &OsStr) -> io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    if program.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let executable =
        |p: &PathBuf| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0);
    let mut found = std::env::split_paths(&path).map(|d| d.join(program));
    found.find(executable).ok_or_else(|| {
        let p = program.to_string_lossy();
        io::Error::new(io::ErrorKind::NotFound, format!("{p} not found on PATH"))
    })
}

/// Launch a prepared `cmd` (program, arguments, cwd, environment; stdin as the caller set it) as
/// the leader of a new process group, supervised with `spec`'s stdout mode, stderr tail and
/// label; `cgroup` (joined by `cmd`'s shim; `None` for the SSH client, whose work is remote) is
/// removed when it ends. A piped stdin is held open for the life of the handle unless
/// `spec.stdin_pipe` lends it out. With `first_line`, stdout's first line (at most
/// [`FIRST_LINE`] bytes: the SSH wrapper's `BATON_PGID` line) is sent there, not delivered.
pub(crate) fn spawn_command(
    mut cmd: Command,
    spec: &ProcessSpec,
    cgroup: Option<ProcCgroup>,
    first_line: Option<FirstLine>,
) -> io::Result<LocalProcess> {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // A failed spawn drops `cgroup`, which removes it.
    let mut child = cmd.spawn()?;
    let (pid, stdin) = (child.id(), child.stdin.take());
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(io::Error::other("stdio was not piped"));
    };
    let (line_tx, lines) = bounded(LINE_CHANNEL_CAPACITY);
    let (stderr_done_tx, stderr_done) = bounded(0);
    let (exited_tx, exited) = bounded(0);
    let (exit, stderr_tail) = (Arc::default(), Arc::default());
    register_live(pid, &exit);
    let watch = Watch {
        child,
        stdout: Some(Stdout {
            pipe: stdout,
            tx: line_tx,
            split: Splitter::new(spec.stdout),
            first: first_line.map(|tx| (tx, Vec::new())),
            out: VecDeque::new(),
            eof: false,
        }),
        stderr: Some(stderr),
        stderr_cap: spec.stderr_tail_bytes,
        tail: Arc::clone(&stderr_tail),
        stderr_done: Some(stderr_done_tx),
        exit: Arc::clone(&exit),
        exited: Some(exited_tx),
        cgroup,
    };
    // From here on the watch thread owns reaping (dropping a std `Child` never kills or waits).
    let thread = thread::Builder::new().name(format!("{}-{pid}", spec.label));
    if let Err(e) = thread.spawn(move || watch.run(pidfd_open(pid))) {
        // SAFETY: plain syscall on a group we just created and have not reaped.
        unsafe { libc::killpg(pid as libc::pid_t, libc::SIGKILL) };
        let e = format!("could not start a supervisor thread: {e}");
        return Err(io::Error::other(e));
    }
    Ok(LocalProcess {
        pid,
        lines,
        exit,
        exited,
        stderr_tail,
        stderr_done,
        stdin: Mutex::new(stdin),
        lend_stdin: spec.stdin_pipe,
    })
}

impl Process for LocalProcess {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn lines(&self) -> &Receiver<StdoutItem> {
        &self.lines
    }

    fn exited(&self) -> &Receiver<()> {
        &self.exited
    }

    fn exit_status(&self) -> Option<ExitStatus> {
        self.exit.lock().map(|s| s.status).unwrap_or(None)
    }

    fn has_exited(&self) -> bool {
        reaped(&self.exit)
    }

    fn start_time(&self) -> Option<u64> {
        super::orphan::leader_start_time(self.pid)
    }

    fn signal_group(&self, signal: i32) -> bool {
        signal_unreaped(self.pid, &self.exit, signal)
    }

    fn stderr_bytes(&self) -> Vec<u8> {
        let tail = self.stderr_tail.lock();
        tail.map_or_else(|_| Vec::new(), |b| b.iter().copied().collect())
    }

    fn stderr_done(&self) -> &Receiver<()> {
        &self.stderr_done
    }

    fn take_stdin(&self) -> Option<Box<dyn io::Write + Send>> {
        // A stdin that is not lent stays held: the SSH wrapper reads its EOF as "Baton is gone".
        if !self.lend_stdin {
            return None;
        }
        let stdin = self.stdin.lock().ok()?.take()?;
        Some(Box::new(stdin))
    }
}

impl Drop for LocalProcess {
    fn drop(&mut self) {
        if !self.has_exited() {
            self.terminate(Duration::from_millis(500));
        }
    }
}

/// Bytes read from a pipe at once. The buffer is allocated for each read and freed after it, so
/// an idle agent holds none (a 64 KiB buffer per process was most of the heap at scale).
const READ_BYTES: usize = 64 * 1024;
/// While the stdout channel is full, how long one send waits before stderr and the exit are
/// looked at again.
const SEND_WAIT: Duration = Duration::from_millis(20);
/// Reads of a busy stdout done before reaping a leader that already exited, so that its last
/// lines are queued before `exited` fires (the reap kills the rest of the group).
const DRAIN_BEFORE_REAP: u32 = 16;
/// Bytes and lines of small lines sent as one [`StdoutItem::Lines`] at most.
const BATCH_BYTES: usize = 64 * 1024;
const BATCH_LINES: usize = 256;

/// What stdout's bytes become: raw chunks, or lines of at most `max` bytes. A longer line is
/// never held in memory: it becomes [`StdoutItem::LineTooLong`] and is skipped up to the next
/// newline. The small lines finished in one read go as one [`StdoutItem::Lines`] batch: a fast
/// producer then costs one consumer wake-up per read instead of one per line (measured: most of
/// the stream-json CPU was wake-ups).
#[derive(Default)]
struct Splitter {
    chunks: bool,
    max: usize,
    line: Vec<u8>,
    /// Some(bytes seen) while skipping an overlong line.
    skipping: Option<usize>,
    batch: Vec<String>,
    batch_bytes: usize,
}

impl Splitter {
    fn new(mode: StdoutMode) -> Self {
        let (chunks, max) = match mode {
            StdoutMode::Lines { max_line_bytes } => (false, max_line_bytes.max(1)),
            StdoutMode::Chunks => (true, 1),
        };
        Splitter {
            chunks,
            max,
            ..Default::default()
        }
    }

    /// Queue the items of one read. Lines finished in it go as one batch, before the next read,
    /// so a line never waits for more output.
    fn feed(&mut self, mut chunk: &[u8], out: &mut VecDeque<StdoutItem>) {
        if self.chunks {
            return out.push_back(StdoutItem::Chunk(chunk.to_vec()));
        }
        while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            self.absorb(&chunk[..i]);
            let line = self.take_line();
            self.push(line, out);
            chunk = &chunk[i + 1..];
        }
        self.absorb(chunk);
        self.flush(out);
    }

    /// End of stdout (`error`: why reading failed): the unfinished line, then `Eof`.
    fn finish(&mut self, error: Option<String>, out: &mut VecDeque<StdoutItem>) {
        if !self.line.is_empty() || self.skipping.is_some() {
            let line = self.take_line();
            self.push(line, out);
        }
        if let Some(e) = error {
            self.push(StdoutItem::ReadError(e), out);
        }
        self.flush(out);
        out.push_back(StdoutItem::Eof);
    }

    fn absorb(&mut self, chunk: &[u8]) {
        if let Some(n) = &mut self.skipping {
            *n = n.saturating_add(chunk.len());
        } else if self.line.len().saturating_add(chunk.len()) > self.max {
            self.skipping = Some(self.line.len().saturating_add(chunk.len()));
            self.line = Vec::new(); // release the memory now
        } else {
            self.line.extend_from_slice(chunk);
        }
    }

    /// The finished line (or the overlong marker); the buffer is reset (and shrunk when big).
    fn take_line(&mut self) -> StdoutItem {
        if let Some(bytes) = self.skipping.take() {
            return StdoutItem::LineTooLong { bytes };
        }
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        let bytes = if self.line.capacity() > SHRINK_ABOVE {
            // Hand the big buffer itself over (no copy); the next line starts small again.
            let mut big = std::mem::replace(&mut self.line, Vec::with_capacity(SHRUNK_CAPACITY));
            big.shrink_to_fit();
            big
        } else {
            let copy = self.line.clone();
            self.line.clear();
            copy
        };
        let s = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        StdoutItem::Line(s)
    }

    /// Add a finished item: a small line joins the batch; anything else is queued after it.
    fn push(&mut self, item: StdoutItem, out: &mut VecDeque<StdoutItem>) {
        match item {
            StdoutItem::Line(l) if l.len() <= BATCH_BYTES => {
                self.batch_bytes = self.batch_bytes.saturating_add(l.len());
                self.batch.push(l);
                if self.batch_bytes >= BATCH_BYTES || self.batch.len() >= BATCH_LINES {
                    self.flush(out);
                }
            }
            other => {
                self.flush(out);
                out.push_back(other);
            }
        }
    }

    /// Queue the waiting lines (one as [`StdoutItem::Line`], more as [`StdoutItem::Lines`]).
    fn flush(&mut self, out: &mut VecDeque<StdoutItem>) {
        self.batch_bytes = 0;
        match self.batch.len() {
            0 => {}
            1 => out.extend(self.batch.pop().map(StdoutItem::Line)),
            _ => out.push_back(StdoutItem::Lines(std::mem::take(&mut self.batch))),
        }
    }
}

/// Where stdout's first line goes instead of the line channel (see [`spawn_command`]).
pub(crate) type FirstLine = Sender<Vec<u8>>;
/// The longest first line taken, its newline included.
pub(crate) const FIRST_LINE: usize = 65;

/// The stdout side of [`Watch`]. `out` holds at most one read's items: the pipe is only read
/// again once they are all in the channel (back-pressure on the child).
struct Stdout {
    pipe: ChildStdout,
    tx: Sender<StdoutItem>,
    split: Splitter,
    /// Where the first line goes while it is still to come, and its bytes so far.
    first: Option<(FirstLine, Vec<u8>)>,
    out: VecDeque<StdoutItem>,
    eof: bool,
}

impl Stdout {
    /// Queue what one read brought (empty: EOF).
    fn take(&mut self, chunk: &[u8]) {
        let eof = chunk.is_empty();
        let mut rest = chunk;
        if let Some((tx, line)) = &mut self.first {
            let head = &chunk[..chunk.len().min(FIRST_LINE - line.len())];
            let end = head.iter().position(|&b| b == b'\n');
            let end = end.map_or(head.len(), |i| i + 1);
            line.extend_from_slice(&head[..end]);
            rest = &chunk[end..];
            if !(eof || line.ends_with(b"\n") || line.len() >= FIRST_LINE) {
                return;
            }
            let _ = tx.send(std::mem::take(line));
            self.first = None;
        }
        if !rest.is_empty() {
            self.split.feed(rest, &mut self.out);
        }
        if eof {
            self.split.finish(None, &mut self.out);
            self.eof = true;
        }
    }
}

/// Poll interval for the leader's exit when no pidfd is available.
const EXIT_POLL_MS: libc::c_int = 50;

/// The one thread per process (see the module docs). It reads both pipes until EOF; while the
/// line channel is full it stops reading stdout but still keeps stderr's tail and sees the exit.
struct Watch {
    /// The leader, reaped only by [`Watch::reap`].
    child: Child,
    /// Dropped at EOF once everything is sent, or when the receiver is gone.
    stdout: Option<Stdout>,
    /// Dropped at EOF (or a read error).
    stderr: Option<ChildStderr>,
    stderr_cap: usize,
    tail: Arc<Mutex<VecDeque<u8>>>,
    /// Dropped at stderr EOF.
    stderr_done: Option<Sender<()>>,
    exit: Arc<Mutex<ExitState>>,
    /// Dropped once the leader is reaped.
    exited: Option<Sender<()>>,
    cgroup: Option<ProcCgroup>,
}

impl Watch {
    /// The poll loop; without a `pidfd` (`pidfd_open`), a timeout and `WNOHANG`.
    fn run(mut self, pidfd: Option<OwnedFd>) {
        let mut drained = 0;
        loop {
            let full = self.send_stdout();
            if self.stdout.is_none() && self.stderr.is_none() && self.exited.is_none() {
                return;
            }
            let poll = |fd: Option<i32>| libc::pollfd {
                fd: fd.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            };
            let stdout = self.stdout.as_ref().filter(|s| !full && !s.eof);
            let pid_fd = pidfd.as_ref().filter(|_| self.exited.is_some());
            let mut fds = [
                poll(stdout.map(|s| s.pipe.as_raw_fd())),
                poll(self.stderr.as_ref().map(AsRawFd::as_raw_fd)),
                poll(pid_fd.map(AsRawFd::as_raw_fd)),
            ];
            let timeout = match () {
                _ if full => 0,
                _ if self.exited.is_none() || pidfd.is_some() => -1,
                _ => EXIT_POLL_MS,
            };
            // SAFETY: `fds` is a valid array of three pollfd; negative fds are ignored by poll.
            if retry(|| unsafe { libc::poll(fds.as_mut_ptr(), 3, timeout) }).is_err() {
                thread::sleep(Duration::from_millis(10)); // ENOMEM: try again
                continue;
            }
            let stdout_ready = fds[0].revents != 0;
            if stdout_ready {
                self.read_stdout();
            }
            if fds[1].revents != 0 && !self.read_stderr() {
                self.stderr = None;
                self.stderr_done.take();
            }
            if self.exited.is_some() && (pidfd.is_none() || fds[2].revents != 0) {
                if stdout_ready && drained < DRAIN_BEFORE_REAP {
                    drained += 1;
                } else if self.leader_exited() {
                    self.reap();
                }
            }
        }
    }

    /// Send stdout's queued items. True while some wait for room: the first one was offered
    /// for [`SEND_WAIT`] (or for as long as it takes once stderr and the exit are done).
    fn send_stdout(&mut self) -> bool {
        let patient = self.stderr.is_none() && self.exited.is_none();
        let Some(s) = &mut self.stdout else {
            return false;
        };
        while let Some(item) = s.out.pop_front() {
            // A line over SHRINK_ABOVE only goes into an empty channel (the consumer took every
            // earlier line, or is gone), so big lines never pile up in the queue.
            let sent = if matches!(&item, StdoutItem::Line(l) if l.len() > SHRINK_ABOVE)
                && !s.tx.is_empty()
            {
                thread::sleep(Duration::from_millis(1));
                Err(SendTimeoutError::Timeout(item))
            } else if patient {
                s.tx.send(item)
                    .map_err(|e| SendTimeoutError::Disconnected(e.0))
            } else {
                s.tx.send_timeout(item, SEND_WAIT)
            };
            match sent {
                Ok(()) => {}
                Err(SendTimeoutError::Timeout(item)) => {
                    s.out.push_front(item);
                    return true;
                }
                Err(SendTimeoutError::Disconnected(_)) => {
                    self.stdout = None;
                    return false;
                }
            }
        }
        if s.eof {
            self.stdout = None;
        }
        false
    }

    /// One read of stdout into its queue.
    fn read_stdout(&mut self) {
        let Some(s) = &mut self.stdout else {
            return;
        };
        match read_fd(&s.pipe) {
            Ok(buf) => s.take(&buf),
            Err(e) => {
                s.split.finish(Some(e.to_string()), &mut s.out);
                s.eof = true;
            }
        }
    }

    /// One read of stderr into the tail; false at EOF or on an error.
    fn read_stderr(&mut self) -> bool {
        let Some(Ok(buf)) = self.stderr.as_ref().map(read_fd) else {
            return false;
        };
        if let Ok(mut t) = self.tail.lock() {
            t.extend(&buf);
            let excess = t.len().saturating_sub(self.stderr_cap);
            t.drain(..excess);
        }
        !buf.is_empty()
    }

    /// True once the leader exited, *without reaping it* (`waitid(WNOWAIT | WNOHANG)`); also
    /// true when it cannot be waited for (ECHILD…), so the reaping attempt runs.
    fn leader_exited(&self) -> bool {
        let (pid, flags) = (
            self.child.id(),
            libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
        );
        // SAFETY: zeroed siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain syscall on our own child.
        match retry(|| unsafe { libc::waitid(libc::P_PID, pid, &mut info, flags) }) {
            // SAFETY: waitid filled `info` (si_pid stays 0 when WNOHANG found nothing).
            Ok(_) => unsafe { info.si_pid() != 0 },
            Err(_) => true,
        }
    }

    /// Kill the rest of the exited leader's group (and of its cgroup, which also reaches
    /// `setsid`'d descendants), then reap it and remove the cgroup. The leader is a zombie until
    /// then, so its pgid cannot be reused while [`Process::signal_group`] may still signal it.
    fn reap(&mut self) {
        let mut guard = self.exit.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: plain syscall; the leader is unreaped, so the pgid is still ours.
        unsafe { libc::killpg(self.child.id() as libc::pid_t, libc::SIGKILL) };
        if let Some(cg) = &self.cgroup {
            cg.kill();
        }
        guard.status = self.child.wait().ok(); // `waitpid`, retried on EINTR
        guard.reaped = true;
        drop(guard);
        self.cgroup = None; // its drop removes it once empty
        self.exited.take();
    }
}

/// `call` (a libc call: negative with `errno` set on failure), retried while it fails with EINTR.
fn retry<T: Default + PartialOrd>(mut call: impl FnMut() -> T) -> io::Result<T> {
    loop {
        let r = call();
        if r >= T::default() {
            return Ok(r);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One `read(2)` of up to [`READ_BYTES`] into a new buffer (empty at EOF), retried on EINTR.
fn read_fd(fd: &impl AsRawFd) -> io::Result<Vec<u8>> {
    let mut buf = Vec::<u8>::with_capacity(READ_BYTES);
    let (fd, ptr) = (fd.as_raw_fd(), buf.as_mut_ptr());
    // SAFETY: the kernel writes at most `READ_BYTES` (the capacity) bytes into the buffer.
    let n = retry(|| unsafe { libc::read(fd, ptr.cast(), READ_BYTES) })?;
    // SAFETY: the first `n` bytes were just written by the kernel.
    unsafe { buf.set_len(n.unsigned_abs()) };
    Ok(buf)
}

/// A pidfd for our (unreaped) child, when the kernel has `pidfd_open` (Linux ≥ 5.3).
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a new fd that we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    let fd = libc::c_int::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The items `mode` makes of `input` read at once, then EOF.
    fn split(input: &[u8], mode: StdoutMode) -> VecDeque<StdoutItem> {
        let (mut split, mut out) = (Splitter::new(mode), VecDeque::new());
        split.feed(input, &mut out);
        split.finish(None, &mut out);
        out
    }

    /// The items of `input`, batches split back into lines.
    fn collect(input: &[u8], max: usize) -> Vec<StdoutItem> {
        split(
            input,
            StdoutMode::Lines {
                max_line_bytes: max,
            },
        )
        .into_iter()
        .flat_map(|i| match i {
            StdoutItem::Lines(ls) => ls.into_iter().map(StdoutItem::Line).collect(),
            other => vec![other],
        })
        .collect()
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
    fn buffer_shrinks_after_a_big_line() {
        let mut buf = Splitter::new(StdoutMode::Lines {
            max_line_bytes: 10 * 1024 * 1024,
        });
        buf.absorb(&vec![b'x'; 3 * 1024 * 1024]);
        assert!(buf.line.capacity() >= 3 * 1024 * 1024);
        assert!(matches!(buf.take_line(), StdoutItem::Line(s) if s.len() == 3 * 1024 * 1024));
        assert!(
            buf.line.capacity() <= SHRUNK_CAPACITY,
            "{}",
            buf.line.capacity()
        );
        buf.absorb(b"ok");
        assert_eq!(buf.take_line(), StdoutItem::Line("ok".into()));
    }

    #[test]
    fn lines_read_together_are_sent_together_and_big_lines_alone() {
        let mut input = b"a\nb\n".to_vec();
        input.extend(vec![b'x'; BATCH_BYTES + 1]);
        input.extend_from_slice(b"\nc\n");
        let items = Vec::from(split(
            &input,
            StdoutMode::Lines {
                max_line_bytes: 1 << 20,
            },
        ));
        assert_eq!(
            items.len(),
            4,
            "{:?}",
            items
                .iter()
                .map(|i| match i {
                    StdoutItem::Line(l) => l.len(),
                    StdoutItem::Lines(ls) => ls.len(),
                    _ => 0,
                })
                .collect::<Vec<_>>()
        );
        assert_eq!(items[0], StdoutItem::Lines(vec!["a".into(), "b".into()]));
        assert!(matches!(&items[1], StdoutItem::Line(l) if l.len() == BATCH_BYTES + 1));
        assert_eq!(items[2..], [StdoutItem::Line("c".into()), StdoutItem::Eof]);
    }

    /// A child of `sh -c script` in its own group, and the channels of its [`Watch`].
    struct Watched {
        watch: Watch,
        lines: Receiver<StdoutItem>,
        exited: Receiver<()>,
        stderr_done: Receiver<()>,
        exit: Arc<Mutex<ExitState>>,
        tail: Arc<Mutex<VecDeque<u8>>>,
    }

    fn watched(script: &str, stderr_cap: usize) -> Watched {
        let mut child = Command::new("/bin/sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh starts");
        let (line_tx, lines) = bounded(LINE_CHANNEL_CAPACITY);
        let (stderr_done_tx, stderr_done) = bounded::<()>(0);
        let (exited_tx, exited) = bounded::<()>(0);
        let exit = Arc::new(Mutex::new(ExitState::default()));
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let mode = StdoutMode::Lines {
            max_line_bytes: 1 << 20,
        };
        let watch = Watch {
            stdout: Some(Stdout {
                pipe: child.stdout.take().expect("piped"),
                tx: line_tx,
                split: Splitter::new(mode),
                first: None,
                out: VecDeque::new(),
                eof: false,
            }),
            stderr: child.stderr.take(),
            child,
            stderr_cap,
            tail: Arc::clone(&tail),
            stderr_done: Some(stderr_done_tx),
            exit: Arc::clone(&exit),
            exited: Some(exited_tx),
            cgroup: None,
        };
        Watched {
            watch,
            lines,
            exited,
            stderr_done,
            exit,
            tail,
        }
    }

    /// Every line of `lines` up to `Eof` (which must come), batches split.
    fn lines_until_eof(lines: &Receiver<StdoutItem>) -> Vec<String> {
        let mut got = Vec::new();
        loop {
            match lines
                .recv_timeout(Duration::from_secs(10))
                .expect("Eof comes")
            {
                StdoutItem::Line(l) => got.push(l),
                StdoutItem::Lines(ls) => got.extend(ls),
                StdoutItem::Eof => return got,
                other => panic!("{other:?}"),
            }
        }
    }

    /// The one thread's loop on this thread, with and without a pidfd: it delivers stdout's
    /// lines, keeps the stderr tail, reaps the leader with its status, and closes every channel.
    #[test]
    fn one_thread_reads_stdout_keeps_the_stderr_tail_and_reaps() {
        for with_pidfd in [true, false] {
            let w = watched(
                "echo out1; echo one >&2; echo out2; echo two-three >&2; exit 3",
                8,
            );
            let pidfd = if with_pidfd {
                pidfd_open(w.watch.child.id())
            } else {
                None
            };
            w.watch.run(pidfd);
            let state = w.exit.lock().unwrap();
            assert!(state.reaped);
            assert_eq!(state.status.and_then(|s| s.code()), Some(3));
            let tail: Vec<u8> = w.tail.lock().unwrap().iter().copied().collect();
            assert_eq!(tail, b"o-three\n");
            assert_eq!(lines_until_eof(&w.lines), ["out1", "out2"]);
            assert!(w.exited.recv().is_err() && w.stderr_done.recv().is_err());
            assert!(w.lines.recv().is_err(), "the line channel closes");
        }
    }

    /// Nobody reads the line channel: it fills (one line per item: each is over BATCH_BYTES),
    /// stdout is no longer read, but stderr and the leader's exit still are; the lines all come
    /// once they are taken.
    #[test]
    fn a_full_line_channel_still_sees_stderr_and_the_exit() {
        let n = LINE_CHANNEL_CAPACITY + 1;
        let script = format!(
            "i=0; while [ $i -lt {n} ]; do head -c {} /dev/zero | tr '\\0' x; echo; i=$((i+1)); done; echo bye >&2; exit 4",
            BATCH_BYTES + 1
        );
        let w = watched(&script, 64);
        let watch = w.watch;
        let pidfd = pidfd_open(watch.child.id());
        let thread = thread::spawn(move || watch.run(pidfd));
        assert!(
            w.exited.recv_timeout(Duration::from_secs(20)).is_err(),
            "exited fires"
        );
        assert_eq!(
            w.exit.lock().unwrap().status.and_then(|s| s.code()),
            Some(4)
        );
        assert!(w.stderr_done.recv_timeout(Duration::from_secs(10)).is_err());
        assert_eq!(
            w.tail.lock().unwrap().iter().copied().collect::<Vec<_>>(),
            b"bye\n"
        );
        assert_eq!(
            w.lines.len(),
            LINE_CHANNEL_CAPACITY,
            "nothing was taken yet"
        );
        let got = lines_until_eof(&w.lines);
        assert_eq!(got.len(), n);
        assert!(got.iter().all(|l| l.len() == BATCH_BYTES + 1));
        thread.join().unwrap();
    }

    #[test]
    fn chunks_mode_forwards_raw_bytes() {
        let items = Vec::from(split(b"no newline", StdoutMode::Chunks));
        assert_eq!(
            items,
            vec![StdoutItem::Chunk(b"no newline".to_vec()), StdoutItem::Eof]
        );
    }
}

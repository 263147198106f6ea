//! The one turn driver for CLI agents: [`run_invocation`] spawns one invocation through a
//! [`Host`], feeds its stdout lines to the adapter's [`TurnParser`], enforces the deadline and the
//! [`CancelToken`], stops the process group and returns one [`ProcessEnd`].
//!
//! An invocation ends at stdout EOF *and* the leader reaped; or at the result line *and* the leader
//! reaped (a descendant that left the group with `setsid` may hold stdout open: not waited for);
//! or at the deadline or a cancel (the group is stopped). Either half alone waits at most
//! [`EXIT_WAIT_AFTER_EOF`] for the other once the result line arrived.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, Receiver, TryRecvError};

use super::loose::one_line;
use super::{
    AgentError, AgentErrorKind as K, AgentEvent, AgentEventKind, CancelToken, Emit, TokenUsage,
    TurnResult,
};
use crate::host::{describe_exit, Host, Process, ProcessSpec, StdoutItem};

pub(crate) const EXIT_WAIT_AFTER_EOF: Duration = Duration::from_secs(10);
/// Stdout items handled per wake-up before the cancel and deadline checks run again.
const LINES_PER_PASS: usize = 64;
/// How long to wait for stderr to close after the end, so the tail is complete.
const STDERR_WAIT: Duration = Duration::from_millis(500);

/// An adapter's parser of one invocation: the driver feeds it lines, the shared session
/// ([`super::runner`]) reads the outcome, usage and session id from it afterwards.
pub trait TurnParser {
    /// Events right after the process started (Copilot's stream announces no session); `stdin`
    /// is the child's when the spec asked for a pipe and the host gave one (Codex talks back).
    fn started(&mut self, _stdin: Option<Box<dyn std::io::Write + Send>>) -> Vec<AgentEvent> {
        Vec::new()
    }
    /// The events of one stdout line; a bad line is `malformed`, never a panic.
    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent>;
    /// An event stamped and bounded like the parser's own.
    fn event(&self, kind: AgentEventKind, summary: &str) -> AgentEvent;
    /// True once the invocation's terminal line arrived.
    fn result_seen(&self) -> bool;
    /// The turn result from what was parsed and how the process ended.
    fn outcome(&self, end: &ProcessEnd) -> TurnResult;
    /// This invocation's usage delta, when the CLI reported one.
    fn usage(&self) -> Option<TokenUsage>;
    /// Session-cumulative cost in USD (only Claude Code reports one).
    fn cost(&self) -> Option<f64> {
        None
    }
    /// The session id the CLI reported (Claude's init line, Codex's thread).
    fn session(&self) -> Option<&str> {
        None
    }
    /// Whether the CLI now has the session, so the next turn resumes it.
    fn stored(&self) -> bool {
        self.session().is_some()
    }
    /// A `--resume` of a session the CLI does not know: the turn falls back once to a new one.
    fn unknown_resume(&self, _end: &ProcessEnd) -> bool {
        false
    }
    /// Text that ends the `turn_completed` summary (Claude's result text).
    fn result_text(&self) -> Option<String> {
        None
    }
    /// A deadline of the adapter's own (a silence or reply bound) instead of the turn's; past it
    /// the end is `timed_out`. An adapter that returns one opts out of `turn_timeout_ms`'s total
    /// cap (only Codex does: its stream has no total cap).
    fn deadline(&self) -> Option<Instant> {
        None
    }
}

/// How an invocation ended (the one end state every adapter maps to an outcome).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessEnd {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Baton cancelled the turn; the group was stopped.
    pub cancelled: bool,
    /// The deadline passed; the group was stopped.
    pub timed_out: bool,
    /// The last part of stderr (bounded), for error messages.
    pub stderr_tail: String,
}

impl ProcessEnd {
    /// `exit code 1`, `killed by signal 15` or `unknown exit`.
    pub fn describe(&self) -> String {
        describe_exit(self.exit_code, self.signal)
    }

    /// `; stderr: <tail>` (one line, bounded), or nothing without stderr.
    pub(crate) fn stderr_note(&self) -> String {
        match self.stderr_tail.is_empty() {
            true => String::new(),
            false => format!("; stderr: {}", one_line(&self.stderr_tail, 500)),
        }
    }

    /// Baton's own stop (cancel or `turn_timeout_ms`), which decides the outcome first.
    pub(crate) fn stopped(&self) -> Option<AgentError> {
        let (kind, text) = match (self.cancelled, self.timed_out) {
            (true, _) => (K::TurnCancelled, "turn cancelled"),
            (_, true) => (
                K::TurnTimeout,
                "turn_timeout_ms exceeded; process group killed",
            ),
            _ => return None,
        };
        Some(AgentError::new(kind, text))
    }

    /// The error of an invocation that printed no result line.
    pub(crate) fn without_result(&self) -> AgentError {
        let (exit, stderr) = (self.describe(), self.stderr_note());
        let (kind, text) = match self.exit_code {
            Some(127) => (
                K::AgentNotFound,
                format!("agent command not found (exit code 127){stderr}"),
            ),
            Some(0) => (
                K::ParseError,
                format!("process exited 0 without a result line{stderr}"),
            ),
            _ => (
                K::ProcessExit,
                format!("process ended without a result line ({exit}){stderr}"),
            ),
        };
        AgentError::new(kind, text)
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub deadline: Instant,
    /// Between SIGTERM and SIGKILL when stopping the group.
    pub kill_grace: Duration,
}

/// Run one invocation of `spec` on `host` to its end (see the module docs); every event gets the
/// agent's pid and start time. Fails only when the process could not be started.
pub(crate) fn run_invocation(
    host: &dyn Host,
    spec: &ProcessSpec,
    parser: &mut dyn TurnParser,
    limits: Limits,
    cancel: &CancelToken,
    emit: &mut Emit,
) -> Result<(ProcessEnd, u32), AgentError> {
    let proc = host.spawn(spec).map_err(|e| {
        let text = format!("could not start {:?}: {e}", spec.shell);
        AgentError::new(K::StartupFailed, text)
    })?;
    let (pid, start) = (proc.pid(), proc.start_time());
    let mut emit = |mut ev: AgentEvent| {
        ev.agent_pid.get_or_insert(pid);
        ev.agent_start_time = ev.agent_start_time.or(start);
        emit(ev);
    };
    for ev in parser.started(proc.take_stdin()) {
        emit(ev);
    }
    let mut end = pump(proc.as_ref(), parser, limits, cancel, &mut emit);
    if let Some(st) = proc.exit_status() {
        end.exit_code = st.code();
        end.signal = st.signal();
    }
    end.stderr_tail = proc.stderr_tail_after(STDERR_WAIT);
    Ok((end, pid))
}

/// The read/wait loop: returns with the leader reaped (or given up on after SIGKILL).
fn pump(
    proc: &dyn Process,
    parser: &mut dyn TurnParser,
    limits: Limits,
    cancel: &CancelToken,
    emit: &mut dyn FnMut(AgentEvent),
) -> ProcessEnd {
    let mut lines = proc.lines().clone();
    let mut exited = proc.exited().clone();
    let mut eof_at: Option<Instant> = None;
    let mut exited_at: Option<Instant> = None;
    let stop = |how: fn(&mut ProcessEnd)| {
        proc.terminate(limits.kill_grace);
        let mut end = ProcessEnd::default();
        how(&mut end);
        end
    };
    loop {
        if cancel.is_cancelled() {
            return stop(|e| e.cancelled = true);
        }
        if exited_at.is_some() && (eof_at.is_some() || parser.result_seen()) {
            // Lines already queued still count; a setsid'd holder of stdout is not waited for.
            while let Ok(item) = lines.try_recv() {
                feed(parser, item, emit);
            }
            return stop(|_| {});
        }
        let deadline = parser.deadline().unwrap_or(limits.deadline);
        let limit = match (eof_at, exited_at) {
            (Some(t), None) if parser.result_seen() => deadline.min(t + EXIT_WAIT_AFTER_EOF),
            (_, Some(t)) => deadline.min(t + EXIT_WAIT_AFTER_EOF),
            _ => deadline,
        };
        let now = Instant::now();
        if now >= limit {
            if now >= deadline {
                return stop(|e| e.timed_out = true);
            }
            // Stdout closed but the process lingers, or it exited but stdout stays open.
            return stop(|_| {});
        }
        select! {
            recv(lines) -> item => {
                if feed_queued(&lines, item.ok(), parser, emit) {
                    eof_at = Some(Instant::now());
                    lines = never();
                }
            }
            recv(exited) -> _ => {
                exited_at = Some(Instant::now());
                exited = never();
            }
            recv(cancel.receiver()) -> _ => {}
            recv(after(limit - now)) -> _ => {}
        }
    }
}

/// Feed `first` and the items already queued behind it, up to [`LINES_PER_PASS`] in all (fewer
/// wake-ups and timers per line). True once stdout ended (`Eof`, or the reader is gone).
fn feed_queued(
    lines: &Receiver<StdoutItem>,
    first: Option<StdoutItem>,
    parser: &mut dyn TurnParser,
    emit: &mut dyn FnMut(AgentEvent),
) -> bool {
    let mut item = first;
    for taken in 1..=LINES_PER_PASS {
        match item {
            Some(StdoutItem::Eof) | None => return true,
            Some(i) => feed(parser, i, emit),
        }
        if taken == LINES_PER_PASS {
            break;
        }
        match lines.try_recv() {
            Ok(next) => item = Some(next),
            Err(TryRecvError::Empty) => break,
            Err(TryRecvError::Disconnected) => return true,
        }
    }
    false
}

fn feed(parser: &mut dyn TurnParser, item: StdoutItem, emit: &mut dyn FnMut(AgentEvent)) {
    let malformed = |p: &dyn TurnParser, s: String| p.event(AgentEventKind::Malformed, &s);
    let lines = match &item {
        StdoutItem::Line(l) => std::slice::from_ref(l),
        StdoutItem::Lines(ls) => ls.as_slice(),
        StdoutItem::LineTooLong { bytes } => {
            let text = format!("stdout line too long ({bytes} bytes), skipped");
            return emit(malformed(parser, text));
        }
        StdoutItem::ReadError(e) => {
            return emit(malformed(parser, format!("stdout read error: {e}")));
        }
        StdoutItem::Chunk(_) | StdoutItem::Eof => return,
    };
    for line in lines {
        for ev in parser.parse_line(line) {
            emit(ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{BeforeRemove, Removal, Workspace, WorkspaceError};
    use crossbeam_channel::{bounded, Receiver, Sender};
    use std::path::{Path, PathBuf};
    use std::process::ExitStatus;
    use std::sync::{Arc, Mutex};

    /// A process that is not a local child: what a remote host would hand back.
    #[derive(Debug)]
    struct Scripted {
        lines: Receiver<StdoutItem>,
        exited: Receiver<()>,
        exit_tx: Mutex<Option<Sender<()>>>,
        status: Mutex<Option<ExitStatus>>,
        signals: Arc<Mutex<Vec<i32>>>,
        stderr_done: Receiver<()>,
    }

    impl Process for Scripted {
        fn pid(&self) -> u32 {
            4242
        }
        fn lines(&self) -> &Receiver<StdoutItem> {
            &self.lines
        }
        fn exited(&self) -> &Receiver<()> {
            &self.exited
        }
        fn exit_status(&self) -> Option<ExitStatus> {
            *self.status.lock().unwrap()
        }
        fn has_exited(&self) -> bool {
            self.status.lock().unwrap().is_some()
        }
        fn signal_group(&self, signal: i32) -> bool {
            self.signals.lock().unwrap().push(signal);
            if !self.has_exited() {
                *self.status.lock().unwrap() = Some(ExitStatus::from_raw(signal));
                self.exit_tx.lock().unwrap().take();
            }
            true
        }
        fn stderr_bytes(&self) -> Vec<u8> {
            b"remote stderr".to_vec()
        }
        fn stderr_done(&self) -> &Receiver<()> {
            &self.stderr_done
        }
    }

    /// A host whose one process is scripted by the test.
    #[derive(Debug)]
    struct ScriptedHost(Mutex<Option<Scripted>>);

    impl Host for ScriptedHost {
        fn create_workspace(&self, _: &Path, _: &Path) -> Result<Workspace, WorkspaceError> {
            unimplemented!()
        }
        fn check_workspace(&self, _: &Path, p: &Path) -> Result<PathBuf, WorkspaceError> {
            Ok(p.to_path_buf())
        }
        fn remove_workspace(&self, _: &Path, _: &Path, _: &mut BeforeRemove) -> Removal {
            unimplemented!()
        }
        fn spawn(&self, _: &ProcessSpec) -> std::io::Result<Box<dyn Process>> {
            Ok(Box::new(self.0.lock().unwrap().take().unwrap()))
        }
    }

    struct Lines {
        seen: Vec<String>,
    }

    impl TurnParser for Lines {
        fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
            self.seen.push(line.to_string());
            vec![AgentEvent::new(AgentEventKind::OtherMessage, line)]
        }
        fn event(&self, kind: AgentEventKind, summary: &str) -> AgentEvent {
            AgentEvent::new(kind, summary)
        }
        fn result_seen(&self) -> bool {
            self.seen.iter().any(|l| l == "result")
        }
        fn outcome(&self, _: &ProcessEnd) -> TurnResult {
            Ok(())
        }
        fn usage(&self) -> Option<TokenUsage> {
            None
        }
    }

    type Script = (ScriptedHost, Sender<StdoutItem>, Arc<Mutex<Vec<i32>>>);

    fn scripted() -> Script {
        let (line_tx, lines) = bounded(16);
        let (exit_tx, exited) = bounded(0);
        let (_, stderr_done) = bounded::<()>(0);
        let signals = Arc::new(Mutex::new(Vec::new()));
        let p = Scripted {
            lines,
            exited,
            exit_tx: Mutex::new(Some(exit_tx)),
            status: Mutex::new(None),
            signals: Arc::clone(&signals),
            stderr_done,
        };
        (ScriptedHost(Mutex::new(Some(p))), line_tx, signals)
    }

    fn limits(ms: u64) -> Limits {
        Limits {
            deadline: Instant::now() + Duration::from_millis(ms),
            kill_grace: Duration::from_millis(50),
        }
    }

    /// Run a `Lines` invocation on the scripted host (events dropped).
    fn run_lines(host: &ScriptedHost, ms: u64, cancel: &CancelToken) -> ProcessEnd {
        let spec = ProcessSpec::command("x", "/");
        let mut parser = Lines { seen: Vec::new() };
        let ran = run_invocation(host, &spec, &mut parser, limits(ms), cancel, &mut |_| {});
        ran.unwrap().0
    }

    #[test]
    fn result_then_exit_ends_the_turn_while_stdout_stays_open() {
        let (host, tx, _signals) = scripted();
        tx.send(StdoutItem::Line("init".into())).unwrap();
        tx.send(StdoutItem::Line("result".into())).unwrap();
        // The leader exits (status 0) but stdout never reaches EOF: `tx` stays alive.
        {
            let guard = host.0.lock().unwrap();
            let p = guard.as_ref().unwrap();
            *p.status.lock().unwrap() = Some(ExitStatus::from_raw(0));
            p.exit_tx.lock().unwrap().take();
        }
        let mut parser = Lines { seen: Vec::new() };
        let mut events = Vec::new();
        let spec = ProcessSpec::command("x", "/");
        let (end, pid) = run_invocation(
            &host,
            &spec,
            &mut parser,
            limits(60_000),
            &CancelToken::new(),
            &mut |e| events.push(e),
        )
        .unwrap();
        assert_eq!(pid, 4242);
        assert_eq!(end.exit_code, Some(0));
        assert!(!end.timed_out && !end.cancelled);
        assert_eq!(end.stderr_tail, "remote stderr");
        assert_eq!(parser.seen, ["init", "result"]);
        assert!(events.iter().all(|e| e.agent_pid == Some(4242)));
        drop(tx);
    }

    #[test]
    fn every_queued_line_and_batch_is_fed() {
        let (tx, rx) = bounded(1024);
        for i in 0..300 {
            let item = if i % 3 == 0 {
                StdoutItem::Lines(vec![format!("{i}a"), format!("{i}b")])
            } else {
                StdoutItem::Line(i.to_string())
            };
            tx.send(item).unwrap();
        }
        tx.send(StdoutItem::Eof).unwrap();
        let mut parser = Lines { seen: Vec::new() };
        let mut passes = 0;
        let mut first = rx.recv().ok();
        while !feed_queued(&rx, first, &mut parser, &mut |_| {}) {
            passes += 1;
            first = rx.recv().ok();
        }
        assert_eq!(parser.seen.len(), 400);
        assert_eq!(parser.seen[..3], ["0a", "0b", "1"]);
        assert_eq!(passes, 300 / LINES_PER_PASS);
    }

    #[test]
    fn cancel_signals_the_group_through_the_process_handle() {
        let (host, tx, signals) = scripted();
        let cancel = CancelToken::new();
        cancel.cancel();
        let end = run_lines(&host, 60_000, &cancel);
        assert!(end.cancelled);
        assert_eq!(signals.lock().unwrap().first(), Some(&libc::SIGTERM));
        drop(tx);
    }

    #[test]
    fn deadline_times_out_and_stops_the_group() {
        let (host, tx, signals) = scripted();
        let end = run_lines(&host, 0, &CancelToken::new());
        assert!(end.timed_out);
        assert_eq!(signals.lock().unwrap().first(), Some(&libc::SIGTERM));
        drop(tx);
    }
}

//! The one session every CLI agent shares. An adapter is a [`Cli`]: its argv/env and its stream
//! parser. [`CliRunner`] runs the turns of all four the same way: the workspace re-checked, one
//! invocation through the turn driver, one fallback to a new session when the CLI does not know
//! the one resumed, the CLI's session id adopted, one terminal event with the usage delta.

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt::Debug;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{AgentKind, CliSection};
use super::driver::{run_invocation, Limits, ProcessEnd, TurnParser};
use super::loose::{one_line, SUMMARY_MAX};
use super::{
    check_cwd_on, usable_session_id, AgentError, AgentErrorKind as K, AgentEvent,
    AgentEventKind as E, AgentRunner, AgentSession, CancelToken, Emit, SessionContext, TokenUsage,
    TurnResult,
};
use crate::host::sandbox::Sandbox;
use crate::host::{Host, ProcessSpec, StdoutMode, DEFAULT_KILL_GRACE, DEFAULT_MAX_LINE_BYTES};

/// What differs between agent CLIs; implemented by each one's config section.
pub trait Cli: Clone + Debug + Send + Sync + 'static {
    /// The parser of one invocation's stdout.
    type Parser: TurnParser;
    /// What a session keeps between turns besides the session id (Copilot's usage files).
    type State: Debug + Default + Send;
    const KIND: AgentKind;
    /// Baton names new sessions (a UUIDv4 on the command line) instead of the CLI.
    const NAMES_SESSION: bool = false;
    fn cli(&self) -> &CliSection;
    /// The CLI's arguments and environment added to `i.spec`, and the invocation's parser.
    fn invocation(r: &CliRunner<Self>, i: &mut Invocation<Self::State>) -> Parsed<Self>;
    /// After the turn's last invocation ended (Copilot reads its usage file).
    fn ended(_st: &mut Self::State, _p: &mut Self::Parser) {}
    /// A resumed session had reported `usage` so far (Copilot's usage file counts from its start).
    fn resumed(_st: &mut Self::State, _usage: TokenUsage) {}
}

pub type Parsed<C> = Result<<C as Cli>::Parser, AgentError>;
type Ran<P> = Result<(P, ProcessEnd, u32), AgentError>;

/// One invocation being built.
pub struct Invocation<'a, S> {
    pub spec: ProcessSpec,
    pub prompt: &'a str,
    pub turn: u32,
    /// The id to resume, or the Baton-chosen one to create; `None`: the CLI picks one.
    pub session: Option<&'a str>,
    /// Whether the CLI has `session` already.
    pub resume: bool,
    pub state: &'a mut S,
    /// A directory outside the workspace the CLI writes (the sandbox keeps it writable).
    pub writable: Option<PathBuf>,
}

/// A CLI agent's config plus the process knobs (only the tests change them from the defaults).
#[derive(Debug, Clone)]
pub struct CliRunner<C> {
    pub(crate) cfg: C,
    /// Extra environment variables for every CLI process (they win over Baton's own).
    pub env: Vec<(OsString, OsString)>,
    /// Inherited variables removed from every CLI process (e.g. `GH_TOKEN` in tests).
    pub env_remove: Vec<OsString>,
    /// Grace between SIGTERM and SIGKILL when a turn is stopped.
    pub kill_grace: Duration,
    /// Bound of one stdout line.
    pub max_line_bytes: usize,
    sandbox: Option<Arc<Sandbox>>,
}

impl<C> CliRunner<C> {
    pub fn new(cfg: C) -> Self {
        CliRunner {
            cfg,
            env: Vec::new(),
            env_remove: Vec::new(),
            kill_grace: DEFAULT_KILL_GRACE,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            sandbox: None,
        }
    }

    /// Run every CLI process confined (`sandbox.kind: bubblewrap`; `None`: unconfined).
    pub fn with_sandbox(mut self, sandbox: Option<Arc<Sandbox>>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Whether the operator or the runner sets `key` for the child (then Baton leaves it alone).
    pub(crate) fn sets_env(&self, key: &str) -> bool {
        std::env::var_os(key).is_some() || self.env.iter().any(|(k, _)| k == key)
    }
}

impl<C: Cli> AgentRunner for CliRunner<C> {
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        let cwd = check_cwd_on(ctx.host.as_ref(), &ctx.workspace, &ctx.workspace_root)?;
        let issue = ctx.issue_identifier.clone();
        let restored = usable_session_id(C::KIND, ctx.resume_session_id.as_deref(), &issue);
        let resume = restored.is_some();
        let id = match restored {
            None if C::NAMES_SESSION => Some(new_uuid_v4()?),
            id => id,
        };
        let mut state = C::State::default();
        if resume {
            C::resumed(&mut state, ctx.resume_usage);
        }
        Ok(Box::new(CliSession {
            runner: self.clone(),
            host: Arc::clone(&ctx.host),
            cwd,
            root: ctx.workspace_root.clone(),
            issue,
            id,
            resume,
            turn: 0,
            state,
        }))
    }
}

/// One agent session in one workspace: each turn is one CLI process (two after a fallback), none
/// outlives `run_turn`.
#[derive(Debug)]
struct CliSession<C: Cli> {
    runner: CliRunner<C>,
    host: Arc<dyn Host>,
    cwd: PathBuf,
    root: PathBuf,
    issue: String,
    id: Option<String>,
    resume: bool,
    turn: u32,
    state: C::State,
}

impl<C: Cli> CliSession<C> {
    /// `<session>-<turn>` once the session id is known.
    fn label(&self) -> Option<String> {
        self.id.as_ref().map(|id| format!("{id}-{}", self.turn))
    }

    /// Run the turn's invocation; a resume the CLI does not know is retried once in a new session
    /// in the same workspace.
    fn invoke(&mut self, prompt: &str, cancel: &CancelToken, emit: &mut Emit) -> Ran<C::Parser> {
        let name = C::KIND.cli_home().name;
        let timeout = Duration::from_millis(self.runner.cfg.cli().turn_timeout_ms.max(1));
        let limits = Limits {
            deadline: Instant::now() + timeout,
            kill_grace: self.runner.kill_grace,
        };
        loop {
            let host = self.host.as_ref();
            check_cwd_on(host, &self.cwd, &self.root)?;
            let r = &self.runner;
            let mut i = Invocation {
                spec: ProcessSpec::command(&r.cfg.cli().command, self.cwd.clone()),
                prompt,
                turn: self.turn,
                session: self.id.as_deref(),
                resume: self.resume,
                state: &mut self.state,
                writable: None,
            };
            i.spec.env("BATON_ISSUE_IDENTIFIER", self.issue.clone());
            let mut p = C::invocation(r, &mut i)?;
            let (mut spec, writable) = (i.spec, i.writable);
            // The one place agent specs are finished: the runner's variables go last, so they
            // win; then the sandbox.
            spec.stdout = StdoutMode::Lines {
                max_line_bytes: r.max_line_bytes,
            };
            spec.env_remove.extend(r.env_remove.iter().cloned());
            spec.env.extend(r.env.iter().cloned());
            if let Some(sb) = &r.sandbox {
                sb.wrap(&mut spec, writable.as_deref());
            }
            let (mode, label) = (if self.resume { "resume" } else { "new" }, self.label());
            log::info!(
                "{name} turn started issue_identifier={} session_id={} turn={} mode={mode}",
                self.issue,
                label.as_deref().unwrap_or("-"),
                self.turn,
            );
            let (end, pid) = run_invocation(host, &spec, &mut p, limits, cancel, emit)?;
            if !(self.resume && p.unknown_resume(&end)) {
                return Ok((p, end, pid));
            }
            let fresh = new_uuid_v4()?;
            let text = format!(
                "resume of session {} failed (unknown session); continuing in new session {fresh}",
                self.id.as_deref().unwrap_or_default()
            );
            log::warn!("{name} {text} issue_identifier={}", self.issue);
            emit(p.event(E::Notification, &text));
            (self.id, self.resume) = (Some(fresh), false);
        }
    }
}

impl<C: Cli> AgentSession for CliSession<C> {
    fn run_turn(&mut self, prompt: &str, cancel: &CancelToken, emit: &mut Emit) -> TurnResult {
        self.turn += 1;
        let started = Instant::now();
        let (mut p, end, pid) = match self.invoke(prompt, cancel, emit) {
            Ok(ran) => ran,
            Err(e) => {
                let (text, id) = (one_line(&e.to_string(), SUMMARY_MAX), self.id.as_deref());
                emit(AgentEvent::of(E::StartupFailed, text, id, self.turn));
                return Err(e);
            }
        };
        C::ended(&mut self.state, &mut p);
        if let Some(id) = p.session() {
            self.id = usable_session_id(C::KIND, Some(id), &self.issue);
        }
        self.resume = self.id.is_some() && (self.resume || p.stored());
        let outcome = p.outcome(&end);
        let ms = started.elapsed().as_millis();
        let summary = match (&outcome, p.result_text()) {
            (Ok(()), Some(text)) => format!("turn {} completed in {ms} ms: {text}", self.turn),
            (Ok(()), None) => format!("turn {} completed in {ms} ms", self.turn),
            (Err(e), _) => e.to_string(),
        };
        let kind = terminal_event_kind(&outcome);
        let mut ev = p.event(kind, &summary);
        ev.agent_pid = Some(pid);
        (ev.usage_delta, ev.session_cost_usd) = (p.usage(), p.cost());
        let u = ev.usage_delta.unwrap_or_default();
        emit(ev);
        let line = format!(
            "{} turn {} issue_identifier={} session_id={} turn={} agent_pid={pid} outcome={} input_tokens={} output_tokens={}",
            C::KIND.cli_home().name,
            if outcome.is_ok() { "completed" } else { "failed" },
            self.issue,
            self.label().as_deref().unwrap_or("-"),
            self.turn,
            kind.as_str(),
            u.input_tokens,
            u.output_tokens
        );
        match &outcome {
            Ok(()) => log::info!("{line}"),
            Err(e) => log::warn!("{line} error={e}"),
        }
        outcome
    }

    fn agent_session_id(&self) -> Option<String> {
        self.id.clone()
    }

    fn stop(&mut self) {
        // Every process is reaped before `run_turn` returns; only the adapter's state is left.
        self.state = C::State::default();
    }
}

fn terminal_event_kind(outcome: &TurnResult) -> E {
    match outcome.as_ref().map_err(|e| e.kind) {
        Ok(()) => E::TurnCompleted,
        Err(K::TurnCancelled) => E::TurnCancelled,
        Err(K::TurnInputRequired) => E::TurnInputRequired,
        Err(K::AgentNotFound | K::StartupFailed) => E::StartupFailed,
        Err(_) => E::TurnFailed,
    }
}

/// A random UUIDv4 (lower-case, hyphenated): the session ids Baton chooses.
pub(crate) fn new_uuid_v4() -> Result<String, AgentError> {
    let mut b = [0u8; 16];
    let urandom = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    urandom.map_err(|e| AgentError::new(K::StartupFailed, format!("no randomness: {e}")))?;
    Ok(format_uuid_v4(b))
}

/// 16 random bytes as a UUIDv4: version 4 in bits 76..80, variant `10` in bits 62..64.
fn format_uuid_v4(b: [u8; 16]) -> String {
    let n = u128::from_be_bytes(b) & !((0xf << 76) | (0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let h = format!("{n:032x}");
    [&h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]].join("-")
}

/// Longest prompt passed as one argument (bytes): below Linux's 128 KiB `MAX_ARG_STRLEN`.
const MAX_PROMPT_ARG_BYTES: usize = 120 * 1024;

/// `prompt` without NUL bytes and cut (at a character boundary) to [`MAX_PROMPT_ARG_BYTES`], with
/// a logged warning: either would make every spawn fail the same way, so the issue would retry
/// forever.
pub fn argv_safe_prompt<'a>(prompt: &'a str, issue_identifier: &str) -> Cow<'a, str> {
    let nuls = prompt.bytes().filter(|&b| b == 0).count();
    if nuls == 0 && prompt.len() <= MAX_PROMPT_ARG_BYTES {
        return Cow::Borrowed(prompt);
    }
    let mut out: String = prompt.chars().filter(|&c| c != '\0').collect();
    if nuls > 0 {
        log::warn!(
            "prompt contained NUL bytes that cannot be passed to the agent; removed them issue_identifier={issue_identifier} nul_bytes={nuls}"
        );
    }
    if out.len() > MAX_PROMPT_ARG_BYTES {
        let mut cut = MAX_PROMPT_ARG_BYTES;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        log::warn!(
            "prompt longer than one command-line argument may be; truncated issue_identifier={issue_identifier} bytes={} kept_bytes={cut}",
            out.len()
        );
        out.truncate(cut);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v4_shape() {
        let u = format_uuid_v4([0xff; 16]);
        assert_eq!(u, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        let u = format_uuid_v4([0; 16]);
        assert_eq!(u, "00000000-0000-4000-8000-000000000000");
        let a = new_uuid_v4().unwrap();
        let b = new_uuid_v4().unwrap();
        assert!(crate::agent::valid_session_id(&a) && crate::agent::valid_session_id(&b));
        assert_ne!(a, b);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn clean_prompts_are_borrowed() {
        assert!(matches!(argv_safe_prompt("hi", "x"), Cow::Borrowed("hi")));
    }

    #[test]
    fn nul_is_removed_and_long_prompts_are_cut_at_a_char_boundary() {
        assert_eq!(argv_safe_prompt("a\0b\0", "x"), "ab");
        let long = "é".repeat(MAX_PROMPT_ARG_BYTES);
        let cut = argv_safe_prompt(&long, "x");
        assert!(cut.len() <= MAX_PROMPT_ARG_BYTES && cut.len() + 2 > MAX_PROMPT_ARG_BYTES);
    }
}

//! The coding-agent boundary (spec §10.0): the runner/session traits every adapter implements,
//! the normalized events they emit, and the token that stops a running turn from another thread.

pub mod claude;
#[cfg(feature = "codex")]
pub mod codex;
pub mod config;
pub mod copilot;
pub(crate) mod driver;
#[cfg(feature = "gemini")]
pub mod gemini;
mod loose;
pub mod runner;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crossbeam_channel::{bounded, Receiver, Sender, TryRecvError};
use serde::Serialize;

use crate::host::Host;
use config::AgentKind;

pub use driver::{ProcessEnd, TurnParser};
pub use runner::argv_safe_prompt;

/// Whether `id` has the form every supported CLI gives its session ids, a hyphenated UUID (Claude
/// Code's own, Codex's thread id, the ids Baton picks for Copilot and Gemini). Only such an id is
/// put on a command line, so a stored or reported value cannot become a CLI flag.
pub fn valid_session_id(id: &str) -> bool {
    id.len() == 36
        && id.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// `id` when it is a [`valid_session_id`]; otherwise `None`, logged as `event=session_id_invalid`
/// (the run then starts a fresh session instead of passing the value to the CLI).
pub(crate) fn usable_session_id(kind: AgentKind, id: Option<&str>, issue: &str) -> Option<String> {
    let id = id?;
    if valid_session_id(id) {
        return Some(id.to_string());
    }
    log::warn!(
        "event=session_id_invalid agent={} issue_identifier={issue} session_id={:?} reason=\"not a UUID\"; starting a fresh session",
        kind.as_str(),
        crate::text::truncate_chars(id, 64)
    );
    None
}

/// Normalized agent event kinds (spec §10.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentEventKind {
    /// Carries `session_id = <agent_session_id>-<turn>`.
    SessionStarted,
    StartupFailed,
    TurnCompleted,
    TurnFailed,
    /// Baton stopped the turn.
    TurnCancelled,
    /// The agent asked for user input; the turn fails.
    TurnInputRequired,
    /// The permission posture denied a tool call.
    PermissionDenied,
    ToolUse,
    /// Assistant text, retries and other activity.
    Notification,
    /// A recognized protocol line with nothing to report.
    #[default]
    OtherMessage,
    /// A protocol line that could not be parsed.
    Malformed,
}

impl AgentEventKind {
    /// snake_case name, as in logs and the JSON API.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentEventKind::SessionStarted => "session_started",
            AgentEventKind::StartupFailed => "startup_failed",
            AgentEventKind::TurnCompleted => "turn_completed",
            AgentEventKind::TurnFailed => "turn_failed",
            AgentEventKind::TurnCancelled => "turn_cancelled",
            AgentEventKind::TurnInputRequired => "turn_input_required",
            AgentEventKind::PermissionDenied => "permission_denied",
            AgentEventKind::ToolUse => "tool_use",
            AgentEventKind::Notification => "notification",
            AgentEventKind::OtherMessage => "other_message",
            AgentEventKind::Malformed => "malformed",
        }
    }
}

/// Token counts (per-invocation deltas when carried by an event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TokenUsage {
    /// Not counting cache reads and writes.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
}

impl TokenUsage {
    /// Add `other` into this one, saturating.
    pub fn add(&mut self, other: &TokenUsage) {
        *self = self.zip(other, u64::saturating_add);
    }

    /// `f` of each figure of this one and `other`'s.
    pub(crate) fn zip(&self, o: &TokenUsage, f: impl Fn(u64, u64) -> u64) -> TokenUsage {
        TokenUsage {
            input_tokens: f(self.input_tokens, o.input_tokens),
            output_tokens: f(self.output_tokens, o.output_tokens),
            cache_read_input_tokens: f(self.cache_read_input_tokens, o.cache_read_input_tokens),
            cache_creation_input_tokens: f(
                self.cache_creation_input_tokens,
                o.cache_creation_input_tokens,
            ),
        }
    }
}

/// One normalized event from an agent session (spec §10.0).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct AgentEvent {
    pub kind: AgentEventKind,
    /// A short, single-line, bounded summary (untrusted text: escape before rendering).
    pub summary: String,
    /// `<agent_session_id>-<turn>` when known.
    pub session_id: Option<String>,
    /// The agent CLI's own session id (what `--resume` takes) when known.
    pub agent_session_id: Option<String>,
    pub agent_pid: Option<u32>,
    /// The agent process's start time on its host (`/proc/<pid>/stat` field 22), when known.
    pub agent_start_time: Option<u64>,
    /// Token usage *delta* to add (never a cumulative figure); only on the terminal event.
    pub usage_delta: Option<TokenUsage>,
    /// Session-cumulative cost in USD as reported by the agent (record the latest, never add).
    pub session_cost_usd: Option<f64>,
    /// The agent's rate-limit state, when this event reports it (latest wins).
    pub rate_limits: Option<AgentRateLimits>,
}

/// An agent's model rate-limit state, bounded: short strings, a utilization fraction, a reset
/// time. Untrusted: escape before rendering.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentRateLimits {
    /// `allowed`, `allowed_warning` or `rejected`.
    pub status: String,
    /// Which window (`five_hour`, `seven_day`, `primary`…).
    pub rate_limit_type: Option<String>,
    /// Fraction of the window used, 0..=1.
    pub utilization: Option<f64>,
    /// RFC 3339.
    pub resets_at: Option<String>,
    pub overage_status: Option<String>,
    pub is_using_overage: Option<bool>,
}

impl AgentRateLimits {
    /// The `notification` reporting this state, made by `event` (the adapter's stamp and bound).
    pub(crate) fn event(self, event: impl Fn(AgentEventKind, &str) -> AgentEvent) -> AgentEvent {
        let window = self.rate_limit_type.as_deref().unwrap_or("?");
        let text = format!("rate limit {} ({window})", self.status);
        let mut ev = event(AgentEventKind::Notification, &text);
        ev.rate_limits = Some(self);
        ev
    }

    /// A reset time in seconds since the epoch, capped at year 9999 (a hostile number must not
    /// overflow the time arithmetic).
    pub(crate) fn reset_time(secs: u64) -> String {
        let secs = secs.min(253_402_300_799);
        crate::timefmt::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
    }
}

impl AgentEvent {
    /// An event with just a kind and summary.
    pub fn new(kind: AgentEventKind, summary: impl Into<String>) -> Self {
        AgentEvent {
            kind,
            summary: summary.into(),
            ..Default::default()
        }
    }

    /// An event of turn `turn` of `session` (when known): how every adapter stamps its events.
    pub(crate) fn of(kind: AgentEventKind, text: String, session: Option<&str>, turn: u32) -> Self {
        AgentEvent {
            session_id: session.map(|id| format!("{id}-{turn}")),
            agent_session_id: session.map(String::from),
            ..AgentEvent::new(kind, text)
        }
    }
}

/// Normalized error categories (spec §10.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentErrorKind {
    /// The agent command does not exist (exit 127).
    AgentNotFound,
    /// The workspace is not a directory inside the root.
    InvalidWorkspaceCwd,
    /// The process could not be started or failed before its session began.
    StartupFailed,
    TurnTimeout,
    /// The process exited before completing the turn, or with a non-zero code.
    ProcessExit,
    /// The agent reported a failure.
    TurnFailed,
    /// Baton stopped the turn.
    TurnCancelled,
    TurnInputRequired,
    /// The protocol stream could not be understood (e.g. no result line).
    ParseError,
}

impl AgentErrorKind {
    /// snake_case name, as in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentErrorKind::AgentNotFound => "agent_not_found",
            AgentErrorKind::InvalidWorkspaceCwd => "invalid_workspace_cwd",
            AgentErrorKind::StartupFailed => "startup_failed",
            AgentErrorKind::TurnTimeout => "turn_timeout",
            AgentErrorKind::ProcessExit => "process_exit",
            AgentErrorKind::TurnFailed => "turn_failed",
            AgentErrorKind::TurnCancelled => "turn_cancelled",
            AgentErrorKind::TurnInputRequired => "turn_input_required",
            AgentErrorKind::ParseError => "parse_error",
        }
    }
}

/// An agent failure with its category.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentError {
    pub kind: AgentErrorKind,
    /// Bounded; may include a stderr tail.
    pub message: String,
}

impl AgentError {
    pub fn new(kind: AgentErrorKind, message: impl Into<String>) -> Self {
        AgentError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for AgentError {}

/// What a session starts from.
#[derive(Debug, Clone)]
pub struct SessionContext {
    /// For logs and the child environment (`BATON_ISSUE_IDENTIFIER`).
    pub issue_identifier: String,
    /// The absolute workspace path; the agent's cwd.
    pub workspace: PathBuf,
    /// The canonical workspace root, to re-check containment before every launch.
    pub workspace_root: PathBuf,
    /// Agent session id to resume (persisted from an earlier run), if any.
    pub resume_session_id: Option<String>,
    /// The session-cumulative tokens the resumed session had reported (zero for a new one), so a
    /// CLI that reports cumulative usage (Copilot's usage file) is not counted twice.
    pub resume_usage: TokenUsage,
    /// Where the workspace lives and the agent runs.
    pub host: Arc<dyn Host>,
}

/// Cancellation shared between the orchestrator (which cancels) and a running turn (which
/// selects on `receiver()` and stops its process group).
#[derive(Clone, Debug)]
pub struct CancelToken {
    /// Dropped on cancel: the channel closes, which wakes every waiter on `rx` for good.
    tx: Arc<Mutex<Option<Sender<()>>>>,
    rx: Receiver<()>,
}

impl Default for CancelToken {
    fn default() -> Self {
        let (tx, rx) = bounded(0);
        let tx = Arc::new(Mutex::new(Some(tx)));
        CancelToken { tx, rx }
    }
}

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }
    /// Idempotent. A poisoned lock still cancels: nothing may keep a worker from stopping.
    pub fn cancel(&self) {
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
    pub fn is_cancelled(&self) -> bool {
        self.rx.try_recv() == Err(TryRecvError::Disconnected)
    }
    /// Ready (disconnected) for every waiter once cancelled, for `select!`.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.rx
    }
}

/// Where a turn emits its normalized events.
pub type Emit<'a> = dyn FnMut(AgentEvent) + 'a;

/// How a turn ends: `Ok` when the agent reported success, else the error class.
pub type TurnResult = Result<(), AgentError>;

/// A live agent session (one per worker run); turns run one after another on it.
pub trait AgentSession: Send {
    /// Run one turn, streaming events to `emit` until it ends. Returns within the turn timeout,
    /// and promptly after `cancel`, leaving no process behind.
    fn run_turn(&mut self, prompt: &str, cancel: &CancelToken, emit: &mut Emit) -> TurnResult;
    /// The agent's own session id once known (persisted, so a restart resumes it).
    fn agent_session_id(&self) -> Option<String>;
    /// End the session and make sure no process or file of it is left.
    fn stop(&mut self);
}

/// Builds sessions for one configured agent kind.
pub trait AgentRunner: Send + Sync {
    /// Start a session in `ctx.workspace` (validated against the root before anything launches).
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError>;
}

/// Check that `workspace` is an existing directory strictly inside `root` (both resolved) on
/// `host`; the invariant every adapter checks before launching (spec §9.5).
pub(crate) fn check_cwd_on(
    host: &dyn Host,
    workspace: &Path,
    root: &Path,
) -> Result<PathBuf, AgentError> {
    host.check_workspace(root, workspace)
        .map_err(|e| AgentError::new(AgentErrorKind::InvalidWorkspaceCwd, e.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cancel wakes every waiter, for good, and cancelling again is harmless.
    #[test]
    fn a_cancel_wakes_every_waiter_and_stays() {
        let token = CancelToken::new();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let t = token.clone();
                std::thread::spawn(move || t.receiver().recv().is_err())
            })
            .collect();
        assert!(!token.is_cancelled());
        token.cancel();
        token.cancel();
        assert!(waiters.into_iter().all(|w| w.join().unwrap()));
        assert!(token.is_cancelled());
        assert!(
            token.receiver().recv().is_err(),
            "a later wait returns at once"
        );
    }

    #[test]
    fn only_uuids_are_session_ids() {
        for kind in [AgentKind::ClaudeCode, AgentKind::Copilot] {
            assert!(valid_session_id("0b470000-0000-4000-8000-0000000000a1"));
            assert!(valid_session_id("11111111-2222-3333-4444-55555555555F"));
            for bad in [
                "--dangerously-skip-permissions",
                "--resume=0000-4000-8000-00000000000a1",
                "0b470000-0000-4000-8000-0000000000a",
                "0b470000x0000-4000-8000-0000000000a1",
                "-b470000-0000-4000-8000-0000000000a1",
                " 0b470000-0000-4000-8000-0000000000a",
                "",
            ] {
                assert!(!valid_session_id(bad), "{bad}");
                assert_eq!(usable_session_id(kind, Some(bad), "acme/repo#1"), None);
            }
        }
    }
}

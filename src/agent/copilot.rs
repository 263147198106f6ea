//! GitHub Copilot CLI adapter (spec §10.2), targeting `@github/copilot@1.0.102`.
//!
//! Every turn is one `copilot --prompt=<prompt> --output-format json …` process (see `build_args`),
//! run by the turn driver (`agent::driver`) on the runner's host (`bash -lc '<command> "$@"'`,
//! prompt as a positional argument, cwd = workspace, stdin `/dev/null`, own process group, group
//! kill on stop).
//!
//! * **Sessions**: the JSONL stream has no session-start event, so Baton picks a UUIDv4 and passes
//!   `--session-id=<uuid>` on the first turn and `--resume=<uuid>` later; `session_started` is
//!   emitted with `<uuid>-<turn>` when each turn's process starts. A resume the CLI does not know
//!   (exit 1, nothing on stdout, "No session … matched" on stderr) falls back once per turn to a
//!   new session in the same workspace.
//! * **Events**: [`parse::StreamParser`] maps each stdout line to one normalized event.
//! * **Usage**: `--usage-output-file` in a Baton-owned temp dir, read after exit; its totals are
//!   cumulative per session, so [`usage::UsageTracker`] reports deltas. Missing figures are zero,
//!   flagged unavailable (logged and noted in the terminal event), never invented.

pub mod parse;
pub mod usage;

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::parse::{ProcessEnd, StreamParser};
use self::usage::{read_usage_file, UsageTracker};
use super::config::AgentKind;
use super::driver::{run_invocation, terminal_event_kind, Limits, TurnParser};
use super::runner::CliRunner;
use super::{
    check_cwd_on, usable_session_id, AgentError, AgentErrorKind, AgentEvent, AgentEventKind,
    AgentRunner, AgentSession, CancelToken, Emit, SessionContext, TurnResult,
};
use crate::host::{Host, ProcessSpec};
use crate::workflow::config::CopilotConfig;

/// Environment variable that makes the CLI approve every tool (and trust the cwd); removed from the
/// child's environment unless `copilot.allow_all_tools` is true, so the posture stays explicit.
pub(crate) const ALLOW_ALL_ENV: &str = "COPILOT_ALLOW_ALL";

/// How a turn addresses its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionArg {
    /// `--session-id=<uuid>`: create a session with this id.
    New(String),
    /// `--resume=<uuid>`: continue an existing session.
    Resume(String),
}

impl SessionArg {
    /// The session id either way.
    pub(crate) fn id(&self) -> &str {
        match self {
            SessionArg::New(id) | SessionArg::Resume(id) => id,
        }
    }
}

/// The CLI arguments of one turn (everything after `<copilot.command>`), in order:
/// `--prompt=<prompt> --output-format json --no-auto-update --no-color <session flag>
/// [--usage-output-file <f>] [--allow-all-tools] [--allow-tool=<p>]… [--deny-tool=<p>]…
/// [--model=<m>] <extra_args…>`. Values are attached with `=` so a value starting with `-` is
/// never taken for a flag: `--prompt=<prompt>` is `-p <prompt>`, except that an issue text
/// starting with `--` cannot turn into CLI flags (the real CLI rejects `-p --x …`).
pub(crate) fn build_args(
    cfg: &CopilotConfig,
    prompt: &str,
    session: &SessionArg,
    usage_file: Option<&Path>,
) -> Vec<OsString> {
    let mut prompt_arg = OsString::from("--prompt=");
    prompt_arg.push(prompt);
    let mut a: Vec<OsString> = vec![
        prompt_arg,
        "--output-format".into(),
        "json".into(),
        "--no-auto-update".into(),
        "--no-color".into(),
    ];
    a.push(match session {
        SessionArg::New(id) => format!("--session-id={id}").into(),
        SessionArg::Resume(id) => format!("--resume={id}").into(),
    });
    if let Some(f) = usage_file {
        a.push("--usage-output-file".into());
        a.push(f.as_os_str().to_owned());
    }
    if cfg.allow_all_tools {
        a.push("--allow-all-tools".into());
    }
    for t in &cfg.allow_tools {
        a.push(format!("--allow-tool={t}").into());
    }
    for t in &cfg.deny_tools {
        a.push(format!("--deny-tool={t}").into());
    }
    if let Some(m) = cfg.cli.model.as_deref().filter(|m| !m.trim().is_empty()) {
        a.push(format!("--model={m}").into());
    }
    a.extend(cfg.cli.extra_args.iter().map(OsString::from));
    a
}

/// A random UUIDv4 from `/dev/urandom` (lower-case, hyphenated).
pub(crate) fn new_uuid_v4() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(format_uuid_v4(b))
}

/// Format 16 random bytes as a UUIDv4 (sets the version and variant bits).
pub(crate) fn format_uuid_v4(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Builds Copilot sessions from `copilot.*` config.
pub type CopilotRunner = CliRunner<CopilotConfig>;

impl AgentRunner for CopilotRunner {
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        let workspace = check_cwd_on(ctx.host.as_ref(), &ctx.workspace, &ctx.workspace_root)?;
        let startup = |m: String| AgentError::new(AgentErrorKind::StartupFailed, m);
        let resume = usable_session_id(
            AgentKind::Copilot,
            ctx.resume_session_id.as_deref(),
            &ctx.issue_identifier,
        );
        let (session, resuming) = match resume {
            Some(id) => (id.to_ascii_lowercase(), true),
            None => {
                let id = new_uuid_v4().map_err(|e| startup(format!("no randomness: {e}")))?;
                (id, false)
            }
        };
        let temp_dir = create_private_temp_dir()
            .map_err(|e| startup(format!("could not create a temp dir for usage files: {e}")))?;
        Ok(Box::new(CopilotSession {
            runner: self.clone(),
            host: Arc::clone(&ctx.host),
            issue_identifier: ctx.issue_identifier.clone(),
            workspace,
            workspace_root: ctx.workspace_root.clone(),
            session_id: session,
            session_exists: resuming,
            turn: 0,
            // A resumed session's usage file counts from the session's start.
            usage: UsageTracker::starting_at(resuming.then_some(ctx.resume_usage)),
            temp_dir: Some(temp_dir),
        }))
    }
}

/// Create `$TMPDIR/baton-copilot-<uuid>` with mode 0700 (fails if it exists: no symlink games).
fn create_private_temp_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("baton-copilot-{}", new_uuid_v4()?));
    fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// One Copilot session in one workspace: turns run as successive CLI processes on one session id.
#[derive(Debug)]
pub(crate) struct CopilotSession {
    runner: CopilotRunner,
    host: Arc<dyn Host>,
    issue_identifier: String,
    workspace: PathBuf,
    workspace_root: PathBuf,
    session_id: String,
    /// True once the CLI has (probably) created the session, so the next turn resumes it.
    session_exists: bool,
    turn: u32,
    usage: UsageTracker,
    temp_dir: Option<PathBuf>,
}

/// What one CLI invocation produced.
struct Attempt {
    parser: StreamParser,
    end: ProcessEnd,
    usage_file: Option<PathBuf>,
}

/// The driver's view of one Copilot invocation: every event carries `<session>-<turn>`.
struct Invocation<'a> {
    parser: StreamParser,
    /// The CLI's session id.
    session: String,
    turn_session: String,
    issue_identifier: &'a str,
    mode: &'static str,
    turn: u32,
}

impl TurnParser for Invocation<'_> {
    fn started(&mut self, pid: u32) -> Vec<AgentEvent> {
        log::info!(
            "copilot turn started issue_identifier={} session_id={} agent_pid={pid} mode={}",
            self.issue_identifier,
            self.turn_session,
            self.mode
        );
        let summary = format!("copilot process started (turn {})", self.turn);
        vec![self.event(AgentEventKind::SessionStarted, summary)]
    }

    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let mut ev = self.parser.parse_line(line);
        ev.session_id = Some(self.turn_session.clone());
        ev.agent_session_id = Some(self.session.clone());
        vec![ev]
    }

    fn event(&self, kind: AgentEventKind, summary: String) -> AgentEvent {
        let mut ev = AgentEvent::new(kind, parse::bound(&summary));
        ev.session_id = Some(self.turn_session.clone());
        ev.agent_session_id = Some(self.session.clone());
        ev
    }

    fn result_seen(&self) -> bool {
        self.parser.result_seen()
    }
}

impl CopilotSession {
    fn run_attempt(
        &mut self,
        prompt: &str,
        session: &SessionArg,
        attempt_no: u32,
        limits: Limits,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(AgentEvent),
    ) -> Result<Attempt, AgentError> {
        let usage_file = self
            .temp_dir
            .as_ref()
            .map(|d| d.join(format!("usage-{}-{attempt_no}.json", self.turn)));
        if let Some(f) = &usage_file {
            let _ = fs::remove_file(f);
        }
        let mut spec = ProcessSpec::command(&self.runner.cfg.cli.command, self.workspace.clone());
        spec.args.extend(build_args(
            &self.runner.cfg,
            prompt,
            session,
            usage_file.as_deref(),
        ));
        if !self.runner.cfg.allow_all_tools {
            spec.env_remove.push(ALLOW_ALL_ENV.into());
        }
        spec.env("BATON_ISSUE_IDENTIFIER", self.issue_identifier.clone());
        self.runner.apply_with(&mut spec, self.temp_dir.as_deref());
        let mut inv = Invocation {
            parser: StreamParser::new(),
            session: session.id().to_string(),
            turn_session: format!("{}-{}", session.id(), self.turn),
            issue_identifier: &self.issue_identifier,
            mode: match session {
                SessionArg::New(_) => "new",
                SessionArg::Resume(_) => "resume",
            },
            turn: self.turn,
        };
        let (end, pid) = run_invocation(
            self.host.as_ref(),
            &spec,
            &mut inv,
            limits,
            cancel,
            on_event,
        )?;
        if end.cancelled || end.timed_out {
            log::info!(
                "stopping copilot process group issue_identifier={} session_id={} agent_pid={pid} reason={}",
                self.issue_identifier,
                inv.turn_session,
                if end.cancelled { "cancelled" } else { "turn_timeout" }
            );
        }
        Ok(Attempt {
            parser: inv.parser,
            end,
            usage_file,
        })
    }

    /// Run the turn's invocation; a resume the CLI does not know falls back once to a new session
    /// in the same workspace.
    fn run_with_fallback(
        &mut self,
        prompt: &str,
        limits: Limits,
        cancel: &CancelToken,
        on_event: &mut dyn FnMut(AgentEvent),
    ) -> Result<Attempt, AgentError> {
        let session = if self.session_exists {
            SessionArg::Resume(self.session_id.clone())
        } else {
            SessionArg::New(self.session_id.clone())
        };
        let a = self.run_attempt(prompt, &session, 1, limits, cancel, on_event)?;
        if !(matches!(session, SessionArg::Resume(_)) && a.parser.is_unknown_resume(&a.end)) {
            return Ok(a);
        }
        let new_id = new_uuid_v4().map_err(|e| {
            AgentError::new(AgentErrorKind::StartupFailed, format!("no randomness: {e}"))
        })?;
        log::warn!(
            "copilot session unknown to the CLI; starting a new session in the same workspace issue_identifier={} old_session_id={} session_id={}",
            self.issue_identifier,
            self.session_id,
            new_id
        );
        let mut ev = AgentEvent::new(
            AgentEventKind::Notification,
            format!(
                "resume of session {} failed (unknown session); continuing in new session {new_id}",
                self.session_id
            ),
        );
        ev.session_id = Some(format!("{}-{}", self.session_id, self.turn));
        on_event(ev);
        self.session_id = new_id.clone();
        self.session_exists = false;
        self.usage.reset();
        self.run_attempt(
            prompt,
            &SessionArg::New(new_id),
            2,
            limits,
            cancel,
            on_event,
        )
    }

    /// Read (and delete) the invocation's usage file into this turn's delta.
    fn read_usage(&mut self, usage_file: Option<&Path>) -> usage::TurnUsage {
        let reading = match usage_file {
            Some(f) => {
                let r = read_usage_file(f);
                let _ = fs::remove_file(f);
                r
            }
            None => Err("no usage file configured".into()),
        };
        if let Err(why) = &reading {
            log::info!(
                "copilot token usage unavailable for this turn; reporting zero issue_identifier={} session_id={}-{} reason={}",
                self.issue_identifier,
                self.session_id,
                self.turn,
                parse::bound(why)
            );
        }
        self.usage.record(reading)
    }
}

impl AgentSession for CopilotSession {
    fn run_turn(&mut self, prompt: &str, cancel: &CancelToken, emit: &mut Emit) -> TurnResult {
        // The workspace must still be where it was (spec §9.5) before anything launches.
        let r = &self.runner;
        self.workspace = check_cwd_on(self.host.as_ref(), &self.workspace, &self.workspace_root)?;
        let limits = Limits {
            deadline: Instant::now() + Duration::from_millis(r.cfg.cli.turn_timeout_ms.max(1)),
            kill_grace: r.kill_grace,
        };
        self.turn += 1;
        let attempt = self.run_with_fallback(prompt, limits, cancel, emit)?;
        // Any process that got as far as printing events has created (or resumed) the session.
        if attempt.parser.line_count() > 0 {
            self.session_exists = true;
        }
        if let Some(reported) = attempt.parser.result_session_id() {
            if !reported.eq_ignore_ascii_case(&self.session_id) {
                log::warn!(
                    "copilot reported a different session id issue_identifier={} session_id={} reported={}",
                    self.issue_identifier,
                    self.session_id,
                    reported
                );
            }
        }
        let turn_usage = self.read_usage(attempt.usage_file.as_deref());
        let usage_note = if turn_usage.available {
            format!(
                "tokens in={} out={}",
                turn_usage.delta.input_tokens, turn_usage.delta.output_tokens
            )
        } else {
            "tokens unavailable (reported as 0)".to_string()
        };
        let turn_session = format!("{}-{}", self.session_id, self.turn);
        let outcome = attempt.parser.finish(&attempt.end);
        let kind = terminal_event_kind(&outcome);
        let summary = match &outcome {
            Ok(()) => "turn completed".to_string(),
            Err(e) => e.to_string(),
        };
        let mut ev = AgentEvent::new(kind, parse::bound(&format!("{summary}; {usage_note}")));
        ev.session_id = Some(turn_session.clone());
        ev.agent_session_id = Some(self.session_id.clone());
        ev.usage_delta = Some(turn_usage.delta);
        emit(ev);
        log::info!(
            "copilot turn ended issue_identifier={} session_id={} outcome={} usage_available={} input_tokens={} output_tokens={}",
            self.issue_identifier,
            turn_session,
            kind.as_str(),
            turn_usage.available,
            turn_usage.delta.input_tokens,
            turn_usage.delta.output_tokens
        );
        outcome
    }

    fn agent_session_id(&self) -> Option<String> {
        Some(self.session_id.clone())
    }

    fn stop(&mut self) {
        // Each turn's process is stopped and reaped before run_turn returns; only the temp dir is
        // left to clean up.
        if let Some(d) = self.temp_dir.take() {
            let _ = fs::remove_dir_all(d);
        }
    }
}

impl Drop for CopilotSession {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::config::CliSection;

    fn cfg() -> CopilotConfig {
        CopilotConfig {
            cli: CliSection {
                turn_timeout_ms: 1000,
                stall_timeout_ms: 1000,
                ..CliSection::new("copilot")
            },
            allow_all_tools: false,
            allow_tools: vec![],
            deny_tools: vec![],
        }
    }

    fn strs(v: Vec<OsString>) -> Vec<String> {
        v.into_iter().map(|s| s.into_string().unwrap()).collect()
    }

    #[test]
    fn first_turn_args() {
        let a = strs(build_args(
            &cfg(),
            "do it; rm -rf / $(x) `y`",
            &SessionArg::New("u1".into()),
            Some(Path::new("/t/usage.json")),
        ));
        assert_eq!(
            a,
            [
                "--prompt=do it; rm -rf / $(x) `y`",
                "--output-format",
                "json",
                "--no-auto-update",
                "--no-color",
                "--session-id=u1",
                "--usage-output-file",
                "/t/usage.json"
            ]
        );
    }

    #[test]
    fn permissions_model_and_extra_args() {
        let mut c = cfg();
        c.allow_tools = vec!["shell(gh:*)".into(), "write".into()];
        c.deny_tools = vec!["shell(rm)".into()];
        c.cli.model = Some("gpt-4.1".into());
        c.cli.extra_args = vec!["--add-dir".into(), "/x".into()];
        let a = strs(build_args(&c, "p", &SessionArg::Resume("u2".into()), None));
        assert_eq!(
            &a[5..],
            [
                "--resume=u2",
                "--allow-tool=shell(gh:*)",
                "--allow-tool=write",
                "--deny-tool=shell(rm)",
                "--model=gpt-4.1",
                "--add-dir",
                "/x"
            ]
        );
        assert!(!a.contains(&"--allow-all-tools".to_string()));
        c.allow_all_tools = true;
        let a = strs(build_args(&c, "p", &SessionArg::Resume("u2".into()), None));
        assert!(a.contains(&"--allow-all-tools".to_string()));
    }

    #[test]
    fn uuid_v4_shape() {
        let u = format_uuid_v4([0xff; 16]);
        assert_eq!(u, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        let u = format_uuid_v4([0; 16]);
        assert_eq!(u, "00000000-0000-4000-8000-000000000000");
        let a = new_uuid_v4().unwrap();
        let b = new_uuid_v4().unwrap();
        let uuid = |s: &str| crate::agent::valid_session_id(AgentKind::Copilot, s);
        assert!(uuid(&a) && uuid(&b));
        assert_ne!(a, b);
        assert_eq!(&a[14..15], "4");
    }
}

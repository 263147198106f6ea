//! Workspace hooks (spec §9.4, baton §5.3.4): a trusted shell script run by the [`Host`] with
//! `sh -lc` in the workspace, in its own process group, killed as a group when `hooks.timeout_ms`
//! passes. Output is captured (bounded) for the log; issue data only ever travels in environment
//! variables, never through the shell parser.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::host::{supervise, Host, ProcessSpec};
use crate::model::Issue;

pub use crate::host::{HookError, HookOutput, MAX_CAPTURE_BYTES};
/// Characters of hook output shown in one log line.
pub const LOG_OUTPUT_CHARS: usize = 2000;

/// `hooks.*` (spec §5.3.4).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default)]
pub struct HooksConfig {
    /// Runs once when a workspace directory is created; failure is fatal to the creation.
    pub after_create: Option<String>,
    /// Runs before each attempt; failure is fatal to the attempt.
    pub before_run: Option<String>,
    /// Runs after each attempt; failure is logged and ignored.
    pub after_run: Option<String>,
    /// Runs before a workspace is removed; failure is logged and ignored.
    pub before_remove: Option<String>,
    /// Timeout for every hook in ms.
    pub timeout_ms: u64,
}

impl Default for HooksConfig {
    fn default() -> Self {
        HooksConfig {
            after_create: None,
            before_run: None,
            after_run: None,
            before_remove: None,
            timeout_ms: 60_000,
        }
    }
}

/// The environment a hook sees about its issue (the `BATON_*` variables; `BATON_WORKSPACE` is
/// the hook's `cwd`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HookEnv {
    pub issue_id: String,
    pub issue_identifier: String,
    pub issue_number: String,
    pub issue_repo: String,
    pub issue_url: String,
    pub issue_status: String,
}

impl HookEnv {
    pub fn for_issue(issue: &Issue) -> Self {
        HookEnv {
            issue_id: issue.id.clone(),
            issue_identifier: issue.identifier.clone(),
            issue_number: issue.number.to_string(),
            issue_repo: issue.repository.clone(),
            issue_url: issue.url.clone().unwrap_or_default(),
            issue_status: issue.state.clone(),
        }
    }
}

/// Shorten hook output for one log line: last `LOG_OUTPUT_CHARS` chars, newlines escaped.
pub fn truncate_for_log(s: &str) -> String {
    let s = s.trim();
    let skip = s.chars().count().saturating_sub(LOG_OUTPUT_CHARS);
    let tail: String = s.chars().skip(skip).collect();
    let tail = if skip > 0 { format!("…{tail}") } else { tail };
    tail.replace('\n', "\\n").replace('\r', "\\r")
}

/// Run `script` with `sh -lc` in `cwd` on `host` with the hook environment; kill its whole
/// process group after `timeout_ms`. Never leaves a process of the group behind on timeout.
/// Output: the head of stdout and the tail of stderr, bounded.
pub fn run_hook(
    host: &dyn Host,
    script: &str,
    cwd: &Path,
    env: &HookEnv,
    timeout_ms: u64,
) -> Result<HookOutput, HookError> {
    let vars = [
        ("BATON_ISSUE_ID", env.issue_id.as_bytes()),
        ("BATON_ISSUE_IDENTIFIER", env.issue_identifier.as_bytes()),
        ("BATON_ISSUE_NUMBER", env.issue_number.as_bytes()),
        ("BATON_ISSUE_REPO", env.issue_repo.as_bytes()),
        ("BATON_ISSUE_URL", env.issue_url.as_bytes()),
        ("BATON_ISSUE_STATUS", env.issue_status.as_bytes()),
        ("BATON_WORKSPACE", cwd.as_os_str().as_bytes()),
    ];
    // NUL bytes (which no environment can carry, and which would fail every spawn) are removed.
    let clean = |v: &[u8]| OsString::from_vec(v.iter().copied().filter(|&b| b != 0).collect());
    let started = Instant::now();
    let spec = ProcessSpec {
        env: vars.map(|(k, v)| (k.into(), clean(v))).to_vec(),
        ..ProcessSpec::hook(script, cwd)
    };
    let proc = host
        .spawn(&spec)
        .map_err(|e| HookError::Spawn(e.to_string()))?;
    supervise(proc.as_ref(), started, Duration::from_millis(timeout_ms))
}

/// Run the hook `kind` (`after_create`, …) if configured, in `cwd`, and log start/failure/timeout
/// with issue context. Returns `Err` with a one-line reason when it failed: a failed
/// `after_create` or `before_run` fails the attempt; a failed `after_run` or `before_remove` is
/// logged and ignored.
pub(crate) fn run_configured_hook(
    host: &dyn Host,
    kind: &str,
    script: Option<&str>,
    cwd: &Path,
    env: &HookEnv,
    timeout_ms: u64,
) -> Result<(), String> {
    let Some(script) = script else {
        return Ok(());
    };
    let (id, ident) = (&env.issue_id, &env.issue_identifier);
    let ctx = format!("hook={kind} issue_id={id} issue_identifier={ident}");
    log::info!("hook starting {ctx} workspace={}", cwd.display());
    match run_hook(host, script, cwd, env, timeout_ms) {
        Ok(o) => {
            let (ms, out) = (o.elapsed.as_millis(), truncate_for_log(&o.stdout));
            log::debug!("hook finished {ctx} elapsed_ms={ms} stdout={out:?}");
            Ok(())
        }
        Err(e) => {
            let (out, err) = match &e {
                HookError::Failed(o) | HookError::Timeout { output: o, .. } => {
                    (truncate_for_log(&o.stdout), truncate_for_log(&o.stderr))
                }
                HookError::Spawn(_) => (String::new(), String::new()),
            };
            let msg = e.to_string();
            log::warn!("hook failed {ctx} error={msg:?} stdout={out:?} stderr={err:?}");
            Err(format!("{kind} hook {e}"))
        }
    }
}

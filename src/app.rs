//! Process-level wiring: CLI → logging → WORKFLOW.md → validation → watcher, signals, HTTP server and
//! the daemon loop. Returns the process exit code (see `cli::HELP`).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use crate::agent::claude::ClaudeRunner;
#[cfg(feature = "codex")]
use crate::agent::codex::CodexRunner;
use crate::agent::copilot::CopilotRunner;
#[cfg(feature = "gemini")]
use crate::agent::gemini::GeminiRunner;
use crate::agent::AgentRunner;
use crate::cli::{self, Command, RunArgs, EXIT_FAILURE, EXIT_FORCED_SHUTDOWN, EXIT_OK, EXIT_USAGE};
use crate::host::LocalHost;
use crate::runtime::clock::SystemClock;
use crate::runtime::daemon::{DaemonOptions, ExitWhen, RunError};
use crate::workflow::config::{AgentKind, ProcessEnv, ServiceConfig};
use crate::workflow::loader::{load_workflow, Workflow};

/// Run `baton` with `args` (without the program name); returns the exit code.
pub fn main_with_args<I>(args: I) -> i32
where
    I: IntoIterator<Item = OsString>,
{
    let cmd = match cli::parse(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("baton: usage error: {e}");
            return EXIT_USAGE;
        }
    };
    let not_built = crate::features::not_built(None, Some(&cmd));
    for e in &not_built {
        eprintln!("baton: {e}");
    }
    if !not_built.is_empty() {
        return EXIT_FAILURE;
    }
    match cmd {
        Command::Help => {
            print!("{}", cli::HELP);
            EXIT_OK
        }
        Command::Version => {
            let features = match crate::features::BUILT {
                [] => "none".to_string(),
                built => built.join(" "),
            };
            println!("baton {}\nfeatures: {features}", env!("CARGO_PKG_VERSION"));
            EXIT_OK
        }
        Command::Check(args) => {
            crate::logging::init(Some(args.log_level.unwrap_or(log::LevelFilter::Warn)));
            let out = &mut std::io::stdout().lock();
            crate::check::run_check_with_env(&args.workflow, &ProcessEnv, out)
        }
        Command::Run(args) => {
            crate::logging::init(args.log_level);
            run_workflow(&args, None, &|_| {})
        }
        #[cfg(all(feature = "backlog", feature = "http"))]
        Command::Demo(args) => {
            crate::logging::init(args.log_level);
            crate::demo::run(&args, &run_workflow)
        }
        #[cfg(not(all(feature = "backlog", feature = "http")))]
        Command::Demo(_) => EXIT_FAILURE, // refused above: feature_not_built
    }
}

/// Load and validate the workflow for startup; on failure print one actionable line.
fn load_for_startup(path: &Path) -> Result<Workflow, String> {
    let wf = load_workflow(path, &ProcessEnv).map_err(|e| e.to_string())?;
    for w in &wf.config.warnings {
        log::warn!("event=config_warning file={} {w}", path.display());
    }
    if let Some(e) = crate::features::not_built(Some(&wf.config.config), None).first() {
        return Err(format!("{e} ({})", path.display()));
    }
    let errs = wf.config.config.preflight_errors();
    let Some(first) = errs.first() else {
        return Ok(wf);
    };
    let (class, file, msg) = (first.class, path.display(), &first.message);
    match errs.len() - 1 {
        0 => Err(format!("{class}: {file}: {msg}")),
        more => Err(format!(
            "{class}: {file}: {msg} (and {more} more problem(s))"
        )),
    }
}

/// The agent runner selected by `agent.kind` (Claude Code when unset, which preflight rejects, or
/// when the kind's feature is not built, which `features::not_built` refuses first).
fn agent_runner(cfg: &ServiceConfig) -> Arc<dyn AgentRunner> {
    let sandbox = cfg.agent_sandbox();
    match cfg.agent.kind {
        Some(AgentKind::Copilot) => {
            Arc::new(CopilotRunner::new(cfg.copilot.clone()).with_sandbox(sandbox))
        }
        #[cfg(feature = "codex")]
        Some(AgentKind::Codex) => {
            Arc::new(CodexRunner::new(cfg.codex.clone()).with_sandbox(sandbox))
        }
        #[cfg(feature = "gemini")]
        Some(AgentKind::Gemini) => {
            Arc::new(GeminiRunner::new(cfg.gemini.clone()).with_sandbox(sandbox))
        }
        _ => Arc::new(ClaudeRunner::new(cfg.claude_code.clone()).with_sandbox(sandbox)),
    }
}

/// Run the daemon on `args.workflow` until a clean shutdown, or until `exit_when` holds
/// (`baton demo`); `on_listen` gets the dashboard's bound address. Returns the exit code.
pub(crate) fn run_workflow(
    args: &RunArgs,
    exit_when: Option<ExitWhen>,
    on_listen: &dyn Fn(SocketAddr),
) -> i32 {
    start_and_run(args, exit_when, on_listen).unwrap_or_else(|e| {
        eprintln!("baton: {e}");
        EXIT_FAILURE
    })
}

/// [`run_workflow`]; `Err` is a startup failure.
fn start_and_run(
    args: &RunArgs,
    exit_when: Option<ExitWhen>,
    on_listen: &dyn Fn(SocketAddr),
) -> Result<i32, String> {
    let ops = crate::ops::sdnotify::take_systemd_env();
    let wf = load_for_startup(&args.workflow)?;
    // The instance lock comes first: nothing (not even startup cleanup) runs without it. Then
    // agents that run here need a working sandbox: never silently unconfined.
    let cfg = &wf.config.config;
    let state = crate::runtime::persist::acquire(cfg).map_err(|e| e.to_string())?;
    let local = cfg.worker.ssh_hosts.is_empty();
    if let Some(sb) = cfg.agent_sandbox().filter(|_| local) {
        sb.check(&LocalHost)?;
    }
    // Agents hold descriptors (`runtime::fds`): the soft limit goes up to the hard one.
    match crate::runtime::fds::raise_nofile_limit() {
        Ok(((soft_before, _), (soft, hard))) => log::info!(
            "event=nofile_limit soft_before={soft_before} soft={soft} hard={hard} agents_allowed={}",
            crate::runtime::fds::agents_allowed_now().unwrap_or(0)
        ),
        Err(e) => log::warn!("event=nofile_limit cannot raise the soft RLIMIT_NOFILE error={e}"),
    }
    let shutdown_rx = crate::signals::shutdown_channel()
        .map_err(|e| format!("startup_failed: cannot install signal handlers: {e}"))?;
    let (_watcher, reload_rx) = crate::workflow::watch::watch_workflow(&args.workflow)
        .map_err(|e| format!("startup_failed: {}: {e}", args.workflow.display()))?;
    let (control_tx, control_rx) = crossbeam_channel::bounded(64);
    let server = &cfg.server;
    #[cfg(feature = "http")]
    let _http = crate::http::start(args.port, args.bind.as_deref(), server, &ops, control_tx)?
        .inspect(|h| on_listen(h.local_addr()));
    #[cfg(not(feature = "http"))]
    let _ = (server, control_tx, on_listen); // nothing serves (the flags and keys are refused)
    let opts = DaemonOptions {
        initial: wf,
        tracker_factory: Box::new(|cfg| crate::tracker::open(&cfg.tracker)),
        runner_factory: Box::new(agent_runner),
        reload_rx,
        shutdown_rx,
        control_rx,
        config_env: Arc::new(ProcessEnv),
        clock: Arc::new(SystemClock::default()),
    };
    let result = crate::runtime::daemon::run_with_state(opts, ops, state, exit_when);
    if let Err(e) = &result {
        eprintln!("baton: {}: {e}", args.workflow.display());
    }
    Ok(exit_code(&result))
}

/// The exit code of a daemon run: 0, 3 for a `forced_shutdown`, else 1.
fn exit_code(result: &Result<(), RunError>) -> i32 {
    match result {
        Ok(()) => EXIT_OK,
        Err(RunError::ForcedShutdown { .. }) => EXIT_FORCED_SHUTDOWN,
        Err(RunError::Startup(_) | RunError::ThreadDied(_) | RunError::LockLost(_)) => EXIT_FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::RunError;

    #[test]
    fn a_forced_shutdown_exits_3() {
        let forced = RunError::ForcedShutdown { workers: 1 };
        let text = forced.to_string();
        assert_eq!(super::exit_code(&Err(forced)), 3);
        assert!(text.starts_with("forced_shutdown: 1 worker(s)"), "{text}");
        // A startup error that happens to start with the same word is not one.
        let startup = RunError::Startup("forced_shutdown: not really".into());
        assert_eq!(super::exit_code(&Err(startup)), 1);
        assert_eq!(super::exit_code(&Err(RunError::ThreadDied("x".into()))), 1);
        assert_eq!(super::exit_code(&Err(RunError::LockLost("lost".into()))), 1);
        assert_eq!(super::exit_code(&Ok(())), 0);
    }
}

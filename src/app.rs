//! Process-level wiring: CLI → logging → WORKFLOW.md → validation → watcher, signals, HTTP server and
//! the daemon loop. Returns the process exit code (see `cli::HELP`).

use std::ffi::OsString;
use std::path::Path;

use crate::cli::{self, Command, RunArgs, EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use crate::workflow::config::ProcessEnv;
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
    match cmd {
        Command::Help => {
            print!("{}", cli::HELP);
            EXIT_OK
        }
        Command::Version => {
            println!("baton {}", env!("CARGO_PKG_VERSION"));
            EXIT_OK
        }
        Command::Check {
            workflow,
            log_level,
        } => {
            crate::logging::init(Some(log_level.unwrap_or(log::LevelFilter::Warn)));
            run_check(&workflow)
        }
        Command::Run(args) => {
            crate::logging::init(args.log_level);
            run_daemon(args)
        }
    }
}

/// Load and validate the workflow for startup; on failure print one actionable line.
pub fn load_for_startup(path: &Path) -> Result<Workflow, String> {
    let wf = load_workflow(path, &ProcessEnv).map_err(|e| e.to_string())?;
    for w in &wf.config.warnings {
        log::warn!("event=config_warning file={} {w}", path.display());
    }
    let errs = wf.config.config.preflight_errors();
    if let Some(first) = errs.first() {
        let more = if errs.len() > 1 {
            format!(" (and {} more problem(s))", errs.len() - 1)
        } else {
            String::new()
        };
        return Err(format!(
            "{}: {}: {}{more}",
            first.class,
            path.display(),
            first.message
        ));
    }
    Ok(wf)
}

fn run_check(path: &Path) -> i32 {
    match load_for_startup(path) {
        Ok(_) => {
            println!("workflow {} is valid", path.display());
            EXIT_OK
        }
        Err(e) => {
            eprintln!("baton: {e}");
            EXIT_FAILURE
        }
    }
}

fn run_daemon(args: RunArgs) -> i32 {
    let wf = match load_for_startup(&args.workflow) {
        Ok(wf) => wf,
        Err(e) => {
            eprintln!("baton: {e}");
            return EXIT_FAILURE;
        }
    };
    let shutdown = match crate::signals::shutdown_channel() {
        Ok(rx) => rx,
        Err(e) => {
            eprintln!("baton: startup_failed: cannot install signal handlers: {e}");
            return EXIT_FAILURE;
        }
    };
    let (_watcher, _reload_rx) = match crate::workflow::watch::watch_workflow(&args.workflow) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("baton: startup_failed: {e}");
            return EXIT_FAILURE;
        }
    };
    log::info!(
        "event=startup workflow={} poll_interval_ms={}",
        wf.path.display(),
        wf.config.config.poll_interval_ms
    );
    let _ = shutdown.recv();
    log::info!("event=shutdown reason=signal");
    EXIT_OK
}

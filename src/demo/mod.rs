//! `baton demo`: the newcomer's first command. It needs no token and no model account.
//!
//! It writes a fresh directory under the system temporary directory (`$TMPDIR`, else `/tmp`),
//! `baton-demo-<UTC time>-<pid>/`, holding a Backlog.md board of three tasks (`backlog/`), a
//! WORKFLOW.md with `tracker.kind: backlog_md` and hooks that print (and append to `hooks.log`),
//! and the demo agent `demo-agent.sh`, a readable script that speaks Claude Code's stream-json
//! protocol. Then it runs the real daemon on that workflow with the dashboard on
//! `http://127.0.0.1:8787/` (`--port` overrides) and shuts down by itself, with a summary, once
//! every task is Done and its workspace is removed. The directory is left for the user to read.
//! `--agent claude` runs the real `claude` CLI instead (installed and logged in).

mod files;

use std::cell::RefCell;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::SystemTime;

use crate::cli::{DemoArgs, RunArgs, EXIT_FAILURE, EXIT_OK};
use crate::model::contains_name;
use crate::runtime::daemon::ExitWhen;
use crate::status::StateSnapshot;
use crate::tracker::backlog::read_board;

/// The terminal status the demo waits for.
const DONE: &str = "Done";

/// How `baton demo` runs the daemon: `app::run_workflow`, passed in by `app` (which sits above
/// this module) with the demo's workflow, its exit condition and the dashboard callback.
pub type RunDaemon<'a> = &'a dyn Fn(&RunArgs, Option<ExitWhen>, &dyn Fn(SocketAddr)) -> i32;

/// Run `baton demo`; returns the exit code.
pub fn run(args: &DemoArgs, run_daemon: RunDaemon<'_>) -> i32 {
    if args.real_claude && !on_path("claude") {
        eprintln!(
            "baton demo: --agent claude needs the `claude` CLI on PATH, logged in \
             (`claude` once, or ANTHROPIC_API_KEY); without --agent the demo agent needs nothing"
        );
        return EXIT_FAILURE;
    }
    let dir = match create(&std::env::temp_dir(), args) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("baton demo: startup_failed: cannot write the demo directory: {e}");
            return EXIT_FAILURE;
        }
    };
    println!(
        "baton demo: a Backlog.md board with 3 tasks in {}",
        dir.display()
    );
    println!("  board:    {}/backlog/tasks/", dir.display());
    println!("  workflow: {}/WORKFLOW.md", dir.display());
    match args.real_claude {
        true => println!("  agent:    the real `claude` CLI"),
        false => println!(
            "  agent:    {}/demo-agent.sh (Claude Code's stream-json, no account)",
            dir.display()
        ),
    }
    let last: Rc<RefCell<Option<StateSnapshot>>> = Rc::new(RefCell::new(None));
    let seen = last.clone();
    let board = dir.join("backlog");
    let workspaces = dir.join("workspaces");
    let exit_when = Box::new(move |s: &StateSnapshot| {
        *seen.borrow_mut() = Some(s.clone());
        finished(s, &board, &workspaces)
    });
    let run = RunArgs {
        workflow: dir.join("WORKFLOW.md"),
        port: Some(args.port),
        bind: None,
        log_level: args.log_level,
    };
    let listened = std::cell::Cell::new(false);
    let on_listen = |addr: SocketAddr| {
        listened.set(true);
        println!("  dashboard: http://{addr}/  (JSON: http://{addr}/api/v1/state)");
        println!("baton demo: running; it stops by itself when every task is Done (Ctrl-C stops it earlier)");
    };
    let code = run_daemon(&run, Some(exit_when), &on_listen);
    if code != EXIT_OK && !listened.get() {
        // It never ran (the port is taken, …): nothing in the directory is worth keeping.
        match fs::remove_dir_all(&dir) {
            Ok(()) => eprintln!("baton demo: removed {}", dir.display()),
            Err(e) => eprintln!("baton demo: cannot remove {}: {e}", dir.display()),
        }
        return code;
    }
    let snapshot = last.borrow().clone();
    if code == EXIT_OK {
        print_summary(&dir, snapshot.as_ref());
    }
    code
}

/// True when every task of the board is Done (or in `completed/`/`archive/tasks/`), nothing runs
/// or waits for a retry, and every workspace is removed (`before_remove` ran).
fn finished(s: &StateSnapshot, board: &Path, workspaces: &Path) -> bool {
    if !s.running.is_empty() || !s.retrying.is_empty() {
        return false;
    }
    let empty = fs::read_dir(workspaces).map_or(true, |mut d| d.next().is_none());
    if !empty {
        return false;
    }
    let Ok(b) = read_board(board) else {
        return false;
    };
    let done = [DONE.to_string()];
    !b.tasks.is_empty()
        && b.tasks
            .iter()
            .all(|t| t.location.is_terminal() || contains_name(&done, &t.task.status))
}

/// Write the demo directory under `parent`; returns its path.
fn create(parent: &Path, args: &DemoArgs) -> io::Result<PathBuf> {
    let now = SystemTime::now();
    let stamp = humantime::format_rfc3339_seconds(now).to_string(); // 2026-11-30T07:09:52Z
    let compact: String = stamp.chars().filter(|c| c.is_ascii_digit()).collect();
    let dir = parent.join(format!("baton-demo-{compact}-{}", std::process::id()));
    fs::create_dir(&dir)?;
    let dir = fs::canonicalize(&dir)?;
    let created = format!("{} {}", &stamp[..10], &stamp[11..16]);
    let tasks = dir.join("backlog/tasks");
    fs::create_dir_all(&tasks)?;
    fs::create_dir_all(dir.join("workspaces"))?;
    fs::write(dir.join("backlog/config.yml"), files::BOARD_CONFIG)?;
    for t in files::TASKS {
        fs::write(tasks.join(t.file_name()), t.text(&created))?;
    }
    let script = dir.join("demo-agent.sh");
    fs::write(&script, files::AGENT_SCRIPT)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
    }
    let wf = files::workflow(&dir, args.port, args.real_claude);
    fs::write(dir.join("WORKFLOW.md"), wf)?;
    Ok(dir)
}

/// The closing summary: each task's final status, the agents' totals, the hook lines.
fn print_summary(dir: &Path, s: Option<&StateSnapshot>) {
    println!();
    match s {
        Some(s) if finished(s, &dir.join("backlog"), &dir.join("workspaces")) => {
            println!("baton demo: all tasks are Done.")
        }
        _ => {
            println!("baton demo: stopped before every task was Done.");
        }
    }
    if let Ok(board) = read_board(&dir.join("backlog")) {
        for t in &board.tasks {
            println!("  {:<8} {:<12} {}", t.task.id, t.task.status, t.task.title);
        }
    }
    if let Some(s) = s {
        let t = &s.agent_totals;
        println!(
            "  agents: {} tokens ({} in, {} out), ${:.4} reported cost, {:.1} s of agent time",
            t.tokens.total_tokens,
            t.tokens.input_tokens,
            t.tokens.output_tokens,
            t.cost_usd,
            t.seconds_running
        );
    }
    let hooks = fs::read_to_string(dir.join("hooks.log")).unwrap_or_default();
    println!("  hooks ({}/hooks.log):", dir.display());
    for line in hooks.lines() {
        println!("    {line}");
    }
    println!(
        "  everything stays in {} (remove it with `rm -r`); `baton {}/WORKFLOW.md` runs it again",
        dir.display(),
        dir.display()
    );
}

/// True when `name` is an executable file in a `PATH` directory.
fn on_path(name: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|d| d.join(name).is_file())
}

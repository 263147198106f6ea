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
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::SystemTime;

use crate::cli::{DemoArgs, RunArgs, EXIT_FAILURE, EXIT_OK};
use crate::model::normalize_name;
use crate::runtime::daemon::ExitWhen;
use crate::status::StateSnapshot;
use crate::tracker::backlog::{read_board, BoardTask};

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
    let d = dir.display();
    println!("baton demo: a Backlog.md board with 3 tasks in {d}");
    println!("  board:    {d}/backlog/tasks/");
    println!("  workflow: {d}/WORKFLOW.md");
    match args.real_claude {
        true => println!("  agent:    the real `claude` CLI"),
        false => println!("  agent:    {d}/demo-agent.sh (Claude Code's stream-json, no account)"),
    }
    let last = Rc::new(RefCell::new(None::<StateSnapshot>));
    let (seen, board, workspaces) = (last.clone(), dir.join("backlog"), dir.join("workspaces"));
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
            Ok(()) => eprintln!("baton demo: removed {d}"),
            Err(e) => eprintln!("baton demo: cannot remove {d}: {e}"),
        }
        return code;
    }
    if code == EXIT_OK {
        print_summary(&dir, last.borrow().as_ref());
    }
    code
}

/// True when every task of the board is Done (or in `completed/`/`archive/tasks/`), nothing runs
/// or waits for a retry, and every workspace is removed (`before_remove` ran).
fn finished(s: &StateSnapshot, board: &Path, workspaces: &Path) -> bool {
    let done = |t: &BoardTask| t.location.is_terminal() || normalize_name(&t.task.status) == "done";
    s.running.is_empty()
        && s.retrying.is_empty()
        && fs::read_dir(workspaces).map_or(true, |mut d| d.next().is_none())
        && read_board(board).is_ok_and(|b| !b.tasks.is_empty() && b.tasks.iter().all(done))
}

/// Write the demo directory under `parent`; returns its path.
fn create(parent: &Path, args: &DemoArgs) -> io::Result<PathBuf> {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now()).to_string(); // 2026-11-30T07:09:52Z
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
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
    let wf = files::workflow(&dir, args.port, args.real_claude);
    fs::write(dir.join("WORKFLOW.md"), wf)?;
    Ok(dir)
}

/// The closing summary: each task's final status, the agents' totals, the hook lines.
fn print_summary(dir: &Path, s: Option<&StateSnapshot>) {
    let all_done = s.is_some_and(|s| finished(s, &dir.join("backlog"), &dir.join("workspaces")));
    println!();
    match all_done {
        true => println!("baton demo: all tasks are Done."),
        false => println!("baton demo: stopped before every task was Done."),
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
    let (hooks, d) = (fs::read_to_string(dir.join("hooks.log")), dir.display());
    println!("  hooks ({d}/hooks.log):");
    for line in hooks.unwrap_or_default().lines() {
        println!("    {line}");
    }
    println!(
        "  everything stays in {d} (remove it with `rm -r`); `baton {d}/WORKFLOW.md` runs it again"
    );
}

/// True when `name` is an executable file in a `PATH` directory.
fn on_path(name: &str) -> bool {
    let dirs = std::env::var_os("PATH");
    dirs.is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

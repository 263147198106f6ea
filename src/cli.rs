//! Command-line parsing (lexopt) and the `--help` text.

use std::ffi::OsString;
use std::path::PathBuf;

/// Exit code: clean shutdown (SIGINT/SIGTERM) or a healthy `baton check`.
pub const EXIT_OK: i32 = 0;
/// Exit code: startup or validation failure (bad WORKFLOW.md, config, tracker, …).
pub const EXIT_FAILURE: i32 = 1;
/// Exit code: usage error (unknown flag, bad flag value).
pub const EXIT_USAGE: i32 = 2;
/// Exit code: `forced_shutdown`, workers did not stop within the shutdown grace (their process
/// groups were killed before exiting).
pub const EXIT_FORCED_SHUTDOWN: i32 = 3;

pub const HELP: &str = "\
baton — run coding agents on the issues of a GitHub Projects (v2) or Backlog.md board

USAGE:
    baton [OPTIONS] [PATH-TO-WORKFLOW.md]        run the daemon
    baton check [PATH-TO-WORKFLOW.md]            preflight: validate, resolve the project, show the plan
    baton demo [--port N] [--agent demo|claude]  a tour with no credentials: a fresh Backlog.md board of
                                                 3 tasks, a demo agent, the dashboard; exits when done

ARGS:
    PATH-TO-WORKFLOW.md   workflow file (YAML front matter + prompt template);
                          default: ./WORKFLOW.md in the current directory

OPTIONS:
    --port N              serve the dashboard and JSON API on port N (0 = ephemeral);
                          overrides server.port in WORKFLOW.md
    --bind ADDR           address for the dashboard/API (default 127.0.0.1; overrides server.host)
    --log-level LEVEL     error | warn | info | debug | trace (default info; overrides RUST_LOG)
    --agent demo|claude   `baton demo` only: the bundled demo agent script (default, needs nothing)
                          or the real `claude` CLI (installed and logged in); demo port default 8787
    -h, --help            print this help
    -V, --version         print the version and the Cargo features built

ENVIRONMENT:
    GITHUB_TOKEN          tracker token when tracker.token is not set (then `gh auth token`)
    TMPDIR                where `baton demo` writes its directory (default /tmp)
    RUST_LOG              log filter, e.g. `info` or `baton=debug` (--log-level wins)
    JOURNAL_STREAM        set by systemd: log lines get <N> priority prefixes and no timestamps

EXIT CODES:
    0   clean shutdown after SIGINT/SIGTERM (all agents stopped); `baton check` found no problem
    1   startup/validation failure (missing or invalid WORKFLOW.md, config, tracker); `check` found a problem
    2   usage error (unknown option, bad option value)
    3   forced_shutdown: workers did not stop within the shutdown grace (their process groups were killed)

Reloads WORKFLOW.md automatically when it changes; an invalid edit keeps the last good config.
";

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Run(RunArgs),
    /// `baton check [PATH]` (never with `--port` or `--bind`).
    Check(RunArgs),
    Help,
    Version,
    Demo(DemoArgs),
}

/// Options of `baton demo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoArgs {
    pub port: u16,
    /// `--agent claude`: the real Claude Code CLI instead of the demo agent script.
    pub real_claude: bool,
    pub log_level: Option<log::LevelFilter>,
}

/// The dashboard port of `baton demo` without `--port`.
pub const DEMO_PORT: u16 = 8787;

/// Options of the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunArgs {
    /// The positional path, else `./WORKFLOW.md`.
    pub workflow: PathBuf,
    pub port: Option<u16>,
    pub bind: Option<String>,
    pub log_level: Option<log::LevelFilter>,
}

/// Parse arguments (without the program name); `Err` is a usage error (exit code 2).
pub fn parse<I>(args: I) -> Result<Command, String>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    use lexopt::prelude::*;
    let usage = |e: lexopt::Error| format!("{e}; try `baton --help`");
    let mut parser = lexopt::Parser::from_args(args);
    let (mut run, mut agent) = (RunArgs::default(), None);
    let mut positional: Vec<OsString> = Vec::new();
    while let Some(arg) = parser.next().map_err(usage)? {
        let flag = match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Short('V') | Long("version") => return Ok(Command::Version),
            Value(v) => {
                positional.push(v);
                continue;
            }
            Long(name @ ("port" | "bind" | "log-level" | "agent")) => name.to_string(),
            _ => return Err(usage(arg.unexpected())),
        };
        let value = parser.value().map_err(usage)?;
        let s = value.to_string_lossy().to_string();
        match flag.as_str() {
            "port" => {
                let bad = |_| format!("--port must be an integer from 0 to 65535, got {s:?}");
                run.port = Some(s.parse().map_err(bad)?);
            }
            "bind" if value.to_str().is_none() => return Err("--bind must be valid UTF-8".into()),
            "bind" if s.trim().is_empty() => return Err("--bind must not be empty".into()),
            "bind" => run.bind = Some(s),
            "log-level" => {
                let levels = "off, error, warn, info, debug, trace";
                let bad = |_| format!("--log-level must be one of {levels}; got {s:?}");
                run.log_level = Some(s.parse().map_err(bad)?);
            }
            _ if s != "demo" && s != "claude" => {
                return Err(format!("--agent must be demo or claude, got {s:?}"))
            }
            _ => agent = Some(s),
        }
    }
    if positional.first().is_some_and(|p| p == "demo") {
        if positional.len() > 1 || run.bind.is_some() {
            return Err("`baton demo` takes only --port, --agent and --log-level".into());
        }
        return Ok(Command::Demo(DemoArgs {
            port: run.port.unwrap_or(DEMO_PORT),
            real_claude: agent.as_deref() == Some("claude"),
            log_level: run.log_level,
        }));
    }
    if agent.is_some() {
        return Err("--agent is an option of `baton demo`".into());
    }
    let is_check = positional.first().is_some_and(|p| p == "check");
    if is_check {
        positional.remove(0);
        if run.port.is_some() || run.bind.is_some() {
            return Err("`baton check` takes no --port/--bind".into());
        }
    }
    if positional.len() > 1 {
        return Err(format!(
            "expected at most one workflow path, got {}; try `baton --help`",
            positional.len()
        ));
    }
    run.workflow = positional.pop().map_or("WORKFLOW.md".into(), PathBuf::from);
    Ok(match is_check {
        true => Command::Check(run),
        false => Command::Run(run),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn default_path_is_cwd_workflow() {
        let Command::Run(r) = run(&[]).unwrap() else {
            panic!()
        };
        assert_eq!(r.workflow, PathBuf::from("WORKFLOW.md"));
        assert_eq!(r.port, None);
    }

    #[test]
    fn positional_path_and_flags() {
        let Command::Run(r) = run(&[
            "--port",
            "0",
            "--bind",
            "0.0.0.0",
            "x/W.md",
            "--log-level",
            "debug",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(r.workflow, PathBuf::from("x/W.md"));
        assert_eq!(r.port, Some(0));
        assert_eq!(r.bind.as_deref(), Some("0.0.0.0"));
        assert_eq!(r.log_level, Some(log::LevelFilter::Debug));
    }

    #[test]
    fn check_subcommand() {
        assert_eq!(
            run(&["check", "a.md"]).unwrap(),
            Command::Check(RunArgs {
                workflow: PathBuf::from("a.md"),
                ..RunArgs::default()
            })
        );
        assert!(run(&["check", "--port", "1"]).is_err());
    }

    #[test]
    fn usage_errors() {
        assert!(run(&["--port", "70000"]).unwrap_err().contains("--port"));
        assert!(run(&["--nope"]).is_err());
        assert!(run(&["a", "b"]).is_err());
        assert!(run(&["--log-level", "loud"])
            .unwrap_err()
            .contains("--log-level"));
        assert_eq!(run(&["--help"]).unwrap(), Command::Help);
        assert_eq!(run(&["-V"]).unwrap(), Command::Version);
    }

    #[test]
    fn demo_subcommand() {
        assert_eq!(
            run(&["demo"]).unwrap(),
            Command::Demo(DemoArgs {
                port: DEMO_PORT,
                real_claude: false,
                log_level: None
            })
        );
        let Command::Demo(d) = run(&["demo", "--port", "9000", "--agent", "claude"]).unwrap()
        else {
            panic!()
        };
        assert_eq!((d.port, d.real_claude), (9000, true));
        assert!(run(&["demo", "--agent", "gpt"]).is_err());
        assert!(run(&["demo", "x.md"]).is_err());
        assert!(run(&["--agent", "claude"]).is_err());
    }
}

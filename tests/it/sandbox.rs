//! `sandbox.kind: bubblewrap` (spec §15.5) with the real `bwrap`: what a confined agent can see,
//! write and signal, that stopping it leaves nothing behind, that a missing `bwrap` fails closed,
//! and the real `claude` CLI working (and failing to escape) inside it, locally and over SSH.
//!
//! Needs `BATON_BWRAP` (`.ci/setup-sandbox.sh`: Debian's `bubblewrap`); the real-CLI test also
//! `BATON_CLAUDE_BIN`, the SSH test `BATON_SSHD`.

use crate::support::agent::{claude_config, run, Knobs, ISSUE};
use crate::support::fake_anthropic::{FakeAnthropic, Step};
use crate::support::procs::{processes_matching, wait_none_matching};
#[cfg(feature = "ssh")]
use crate::support::sshd::Lab;
use crate::support::tempdir::TempDir;
use crate::support::tool;

use std::collections::BTreeMap;
use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton::agent::claude::ClaudeRunner;
use baton::agent::{AgentRunner, SessionContext};
use baton::host::sandbox::{Sandbox, SandboxConfig};
use baton::host::{Host, LocalHost, Process, ProcessSpec, StdoutItem};
use baton::workflow::config::AgentKind;
use serde_json::json;

fn need_bwrap() {
    tool::required("BATON_BWRAP", ".ci/setup-sandbox.sh");
}

/// A service user's world in a temp dir: the workspace root with this issue's workspace `ws`
/// and another issue's (`other`, with its CLI state), `state.dir` (inside `shared/`, which tests
/// may make readable), the WORKFLOW.md directory `etc/`, and a HOME holding an SSH key and
/// Claude credentials.
struct World {
    _tmp: TempDir,
    dir: PathBuf,
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    state: PathBuf,
    etc: PathBuf,
}

impl World {
    fn new(tag: &str) -> World {
        let tmp = TempDir::new(tag);
        let dir = tmp.canonicalize().unwrap();
        let files = [
            ("root/ws/mine.txt", "mine"),
            ("root/other/secret.txt", "other issue"),
            ("root/.agent-other/claude/projects/s.jsonl", "other session"),
            ("shared/state/state.json", "{}"),
            ("shared/ok.txt", "shared"),
            ("etc/WORKFLOW.md", "prompt"),
            ("home/.ssh/id_ed25519", "PRIVATE KEY"),
            ("home/.claude/.credentials.json", "{\"token\":1}"),
            ("home/.gitconfig", "[user]"),
        ];
        for (p, text) in files {
            fs::create_dir_all(dir.join(p).parent().unwrap()).unwrap();
            fs::write(dir.join(p), text).unwrap();
        }
        World {
            _tmp: tmp,
            root: dir.join("root"),
            ws: dir.join("root/ws"),
            home: dir.join("home"),
            state: dir.join("shared/state"),
            etc: dir.join("etc"),
            dir,
        }
    }

    fn config(&self) -> SandboxConfig {
        SandboxConfig {
            bubblewrap: true,
            hidden: vec![self.etc.clone(), self.state.clone()],
            ..Default::default()
        }
    }

    fn sandbox(&self, edit: impl FnOnce(&mut SandboxConfig)) -> Sandbox {
        let mut cfg = self.config();
        edit(&mut cfg);
        Sandbox::new(cfg, AgentKind::ClaudeCode.cli_home(), "bash")
    }

    /// `script` as an agent command in `ws`, confined by `sb`, with this HOME.
    fn spec(&self, sb: &Sandbox, script: &str) -> ProcessSpec {
        let mut spec = ProcessSpec::command(&format!("{script}\n:"), &self.ws);
        spec.env("HOME", &self.home);
        sb.wrap(&mut spec, None);
        spec
    }

    /// Run `script` confined; its stdout as `name -> value` lines (`probe` prints them).
    fn probe(&self, sb: &Sandbox, script: &str) -> BTreeMap<String, String> {
        let script = format!("{PROBE}\n{script}");
        let (out, code, err) = run_spec(&LocalHost, &self.spec(sb, &script));
        assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
        out.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// `t NAME CMD…`: prints `NAME yes` when the command succeeds, else `NAME no`.
const PROBE: &str =
    r#"t() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n yes"; else echo "$n no"; fi; }"#;

/// Spawn `spec` on `host`; (stdout, exit code, stderr tail).
fn run_spec(host: &dyn Host, spec: &ProcessSpec) -> (String, Option<i32>, String) {
    let p = host.spawn(spec).expect("spawn");
    let out = read_all(p.as_ref());
    let code = p.wait_exit(Duration::from_secs(30)).and_then(|s| s.code());
    (out, code, p.stderr_tail_after(Duration::from_secs(5)))
}

fn read_all(p: &dyn Process) -> String {
    let mut out = String::new();
    while let Ok(item) = p.lines().recv_timeout(Duration::from_secs(60)) {
        match item {
            StdoutItem::Line(l) => out.push_str(&format!("{l}\n")),
            StdoutItem::Lines(ls) => ls.iter().for_each(|l| out.push_str(&format!("{l}\n"))),
            StdoutItem::Eof => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    out
}

fn assert_probes(got: &BTreeMap<String, String>, want: &[(&str, &str)]) {
    for (k, v) in want {
        assert_eq!(got.get(*k).map(String::as_str), Some(*v), "{k}: {got:?}");
    }
}

#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn sandbox_hides_other_workspaces() {
    need_bwrap();
    let w = World::new("sb-ws");
    let sb = w.sandbox(|_| {});
    let r = w.root.display();
    let got = w.probe(
        &sb,
        &format!(
            "t own cat mine.txt\nt other cat {r}/other/secret.txt\n\
             t other_session cat {r}/.agent-other/claude/projects/s.jsonl\n\
             echo root_entries $(ls -A {r} | tr '\\n' ,)"
        ),
    );
    assert_probes(
        &got,
        &[("own", "yes"), ("other", "no"), ("other_session", "no")],
    );
    // Only the mount points of this issue's workspace and CLI state exist under the root.
    assert_eq!(got["root_entries"], ".agent-ws,ws,", "{got:?}");
}

/// An npm-style CLI (`bin/tool` a link to a script that reads a file next to its real path, as
/// Codex's and Gemini's launchers do) runs confined when named by its link: on `PATH` in the
/// hidden HOME (an npm prefix there), inside its `node_modules`, and in a readable directory.
#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn sandbox_runs_a_cli_named_by_its_bin_link() {
    need_bwrap();
    let w = World::new("sb-link");
    let script = "#!/bin/sh\ncat \"$(dirname \"$(readlink -f \"$0\")\")/../data.txt\"\n";
    let link = |at: &str, to: &str| {
        let at = w.dir.join(at);
        fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(to, at).unwrap();
    };
    for prefix in ["home/.npm-global/lib", "prefix/lib"] {
        let pkg = w.dir.join(prefix).join("node_modules/tool");
        fs::create_dir_all(pkg.join("bin")).unwrap();
        fs::write(pkg.join("data.txt"), format!("data of {prefix}")).unwrap();
        fs::write(pkg.join("bin/tool"), script).unwrap();
        fs::set_permissions(pkg.join("bin/tool"), fs::Permissions::from_mode(0o755)).unwrap();
    }
    link(
        "home/.npm-global/bin/tool",
        "../lib/node_modules/tool/bin/tool",
    );
    link("prefix/lib/node_modules/.bin/tool", "../tool/bin/tool");
    link("shared/bin/tool", "../../prefix/lib/node_modules/.bin/tool");
    let profile = format!("PATH={}:$PATH\n", w.home.join(".npm-global/bin").display());
    fs::write(w.home.join(".profile"), profile).unwrap();
    let d = w.dir.display();
    for (command, want) in [
        ("tool".to_string(), "data of home/.npm-global/lib"),
        (
            format!("'{d}/prefix/lib/node_modules/.bin/tool'"),
            "data of prefix/lib",
        ),
        (format!("'{d}/shared/bin/tool'"), "data of prefix/lib"),
    ] {
        let mut cfg = w.config();
        cfg.readable = vec![w.dir.join("shared")];
        let sb = Sandbox::new(cfg, AgentKind::Codex.cli_home(), &command);
        let mut spec = ProcessSpec::command(&command, &w.ws);
        spec.env("HOME", &w.home);
        sb.wrap(&mut spec, None);
        let (out, code, err) = run_spec(&LocalHost, &spec);
        assert_eq!((out.trim(), code), (want, Some(0)), "{command}: {err}");
    }
}

#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn sandbox_hides_state_dir_and_home() {
    need_bwrap();
    let w = World::new("sb-state");
    // `shared/` is readable, yet the state dir inside it stays hidden.
    let sb = w.sandbox(|c| c.readable = vec![w.dir.join("shared")]);
    let d = w.dir.display();
    let got = w.probe(
        &sb,
        &format!(
            "t state cat {d}/shared/state/state.json\nt shared cat {d}/shared/ok.txt\n\
             t workflow cat {d}/etc/WORKFLOW.md\nt ssh_key cat $HOME/.ssh/id_ed25519\n\
             t home_creds cat $HOME/.claude/.credentials.json\n\
             t cli_creds cat \"$CLAUDE_CONFIG_DIR/.credentials.json\"\n\
             echo home_entries $(ls -A $HOME | wc -l)\necho config_dir $CLAUDE_CONFIG_DIR"
        ),
    );
    assert_probes(
        &got,
        &[
            ("state", "no"),
            ("shared", "yes"),
            ("workflow", "no"),
            ("ssh_key", "no"),
            ("home_creds", "no"),
            ("cli_creds", "yes"),
            ("home_entries", "0"),
        ],
    );
    // WORKFLOW.md in the home directory: a readable file deeper inside it still shows.
    let sb = w.sandbox(|c| {
        c.hidden.push(w.home.clone());
        c.readable = vec![w.home.join(".gitconfig")];
    });
    let home = w.probe(
        &sb,
        "t gitconfig cat $HOME/.gitconfig\nt ssh_key cat $HOME/.ssh/id_ed25519",
    );
    assert_probes(&home, &[("gitconfig", "yes"), ("ssh_key", "no")]);
    // The CLI's state is per issue, next to the workspace, and survives the run.
    let state = w.root.join(".agent-ws/claude");
    assert_eq!(got["config_dir"], state.display().to_string());
    assert!(state.is_dir());
}

#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn sandbox_blocks_writes_outside_workspace() {
    need_bwrap();
    let w = World::new("sb-write");
    let cache = w.dir.join("cache");
    fs::create_dir(&cache).unwrap();
    let sb = w.sandbox(|c| c.writable = vec![cache.clone()]);
    let (d, r) = (w.dir.display(), w.root.display());
    let host_tmp = format!("/tmp/baton-sandbox-escape-{}", std::process::id());
    let got = w.probe(
        &sb,
        &format!(
            "t ws touch made.txt\nt cache touch {d}/cache/c\nt usr touch /usr/x\nt etc touch /etc/x\n\
             t sibling touch {r}/other/x\nt root touch {r}/x; t home touch $HOME/x; t tmp touch {host_tmp}\n\
             t cli_state touch \"$CLAUDE_CONFIG_DIR/s\"\nt dir touch {d}/x"
        ),
    );
    assert_probes(
        &got,
        &[
            ("ws", "yes"),
            ("cache", "yes"),
            ("cli_state", "yes"),
            ("usr", "no"),
            ("etc", "no"),
        ],
    );
    // What the agent wrote outside its workspace, the extra path and its CLI state never
    // reached the host (private tmpfs at most).
    assert!(w.ws.join("made.txt").exists() && cache.join("c").exists());
    assert!(w.root.join(".agent-ws/claude/s").exists());
    for p in [
        w.root.join("other/x"),
        w.root.join("x"),
        w.home.join("x"),
        w.dir.join("x"),
        PathBuf::from(&host_tmp),
        PathBuf::from("/usr/x"),
        PathBuf::from("/etc/x"),
    ] {
        assert!(!p.exists(), "{} was written", p.display());
    }
}

#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn sandbox_agent_cannot_see_or_signal_baton() {
    need_bwrap();
    let w = World::new("sb-pid");
    // A stand-in for another agent or Baton's helper, signalled by the agent below.
    let mut neighbour = Command::new("sleep").arg("300").spawn().unwrap();
    let baton = std::process::id();
    let n = neighbour.id();
    let got = w.probe(
        &w.sandbox(|_| {}),
        &format!(
            "t see_baton test -e /proc/{baton}\nt signal_baton kill -0 {baton}\n\
             t signal_neighbour kill -TERM {n}\necho pids $(ls /proc | grep -c '^[0-9]')\n\
             echo pid1 $(cat /proc/1/comm)\nkill -KILL -1 2>/dev/null; echo after_kill_all yes"
        ),
    );
    assert_probes(
        &got,
        &[
            ("see_baton", "no"),
            ("signal_baton", "no"),
            ("signal_neighbour", "no"),
            ("pid1", "bwrap"),
            ("after_kill_all", "yes"),
        ],
    );
    // bwrap's init, the shell and `ls`/`grep` at most: none of the host's processes.
    let pids: usize = got["pids"].parse().unwrap();
    assert!(pids <= 5, "{got:?}");
    assert!(
        neighbour.try_wait().unwrap().is_none(),
        "the neighbour was killed"
    );
    let _ = neighbour.kill();
    let _ = neighbour.wait();
}

#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn sandbox_agent_cannot_leave_its_cgroup() {
    need_bwrap();
    let w = World::new("sb-cg");
    let got = w.probe(
        &w.sandbox(|_| {}),
        "t sysfs ls /sys/fs/cgroup\nt procs_write sh -c 'echo $$ > /sys/fs/cgroup/cgroup.procs'\n\
         mkdir -p /tmp/cg; t mount_cgroup2 mount -t cgroup2 none /tmp/cg\n\
         t mount_sysfs mount -t sysfs none /tmp/cg\nt new_userns unshare -U true\n\
         t new_userns_root unshare -Ur true\necho own_cgroup $(grep '^0::' /proc/self/cgroup)",
    );
    assert_probes(
        &got,
        &[
            ("sysfs", "no"),
            ("procs_write", "no"),
            ("mount_cgroup2", "no"),
            ("mount_sysfs", "no"),
            ("new_userns", "no"),
            ("new_userns_root", "no"),
            // A cgroup namespace rooted at the agent's own cgroup: nothing above it is visible.
            ("own_cgroup", "0::/"),
        ],
    );
}

#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn sandbox_network_none_has_only_loopback() {
    need_bwrap();
    let w = World::new("sb-net");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "t host_port bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'\n\
         echo links $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ,)"
    );
    let none = w.probe(&w.sandbox(|c| c.no_network = true), &script);
    assert_probes(&none, &[("host_port", "no"), ("links", "lo,")]);
    let host = w.probe(&w.sandbox(|_| {}), &script);
    assert_probes(&host, &[("host_port", "yes")]);
    assert_ne!(
        host["links"], "lo,",
        "network: host shares the host's interfaces"
    );
}

/// A HOME whose login profile hides every directory holding `bwrap` (PATH=/nonexistent), as on a
/// host without bubblewrap.
fn home_without_bwrap(w: &World) -> PathBuf {
    let home = w.dir.join("nobwrap");
    fs::create_dir_all(&home).unwrap();
    fs::write(home.join(".bash_profile"), "PATH=/nonexistent\n").unwrap();
    home
}

#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn sandbox_missing_bwrap_fails_closed() {
    need_bwrap();
    let w = World::new("sb-missing");
    let home = home_without_bwrap(&w);
    // An agent turn: the command never runs, unconfined or otherwise.
    let mut spec = ProcessSpec::command("/usr/bin/touch ran-unconfined", &w.ws);
    spec.env("HOME", &home);
    w.sandbox(|_| {}).wrap(&mut spec, None);
    let (_, code, err) = run_spec(&LocalHost, &spec);
    assert_eq!(code, Some(125), "{err}");
    assert!(
        err.contains("sandbox_unavailable: bwrap is not installed"),
        "{err}"
    );
    assert!(
        baton::host::is_host_unavailable(&err),
        "an SSH host would not be used"
    );
    assert!(!w.ws.join("ran-unconfined").exists());

    // The daemon refuses to start, and `baton check` says why.
    let wf = w.dir.join("WORKFLOW.md");
    fs::write(
        &wf,
        format!(
            "---\ntracker:\n  kind: github_projects\n  endpoint: http://127.0.0.1:9/graphql\n  owner: acme\n  \
             project_number: 7\n  token: t\n  active_states: [Todo]\nworkspace:\n  root: {}\n\
             agent:\n  kind: claude_code\nsandbox:\n  kind: bubblewrap\n---\nDo it.\n",
            w.root.display()
        ),
    )
    .unwrap();
    let baton = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(args)
            .arg(&wf)
            .env("HOME", &home)
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = baton(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.lines().last(),
        Some("baton: sandbox_unavailable: bwrap is not installed"),
        "{err}"
    );
    let out = baton(&["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  sandbox_unavailable: bwrap is not installed"),
        "{text}"
    );
}

#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn sandbox_stop_leaves_nothing() {
    need_bwrap();
    let w = World::new("sb-stop");
    let sb = w.sandbox(|_| {});
    let marker = format!("baton-sb-stop-{}", std::process::id());
    // Descendants that escape a process group: a setsid'd one, a double-forked one that ignores
    // SIGTERM; the agent itself exits 3 on SIGTERM after writing a file (as a CLI would).
    // The marker comes from the environment, so only the markers' own command lines hold it.
    let agent = "setsid bash -c 'exec -a \"$SB_MARKER\"-setsid sleep 300' &\n\
         (bash -c 'trap \"\" TERM; exec -a \"$SB_MARKER\"-double sleep 300' &)\n\
         trap 'echo graceful > term.txt; exit 3' TERM\necho started\nwhile :; do sleep 0.1; done";
    let spec = |script: &str| {
        let mut spec = w.spec(&sb, script);
        spec.env("SB_MARKER", &marker);
        spec
    };
    let gone = |what: &str| {
        let left = wait_none_matching(&marker, Duration::from_secs(10));
        assert!(left.is_empty(), "{what}: left running: {left:?}");
    };
    let started = |p: &dyn Process| {
        let line = p.lines().recv_timeout(Duration::from_secs(20)).unwrap();
        assert!(
            matches!(&line, StdoutItem::Line(l) if l == "started"),
            "{line:?}"
        );
        let t = Instant::now();
        while processes_matching(&marker).len() < 2 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(processes_matching(&marker).len(), 2);
    };

    // A stopped run (the turn driver's terminate): SIGTERM reaches the agent, which exits as it
    // would unconfined; everything else in the sandbox dies with it.
    let p = LocalHost.spawn(&spec(agent)).unwrap();
    started(p.as_ref());
    let st = p.terminate(Duration::from_secs(10));
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(3),
        "the agent's own exit status"
    );
    assert_eq!(
        fs::read_to_string(w.ws.join("term.txt")).unwrap(),
        "graceful\n"
    );
    gone("after terminate");

    // An agent ignoring SIGTERM: SIGKILL after the grace.
    let stubborn = agent.replace(
        "trap 'echo graceful > term.txt; exit 3' TERM",
        "trap '' TERM",
    );
    let p = LocalHost.spawn(&spec(&stubborn)).unwrap();
    started(p.as_ref());
    let st = p.terminate(Duration::from_millis(300));
    assert_eq!(st.and_then(|s| s.signal()), Some(libc::SIGKILL));
    gone("after SIGKILL");

    // Baton itself killed (-9): `--die-with-parent` ends the sandbox. The parent here is a
    // shell standing in for Baton.
    let spec = spec(agent);
    let mut parent = Command::new("bash")
        .arg("-c")
        .arg("\"$@\" & wait")
        .arg("baton-stand-in")
        .arg(&spec.shell)
        .arg("-lc")
        .arg(&spec.script)
        .args(&spec.args)
        .current_dir(&w.ws)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while processes_matching(&marker).len() < 2 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(processes_matching(&marker).len(), 2);
    parent.kill().unwrap();
    let _ = parent.wait();
    gone("after the parent was killed");
}

/// The real CLI, confined, with `Bash` allowed, against `fake`.
fn sandboxed_claude(w: &World, fake: &FakeAnthropic) -> ClaudeRunner {
    let bin = tool::required("BATON_CLAUDE_BIN", ".ci/setup-claude.sh");
    let cfg = baton::workflow::config::ClaudeCodeConfig {
        allowed_tools: vec!["Bash".into()],
        ..claude_config(format!("'{}'", bin.display()), 120_000)
    };
    let sb = Sandbox::new(
        w.config(),
        AgentKind::ClaudeCode.cli_home(),
        &cfg.cli.command,
    );
    ClaudeRunner::new(cfg)
        .with_sandbox(Some(Arc::new(sb)))
        .with_env("HOME", &w.home)
        .with_env("ANTHROPIC_BASE_URL", &fake.base_url)
        .with_env("ANTHROPIC_API_KEY", "dummy")
        .with_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .with_env("DISABLE_TELEMETRY", "1")
        .with_env("DISABLE_AUTOUPDATER", "1")
        .with_env("CLAUDE_CODE_MAX_RETRIES", "1")
}

fn bash_step(command: String) -> Step {
    Step::ToolUse {
        text: None,
        name: "Bash".into(),
        input: json!({"command": command, "description": "step"}),
    }
}

#[test]
#[ignore = "needs bwrap and the real claude CLI (BATON_BWRAP, BATON_CLAUDE_BIN)"]
fn sandbox_real_claude_turn_completes() {
    need_bwrap();
    let w = World::new("sb-claude");
    let mut neighbour = Command::new("sleep").arg("300").spawn().unwrap();
    let (r, d) = (w.root.display(), w.dir.display());
    let tries = [
        "echo built > built.txt && git init -q && git add built.txt && git -c user.name=a \
         -c user.email=a@b commit -qm init && git log --format=%s && echo WORKSPACE-OK"
            .to_string(),
        format!("cat {r}/other/secret.txt; echo exit=$?"),
        "cat ~/.ssh/id_ed25519; echo exit=$?".into(),
        format!("cat {d}/shared/state/state.json; echo exit=$?"),
        format!("echo pwned > {r}/other/pwned.txt; echo exit=$?"),
        format!("kill -TERM {}; echo exit=$?", neighbour.id()),
    ];
    let mut steps: Vec<Step> = tries.iter().cloned().map(bash_step).collect();
    steps.push(Step::Text("Turn one is done.".into()));
    steps.push(Step::Text("Turn two is done.".into()));
    let fake = FakeAnthropic::start(steps);
    let runner = sandboxed_claude(&w, &fake);
    let ctx = SessionContext {
        issue_identifier: ISSUE.into(),
        workspace: w.ws.clone(),
        workspace_root: w.root.clone(),
        resume_session_id: None,
        resume_usage: Default::default(),
        host: LocalHost::shared(),
    };
    let mut s = runner.start_session(&ctx).unwrap();
    run(s.as_mut(), "Build it, then try to escape.").ok();
    // The tool results the model saw, one per Bash call, in order.
    let results: Vec<String> = fake
        .requests()
        .iter()
        .skip(1)
        .flat_map(|r| r.tool_results.clone())
        .collect();
    assert_eq!(results.len(), tries.len(), "{results:#?}");
    assert!(
        results[0].contains("init") && results[0].contains("WORKSPACE-OK"),
        "{results:#?}"
    );
    for (i, what) in ["sibling", "ssh key", "state file", "outside write"]
        .iter()
        .enumerate()
    {
        let r = &results[i + 1];
        assert!(
            r.contains("No such file or directory") && r.contains("exit=1"),
            "{what}: {r}"
        );
    }
    assert!(
        results[5].contains("No such process") && results[5].contains("exit=1"),
        "{}",
        results[5]
    );
    assert!(w.ws.join(".git").is_dir() && w.ws.join("built.txt").exists());
    assert!(!w.root.join("other/pwned.txt").exists());
    assert!(
        neighbour.try_wait().unwrap().is_none(),
        "the neighbour was killed"
    );
    let _ = neighbour.kill();
    let _ = neighbour.wait();

    // A restart: a new session resumes the same CLI session from the per-issue state.
    let id = s.agent_session_id().expect("session id");
    drop(s);
    let mut s = sandboxed_claude(&w, &fake)
        .start_session(&SessionContext {
            resume_session_id: Some(id.clone()),
            ..ctx
        })
        .unwrap();
    run(s.as_mut(), "Continue.").ok();
    let last = fake.requests().last().cloned().unwrap();
    assert_eq!(last.session_header.as_deref(), Some(&*id));
    assert_eq!(
        last.n_assistant,
        tries.len() + 1,
        "the resumed request carries the history"
    );
    assert!(w.root.join(".agent-ws/claude/projects").is_dir());
    assert!(
        !w.home.join(".claude/projects").exists(),
        "nothing in the shared home"
    );
}

#[test]
#[cfg(feature = "ssh")]
#[ignore = "needs bwrap and OpenSSH's sshd (BATON_BWRAP, BATON_SSHD)"]
fn sandbox_confines_an_agent_on_an_ssh_host() {
    need_bwrap();
    let lab = Lab::start("sb-ssh", 1, &[]);
    let host = lab.host("h1");
    let w = World::new("sb-ssh-w");
    let sb = w.sandbox(|_| {});
    sb.check(&host).expect("bwrap works on the host");
    let ws = host.create_workspace(&w.root, &w.ws).unwrap().path;
    assert_eq!(ws, w.ws);
    let script = format!(
        "{PROBE}\nt own cat mine.txt\nt other cat {}/other/secret.txt\nt ssh_key cat $HOME/.ssh/id_ed25519\n\
         echo pid1 $(cat /proc/1/comm)\ntouch remote-made.txt",
        w.root.display()
    );
    let (out, code, err) = run_spec(&host, &w.spec(&sb, &script));
    assert_eq!(code, Some(0), "{out}\n{err}");
    for want in ["own yes", "other no", "ssh_key no", "pid1 bwrap"] {
        assert!(out.lines().any(|l| l == want), "{want}: {out}");
    }
    assert!(w.ws.join("remote-made.txt").exists());

    // A host without bwrap is not used: the run fails with a host-level error.
    let mut spec = ProcessSpec::command("touch ran-unconfined", &w.ws);
    spec.env("HOME", home_without_bwrap(&w));
    sb.wrap(&mut spec, None);
    let (_, code, err) = run_spec(&host, &spec);
    assert_eq!(code, Some(125), "{err}");
    assert!(baton::host::is_host_unavailable(&err), "{err}");
    assert!(!w.ws.join("ran-unconfined").exists());
}

/// Figure: the sandbox's per-turn start overhead — spawn to the agent's first stdout line, the
/// same command with and without `bwrap` (median of 20 each, interleaved). Printed, not asserted.
#[test]
#[ignore = "needs bwrap (BATON_BWRAP, .ci/setup-sandbox.sh)"]
fn bench_sandbox_turn_start() {
    need_bwrap();
    let w = World::new("sb-bench");
    let sb = w.sandbox(|_| {});
    let start = |confined: bool| {
        let mut spec = ProcessSpec::command("echo started; exec sleep 30", &w.ws);
        spec.env("HOME", &w.home);
        if confined {
            sb.wrap(&mut spec, None);
        }
        let t = Instant::now();
        let p = LocalHost.spawn(&spec).unwrap();
        let first = p.lines().recv_timeout(Duration::from_secs(20)).unwrap();
        let took = t.elapsed();
        assert!(
            matches!(&first, StdoutItem::Line(l) if l == "started"),
            "{first:?}"
        );
        p.terminate(Duration::from_millis(200));
        took
    };
    let (mut plain, mut confined) = (vec![], vec![]);
    for _ in 0..20 {
        plain.push(start(false));
        confined.push(start(true));
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    let (p, c) = (median(plain), median(confined));
    println!(
        "FIGURE sandbox turn start (spawn -> first line, median of 20): unconfined_ms={p:.1} bubblewrap_ms={c:.1} overhead_ms={:.1}",
        c - p
    );
}

//! `sandbox.*` (spec §15.5): agents (not hooks) confined to their workspace with bubblewrap (mount
//! layout and threat model: docs/security.md). [`Sandbox::wrap`] rewrites an agent's spec into a
//! launcher that runs the login profile outside the sandbox, on the executing host, then execs
//! `bwrap … -- env --default-signal=TERM bash -c '<command> "$@"' …`. `bwrap` leads the process
//! group and ignores SIGTERM, so a group SIGTERM reaches the agent as without a sandbox; when
//! `bwrap` ends, its PID namespace and every process in it (`setsid`'d ones too) end too.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Host, ProcessSpec};

/// Error class of a sandbox that cannot start (`host_sandbox_unavailable` on an SSH host).
pub const SANDBOX_UNAVAILABLE: &str = "sandbox_unavailable";
/// How long [`Sandbox::check`] waits for its trial run.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);
/// Read-only system directories (`-try`: not every host has every one; `/run/systemd/resolve`
/// holds `/etc/resolv.conf` where systemd-resolved links it there).
const SYSTEM: &str = "/usr /etc /bin /sbin /lib /lib32 /lib64 /libx32 /run/systemd/resolve";

/// The launcher (`bash -lc`, outside the sandbox, in the agent's environment): `$1` is the CLI's
/// per-issue state directory (created 0700; empty for none), then `bwrap`'s arguments, in which
/// these words are resolved here, on the executing host: `--home` (a tmpfs over `$HOME`),
/// `--hide P` (a tmpfs over P when it exists), `--home-file F DEST` (`$HOME/F` read-only on DEST
/// when it exists) and `--cli PROG` (PROG as found on PATH: its install directory read-only — a
/// whole `node_modules` tree for npm packages — and, unless a bind above already shows it, a
/// link to the resolved file at PROG's path, so an npm script still finds the files next to it).
/// `m` lists the mounts so far (`+dir` a bind, `-dir` a tmpfs). `bwrap` ignores SIGTERM; the
/// agent gets the default back.
const LAUNCHER: &str = r#"s=$1; shift
command -v bwrap >/dev/null || { echo "sandbox_unavailable: bwrap is not installed" >&2; exit 125; }
[ -z "$s" ] || (umask 077 && mkdir -p -- "$s") || exit 125
a=() m=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  case $1 in
  --home) [ -d "$HOME" ] && [ "$HOME" != / ] && a+=(--tmpfs "$HOME") m+=("-$HOME"); shift;;
  --hide) [ -e "$2" ] && a+=(--tmpfs "$2") m+=("-$2"); shift 2;;
  --tmpfs) a+=("$1" "$2") m+=("-$2"); shift 2;;
  --bind|--ro-bind|--bind-try|--ro-bind-try) a+=("$1" "$2" "$3"); [ -e "$2" ] && m+=("+$3"); shift 3;;
  --home-file) a+=(--ro-bind-try "$HOME/$2" "$3"); shift 3;;
  --cli) if p=$(command -v -- "$2") && [[ $p == /* ]] && r=$(readlink -f -- "$p"); then
      d=${r%/*}; [[ $r == */node_modules/* ]] && d=${r%%/node_modules/*}/node_modules
      a+=(--ro-bind "$d" "$d") v=
      for x in "${m[@]}" "+$d"; do [[ $p == "${x:1}"/* ]] && v=${x::1}; done
      [ "$v" = + ] || a+=(--symlink "$r" "$p"); fi; shift 2;;
  *) a+=("$1"); shift;;
  esac
done
trap '' TERM
exec bwrap "${a[@]}" "$@"
"#;

/// `sandbox.*` (parsed by `host::config::sandbox`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SandboxConfig {
    /// `kind: bubblewrap` (default `none`: agents run unconfined).
    pub bubblewrap: bool,
    /// `network: none`: a network namespace with only loopback (default `host`).
    pub no_network: bool,
    pub writable: Vec<PathBuf>,
    pub readable: Vec<PathBuf>,
    /// Hidden besides the workspace root and home: `state.dir` and the WORKFLOW.md directory
    /// (filled by the config parser).
    pub hidden: Vec<PathBuf>,
}

/// Where an agent CLI keeps its state (sessions, settings, logs): the variable that moves it,
/// and credential files (relative to `$HOME`) made readable in the per-issue copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CliHome {
    /// E.g. `CLAUDE_CONFIG_DIR`.
    pub env: &'static str,
    /// The per-issue directory's name (`<root>/.agent-<key>/<name>`).
    pub name: &'static str,
    /// `(source under $HOME, file name in the per-issue directory)`, bound read-only if present.
    pub credentials: &'static [(&'static str, &'static str)],
}

/// The sandbox of the configured agent (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Sandbox {
    cfg: SandboxConfig,
    home: CliHome,
    /// The first word of the agent command, resolved on PATH by the launcher.
    program: Option<String>,
}

impl Sandbox {
    /// A sandbox from its parts (`command`: the agent's shell command).
    pub fn new(cfg: SandboxConfig, home: CliHome, command: &str) -> Sandbox {
        Sandbox {
            cfg,
            home,
            program: first_word(command),
        }
    }

    /// Rewrite the agent `spec` (cwd = its workspace `<root>/<key>`) to run confined; `writable`
    /// is one more path the CLI must write outside the workspace (e.g. a usage file's directory).
    pub fn wrap(&self, spec: &mut ProcessSpec, writable: Option<&Path>) {
        let ws = spec.cwd.clone();
        let state = cli_state_dir(&ws).join(self.home.name);
        spec.env(self.home.env, &state);
        let mut a = self.base_args();
        // The extra and the hidden paths, the deeper one winning (hidden on a tie).
        let (c, mut paths) = (&self.cfg, Vec::<(&Path, &str)>::new());
        paths.extend(c.readable.iter().map(|p| (&**p, "--ro-bind-try")));
        paths.extend(c.writable.iter().map(|p| (&**p, "--bind-try")));
        paths.extend(writable.map(|p| (p, "--bind-try")));
        paths.extend(c.hidden.iter().map(|p| (&**p, "--hide")));
        paths.extend(ws.parent().map(|p| (p, "--hide")));
        paths.sort_by_key(|(p, flag)| (p.components().count(), *flag == "--hide"));
        for (p, flag) in paths {
            let n = if flag == "--hide" { 1 } else { 2 };
            push(&mut a, &[flag], &[p, p][..n]);
        }
        if let Some(p) = &self.program {
            push(&mut a, &["--cli", p], &[]);
        }
        for p in [&ws, &state] {
            push(&mut a, &["--bind"], &[p, p]);
        }
        for (src, name) in self.home.credentials {
            push(&mut a, &["--home-file", src], &[&state.join(name)]);
        }
        push(&mut a, &["--chdir"], &[&ws]);
        rewrite(spec, state.as_os_str(), a);
    }

    /// Namespaces, the system read-only, `/proc`, `/dev`, `/tmp` and `$HOME`.
    fn base_args(&self) -> Vec<OsString> {
        let flags = "--unshare-all --unshare-user --disable-userns --die-with-parent --share-net";
        let mut a: Vec<OsString> = flags.split(' ').map(OsString::from).collect();
        if self.cfg.no_network {
            a.pop();
        }
        for d in SYSTEM.split(' ') {
            push(&mut a, &["--ro-bind-try", d, d], &[]);
        }
        let rest = "--proc /proc --dev /dev --tmpfs /tmp --home";
        a.extend(rest.split(' ').map(OsString::from));
        a
    }

    /// Start a trivial command under this sandbox on `host`: `Ok` when it ran, else why not
    /// (`bwrap` missing, namespaces refused, an option this `bwrap` lacks), prefixed with the
    /// error class (`host_sandbox_unavailable: <host>: ` on an SSH host).
    pub fn check(&self, host: &dyn Host) -> Result<(), String> {
        let mut spec = ProcessSpec::command("true", "/");
        let mut a = self.base_args();
        if let Some(p) = &self.program {
            push(&mut a, &["--cli", p], &[]);
        }
        rewrite(&mut spec, OsStr::new(""), a);
        let e = match host.spawn(&spec) {
            Err(e) => e.to_string(),
            Ok(p) => {
                let status = p.wait_exit(CHECK_TIMEOUT);
                if status.is_some_and(|s| s.success()) {
                    return Ok(());
                }
                p.terminate(Duration::from_millis(500));
                let tail = p.stderr_tail_after(Duration::from_secs(1));
                let tail = tail.strip_prefix("sandbox_unavailable: ").unwrap_or(&tail);
                match (tail.is_empty(), status) {
                    (false, _) => crate::text::single_line(tail, 300),
                    (true, Some(s)) => format!("bwrap failed: {s}"),
                    (true, None) => format!("bwrap did not finish within {CHECK_TIMEOUT:?}"),
                }
            }
        };
        Err(match host.name() {
            Some(h) => format!("host_{SANDBOX_UNAVAILABLE}: {h}: {e}"),
            None => format!("{SANDBOX_UNAVAILABLE}: {e}"),
        })
    }
}

/// `<root>/.agent-<key>`: the per-issue state of the agent CLI next to workspace `<root>/<key>`,
/// outside it (so it never lands in the repository) and removed with it.
pub fn cli_state_dir(workspace: &Path) -> PathBuf {
    let mut name = OsString::from(".agent-");
    name.push(workspace.file_name().unwrap_or_default());
    workspace.with_file_name(name)
}

fn push(a: &mut Vec<OsString>, words: &[&str], paths: &[&Path]) {
    a.extend(words.iter().map(OsString::from));
    a.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
}

/// `bash -lc LAUNCHER baton-sandbox <state> <args…> -- env --default-signal=TERM bash -c
/// <script> <$0 and the spec's arguments>`.
fn rewrite(spec: &mut ProcessSpec, state: &OsStr, args: Vec<OsString>) {
    let inner = std::mem::replace(&mut spec.script, LAUNCHER.to_string());
    let mut words: Vec<OsString> = vec!["baton-sandbox".into(), state.to_owned()];
    words.extend(args);
    words.extend(["--", "env", "--default-signal=TERM"].map(OsString::from));
    words.extend([spec.shell.clone(), "-c".into(), inner.into()]);
    words.append(&mut spec.args);
    spec.args = words;
}

/// The program of a shell command: its first word, unquoted; `None` when it is not a plain
/// word (an expansion, an assignment).
fn first_word(command: &str) -> Option<String> {
    let c = command.trim_start();
    let word = match c.chars().next()? {
        q @ ('\'' | '"') => c[1..].split(q).next()?,
        _ => c.split(char::is_whitespace).next()?,
    };
    let plain = !word.is_empty() && !word.contains(['$', '`', '=', '\\', '\'', '"']);
    plain.then(|| word.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_word_unquotes_and_refuses_expansions() {
        assert_eq!(first_word("claude").as_deref(), Some("claude"));
        assert_eq!(
            first_word("  '/a b/claude' --x").as_deref(),
            Some("/a b/claude")
        );
        assert_eq!(first_word("\"/x/copilot\"").as_deref(), Some("/x/copilot"));
        assert_eq!(first_word("$HOME/bin/claude"), None);
        assert_eq!(first_word("FOO=1 claude"), None);
        assert_eq!(first_word(""), None);
    }

    #[test]
    fn cli_state_sits_next_to_the_workspace() {
        assert_eq!(
            cli_state_dir(Path::new("/w/acme_1")),
            PathBuf::from("/w/.agent-acme_1")
        );
    }

    #[test]
    fn wrap_keeps_the_command_as_a_positional_word_and_orders_the_mounts() {
        let cfg = SandboxConfig {
            bubblewrap: true,
            readable: vec!["/srv/share".into()],
            hidden: vec!["/srv/share/state".into()],
            ..Default::default()
        };
        let home = crate::agent::config::AgentKind::ClaudeCode.cli_home();
        let mut spec = ProcessSpec::command("claude", "/w/k");
        spec.arg("$(touch x)");
        Sandbox::new(cfg, home, "claude").wrap(&mut spec, Some(Path::new("/u")));
        let args: Vec<String> = spec
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let at = |w: &[&str]| args.windows(w.len()).position(|x| x == w).unwrap();
        assert_eq!(spec.script, LAUNCHER);
        assert_eq!(args[..2], ["baton-sandbox", "/w/.agent-k/claude"]);
        let tail = [
            "--",
            "env",
            "--default-signal=TERM",
            "bash",
            "-c",
            "claude \"$@\"",
            "bash",
        ];
        assert_eq!(args[args.len() - 8..args.len() - 1], tail);
        assert_eq!(args.last().unwrap(), "$(touch x)");
        // The system first, then the extra and hidden paths by depth, the CLI, and the
        // workspace and the CLI state last.
        let order = [
            at(&["--ro-bind-try", "/usr", "/usr"]),
            at(&["--tmpfs", "/tmp", "--home"]),
            at(&["--bind-try", "/u", "/u"]),
            at(&["--hide", "/w"]),
            at(&["--ro-bind-try", "/srv/share", "/srv/share"]),
            at(&["--hide", "/srv/share/state"]),
            at(&["--cli", "claude"]),
            at(&["--bind", "/w/k", "/w/k"]),
            at(&["--bind", "/w/.agent-k/claude", "/w/.agent-k/claude"]),
            at(&["--home-file", ".claude/.credentials.json"]),
            at(&["--chdir", "/w/k"]),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{args:?}");
        assert!(args.contains(&"--share-net".to_string()));
        let env = ("CLAUDE_CONFIG_DIR".into(), "/w/.agent-k/claude".into());
        assert_eq!(spec.env, vec![env]);
    }
}

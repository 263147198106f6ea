//! A process on a remote host: the local `ssh` client (supervised like any local process, its
//! stdin a pipe held open, or lent out for Codex's JSON-RPC) running the remote wrapper
//! [`WRAPPER`]. The handle's pid is the remote process group id the wrapper reported; signals go
//! to that group over a second `ssh`.

use std::ffi::{OsStr, OsString};
use std::io;
use std::process::{ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver};

use super::{is_env_name, session_refused, Session, SshHost};
use super::{HOST_UNAVAILABLE, SIGNAL_TIMEOUT, SSH_CONNECTION_FAILED};
use crate::host::supervisor::{self, LocalProcess};
use crate::host::{Process, ProcessSpec, StdoutItem};

/// The remote wrapper (`sh -c WRAPPER baton-run <stdin|-> <shell> -lc <script> <args…>`):
/// 1. keeps the connection's stdin on fd 3 and `setsid`s the program (a new group) with stdin
///    `/dev/null` (in `stdin` mode the connection's, for Codex's JSON-RPC, which exits at its
///    EOF); its first line is `BATON_PGID <pgid> <leader start time>` (no time without `/proc`);
/// 2. without `stdin`, a watcher (its own session) blocks reading the connection's stdin: EOF
///    means Baton, its client, the master or `sshd` is gone, and it stops the group (TERM,
///    grace, KILL);
/// 3. at the program's exit, kills what is left of its group and the watcher, and exits with the
///    program's status.
pub(crate) const WRAPPER: &str = r#"exec 3<&0 </dev/null
[ "$1" = stdin ] && i=3 || i=0
shift
setsid sh -c 'echo "BATON_PGID $$ $(cut -d" " -f22 /proc/$$/stat 2>/dev/null)"; exec "$@"' baton-agent "$@" <&"$i" &
c=$! w=
[ "$i" = 3 ] || { setsid sh -c 'cat >/dev/null; kill -TERM -"$1" 2>/dev/null || exit 0; sleep 3; kill -KILL -"$1" 2>/dev/null' baton-watch "$c" <&3 >/dev/null 2>&1 & w=$!; }
exec 3<&-
wait "$c"; s=$?
kill -KILL -"$c" 2>/dev/null
[ -z "$w" ] || kill -KILL -"$w" 2>/dev/null || kill -KILL "$w" 2>/dev/null
exit "$s"
"#;

/// The group id and leader start time of the wrapper's `BATON_PGID <pgid> <start time>` first
/// line (at most 64 bytes; the time may be empty).
pub(crate) fn remote_pgid(line: &[u8]) -> Option<(u32, Option<u64>)> {
    let line = line[..line.len().min(supervisor::FIRST_LINE)]
        .split(|&b| b == b'\n')
        .next()?;
    let line = std::str::from_utf8(line)
        .ok()?
        .strip_prefix("BATON_PGID ")?;
    let mut words = line.split(' ');
    let pgid = words.next()?.trim_end().parse::<u32>().ok();
    let time = words.next().and_then(|t| t.trim().parse().ok());
    Some((pgid.filter(|n| *n > 1)?, time))
}

/// A remote process group (see the module docs).
#[derive(Debug)]
pub(crate) struct SshProcess {
    client: LocalProcess,
    pgid: u32,
    start_time: Option<u64>,
    host: SshHost,
    /// This process's place on one of the host's connections.
    _session: Session,
}

/// The remote command line for `spec`: `cd <cwd> && exec env [-u K]… [K=V]… sh -c WRAPPER
/// baton-run <stdin|-> <shell> -lc <script> <args…>`, every word quoted.
pub(crate) fn remote_command(spec: &ProcessSpec) -> io::Result<OsString> {
    let mut words: Vec<OsString> = vec!["env".into()];
    let removed = spec.env_remove.iter().map(|k| (k, None));
    for (k, v) in removed.chain(spec.env.iter().map(|(k, v)| (k, Some(v)))) {
        if !is_env_name(k) {
            let k = k.to_string_lossy();
            return Err(io::Error::other(format!(
                "invalid environment variable name {k:?}"
            )));
        }
        match v {
            None => words.extend(["-u".into(), k.clone()]),
            Some(v) => words.push([&**k, v].join(OsStr::new("="))),
        }
    }
    let stdin = if spec.stdin_pipe { "stdin" } else { "-" };
    words.extend(["sh", "-c", WRAPPER, "baton-run", stdin].map(OsString::from));
    words.extend([spec.shell.clone(), "-lc".into(), spec.script.clone().into()]);
    words.extend(spec.args.iter().cloned());
    let mut line = OsString::from("cd ");
    line.push(super::shell_join([spec.cwd.as_os_str()]));
    line.push(" && exec ");
    line.push(super::shell_join(&words));
    Ok(line)
}

/// Start `spec` on `host`; returns once the remote group exists (its pgid was reported), or an
/// error (`host_unavailable: …` when the connection failed or no pgid came within the command
/// timeout). A session the server refused is started once more on another connection.
pub(crate) fn spawn(host: &SshHost, spec: &ProcessSpec) -> io::Result<SshProcess> {
    let line = remote_command(spec)?;
    let mut refused = false;
    loop {
        let (mut cmd, session) = host.command(&line);
        cmd.stdin(Stdio::piped());
        let (first_tx, first_rx) = bounded(1);
        let client = supervisor::spawn_command(cmd, spec, None, Some(first_tx))?;
        let first = first_rx.recv_timeout(host.settings.timeout());
        if let Some((pgid, start_time)) = first.ok().as_deref().and_then(remote_pgid) {
            if session_refused(&client.stderr_tail()) {
                host.refused(&session); // the client fell back to a connection of its own
            }
            return Ok(SshProcess {
                client,
                pgid,
                start_time,
                host: host.clone(),
                _session: session,
            });
        }
        // No pgid when the client exits first (or its first line is not the wrapper's).
        client.terminate(Duration::from_millis(200));
        let tail = client.stderr_tail_after(Duration::from_millis(500));
        let code = client.exit_status().and_then(|s| s.code());
        if session_refused(&tail) && !refused {
            host.refused(&session);
            refused = true;
            continue;
        }
        let d = &host.destination;
        return Err(io::Error::other(match code {
            Some(c) if c != SSH_CONNECTION_FAILED => format!("remote start on {d} failed: {tail}"),
            _ => format!("{HOST_UNAVAILABLE}: ssh {d}: {tail}"),
        }));
    }
}

impl SshProcess {
    /// `kill -<signal> -<pgid>` on the host within [`SIGNAL_TIMEOUT`]: `Some(sent)`, `None`
    /// when the host did not answer.
    fn remote_signal(&self, signal: &str) -> Option<bool> {
        let pgid = format!("-{}", self.pgid);
        let words = ["kill", signal, &pgid].map(OsStr::new);
        let out = self.host.run(&words, SIGNAL_TIMEOUT);
        out.ok().map(|o| o.code == Some(0))
    }
}

impl Process for SshProcess {
    fn pid(&self) -> u32 {
        self.pgid
    }

    fn lines(&self) -> &Receiver<StdoutItem> {
        self.client.lines()
    }

    fn exited(&self) -> &Receiver<()> {
        self.client.exited()
    }

    fn exit_status(&self) -> Option<ExitStatus> {
        self.client.exit_status()
    }

    fn has_exited(&self) -> bool {
        self.client.has_exited()
    }

    /// Signal the remote group while the session lasts (the wrapper is still waiting for it, so
    /// the pgid is still this group's).
    fn signal_group(&self, signal: i32) -> bool {
        !self.client.has_exited() && self.remote_signal(&format!("-{signal}")) == Some(true)
    }

    fn stderr_bytes(&self) -> Vec<u8> {
        self.client.stderr_bytes()
    }

    fn stderr_done(&self) -> &Receiver<()> {
        self.client.stderr_done()
    }

    fn start_time(&self) -> Option<u64> {
        self.start_time
    }

    /// The `ssh` client's stdin, which the wrapper gave the program (`stdin` mode).
    fn take_stdin(&self) -> Option<Box<dyn io::Write + Send>> {
        self.client.take_stdin()
    }

    /// TERM, grace, KILL on the remote group; then verify with `kill -0` that the group is gone
    /// (a last KILL when it is not), and stop the local client. A host that does not answer a
    /// signal gets no further remote steps.
    fn terminate(&self, grace: Duration) -> Option<ExitStatus> {
        let mut answers = true;
        if !self.client.has_exited() {
            answers = self.remote_signal("-TERM").is_some();
            if answers && self.client.wait_exit(grace).is_none() {
                answers = self.remote_signal("-KILL").is_some();
                self.client.wait_exit(Duration::from_secs(2));
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while answers && Instant::now() < deadline && self.remote_signal("-0") == Some(true) {
            answers = self.remote_signal("-KILL").is_some();
            thread::sleep(Duration::from_millis(100));
        }
        // Closing the client (and its stdin) also makes the wrapper's watcher act if the
        // connection was unusable for the steps above.
        self.client.terminate(Duration::from_millis(500))
    }
}

impl Drop for SshProcess {
    fn drop(&mut self) {
        if !self.client.has_exited() {
            self.terminate(Duration::from_millis(500));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_command_quotes_every_word() {
        let mut spec = ProcessSpec::command("claude", "/ws/it's");
        spec.arg("-p").arg("$(touch /tmp/x)\n'quoted'");
        spec.env("BATON_ISSUE_TITLE", "`id` $HOME");
        let line = remote_command(&spec).unwrap();
        let s = line.to_string_lossy();
        assert!(s.starts_with("cd '/ws/it'\\''s' && exec 'env' "), "{s}");
        assert!(s.contains("'BATON_ISSUE_TITLE=`id` $HOME'"), "{s}");
        assert!(s.contains("'$(touch /tmp/x)\n'\\''quoted'\\'''"), "{s}");
    }

    #[test]
    fn bad_env_names_are_refused() {
        let mut spec = ProcessSpec::hook("true", "/ws");
        spec.env("A;B", "x");
        assert!(remote_command(&spec).is_err());
    }

    /// The wrapper run locally: the first line is the pgid of a new group, the program's output
    /// follows, the exit status is the program's.
    #[test]
    fn wrapper_reports_pgid_then_runs() {
        // stdin stays open (as Baton's ssh client keeps it) until the output is read.
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                WRAPPER,
                "baton-run",
                "-",
                "sh",
                "-c",
                "echo hi; exit 3",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut text).unwrap();
        let status = child.wait().unwrap();
        drop(stdin);
        let mut lines = text.lines();
        let first = lines.next().unwrap();
        assert!(first.starts_with("BATON_PGID "), "{text}");
        let line = format!("{first}\n");
        let Some((pgid, start)) = remote_pgid(line.as_bytes()) else {
            panic!("{text}");
        };
        assert!(pgid > 1 && start.is_some_and(|t| t > 0), "{first}");
        assert_eq!(lines.next(), Some("hi"));
        assert_eq!(status.code(), Some(3));
    }

    #[test]
    fn the_remote_pgid_line_is_read_strictly() {
        let pgid = remote_pgid;
        assert_eq!(pgid(b"BATON_PGID 4242 917\nrest"), Some((4242, Some(917))));
        assert_eq!(pgid(b"BATON_PGID 4242 \n"), Some((4242, None)));
        let long = [b'1'; 100];
        for bad in [
            &b"BATON_PGID 1\n"[..],
            b"hello\n",
            b"BATON_PGID x\n",
            &long,
            b"",
        ] {
            assert_eq!(pgid(bad), None);
        }
    }

    /// In `stdin` mode the program reads the connection's stdin (no watcher takes it), and its
    /// EOF ends the program and so the wrapper.
    #[test]
    fn wrapper_gives_the_program_the_connection_in_stdin_mode() {
        use std::io::Write;
        let script = "while read -r l; do echo \"got $l\"; done; echo eof";
        let mut child = std::process::Command::new("sh")
            .args(["-c", WRAPPER, "baton-run", "stdin", "sh", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"{\"id\":1}\nsecond\n").unwrap();
        drop(stdin);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut text).unwrap();
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(lines, ["got {\"id\":1}", "got second", "eof"], "{text}");
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }
}

//! Short helper commands Baton runs on this machine for itself (`gh auth token`, and every `ssh`
//! client call of the SSH host that is not an agent or hook: workspace scripts, probes, signals,
//! master start and stop): no shell, a deadline, bounded output, and on timeout the whole process
//! group is killed. Here because nothing outside `host/` signals process groups.

use std::io;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::hook::{supervise, HookError, HookOutput};
use super::ProcessSpec;

/// Longest deadline (a day): `Instant` arithmetic must not overflow on a huge configured value.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

fn timed_out(timeout: Duration) -> io::Error {
    let ms = timeout.min(MAX_TIMEOUT).as_millis();
    io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {ms} ms"))
}

/// Run `cmd` (stdin as the caller set it) supervised like a hook: the head of stdout and the
/// tail of stderr (64 KiB each, lossy UTF-8), as the leader of a new process group, until it
/// exits or `timeout` passes. One still running then is killed with its group: `Err` of kind
/// `TimedOut`. Output still held open by an escaped descendant is waited for 2 s at most.
pub(crate) fn output_within(cmd: Command, timeout: Duration) -> io::Result<HookOutput> {
    let started = Instant::now();
    let spec = ProcessSpec {
        label: "command",
        ..ProcessSpec::hook("", "")
    };
    let p = super::supervisor::spawn_command(cmd, &spec, None, None)?;
    match supervise(&p, started, timeout.min(MAX_TIMEOUT)) {
        Ok(out) | Err(HookError::Failed(out)) => Ok(out),
        Err(HookError::Timeout { .. }) => Err(timed_out(timeout)),
        Err(e @ HookError::Spawn(_)) => Err(io::Error::other(e.to_string())),
    }
}

/// [`output_within`] with stdout and stderr on `/dev/null`, for a command that leaves a daemon
/// behind (`ssh -f` starting a master), which must not inherit pipes Baton reads.
#[cfg(feature = "ssh")]
pub(crate) fn status_within(
    mut cmd: Command,
    timeout: Duration,
) -> io::Result<std::process::ExitStatus> {
    use std::os::unix::process::CommandExt;
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + timeout.min(MAX_TIMEOUT);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            // SAFETY: plain syscall on the group of a child that `try_wait` just found running,
            // so it is not reaped and its pid still names this group.
            unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
            let _ = child.wait();
            return Err(timed_out(timeout));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Run `program args…` (no shell, stdin closed) and return its stdout (at most 64 KiB) when it
/// exits successfully within `timeout`; a hung program is killed with its group and yields `None`.
pub(crate) fn command_output(program: &str, args: &[&str], timeout: Duration) -> Option<Vec<u8>> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    match output_within(cmd, timeout) {
        Ok(out) => (out.code == Some(0)).then(|| out.stdout.into_bytes()),
        Err(e) => {
            if e.kind() == io::ErrorKind::TimedOut {
                log::warn!("`{program}` {e}; killed");
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hung_command_is_killed_at_the_timeout() {
        let started = Instant::now();
        let out = command_output(
            "sh",
            &["-c", "sleep 600 & sleep 600"],
            Duration::from_millis(300),
        );
        assert_eq!(out, None);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    #[cfg(feature = "ssh")]
    fn a_hung_daemon_starter_is_killed_at_the_timeout() {
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        let e = status_within(sleep, Duration::from_millis(100));
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn output_of_a_quick_command_is_returned() {
        let out = command_output("sh", &["-c", "echo tok"], Duration::from_secs(5));
        assert_eq!(out.as_deref(), Some(&b"tok\n"[..]));
        assert_eq!(
            command_output("sh", &["-c", "exit 1"], Duration::from_secs(5)),
            None
        );
    }

    /// Both streams are kept (bounded) and the wait ends soon after the exit, although a
    /// background child still holds the pipes.
    #[test]
    fn output_ends_with_the_exit_and_is_bounded() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "head -c 100000 /dev/zero; echo err >&2; sleep 5 & exit 3",
        ]);
        let started = Instant::now();
        let out = output_within(cmd, Duration::from_secs(20)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(4));
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout.len(), 64 * 1024);
        assert_eq!(out.stderr, "err\n");
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        let e = output_within(sleep, Duration::from_millis(100));
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::TimedOut);
    }
}
